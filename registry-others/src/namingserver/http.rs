//! The namingserver calls: discovery and watch by vGroup (on one healthy namingserver,
//! failing over to the next), register / unregister (on every namingserver: they do
//! not replicate), and the health check.

use std::time::Duration;

use meshline_registry_core::Instance;
use reqwest::StatusCode;
use serde_json::Value;

use super::{Inner, KIND};
use crate::seata_http::{LoginError, send};

/// Timeout of register / unregister / discovery / health calls (Seata's: 3,000 ms).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the namingserver holds a watch (Seata's client sends `timeout=28000`).
pub(super) const WATCH_HOLD_MS: u64 = 28_000;
/// The HTTP timeout of a watch (Seata's client: 30,000 ms).
pub(super) const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// One discovery answer (`MetaResponse`: `{clusterList, term}`).
pub(super) struct Discovered {
    pub members: Vec<Instance>,
    pub term: i64,
}

impl Inner {
    /// The namingservers to ask, healthy ones first (the last that answered first).
    fn read_order(&self) -> Vec<String> {
        let down = crate::seata_http::lock(&self.unhealthy).clone();
        let mut order = self.servers.in_order();
        order.sort_by_key(|b| down.contains(b));
        order
    }

    /// Sends the request `make` builds to each namingserver in [`Self::read_order`]
    /// until one answers.
    async fn read_call<F>(
        &self,
        what: &str,
        timeout: Duration,
        make: F,
    ) -> Result<crate::seata_http::Reply, String>
    where
        F: Fn(&str) -> reqwest::RequestBuilder,
    {
        self.login
            .send_first(&self.servers, self.read_order(), what, timeout, &make)
            .await
            .map_err(LoginError::into_message)
    }

    /// Logs in on the namingservers in turn until one takes the credentials.
    pub(super) async fn log_in(&self) -> Result<(), String> {
        let mut failures = Vec::new();
        for base in self.read_order() {
            match self.login.token(&base, true).await {
                Ok(_) => return Ok(()),
                Err(LoginError::Refused(m)) => return Err(m),
                Err(LoginError::Unreachable(m) | LoginError::Answer(m)) => failures.push(m),
            }
        }
        Err(failures.join("; "))
    }

    /// `GET /naming/v1/discovery?vGroup=&namespace=`: every transaction endpoint of
    /// every unit of every cluster the vGroup maps to. Malformed nodes are skipped with
    /// a warning; a body that is not a `MetaResponse` is an error.
    pub(super) async fn discover(&self, vgroup: &str) -> Result<Discovered, String> {
        let r = self
            .read_call("discovery", REQUEST_TIMEOUT, |base| {
                self.http
                    .get(format!("{base}/naming/v1/discovery"))
                    .query(&[("vGroup", vgroup), ("namespace", self.namespace.as_str())])
            })
            .await?;
        if r.status != StatusCode::OK {
            return Err(format!(
                "discovery of `{vgroup}`: HTTP {}: {}",
                r.status.as_u16(),
                r.shown_body()
            ));
        }
        parse_discovery(vgroup, &r.body)
    }

    /// `POST /naming/v1/watch?vGroup=&clientTerm=&timeout=28000&clientAddr=`: true on
    /// 200 (the vGroup changed past `term`), false on 304 (nothing within the hold).
    pub(super) async fn watch_once(&self, vgroup: &str, term: i64) -> Result<bool, String> {
        let r = self
            .read_call("watch", WATCH_TIMEOUT, |base| {
                self.http.post(format!("{base}/naming/v1/watch")).query(&[
                    ("vGroup", vgroup.to_string()),
                    ("clientTerm", term.to_string()),
                    ("timeout", WATCH_HOLD_MS.to_string()),
                    ("clientAddr", self.client_addr.clone()),
                ])
            })
            .await?;
        match r.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_MODIFIED => Ok(false),
            s => Err(format!(
                "watch of `{vgroup}`: HTTP {}: {}",
                s.as_u16(),
                r.shown_body()
            )),
        }
    }

    /// Sends a register or unregister `body` for (`cluster`, `unit`) to one
    /// namingserver.
    pub(super) async fn send_registration(
        &self,
        base: &str,
        op: &str,
        cluster: &str,
        unit: &str,
        body: &Value,
    ) -> Result<(), String> {
        let make = |base: &str| {
            self.http
                .post(format!("{base}/naming/v1/{op}"))
                .query(&[
                    ("namespace", self.namespace.as_str()),
                    ("clusterName", cluster),
                    ("unit", unit),
                ])
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
        };
        let r = self
            .login
            .send(base, op, REQUEST_TIMEOUT, &make)
            .await
            .map_err(LoginError::into_message)?;
        // NamingController answers HTTP 200 with a `Result` whose `code` is "500"
        // when the namingserver failed.
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let code = v.get("code").and_then(Value::as_str).unwrap_or("200");
        if r.status != StatusCode::OK || code != "200" {
            return Err(format!(
                "{base}: {op}: HTTP {} code {code}: {}",
                r.status.as_u16(),
                r.shown_body()
            ));
        }
        Ok(())
    }

    /// `GET /naming/v1/health` on `base`: true on HTTP 200.
    pub(super) async fn healthy(&self, base: &str) -> bool {
        let req = self.http.get(format!("{base}/naming/v1/health"));
        matches!(send(req, REQUEST_TIMEOUT, self.max_body).await, Ok(r) if r.status == StatusCode::OK)
    }
}

/// Whether a client sends transactions to `node`, as Seata's client decides
/// (`NamingserverRegistryServiceImpl.handleMetadata`): a `MEMBER` (a TC of a cluster
/// whose sessions are in a shared store: any one serves), or the `LEADER` of a raft
/// cluster at the vGroup's `term` or later (only the leader serves; a leader of an
/// older term has been replaced). `FOLLOWER`s and `LEARNER`s never: they answer
/// `NotRaftLeader`. A node without a role is a `MEMBER`, Seata's default.
fn serves(node: &Value, term: i64) -> bool {
    match node.get("role").and_then(Value::as_str).unwrap_or("MEMBER") {
        "MEMBER" => true,
        "LEADER" => node.get("term").and_then(Value::as_i64).unwrap_or(0) >= term,
        _ => false,
    }
}

/// Parses a `MetaResponse` (`common/.../namingserver/MetaResponse.java`):
/// `{clusterList:[{clusterName, unitData:[{unitName, namingInstanceList:[Node]}]}], term}`,
/// keeping the nodes that serve (see [`serves`]).
pub(super) fn parse_discovery(vgroup: &str, body: &[u8]) -> Result<Discovered, String> {
    let (obj, term) = crate::seata_http::parse_answer("discovery", vgroup, body)?;
    let clusters = match obj.get("clusterList") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err(format!("`clusterList` of `{vgroup}` is not an array")),
    };
    let mut members: Vec<Instance> = Vec::new();
    for c in clusters {
        let units = c.get("unitData").and_then(Value::as_array);
        for u in units.into_iter().flatten() {
            let nodes = u.get("namingInstanceList").and_then(Value::as_array);
            let nodes = nodes.map(Vec::as_slice).unwrap_or_default();
            for (i, node) in crate::seata_http::nodes_of(KIND, vgroup, nodes) {
                if !serves(&node, term) {
                    continue;
                }
                if !members.iter().any(|m| m.key() == i.key()) {
                    members.push(i);
                }
            }
        }
    }
    Ok(Discovered { members, term })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_answers() {
        let body = br#"{"clusterList":[{"clusterName":"c","clusterType":"default","unitData":[
            {"unitName":"u1","namingInstanceList":[{"transaction":{"host":"10.0.0.1","port":8091},"control":{"host":"10.0.0.1","port":7091}}]},
            {"unitName":"u2","namingInstanceList":[{"transaction":{"host":"10.0.0.2","port":0}},{"transaction":{"host":"10.0.0.3","port":8091}}]}
        ]}],"term":42}"#;
        let d = parse_discovery("g", body).unwrap();
        assert_eq!(d.term, 42);
        let l: Vec<String> = d.members.iter().map(|i| i.to_string()).collect();
        assert_eq!(l, ["10.0.0.1:8091", "10.0.0.3:8091"]);
        let empty = parse_discovery("g", br#"{"clusterList":[],"term":0}"#).unwrap();
        assert!(empty.members.is_empty());
        assert!(parse_discovery("g", b"oops").is_err());
        assert!(parse_discovery("g", br#"{"clusterList":3}"#).is_err());
    }

    /// A raft cluster lists its leader of the current term only; members always.
    #[test]
    fn raft_clusters_list_the_leader_of_the_term() {
        let node = |port: u16, role: &str, term: i64| {
            format!(
                r#"{{"transaction":{{"host":"10.0.0.1","port":{port}}},"role":"{role}","term":{term}}}"#
            )
        };
        let body = format!(
            r#"{{"clusterList":[{{"clusterName":"r","clusterType":"raft","unitData":[
            {{"unitName":"u","namingInstanceList":[{},{},{},{}]}}]}},
            {{"clusterName":"d","unitData":[{{"unitName":"v","namingInstanceList":[{}]}}]}}],"term":7}}"#,
            node(1, "FOLLOWER", 7),
            node(2, "LEADER", 7),
            node(3, "LEADER", 6),
            node(4, "LEARNER", 7),
            node(5, "MEMBER", 1),
        );
        let d = parse_discovery("g", body.as_bytes()).unwrap();
        let ports: Vec<u16> = d.members.iter().map(|i| i.port()).collect();
        assert_eq!(
            ports,
            [2, 5],
            "the old term's leader, followers and learners are left out"
        );
    }
}
