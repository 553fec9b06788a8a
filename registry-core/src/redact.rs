//! Keeping secrets and hostile input out of log lines and messages.
//!
//! A registry is outside our control: a broken or hostile one can send megabytes of
//! garbage per entry, and an operator's configuration holds passwords, tokens and URLs
//! with `user:pass@`. Everything a backend logs or returns as an error passes through
//! one of these helpers, so no log line grows with what the registry sends and no
//! message carries a credential.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `EnvFilter` directives every subscriber we ship adds (the CLI, the examples), and
/// library users should add too.
///
/// `nacos_sdk::api::plugin::auth=off`: nacos-sdk 0.8 logs its login as
/// `Http login with username=...,password=...` at debug level, the login response
/// (with the access token) at debug level, and a failed login as the reqwest error's
/// `Debug`, which carries the login URL with `password=` in its query, at **error**
/// level. Only turning the target off keeps the password out; a failed login still
/// surfaces as meshline's own error (the Nacos client fails to connect).
pub const LOG_DIRECTIVES: &[&str] = &["nacos_sdk::api::plugin::auth=off"];

/// How much of a registry-supplied text (a malformed key or value, an error body) a
/// log line or message shows.
pub const SHOWN_BYTES: usize = 256;

/// At most `max` bytes of `text` (cut at a character boundary), followed by
/// `… (N bytes)` when it was cut, so the reader knows there was more.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// [`truncate`] to [`SHOWN_BYTES`] of bytes that may not be UTF-8 (lossy).
pub fn shown(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(SHOWN_BYTES + 4)];
    let text = String::from_utf8_lossy(cut);
    if bytes.len() <= SHOWN_BYTES {
        return text.into_owned();
    }
    let mut end = SHOWN_BYTES.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], bytes.len())
}

/// Each comma-separated URL of `urls` with its password replaced:
/// `http://user:pass@host/x` -> `http://user:<redacted>@host/x`; a URL without user
/// info is unchanged. For every message and log line that shows a configured address.
pub fn redact_userinfo(urls: &str) -> String {
    urls.split(',')
        .map(|u| {
            let (scheme, rest) = match u.split_once("://") {
                Some((s, r)) => (Some(s), r),
                None => (None, u),
            };
            let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..host_end].rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split(':').next().unwrap_or_default();
                    let scheme = scheme.map(|s| format!("{s}://")).unwrap_or_default();
                    if userinfo.contains(':') {
                        format!("{scheme}{user}:<redacted>@{host}{}", &rest[host_end..])
                    } else {
                        // `token@host`: the only part may be the secret.
                        format!("{scheme}<redacted>@{host}{}", &rest[host_end..])
                    }
                }
                None => u.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Rate-limited warnings about malformed registry entries: per registry and cluster,
/// the first entry of each period is logged (truncated to [`SHOWN_BYTES`]), the others
/// are counted and summed up in the next line. A registry full of garbage therefore
/// costs a few short lines per period, not one line per entry per scan.
pub struct MalformedLog {
    period: Duration,
    /// (registry, cluster) -> when the last line was written, entries skipped since.
    seen: Mutex<HashMap<(String, String), Slot>>,
}

/// When a cluster's last line was written, and how many entries were skipped since.
type Slot = (Option<Instant>, u64);

/// The period of [`malformed_entry`]: one line per cluster per 10 s.
pub const MALFORMED_PERIOD: Duration = Duration::from_secs(10);

impl MalformedLog {
    /// A log writing at most one line per cluster per `period`.
    pub fn new(period: Duration) -> Self {
        MalformedLog {
            period,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Reports a malformed `key`/`value` of `cluster` (skipped because of `reason`).
    /// Returns true when a line was written.
    pub fn report(
        &self,
        registry: &str,
        cluster: &str,
        key: &[u8],
        value: &[u8],
        reason: &str,
    ) -> bool {
        let now = Instant::now();
        let skipped = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() > 4096 {
                // Names come from watches; forget the quiet ones rather than grow.
                seen.retain(|_, (at, _)| at.is_some_and(|at| now.duration_since(at) < self.period));
            }
            let slot = seen
                .entry((registry.to_string(), cluster.to_string()))
                .or_insert((None, 0));
            if slot
                .0
                .is_some_and(|at| now.duration_since(at) < self.period)
            {
                slot.1 += 1;
                return false;
            }
            let skipped = slot.1;
            *slot = (Some(now), 0);
            skipped
        };
        tracing::warn!(
            registry,
            cluster,
            key = %shown(key),
            value = %shown(value),
            skipped_since_last = skipped,
            "skipping malformed registry entry: {}",
            truncate(reason, SHOWN_BYTES)
        );
        true
    }
}

/// The process-wide [`MalformedLog`] every backend reports into.
pub fn malformed_entry(registry: &str, cluster: &str, key: &[u8], value: &[u8], reason: &str) {
    static LOG: std::sync::OnceLock<MalformedLog> = std::sync::OnceLock::new();
    LOG.get_or_init(|| MalformedLog::new(MALFORMED_PERIOD))
        .report(registry, cluster, key, value, reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_char_boundaries_and_says_how_long() {
        assert_eq!(truncate("abc", 5), "abc");
        let t = truncate("ééé", 3);
        assert_eq!(t, "é… (6 bytes)");
        let big = vec![b'x'; 1 << 20];
        assert!(shown(&big).len() < SHOWN_BYTES + 32);
        assert_eq!(shown(b"\xff"), "\u{fffd}");
    }

    #[test]
    fn userinfo_is_redacted() {
        assert_eq!(
            redact_userinfo("http://u:p4ss@h:1/eureka,http://h2/eureka"),
            "http://u:<redacted>@h:1/eureka,http://h2/eureka"
        );
        assert_eq!(redact_userinfo("tok@h:1"), "<redacted>@h:1");
        assert_eq!(redact_userinfo("h:1/a@b"), "h:1/a@b");
    }

    #[test]
    fn one_line_per_cluster_per_period() {
        let log = MalformedLog::new(Duration::from_secs(3600));
        assert!(log.report("r", "c", b"k", b"v", "bad"));
        for _ in 0..100 {
            assert!(!log.report("r", "c", b"k", b"v", "bad"));
        }
        assert!(log.report("r", "other", b"k", b"v", "bad"));
        let log = MalformedLog::new(Duration::ZERO);
        assert!(log.report("r", "c", b"k", b"v", "bad"));
        assert!(log.report("r", "c", b"k", b"v", "bad"));
    }
}
