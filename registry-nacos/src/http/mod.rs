//! A Nacos 1.x naming client over the v1 open API (HTTP), for servers that have no
//! gRPC port (Nacos 1.x, still common under Seata 1.x deployments); 2.x servers serve
//! the same API.
//!
//! What it does is what Nacos 1.4's Java client does (`NamingProxy`, `BeatReactor`,
//! `HostReactor`):
//! - **register**: `POST ns/instance` with the instance in the query (metadata as a
//!   JSON string), then a heartbeat for as long as it is registered ([`beat`]);
//! - **deregister**: the heartbeat stops, then `DELETE ns/instance`;
//! - **list**: `GET ns/instance/list` (`healthyOnly=false`: the registry filters healthy
//!   and enabled itself, as it does over gRPC); **service names**: `GET ns/service/list`;
//! - **subscribe**: polling. The registry's watches already read each watched cluster
//!   every second (its resync), which is what a 1.x client without UDP pushes does
//!   (the Java client polls every 10 s besides its pushes). UDP pushes are not asked
//!   for (`udpPort=0`): they would shorten a change's way to a watcher below a second
//!   only where the server pushes (rnacos does not), at the cost of a socket per client
//!   and a server that must reach the client's address, which NAT and containers break.
//!
//! Several instances of one service from one client are each registered on their own:
//! a 1.x server keeps registrations per instance, not per connection, so the batch the
//! gRPC client needs is simply every instance registered.

pub(crate) mod beat;
pub(crate) mod call;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use reqwest::Method;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::grpc::wire::null_as_default;
use crate::grpc::{Error, ServiceInstance, lock};
use call::{Caller, Request};

/// The Nacos 1.x naming client. See the [module docs](self). Dropping it stops its
/// heartbeats (the server then removes the instances within 30 s).
pub(crate) struct V1Client {
    caller: Arc<Caller>,
    /// The heartbeat of each registered instance, by (grouped service, ip, port,
    /// cluster).
    beats: Mutex<HashMap<BeatKey, CancellationToken>>,
}

type BeatKey = (String, String, i32, String);

fn beat_key(group: &str, service: &str, si: &ServiceInstance) -> BeatKey {
    (
        grouped(group, service),
        si.ip.clone(),
        si.port,
        si.cluster_name.clone().unwrap_or_default(),
    )
}

impl Drop for V1Client {
    fn drop(&mut self) {
        for (_, stop) in lock(&self.beats).drain() {
            stop.cancel();
        }
    }
}

/// `group@@service`, Nacos' grouped service name.
pub(crate) fn grouped(group: &str, service: &str) -> String {
    format!("{group}@@{service}")
}

/// The parameters that name `si` of `service` in `group`, in every instance request.
pub(crate) fn instance_params<'a>(
    group: &str,
    service: &str,
    si: &ServiceInstance,
) -> Vec<(&'a str, String)> {
    vec![
        ("serviceName", grouped(group, service)),
        ("groupName", group.to_string()),
        ("clusterName", si.cluster_name.clone().unwrap_or_default()),
        ("ip", si.ip.clone()),
        ("port", si.port.to_string()),
    ]
}

/// `POST ns/instance` for `si`.
pub(crate) fn register_request<'a>(
    group: &'a str,
    service: &'a str,
    si: &ServiceInstance,
) -> Request<'a> {
    Request {
        method: Method::POST,
        path: "ns/instance",
        query: [
            instance_params(group, service, si),
            vec![
                ("weight", si.weight.to_string()),
                ("enable", si.enabled.to_string()),
                ("healthy", si.healthy.to_string()),
                ("ephemeral", si.ephemeral.to_string()),
                (
                    "metadata",
                    serde_json::to_string(&si.metadata).unwrap_or_else(|_| "{}".into()),
                ),
            ],
        ]
        .concat(),
        form: None,
        group,
        service,
    }
}

/// `GET ns/instance/list`'s answer, as far as read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InstanceList {
    #[serde(deserialize_with = "null_as_default")]
    hosts: Vec<ServiceInstance>,
}

/// `GET ns/service/list`'s answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ServiceNames {
    count: i64,
    #[serde(deserialize_with = "null_as_default")]
    doms: Vec<String>,
}

impl V1Client {
    /// A client of `caller`'s servers, once one of them answers the health check the
    /// Java client uses (`GET ns/operator/metrics`); the error is the last server's.
    pub(crate) async fn connect(caller: Caller) -> Result<V1Client, Error> {
        let health = Request {
            method: Method::GET,
            path: "ns/operator/metrics",
            query: Vec::new(),
            form: None,
            group: "",
            service: "",
        };
        caller.send(&health).await?;
        Ok(V1Client {
            caller: Arc::new(caller),
            beats: Mutex::new(HashMap::new()),
        })
    }

    /// Registers `si` and starts (or restarts) its heartbeat.
    pub(crate) async fn register(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        self.caller
            .send(&register_request(group, service, &si))
            .await?;
        let stop = CancellationToken::new();
        if let Some(old) = lock(&self.beats).insert(beat_key(group, service, &si), stop.clone()) {
            old.cancel();
        }
        tokio::spawn(beat::run(
            self.caller.clone(),
            group.to_string(),
            service.to_string(),
            si,
            stop,
        ));
        Ok(())
    }

    /// Stops `si`'s heartbeat and deregisters it.
    pub(crate) async fn deregister(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        if let Some(stop) = lock(&self.beats).remove(&beat_key(group, service, &si)) {
            stop.cancel();
        }
        let req = Request {
            method: Method::DELETE,
            path: "ns/instance",
            query: [
                instance_params(group, service, &si),
                vec![("ephemeral", si.ephemeral.to_string())],
            ]
            .concat(),
            form: None,
            group,
            service,
        };
        self.caller.send(&req).await.map(|_| ())
    }

    /// Registers each of `all` (the gRPC client's batch: here one registration each).
    pub(crate) async fn register_each(
        &self,
        group: &str,
        service: &str,
        all: Vec<ServiceInstance>,
    ) -> Result<(), Error> {
        for si in all {
            self.register(group, service, si).await?;
        }
        Ok(())
    }

    /// The instances of `service` in `clusters` (comma-separated; empty: all), in
    /// `namespace` (None: the client's).
    pub(crate) async fn query(
        &self,
        namespace: Option<&str>,
        group: &str,
        service: &str,
        clusters: &str,
    ) -> Result<Vec<ServiceInstance>, Error> {
        let query = vec![
            ("serviceName", grouped(group, service)),
            ("groupName", group.to_string()),
            ("clusters", clusters.to_string()),
            ("healthyOnly", "false".to_string()),
            ("udpPort", "0".to_string()),
        ];
        let list: InstanceList = self
            .get_list(
                "ns/instance/list",
                query,
                namespace,
                group,
                service,
                "instance list",
            )
            .await?;
        Ok(list.hosts)
    }

    /// One page of the service names of `group` in `namespace`, and the total.
    pub(crate) async fn service_names(
        &self,
        namespace: Option<&str>,
        group: &str,
        page_size: usize,
    ) -> Result<(Vec<String>, i64), Error> {
        let query = vec![
            ("groupName", group.to_string()),
            ("pageNo", "1".to_string()),
            ("pageSize", page_size.to_string()),
        ];
        let l: ServiceNames = self
            .get_list(
                "ns/service/list",
                query,
                namespace,
                group,
                "",
                "service list",
            )
            .await?;
        Ok((l.doms, l.count))
    }

    /// `GET <path>` with `query`, plus `namespaceId` when a namespace is given, decoded
    /// as `T`; `what` names the list in the error a body that does not decode gives.
    /// `group` and `service` are the request's, for its signature (`service` empty for
    /// none).
    async fn get_list<T: DeserializeOwned>(
        &self,
        path: &str,
        mut query: Vec<(&str, String)>,
        namespace: Option<&str>,
        group: &str,
        service: &str,
        what: &str,
    ) -> Result<T, Error> {
        if let Some(ns) = namespace {
            query.push(("namespaceId", ns.to_string()));
        }
        let body = self
            .caller
            .send(&Request {
                method: Method::GET,
                path,
                query,
                form: None,
                group,
                service,
            })
            .await?;
        serde_json::from_slice(&body).map_err(|e| Error::Answer(format!("{what}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_carries_the_instance_as_the_1x_client_sends_it() {
        let si = ServiceInstance {
            ip: "10.0.0.1".into(),
            port: 8091,
            weight: 2.0,
            cluster_name: Some("default".into()),
            metadata: [("zone".to_string(), "az1".to_string())].into(),
            ..Default::default()
        };
        let r = register_request("SEATA_GROUP", "seata-server", &si);
        let q: HashMap<&str, &str> = r.query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(r.method, Method::POST);
        assert_eq!(q["serviceName"], "SEATA_GROUP@@seata-server");
        assert_eq!(q["clusterName"], "default");
        assert_eq!((q["ip"], q["port"], q["weight"]), ("10.0.0.1", "8091", "2"));
        assert_eq!(q["ephemeral"], "true");
        assert_eq!(q["metadata"], r#"{"zone":"az1"}"#);
    }

    #[test]
    fn the_lists_read_as_1x_servers_write_them() {
        // Nacos 1.4's list answer (`valid` beside `healthy`, the service as `dom`).
        let list: InstanceList = serde_json::from_slice(
            br#"{"name":"DEFAULT_GROUP@@seata-server","dom":"seata-server","cacheMillis":10000,
                "hosts":[{"instanceId":"10.0.0.1#8091#default#DEFAULT_GROUP@@seata-server",
                "ip":"10.0.0.1","port":8091,"weight":1.0,"healthy":true,"valid":true,
                "marked":false,"enabled":true,"ephemeral":true,"clusterName":"default",
                "serviceName":"DEFAULT_GROUP@@seata-server","metadata":{}}],
                "lastRefTime":1,"checksum":"x","useSpecifiedURL":false,"clusters":"default",
                "env":"","metadata":{}}"#,
        )
        .unwrap();
        assert_eq!(list.hosts.len(), 1);
        assert_eq!(list.hosts[0].cluster_name.as_deref(), Some("default"));
        let none: InstanceList = serde_json::from_slice(br#"{"hosts":null}"#).unwrap();
        assert!(none.hosts.is_empty());
        let names: ServiceNames =
            serde_json::from_slice(br#"{"count":2,"doms":["seata-server","other"]}"#).unwrap();
        assert_eq!((names.count, names.doms.len()), (2, 2));
    }
}
