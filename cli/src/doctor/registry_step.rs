//! Step 3: the registry: its type and address, the connection (with the cause when it
//! fails), the cluster's members, and when there are none, what the registry does hold
//! nearby (`RegistryService::nearby`), each with the key that would select it.

use std::sync::Arc;

use meshline::registry::resolve_type;
use meshline::{Config, Instance, RegistryService};

use super::report::{Step, StepKind};

/// The registry (when it could be built) and the members of `cluster`.
pub struct Found {
    pub registry: Option<Arc<dyn RegistryService>>,
    pub members: Vec<Instance>,
    pub step: Step,
}

/// Where the registry is, as configured (`at <registry.<type>.<address key>>`).
fn address(config: &Config) -> String {
    let Ok(ty) = resolve_type(&config.registry.kind) else {
        return String::new();
    };
    if ty.address_key.is_empty() {
        return "(grouplists in the configuration)".into();
    }
    let section = config.registry.section(&ty.section_names());
    match section.get(ty.address_key) {
        Some(a) => format!("at {}", meshline::core::redact::redact_userinfo(a)),
        None => format!("at the default {}", ty.address_key),
    }
}

/// Connects as a client would (`meshline::registry::from_config`) and looks `cluster`
/// up; `None` cluster: the mapping step failed, so only the connection is checked.
pub async fn check(config: &Config, group: &str, cluster: Option<&str>) -> Found {
    let kind = config.registry.kind.clone();
    let at = address(config);
    let registry = match meshline::registry::from_config(config).await {
        Ok(r) => r,
        Err(e) => {
            let step = Step::failed(
                StepKind::Registry,
                format!("cannot use the {kind} registry {at}"),
            )
            .evidence(e.to_string())
            .fix(format!(
                "check registry.type and registry.{kind}.* (address, credentials, TLS); the \
                     error above names the cause"
            ));
            return Found {
                registry: None,
                members: Vec::new(),
                step,
            };
        }
    };
    let Some(cluster) = cluster else {
        let step = Step::ok(
            StepKind::Registry,
            format!("{kind} registry {at} reachable"),
        )
        .evidence("no cluster to look up: the mapping is missing (see above)");
        return Found {
            registry: Some(registry),
            members: Vec::new(),
            step,
        };
    };
    let members = match registry.lookup(cluster).await {
        Ok(m) => m,
        Err(e) => {
            let step = Step::failed(
                StepKind::Registry,
                format!("{kind} registry {at}: lookup of `{cluster}` failed"),
            )
            .evidence(e.to_string());
            return Found {
                registry: Some(registry),
                members: Vec::new(),
                step,
            };
        }
    };
    if !members.is_empty() {
        let list: Vec<String> = members.iter().map(|m| m.to_string()).collect();
        let step = Step::ok(
            StepKind::Registry,
            format!(
                "{kind} registry {at}: cluster `{cluster}` lists {} member(s)",
                members.len()
            ),
        )
        .evidence(list.join(", "));
        // A registry that reads its members from the configuration says which source
        // won (a file, the centre, the built-in default).
        let step = match registry.source_of(cluster) {
            Some(origin) => step.evidence(format!("grouplist of `{cluster}` from {origin}")),
            None => step,
        };
        return Found {
            registry: Some(registry),
            members,
            step,
        };
    }
    let mut step = Step::failed(
        StepKind::Registry,
        format!("{kind} registry {at}: cluster `{cluster}` lists no members"),
    );
    match registry.nearby(cluster).await {
        Ok(places) if places.is_empty() => {
            step = step
                .evidence("nothing near it has members either")
                .fix(format!(
                    "start a TC that registers in cluster `{cluster}` (its registry.{kind}.cluster), \
                     or map the group to the cluster your TCs register in"
                ));
        }
        Ok(places) => {
            for p in &places {
                let shown: Vec<String> = p.members.iter().map(|m| m.to_string()).collect();
                step = step.evidence(format!("{} has {}", p.place, shown.join(", ")));
                let mut fix = Vec::new();
                if let Some(c) = &p.cluster {
                    fix.push(format!("service.vgroupMapping.{group}={c}"));
                }
                fix.extend(p.select_with.iter().cloned());
                if !fix.is_empty() {
                    step = step.fix(format!("to use {}: set {}", p.place, fix.join(" and ")));
                }
            }
        }
        Err(e) => {
            step = step.evidence(format!(
                "could not list what the registry holds nearby: {e}"
            ));
        }
    }
    Found {
        registry: Some(registry),
        members,
        step,
    }
}
