//! The doctor's findings: one [`Step`] per link of the chain, rendered as text (one
//! `✓`/`✗` line per step, evidence indented under it, the fix on `✗`) or as JSON.
//!
//! # JSON shape (`meshline doctor --json`)
//!
//! ```json
//! {
//!   "group": "my_tx_group",
//!   "ok": false,
//!   "summary": "no TC accepted: ...",
//!   "steps": [
//!     {
//!       "step": "config" | "mapping" | "registry" | "servers",
//!       "ok": true,
//!       "title": "one line",
//!       "evidence": ["line", "..."],
//!       "fix": ["what to change", "..."]
//!     }
//!   ],
//!   "servers": [
//!     {
//!       "address": "10.0.0.1:8091",
//!       "connect_ms": 0.4,   "connect_error": null,
//!       "ping_ms": 0.6,      "ping_error": null,
//!       "register_ms": 1.2,  "register_error": null,
//!       "accepted": true
//!     }
//!   ]
//! }
//! ```
//!
//! `ok` is true only when at least one TC accepted the registration handshake (the
//! exit code is 0 then, 1 otherwise). A step that could not run (the registry was not
//! reachable, so no server was probed) is absent. Times are milliseconds; an `_error`
//! is `null` when its step succeeded or did not run.

use std::time::Duration;

use serde_json::{Value, json};

/// The chain's links, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Files, variables, the centre; unknown keys.
    Config,
    /// The tx group's `service.vgroupMapping`.
    Mapping,
    /// Registry type, address, connection, the cluster's members.
    Registry,
    /// Each member: connect, PING/PONG, RegisterTM.
    Servers,
}

impl StepKind {
    fn name(self) -> &'static str {
        match self {
            StepKind::Config => "config",
            StepKind::Mapping => "mapping",
            StepKind::Registry => "registry",
            StepKind::Servers => "servers",
        }
    }
}

/// One link of the chain.
#[derive(Debug, Clone)]
pub struct Step {
    pub kind: StepKind,
    pub ok: bool,
    pub title: String,
    pub evidence: Vec<String>,
    pub fix: Vec<String>,
}

impl Step {
    pub fn ok(kind: StepKind, title: impl Into<String>) -> Step {
        Step {
            kind,
            ok: true,
            title: title.into(),
            evidence: Vec::new(),
            fix: Vec::new(),
        }
    }

    pub fn failed(kind: StepKind, title: impl Into<String>) -> Step {
        Step {
            ok: false,
            ..Step::ok(kind, title)
        }
    }

    pub fn evidence(mut self, line: impl Into<String>) -> Step {
        self.evidence.push(line.into());
        self
    }

    pub fn fix(mut self, line: impl Into<String>) -> Step {
        self.fix.push(line.into());
        self
    }
}

/// What the servers step found for one member.
#[derive(Debug, Clone)]
pub struct ServerResult {
    pub address: String,
    pub connect: Result<Duration, String>,
    pub ping: Option<Result<Duration, String>>,
    pub register: Option<Result<Duration, String>>,
}

impl ServerResult {
    pub fn accepted(&self) -> bool {
        matches!(self.register, Some(Ok(_)))
    }
}

/// Everything the doctor found.
#[derive(Debug, Clone)]
pub struct Report {
    pub group: String,
    pub steps: Vec<Step>,
    pub servers: Vec<ServerResult>,
}

impl Report {
    /// True when at least one TC accepted the handshake.
    pub fn ok(&self) -> bool {
        self.servers.iter().any(ServerResult::accepted)
    }

    /// The last line: what works, or the first thing that does not.
    pub fn summary(&self) -> String {
        let accepted = self.servers.iter().filter(|s| s.accepted()).count();
        if accepted > 0 {
            return format!(
                "ok: {accepted} of {} TC(s) of group `{}` accepted the registration",
                self.servers.len(),
                self.group
            );
        }
        // Unknown keys are worth fixing but rarely the blocker: name the first failure
        // further down the chain when there is one.
        let failed = self
            .steps
            .iter()
            .find(|s| !s.ok && s.kind != StepKind::Config)
            .or_else(|| self.steps.iter().find(|s| !s.ok));
        match failed {
            Some(s) => format!("no TC accepted: {} ({})", s.title, s.kind.name()),
            None => format!("no TC accepted for group `{}`", self.group),
        }
    }

    /// The text form: one line per step, evidence and fixes indented.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.steps {
            let mark = if s.ok { '✓' } else { '✗' };
            out.push_str(&format!("{mark} {}: {}\n", s.kind.name(), s.title));
            for e in &s.evidence {
                out.push_str(&format!("    {e}\n"));
            }
            for f in &s.fix {
                out.push_str(&format!("    fix: {f}\n"));
            }
        }
        let mark = if self.ok() { '✓' } else { '✗' };
        out.push_str(&format!("{mark} {}\n", self.summary()));
        out
    }

    /// The JSON form (see the module docs for its shape).
    pub fn to_json(&self) -> Value {
        json!({
            "group": self.group,
            "ok": self.ok(),
            "summary": self.summary(),
            "steps": self.steps.iter().map(|s| json!({
                "step": s.kind.name(),
                "ok": s.ok,
                "title": s.title,
                "evidence": s.evidence,
                "fix": s.fix,
            })).collect::<Vec<_>>(),
            "servers": self.servers.iter().map(|s| {
                let (connect_ms, connect_error) = split(Some(&s.connect));
                let (ping_ms, ping_error) = split(s.ping.as_ref());
                let (register_ms, register_error) = split(s.register.as_ref());
                json!({
                    "address": s.address,
                    "connect_ms": connect_ms, "connect_error": connect_error,
                    "ping_ms": ping_ms, "ping_error": ping_error,
                    "register_ms": register_ms, "register_error": register_error,
                    "accepted": s.accepted(),
                })
            }).collect::<Vec<_>>(),
        })
    }
}

/// Milliseconds (3 decimals) or the error, for one step result.
fn split(r: Option<&Result<Duration, String>>) -> (Value, Value) {
    match r {
        Some(Ok(d)) => (json!(ms(*d)), Value::Null),
        Some(Err(e)) => (Value::Null, json!(e)),
        None => (Value::Null, Value::Null),
    }
}

/// A duration in milliseconds, rounded to microseconds.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(addr: &str, register: Option<Result<Duration, String>>) -> ServerResult {
        ServerResult {
            address: addr.into(),
            connect: Ok(Duration::from_micros(400)),
            ping: Some(Ok(Duration::from_micros(600))),
            register,
        }
    }

    #[test]
    fn ok_only_when_a_tc_accepted_and_the_json_has_the_documented_shape() {
        let mut r = Report {
            group: "g".into(),
            steps: vec![
                Step::ok(StepKind::Mapping, "service.vgroupMapping.g=default"),
                Step::failed(StepKind::Servers, "no TC accepted")
                    .evidence("10.0.0.1:8091 refused")
                    .fix("check the TC's version"),
            ],
            servers: vec![server("10.0.0.1:8091", Some(Err("refused".into())))],
        };
        assert!(!r.ok());
        assert!(
            r.summary()
                .starts_with("no TC accepted: no TC accepted (servers)")
        );
        let text = r.to_text();
        assert!(
            text.contains("✓ mapping: service.vgroupMapping.g=default\n"),
            "{text}"
        );
        assert!(text.contains("    fix: check the TC's version\n"), "{text}");
        let j = r.to_json();
        assert_eq!(j["ok"], false);
        assert_eq!(j["steps"][1]["step"], "servers");
        assert_eq!(j["servers"][0]["connect_ms"], 0.4);
        assert_eq!(j["servers"][0]["register_error"], "refused");
        assert_eq!(j["servers"][0]["accepted"], false);
        r.servers
            .push(server("10.0.0.2:8091", Some(Ok(Duration::from_millis(1)))));
        assert!(r.ok());
        assert!(
            r.summary().starts_with("ok: 1 of 2 TC(s)"),
            "{}",
            r.summary()
        );
    }
}
