//! Eureka JSON: our registration body, reading instances, the local mirror of the
//! registry and its reconcile hash code.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use meshline_registry_core::Instance;
use serde_json::{Value, json};

use super::KIND;

/// Eureka's application name for a cluster: upper-cased, as Eureka stores it and as
/// Seata asks for it (`getApplication(cluster.toUpperCase())`).
pub(crate) fn app_name(cluster: &str) -> String {
    cluster.to_uppercase()
}

/// Seata's instance ID: `<ip>:<application>:<port>`.
pub(crate) fn instance_id(cluster: &str, instance: &Instance) -> String {
    format!("{}:{cluster}:{}", instance.java_host(), instance.port())
}

fn whole_secs(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

/// The body of `POST /apps/{APP}` for one of our instances.
pub(crate) fn register_body(
    cluster: &str,
    instance: &Instance,
    renewal: Duration,
    lease: Duration,
    dirty_ms: u128,
) -> Value {
    let app = app_name(cluster);
    let host = instance.java_host();
    let port = instance.port();
    let metadata = crate::common::json_metadata(instance);
    let base = if host.contains(':') {
        format!("http://[{host}]:{port}/")
    } else {
        format!("http://{host}:{port}/")
    };
    json!({"instance": {
        "instanceId": instance_id(cluster, instance),
        "hostName": host,
        "app": app,
        "ipAddr": host,
        "status": "UP",
        "overriddenstatus": "UNKNOWN",
        "port": {"$": port, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn"
        },
        "leaseInfo": {
            "renewalIntervalInSecs": whole_secs(renewal),
            "durationInSecs": whole_secs(lease),
        },
        "metadata": metadata,
        "homePageUrl": base,
        "statusPageUrl": format!("{base}info"),
        "healthCheckUrl": format!("{base}health"),
        "vipAddress": cluster,
        "secureVipAddress": cluster,
        "isCoordinatingDiscoveryServer": "false",
        "lastDirtyTimestamp": dirty_ms.to_string(),
    }})
}

/// `[x]` or `x` (older Jersey codecs send one element as an object) or nothing.
fn one_or_many(v: Option<&Value>) -> Vec<&Value> {
    match v {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other],
    }
}

/// An instance's ID: `instanceId`, else `hostName` (Eureka's `InstanceInfo.getId`).
pub(crate) fn id_of(inst: &Value) -> Option<String> {
    ["instanceId", "hostName"].iter().find_map(|k| {
        inst.get(*k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    })
}

fn status_of(inst: &Value) -> String {
    inst.get("status")
        .and_then(Value::as_str)
        .unwrap_or("UNKNOWN")
        .to_string()
}

/// `{"$": 8091, "@enabled": "true"}`, `{"$": "8091"}` or a bare number.
fn port_of(inst: &Value) -> Result<u16, String> {
    let p = inst.get("port").ok_or("no `port`")?;
    let raw = match p {
        Value::Object(o) => o.get("$").ok_or("`port` has no `$`")?,
        other => other,
    };
    let n = match raw {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("port `{raw}` is not a number"))?;
    // Seata keeps 0 < port < 0xFFFF.
    u16::try_from(n)
        .ok()
        .filter(|p| *p != 0 && *p != u16::MAX)
        .ok_or_else(|| format!("port {n} is not in 1..65535"))
}

/// Reports a malformed or skipped entry of `cluster` (an application name, or
/// [`ALL_APPS`] for the registry-wide documents) through
/// [`malformed_entry`](meshline_registry_core::redact::malformed_entry): truncated,
/// rate-limited per cluster.
fn malformed(cluster: &str, id: &str, value: &str, reason: &str) {
    meshline_registry_core::redact::malformed_entry(
        KIND,
        cluster,
        id.as_bytes(),
        value.as_bytes(),
        reason,
    );
}

/// The "cluster" malformed entries of the whole-registry documents (full and delta) are
/// reported under when they name no application.
pub(crate) const ALL_APPS: &str = "<applications>";

/// An UP instance's address, weight (metadata `weight`), zone (metadata `zone`) and
/// metadata. Errors name what is wrong; `cluster` names where a bad weight is reported.
pub(crate) fn to_instance(cluster: &str, inst: &Value) -> Result<Instance, String> {
    let ip = inst
        .get("ipAddr")
        .and_then(Value::as_str)
        .ok_or("no `ipAddr`")?;
    let port = port_of(inst)?;
    let mut out = Instance::new(ip, port).map_err(|e| e.to_string())?;
    if let Some(md) = inst.get("metadata").and_then(Value::as_object) {
        for (k, v) in md {
            let Some(s) = v.as_str() else { continue };
            match k.as_str() {
                "weight" => match s.trim().parse::<f64>() {
                    // Seata writes "1"; Java clients may write "1.0".
                    Ok(w) if w.is_finite() && w >= 0.0 => {
                        out = out.with_weight(w.round().min(u32::MAX as f64) as u32)
                    }
                    _ => malformed(
                        cluster,
                        &id_of(inst).unwrap_or_default(),
                        s,
                        "metadata weight is not a number; using 1",
                    ),
                },
                "zone" if !s.is_empty() => out = out.with_zone(s),
                _ => {}
            }
            out = out.with_metadata(k.clone(), s);
        }
    }
    Ok(out)
}

/// The local copy of the registry: app -> instance ID -> instance JSON.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    pub apps: HashMap<String, HashMap<String, Value>>,
}

/// Why an `applications` document could not be used.
pub(crate) type ParseError = String;

fn applications_of(doc: &Value) -> Result<(&Value, Option<String>), ParseError> {
    let apps = doc
        .get("applications")
        .ok_or("no `applications` object in the response")?;
    if !apps.is_object() {
        return Err("`applications` is not an object".into());
    }
    let hash = apps
        .get("apps__hashcode")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((apps, hash))
}

impl Mirror {
    /// A mirror from a full `GET /apps` document. Instances without an ID are skipped
    /// with a warning.
    pub(crate) fn from_full(doc: &Value) -> Result<Mirror, ParseError> {
        let (apps, _) = applications_of(doc)?;
        let mut m = Mirror::default();
        for app in one_or_many(apps.get("application")) {
            let Some(name) = app.get("name").and_then(Value::as_str) else {
                malformed(ALL_APPS, "", "", "skipping an application without a name");
                continue;
            };
            let entry = m.apps.entry(name.to_uppercase()).or_default();
            for inst in one_or_many(app.get("instance")) {
                match id_of(inst) {
                    Some(id) => {
                        entry.insert(id, inst.clone());
                    }
                    None => malformed(
                        name,
                        "",
                        "",
                        "skipping an instance without instanceId or hostName",
                    ),
                }
            }
        }
        Ok(m)
    }

    /// Applies a `GET /apps/delta` document; returns the server's `apps__hashcode`.
    pub(crate) fn apply_delta(&mut self, doc: &Value) -> Result<Option<String>, ParseError> {
        let (apps, hash) = applications_of(doc)?;
        for app in one_or_many(apps.get("application")) {
            let app_name = app
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_uppercase);
            for inst in one_or_many(app.get("instance")) {
                let Some(id) = id_of(inst) else {
                    malformed(
                        app_name.as_deref().unwrap_or(ALL_APPS),
                        "",
                        "",
                        "skipping a delta instance without an ID",
                    );
                    continue;
                };
                let Some(name) = app_name.clone().or_else(|| {
                    inst.get("app")
                        .and_then(Value::as_str)
                        .map(str::to_uppercase)
                }) else {
                    malformed(
                        ALL_APPS,
                        &id,
                        "",
                        "skipping a delta instance without an application",
                    );
                    continue;
                };
                match inst.get("actionType").and_then(Value::as_str) {
                    Some("ADDED") | Some("MODIFIED") => {
                        self.apps.entry(name).or_default().insert(id, inst.clone());
                    }
                    Some("DELETED") => {
                        if let Some(m) = self.apps.get_mut(&name) {
                            m.remove(&id);
                            if m.is_empty() {
                                self.apps.remove(&name);
                            }
                        }
                    }
                    other => malformed(
                        &name,
                        &id,
                        other.unwrap_or("<none>"),
                        "skipping a delta entry with an unknown actionType",
                    ),
                }
            }
        }
        Ok(hash)
    }

    /// Eureka's reconcile hash code: `STATUS_count_` for every status, sorted.
    pub(crate) fn hashcode(&self) -> String {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for inst in self.apps.values().flat_map(HashMap::values) {
            *counts.entry(status_of(inst)).or_default() += 1;
        }
        counts.iter().map(|(s, n)| format!("{s}_{n}_")).collect()
    }

    /// The UP members of `cluster`'s application; malformed ones are skipped with a
    /// warning naming them.
    pub(crate) fn members(&self, cluster: &str) -> Vec<Instance> {
        let Some(m) = self.apps.get(&app_name(cluster)) else {
            return Vec::new();
        };
        up_instances(cluster, m.values())
    }
}

/// The UP instances among `list`, malformed ones skipped with a warning.
pub(crate) fn up_instances<'a>(
    cluster: &str,
    list: impl IntoIterator<Item = &'a Value>,
) -> Vec<Instance> {
    let mut out = Vec::new();
    for inst in list {
        if status_of(inst) != "UP" {
            continue;
        }
        match to_instance(cluster, inst) {
            Ok(i) => out.push(i),
            Err(reason) => malformed(
                cluster,
                &id_of(inst).unwrap_or_else(|| "<no id>".into()),
                "",
                &reason,
            ),
        }
    }
    out
}

/// The UP instances of a `GET /apps/{APP}` document.
pub(crate) fn parse_application(cluster: &str, doc: &Value) -> Result<Vec<Instance>, ParseError> {
    let app = doc
        .get("application")
        .filter(|a| a.is_object())
        .ok_or("no `application` object in the response")?;
    Ok(up_instances(cluster, one_or_many(app.get("instance"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(id: &str, ip: &str, port: Value, status: &str) -> Value {
        json!({"instanceId": id, "app": "DEFAULT", "ipAddr": ip, "status": status, "port": port, "metadata": {"weight": "2"}})
    }

    #[test]
    fn register_body_follows_seata() {
        let i = Instance::parse("10.0.0.1:8091").unwrap().with_zone("z");
        let b = register_body(
            "default",
            &i,
            Duration::from_millis(1500),
            Duration::from_secs(3),
            42,
        );
        let x = &b["instance"];
        assert_eq!(x["instanceId"], "10.0.0.1:default:8091");
        assert_eq!(x["app"], "DEFAULT");
        assert_eq!(x["port"]["$"], 8091);
        assert_eq!(x["metadata"]["weight"], "1");
        assert_eq!(x["leaseInfo"]["renewalIntervalInSecs"], 2);
        assert_eq!(x["leaseInfo"]["durationInSecs"], 3);
        let back = to_instance("default", x).unwrap();
        assert_eq!(back.key(), i.key());
        assert_eq!(back.zone(), Some("z"));
    }

    #[test]
    fn both_json_shapes_and_garbage() {
        // Single application / instance as objects (old Jersey codec).
        let doc = json!({"applications": {"apps__hashcode": "UP_1_", "application":
            {"name": "default", "instance": inst("a", "10.0.0.1", json!({"$": "8091", "@enabled": "true"}), "UP")}}});
        let m = Mirror::from_full(&doc).unwrap();
        let list = m.members("default");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].to_string(), "10.0.0.1:8091");
        assert_eq!(list[0].weight(), 2);
        assert_eq!(m.hashcode(), "UP_1_");

        let doc = json!({"applications": {"application": [{"name": "DEFAULT", "instance": [
            inst("ok", "10.0.0.1", json!({"$": 1}), "UP"),
            inst("down", "10.0.0.2", json!({"$": 2}), "DOWN"),
            inst("p0", "10.0.0.3", json!({"$": 0}), "UP"),
            inst("pbig", "10.0.0.3", json!({"$": 65535}), "UP"),
            inst("pstr", "10.0.0.3", json!({"$": "x"}), "UP"),
            inst("badip", "not an ip!", json!({"$": 9}), "UP"),
            json!({"status": "UP"}),
        ]}]}});
        let m = Mirror::from_full(&doc).unwrap();
        assert_eq!(m.members("default").len(), 1);
        assert_eq!(m.hashcode(), "DOWN_1_UP_5_");
        assert!(Mirror::from_full(&json!({"x": 1})).is_err());
    }

    #[test]
    fn delta_adds_modifies_deletes() {
        let mut m = Mirror::default();
        let mut a = inst("a", "10.0.0.1", json!({"$": 1}), "UP");
        a["actionType"] = json!("ADDED");
        let mut b = inst("b", "10.0.0.2", json!({"$": 1}), "UP");
        b["actionType"] = json!("ADDED");
        let h = m
            .apply_delta(&json!({"applications": {"apps__hashcode": "UP_2_", "application": [{"name": "DEFAULT", "instance": [a, b.clone()]}]}}))
            .unwrap();
        assert_eq!(h.as_deref(), Some("UP_2_"));
        assert_eq!(m.hashcode(), "UP_2_");
        b["actionType"] = json!("MODIFIED");
        b["status"] = json!("OUT_OF_SERVICE");
        let mut a_del = inst("a", "10.0.0.1", json!({"$": 1}), "UP");
        a_del["actionType"] = json!("DELETED");
        m.apply_delta(
            &json!({"applications": {"application": {"name": "DEFAULT", "instance": [b, a_del]}}}),
        )
        .unwrap();
        assert_eq!(m.hashcode(), "OUT_OF_SERVICE_1_");
        assert!(m.members("default").is_empty());
    }

    /// Every malformed instance was logged whole, per fetch. Now:
    /// truncated, one line per cluster per period.
    #[test]
    fn malformed_instance_logs_are_truncated_and_rate_limited() {
        let huge = "i".repeat(100_000);
        let list: Vec<Value> = (0..50)
            .map(|_| {
                json!({"instanceId": huge, "status": "UP", "ipAddr": "not an ip!", "port": 1,
                "metadata": {"weight": huge}})
            })
            .collect();
        let logs = meshline_testkit::watch::LogBuf::default();
        let guard = logs.capture();
        for _ in 0..3 {
            assert!(up_instances("rate-limit-test", &list).is_empty());
        }
        drop(guard);
        let text = logs.text();
        assert_eq!(text.lines().count(), 1, "{}", &text[..text.len().min(2000)]);
        assert!(text.len() < 2_000, "a {} byte log line", text.len());
    }

    /// The member `inst` should give, decided independently of `to_instance`.
    fn expected(inst: &Value) -> Option<Instance> {
        if inst.get("status").and_then(Value::as_str) != Some("UP") {
            return None;
        }
        let ip = inst.get("ipAddr")?.as_str()?;
        let p = inst.get("port")?;
        let raw = match p {
            Value::Object(o) => o.get("$")?,
            other => other,
        };
        let n = match raw {
            Value::Number(n) => n.as_u64()?,
            Value::String(s) => s.trim().parse().ok()?,
            _ => return None,
        };
        let port = u16::try_from(n)
            .ok()
            .filter(|p| *p != 0 && *p != u16::MAX)?;
        Instance::new(ip, port).ok()
    }

    fn keys(list: &[Instance]) -> Vec<String> {
        let mut k: Vec<String> = list.iter().map(|i| i.key().to_string()).collect();
        k.sort();
        k
    }

    /// Arbitrary full and delta documents never panic the decoder;
    /// members are exactly the well-formed UP instances the mirror holds.
    #[test]
    fn full_and_delta_documents_never_panic_and_keep_only_well_formed_members() {
        use crate::testjson::{Rng, mutate, value};
        let valid = json!({"instanceId": "10.0.0.1:default:8091", "app": "DEFAULT",
            "ipAddr": "10.0.0.1", "status": "UP", "port": {"$": 8091, "@enabled": "true"},
            "metadata": {"weight": "2", "zone": "z"}, "actionType": "ADDED"});
        let doc = |rng: &mut Rng| -> Value {
            if rng.chance(10) {
                return value(rng, 5);
            }
            let apps: Vec<Value> = (0..rng.below(3))
                .map(|_| {
                    let insts: Vec<Value> = (0..rng.below(5))
                        .map(|_| {
                            let mut i = valid.clone();
                            i["instanceId"] = json!(format!("id{}", rng.below(6)));
                            i["actionType"] =
                                json!(*rng.pick(&["ADDED", "MODIFIED", "DELETED", "X"]));
                            for _ in 0..rng.below(3) {
                                mutate(rng, &mut i);
                            }
                            i
                        })
                        .collect();
                    let mut app = json!({"name": *rng.pick(&["DEFAULT", "default", "OTHER"]),
                        "instance": insts});
                    if rng.chance(20) {
                        mutate(rng, &mut app);
                    }
                    app
                })
                .collect();
            let mut d = json!({"applications": {"apps__hashcode": "UP_1_", "application": apps}});
            if rng.chance(10) {
                mutate(rng, &mut d);
            }
            d
        };
        for seed in 0..2000u64 {
            let mut rng = Rng::new(seed);
            let full = doc(&mut rng);
            let Ok(mut m) = Mirror::from_full(&full) else {
                continue;
            };
            for _ in 0..rng.below(4) {
                let delta = doc(&mut rng);
                let _ = m.apply_delta(&delta);
            }
            let _ = m.hashcode();
            for cluster in ["default", "other", "missing"] {
                let got = m.members(cluster);
                let want: Vec<Instance> = m
                    .apps
                    .get(&app_name(cluster))
                    .map(|a| a.values().filter_map(expected).collect())
                    .unwrap_or_default();
                assert_eq!(keys(&got), keys(&want), "seed {seed}: {full}");
            }
            for (id, inst) in m.apps.values().flat_map(|a| a.iter()) {
                assert_eq!(id_of(inst).as_deref(), Some(id.as_str()), "seed {seed}");
            }
            let _ = parse_application("default", &value(&mut rng, 4));
        }
    }
}
