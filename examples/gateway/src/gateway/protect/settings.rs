//! The protection settings: `gateway.protect.*` and each module's `max-in-flight`,
//! `shed` and `replay` (read by [`GatewaySettings::from_config`](super::super::settings::GatewaySettings::from_config)).
//!
//! ```yaml
//! gateway:
//!   protect:
//!     max-in-flight: 5000        # per module, unless the module sets its own
//!     hold-max: 10000            # requests held per cluster while it has no endpoint
//!     hold-for: 3s               # ... each for at most this long
//!     reconnect-max: 500ms       # longest pause between reconnects to a backend
//!     shed-load: 80              # every backend of a cluster above this: shed
//!     breaker-window: 10s        # the breaker's sliding window
//!     breaker-min-requests: 20   # outcomes in the window before it may open
//!     breaker-failure-ratio: 0.5 # failed share of the window that opens it
//!     breaker-cool-down: 5s      # open this long before probing
//!     breaker-probes: 3          # probes in half-open; all succeed: closed
//!   modules:
//!     1: { name: login, cluster: login, max-in-flight: 2000 }
//!     2: { name: shop, cluster: shop, shed: [7, 8], replay: false }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::gateway::settings::{ModuleKind, ModuleRoute};

/// The circuit breaker's settings (`protect.breaker-*`): the rpc-client's.
pub use meshline::rpc::limits::BreakerSettings;

/// One module's own protection settings (`modules.N.*`); unset fields take the
/// gateway-wide default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleProtect {
    /// `modules.N.max-in-flight`: this module's requests in flight at most.
    pub max_in_flight: Option<usize>,
    /// `modules.N.shed`: opcodes dropped first (answered `busy: shed`) while the
    /// module's cluster is overloaded.
    pub shed: Vec<u16>,
    /// `modules.N.replay`: a request written to a backend whose connection then died is
    /// sent again when the cluster has an endpoint (the backend may have acted on it).
    /// Default: `true` for stateless modules, `false` for bound ones.
    pub replay: Option<bool>,
}

/// Every protection setting.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectSettings {
    /// Default in-flight cap of a module (`protect.max-in-flight`).
    pub max_in_flight: usize,
    /// Requests held per cluster while it has no alive endpoint (`protect.hold-max`;
    /// 0 holds nothing: such requests are answered `busy: <cluster> unavailable` at once).
    pub hold_max: usize,
    /// How long a request is held at most (`protect.hold-for`; 0 holds nothing).
    pub hold_for: Duration,
    /// The longest pause between reconnect attempts to a backend
    /// (`protect.reconnect-max`): bounds the gap between a backend's restart and the
    /// replay of the requests held for it.
    pub reconnect_max: Duration,
    /// A cluster is overloaded when every alive backend reported a load above this
    /// (`protect.shed-load`, 0..=100).
    pub shed_load: u32,
    /// The breaker's settings.
    pub breaker: BreakerSettings,
    /// Per-module settings by module id.
    pub modules: BTreeMap<u16, ModuleProtect>,
}

impl Default for ProtectSettings {
    fn default() -> Self {
        ProtectSettings {
            max_in_flight: 5000,
            hold_max: 10_000,
            hold_for: Duration::from_secs(3),
            reconnect_max: Duration::from_millis(500),
            shed_load: 80,
            breaker: BreakerSettings::default(),
            modules: BTreeMap::new(),
        }
    }
}

/// Why a protection setting was refused (the caller names the key).
pub type Invalid = String;

fn number<T: std::str::FromStr>(v: &str, what: &str) -> Result<T, Invalid> {
    v.trim().parse().map_err(|_| format!("expected {what}"))
}

fn duration(v: &str) -> Result<Duration, Invalid> {
    meshline::core::config::parse_duration_with_unit(v)
}

fn positive<T: Default + PartialOrd>(v: T) -> Result<T, Invalid> {
    if v > T::default() {
        Ok(v)
    } else {
        Err("must be more than zero".into())
    }
}

impl ProtectSettings {
    /// Applies `protect.<field>` (normalised: lower case, no `-`).
    pub fn set(&mut self, field: &str, v: &str) -> Result<(), Invalid> {
        match field {
            "maxinflight" => self.max_in_flight = positive(number(v, "a count")?)?,
            "holdmax" => self.hold_max = number(v, "a count")?,
            "holdfor" => self.hold_for = duration(v)?,
            "reconnectmax" => self.reconnect_max = positive(duration(v)?)?,
            "shedload" => {
                self.shed_load = number(v, "a load 0..=100")?;
                if self.shed_load > 100 {
                    return Err("a load 0..=100".into());
                }
            }
            "breakerwindow" => self.breaker.window = positive(duration(v)?)?,
            "breakerminrequests" => self.breaker.min_requests = positive(number(v, "a count")?)?,
            "breakerfailureratio" => {
                let r: f64 = number(v, "a ratio like 0.5")?;
                if !(r > 0.0 && r <= 1.0) {
                    return Err("a ratio above 0 and at most 1".into());
                }
                self.breaker.failure_ratio = r;
            }
            "breakercooldown" => self.breaker.cool_down = positive(duration(v)?)?,
            "breakerprobes" => self.breaker.probes = positive(number(v, "a count")?)?,
            _ => return Err("unknown protect setting".into()),
        }
        Ok(())
    }

    /// Applies a module's protection field; `Ok(false)` when `field` is not one.
    pub fn set_module(&mut self, id: u16, field: &str, v: &str) -> Result<bool, Invalid> {
        let module = self.modules.entry(id).or_default();
        match field {
            "maxinflight" => module.max_in_flight = Some(positive(number(v, "a count")?)?),
            "shed" => {
                let ops = crate::gateway::wire::list(Some(v))
                    .map(|op| number::<u16>(op, "opcodes like 7,8"))
                    .collect::<Result<Vec<u16>, _>>()?;
                module.shed = ops;
            }
            "replay" => {
                let on = match v.trim().to_ascii_lowercase().as_str() {
                    "true" | "yes" | "on" | "1" => true,
                    "false" | "no" | "off" | "0" => false,
                    _ => return Err("true or false".into()),
                };
                module.replay = Some(on);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The in-flight cap of `module`.
    pub fn max_in_flight(&self, module: u16) -> usize {
        self.modules
            .get(&module)
            .and_then(|m| m.max_in_flight)
            .unwrap_or(self.max_in_flight)
    }

    /// The sheddable opcodes of `module`.
    pub fn shed(&self, module: u16) -> &[u16] {
        self.modules.get(&module).map_or(&[], |m| &m.shed)
    }

    /// Whether `route`'s requests written to a backend that then died are sent again.
    pub fn replay(&self, route: &ModuleRoute) -> bool {
        self.modules
            .get(&route.id)
            .and_then(|m| m.replay)
            .unwrap_or(route.kind == ModuleKind::Stateless)
    }
}
