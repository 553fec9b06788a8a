//! The answers of the read endpoints: an instance's JSON form, the `applications`
//! document, and its rendering as JSON or XML (as `Accept` asks) with an `ETag`.

use std::hash::{Hash, Hasher};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::state::{Db, Rec};

impl Rec {
    /// The instance as the server shows it: the registered object with the fields the
    /// server owns overlaid, and `actionType` `action`.
    pub(super) fn to_json(&self, action: &str) -> Value {
        let mut o = self.body.clone();
        o.insert("instanceId".into(), json!(self.id));
        o.insert("app".into(), json!(self.app));
        o.insert("status".into(), json!(self.effective_status()));
        o.remove("overriddenstatus");
        o.insert("overriddenStatus".into(), json!(self.overridden));
        o.insert(
            "leaseInfo".into(),
            json!({
                "renewalIntervalInSecs": self.renewal_secs,
                "durationInSecs": self.lease.as_secs(),
                "registrationTimestamp": self.registration_ms as u64,
                "lastRenewalTimestamp": self.last_renewal_ms as u64,
                "evictionTimestamp": 0,
                "serviceUpTimestamp": self.up_ms as u64,
            }),
        );
        o.entry("metadata").or_insert_with(|| json!({}));
        o.insert("isCoordinatingDiscoveryServer".into(), json!("false"));
        o.insert(
            "lastUpdatedTimestamp".into(),
            json!(self.last_updated_ms.to_string()),
        );
        o.insert(
            "lastDirtyTimestamp".into(),
            json!(self.last_dirty_ms.to_string()),
        );
        o.insert("actionType".into(), json!(action));
        Value::Object(o)
    }
}

/// True when `Accept` asks for JSON; the server answers XML otherwise.
fn wants_json(h: &HeaderMap) -> bool {
    h.get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json"))
}

/// Renders `v` (the JSON form, `{"applications": {...}}`) as JSON or XML, with an ETag.
pub(super) fn render(h: &HeaderMap, v: &Value) -> Response {
    let (body, ctype) = if wants_json(h) {
        (v.to_string(), "application/json")
    } else {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>");
        if let Some(o) = v.as_object() {
            for (k, child) in o {
                to_xml(k, child, &mut out);
            }
        }
        (out, "application/xml")
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    let not_modified = h
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut r = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, body).into_response()
    };
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static(ctype));
    if let Ok(e) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert("etag", e);
    }
    r
}

/// Escapes `s` as XML text or attribute value.
fn xml_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

/// Eureka's JSON is the XStream mapping of its XML: `@x` keys are attributes, `$` is the
/// text, arrays are repeated elements. This reverses it.
fn to_xml(name: &str, v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            for i in items {
                to_xml(name, i, out);
            }
        }
        Value::Object(o) => {
            out.push('<');
            out.push_str(name);
            for (k, a) in o {
                if let Some(attr) = k.strip_prefix('@') {
                    out.push(' ');
                    out.push_str(attr);
                    out.push_str("=\"");
                    xml_escape(&scalar_text(a), out);
                    out.push('"');
                }
            }
            out.push('>');
            for (k, child) in o {
                if k == "$" {
                    xml_escape(&scalar_text(child), out);
                } else if !k.starts_with('@') {
                    to_xml(k, child, out);
                }
            }
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
        other => {
            out.push('<');
            out.push_str(name);
            out.push('>');
            xml_escape(&scalar_text(other), out);
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
    }
}

/// The text of a JSON scalar.
fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The `applications` document of the instances `filter` keeps.
pub(super) fn applications(db: &Db, filter: impl Fn(&Rec) -> bool) -> Value {
    let apps: Vec<Value> = db
        .apps
        .iter()
        .filter_map(|(name, m)| {
            let inst: Vec<Value> = m
                .values()
                .filter(|r| filter(r))
                .map(|r| r.to_json("ADDED"))
                .collect();
            (!inst.is_empty()).then(|| json!({"name": name, "instance": inst}))
        })
        .collect();
    applications_doc(db, apps)
}

/// The `{"applications": ...}` document of `apps` (each `{"name", "instance"}`), with the
/// registry's version and hash code.
pub(super) fn applications_doc(db: &Db, apps: Vec<Value>) -> Value {
    json!({"applications": {
        "versions__delta": db.version.to_string(),
        "apps__hashcode": db.hashcode(),
        "application": apps,
    }})
}
