//! Step 2: the tx group's `service.vgroupMapping.<group>`.
//!
//! The most reported Seata client error (`can not get cluster name in registry config
//! 'service.vgroupMapping.<group>'`) has a handful of causes; this step tells them
//! apart: a mapping key that is a near miss of the group (`my-tx-group` for
//! `my_tx_group`, case, one typo), and a mapping that lives in a configuration centre
//! the client does not read because `config.type` is still `file`.

use std::time::Duration;

use meshline::core::config::nearest;
use meshline::{Config, ConfigLoader};

use super::report::{Step, StepKind};

/// How long to try a configured-but-unused centre.
const CENTRE_TRY: Duration = Duration::from_secs(10);

/// The centres a `config.<type>.serverAddr` can point at, with their section names:
/// the registry types that have a centre.
fn centres() -> impl Iterator<Item = (&'static str, Vec<&'static str>)> {
    meshline::registry::REGISTRY_TYPES
        .iter()
        .filter(|t| t.centre.is_some())
        .map(|t| (t.seata_name, t.section_names()))
}

/// The cluster `group` maps to (if any) and the step describing how it was found or
/// why not.
pub async fn check(
    config: &Config,
    loader: &ConfigLoader,
    group: &str,
    registry_maps_groups: bool,
) -> (Option<String>, Step) {
    let key = format!("service.vgroupMapping.{group}");
    if registry_maps_groups {
        let step = Step::ok(
            StepKind::Mapping,
            format!(
                "the {} registry maps groups itself: looked up by group `{group}`",
                config.registry.kind
            ),
        );
        return (Some(group.to_string()), step);
    }
    if let Some(cluster) = config
        .service
        .vgroup_mapping
        .get(group)
        .filter(|c| !c.trim().is_empty())
    {
        let mut step = Step::ok(StepKind::Mapping, format!("{key}={cluster}"));
        step = match config.provenance.origin(&key) {
            Some(from) => step.evidence(format!("from {from}")),
            None => step.evidence(
                "meshline's built-in default (as Seata's Spring starter); Seata's plain Java \
                 client has none, so set it explicitly for a mixed fleet",
            ),
        };
        return (Some(cluster.clone()), step);
    }
    let mut step = Step::failed(StepKind::Mapping, format!("no {key} in the configuration"));
    let existing: Vec<&str> = config
        .service
        .vgroup_mapping
        .keys()
        .map(String::as_str)
        .collect();
    let misses = near_misses(group, &existing);
    for (k, why) in &misses {
        let cluster = &config.service.vgroup_mapping[*k];
        let from = config
            .provenance
            .origin(&format!("service.vgroupMapping.{k}"))
            .unwrap_or("default");
        step = step.evidence(format!(
            "near miss: service.vgroupMapping.{k}={cluster} (from {from}) {why} `{group}`"
        ));
    }
    if let Some((k, _)) = misses.first() {
        let cluster = &config.service.vgroup_mapping[*k];
        step = step.fix(format!(
            "use one name in both places: set service.vgroupMapping.{group}={cluster}, or \
             txServiceGroup={k} in the client"
        ));
    } else if !existing.is_empty() {
        step = step.evidence(format!("mapped groups: {}", existing.join(", ")));
    }
    // The mapping may be in a centre this client does not read.
    if config.centre.kind.trim().eq_ignore_ascii_case("file") {
        for (kind, names) in centres() {
            let section = config.centre.section(&names);
            let Some(addr) = section.get("serverAddr").filter(|a| !a.is_empty()) else {
                continue;
            };
            let probe = loader.clone().set("config.type", kind);
            let found =
                tokio::time::timeout(CENTRE_TRY, meshline::centre::live_config(probe)).await;
            match found {
                Ok(Ok(live)) => {
                    live.ask_group(group).await;
                    if let Some(c) = live.current().service.vgroup_mapping.get(group) {
                        step = step
                            .evidence(format!(
                                "{key}={c} is in the {kind} config centre at {addr}, which this \
                                 client does not read: config.type is `file`"
                            ))
                            .fix(format!("set config.type={kind}"));
                    } else {
                        step = step.evidence(format!(
                            "the {kind} config centre at {addr} (config.{kind}.*) has no {key} either"
                        ));
                    }
                }
                Ok(Err(e)) => {
                    step = step.evidence(format!(
                        "config.{kind}.serverAddr is set but that centre cannot be read: {e}"
                    ))
                }
                Err(_) => {
                    step = step.evidence(format!(
                        "config.{kind}.serverAddr is set but that centre did not answer within {CENTRE_TRY:?}"
                    ))
                }
            }
        }
    }
    if step.fix.is_empty() {
        step = step.fix(format!(
            "set {key}=<the cluster your TCs register in> (YAML: seata.service.vgroup-mapping.{group}), \
             in the file or in the config centre config.type names"
        ));
    }
    (None, step)
}

/// Mapping keys that differ from `group` only in case, `-`/`_`, or one or two typos,
/// each with how it differs.
fn near_misses<'a>(group: &str, existing: &[&'a str]) -> Vec<(&'a str, &'static str)> {
    let loose = |s: &str| s.replace(['-', '_', '.'], "").to_lowercase();
    let mut out = Vec::new();
    for &k in existing {
        if k == group {
            continue;
        }
        if k.eq_ignore_ascii_case(group) {
            out.push((k, "differs only in case from"));
        } else if loose(k) == loose(group) {
            out.push((k, "differs only in `-`, `_` or `.` from"));
        }
    }
    if out.is_empty()
        && let Some(k) = nearest(group, existing.iter().copied())
    {
        out.push((k, "is one or two letters away from"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_name_how_they_differ() {
        let keys = ["my-tx-group", "other", "MY_TX_GROUP"];
        let m = near_misses("my_tx_group", &keys);
        assert_eq!(
            m,
            vec![
                ("my-tx-group", "differs only in `-`, `_` or `.` from"),
                ("MY_TX_GROUP", "differs only in case from"),
            ]
        );
        let m = near_misses("order_grop", &["order_group", "x"]);
        assert_eq!(m, vec![("order_group", "is one or two letters away from")]);
        assert!(near_misses("payments", &["default_tx_group"]).is_empty());
    }
}
