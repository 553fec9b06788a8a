//! Request decoding as Consul's Go decoder does it: JSON keys matched
//! case-insensitively (snake_case too), durations in Go syntax or nanoseconds, booleans
//! through `strconv.ParseBool`.

use std::time::Duration;

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::http_double::parse_go_duration;

/// The request body as a JSON object, or the text of Consul's 400 answer.
pub(super) fn object_body(body: &Bytes) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => Err("Request decode failed: not an object".into()),
        Err(e) => Err(format!("Request decode failed: {e}")),
    }
}

fn norm_key(k: &str) -> String {
    k.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Case-insensitive (and snake_case tolerant) field lookup, as Consul's decoder does.
pub(super) fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    let want = norm_key(name);
    obj.iter()
        .find(|(k, _)| norm_key(k) == want)
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

/// A string field; absent or null is `None`.
pub(super) fn str_field(obj: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{name} must be a string, got {other}")),
    }
}

/// A duration field (`"10s"` or nanoseconds); absent, null or `""` is `None`.
pub(super) fn duration_field(
    obj: &Map<String, Value>,
    name: &str,
) -> Result<Option<Duration>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => parse_go_duration(s)
            .map(Some)
            .ok_or_else(|| format!("{name}: invalid duration `{s}`")),
        // Go's API decoder also takes nanoseconds as a number.
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|ns| Some(Duration::from_nanos(ns)))
            .ok_or_else(|| format!("{name}: invalid duration {n}")),
        Some(other) => Err(format!("{name}: invalid duration {other}")),
    }
}

/// Go's `strconv.ParseBool`.
pub(super) fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}
