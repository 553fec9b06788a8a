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
//! - **Liveness.** A `HealthCheckRequest` every [`HEALTH_PERIOD`](super::HEALTH_PERIOD);
//!   [`HEALTH_TRIES`](super::HEALTH_TRIES) in a row unanswered within
//!   [`HEALTH_TIMEOUT`](super::HEALTH_TIMEOUT) each, a transport error, or the end
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
use super::server::Server;
use super::shared::{Listener, Shared, State, Sub, same};
use super::wire::{ServiceInstance, ServiceList, WithServiceInfo};
use super::{Error, lock};

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
