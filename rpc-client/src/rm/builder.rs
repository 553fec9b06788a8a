//! [`RmBuilder`]: an [`RpcClient`](crate::RpcClient) set up as Seata's RM client is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline_registry_core::Config;

use super::handler::{BranchHandler, PhaseTwo};
use super::{Registration, ResourceManager};
use crate::connection::Connection;
use crate::error::RpcError;
use crate::handshake::{Handshake, SeataRegistration};
use crate::inbound::BoxFuture;
use crate::message::{RegisterRmRequest, SeataMessage};
use crate::outcome::Classifier;
use crate::role_builder::{Common, common_builder_methods};
use crate::settings::RmConfig;
use crate::transport::BatchOptions;

/// Builds a [`ResourceManager`]: the TCs' source, the configuration, the resources
/// registered on each connection (RegisterRM) and the phase-two handler.
pub struct RmBuilder {
    common: Common,
    resources: Vec<String>,
    handler: Option<Arc<dyn BranchHandler>>,
    options: RmConfig,
}

impl std::fmt::Debug for RmBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmBuilder")
            .field("common", &self.common)
            .field("resources", &self.resources)
            .field("handler", &self.handler.is_some())
            .finish()
    }
}

/// RegisterRM on every new connection, with the resources registered so far.
struct RmRegistration {
    registration: Arc<Registration>,
    timeout: Duration,
}

impl Handshake for RmRegistration {
    fn handshake<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let reg = SeataRegistration::rm(self.registration.request()).with_timeout(self.timeout);
            reg.handshake(conn).await
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn classifier(&self) -> Option<Classifier> {
        Some(Classifier::seata())
    }
}

impl RmBuilder {
    pub(super) fn new() -> Self {
        let mut common = Common::new();
        common.rpc = common.rpc.configure(|o| {
            o.request_timeout = Duration::from_secs(15);
            o.transport.batch = Some(BatchOptions::default());
        });
        RmBuilder {
            common,
            resources: Vec::new(),
            handler: None,
            options: RmConfig::default(),
        }
    }

    /// Applies `config`: the balancer, `transport.*` (timeouts, heartbeat, compressor,
    /// limits; requests wait `transport.rpcRmRequestTimeout`),
    /// `transport.enableRmClientBatchSendRequest` (else
    /// `enableClientBatchSendRequest`, else on) with `maxMergeSendMills`,
    /// `client.rm.*` ([`RmConfig`]: lock retries, phase-one reports), `applicationId`
    /// and `txServiceGroup`.
    pub fn config(mut self, config: &Config) -> Self {
        self.common.config(config);
        // An invalid key is recorded by the client builder (above) and fails `build`.
        if let Ok(t) = crate::TransportConfig::from_config(config) {
            let batch = t.rm_batch().then_some(BatchOptions {
                max_wait: t.max_merge_send_mills,
            });
            self.common.rpc = self.common.rpc.configure(|o| {
                o.request_timeout = t.rpc_rm_request_timeout;
                o.transport.batch = batch;
            });
        }
        match RmConfig::from_config(config) {
            Ok(o) => self.options = o,
            Err(e) => self.common.config_error = Some(e.to_string()),
        }
        self
    }

    /// Changes the RM's `client.rm.*` options (lock retries, reports) in place.
    pub fn rm_options(mut self, f: impl FnOnce(&mut RmConfig)) -> Self {
        f(&mut self.options);
        self
    }

    common_builder_methods!();

    /// A resource this RM manages (a JDBC URL, a TCC bean name). Registered with every
    /// TC; more can be added later with [`ResourceManager::register_resource`].
    pub fn resource(mut self, id: impl Into<String>) -> Self {
        let id = id.into();
        if !self.resources.contains(&id) {
            self.resources.push(id);
        }
        self
    }

    /// Several resources.
    pub fn resources<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for id in ids {
            self = self.resource(id);
        }
        self
    }

    /// What to do in phase two (required: a TC that cannot reach an RM's handler retries
    /// the branch forever).
    pub fn handler(mut self, handler: impl BranchHandler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Starts the client (it connects and registers in the background; wait with
    /// [`RpcClient::wait_alive`](crate::RpcClient::wait_alive)).
    pub async fn build(self) -> Result<ResourceManager, RpcError> {
        let handler = self.handler.ok_or_else(|| {
            RpcError::Config(
                "an RM needs a phase-two handler: call .handler(..) with a BranchHandler".into(),
            )
        })?;
        for id in &self.resources {
            if id.contains(',') {
                return Err(RpcError::Config(format!(
                    "resource id `{id}` contains `,`, which RegisterRM uses to join ids"
                )));
            }
        }
        let c = self.common;
        if let Some(e) = c.config_error {
            return Err(RpcError::Config(e));
        }
        // Once, when the RM starts: the Seata keys it was given that it does not act on.
        for inert in &self.options.inert {
            tracing::warn!("{inert}");
        }
        let registration = Arc::new(Registration {
            template: RegisterRmRequest {
                version: c.version,
                application_id: c.application_id,
                transaction_service_group: c.group,
                extra_data: c.extra_data,
                resource_ids: None,
            },
            resources: Mutex::new(self.resources),
        });
        // Encodable? (A resource id too long for RegisterRM fails here, not on connect.)
        SeataMessage::RegisterRm(registration.request()).encode()?;
        let limit = c.rpc.current_options().transport.max_frame_len;
        let handshake = RmRegistration {
            registration: registration.clone(),
            timeout: c.registration_timeout.unwrap_or(Duration::from_secs(15)),
        };
        let client = c
            .rpc
            .handshake(handshake)
            .inbound(PhaseTwo { handler, limit })
            .build()
            .await?;
        Ok(ResourceManager {
            client,
            registration,
            options: Arc::new(self.options),
        })
    }
}
