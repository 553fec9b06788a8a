//! The TC's answer to `GET /metadata/v1/cluster` (`MetadataResponse`:
//! `{nodes, storeMode, term}`, `common/.../metadata/MetadataResponse.java`) and which
//! of its nodes a client lists.

use meshline_registry_core::Instance;
use serde_json::Value;

use super::KIND;

/// One read of a raft group's metadata.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    /// The raft term the TC reported (0 when absent).
    pub term: i64,
    /// `storeMode` (`raft`, `file`, `db`, `redis`), as sent.
    pub store_mode: String,
    /// The well-formed nodes, with their JSON.
    pub nodes: Vec<(Instance, Value)>,
}

impl Metadata {
    /// Parses a `MetadataResponse` body. `nodes` may be missing or null: the TC has no
    /// such raft group, or no leader right now (`ClusterController.cluster` only fills
    /// it when a leader is known). Malformed nodes are skipped with a warning.
    pub(crate) fn parse(group: &str, body: &[u8]) -> Result<Metadata, String> {
        let (obj, term) = crate::seata_http::parse_answer("metadata", group, body)?;
        let store_mode = obj
            .get("storeMode")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let nodes = match obj.get("nodes") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => crate::seata_http::nodes_of(KIND, group, a),
            Some(_) => return Err(format!("`nodes` of `{group}` is not a JSON array")),
        };
        Ok(Metadata {
            term,
            store_mode,
            nodes,
        })
    }

    /// True when the TCs keep their sessions in raft (`storeMode` `raft`): then only
    /// the leader serves transactions.
    pub(crate) fn is_raft_mode(&self) -> bool {
        self.store_mode.eq_ignore_ascii_case("raft")
    }

    /// What a client lists, as Seata's `RaftRegistryServiceImpl.aliveLookup`: in raft
    /// mode only the **leader** (role `LEADER`); otherwise every node.
    pub(crate) fn listed(&self) -> Vec<Instance> {
        let raft = self.is_raft_mode();
        self.nodes
            .iter()
            .filter(|(_, n)| !raft || n.get("role").and_then(Value::as_str) == Some("LEADER"))
            .map(|(i, _)| i.clone())
            .collect()
    }

    /// The nodes' control (HTTP) addresses as base URLs: more TCs to ask.
    pub(crate) fn control_bases(&self, tls: bool) -> Vec<String> {
        let scheme = if tls { "https" } else { "http" };
        self.nodes
            .iter()
            .filter_map(|(_, n)| crate::seata_http::endpoint(n, "control").ok())
            .map(|(h, p)| {
                if h.contains(':') && !h.starts_with('[') {
                    format!("{scheme}://[{h}]:{p}")
                } else {
                    format!("{scheme}://{h}:{p}")
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(port: u16, role: &str) -> String {
        format!(
            r#"{{"control":{{"host":"127.0.0.1","port":{}}},"transaction":{{"host":"127.0.0.1","port":{port}}},"role":"{role}","group":"default","weight":1.0,"healthy":true}}"#,
            port - 1000
        )
    }

    #[test]
    fn raft_mode_lists_the_leader_only() {
        let body = format!(
            r#"{{"nodes":[{},{},{}],"storeMode":"raft","term":7}}"#,
            node(8091, "FOLLOWER"),
            node(8092, "LEADER"),
            node(8093, "LEARNER")
        );
        let m = Metadata::parse("default", body.as_bytes()).unwrap();
        assert_eq!(m.term, 7);
        let l: Vec<String> = m.listed().iter().map(|i| i.to_string()).collect();
        assert_eq!(l, ["127.0.0.1:8092"]);
        assert_eq!(m.control_bases(false).len(), 3);
        assert_eq!(m.control_bases(false)[0], "http://127.0.0.1:7091");
    }

    #[test]
    fn other_store_modes_list_every_node() {
        let body = format!(
            r#"{{"nodes":[{},{}],"storeMode":"db","term":1}}"#,
            node(8091, "FOLLOWER"),
            node(8092, "LEADER")
        );
        let m = Metadata::parse("g", body.as_bytes()).unwrap();
        assert_eq!(m.listed().len(), 2);
    }

    #[test]
    fn no_group_and_garbage() {
        let m = Metadata::parse("g", br#"{"nodes":null,"storeMode":null,"term":0}"#).unwrap();
        assert!(m.listed().is_empty());
        assert!(Metadata::parse("g", b"[]").is_err());
        assert!(Metadata::parse("g", b"<html>").is_err());
        assert!(Metadata::parse("g", br#"{"nodes":{}}"#).is_err());
        let m = Metadata::parse(
            "g",
            br#"{"nodes":[{"transaction":{"host":"h","port":0}},7],"storeMode":"db"}"#,
        )
        .unwrap();
        assert!(m.listed().is_empty());
    }
}
