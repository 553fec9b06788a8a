//! The naming client the registry runs on: Nacos 2's gRPC protocol
//! ([`crate::grpc`]) or Nacos 1.x's open API over HTTP ([`crate::http`]), chosen at
//! connect (`registry.nacos.protocol`, or the server's version). Everything above it
//! (registrations, watches, `nearby`) is the same for both.

use crate::Protocol;
use crate::grpc::client::NamingClient;
use crate::grpc::shared::Listener;
use crate::grpc::{Error, ServiceInstance};
use crate::http::V1Client;

/// One write of this client's own instances, as [`Naming::write`] sends it.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    /// Registers one instance with the single-instance call.
    Register(ServiceInstance),
    /// Deregisters one instance.
    Deregister(ServiceInstance),
    /// Registers these as this client's whole batch of the service.
    Batch(Vec<ServiceInstance>),
}

impl Call {
    /// The call as errors name it.
    pub(crate) fn op(&self) -> &'static str {
        match self {
            Call::Register(_) => "register",
            Call::Deregister(_) => "deregister",
            Call::Batch(_) => {
                "batch register (several instances of one service from one client; \
                 Nacos servers before 2.1.1 lack it)"
            }
        }
    }
}

/// One of the two naming clients.
pub(crate) enum Naming {
    /// Nacos 2.x and later, over gRPC.
    Grpc(NamingClient),
    /// Nacos 1.x (and any later server), over the v1 HTTP API.
    Http(V1Client),
}

impl Naming {
    /// Sends `call` for `service` of `group`. A batch is one call over gRPC (Nacos
    /// 2.1.1+), one registration each over HTTP.
    pub(crate) async fn write(&self, group: &str, service: &str, call: Call) -> Result<(), Error> {
        match (self, call) {
            (Naming::Grpc(c), Call::Register(si)) => c.register(group, service, si).await,
            (Naming::Http(c), Call::Register(si)) => c.register(group, service, si).await,
            (Naming::Grpc(c), Call::Deregister(si)) => c.deregister(group, service, si).await,
            (Naming::Http(c), Call::Deregister(si)) => c.deregister(group, service, si).await,
            (Naming::Grpc(c), Call::Batch(all)) => c.batch_register(group, service, all).await,
            (Naming::Http(c), Call::Batch(all)) => c.register_each(group, service, all).await,
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
