//! The TM: begin, commit, roll back, ask and report global transactions.
//!
//! A [`TransactionManager`] is an [`RpcClient`] registered with every TC as a TM
//! (RegisterTM on each connection) plus Seata's rules for the five TM requests:
//!
//! - **Routing** as Seata's client does it: GlobalBegin by its transaction name (with the
//!   `XID` balancer a name without `:` lands on any alive TC), everything else by XID,
//!   so commit, rollback, status and report reach the TC that began the transaction.
//! - **Retries** (`client.tm.commitRetryCount`, `client.tm.rollbackRetryCount`, 5
//!   each): a commit or rollback that gets *no answer* (timeout, connection lost, no TC
//!   alive) is sent again, at most that many attempts in all. When the attempt's
//!   connection was lost, the next attempt first waits for the reconnect to the TC the
//!   XID names (or to any TC, when none is alive; once, up to twice `backoff_initial`
//!   plus `connect_timeout`), as Seata's TM reconnects to that TC before it sends
//!   again. An answer, whatever it says, ends the attempts. A TC's commit is
//!   idempotent: a second commit of a
//!   committed transaction answers its status or `Finished`.
//! - **Outcomes** as Seata's `TransactionalTemplate` reads them: the status answered
//!   is the outcome, **whatever the result code**. Seata's TC answers `Failed` with a
//!   decided status when something after the decision failed (a commit whose TCC, XA or
//!   SAGA RM is not connected is `Failed` / `Unknown` / `CommitRetrying`: committed, the
//!   TC retries phase two), and Seata's TM returns that status; a caller that took it
//!   for a refusal and compensated would undo a committed transaction. So:
//!
//!   | answer to a commit | result |
//!   |---|---|
//!   | `Committed`, `AsyncCommitting`, `Committing`, `CommitRetrying` (any result code; a `Failed` one is logged at WARN with the TC's message) | `Ok(status)` |
//!   | `Finished` | [`TransactionError::Outcome`], `CommitHeuristic`: the TC no longer knows it, it may have been rolled back |
//!   | `TimeoutRollback*` | `Outcome`, `TransactionTimeout` |
//!   | any other decided status (rolled back, failed) | `Outcome`: not committed (Seata's TM would not say so) |
//!   | `Failed` with `Begin` or `UnKnown`: nothing was decided | [`TransactionError::Refused`] with the TC's exception code and message |
//!
//!   A rollback the same way (`Rollbacked`, `Rollbacking`, `RollbackRetrying`,
//!   `TimeoutRollback*` and `Finished` are rolled back). A status or report answered
//!   `Failed` is its status unless that is `UnKnown`.
//! - **Timeouts**: [`begin`](TransactionManager::begin) takes the transaction's timeout
//!   (`client.tm.defaultGlobalTransactionTimeout`, 60 s, with
//!   [`begin_default`](TransactionManager::begin_default)); a
//!   [`GlobalTransaction`] past its timeout is rolled back instead of committed, as
//!   Seata's TM does. Each request waits `transport.rpcTmRequestTimeout` (30 s).
//! - **Batching** is off, as in Seata's TM (`transport.enableTmClientBatchSendRequest`).
//!
//! ```no_run
//! # async fn run(discovery: meshline_registry_core::Discovery, config: meshline_registry_core::Config)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use meshline_rpc_client::tm::TransactionManager;
//!
//! let tm = TransactionManager::builder()
//!     .config(&config)
//!     .discovery(discovery, &config.tx_service_group)
//!     .build()
//!     .await?;
//! tm.client().wait_alive(1, Duration::from_secs(5)).await?;
//! let tx = tm.begin("create-order", Duration::from_secs(60)).await?;
//! // ... the RMs register their branches under tx.xid() ...
//! let status = tx.commit().await?;
//! println!("{} {status}", tx.xid());
//! # Ok(()) }
//! ```

mod builder;

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_registry_core::Config;

pub use crate::tx_error::TransactionError;
pub use builder::TmBuilder;

use crate::client::RpcClient;
use crate::exchange::{exchange, wait_for_reconnect};
use crate::message::{
    GlobalBeginRequest, GlobalEndRequest, GlobalReportRequest, GlobalStatus, SeataMessage,
    TransactionExceptionCode,
};

/// The TM's retry counts and default timeout (`client.tm.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmOptions {
    /// Attempts of a commit that gets no answer (`client.tm.commitRetryCount`, 5).
    pub commit_retry_count: u32,
    /// Attempts of a rollback that gets no answer (`client.tm.rollbackRetryCount`, 5).
    pub rollback_retry_count: u32,
    /// A transaction's timeout when none is given
    /// (`client.tm.defaultGlobalTransactionTimeout`, 60 s).
    pub default_timeout: Duration,
}

impl Default for TmOptions {
    fn default() -> Self {
        TmOptions {
            commit_retry_count: 5,
            rollback_retry_count: 5,
            default_timeout: Duration::from_secs(60),
        }
    }
}

impl TmOptions {
    /// The `client.tm.*` keys of `config` ([`crate::TmConfig`]); an invalid value is an
    /// error naming the key.
    pub fn from_config(config: &Config) -> Result<Self, meshline_registry_core::RegistryError> {
        Ok(TmOptions::from_tm_config(&crate::TmConfig::from_config(
            config,
        )?))
    }

    /// The options `tm` (the `client.tm.*` keys, read) sets.
    pub fn from_tm_config(tm: &crate::TmConfig) -> Self {
        TmOptions {
            commit_retry_count: tm.commit_retry_count,
            rollback_retry_count: tm.rollback_retry_count,
            default_timeout: tm.default_global_transaction_timeout,
        }
    }
}

/// A Seata TM over an [`RpcClient`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TransactionManager {
    client: RpcClient,
    options: Arc<TmOptions>,
}

/// A global transaction this TM began: its XID, and commit / rollback that know its
/// timeout.
#[derive(Clone, Debug)]
pub struct GlobalTransaction {
    xid: String,
    tm: TransactionManager,
    begun: Instant,
    timeout: Duration,
}

impl TransactionManager {
    /// A builder: where the TCs are, the configuration, the registration.
    pub fn builder() -> TmBuilder {
        TmBuilder::new()
    }

    /// A TM over a client built by hand (it must register as a TM on its connections,
    /// e.g. with [`SeataRegistration::tm`](crate::SeataRegistration::tm)).
    pub fn from_client(client: RpcClient, options: TmOptions) -> Self {
        TransactionManager {
            client,
            options: Arc::new(options),
        }
    }

    /// The client underneath (alive TCs, stats, shutdown).
    pub fn client(&self) -> &RpcClient {
        &self.client
    }

    /// The options in force.
    pub fn options(&self) -> &TmOptions {
        &self.options
    }

    /// Begins a global transaction named `name` that the TC rolls back after `timeout`
    /// (sent in whole milliseconds, at most `i32::MAX`).
    pub async fn begin(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<GlobalTransaction, TransactionError> {
        const OP: &str = "global begin";
        let timeout_ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let msg = SeataMessage::GlobalBegin(GlobalBeginRequest {
            timeout_ms,
            transaction_name: Some(name.to_string()),
        });
        let answer = exchange(&self.client, OP, None, name, &msg, None).await?;
        let SeataMessage::GlobalBeginResponse(r) = &answer.message else {
            return Err(answer.unexpected(OP, "GlobalBeginResponse"));
        };
        answer.check(OP, None, &r.result, None)?;
        let xid =
            r.xid
                .clone()
                .filter(|x| !x.is_empty())
                .ok_or_else(|| TransactionError::Refused {
                    operation: OP,
                    xid: None,
                    endpoint: answer.endpoint.to_string(),
                    exception: TransactionExceptionCode::BeginFailed,
                    message: Some("the TC answered success without an XID".into()),
                    status: None,
                })?;
        tracing::debug!(%xid, tc = %answer.endpoint, "global transaction begun");
        Ok(GlobalTransaction {
            xid,
            tm: self.clone(),
            begun: Instant::now(),
            timeout: Duration::from_millis(timeout_ms as u64),
        })
    }

    /// [`begin`](Self::begin) with `client.tm.defaultGlobalTransactionTimeout`.
    pub async fn begin_default(&self, name: &str) -> Result<GlobalTransaction, TransactionError> {
        self.begin(name, self.options.default_timeout).await
    }

    /// Commits `xid`: phase two runs on every branch. Returns the status the TC
    /// answered (`Committed`; `AsyncCommitting`, `Committing` or `CommitRetrying` when
    /// the TC finishes in the background). See the [module docs](self) for retries and
    /// the statuses that are errors.
    pub async fn commit(&self, xid: &str) -> Result<GlobalStatus, TransactionError> {
        self.end(
            "global commit",
            xid,
            self.options.commit_retry_count,
            SeataMessage::GlobalCommit(GlobalEndRequest::new(xid)),
        )
        .await
    }

    /// Rolls `xid` back. Returns the status answered (`Rollbacked`, `TimeoutRollbacked`,
    /// `Finished`, or `Rollbacking` / `RollbackRetrying` while the TC finishes).
    pub async fn rollback(&self, xid: &str) -> Result<GlobalStatus, TransactionError> {
        self.end(
            "global rollback",
            xid,
            self.options.rollback_retry_count,
            SeataMessage::GlobalRollback(GlobalEndRequest::new(xid)),
        )
        .await
    }

    /// The status of `xid` (`Finished` when the TC no longer knows it). Not retried.
    pub async fn status(&self, xid: &str) -> Result<GlobalStatus, TransactionError> {
        let msg = SeataMessage::GlobalStatus(GlobalEndRequest::new(xid));
        self.global_end_call("global status", xid, &msg).await
    }

    /// Reports `status` for `xid` (Saga); returns the status the TC answered.
    pub async fn report(
        &self,
        xid: &str,
        status: GlobalStatus,
    ) -> Result<GlobalStatus, TransactionError> {
        let msg = SeataMessage::GlobalReport(GlobalReportRequest {
            xid: xid.to_string(),
            extra_data: None,
            global_status: Some(status),
        });
        self.global_end_call("global report", xid, &msg).await
    }

    /// One GlobalCommit/Rollback/Status/Report exchange: the status, or the TC's refusal.
    async fn global_end_call(
        &self,
        op: &'static str,
        xid: &str,
        msg: &SeataMessage,
    ) -> Result<GlobalStatus, TransactionError> {
        Ok(self.global_end_answer(op, xid, msg).await?.0)
    }

    async fn global_end_answer(
        &self,
        op: &'static str,
        xid: &str,
        msg: &SeataMessage,
    ) -> Result<(GlobalStatus, String), TransactionError> {
        let answer = exchange(&self.client, op, Some(xid), xid, msg, None).await?;
        let r = match (&answer.message, msg) {
            (SeataMessage::GlobalCommitResponse(r), SeataMessage::GlobalCommit(_))
            | (SeataMessage::GlobalRollbackResponse(r), SeataMessage::GlobalRollback(_))
            | (SeataMessage::GlobalStatusResponse(r), SeataMessage::GlobalStatus(_))
            | (SeataMessage::GlobalReportResponse(r), SeataMessage::GlobalReport(_)) => r,
            _ => return Err(answer.unexpected(op, "the matching global response")),
        };
        if !r.result.is_success() {
            if !decided(msg, r.global_status) {
                return Err(TransactionError::refused(
                    op,
                    Some(xid),
                    &answer.endpoint,
                    &r.result,
                    Some(r.global_status),
                ));
            }
            tracing::warn!(
                %xid,
                tc = %answer.endpoint,
                status = %r.global_status,
                exception = %r.result.exception,
                message = r.result.message.as_deref().unwrap_or(""),
                "{op}: the TC answered Failed, with a status that shows the decision; the status is the outcome"
            );
        }
        Ok((r.global_status, answer.endpoint.to_string()))
    }

    /// Commit or rollback with Seata's retries, then the answered status judged.
    async fn end(
        &self,
        op: &'static str,
        xid: &str,
        retries: u32,
        msg: SeataMessage,
    ) -> Result<GlobalStatus, TransactionError> {
        let attempts = retries.max(1);
        let mut attempt = 0;
        // Whether this commit already waited for a lost connection to come back.
        let mut waited = false;
        let (status, endpoint) = loop {
            attempt += 1;
            match self.global_end_answer(op, xid, &msg).await {
                Ok(answered) => break answered,
                Err(e @ TransactionError::Rpc { .. }) if attempt < attempts => {
                    // Only a request that may have reached a TC is a retry to the budget;
                    // one that never left (nothing alive, not written) is sent, not resent.
                    let reached = !e.is_not_delivered();
                    if reached && !self.client.withdraw_retry() {
                        tracing::warn!(%xid, attempt, error = %e, "{op}: no answer, and the retry budget is spent; not sent again");
                        return Err(e);
                    }
                    tracing::warn!(%xid, attempt, attempts, error = %e, "{op}: no answer; trying again");
                    // The connection this attempt went out on was lost: the TC it
                    // reached (the one the XID names, or the only one) is not alive until
                    // the reconnect, a backoff away. Seata's TM reconnects to that TC
                    // before it sends again; here the next attempt waits for it (once),
                    // instead of failing "none is alive" at once or going to another TC,
                    // which does not hold the transaction. Nothing alive from the start
                    // (every TC gone) still fails at once.
                    if reached && !waited {
                        waited = true;
                        wait_for_reconnect(&self.client, op, xid).await;
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let commit = matches!(msg, SeataMessage::GlobalCommit(_));
        judge(op, xid, &endpoint, status, commit, attempt > 1)
    }
}

/// Whether `status`, answered `Failed` to `request`, still tells what happened to the
/// transaction, as Seata's TM reads it: `DefaultTransactionManager` returns the status
/// of a commit, rollback, status or report answer whatever its result code, and
/// `TransactionalTemplate` judges the status alone. Seata's TC answers `Failed` with a
/// decided status when something after the decision failed: a commit whose RM is gone
/// is `Failed` / `Unknown` / `CommitRetrying` (the TC retries phase two), a store that
/// fails after the decision leaves the status it had (`checkTransactionStatus`).
///
/// Not decided: `UnKnown` (the TC could not tell), and for a commit or rollback `Begin`
/// (nothing was decided: the TC's session lock or store failed first). Those are the
/// TC's refusal, with its code.
fn decided(request: &SeataMessage, status: GlobalStatus) -> bool {
    match request {
        SeataMessage::GlobalCommit(_) | SeataMessage::GlobalRollback(_) => {
            !matches!(status, GlobalStatus::Unknown | GlobalStatus::Begin)
        }
        _ => status != GlobalStatus::Unknown,
    }
}

/// Whether the status answered to a commit (or rollback) means it happened.
fn judge(
    op: &'static str,
    xid: &str,
    endpoint: &str,
    status: GlobalStatus,
    commit: bool,
    retried: bool,
) -> Result<GlobalStatus, TransactionError> {
    use GlobalStatus::*;
    let outcome = |exception, reason: String| {
        Err(TransactionError::Outcome {
            operation: op,
            xid: xid.to_string(),
            endpoint: endpoint.to_string(),
            status,
            exception,
            reason,
        })
    };
    match (commit, status) {
        (true, Committed | AsyncCommitting | Committing | CommitRetrying) => Ok(status),
        (true, Finished) => outcome(
            TransactionExceptionCode::CommitHeuristic,
            if retried {
                "the TC no longer knows the transaction: an earlier attempt whose answer \
                 was lost may have committed it, or it was rolled back"
                    .into()
            } else {
                "the TC no longer knows the transaction: it may have been rolled back".into()
            },
        ),
        (
            true,
            TimeoutRollbacking
            | TimeoutRollbacked
            | TimeoutRollbackRetrying
            | TimeoutRollbackFailed,
        ) => outcome(
            TransactionExceptionCode::TransactionTimeout,
            "the transaction timed out and the TC rolls it back".into(),
        ),
        (true, _) => outcome(
            TransactionExceptionCode::Unknown,
            "the transaction was not committed".into(),
        ),
        (
            false,
            Rollbacked
            | TimeoutRollbacked
            | Finished
            | Rollbacking
            | RollbackRetrying
            | TimeoutRollbacking
            | TimeoutRollbackRetrying,
        ) => Ok(status),
        (false, _) => outcome(
            TransactionExceptionCode::BranchRollbackFailedUnretriable,
            "the transaction was not rolled back".into(),
        ),
    }
}

impl GlobalTransaction {
    /// The XID (`ip:port:transactionId`, naming the TC that began it).
    pub fn xid(&self) -> &str {
        &self.xid
    }

    /// The timeout it was begun with.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Commits it. Past its timeout it is rolled back instead and the error says so
    /// (`TransactionTimeout`), as Seata's TM does: the TC is rolling it back anyway.
    pub async fn commit(&self) -> Result<GlobalStatus, TransactionError> {
        if self.past_timeout() {
            return Err(self.rollback_timed_out().await);
        }
        self.tm.commit(&self.xid).await
    }

    /// Whether it has outlived its timeout (measured here, from the begin): the TC
    /// rolls it back, and a commit would be refused.
    pub fn past_timeout(&self) -> bool {
        self.begun.elapsed() > self.timeout
    }

    /// The commit of a transaction past its timeout: rolled back instead, and the
    /// error that says so (`TransactionTimeout`, with the status the rollback got), or
    /// the rollback's own error.
    pub(crate) async fn rollback_timed_out(&self) -> TransactionError {
        match self.tm.rollback(&self.xid).await {
            Ok(status) => TransactionError::Outcome {
                operation: "global commit",
                xid: self.xid.clone(),
                endpoint: "this TM".into(),
                status,
                exception: TransactionExceptionCode::TransactionTimeout,
                reason: format!(
                    "the transaction outlived its {:?} timeout before commit; rolled back instead",
                    self.timeout
                ),
            },
            Err(e) => e,
        }
    }

    /// Rolls it back.
    pub async fn rollback(&self) -> Result<GlobalStatus, TransactionError> {
        self.tm.rollback(&self.xid).await
    }

    /// Its status at the TC.
    pub async fn status(&self) -> Result<GlobalStatus, TransactionError> {
        self.tm.status(&self.xid).await
    }

    /// Reports `status` for it (Saga).
    pub async fn report(&self, status: GlobalStatus) -> Result<GlobalStatus, TransactionError> {
        self.tm.report(&self.xid, status).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_and_rollback_outcomes_follow_seatas_tm() {
        for s in [
            GlobalStatus::Committed,
            GlobalStatus::AsyncCommitting,
            GlobalStatus::CommitRetrying,
        ] {
            assert_eq!(judge("c", "x", "tc", s, true, false).unwrap(), s);
        }
        let e = judge("c", "x", "tc", GlobalStatus::Finished, true, false).unwrap_err();
        assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::CommitHeuristic
        );
        let e = judge("c", "x", "tc", GlobalStatus::Finished, true, true).unwrap_err();
        assert!(
            e.to_string()
                .contains("earlier attempt whose answer was lost"),
            "{e}"
        );
        let e = judge("c", "x", "tc", GlobalStatus::TimeoutRollbacked, true, false).unwrap_err();
        assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::TransactionTimeout
        );
        assert_eq!(e.global_status(), Some(GlobalStatus::TimeoutRollbacked));
        assert!(judge("c", "x", "tc", GlobalStatus::Rollbacked, true, false).is_err());
        for s in [
            GlobalStatus::Rollbacked,
            GlobalStatus::Finished,
            GlobalStatus::TimeoutRollbacked,
        ] {
            assert_eq!(judge("r", "x", "tc", s, false, false).unwrap(), s);
        }
        assert!(judge("r", "x", "tc", GlobalStatus::Committed, false, false).is_err());
        assert!(judge("r", "x", "tc", GlobalStatus::RollbackFailed, false, false).is_err());
    }
}
