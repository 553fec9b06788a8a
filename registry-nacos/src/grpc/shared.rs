//! What the naming client and its supervisor share: where the connection is, what was
//! registered and subscribed (redone on each new connection), and the requests that
//! carry them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::auth::Auth;
use super::conn::Conn;
use super::server::Server;
use super::wire::{ServiceInfo, ServiceInstance, WithServiceInfo};
use super::{Error, lock};

/// Where the client is.
#[derive(Clone)]
pub(super) enum State {
    /// Opening a connection.
    Connecting,
    /// Connected.
    Up(Arc<Conn>),
    /// A whole round of servers failed (the last error); still trying.
    Down(String),
    /// Dropped.
    Closed,
}

/// What this client registered in one service, to redo on a new connection.
#[derive(Clone, Default)]
pub(super) struct Registered {
    pub(super) single: Option<ServiceInstance>,
    pub(super) batch: Vec<ServiceInstance>,
}

/// A listener of one service's pushes.
pub(super) struct Sub {
    pub(super) id: u64,
    pub(super) group: String,
    pub(super) service: String,
    pub(super) clusters: String,
    pub(super) listener: Listener,
}

/// Called with each list of a subscribed service (the push's or a subscription's).
pub(crate) type Listener = Arc<dyn Fn(&ServiceInfo) + Send + Sync>;

pub(super) struct Shared {
    pub(super) servers: Vec<Server>,
    pub(super) namespace: String,
    pub(super) app_name: String,
    pub(super) auth: Auth,
    pub(super) state: watch::Sender<State>,
    /// `(group, service)` -> what we registered there.
    pub(super) redo: Mutex<BTreeMap<(String, String), Registered>>,
    /// Held by each registration change across its request, and by the check of
    /// what the server lists ([`super::verify`]) across a registration it sends again,
    /// so that check never undoes a deregistration made meanwhile.
    pub(super) writes: tokio::sync::Mutex<()>,
    pub(super) subs: Mutex<(u64, Vec<Sub>)>,
    pub(super) stop: CancellationToken,
}

/// Same instance for Nacos: address, port and cluster.
pub(super) fn same(a: &ServiceInstance, b: &ServiceInstance) -> bool {
    a.ip == b.ip && a.port == b.port && a.cluster_name == b.cluster_name
}

impl Shared {
    /// The live connection: waits while one is being opened.
    pub(super) async fn conn(&self) -> Result<Arc<Conn>, Error> {
        self.conn_other_than(None).await
    }

    /// The live connection, other than `old` when given: waits while one is being
    /// opened (or `old` replaced); fails at once when no server answers.
    pub(super) async fn conn_other_than(
        &self,
        old: Option<&Arc<Conn>>,
    ) -> Result<Arc<Conn>, Error> {
        let mut rx = self.state.subscribe();
        loop {
            match &*rx.borrow_and_update() {
                State::Up(c) if !old.is_some_and(|o| Arc::ptr_eq(c, o)) => return Ok(c.clone()),
                State::Down(e) => return Err(Error::NotConnected(e.clone())),
                State::Closed => return Err(Error::Closed),
                State::Up(_) | State::Connecting => {}
            }
            if rx.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    pub(super) async fn call(
        &self,
        kind: &str,
        group: &str,
        service: &str,
        body: &serde_json::Value,
    ) -> Result<Vec<u8>, Error> {
        let conn = self.conn().await?;
        match self.call_on(&conn, kind, group, service, body).await {
            // The connection died under the call (a failover): once more on the next
            // one. Every naming request is idempotent (a registration, a
            // deregistration, a subscription or a read).
            Err(Error::Transport(e)) if conn.is_dead() => {
                tracing::debug!(registry = "nacos", kind, error = %e, "the connection died under a request; sending it on the next one");
                let next = self.conn_other_than(Some(&conn)).await?;
                self.call_on(&next, kind, group, service, body).await
            }
            r => r,
        }
    }

    /// Changes what is redone for `service` of `group` (a service left with nothing
    /// is forgotten).
    pub(super) fn change_redo(
        &self,
        group: &str,
        service: &str,
        change: impl FnOnce(&mut Registered),
    ) {
        let mut redo = lock(&self.redo);
        let key = (group.to_string(), service.to_string());
        let r = redo.entry(key.clone()).or_default();
        change(r);
        if r.single.is_none() && r.batch.is_empty() {
            redo.remove(&key);
        }
    }

    /// A `ServiceQueryRequest`'s body: every instance of `service` in `clusters`
    /// (comma-separated; empty: all), healthy or not.
    pub(super) fn query_body(
        &self,
        namespace: &str,
        group: &str,
        service: &str,
        clusters: &str,
    ) -> serde_json::Value {
        json!({
            "namespace": namespace, "serviceName": service, "groupName": group,
            "cluster": clusters, "healthyOnly": false, "udpPort": 0,
            "headers": {}, "requestId": null,
        })
    }

    pub(super) async fn call_on(
        &self,
        conn: &Conn,
        kind: &str,
        group: &str,
        service: &str,
        body: &serde_json::Value,
    ) -> Result<Vec<u8>, Error> {
        tracing::debug!(registry = "nacos", server = %conn.server, kind, group, service, "nacos request");
        conn.call(kind, self.auth.headers(group, service), body)
            .await
    }

    pub(super) fn instance_body(
        &self,
        group: &str,
        service: &str,
        kind: &str,
        si: &ServiceInstance,
    ) -> serde_json::Value {
        json!({
            "namespace": self.namespace, "serviceName": service, "groupName": group,
            "type": kind, "instance": si, "headers": {}, "requestId": null,
        })
    }

    pub(super) fn batch_body(
        &self,
        group: &str,
        service: &str,
        all: &[ServiceInstance],
    ) -> serde_json::Value {
        json!({
            "namespace": self.namespace, "serviceName": service, "groupName": group,
            "type": "batchRegisterInstance", "instances": all, "headers": {}, "requestId": null,
        })
    }

    pub(super) async fn instance_request(
        &self,
        group: &str,
        service: &str,
        kind: &str,
        si: &ServiceInstance,
    ) -> Result<(), Error> {
        let body = self.instance_body(group, service, kind, si);
        self.call("InstanceRequest", group, service, &body)
            .await
            .map(|_| ())
    }

    pub(super) async fn batch_request(
        &self,
        group: &str,
        service: &str,
        all: &[ServiceInstance],
    ) -> Result<(), Error> {
        let body = self.batch_body(group, service, all);
        self.call("BatchInstanceRequest", group, service, &body)
            .await
            .map(|_| ())
    }

    pub(super) fn subscribe_body(
        &self,
        group: &str,
        service: &str,
        clusters: &str,
        on: bool,
    ) -> serde_json::Value {
        json!({
            "namespace": self.namespace, "serviceName": service, "groupName": group,
            "subscribe": on, "clusters": clusters, "headers": {}, "requestId": null,
        })
    }

    pub(super) async fn subscribe_request(
        &self,
        group: &str,
        service: &str,
        clusters: &str,
        on: bool,
    ) -> Result<ServiceInfo, Error> {
        let body = self.subscribe_body(group, service, clusters, on);
        let answer = self
            .call("SubscribeServiceRequest", group, service, &body)
            .await?;
        parse_info(&answer)
    }

    /// Sends every registration and subscription on `conn` (a new connection).
    pub(super) async fn redo(&self, conn: &Conn) -> Result<(), Error> {
        let registered: Vec<((String, String), Registered)> = lock(&self.redo)
            .iter()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        for ((group, service), Registered { single, batch }) in registered {
            if let Some(si) = single {
                let body = self.instance_body(&group, &service, "registerInstance", &si);
                self.call_on(conn, "InstanceRequest", &group, &service, &body)
                    .await?;
            }
            if !batch.is_empty() {
                let body = self.batch_body(&group, &service, &batch);
                self.call_on(conn, "BatchInstanceRequest", &group, &service, &body)
                    .await?;
            }
        }
        let subs: Vec<(String, String, String)> = {
            let subs = lock(&self.subs);
            let mut v: Vec<(String, String, String)> = subs
                .1
                .iter()
                .map(|s| (s.group.clone(), s.service.clone(), s.clusters.clone()))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        for (group, service, clusters) in subs {
            let body = self.subscribe_body(&group, &service, &clusters, true);
            let answer = self
                .call_on(conn, "SubscribeServiceRequest", &group, &service, &body)
                .await?;
            self.deliver(&parse_info(&answer)?);
        }
        Ok(())
    }

    /// Hands `info` to the listeners of its service.
    pub(super) fn deliver(&self, info: &ServiceInfo) {
        let (group, service) = match info.name.split_once("@@") {
            Some((g, s)) => (g, s),
            None => (info.group_name.as_str(), info.name.as_str()),
        };
        let listeners: Vec<Listener> = lock(&self.subs)
            .1
            .iter()
            .filter(|s| s.group == group && s.service == service)
            .map(|s| s.listener.clone())
            .collect();
        for l in listeners {
            l(info);
        }
    }
}

pub(super) fn parse_info(answer: &[u8]) -> Result<ServiceInfo, Error> {
    serde_json::from_slice::<WithServiceInfo>(answer)
        .map(|w| w.service_info)
        .map_err(|e| Error::Answer(format!("serviceInfo: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn a_deregistered_instance_leaves_both_redo_kinds() {
        let a = ServiceInstance {
            ip: "10.0.0.1".into(),
            port: 1,
            cluster_name: Some("c".into()),
            ..Default::default()
        };
        let b = ServiceInstance {
            ip: "10.0.0.2".into(),
            port: 1,
            cluster_name: Some("c".into()),
            ..Default::default()
        };
        assert!(same(&a, &a.clone()));
        assert!(!same(&a, &b));
        let mut other_cluster = a.clone();
        other_cluster.cluster_name = Some("d".into());
        assert!(!same(&a, &other_cluster));
    }
}
