//! The namingserver double's state, as `NamingManager` and `ClusterWatcherManager` keep
//! it: namespace -> cluster -> unit -> nodes; vGroup -> namespace -> cluster -> units;
//! the last heartbeat of each transaction address; each vGroup's last change term.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::console_auth::ConsoleAuth;
use crate::http_double::lock;

/// A transaction or control endpoint.
type Endpoint = (String, u16);

fn endpoint(node: &Value, field: &str) -> Option<Endpoint> {
    let e = node.get(field)?;
    let host = e.get("host")?.as_str()?.to_string();
    let port = u16::try_from(e.get("port")?.as_u64()?).ok()?;
    Some((host, port))
}

/// Nodes are equal when both endpoints are (`NamingServerNode.equals`).
fn same(a: &Value, b: &Value) -> bool {
    endpoint(a, "control") == endpoint(b, "control")
        && endpoint(a, "transaction") == endpoint(b, "transaction")
}

fn term_of(node: &Value) -> i64 {
    node.get("term").and_then(Value::as_i64).unwrap_or(0)
}

/// `metadata.vGroup` of a node: vGroup -> unit name (may be blank or null).
fn vgroups_of(node: &Value) -> Vec<(String, Option<String>)> {
    node.get("metadata")
        .and_then(|m| m.get("vGroup"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Default)]
struct ClusterData {
    cluster_type: Option<String>,
    units: BTreeMap<String, Vec<Value>>,
}

#[derive(Default)]
pub(crate) struct Data {
    clusters: BTreeMap<String, BTreeMap<String, ClusterData>>,
    vgroups: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>,
    live: HashMap<Endpoint, (Instant, String, String)>,
    update_term: HashMap<String, i64>,
    /// vGroup -> how many change events it had (watches wait for one).
    events: HashMap<String, u64>,
}

/// Everything one run of the double knows (a restart starts from nothing).
pub(crate) struct State {
    pub data: Mutex<Data>,
    pub changes: watch::Sender<u64>,
    /// The console login (kept across restarts: the JWT secret is configured).
    pub auth: Arc<ConsoleAuth>,
}

impl State {
    pub(crate) fn new(auth: Arc<ConsoleAuth>) -> Self {
        State {
            auth,
            data: Mutex::new(Data::default()),
            changes: watch::channel(0).0,
        }
    }

    /// `ClusterChangeEvent` handling: a term above 0 or exactly -1 is recorded and
    /// wakes the vGroup's watches.
    fn event(&self, d: &mut Data, vgroup: &str, term: i64) {
        if term > 0 || term == -1 {
            d.update_term.insert(vgroup.to_string(), term);
            *d.events.entry(vgroup.to_string()).or_default() += 1;
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// `NamingManager.registerInstance`: false (a `Result` with code 500) when the node
    /// has no transaction endpoint.
    pub(crate) fn register(&self, ns: &str, cluster: &str, unit: &str, node: Value) -> bool {
        let Some(tx) = endpoint(&node, "transaction") else {
            return false;
        };
        let mut guard = lock(&self.data);
        let d = &mut *guard;
        let cd = d
            .clusters
            .entry(ns.to_string())
            .or_default()
            .entry(cluster.to_string())
            .or_insert_with(|| ClusterData {
                cluster_type: node
                    .get("metadata")
                    .and_then(|m| m.get("cluster-type"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                ..Default::default()
            });
        let list = cd.units.entry(unit.to_string()).or_default();
        let has_changed = match list.iter().position(|n| same(n, &node)) {
            Some(i) if term_of(&node) > term_of(&list[i]) => {
                list[i] = node.clone();
                true
            }
            Some(_) => false,
            None => {
                list.push(node.clone());
                true
            }
        };
        for (vgroup, u) in vgroups_of(&node) {
            let unit_name = u
                .filter(|u| !u.trim().is_empty())
                .unwrap_or_else(|| unit.to_string());
            let ns_map = d
                .vgroups
                .entry(vgroup.clone())
                .or_default()
                .entry(ns.to_string())
                .or_default();
            let units = ns_map.entry(cluster.to_string()).or_default();
            let need_notify = units.insert(unit_name);
            // NamespaceBO.removeOldCluster: a vGroup maps to one cluster.
            ns_map.retain(|c, _| c == cluster);
            if has_changed || need_notify {
                self.event(d, &vgroup, term_of(&node));
            }
        }
        d.live
            .insert(tx, (Instant::now(), ns.to_string(), cluster.to_string()));
        true
    }

    /// `NamingManager.unregisterInstance`.
    pub(crate) fn unregister(&self, ns: &str, cluster: &str, unit: &str, node: &Value) -> bool {
        let mut guard = lock(&self.data);
        let d = &mut *guard;
        let Some(cd) = d.clusters.get_mut(ns).and_then(|c| c.get_mut(cluster)) else {
            // No such namespace: nothing to do; a namespace without the cluster is a
            // NullPointerException in Seata, answered as a failure.
            return !d.clusters.contains_key(ns);
        };
        let Some(list) = cd.units.get_mut(unit) else {
            return true;
        };
        list.retain(|n| !same(n, node));
        if list.is_empty() {
            cd.units.remove(unit);
        }
        for (vgroup, u) in vgroups_of(node) {
            let real = u.unwrap_or_else(|| unit.to_string());
            if let Some(units) = d
                .vgroups
                .get_mut(&vgroup)
                .and_then(|m| m.get_mut(ns))
                .and_then(|m| m.get_mut(cluster))
            {
                units.remove(&real);
            }
            self.event(d, &vgroup, term_of(node));
        }
        if let Some(tx) = endpoint(node, "transaction") {
            d.live.remove(&tx);
        }
        true
    }

    /// `NamingController.discovery`: the clusters `vgroup` maps to in `ns`, each with
    /// the vGroup's units (all units when the set is empty), and the vGroup's term.
    pub(crate) fn discovery(&self, vgroup: &str, ns: &str) -> Value {
        let d = lock(&self.data);
        let mut clusters = Vec::new();
        if let (Some(map), Some(cdm)) = (
            d.vgroups.get(vgroup).and_then(|m| m.get(ns)),
            d.clusters.get(ns),
        ) {
            for (name, units) in map {
                let Some(cd) = cdm.get(name) else { continue };
                let unit_data: Vec<Value> = cd
                    .units
                    .iter()
                    .filter(|(u, _)| units.is_empty() || units.contains(*u))
                    .map(|(u, nodes)| json!({"unitName": u, "namingInstanceList": nodes}))
                    .collect();
                clusters.push(json!({
                    "clusterName": name,
                    "clusterType": cd.cluster_type,
                    "unitData": unit_data,
                }));
            }
        }
        let term = d.update_term.get(vgroup).copied().unwrap_or(0);
        json!({"clusterList": clusters, "term": term})
    }

    /// The vGroup's last change term, and how many changes it had.
    pub(crate) fn watch_point(&self, vgroup: &str) -> (Option<i64>, u64) {
        let d = lock(&self.data);
        (
            d.update_term.get(vgroup).copied(),
            d.events.get(vgroup).copied().unwrap_or(0),
        )
    }

    /// `NamingManager.instanceHeartBeatCheck`: removes nodes not heard from within
    /// `threshold`, dropping their units from their vGroups (change term -1).
    pub(crate) fn evict(&self, threshold: std::time::Duration) {
        let mut guard = lock(&self.data);
        let d = &mut *guard;
        let now = Instant::now();
        let mut gone: Vec<(String, String, String, Value)> = Vec::new();
        for (ns, clusters) in &mut d.clusters {
            for (cname, cd) in clusters.iter_mut() {
                for (unit, nodes) in cd.units.iter_mut() {
                    nodes.retain(|n| {
                        let alive = endpoint(n, "transaction")
                            .and_then(|tx| d.live.get(&tx))
                            .is_some_and(|(at, _, _)| now.duration_since(*at) <= threshold);
                        if !alive {
                            gone.push((ns.clone(), cname.clone(), unit.clone(), n.clone()));
                        }
                        alive
                    });
                }
                cd.units.retain(|_, n| !n.is_empty());
            }
        }
        for (ns, cluster, unit, node) in gone {
            if let Some(tx) = endpoint(&node, "transaction") {
                d.live.remove(&tx);
            }
            for (vgroup, u) in vgroups_of(&node) {
                if let Some(units) = d
                    .vgroups
                    .get_mut(&vgroup)
                    .and_then(|m| m.get_mut(&ns))
                    .and_then(|m| m.get_mut(&cluster))
                {
                    units.remove(&u.unwrap_or_else(|| unit.clone()));
                }
                self.event(d, &vgroup, -1);
            }
        }
    }

    /// The transaction addresses registered in (`ns`, `cluster`), sorted.
    pub(crate) fn instances(&self, ns: &str, cluster: &str) -> Vec<String> {
        let d = lock(&self.data);
        let mut v: Vec<String> = d
            .clusters
            .get(ns)
            .and_then(|c| c.get(cluster))
            .map(|cd| {
                cd.units
                    .values()
                    .flatten()
                    .filter_map(|n| endpoint(n, "transaction"))
                    .map(|(h, p)| format!("{h}:{p}"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Adds `nodes` (malformed on purpose) to a unit of its own in (`ns`, `cluster`),
    /// mapped to `vgroup`, and announces the change.
    pub(crate) fn put_raw(
        &self,
        ns: &str,
        cluster: &str,
        vgroup: &str,
        unit: &str,
        nodes: Vec<Value>,
    ) {
        let mut guard = lock(&self.data);
        let d = &mut *guard;
        d.clusters
            .entry(ns.to_string())
            .or_default()
            .entry(cluster.to_string())
            .or_default()
            .units
            .entry(unit.to_string())
            .or_default()
            .extend(nodes);
        d.vgroups
            .entry(vgroup.to_string())
            .or_default()
            .entry(ns.to_string())
            .or_default()
            .entry(cluster.to_string())
            .or_default()
            .insert(unit.to_string());
        let term = d.update_term.get(vgroup).copied().unwrap_or(0).max(0) + 1;
        self.event(d, vgroup, term);
    }
}
