//! [`BusinessActionContext`]: what a TCC branch carries from its try to its confirm and
//! cancel (Seata's class of the same name), and [`ActionParams`], the try's parameters
//! that go into it.

use serde_json::{Map, Value};

/// One parameter of a try, as Seata's `@BusinessActionContextParameter` records it in
/// the branch's context (and as fastjson writes it: numbers bare, strings quoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionValue {
    /// `true` / `false`.
    Bool(bool),
    /// A whole number (Java `int` / `long`).
    Int(i64),
    /// A decimal written exactly as given, e.g. `"12.50"` (Java `BigDecimal`, whose
    /// `toString` fastjson writes): money, without a float's rounding. Must be a JSON
    /// number.
    Decimal(String),
    /// Text.
    Str(String),
}

impl From<bool> for ActionValue {
    fn from(v: bool) -> Self {
        ActionValue::Bool(v)
    }
}

impl From<i64> for ActionValue {
    fn from(v: i64) -> Self {
        ActionValue::Int(v)
    }
}

impl From<i32> for ActionValue {
    fn from(v: i32) -> Self {
        ActionValue::Int(v.into())
    }
}

impl From<u32> for ActionValue {
    fn from(v: u32) -> Self {
        ActionValue::Int(v.into())
    }
}

impl From<&str> for ActionValue {
    fn from(v: &str) -> Self {
        ActionValue::Str(v.to_string())
    }
}

impl From<String> for ActionValue {
    fn from(v: String) -> Self {
        ActionValue::Str(v)
    }
}

/// A try's parameters, in declaration order (the order Seata's interceptor reads a
/// method's annotated parameters in: it decides the JSON's key order with the names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionParams(pub(crate) Vec<(String, ActionValue)>);

impl ActionParams {
    /// No parameters.
    pub fn new() -> Self {
        ActionParams::default()
    }

    /// Adds the parameter `name` (a name given twice keeps its first place and the
    /// last value, as a Java map does).
    pub fn param(mut self, name: impl Into<String>, value: impl Into<ActionValue>) -> Self {
        self.0.push((name.into(), value.into()));
        self
    }

    /// A [`ActionValue::Decimal`] parameter; an error when `value` is not a JSON number.
    pub fn decimal(self, name: impl Into<String>, value: &str) -> Result<Self, String> {
        match serde_json::from_str::<Value>(value) {
            Ok(Value::Number(_)) => Ok(self.param(name, ActionValue::Decimal(value.to_string()))),
            _ => Err(format!("{value:?} is not a decimal number")),
        }
    }
}

/// What a TCC branch knows in phase two: its transaction, its id, its action, and the
/// context its try recorded (the try's parameters and Seata's own keys:
/// `sys::prepare`, `sys::commit`, `sys::rollback`, `actionName`, `useTCCFence`,
/// `action-start-time`, `host-name`).
#[derive(Debug, Clone, PartialEq)]
pub struct BusinessActionContext {
    pub(crate) xid: String,
    pub(crate) branch_id: i64,
    pub(crate) action_name: String,
    pub(crate) action_context: Map<String, Value>,
}

impl BusinessActionContext {
    /// A context (what phase two builds from the TC's request).
    pub fn new(
        xid: impl Into<String>,
        branch_id: i64,
        action_name: impl Into<String>,
        action_context: Map<String, Value>,
    ) -> Self {
        BusinessActionContext {
            xid: xid.into(),
            branch_id,
            action_name: action_name.into(),
            action_context,
        }
    }

    /// The global transaction.
    pub fn xid(&self) -> &str {
        &self.xid
    }

    /// The branch.
    pub fn branch_id(&self) -> i64 {
        self.branch_id
    }

    /// The action (the TCC resource id).
    pub fn action_name(&self) -> &str {
        &self.action_name
    }

    /// Every key the try recorded.
    pub fn action_context(&self) -> &Map<String, Value> {
        &self.action_context
    }

    /// The value recorded under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.action_context.get(key)
    }

    /// The text recorded under `key`.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The whole number recorded under `key` (written as a number or as text).
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// Whether the try ran under the fence (`useTCCFence`): phase two then goes through
    /// it too.
    pub fn use_fence(&self) -> bool {
        self.get("useTCCFence") == Some(&Value::Bool(true))
    }
}
