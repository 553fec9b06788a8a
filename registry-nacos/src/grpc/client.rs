//! The naming client: one live connection at a time, moved to the next server when it
//! dies, with everything this client registered and subscribed to redone on the new
//! one.
//!
//! Why our own, not nacos-sdk's: nacos-sdk 0.8.3 never closes a connection it
//! replaced. The replaced connection's stream task keeps answering the server, so a
//! server that comes back after a partition keeps that connection, and with it this
//! client's registration, for as long as the process lives, whatever the client
//! deregisters on its new connection (docs/faults.md, "Nacos ghost"). Here a connection
//! that is left is closed: its socket is dropped, and the server drops what it held as
//! soon as it hears of it (at once on a reachable server; a partitioned one learns on
//! its return, or by its own detection).
//!
//! - **Liveness.** A `HealthCheckRequest` every [`HEALTH_PERIOD`]; [`HEALTH_TRIES`]
//!   in a row unanswered within [`HEALTH_TIMEOUT`] each, a transport error, or the end
//!   of the connection's stream declares the connection dead. A server that goes
//!   silent without a reset is so left within 5 s, against 14-20 s for nacos-sdk (which
//!   tries three times, 3 s each, after 5 s), and one that stalls under 3 s is kept.
//!   (No HTTP/2 keep-alive pings: Java Nacos' gRPC server allows one per 5 minutes
//!   and closes a connection that pings more often.)
//! - **Failover.** The next server of the list is tried at once; after a whole round
//!   of failures the client waits (100 ms doubling to 2 s) and goes round again.
//! - **Redo.** What is registered is kept as intent, per service: the single-instance
//!   registration and the batch, each updated before its request is sent (a
//!   deregistration removes the instance from both). A new connection gets every
//!   registration, then every subscription, whose answer is handed to its listeners.
//! - **Requests** wait for a live connection while one is being opened; when a whole
//!   round of servers failed they fail at once with the last error.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::auth::Auth;
use super::conn::Conn;
use super::server::Server;
use super::wire::{ServiceInfo, ServiceInstance, ServiceList, WithServiceInfo};
use super::{Error, lock};

/// How often a live connection is checked.
pub const HEALTH_PERIOD: Duration = Duration::from_secs(2);
/// How long one health check may go unanswered.
pub const HEALTH_TIMEOUT: Duration = Duration::from_millis(1500);
/// How many health checks in a row may go unanswered before the connection is left
/// (the next is sent as soon as one times out). A server silent from just after a
/// check is so left `HEALTH_PERIOD + HEALTH_TRIES x HEALTH_TIMEOUT` (5 s) later at
/// most; one that stalls for less than 3 s (a GC pause) is kept.
pub const HEALTH_TRIES: u32 = 2;

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
struct Sub {
    id: u64,
    group: String,
    service: String,
    clusters: String,
    listener: Listener,
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
    subs: Mutex<(u64, Vec<Sub>)>,
    pub(super) stop: CancellationToken,
}

/// A Nacos 2 naming client. See the [module docs](self). Dropping it closes its
/// connection.
pub(crate) struct NamingClient {
    shared: Arc<Shared>,
}

impl Drop for NamingClient {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl NamingClient {
    /// Starts the client and waits until it is connected, or until every server
    /// failed once (the error is the last one), or `timeout`.
    pub(crate) async fn connect(
        servers: Vec<Server>,
        namespace: String,
        app_name: String,
        auth: Auth,
        timeout: Duration,
    ) -> Result<NamingClient, Error> {
        if servers.is_empty() {
            return Err(Error::NotConnected("no server address".into()));
        }
        let (state, _) = watch::channel(State::Connecting);
        let shared = Arc::new(Shared {
            servers,
            namespace: namespace_or_public(&namespace).to_string(),
            app_name,
            auth,
            state,
            redo: Mutex::new(BTreeMap::new()),
            writes: tokio::sync::Mutex::new(()),
            subs: Mutex::new((0, Vec::new())),
            stop: CancellationToken::new(),
        });
        tokio::spawn(super::supervisor::run(shared.clone()));
        let client = NamingClient { shared };
        match tokio::time::timeout(timeout, client.shared.conn()).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::NotConnected(format!(
                "not connected within {timeout:?}"
            ))),
        }
    }

    /// Registers `si` in `service` of `group` (one instance per service from one
    /// connection: it replaces the previous single registration).
    #[tracing::instrument(
        name = "register_instance",
        level = "debug",
        skip_all,
        fields(group, service)
    )]
    pub(crate) async fn register(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        let _writes = self.shared.writes.lock().await;
        self.shared
            .change_redo(group, service, |r| r.single = Some(si.clone()));
        self.shared
            .instance_request(group, service, "registerInstance", &si)
            .await
    }

    /// Deregisters `si` (and forgets it for the redo, single or batched).
    #[tracing::instrument(
        name = "deregister_instance",
        level = "debug",
        skip_all,
        fields(group, service)
    )]
    pub(crate) async fn deregister(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        let _writes = self.shared.writes.lock().await;
        self.shared.change_redo(group, service, |r| {
            r.single.take_if(|s| same(s, &si));
            r.batch.retain(|b| !same(b, &si));
        });
        self.shared
            .instance_request(group, service, "deregisterInstance", &si)
            .await
    }

    /// Registers `all` as this connection's batch for `service` (Nacos 2.1.1+).
    #[tracing::instrument(
        name = "batch_register_instance",
        level = "debug",
        skip_all,
        fields(group, service)
    )]
    pub(crate) async fn batch_register(
        &self,
        group: &str,
        service: &str,
        all: Vec<ServiceInstance>,
    ) -> Result<(), Error> {
        let _writes = self.shared.writes.lock().await;
        self.shared
            .change_redo(group, service, |r| r.batch = all.clone());
        self.shared.batch_request(group, service, &all).await
    }

    /// The instances of `service` in `clusters` (comma-separated; empty: all), read
    /// from the server, in `namespace` (None: the client's).
    pub(crate) async fn query(
        &self,
        namespace: Option<&str>,
        group: &str,
        service: &str,
        clusters: &str,
    ) -> Result<Vec<ServiceInstance>, Error> {
        let ns = namespace
            .map(namespace_or_public)
            .unwrap_or(&self.shared.namespace);
        let body = self.shared.query_body(ns, group, service, clusters);
        let answer = self
            .shared
            .call("ServiceQueryRequest", group, service, &body)
            .await?;
        let w: WithServiceInfo = serde_json::from_slice(&answer)
            .map_err(|e| Error::Answer(format!("ServiceQueryResponse: {e}")))?;
        Ok(w.service_info.hosts)
    }

    /// One page of the service names of `group` in `namespace`, and the total.
    pub(crate) async fn service_names(
        &self,
        namespace: Option<&str>,
        group: &str,
        page_size: usize,
    ) -> Result<(Vec<String>, i64), Error> {
        let ns = namespace
            .map(namespace_or_public)
            .unwrap_or(&self.shared.namespace);
        let body = json!({
            "namespace": ns, "groupName": group, "pageNo": 1, "pageSize": page_size,
            "selector": "", "headers": {}, "requestId": null,
        });
        let answer = self
            .shared
            .call("ServiceListRequest", group, "", &body)
            .await?;
        let l: ServiceList = serde_json::from_slice(&answer)
            .map_err(|e| Error::Answer(format!("ServiceListResponse: {e}")))?;
        Ok((l.service_names, l.count))
    }

    /// Subscribes to `service`'s pushes (`clusters` as Nacos takes it); `listener`
    /// gets every push, and the subscription's answer after each reconnect (not the
    /// first one: a caller reads the list it starts from itself). Returns the id [`unsubscribe`](Self::unsubscribe) takes.
    pub(crate) async fn subscribe(
        &self,
        group: &str,
        service: &str,
        clusters: &str,
        listener: Listener,
    ) -> Result<u64, Error> {
        let id = {
            let mut subs = lock(&self.shared.subs);
            subs.0 += 1;
            let id = subs.0;
            subs.1.push(Sub {
                id,
                group: group.to_string(),
                service: service.to_string(),
                clusters: clusters.to_string(),
                listener: listener.clone(),
            });
            id
        };
        match self
            .shared
            .subscribe_request(group, service, clusters, true)
            .await
        {
            Ok(_) => Ok(id),
            Err(e) => {
                lock(&self.shared.subs).1.retain(|s| s.id != id);
                Err(e)
            }
        }
    }

    /// Ends subscription `id`; the server is told when no other listener of the
    /// service is left.
    pub(crate) async fn unsubscribe(&self, id: u64) -> Result<(), Error> {
        let gone = {
            let mut subs = lock(&self.shared.subs);
            let Some(pos) = subs.1.iter().position(|s| s.id == id) else {
                return Ok(());
            };
            let s = subs.1.remove(pos);
            let others = subs
                .1
                .iter()
                .any(|o| o.group == s.group && o.service == s.service);
            (!others).then_some(s)
        };
        match gone {
            Some(s) => self
                .shared
                .subscribe_request(&s.group, &s.service, &s.clusters, false)
                .await
                .map(|_| ()),
            None => Ok(()),
        }
    }
}

/// Nacos' name of the namespace written empty: `public` (as nacos-sdk and the Java
/// client send it; rnacos reads an empty one in a batch registration as another).
fn namespace_or_public(namespace: &str) -> &str {
    if namespace.is_empty() {
        "public"
    } else {
        namespace
    }
}

/// Same instance for Nacos: address, port and cluster.
pub(super) fn same(a: &ServiceInstance, b: &ServiceInstance) -> bool {
    a.ip == b.ip && a.port == b.port && a.cluster_name == b.cluster_name
}

impl Shared {
    /// The live connection: waits while one is being opened.
    async fn conn(&self) -> Result<Arc<Conn>, Error> {
        self.conn_other_than(None).await
    }

    /// The live connection, other than `old` when given: waits while one is being
    /// opened (or `old` replaced); fails at once when no server answers.
    async fn conn_other_than(&self, old: Option<&Arc<Conn>>) -> Result<Arc<Conn>, Error> {
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

    async fn call(
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
    fn change_redo(&self, group: &str, service: &str, change: impl FnOnce(&mut Registered)) {
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

    async fn instance_request(
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

    async fn batch_request(
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

    fn subscribe_body(
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

    async fn subscribe_request(
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
    fn a_deregistered_instance_leaves_both_redo_kinds() {
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
