//! Step 1: what configuration a client built from these sources gets, and from where.
//!
//! The sources are read by the library's own loader (`meshline::centre::live_config`,
//! as `lookup` and the example programs do); this step only reports them: the files and
//! variables in the order read, the centre, where the keys that matter came from, and
//! every unknown key with its "did you mean".

use std::sync::Arc;

use meshline::core::centre::LiveConfig;
use meshline::{Config, ConfigLoader};

use super::report::{Step, StepKind};

/// The configuration to diagnose with, and the step that describes it.
pub struct Loaded {
    /// What a client gets (from the centre when it could be read, else from the files
    /// and environment alone).
    pub config: Arc<Config>,
    /// The followed configuration, when a centre was read.
    pub live: Option<LiveConfig>,
    pub step: Step,
}

/// Keys whose origin the report names: they decide where a client looks.
const KEYS_SHOWN: &[&str] = &[
    "txServiceGroup",
    "registry.type",
    "config.type",
    "client.loadBalance.type",
];

/// Reads `loader` as a client does and describes what it read. `None` when not even the
/// files could be read (the step says why).
pub async fn load(loader: &ConfigLoader) -> Result<Loaded, Step> {
    let base = loader.clone().load_quietly().map_err(|e| {
        Step::failed(StepKind::Config, "the configuration cannot be read")
            .evidence(e.to_string())
            .fix("correct the file or variable the error names")
    })?;
    let centre_kind = match meshline::centre::resolve_centre(&base.centre.kind) {
        Ok(meshline::centre::CentreKind::File) => "file",
        Ok(meshline::centre::CentreKind::Server(ty, _)) => ty.seata_name,
        Err(e) => {
            return Err(
                Step::failed(StepKind::Config, "config.type is not usable").evidence(e.to_string())
            );
        }
    };
    let (config, live, centre_error) = match meshline::centre::live_config(loader.clone()).await {
        Ok(live) => (live.current(), Some(live), None),
        Err(e) => (Arc::new(base), None, Some(e.to_string())),
    };
    let mut step = Step::ok(StepKind::Config, "");
    for s in &config.provenance.sources {
        step = step.evidence(format!("read {} ({} keys)", s.origin, s.keys));
    }
    if config.provenance.sources.is_empty() {
        step = step.evidence("no file and no MESHLINE_* variable: Seata's defaults only");
    }
    let vars = meshline_vars();
    if !vars.is_empty() {
        step = step.evidence(format!("environment variables: {}", vars.join(", ")));
    }
    for key in KEYS_SHOWN {
        let from = config.provenance.origin(key).unwrap_or("default");
        let value = shown_value(&config, key);
        step = step.evidence(format!("{key}={value}  (from {from})"));
    }
    if centre_kind != "file" {
        match (&live, &centre_error) {
            (Some(l), _) => {
                if let Some(c) = l.centre() {
                    step = step.evidence(format!(
                        "config centre: {} at {} (followed live)",
                        c.kind(),
                        c.location()
                    ));
                }
            }
            (None, Some(e)) => {
                step.ok = false;
                step = step
                    .evidence(format!("config centre {centre_kind}: {e}"))
                    .fix(format!(
                        "make the {centre_kind} centre reachable (config.{centre_kind}.serverAddr, \
                         credentials), or keep the keys in the file with config.type=file"
                    ));
            }
            (None, None) => {}
        }
    }
    // The keys the balancer and the rpc-client own are theirs to check.
    let (owned, invalid) = match meshline::parts::read_all(&config) {
        Ok(w) => (w, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let unknown = config.warnings.len() + owned.len();
    for w in config.warnings.iter().chain(&owned) {
        step.ok = false;
        step = step.evidence(w.clone());
    }
    if unknown > 0 {
        step = step.fix("rename or remove the unknown keys above (a misspelt key is ignored)");
    }
    if let Some(e) = &invalid {
        step.ok = false;
        step = step
            .evidence(e.clone())
            .fix("correct the value the error names");
    }
    step.title = if step.ok {
        format!(
            "{} source(s) read, no unknown key",
            config.provenance.sources.len()
        )
    } else if centre_error.is_some() {
        format!("the {centre_kind} config centre cannot be read")
    } else if invalid.is_some() {
        "a value is invalid".to_string()
    } else {
        format!("{unknown} unknown key(s)")
    };
    Ok(Loaded { config, live, step })
}

/// The names (never the values: they can be secrets) of the `MESHLINE_*` variables set.
fn meshline_vars() -> Vec<String> {
    let mut v: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("MESHLINE_") && k != "MESHLINE_LOG")
        .collect();
    v.sort();
    v
}

fn shown_value(config: &Config, key: &str) -> String {
    match key {
        "txServiceGroup" => config.tx_service_group.clone(),
        "registry.type" => config.registry.kind.clone(),
        "config.type" => config.centre.kind.clone(),
        "client.loadBalance.type" => meshline::loadbalance::LoadBalanceConfig::from_config(config)
            .map(|c| c.kind)
            .unwrap_or_else(|e| format!("(invalid: {e})")),
        _ => String::new(),
    }
}
