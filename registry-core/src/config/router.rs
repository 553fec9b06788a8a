//! The key router: every flat `(path, value)` entry goes to the field it sets, to a
//! registry type's [`Section`], to an application section, or is reported unknown.
//! Seata keys for other parts of Seata are accepted silently.

use super::loader::Entry;
use super::values::{nonempty, parse_bool, parse_num, split_list};
use super::{APP_SECTIONS, Config, Section, parse_bytes, parse_duration, parse_duration_with_unit};
use crate::RegistryError;

/// Structural segment normalisation: lower-case, `-` and `_` removed.
pub(super) fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// What the router remembers across the sources of one load.
#[derive(Default)]
pub(super) struct RouteState {
    /// `client.loadBalance.type` was set by some source: seata-go's
    /// `getty.load-balance-type` no longer changes the balancer, in any source or order.
    lb_type_from_client_key: bool,
}

pub(super) fn apply_all(
    cfg: &mut Config,
    state: &mut RouteState,
    entries: Vec<Entry>,
    origin: &str,
) -> Result<(), RegistryError> {
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
                let hint =
                    super::suggest::nearest(&bare, super::suggest::KNOWN_KEYS.iter().copied())
                        .map(|k| format!(" (did you mean `{k}`?)"))
                        .unwrap_or_default();
                cfg.warnings.push(format!(
                    "{origin}: unknown config key `{shown}` ignored{hint}"
                ))
            }
            Err(reason) => {
                return Err(RegistryError::Config(format!(
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
/// `client.*` keys of Seata's RM / TM / undo log, and the raft registry's
/// `client.metadataMaxAgeMs` (read by the raft backend's crate when it has one).
const IGNORED_CLIENT: &[&str] = &["rm", "tm", "undo", "lock", "log"];
const IGNORED_SERVICE: &[&str] = &[
    "disableglobaltransaction",
    "enabledegrade",
    "degradecheck",
    "degradecheckperiod",
    "degradecheckallowtimes",
];
const IGNORED_TRANSPORT: &[&str] = &[
    "type",
    "server",
    "threadfactory",
    "shutdown",
    "enabletcserverbatchsendresponse",
    "rpctimeout",
    "protocol",
    "rpctmclientbatchsendrequest",
    // Seata's server-side thread pools (`ConfigurationKeys`).
    "minserverpoolsize",
    "maxserverpoolsize",
    "minbranchresultpoolsize",
    "maxbranchresultpoolsize",
    "maxtaskqueuesize",
    "keepalivetime",
];
const IGNORED_REGISTRY: &[&str] = &["sofa", "metadata"];

/// A duration that must not be zero.
fn positive(d: std::time::Duration) -> Result<std::time::Duration, String> {
    if d.is_zero() {
        Err("must be more than zero".into())
    } else {
        Ok(d)
    }
}

/// `client.tm.commitRetryCount` / `rollbackRetryCount`: as Java, 0 or less means 5.
fn retry_count(v: &str) -> Result<u32, String> {
    let n: i64 = parse_num(v)?;
    Ok(if n <= 0 {
        5
    } else {
        n.min(u32::MAX as i64) as u32
    })
}

/// `transport.serialization`: Seata's codec name, or (Seata 2.1+) a comma list whose
/// first entry is the codec requests are sent with. meshline speaks the seata codec
/// only, so that entry must be `seata`.
fn serialization(v: &str) -> Result<String, String> {
    let v = nonempty(v)?;
    let first = v.split(',').next().unwrap_or("").trim();
    if first.eq_ignore_ascii_case("seata") {
        Ok(v)
    } else {
        Err(format!(
            "meshline speaks only the seata codec, not `{first}` (protobuf, kryo, hessian and \
             fastjson2 bodies are refused by name); use `seata`"
        ))
    }
}

/// `transport.compressor`: one of Seata's compressor names (`CompressorType`), checked
/// here so a misspelling fails the load naming the key. 7z is refused: Seata removed it
/// in 1.8.0 and no TC since reads it.
fn compressor(v: &str) -> Result<String, String> {
    let v = nonempty(v)?;
    match v.to_ascii_lowercase().as_str() {
        "none" | "gzip" | "zip" | "bzip2" | "lz4" | "deflater" | "zstd" => Ok(v),
        "7z" | "sevenz" => {
            Err("7z is not supported: Seata removed it in 1.8.0; use zstd, gzip or lz4".into())
        }
        _ => Err("expected none, gzip, zip, bzip2, lz4, deflater or zstd".into()),
    }
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
    if let [section, rest @ ..] = ns.as_slice()
        && !rest.is_empty()
        && APP_SECTIONS.contains(section)
    {
        cfg.app_sections
            .entry(section.to_string())
            .or_default()
            .insert(rest.join("."), v.trim().to_string());
        return Ok(Used);
    }
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
        // ---- client.* / seata-go getty.*: `client.loadBalance.type` (Seata's key) wins
        // over seata-go's `getty.load-balance-type` whenever both are set.
        ["client", "loadbalance", "type"] => {
            cfg.client.load_balance.kind = nonempty(v)?;
            state.lb_type_from_client_key = true;
            Used
        }
        ["getty", "loadbalancetype"] => {
            let kind = nonempty(v)?;
            if state.lb_type_from_client_key {
                tracing::debug!(
                    "{origin}: getty.load-balance-type ignored: client.loadBalance.type is set"
                );
            } else {
                cfg.client.load_balance.kind = kind;
            }
            Used
        }
        ["client", "metadatamaxagems"] => {
            cfg.client.metadata_max_age = Some(super::values::parse_seata_duration(
                v,
                std::time::Duration::from_millis(1),
            )?);
            Used
        }
        ["client", "loadbalance", "virtualnodes"] => {
            cfg.client.load_balance.virtual_nodes = parse_num(v)?;
            Used
        }
        ["client", "tm", "commitretrycount"] => {
            cfg.client.tm.commit_retry_count = retry_count(v)?;
            Used
        }
        ["client", "tm", "rollbackretrycount"] => {
            cfg.client.tm.rollback_retry_count = retry_count(v)?;
            Used
        }
        ["client", "tm", "defaultglobaltransactiontimeout"] => {
            cfg.client.tm.default_global_transaction_timeout =
                super::values::parse_seata_duration(v, std::time::Duration::from_millis(1))?;
            Used
        }
        ["client", k, ..] if IGNORED_CLIENT.contains(k) => Ignored,
        ["getty", ..] => Ignored,
        // ---- transport.*
        ["transport", k] => match *k {
            "heartbeat" => {
                cfg.transport.heartbeat = parse_bool(v)?;
                Used
            }
            "serialization" => {
                cfg.transport.serialization = serialization(v)?;
                Used
            }
            "compressor" => {
                cfg.transport.compressor = compressor(v)?;
                Used
            }
            "rpctmrequesttimeout" => {
                cfg.transport.rpc_tm_request_timeout = parse_duration(v)?;
                Used
            }
            "rpcrmrequesttimeout" => {
                cfg.transport.rpc_rm_request_timeout = parse_duration(v)?;
                Used
            }
            "rpctcrequesttimeout" => {
                cfg.transport.rpc_tc_request_timeout = parse_duration(v)?;
                Used
            }
            "enabletmclientbatchsendrequest" => {
                cfg.transport.enable_tm_client_batch_send_request = parse_bool(v)?;
                Used
            }
            "enablermclientbatchsendrequest" => {
                cfg.transport.enable_rm_client_batch_send_request = Some(parse_bool(v)?);
                Used
            }
            "enableclientbatchsendrequest" => {
                cfg.transport.enable_client_batch_send_request = Some(parse_bool(v)?);
                Used
            }
            "maxmergesendmills" => {
                cfg.transport.max_merge_send_mills =
                    super::values::parse_seata_duration(v, std::time::Duration::from_millis(1))?;
                Used
            }
            "maxframelength" => {
                cfg.transport.max_frame_length = Some(parse_bytes(v)?);
                Used
            }
            "requestqueuebytes" => {
                cfg.transport.request_queue_bytes = Some(parse_bytes(v)?);
                Used
            }
            "responsequeuebytes" => {
                cfg.transport.response_queue_bytes = Some(parse_bytes(v)?);
                Used
            }
            "writetimeout" => {
                cfg.transport.write_timeout = Some(parse_duration_with_unit(v)?);
                Used
            }
            "maxinboundrequests" => {
                let n: usize = parse_num(v)?;
                if n == 0 {
                    return Err("must be at least 1".into());
                }
                cfg.transport.max_inbound_requests = Some(n);
                Used
            }
            "heartbeatinterval" => {
                cfg.transport.heartbeat_interval = Some(positive(parse_duration_with_unit(v)?)?);
                Used
            }
            "heartbeattimeout" => {
                cfg.transport.heartbeat_timeout = Some(positive(parse_duration_with_unit(v)?)?);
                Used
            }
            "probeafter" => {
                cfg.transport.probe_after = Some(parse_duration_with_unit(v)?);
                Used
            }
            "probetimeout" => {
                cfg.transport.probe_timeout = Some(positive(parse_duration_with_unit(v)?)?);
                Used
            }
            "ejectafterfailures" => {
                cfg.transport.eject_after_failures = Some(parse_num(v)?);
                Used
            }
            "ejectiontime" => {
                cfg.transport.ejection_time = Some(positive(parse_duration_with_unit(v)?)?);
                Used
            }
            "maxconnectedmembers" => {
                cfg.transport.max_connected_members = Some(parse_num(v)?);
                Used
            }
            k if IGNORED_TRANSPORT.contains(&k) || k.starts_with("enable") => Ignored,
            _ => Unknown,
        },
        ["transport", k, ..] if IGNORED_TRANSPORT.contains(k) => Ignored,
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
        _ => Unknown,
    })
}
