//! A consumer's own part of the configuration, handed to it raw.
//!
//! registry-core routes keys (flat Seata keys, YAML trees, environment variables) but
//! does not know what `registry.etcd3.ttl`, `transport.heartbeatInterval` or
//! `client.loadBalance.type` mean: every `registry.<type>.*` key is kept in a
//! [`Section`] named after `<type>`, every key of another part of the client
//! (`transport.*`, `client.*`, an application's own root) in the configuration's parts
//! ([`Config::part`](super::Config::part)), and the crate that owns the keys reads
//! them with a [`SectionReader`] into its own typed settings, with its own defaults and
//! validation. Adding a backend or a key therefore touches no code here.
//!
//! Keys are matched the way every structural key is (ignoring case, `-` and `_`:
//! `serverAddr`, `server-addr` and `server_addr` are one key); messages show the key as
//! it was written and where it came from. A key the backend does not read is reported
//! by [`SectionReader::finish`], by name only: its value may be a secret.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::values::parse_seata_duration;
use super::{norm, parse_duration_with_unit};
use crate::ConfigError;

/// The raw keys of one part of the configuration: `registry.<type>.*` of one registry
/// type, `config.<type>.*` of one centre, or a part another crate owns
/// (`transport.*`).
///
/// Two sections are equal when they hold the same keys (in any spelling) with the
/// same values, wherever they came from.
#[derive(Clone, Default)]
pub struct Section {
    /// The section's name as first written (`etcd3`, `transport`).
    name: String,
    /// What a key set in code is shown under (`registry.etcd3`, `transport`).
    prefix: String,
    entries: BTreeMap<String, SectionEntry>,
}

#[derive(Clone)]
struct SectionEntry {
    /// The whole key as written (`registry.etcd3.serverAddr`), for messages.
    shown: String,
    value: String,
    /// Where it came from (a file name, `environment`, `override`).
    origin: String,
}

impl PartialEq for Section {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|((k1, e1), (k2, e2))| k1 == k2 && e1.value == e2.value)
    }
}

/// Keys only: values can be passwords.
impl std::fmt::Debug for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Section")
            .field("name", &self.name)
            .field(
                "keys",
                &self.entries.values().map(|e| &e.shown).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Section {
    /// No keys, for registry type `name`.
    pub fn new(name: &str) -> Self {
        Section::with_prefix(name, &format!("registry.{name}"))
    }

    /// No keys; a key set in code is shown as `<prefix>.<key>`.
    pub(crate) fn with_prefix(name: &str, prefix: &str) -> Self {
        Section {
            name: name.to_string(),
            prefix: prefix.to_string(),
            entries: BTreeMap::new(),
        }
    }

    /// The section's name (a registry type, a part's root), as first written.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets `key` (relative to the section: `serverAddr`, or dotted for nested keys)
    /// to `value`, as an explicit override: what the CLI's `--server` does.
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        let shown = format!("{}.{key}", self.prefix);
        self.insert(&shown, key, value.into(), "override");
    }

    /// The keys under `prefix` (dotted, any spelling: `loadBalance`), relative to it,
    /// with their origins: the part of this section another reader owns.
    pub fn sub(&self, prefix: &str) -> Section {
        let p = norm_key(prefix);
        let mut out = Section::with_prefix(prefix, &format!("{}.{prefix}", self.prefix));
        if p.is_empty() {
            out.entries = self.entries.clone();
            return out;
        }
        let start = format!("{p}.");
        for (k, e) in self.entries.range(start.clone()..) {
            let Some(rest) = k.strip_prefix(&start) else {
                break;
            };
            out.entries.insert(rest.to_string(), e.clone());
        }
        out
    }

    pub(crate) fn insert(&mut self, shown: &str, key: &str, value: String, origin: &str) {
        let k = key.split('.').map(norm).collect::<Vec<_>>().join(".");
        self.entries.insert(
            k,
            SectionEntry {
                shown: shown.to_string(),
                value: value.trim().to_string(),
                origin: origin.to_string(),
            },
        );
    }

    /// Adds every key of `other`, replacing keys both have.
    pub fn merge(&mut self, other: &Section) {
        for (k, e) in &other.entries {
            self.entries.insert(k.clone(), e.clone());
        }
    }

    /// The value of `key` (any spelling), trimmed.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(&norm_key(key)).map(|e| e.value.as_str())
    }

    /// True when no key was given.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every key, normalised (lower case, `-` and `_` removed, segments joined by `.`),
    /// with its value: for a reader that matches keys itself (an application's part).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(k, e)| (k.as_str(), e.value.as_str()))
    }

    /// The keys as written, sorted by their normalised form.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.values().map(|e| e.shown.as_str())
    }

    /// A reader that remembers which keys the backend used.
    pub fn reader(&self) -> SectionReader<'_> {
        SectionReader {
            section: self,
            used: RefCell::new(BTreeSet::new()),
            asked: RefCell::new(BTreeSet::new()),
        }
    }
}

/// The sections named by `names` in `sections` (keyed by normalised name), merged into
/// one; later names win where both set a key. Shared by `registry.<type>.*` and
/// `config.<type>.*`.
pub(super) fn merged(sections: &BTreeMap<String, Section>, names: &[&str]) -> Section {
    let mut out = Section::new(names.last().copied().unwrap_or_default());
    for n in names {
        if let Some(s) = sections.get(&norm(n)) {
            out.merge(s);
        }
    }
    out
}

/// The section `name` in `sections`, created when absent.
pub(super) fn named_mut<'a>(
    sections: &'a mut BTreeMap<String, Section>,
    name: &str,
) -> &'a mut Section {
    sections
        .entry(norm(name))
        .or_insert_with(|| Section::new(name))
}

fn norm_key(key: &str) -> String {
    key.split('.').map(norm).collect::<Vec<_>>().join(".")
}

/// Typed reads of a [`Section`], with the section's defaults and errors that name the
/// key, its origin and what was expected.
pub struct SectionReader<'a> {
    section: &'a Section,
    used: RefCell<BTreeSet<String>>,
    /// Every key the backend asked for, present or not, as it spelled it: the
    /// candidates of "did you mean" for a key it did not read.
    asked: RefCell<BTreeSet<String>>,
}

impl SectionReader<'_> {
    fn entry(&self, key: &str) -> Option<&SectionEntry> {
        self.asked.borrow_mut().insert(key.to_string());
        let k = norm_key(key);
        let e = self.section.entries.get(&k)?;
        self.used.borrow_mut().insert(k);
        Some(e)
    }

    fn invalid(e: &SectionEntry, reason: &str) -> ConfigError {
        ConfigError::Invalid(format!(
            "{}: key `{}` has invalid value `{}`: {reason}",
            e.origin, e.shown, e.value
        ))
    }

    /// Text that must not be empty when given; `default` when absent.
    pub fn text(&self, key: &str, default: &str) -> Result<String, ConfigError> {
        match self.entry(key) {
            Some(e) if e.value.is_empty() => Err(Self::invalid(e, "must not be empty")),
            Some(e) => Ok(e.value.clone()),
            None => Ok(default.to_string()),
        }
    }

    /// Text that may be empty (`namespace=`); `default` when absent.
    pub fn text_or_empty(&self, key: &str, default: &str) -> String {
        self.entry(key)
            .map_or_else(|| default.to_string(), |e| e.value.clone())
    }

    /// Optional text: absent or empty is `None`. Also for secrets: the value never
    /// appears in a message.
    pub fn optional(&self, key: &str) -> Option<String> {
        self.entry(key)
            .filter(|e| !e.value.is_empty())
            .map(|e| e.value.clone())
    }

    /// A secret (a password, a token): absent or empty is `None`. The value never
    /// appears in a message, and the [`Secret`](crate::Secret) never in a `Debug`.
    pub fn secret(&self, key: &str) -> Option<crate::Secret> {
        self.optional(key).map(crate::Secret::from)
    }

    /// A duration of a key that Seata defines (`sessionTimeout`, `timeout`...): a bare
    /// number counts in Seata's unit for that key, `bare_unit` (milliseconds for every
    /// duration key Seata has: `Duration::from_millis(1)`), so a Seata file means what it
    /// means to Seata; text with a unit (`10s`, `1m 30s`) is accepted too. `default`
    /// when absent. At most [`MAX_DURATION`](super::MAX_DURATION).
    pub fn seata_duration(
        &self,
        key: &str,
        bare_unit: Duration,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match self.entry(key) {
            Some(e) => parse_seata_duration(&e.value, bare_unit).map_err(|r| Self::invalid(e, &r)),
            None => Ok(default),
        }
    }

    /// A duration of a key only meshline has (`ttl`, `refreshPeriod`...): the value
    /// must carry its unit (`10s`, `500ms`); a bare number is refused with a message
    /// asking for one, since it would be ambiguous (Seata's keys count milliseconds,
    /// TTLs are usually thought of in seconds). `default` when absent.
    pub fn duration(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.entry(key) {
            Some(e) => parse_duration_with_unit(&e.value).map_err(|r| Self::invalid(e, &r)),
            None => Ok(default),
        }
    }

    /// A number of type `T` (in range for it); `default` when absent.
    pub fn number<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, ConfigError> {
        Ok(self.optional_number(key)?.unwrap_or(default))
    }

    /// An optional number of type `T`.
    pub fn optional_number<T: std::str::FromStr>(
        &self,
        key: &str,
    ) -> Result<Option<T>, ConfigError> {
        match self.entry(key) {
            Some(e) => e.value.parse().map(Some).map_err(|_| {
                Self::invalid(
                    e,
                    &format!(
                        "expected a whole number in range for {}",
                        std::any::type_name::<T>()
                    ),
                )
            }),
            None => Ok(None),
        }
    }

    /// A value parsed by `parse` (an error names the key, its origin and the reason);
    /// `None` when absent. For value syntaxes the reader owns.
    pub fn parse<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        match self.entry(key) {
            Some(e) => parse(&e.value).map(Some).map_err(|r| Self::invalid(e, &r)),
            None => Ok(None),
        }
    }

    /// `true`/`false` (also `yes`/`no`, `on`/`off`, `1`/`0`); `default` when absent.
    pub fn boolean(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        Ok(self
            .parse(key, super::values::parse_bool)?
            .unwrap_or(default))
    }

    /// A byte size (`8MiB`, `65536`; see [`parse_bytes`](super::parse_bytes)).
    pub fn bytes(&self, key: &str) -> Result<Option<usize>, ConfigError> {
        self.parse(key, super::parse_bytes)
    }

    /// Keys Seata defines for this registry that the backend does not use: accepted
    /// without a warning.
    pub fn accept(&self, keys: &[&str]) {
        for k in keys {
            self.entry(k);
        }
    }

    /// Every key under each of `prefixes` (dotted, any spelling), and each prefix
    /// itself: accepted without a warning (Seata's keys for its other parts). The
    /// empty prefix accepts every key.
    pub fn accept_prefixes(&self, prefixes: &[&str]) {
        for p in prefixes {
            let p = norm_key(p);
            let start = format!("{p}.");
            let keys: Vec<String> = self
                .section
                .entries
                .keys()
                .filter(|k| p.is_empty() || **k == p || k.starts_with(&start))
                .cloned()
                .collect();
            self.used.borrow_mut().extend(keys);
        }
    }

    /// One message per key the backend did not read (by name and origin, never the
    /// value), each also logged as a warning.
    pub fn finish(self) -> Vec<String> {
        let used = self.used.into_inner();
        let asked = self.asked.into_inner();
        let mut out = Vec::new();
        // Seata's per-backend heartbeat knobs (`registry.<type>.heartbeat-period`...)
        // are its own.
        let registry = self.section.prefix.starts_with("registry.");
        for (k, e) in &self.section.entries {
            let quiet = registry && k.starts_with("heartbeat");
            if !used.contains(k) && !quiet {
                let hint = super::suggest::nearest(k, asked.iter().map(String::as_str))
                    .map(|a| format!(" (did you mean `{a}`?)"))
                    .unwrap_or_default();
                let msg = format!(
                    "{}: unknown config key `{}` ignored{hint}",
                    e.origin, e.shown
                );
                tracing::warn!("{msg}");
                out.push(msg);
            }
        }
        out
    }
}
