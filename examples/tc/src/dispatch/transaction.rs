//! The transaction requests of a registered client (`is_mergeable_request`: begin,
//! commit, rollback, status, report, branch register and report, lock query), as
//! Seata's `DefaultCore` serves them.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use meshline::rpc::Connection;
use meshline::rpc::message::{
    BranchRegisterRequest, BranchRegisterResponse, BranchReportRequest, BranchReportResponse,
    BranchStatus, BranchType, GlobalBeginRequest, GlobalBeginResponse, GlobalEndResponse,
    GlobalLockQueryResponse, GlobalReportRequest, GlobalStatus, SeataMessage,
    TransactionExceptionCode as Exc, TransactionResult,
};

use super::{failed_answer, refusal};
use crate::Inner;
use crate::channels::Client;
use crate::locks::rows;
use crate::session::{Begetter, Branch, Session, State};

impl Inner {
    /// One transaction request of a registered client.
    pub(crate) async fn transaction(
        self: &Arc<Self>,
        conn: &Connection,
        client: &Client,
        msg: SeataMessage,
    ) -> SeataMessage {
        if self.raft_follower() {
            let code = msg.type_code();
            if let Some(answer) = failed_answer(
                code,
                Some(Exc::NotRaftLeader),
                "TransactionException[ The current TC is not a leader node, interrupt processing !]"
                    .to_string(),
            ) {
                self.stats.not_leader.fetch_add(1, Ordering::Relaxed);
                return answer;
            }
        }
        if self.store_failing() {
            // As Seata's `AbstractTCInboundHandler` answers a `StoreException`: every
            // request touches the session store (a GlobalStatus reads it).
            let code = msg.type_code();
            if let Some(answer) = failed_answer(
                code,
                Some(Exc::FailedStore),
                format!(
                    "TransactionException[{} failed: the session store is unavailable]",
                    msg.name()
                ),
            ) {
                return answer;
            }
        }
        match msg {
            SeataMessage::GlobalBegin(r) => {
                SeataMessage::GlobalBeginResponse(self.begin(conn, client, r))
            }
            // Boxed: phase two makes these futures large, and every request's future
            // would be that large (and moved into its box) if they were inline.
            SeataMessage::GlobalCommit(r) => {
                SeataMessage::GlobalCommitResponse(Box::pin(self.commit(&r.xid)).await)
            }
            SeataMessage::GlobalRollback(r) => {
                SeataMessage::GlobalRollbackResponse(Box::pin(self.rollback(&r.xid)).await)
            }
            SeataMessage::GlobalStatus(r) => SeataMessage::GlobalStatusResponse(
                GlobalEndResponse::success(self.status_of(&r.xid)),
            ),
            SeataMessage::GlobalReport(r) => SeataMessage::GlobalReportResponse(self.report(r)),
            SeataMessage::BranchRegister(r) => {
                SeataMessage::BranchRegisterResponse(self.branch_register(conn, client, r))
            }
            SeataMessage::BranchReport(r) => {
                SeataMessage::BranchReportResponse(self.branch_report(r))
            }
            // Only AT takes global locks: any other branch type is lockable
            // (`AbstractCore.lockQuery`).
            SeataMessage::GlobalLockQuery(r) if r.branch_type != BranchType::AT => {
                SeataMessage::GlobalLockQueryResponse(GlobalLockQueryResponse {
                    result: TransactionResult::success(),
                    lockable: true,
                })
            }
            SeataMessage::GlobalLockQuery(r) => {
                let tx = tx_id_of(&r.xid);
                let lockable = self.locks.lockable(
                    tx,
                    &rows(&r.resource_id, r.lock_key.as_deref().unwrap_or("")),
                );
                SeataMessage::GlobalLockQueryResponse(GlobalLockQueryResponse {
                    result: TransactionResult::success(),
                    lockable,
                })
            }
            // `is_mergeable_request` lets only the eight above through; never echo.
            other => refusal(other.type_code(), "not a transaction request").unwrap_or_else(|| {
                SeataMessage::GlobalStatusResponse(GlobalEndResponse {
                    result: TransactionResult::failed(
                        Exc::Unknown,
                        format!("{} is not a transaction request", other.name()),
                    ),
                    global_status: GlobalStatus::Unknown,
                })
            }),
        }
    }

    /// Seata takes any timeout: one of 0 or less is past at once, and the timeout
    /// check rolls the transaction back (`GlobalSession.isTimeout`).
    fn begin(
        &self,
        conn: &Connection,
        client: &Client,
        r: GlobalBeginRequest,
    ) -> GlobalBeginResponse {
        let tx_id = self.ids.next_id();
        let xid = format!("{}:{tx_id}", self.options.xid_address);
        let timeout = std::time::Duration::from_millis(r.timeout_ms.max(0) as u64);
        self.sessions.insert(Arc::new(Session::new(
            Arc::from(xid.as_str()),
            tx_id,
            r.transaction_name.unwrap_or_default(),
            timeout,
            Begetter {
                application_id: client.application_id.clone(),
                group: client.group.clone(),
                peer: conn.peer(),
            },
        )));
        self.stats.begun.fetch_add(1, Ordering::Relaxed);
        GlobalBeginResponse {
            result: TransactionResult::success(),
            xid: Some(xid),
            extra_data: None,
        }
    }

    /// `DefaultCore.commit`: an AT transaction (every branch AT, or none) is answered
    /// `Committed` at once and committed by the background loop (`AsyncCommitting`),
    /// unless [`TcOptions::at_commit_sync`](crate::TcOptions::at_commit_sync); any other
    /// is committed now. A branch whose commit could not be sent (its RM is gone) is
    /// answered `Failed` / `Unknown` with `CommitRetrying`: decided, retried by the TC.
    async fn commit(self: &Arc<Self>, xid: &str) -> GlobalEndResponse {
        let ended = self.end_phase_one(xid, |s, mut st| {
            if s.timed_out() {
                // Too late: the TC rolls it back (Seata answers TimeoutRollbacking).
                st.status = GlobalStatus::TimeoutRollbacking;
                st.driving = true;
                drop(st);
                let inner = self.clone();
                let s2 = s.clone();
                tokio::spawn(async move { inner.rollback_branches(&s2, true, false).await });
                return Some(GlobalEndResponse::success(GlobalStatus::TimeoutRollbacking));
            }
            // The decision is made and phase one's changes are already in the
            // databases: the rows are free for others now (Seata's `GlobalSession.clean`).
            let rows: Vec<_> = st
                .branches
                .iter_mut()
                .flat_map(|b| std::mem::take(&mut b.rows))
                .collect();
            self.locks.release(s.tx_id, &rows);
            let async_commit = !self.options.at_commit_sync
                && st.branches.iter().all(|b| {
                    b.branch_type == BranchType::AT || b.status == BranchStatus::PhaseOneFailed
                });
            if async_commit && !st.branches.is_empty() {
                st.status = GlobalStatus::AsyncCommitting;
                return Some(GlobalEndResponse::success(GlobalStatus::Committed));
            }
            st.status = GlobalStatus::Committing;
            st.driving = true;
            None
        });
        let s = match ended {
            Ok(s) => s,
            Err(answer) => return answer,
        };
        let (status, unsent) = self.commit_branches(&s, false).await;
        decided_answer(answered(status), unsent)
    }

    /// `DefaultCore.rollback`; a branch whose rollback could not be sent is answered
    /// `Failed` / `Unknown` with `RollbackRetrying`.
    async fn rollback(self: &Arc<Self>, xid: &str) -> GlobalEndResponse {
        let ended = self.end_phase_one(xid, |_, mut st| {
            st.driving = true;
            st.status = GlobalStatus::Rollbacking;
            None
        });
        let s = match ended {
            Ok(s) => s,
            Err(answer) => return answer,
        };
        let (status, unsent) = self.rollback_branches(&s, false, false).await;
        decided_answer(status, unsent)
    }

    /// The TM's end of `xid`'s phase one (its commit or rollback), checked and decided
    /// under one hold of the session's lock so two ends cannot both pass the check: an
    /// unknown XID is answered `Finished`, a session decided already (or being driven)
    /// its status (as `Err`); otherwise the session stops being active and `decide`
    /// takes its state and either answers at once (`Some`, returned as `Err`) or leaves
    /// the session for the caller to drive (`None`: the session is returned).
    fn end_phase_one(
        &self,
        xid: &str,
        decide: impl FnOnce(&Arc<Session>, MutexGuard<'_, State>) -> Option<GlobalEndResponse>,
    ) -> Result<Arc<Session>, GlobalEndResponse> {
        let Some(s) = self.sessions.get(xid) else {
            return Err(GlobalEndResponse::success(GlobalStatus::Finished));
        };
        let mut st = s.state();
        if st.status != GlobalStatus::Begin || st.driving {
            return Err(GlobalEndResponse::success(answered(st.status)));
        }
        st.active = false;
        match decide(&s, st) {
            Some(answer) => Err(answer),
            None => Ok(s),
        }
    }

    /// The status of `xid`, `Finished` when it is not known (any more).
    pub(crate) fn status_of(&self, xid: &str) -> GlobalStatus {
        self.sessions
            .get(xid)
            .map_or(GlobalStatus::Finished, |s| s.state().status)
    }

    /// `DefaultCore.globalReport`: an unknown XID echoes the status reported; a SAGA
    /// session takes it (`SagaCore.doGlobalReport`: `Committed` ends it committed,
    /// `Rollbacked` or `Finished` rolled back, a retrying status queues the retry); any
    /// other session is left as it is and its status answered.
    fn report(&self, r: GlobalReportRequest) -> GlobalEndResponse {
        let reported = r.global_status.unwrap_or(GlobalStatus::Unknown);
        let Some(s) = self.sessions.get(&r.xid) else {
            return GlobalEndResponse::success(reported);
        };
        if !s.is_saga() {
            return GlobalEndResponse::success(answered(s.state().status));
        }
        let mut st = s.state();
        st.active = false;
        let status = match reported {
            GlobalStatus::Committed => GlobalStatus::Committed,
            GlobalStatus::Rollbacked | GlobalStatus::Finished => GlobalStatus::Rollbacked,
            GlobalStatus::RollbackRetrying | GlobalStatus::Unknown => {
                GlobalStatus::RollbackRetrying
            }
            GlobalStatus::TimeoutRollbackRetrying => GlobalStatus::TimeoutRollbackRetrying,
            other => other,
        };
        st.status = status;
        st.branches.clear();
        drop(st);
        if matches!(status, GlobalStatus::Committed | GlobalStatus::Rollbacked) {
            self.finish(&s, status);
        }
        GlobalEndResponse::success(status)
    }

    fn branch_register(
        &self,
        conn: &Connection,
        client: &Client,
        r: BranchRegisterRequest,
    ) -> BranchRegisterResponse {
        let fail = |exc, msg: String| BranchRegisterResponse {
            result: TransactionResult::failed(exc, format!("TransactionException[{msg}]")),
            branch_id: 0,
        };
        let Some(s) = self.sessions.get(&r.xid) else {
            return fail(Exc::GlobalTransactionNotExist, not_found(&r.xid));
        };
        let mut st = s.state();
        if !st.active {
            return fail(
                Exc::GlobalTransactionNotActive,
                format!(
                    "Could not register branch into global session xid = {} status = {}, cause by globalSession not active",
                    r.xid, st.status
                ),
            );
        }
        if st.status != GlobalStatus::Begin {
            return fail(
                Exc::GlobalTransactionStatusInvalid,
                format!(
                    "Could not register branch into global session xid = {} status = {} while expecting Begin",
                    r.xid, st.status
                ),
            );
        }
        let id = self.ids.next_id();
        let wanted = match (&r.lock_key, r.branch_type) {
            (Some(k), BranchType::AT) => rows(&r.resource_id, k),
            _ => Vec::new(),
        };
        let taken = match self.locks.acquire(s.tx_id, &wanted) {
            Ok(t) => t,
            Err((row, holder)) => {
                self.stats.lock_conflicts.fetch_add(1, Ordering::Relaxed);
                // The holder is rolling back: its rows come free only after its
                // rollback, so waiting on them is pointless (Seata's FileLocker answers
                // fail-fast for a holder whose lock status is Rollbacking).
                let holder_status =
                    self.status_of(&format!("{}:{holder}", self.options.xid_address));
                let exc = if matches!(
                    holder_status,
                    GlobalStatus::Rollbacking
                        | GlobalStatus::RollbackRetrying
                        | GlobalStatus::TimeoutRollbacking
                        | GlobalStatus::TimeoutRollbackRetrying
                ) {
                    Exc::LockKeyConflictFailFast
                } else {
                    Exc::LockKeyConflict
                };
                return fail(
                    exc,
                    format!(
                        "Global lock acquire failed xid = {} branchId = {id}: row {row} is held by another global transaction ({holder_status})",
                        r.xid
                    ),
                );
            }
        };
        st.branches.push(Branch {
            id,
            branch_type: r.branch_type,
            resource_id: r.resource_id,
            application_data: r.application_data,
            application_id: client.application_id.clone(),
            peer: conn.peer(),
            status: BranchStatus::Registered,
            rows: taken,
        });
        BranchRegisterResponse {
            result: TransactionResult::success(),
            branch_id: id,
        }
    }

    fn branch_report(&self, r: BranchReportRequest) -> BranchReportResponse {
        let fail = |exc, msg: String| BranchReportResponse {
            result: TransactionResult::failed(exc, format!("TransactionException[{msg}]")),
        };
        let Some(s) = self.sessions.get(&r.xid) else {
            return fail(Exc::GlobalTransactionNotExist, not_found(&r.xid));
        };
        let mut st = s.state();
        match st.branches.iter_mut().find(|b| b.id == r.branch_id) {
            Some(b) => {
                // `AbstractCore.branchReport` sets it whatever it is (absent too).
                b.application_data = r.application_data;
                b.status = r.status;
                BranchReportResponse::default()
            }
            None => fail(
                Exc::BranchTransactionNotExist,
                format!(
                    "Could not found branch session xid = {} branchId = {}",
                    r.xid, r.branch_id
                ),
            ),
        }
    }
}

/// The transaction id in an XID: what follows its last `:` (Seata's
/// `XID.getTransactionId`); 0 when there is none.
fn tx_id_of(xid: &str) -> i64 {
    xid.rsplit_once(':')
        .and_then(|(_, id)| id.parse().ok())
        .unwrap_or(0)
}

/// Seata's words (`AbstractCore.assertGlobalSessionNotNull`) for an XID it does not
/// know, which a branch's register and report are refused with.
fn not_found(xid: &str) -> String {
    format!("Could not found global transaction xid = {xid}, may be has finished.")
}

/// What a client is answered for a session's `status`: `AsyncCommitting` is
/// `Committed` to it (`DefaultCore.commit`).
fn answered(status: GlobalStatus) -> GlobalStatus {
    if status == GlobalStatus::AsyncCommitting {
        GlobalStatus::Committed
    } else {
        status
    }
}

/// A commit or rollback's answer: `status`, `Failed` / `Unknown` when a branch's phase
/// two could not be sent (`DefaultCore` throws `TransactionException(ex)` then, and
/// `AbstractTCInboundHandler` answers the session's status with it).
fn decided_answer(status: GlobalStatus, unsent: Option<String>) -> GlobalEndResponse {
    match unsent {
        None => GlobalEndResponse::success(status),
        Some(why) => GlobalEndResponse {
            result: TransactionResult::failed(
                Exc::Unknown,
                format!("TransactionException[java.lang.RuntimeException: {why}]"),
            ),
            global_status: status,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_give_their_transaction_id() {
        assert_eq!(tx_id_of("10.0.0.1:8091:42"), 42);
        assert_eq!(tx_id_of("2000:0:0:0:1:2345:6789:abcd:8092:7"), 7);
        assert_eq!(tx_id_of("name-without-id"), 0);
    }
}
