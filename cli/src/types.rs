//! `meshline types`: the registry types meshline knows and what this build has of
//! each, printed from the facade's table (`meshline::registry::REGISTRY_TYPES`), the
//! one description of each backend.

use meshline::registry::{REGISTRY_TYPES, RegistryType, is_compiled_in};

/// The `--registry` help: every registry type name, from the table.
pub fn registry_help() -> String {
    let names: Vec<&str> = REGISTRY_TYPES.iter().map(|t| t.seata_name).collect();
    format!(
        "Registry type, overriding `registry.type` ({}; `meshline types` lists aliases and features)",
        names.join(", ")
    )
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn centre_compiled(t: &RegistryType) -> Option<bool> {
    t.centre.map(|c| c.connect.is_some())
}

/// Prints the table: text (one row per type), JSON, or `--porcelain` (tab-separated
/// `name feature compiled-in`, for scripts).
pub fn print(json: bool, porcelain: bool) {
    if json {
        let rows: Vec<serde_json::Value> = REGISTRY_TYPES
            .iter()
            .map(|t| {
                serde_json::json!({
                    "type": t.seata_name,
                    "aliases": t.aliases,
                    "feature": t.feature,
                    "tlsFeature": t.tls_feature,
                    "crate": t.crate_name,
                    "compiledIn": is_compiled_in(t),
                    "readOnly": t.read_only,
                    "configCentre": centre_compiled(t),
                    "addressKey": t.address_key,
                    "ttlKey": t.ttl_key,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return;
    }
    if porcelain {
        for t in REGISTRY_TYPES {
            println!(
                "{}\t{}\t{}",
                t.seata_name,
                t.feature,
                yes_no(is_compiled_in(t))
            );
        }
        return;
    }
    println!(
        "{:<8} {:<14} {:<14} {:<9} {:<7} {:<8} tls feature",
        "type", "aliases", "feature", "compiled", "centre", "register"
    );
    for t in REGISTRY_TYPES {
        let centre = match centre_compiled(t) {
            Some(true) => "yes",
            Some(false) => "(off)",
            None => "-",
        };
        println!(
            "{:<8} {:<14} {:<14} {:<9} {:<7} {:<8} {}",
            t.seata_name,
            if t.aliases.is_empty() {
                "-".to_string()
            } else {
                t.aliases.join(",")
            },
            t.feature,
            yes_no(is_compiled_in(t)),
            centre,
            if t.read_only { "no" } else { "yes" },
            t.tls_feature.unwrap_or("-"),
        );
    }
}
