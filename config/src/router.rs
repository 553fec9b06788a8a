//! The key router: every flat `(path, value)` entry goes to the field it sets, to a
//! registry type's or centre's [`Section`], to the parts other crates own
//! ([`Config::part`]), or is reported unknown. Seata keys for other parts of Seata are
//! accepted silently.

use super::keys::{Entry, norm};
use super::values::{nonempty, parse_bool, split_list};
use super::{Config, SEATA_CLIENT_PARTS, SEATA_PART_ROOTS, Section};
use crate::ConfigError;

/// What the router knows across the sources of one load.
#[derive(Default)]
pub(super) struct RouteState {
    /// Roots an application declared ([`super::ConfigLoader::part_root`]), normalised:
    /// kept in the parts without a warning.
    pub(super) declared_roots: Vec<String>,
}

pub(super) fn apply_all(
    cfg: &mut Config,
    state: &mut RouteState,
    entries: Vec<Entry>,
    origin: &str,
) -> Result<(), ConfigError> {
    cfg.provenance.record_source(origin, entries.len());
    for (path, value) in entries {
        let shown = path.join(".");
        match apply(cfg, state, &path, &value, origin) {
            Ok(Applied::Used) => cfg.provenance.record_key(&path, origin),
            Ok(Applied::Ignored) => {}
            // By name only: a misspelt `pasword=...` must not log the password.
            Ok(Applied::Unknown) => {
                let bare = match path.as_slice() {
                    [root, rest @ ..] if !rest.is_empty() && norm(root) == "seata" => {
                        rest.join(".")
                    }
                    _ => shown.clone(),
                };
                let hint = super::suggest::suggest(&bare)
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default();
                cfg.warnings.push(format!(
                    "{origin}: unknown config key `{shown}` ignored{hint}"
                ))
            }
            Err(reason) => {
                return Err(ConfigError::Invalid(format!(
                    "{origin}: key `{shown}` has invalid value `{value}`: {reason}"
                )));
            }
        }
    }
    Ok(())
}

/// `<root>.<type>.<key...>` kept raw in the section of `<type>` (`p[1]`), for the
/// backend or centre of that type to read.
fn raw_key(
    sections: &mut std::collections::BTreeMap<String, Section>,
    p: &[String],
    v: &str,
    origin: &str,
) {
    super::section::named_mut(sections, p[1].trim()).insert(
        &p.join("."),
        &p[2..].join("."),
        v.to_string(),
        origin,
    );
}

enum Applied {
    Used,
    /// A Seata key for another part of Seata; accepted silently.
    Ignored,
    Unknown,
}

/// Top-level Seata / Spring / seata-go sections that are not ours.
const IGNORED_TOP: &[&str] = &[
    "store",
    "server",
    "log",
    "metrics",
    "tcc",
    "saga",
    "security",
    "console",
    "spring",
    "tm",
    "rm",
    "undo",
    "lock",
    "enabled",
    "datasourceproxymode",
    "enableautodatasourceproxy",
    "usejdkproxy",
    "scanpackages",
    "excludesforautoproxying",
    "accesskey",
    "secretkey",
    "sqlparsertype",
    "logging",
    "management",
    // Spring Boot starter switches (`SeataProperties`).
    "exposeproxy",
    "excludesforscanning",
    "applicationdatalimit",
    "applicationdatalimitcheck",
];
const IGNORED_SERVICE: &[&str] = &[
    "disableglobaltransaction",
    "enabledegrade",
    "degradecheck",
    "degradecheckperiod",
    "degradecheckallowtimes",
];
const IGNORED_REGISTRY: &[&str] = &["sofa", "metadata"];

/// Keeps `<path>` raw in the parts, for the crate that owns it.
fn part(cfg: &mut Config, p: &[String], v: &str, origin: &str) {
    cfg.parts
        .insert(&p.join("."), &p.join("."), v.to_string(), origin);
}

fn apply(
    cfg: &mut Config,
    state: &mut RouteState,
    path: &[String],
    v: &str,
    origin: &str,
) -> Result<Applied, String> {
    let mut p: Vec<String> = path.iter().map(|s| s.trim().to_string()).collect();
    if p.first().map(|s| norm(s) == "seata").unwrap_or(false) && p.len() > 1 {
        p.remove(0);
    }
    let n: Vec<String> = p.iter().map(|s| norm(s)).collect();
    let ns: Vec<&str> = n.iter().map(String::as_str).collect();
    use Applied::*;
    Ok(match ns.as_slice() {
        ["applicationid"] => {
            cfg.application_id = v.trim().to_string();
            Used
        }
        ["txservicegroup"] => {
            cfg.tx_service_group = nonempty(v)?;
            Used
        }
        // ---- service.*: group and cluster names are the rest of the key, dots and all
        // (Seata reads `service.vgroupMapping.<group>` by the whole text).
        ["service", "vgroupmapping", rest @ ..] if !rest.is_empty() => {
            cfg.service
                .vgroup_mapping
                .insert(p[2..].join("."), v.trim().to_string());
            Used
        }
        ["service", "grouplist", rest @ ..] if !rest.is_empty() => {
            cfg.service
                .grouplist
                .insert(p[2..].join("."), v.trim().to_string());
            Used
        }
        ["service", k, ..] if IGNORED_SERVICE.contains(k) => Ignored,
        ["service", cluster @ .., "grouplist"] if !cluster.is_empty() => {
            cfg.service
                .grouplist
                .insert(p[1..p.len() - 1].join("."), v.trim().to_string());
            Used
        }
        // ---- the parts other crates own: Seata's `client.*` namespaces, `transport.*`,
        // seata-go's `getty.*`, kept raw (their owners validate them and report the
        // keys they do not know).
        ["client", sub, ..] if SEATA_CLIENT_PARTS.iter().any(|c| norm(c) == *sub) => {
            part(cfg, &p, v, origin);
            Used
        }
        [root, _, ..] if SEATA_PART_ROOTS.contains(root) => {
            part(cfg, &p, v, origin);
            Used
        }
        // ---- registry.*
        ["registry", "type"] => {
            cfg.registry.kind = nonempty(v)?;
            Used
        }
        ["registry", "emptyprotection"] => {
            cfg.registry.empty_protection = parse_bool(v)?;
            Used
        }
        ["registry", "preferrednetworks"] => {
            cfg.registry.preferred_networks = split_list(v);
            Used
        }
        ["registry", b, ..] if IGNORED_REGISTRY.contains(b) => Ignored,
        // Seata 1.0-1.3's names of `client.loadBalance.*`; Seata since 1.4 ignores them,
        // and so does meshline (the balancer comes from `client.loadBalance.type`).
        ["registry", "loadbalance" | "loadbalancevirtualnodes"] => Ignored,
        // Each registry type's own keys, raw, for its backend to read.
        ["registry", _, rest @ ..] if !rest.is_empty() => {
            raw_key(&mut cfg.registry.sections, &p, v, origin);
            Used
        }
        // ---- config.* (the configuration centre)
        ["config", "type"] => {
            cfg.centre.kind = nonempty(v)?;
            Used
        }
        ["config", "datatype"] => {
            cfg.centre.data_type = Some(nonempty(v)?);
            Used
        }
        ["config", _, rest @ ..] if !rest.is_empty() => {
            raw_key(&mut cfg.centre.sections, &p, v, origin);
            Used
        }
        [top, ..] if IGNORED_TOP.contains(top) => Ignored,
        // An application's root: kept for it; reported unless the loader declared it.
        [root, _, ..] => {
            part(cfg, &p, v, origin);
            if state.declared_roots.iter().any(|d| d == root) {
                Used
            } else {
                Unknown
            }
        }
        _ => Unknown,
    })
}
