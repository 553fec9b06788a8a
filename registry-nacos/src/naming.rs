//! The naming client the registry runs on: Nacos 2's gRPC protocol
//! ([`crate::grpc`]) or Nacos 1.x's open API over HTTP ([`crate::http`]), chosen at
//! connect (`registry.nacos.protocol`, or the server's version). Everything above it
//! (registrations, watches, `nearby`) is the same for both.

use crate::Protocol;
use crate::grpc::client::NamingClient;
use crate::grpc::shared::Listener;
use crate::grpc::{Error, ServiceInstance};
use crate::http::V1Client;

/// One of the two naming clients.
pub(crate) enum Naming {
    /// Nacos 2.x and later, over gRPC.
    Grpc(NamingClient),
    /// Nacos 1.x (and any later server), over the v1 HTTP API.
    Http(V1Client),
}

impl Naming {
    /// Registers `si` in `service` of `group`.
    pub(crate) async fn register(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        match self {
            Naming::Grpc(c) => c.register(group, service, si).await,
            Naming::Http(c) => c.register(group, service, si).await,
        }
    }

    /// Deregisters `si`.
    pub(crate) async fn deregister(
        &self,
        group: &str,
        service: &str,
        si: ServiceInstance,
    ) -> Result<(), Error> {
        match self {
            Naming::Grpc(c) => c.deregister(group, service, si).await,
            Naming::Http(c) => c.deregister(group, service, si).await,
        }
    }

    /// Registers `all` as this client's instances of `service`: one batch over gRPC
    /// (Nacos 2.1.1+), one registration each over HTTP.
    pub(crate) async fn batch_register(
        &self,
        group: &str,
        service: &str,
        all: Vec<ServiceInstance>,
    ) -> Result<(), Error> {
        match self {
            Naming::Grpc(c) => c.batch_register(group, service, all).await,
            Naming::Http(c) => c.register_each(group, service, all).await,
        }
    }

    /// The instances of `service` in `clusters`, in `namespace` (None: the client's).
    pub(crate) async fn query(
        &self,
        namespace: Option<&str>,
        group: &str,
        service: &str,
        clusters: &str,
    ) -> Result<Vec<ServiceInstance>, Error> {
        match self {
            Naming::Grpc(c) => c.query(namespace, group, service, clusters).await,
            Naming::Http(c) => c.query(namespace, group, service, clusters).await,
        }
    }

    /// One page of the service names of `group`, and the total.
    pub(crate) async fn service_names(
        &self,
        namespace: Option<&str>,
        group: &str,
        page_size: usize,
    ) -> Result<(Vec<String>, i64), Error> {
        match self {
            Naming::Grpc(c) => c.service_names(namespace, group, page_size).await,
            Naming::Http(c) => c.service_names(namespace, group, page_size).await,
        }
    }

    /// Subscribes to `service`'s pushes over gRPC. Over HTTP there is nothing to
    /// subscribe to: the registry's once-a-second resync of each watch is the 1.x
    /// client's polling (see [`crate::http`]); the id is then 0.
    pub(crate) async fn subscribe(
        &self,
        group: &str,
        service: &str,
        clusters: &str,
        listener: Listener,
    ) -> Result<u64, Error> {
        match self {
            Naming::Grpc(c) => c.subscribe(group, service, clusters, listener).await,
            Naming::Http(_) => Ok(0),
        }
    }

    /// Ends subscription `id` (over gRPC).
    pub(crate) async fn unsubscribe(&self, id: u64) -> Result<(), Error> {
        match self {
            Naming::Grpc(c) => c.unsubscribe(id).await,
            Naming::Http(_) => Ok(()),
        }
    }

    /// Which protocol it speaks ([`Protocol::Grpc`] or [`Protocol::Http`]).
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            Naming::Grpc(_) => Protocol::Grpc,
            Naming::Http(_) => Protocol::Http,
        }
    }
}
