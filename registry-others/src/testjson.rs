//! A small deterministic generator of JSON-ish values for the property tests of the
//! Consul and Eureka decoders: random trees biased towards the keys
//! and values those decoders look at, near-valid entries with one field broken, and raw
//! byte strings (cut or corrupted JSON). Hand-rolled (xorshift) so the tests need no
//! extra dependency and every failure replays from its seed.

use serde_json::{Map, Number, Value, json};

/// xorshift64*: enough randomness for test inputs, reproducible from the seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Keys the Consul and Eureka decoders read, and a few they do not.
const KEYS: &[&str] = &[
    "Service",
    "Node",
    "Address",
    "Port",
    "Meta",
    "weight",
    "Weights",
    "Passing",
    "zone",
    "ID",
    "applications",
    "application",
    "instance",
    "name",
    "ipAddr",
    "port",
    "$",
    "@enabled",
    "status",
    "instanceId",
    "hostName",
    "metadata",
    "actionType",
    "app",
    "apps__hashcode",
    "x",
    "",
];

/// Strings that are hosts, ports, weights, statuses, actions, or garbage.
const STRINGS: &[&str] = &[
    "",
    " ",
    "UP",
    "DOWN",
    "OUT_OF_SERVICE",
    "ADDED",
    "MODIFIED",
    "DELETED",
    "default",
    "DEFAULT",
    "10.0.0.1",
    "127.0.0.1",
    "::1",
    "[::1]",
    "2000::1",
    "not an ip!",
    "host.example",
    "8091",
    "0",
    "65535",
    "65536",
    "-1",
    "1.5",
    "1e400",
    "NaN",
    "inf",
    "4294967295",
    "4294967296",
    " 7 ",
    "é",
    "\u{0}",
    "a:b:c",
    "10.0.0.1:8091",
];

fn number(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(-1),
        3 => json!(u16::MAX),
        4 => json!(u16::MAX as u64 + 1),
        5 => json!(u32::MAX),
        6 => json!(u64::MAX),
        7 => Number::from_f64(1.5)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        8 => json!(8091),
        _ => json!(rng.next() % 70_000),
    }
}

fn string(rng: &mut Rng) -> Value {
    if rng.chance(3) {
        // Long text: what a hostile registry sends to blow up log lines.
        return Value::String("x".repeat(rng.below(5000)));
    }
    Value::String((*rng.pick(STRINGS)).to_string())
}

/// Any JSON value, at most `depth` levels deep, biased towards the decoders' keys.
pub(crate) fn value(rng: &mut Rng, depth: usize) -> Value {
    let leaf = depth == 0 || rng.chance(40);
    if leaf {
        return match rng.below(5) {
            0 => Value::Null,
            1 => Value::Bool(rng.chance(50)),
            2 => number(rng),
            _ => string(rng),
        };
    }
    if rng.chance(30) {
        let n = rng.below(4);
        Value::Array((0..n).map(|_| value(rng, depth - 1)).collect())
    } else {
        let n = rng.below(5);
        let mut m = Map::new();
        for _ in 0..n {
            m.insert((*rng.pick(KEYS)).to_string(), value(rng, depth - 1));
        }
        Value::Object(m)
    }
}

/// Replaces, removes or adds one field somewhere in `v` (objects only).
pub(crate) fn mutate(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::Object(m) if !m.is_empty() && rng.chance(60) => {
            let k = m
                .keys()
                .nth(rng.below(m.len()))
                .cloned()
                .unwrap_or_default();
            if rng.chance(50) {
                if let Some(inner) = m.get_mut(&k) {
                    mutate(rng, inner);
                }
            } else if rng.chance(50) {
                m.remove(&k);
            } else {
                m.insert(k, value(rng, 2));
            }
        }
        Value::Object(m) => {
            m.insert((*rng.pick(KEYS)).to_string(), value(rng, 2));
        }
        other => *other = value(rng, 2),
    }
}

/// Raw bytes around `valid`: a prefix of it, one byte changed, or random bytes.
pub(crate) fn bytes(rng: &mut Rng, valid: &[u8]) -> Vec<u8> {
    match rng.below(3) {
        0 => valid[..rng.below(valid.len() + 1)].to_vec(),
        1 => {
            let mut b = valid.to_vec();
            if !b.is_empty() {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            b
        }
        _ => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
    }
}
