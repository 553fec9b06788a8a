//! The branch's `applicationData`: the JSON Seata Java's `ActionInterceptorHandler`
//! registers a TCC branch with, byte for byte, and its reading in phase two.
//!
//! Java builds `{"actionContext": context}` where `context` is a `HashMap(8)` filled in
//! this order: the try's annotated parameters, `action-start-time` (millis),
//! `sys::prepare` (the try's method name), then every entry of a `HashMap(4)` holding
//! `sys::commit`, `sys::rollback`, `actionName` and `useTCCFence` (in that map's
//! order), then `host-name`; fastjson writes maps in their iteration order
//! ([`java_map`](super::java_map) reproduces it) and escapes strings its own way
//! (below). A Java RM of the same resource reads what meshline writes, and meshline
//! reads what Java writes (fastjson's, or Jackson's typed form with `@class` keys).

use serde_json::{Map, Value};

use super::context::{ActionParams, ActionValue};
use super::java_map::JavaHashMap;

/// Seata's keys (`org.apache.seata.common.Constants`).
pub(crate) mod keys {
    pub const ACTION_CONTEXT: &str = "actionContext";
    pub const START_TIME: &str = "action-start-time";
    pub const PREPARE: &str = "sys::prepare";
    pub const COMMIT: &str = "sys::commit";
    pub const ROLLBACK: &str = "sys::rollback";
    pub const ACTION_NAME: &str = "actionName";
    pub const USE_FENCE: &str = "useTCCFence";
    pub const HOST_NAME: &str = "host-name";
}

/// What the try's registration writes besides its parameters.
#[derive(Debug, Clone)]
pub(crate) struct Registration<'a> {
    pub action_name: &'a str,
    pub prepare: &'a str,
    pub commit: &'a str,
    pub rollback: &'a str,
    pub use_fence: bool,
    pub start_millis: i64,
    pub host: &'a str,
}

/// The `applicationData` Seata Java writes for this try.
pub(crate) fn write(params: &ActionParams, r: &Registration<'_>) -> String {
    let mut context: JavaHashMap<ActionValue> = JavaHashMap::with_capacity(8);
    for (name, value) in &params.0 {
        context.put(name, value.clone());
    }
    context.put(keys::START_TIME, ActionValue::Int(r.start_millis));
    context.put(keys::PREPARE, r.prepare.into());
    let mut business: JavaHashMap<ActionValue> = JavaHashMap::with_capacity(4);
    business.put(keys::COMMIT, r.commit.into());
    business.put(keys::ROLLBACK, r.rollback.into());
    business.put(keys::ACTION_NAME, r.action_name.into());
    business.put(keys::USE_FENCE, ActionValue::Bool(r.use_fence));
    for (k, v) in business.iter() {
        context.put(k, v.clone());
    }
    context.put(keys::HOST_NAME, r.host.into());

    let mut out = String::with_capacity(256);
    out.push_str("{\"");
    out.push_str(keys::ACTION_CONTEXT);
    out.push_str("\":{");
    for (i, (k, v)) in context.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        quoted(&mut out, k);
        out.push(':');
        match v {
            ActionValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            ActionValue::Int(n) => out.push_str(&n.to_string()),
            ActionValue::Decimal(d) => out.push_str(d),
            ActionValue::Str(s) => quoted(&mut out, s),
        }
    }
    out.push_str("}}");
    out
}

/// A string as fastjson 1.2 writes it: `"` `\` and `\b \t \n \f \r` as two-character
/// escapes; the other controls (0-7, 11, 14-31), 127-159 and U+2028 / U+2029 as
/// `\uXXXX` with upper-case hex; everything else as is (UTF-8, `/` unescaped).
fn quoted(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                let n = c as u32;
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[((n >> shift) & 0xf) as usize] as char);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The `actionContext` of an `applicationData` (empty when there is none, as Java
/// reads a blank one). An unreadable one is an error naming what is wrong.
pub(crate) fn read(application_data: Option<&str>) -> Result<Map<String, Value>, String> {
    let Some(text) = application_data.filter(|t| !t.trim().is_empty()) else {
        return Ok(Map::new());
    };
    let root: Value = serde_json::from_str(text)
        .map_err(|e| format!("the branch's applicationData is not JSON: {e}"))?;
    let Value::Object(mut root) = root else {
        return Err("the branch's applicationData is not a JSON object".into());
    };
    match root.remove(keys::ACTION_CONTEXT) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(mut m)) => {
            // Jackson's typed form names the map's class beside its entries.
            m.remove("@class");
            Ok(m)
        }
        Some(_) => Err("the branch's actionContext is not a JSON object".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(fence: bool) -> Registration<'static> {
        Registration {
            action_name: "debit",
            prepare: "prepare",
            commit: "commit",
            rollback: "rollback",
            use_fence: fence,
            start_millis: 1_733_500_000_000,
            host: "10.0.0.7",
        }
    }

    /// The bytes Seata Java (fastjson, `HashMap` order as Java 17 iterates it) writes
    /// for an action `debit` with no parameters, and with `amount` and `account`.
    #[test]
    fn the_json_is_the_one_seata_java_writes() {
        assert_eq!(
            write(&ActionParams::new(), &registration(false)),
            "{\"actionContext\":{\"action-start-time\":1733500000000,\"useTCCFence\":false,\
             \"sys::prepare\":\"prepare\",\"sys::rollback\":\"rollback\",\"sys::commit\":\"commit\",\
             \"host-name\":\"10.0.0.7\",\"actionName\":\"debit\"}}"
        );
        let params = ActionParams::new()
            .param("amount", 5)
            .param("account", "alice");
        assert_eq!(
            write(&params, &registration(true)),
            "{\"actionContext\":{\"amount\":5,\"action-start-time\":1733500000000,\"useTCCFence\":true,\
             \"sys::prepare\":\"prepare\",\"sys::rollback\":\"rollback\",\"sys::commit\":\"commit\",\
             \"host-name\":\"10.0.0.7\",\"account\":\"alice\",\"actionName\":\"debit\"}}"
        );
    }

    #[test]
    fn strings_are_escaped_as_fastjson_escapes_them() {
        let mut out = String::new();
        quoted(&mut out, "a\"b\\c/d\n\u{1}\u{b}\u{7f}\u{2028}é");
        assert_eq!(out, "\"a\\\"b\\\\c/d\\n\\u0001\\u000B\\u007F\\u2028é\"");
    }

    #[test]
    fn what_is_written_reads_back_and_bad_data_is_an_error() {
        let params = ActionParams::new()
            .param("amount", 5)
            .decimal("fee", "0.50")
            .unwrap();
        let m = read(Some(&write(&params, &registration(true)))).unwrap();
        assert_eq!(m["amount"], 5);
        assert_eq!(m["fee"].as_f64(), Some(0.5));
        assert_eq!(m["actionName"], "debit");
        assert_eq!(read(None).unwrap(), Map::new());
        assert_eq!(read(Some("  ")).unwrap(), Map::new());
        assert!(read(Some("{not json")).unwrap_err().contains("not JSON"));
        assert!(read(Some("[1]")).unwrap_err().contains("not a JSON object"));
        let typed = "{\"@class\":\"java.util.HashMap\",\"actionContext\":{\"@class\":\"java.util.HashMap\",\"amount\":5}}";
        assert_eq!(read(Some(typed)).unwrap().len(), 1);
        assert_eq!(
            ActionParams::new().decimal("x", "1,5").unwrap_err(),
            "\"1,5\" is not a decimal number"
        );
    }
}
