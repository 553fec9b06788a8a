//! Turning Consul's `/v1/health/service/:name` JSON into [`Instance`]s, and our
//! registrations into Consul's agent JSON.

use meshline_registry_core::Instance;
use serde_json::{Value, json};

/// The tag Seata's TC puts on its service instances and its client asks for
/// (`tag=services`).
pub(crate) const SEATA_TAG: &str = "services";

/// The service ID Seata's `ConsulRegistryServiceImpl` uses: `<cluster>-<ip>:<port>`, the
/// address in Java's `NetUtil.toStringAddress` form.
pub(crate) fn service_id(cluster: &str, instance: &Instance) -> String {
    format!("{cluster}-{}", instance.to_java_string())
}

/// The check ID Consul gives a service's single check: `service:<service id>`.
pub(crate) fn check_id(service_id: &str) -> String {
    format!("service:{service_id}")
}

/// The body of `PUT /v1/agent/service/register` for one of our instances: Seata's layout
/// (name = cluster, tag `services`) plus a TTL check we keep passing.
pub(crate) fn register_body(
    cluster: &str,
    instance: &Instance,
    ttl: std::time::Duration,
    deregister_after: std::time::Duration,
) -> Value {
    let id = service_id(cluster, instance);
    let meta = crate::common::json_metadata(instance);
    json!({
        "ID": id,
        "Name": cluster,
        "Tags": [SEATA_TAG],
        "Address": instance.java_host(),
        "Port": instance.port(),
        "Meta": meta,
        // Consul refuses Passing < 1; a weight of 0 is carried in Meta only.
        "Weights": {"Passing": instance.weight().max(1), "Warning": 1},
        "Check": {
            "CheckID": check_id(&id),
            "Name": format!("meshline TTL for {id}"),
            "TTL": format!("{}ms", ttl.as_millis().max(1)),
            "Status": "passing",
            "DeregisterCriticalServiceAfter": format!("{}ms", deregister_after.as_millis().max(1)),
        },
    })
}

/// One health entry: `{"Node": {...}, "Service": {...}, "Checks": [...]}`.
///
/// The host is `Service.Address`, falling back to `Node.Address` when empty (Consul's
/// rule); the weight is `Meta.weight` when it is a number, else `Weights.Passing`; the
/// zone is `Meta.zone`; all string `Meta` entries become metadata.
pub(crate) fn parse_entry(entry: &Value) -> Result<Instance, String> {
    let svc = entry
        .get("Service")
        .and_then(Value::as_object)
        .ok_or("no `Service` object")?;
    let svc_addr = svc.get("Address").and_then(Value::as_str).unwrap_or("");
    let host = if svc_addr.trim().is_empty() {
        entry
            .get("Node")
            .and_then(|n| n.get("Address"))
            .and_then(Value::as_str)
            .unwrap_or("")
    } else {
        svc_addr
    };
    if host.trim().is_empty() {
        return Err("neither Service.Address nor Node.Address is set".into());
    }
    let port = svc
        .get("Port")
        .and_then(Value::as_u64)
        .ok_or("`Service.Port` is not a number")?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("port {port} is not in 1..=65535"))?;
    let mut inst = Instance::new(host, port).map_err(|e| e.to_string())?;
    let meta = svc.get("Meta").and_then(Value::as_object);
    let meta_weight = meta
        .and_then(|m| m.get("weight"))
        .and_then(Value::as_str)
        .and_then(|w| w.trim().parse::<u32>().ok());
    let weights_passing = svc
        .get("Weights")
        .and_then(|w| w.get("Passing"))
        .and_then(Value::as_u64)
        .and_then(|w| u32::try_from(w).ok());
    if let Some(w) = meta_weight.or(weights_passing) {
        inst = inst.with_weight(w);
    }
    if let Some(m) = meta {
        inst = crate::common::with_json_metadata(inst, m);
    }
    Ok(inst)
}

/// Parses a whole health response, skipping every entry that is not a usable instance.
/// Skipped entries are reported through
/// [`malformed_entry`](meshline_registry_core::redact::malformed_entry): the service ID
/// as the key, truncated, and at most one line per cluster per period, so a registry
/// full of huge garbage entries costs a few short lines. A body that is not a JSON
/// array is an error.
pub(crate) fn parse_health(cluster: &str, body: &[u8]) -> Result<Vec<Instance>, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("response is not JSON: {e}"))?;
    let entries = v.as_array().ok_or("response is not a JSON array")?;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        match parse_entry(e) {
            Ok(i) => out.push(i),
            Err(reason) => {
                let id = e
                    .get("Service")
                    .and_then(|s| s.get("ID"))
                    .and_then(Value::as_str)
                    .unwrap_or("<no ID>");
                meshline_registry_core::redact::malformed_entry(
                    "consul",
                    cluster,
                    id.as_bytes(),
                    b"",
                    &reason,
                );
            }
        }
    }
    Ok(out)
}

/// Parses `GET /v1/catalog/services` (`{"<service>": ["<tag>", ...], ...}`) into the
/// services that carry [`SEATA_TAG`], in name order. An entry whose tags are not a list
/// of strings is skipped (its other tags cannot be trusted); a body that is not a JSON
/// object is an error.
pub(crate) fn parse_catalog_services(body: &[u8]) -> Result<Vec<String>, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("response is not JSON: {e}"))?;
    let services = v.as_object().ok_or("response is not a JSON object")?;
    let mut out: Vec<String> = services
        .iter()
        .filter(|(_, tags)| {
            tags.as_array()
                .is_some_and(|t| t.iter().any(|t| t.as_str() == Some(SEATA_TAG)))
        })
        .map(|(name, _)| name.clone())
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_services_with_seata_tag() {
        let body = br#"{"consul":[],"default2":["services","x"],"web":["http"],"odd":"services","a":["services"]}"#;
        assert_eq!(parse_catalog_services(body).unwrap(), vec!["a", "default2"]);
        assert!(parse_catalog_services(b"[]").is_err());
        assert!(parse_catalog_services(b"not json").is_err());
    }

    #[test]
    fn ids_follow_seata() {
        let i = Instance::parse("10.0.0.1:8091").unwrap();
        assert_eq!(service_id("default", &i), "default-10.0.0.1:8091");
        let v6 = Instance::parse("[2000::1]:8091").unwrap();
        assert_eq!(service_id("c", &v6), "c-2000:0:0:0:0:0:0:1:8091");
        assert_eq!(check_id("c-x"), "service:c-x");
    }

    #[test]
    fn register_body_has_seata_layout_and_ttl() {
        let i = Instance::parse("10.0.0.1:8091")
            .unwrap()
            .with_weight(0)
            .with_zone("z1");
        let b = register_body(
            "default",
            &i,
            std::time::Duration::from_secs(2),
            std::time::Duration::from_secs(20),
        );
        assert_eq!(b["ID"], "default-10.0.0.1:8091");
        assert_eq!(b["Name"], "default");
        assert_eq!(b["Tags"], json!(["services"]));
        assert_eq!(b["Address"], "10.0.0.1");
        assert_eq!(b["Port"], 8091);
        assert_eq!(b["Weights"]["Passing"], 1);
        assert_eq!(b["Meta"]["weight"], "0");
        assert_eq!(b["Meta"]["zone"], "z1");
        assert_eq!(b["Check"]["TTL"], "2000ms");
        assert_eq!(b["Check"]["CheckID"], "service:default-10.0.0.1:8091");
        // And it parses back to the same instance.
        let entry = json!({"Node": {"Address": "10.9.9.9"}, "Service": b});
        let back = parse_entry(&entry).unwrap();
        assert_eq!(back.key(), i.key());
        assert_eq!(back.weight(), 0);
        assert_eq!(back.zone(), Some("z1"));
    }

    #[test]
    fn node_address_is_the_fallback_and_weights_are_read() {
        let e = json!({"Node": {"Address": "10.0.0.7"}, "Service": {"Address": "", "Port": 80, "Weights": {"Passing": 3}}});
        let i = parse_entry(&e).unwrap();
        assert_eq!(i.to_string(), "10.0.0.7:80");
        assert_eq!(i.weight(), 3);
    }

    #[test]
    fn garbage_is_skipped_not_fatal() {
        let body = json!([
            {"Node": {"Address": "10.0.0.1"}, "Service": {"ID": "ok", "Address": "10.0.0.2", "Port": 1}},
            {"Node": {"Address": "10.0.0.1"}, "Service": {"ID": "port0", "Address": "10.0.0.3", "Port": 0}},
            {"Node": {"Address": "10.0.0.1"}, "Service": {"ID": "bighost", "Address": "bad host!", "Port": 5}},
            {"Node": {"Address": "10.0.0.1"}, "Service": {"ID": "bigport", "Address": "10.0.0.4", "Port": 70000}},
            {"Node": {}, "Service": {"ID": "noaddr", "Address": "", "Port": 5}},
            {"Service": "nonsense"},
            17
        ]);
        let list = parse_health("c", body.to_string().as_bytes()).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].to_string(), "10.0.0.2:1");
        assert!(parse_health("c", b"{}").is_err());
        assert!(parse_health("c", b"not json").is_err());
    }

    /// Every malformed entry was logged, whole (a 100 kB ID made a
    /// 100 kB line, per entry, per query). Now: truncated, one line per cluster per
    /// period.
    #[test]
    fn malformed_entry_logs_are_truncated_and_rate_limited() {
        let huge = "i".repeat(100_000);
        let entries: Vec<Value> = (0..50)
            .map(|_| json!({"Service": {"ID": huge, "Address": "bad host!", "Port": 5}}))
            .collect();
        let body = Value::Array(entries).to_string();
        let logs = meshline_testkit::watch::LogBuf::default();
        let guard = logs.capture();
        for _ in 0..3 {
            assert!(
                parse_health("rate-limit-test", body.as_bytes())
                    .unwrap()
                    .is_empty()
            );
        }
        drop(guard);
        let text = logs.text();
        assert_eq!(text.lines().count(), 1, "{}", &text[..text.len().min(2000)]);
        assert!(text.len() < 2_000, "a {} byte log line", text.len());
        assert!(text.contains("rate-limit-test"), "{text}");
    }

    /// Where `entry` should put an instance, decided independently of `parse_entry`.
    fn expected(entry: &Value) -> Option<Instance> {
        let svc = entry.get("Service")?.as_object()?;
        let sa = svc.get("Address").and_then(Value::as_str).unwrap_or("");
        let host = if sa.trim().is_empty() {
            entry.get("Node")?.get("Address")?.as_str()?
        } else {
            sa
        };
        let port = u16::try_from(svc.get("Port")?.as_u64()?).ok()?;
        if port == 0 || host.trim().is_empty() {
            return None;
        }
        Instance::new(host, port).ok()
    }

    /// Arbitrary JSON-ish bodies never panic the decoder, and exactly
    /// the well-formed entries become members, with their address.
    #[test]
    fn health_decoding_never_panics_and_keeps_only_well_formed_entries() {
        use crate::testjson::{Rng, bytes, mutate, value};
        let valid = json!({"Node": {"Address": "10.0.0.9"}, "Service": {
            "ID": "c-10.0.0.1:8091", "Address": "10.0.0.1", "Port": 8091,
            "Meta": {"weight": "3", "zone": "z"}, "Weights": {"Passing": 2}}});
        for seed in 0..3000u64 {
            let mut rng = Rng::new(seed);
            let n = rng.below(6);
            let entries: Vec<Value> = (0..n)
                .map(|_| match rng.below(3) {
                    0 => value(&mut rng, 4),
                    _ => {
                        let mut e = valid.clone();
                        for _ in 0..rng.below(3) {
                            mutate(&mut rng, &mut e);
                        }
                        e
                    }
                })
                .collect();
            let body = Value::Array(entries.clone()).to_string();
            let got = parse_health("prop", body.as_bytes())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let want: Vec<Instance> = entries.iter().filter_map(expected).collect();
            assert_eq!(got.len(), want.len(), "seed {seed}: {body:.2000}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.key(), w.key(), "seed {seed}");
                assert_ne!(g.port(), 0, "seed {seed}");
            }
            // Not an array, cut or corrupted bytes: an error or a list, never a panic.
            let _ = parse_health("prop", &bytes(&mut rng, body.as_bytes()));
            let _ = parse_health("prop", value(&mut rng, 3).to_string().as_bytes());
        }
    }
}
