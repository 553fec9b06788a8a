//! The RM: register resources, register and report branches, query locks, and answer
//! phase two when the TC asks.
//!
//! A [`ResourceManager`] is an [`RpcClient`] registered with every TC as an RM
//! (RegisterRM with its resource ids on each connection) plus:
//!
//! - **Phase one**: [`branch_register`](ResourceManager::branch_register) (the TC
//!   assigns the branch id, or refuses with `LockKeyConflict` when another global
//!   transaction holds one of the lock keys: sent again every
//!   `client.rm.lock.retryInterval`, up to `client.rm.lock.retryTimes` more times, as
//!   Seata's `LockRetryController` does; `LockKeyConflictFailFast` at once),
//!   [`report_phase_one`](ResourceManager::report_phase_one) (Seata's AT report rules:
//!   `client.rm.reportSuccessEnable`, `client.rm.reportRetryCount`),
//!   [`branch_report`](ResourceManager::branch_report) and
//!   [`lock_query`](ResourceManager::lock_query), each routed by XID to the TC that
//!   owns the transaction.
//! - **Phase two**: the TC sends BranchCommit and BranchRollback over the RM's own
//!   connection, as requests; the [`BranchHandler`] you give decides each branch's
//!   status, and its answer goes back on that connection with the request's id (and
//!   compressor, as Seata echoes it). UndoLogDelete (one-way) goes to the same handler.
//!   A TC reaches the RM again after a reconnect: every new connection registers the
//!   resources again, and the TC looks RMs up by application id and resource id.
//! - **Batching** on by default, as in Seata's RM
//!   (`transport.enableRmClientBatchSendRequest`, `transport.maxMergeSendMills`):
//!   concurrent branch registrations to one TC travel as one MergedWarpMessage, each
//!   still with its own answer and error.
//! - Each request waits `transport.rpcRmRequestTimeout` (15 s).
//!
//! ```no_run
//! # async fn run(discovery: meshline_registry_core::Discovery, config: meshline_registry_core::Config)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use meshline_rpc_client::message::{BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType};
//! use meshline_rpc_client::rm::{BranchHandler, ResourceManager};
//!
//! struct Orders;
//!
//! #[meshline_rpc_client::rm::async_trait]
//! impl BranchHandler for Orders {
//!     async fn branch_commit(&self, _: BranchCommitRequest) -> Result<BranchStatus, String> {
//!         Ok(BranchStatus::PhaseTwoCommitted) // delete the undo log, confirm the TCC try...
//!     }
//!     async fn branch_rollback(&self, _: BranchRollbackRequest) -> Result<BranchStatus, String> {
//!         Ok(BranchStatus::PhaseTwoRollbacked) // apply the undo log, cancel...
//!     }
//! }
//!
//! let rm = ResourceManager::builder()
//!     .config(&config)
//!     .discovery(discovery, &config.tx_service_group)
//!     .resource("jdbc:mysql://10.0.0.9:3306/orders")
//!     .handler(Orders)
//!     .build()
//!     .await?;
//! # let xid = "10.0.0.7:8091:1";
//! let branch = rm
//!     .branch_register(xid, BranchType::AT, "jdbc:mysql://10.0.0.9:3306/orders", Some("t_order:42"), None)
//!     .await?;
//! # let _ = branch; Ok(()) }
//! ```

mod builder;
mod handler;

use std::sync::{Arc, Mutex};

pub use crate::tx_error::TransactionError;
pub use async_trait::async_trait;
pub use builder::RmBuilder;
pub use handler::BranchHandler;

use crate::client::RpcClient;
use crate::exchange::{exchange, wait_for_reconnect};
use crate::message::{
    BranchRegisterRequest, BranchReportRequest, BranchStatus, BranchType, GlobalEndRequest,
    GlobalStatus, RegisterRmRequest, SeataMessage, TransactionExceptionCode,
};
use crate::payload::Payload;
use crate::settings::RmConfig;

/// The registration an RM makes, and the resources it names (shared with the
/// handshake, which reads them on every new connection).
#[derive(Debug)]
pub(crate) struct Registration {
    pub template: RegisterRmRequest,
    pub resources: Mutex<Vec<String>>,
}

impl Registration {
    /// The RegisterRM for a new connection: every resource so far.
    pub fn request(&self) -> RegisterRmRequest {
        let ids = self
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join(",");
        RegisterRmRequest {
            resource_ids: (!ids.is_empty()).then_some(ids),
            ..self.template.clone()
        }
    }
}

/// A Seata RM over an [`RpcClient`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ResourceManager {
    client: RpcClient,
    registration: Arc<Registration>,
    options: Arc<RmConfig>,
}

impl ResourceManager {
    /// A builder: where the TCs are, the resources, the phase-two handler.
    pub fn builder() -> RmBuilder {
        RmBuilder::new()
    }

    /// The client underneath (alive TCs, stats, shutdown).
    pub fn client(&self) -> &RpcClient {
        &self.client
    }

    /// The resource ids registered with every TC.
    pub fn resources(&self) -> Vec<String> {
        self.registration
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Registers a branch of `xid` on `resource_id` holding `lock_keys`
    /// (`table:pk1,pk2;table2:pk`) and returns the branch id the TC assigned.
    ///
    /// A lock held by another global transaction is retried as Seata's
    /// `LockRetryController` does: sent again after `client.rm.lock.retryInterval`
    /// (10 ms), up to `client.rm.lock.retryTimes` (30) more times; then
    /// [`TransactionError::Refused`] with `LockKeyConflict`. `LockKeyConflictFailFast`
    /// (the holder is rolling back: its rows will not be free soon) is returned at once.
    pub async fn branch_register(
        &self,
        xid: &str,
        branch_type: BranchType,
        resource_id: &str,
        lock_keys: Option<&str>,
        application_data: Option<&str>,
    ) -> Result<i64, TransactionError> {
        // Every attempt sends the same request.
        let msg = SeataMessage::BranchRegister(BranchRegisterRequest {
            xid: xid.to_string(),
            branch_type,
            resource_id: resource_id.to_string(),
            lock_key: lock_keys.map(str::to_string),
            application_data: application_data.map(str::to_string),
        });
        let mut retries_left = self.options.lock_retry_times;
        loop {
            match self.register_once(xid, &msg).await {
                Err(e)
                    if retries_left > 0
                        && e.exception_code() == TransactionExceptionCode::LockKeyConflict
                        && matches!(e, TransactionError::Refused { .. }) =>
                {
                    retries_left -= 1;
                    tracing::debug!(%xid, retries_left, "lock conflict; registering again");
                    tokio::time::sleep(self.options.lock_retry_interval).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`branch_register`](Self::branch_register): `msg` is its
    /// `BranchRegister` request for `xid`.
    async fn register_once(&self, xid: &str, msg: &SeataMessage) -> Result<i64, TransactionError> {
        const OP: &str = "branch register";
        let answer = exchange(&self.client, OP, Some(xid), xid, msg, None).await?;
        let SeataMessage::BranchRegisterResponse(r) = &answer.message else {
            return Err(answer.unexpected(OP, "BranchRegisterResponse"));
        };
        answer.check(OP, Some(xid), &r.result, None)?;
        Ok(r.branch_id)
    }

    /// Reports how branch `branch_id`'s phase one ended, by Seata's rules for it
    /// (`ConnectionProxy.report`): a success only when `client.rm.reportSuccessEnable`
    /// is on (else the TC learns of it at phase two, and `Ok(false)` says nothing was
    /// sent), a failure always; each report that fails, for any reason, is sent again,
    /// `client.rm.reportRetryCount` attempts in all; after a lost connection the next
    /// attempt first waits (once) for the TC the XID names to be connected again, as
    /// the TM's commit does. `Ok(true)`: reported.
    pub async fn report_phase_one(
        &self,
        xid: &str,
        branch_id: i64,
        branch_type: BranchType,
        resource_id: &str,
        succeeded: bool,
    ) -> Result<bool, TransactionError> {
        if succeeded && !self.options.report_success_enable {
            return Ok(false);
        }
        let status = if succeeded {
            BranchStatus::PhaseOneDone
        } else {
            BranchStatus::PhaseOneFailed
        };
        let attempts = self.options.report_retry_count.max(1);
        let mut attempt = 0;
        let mut waited = false;
        loop {
            attempt += 1;
            match self
                .branch_report(xid, branch_id, branch_type, resource_id, status, None)
                .await
            {
                Ok(()) => return Ok(true),
                Err(e) if attempt < attempts => {
                    tracing::warn!(%xid, branch_id, attempt, attempts, error = %e, "phase-one report failed; sending it again");
                    // A lost connection: the next attempt waits (once) for the TC the
                    // XID names to be connected again, as the TM's commit does.
                    if matches!(e, TransactionError::Rpc { .. }) && !e.is_not_delivered() && !waited
                    {
                        waited = true;
                        wait_for_reconnect(&self.client, "branch report", xid).await;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The `client.rm.*` options in force.
    pub fn options(&self) -> &RmConfig {
        &self.options
    }

    /// Reports branch `branch_id`'s phase-one `status` (`PhaseOne_Done`,
    /// `PhaseOne_Failed`...), once, whatever `client.rm.*` says: the raw request (a TCC
    /// action updating its application data sends `Registered` with it, as Seata's
    /// `BusinessActionContextUtil` does). For an AT branch's outcome, see
    /// [`report_phase_one`](Self::report_phase_one).
    pub async fn branch_report(
        &self,
        xid: &str,
        branch_id: i64,
        branch_type: BranchType,
        resource_id: &str,
        status: BranchStatus,
        application_data: Option<&str>,
    ) -> Result<(), TransactionError> {
        const OP: &str = "branch report";
        let msg = SeataMessage::BranchReport(BranchReportRequest {
            xid: xid.to_string(),
            branch_id,
            status,
            resource_id: Some(resource_id.to_string()),
            application_data: application_data.map(str::to_string),
            branch_type,
        });
        let answer = exchange(&self.client, OP, Some(xid), xid, &msg, None).await?;
        let SeataMessage::BranchReportResponse(r) = &answer.message else {
            return Err(answer.unexpected(OP, "BranchReportResponse"));
        };
        answer.check(OP, Some(xid), &r.result, None)
    }

    /// True when no global transaction other than `xid` holds any of `lock_keys` on
    /// `resource_id` (GlobalLockQuery).
    pub async fn lock_query(
        &self,
        branch_type: BranchType,
        resource_id: &str,
        xid: &str,
        lock_keys: &str,
    ) -> Result<bool, TransactionError> {
        const OP: &str = "global lock query";
        let msg = SeataMessage::GlobalLockQuery(BranchRegisterRequest {
            xid: xid.to_string(),
            branch_type,
            resource_id: resource_id.to_string(),
            lock_key: Some(lock_keys.to_string()),
            application_data: None,
        });
        let answer = exchange(&self.client, OP, Some(xid), xid, &msg, None).await?;
        let SeataMessage::GlobalLockQueryResponse(r) = &answer.message else {
            return Err(answer.unexpected(OP, "GlobalLockQueryResponse"));
        };
        answer.check(OP, Some(xid), &r.result, None)?;
        Ok(r.lockable)
    }

    /// The status of `xid` at its TC (an RM asks before acting on a transaction it
    /// has lost track of).
    pub async fn global_status(&self, xid: &str) -> Result<GlobalStatus, TransactionError> {
        const OP: &str = "global status";
        let msg = SeataMessage::GlobalStatus(GlobalEndRequest::new(xid));
        let answer = exchange(&self.client, OP, Some(xid), xid, &msg, None).await?;
        let SeataMessage::GlobalStatusResponse(r) = &answer.message else {
            return Err(answer.unexpected(OP, "GlobalStatusResponse"));
        };
        answer.check(OP, Some(xid), &r.result, Some(r.global_status))?;
        Ok(r.global_status)
    }

    /// Adds a resource: every new connection registers it, and every open one is told
    /// now with a one-way RegisterRM naming it alone, as Seata's RM does. Returns how
    /// many connections were told; one that cannot be told is closing and registers
    /// everything again when it reconnects.
    pub async fn register_resource(&self, resource_id: &str) -> usize {
        {
            let mut r = self
                .registration
                .resources
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if r.iter().any(|x| x == resource_id) {
                return 0;
            }
            r.push(resource_id.to_string());
        }
        let msg = SeataMessage::RegisterRm(RegisterRmRequest {
            resource_ids: Some(resource_id.to_string()),
            ..self.registration.template.clone()
        });
        let Ok(payload) = Payload::seata(&msg) else {
            tracing::warn!(resource_id, "resource id too long to register");
            return 0;
        };
        let mut told = 0;
        for e in self.client.alive().endpoints() {
            match e.connection.send_oneway(payload.clone()).await {
                Ok(()) => told += 1,
                Err(err) => {
                    tracing::debug!(tc = %e.instance, error = %err, "could not tell a TC about a new resource")
                }
            }
        }
        told
    }

    /// Tells every TC this RM is connected to that it leaves: a one-way UnregisterRM
    /// naming every resource, as Seata's RM does on shutdown (`RmNettyRemotingClient.destroy`),
    /// so the TC stops counting on it for phase two at once rather than when the
    /// connection ends. Only TCs from 2.7.0 know the message (a 2.6 TC cannot decode
    /// it): an older one, or one whose version is unknown, is skipped. Returns how many
    /// TCs were told.
    pub async fn unregister(&self) -> usize {
        let resources = self
            .registration
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join(",");
        if resources.is_empty() {
            return 0;
        }
        let msg = SeataMessage::UnregisterRm(RegisterRmRequest {
            resource_ids: Some(resources),
            ..self.registration.template.clone()
        });
        let Ok(payload) = Payload::seata(&msg) else {
            tracing::warn!("the resource ids are too long to unregister");
            return 0;
        };
        let mut told = 0;
        for e in self.client.alive().endpoints() {
            let version = e.connection.state::<crate::TcVersion>();
            if !version.as_ref().is_some_and(|v| v.at_least(2, 7, 0)) {
                tracing::debug!(tc = %e.instance, version = ?version.map(|v| v.0.clone()), "the TC does not know UnregisterRM; not sent");
                continue;
            }
            match e.connection.send_oneway(payload.clone()).await {
                Ok(()) => told += 1,
                Err(err) => {
                    tracing::debug!(tc = %e.instance, error = %err, "could not unregister from a TC")
                }
            }
        }
        told
    }

    /// The RM's orderly end: [`unregister`](Self::unregister) from the TCs that know
    /// how, then the client's [`shutdown`](RpcClient::shutdown) (calls in flight
    /// finish, up to `deadline`, and the connections close).
    pub async fn shutdown(&self, deadline: std::time::Duration) {
        self.unregister().await;
        self.client.shutdown(deadline).await;
    }
}
