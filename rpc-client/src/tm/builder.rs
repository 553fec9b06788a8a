//! [`TmBuilder`]: an [`RpcClient`](crate::RpcClient) set up as Seata's TM client is.

use meshline_registry_core::Config;

use super::{TmOptions, TransactionManager};
use crate::error::RpcError;
use crate::handshake::SeataRegistration;
use crate::message::RegisterTmRequest;
use crate::role_builder::{Common, common_builder_methods};
use crate::transport::BatchOptions;

/// Builds a [`TransactionManager`]: the TCs' source, the configuration, the
/// registration each connection makes (RegisterTM).
#[derive(Debug)]
pub struct TmBuilder {
    common: Common,
    options: TmOptions,
}

impl TmBuilder {
    pub(super) fn new() -> Self {
        TmBuilder {
            common: Common::new(),
            options: TmOptions::default(),
        }
    }

    /// Applies `config`: the balancer, `transport.*` (timeouts, heartbeat, compressor,
    /// limits; requests wait `transport.rpcTmRequestTimeout`),
    /// `transport.enableTmClientBatchSendRequest` with `maxMergeSendMills`,
    /// `client.tm.*`, `applicationId` and `txServiceGroup`.
    pub fn config(mut self, config: &Config) -> Self {
        self.common.config(config);
        // An invalid key is recorded by the client builder (above) and fails `build`.
        if let Ok(t) = crate::TransportConfig::from_config(config) {
            let batch = t
                .enable_tm_client_batch_send_request
                .then_some(BatchOptions {
                    max_wait: t.max_merge_send_mills,
                });
            self.common.rpc = self.common.rpc.configure(|o| {
                o.request_timeout = t.rpc_tm_request_timeout;
                o.transport.batch = batch;
            });
        }
        match crate::TmConfig::from_config(config) {
            Ok(tm) => {
                // Once, as the TM is set up: the Seata keys it was given that it does
                // not act on.
                for inert in &tm.inert {
                    tracing::warn!("{inert}");
                }
                self.options = TmOptions::from_tm_config(&tm);
            }
            Err(e) => self.common.config_error = Some(e.to_string()),
        }
        self
    }

    common_builder_methods!();

    /// Changes the TM's options (retries, default timeout) in place.
    pub fn tm_options(mut self, f: impl FnOnce(&mut TmOptions)) -> Self {
        f(&mut self.options);
        self
    }

    /// Starts the client (it connects and registers in the background; wait with
    /// [`RpcClient::wait_alive`](crate::RpcClient::wait_alive)).
    pub async fn build(self) -> Result<TransactionManager, RpcError> {
        let c = self.common;
        if let Some(e) = c.config_error {
            return Err(RpcError::Config(e));
        }
        let mut handshake = SeataRegistration::tm(RegisterTmRequest {
            version: c.version,
            application_id: c.application_id,
            transaction_service_group: c.group,
            extra_data: c.extra_data,
        });
        if let Some(t) = c.registration_timeout {
            handshake = handshake.with_timeout(t);
        }
        let client = c.rpc.handshake(handshake).build().await?;
        Ok(TransactionManager::from_client(client, self.options))
    }
}
