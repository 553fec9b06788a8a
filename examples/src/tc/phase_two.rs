//! Phase two: committing or rolling back every branch over its RM's connection, and
//! the background loop that retries what could not finish and rolls back what timed
//! out (Seata's `DefaultCoordinator` schedules, one period for all).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use meshline::rpc::Payload;
use meshline::rpc::message::{BranchEndRequest, BranchStatus, GlobalStatus, SeataMessage};

use super::Inner;
use super::session::{Branch, Session};

/// What one branch's phase two came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Committed or rolled back.
    Done,
    /// Try again later (no RM connected, no answer, a retryable status).
    Retry(String),
    /// The RM gave up on it for good.
    Failed(BranchStatus),
}

impl Inner {
    /// Sends one branch's commit or rollback to its RM and judges the answer.
    async fn drive_branch(&self, s: &Session, b: &Branch, commit: bool) -> Outcome {
        if self.crashed() {
            return Outcome::Retry("the TC crashed".into());
        }
        let Some(conn) =
            self.channels
                .find(&b.resource_id, &b.application_id, b.peer, b.branch_type)
        else {
            return Outcome::Retry(format!(
                "no RM of {} serving {} is connected",
                b.application_id, b.resource_id
            ));
        };
        let req = BranchEndRequest {
            xid: s.xid.to_string(),
            branch_id: b.id,
            branch_type: b.branch_type,
            resource_id: b.resource_id.clone(),
            application_data: b.application_data.clone(),
        };
        let msg = if commit {
            SeataMessage::BranchCommit(req)
        } else {
            SeataMessage::BranchRollback(req)
        };
        let payload = match Payload::seata(&msg) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(failed_status(commit, &e.to_string())),
        };
        self.stats.phase_two_sent.fetch_add(1, Ordering::Relaxed);
        let answer = match conn.call(payload, self.options.phase_two_timeout).await {
            Ok(p) => p,
            Err(e) => return Outcome::Retry(format!("{} at {}: {e}", msg.name(), conn.peer())),
        };
        let status = match answer.decode_seata_limited(self.options.max_frame_len) {
            Ok(SeataMessage::BranchCommitResponse(r)) if commit => r.branch_status,
            Ok(SeataMessage::BranchRollbackResponse(r)) if !commit => r.branch_status,
            Ok(other) => return Outcome::Retry(format!("the RM answered {}", other.name())),
            Err(e) => return Outcome::Retry(format!("unreadable answer from the RM: {e}")),
        };
        use BranchStatus::*;
        match (commit, status) {
            (true, PhaseTwoCommitted | PhaseOneRdonly) => Outcome::Done,
            (false, PhaseTwoRollbacked | PhaseOneRdonly) => Outcome::Done,
            (true, PhaseTwoCommitFailedUnretryable)
            | (false, PhaseTwoRollbackFailedUnretryable) => Outcome::Failed(status),
            (_, s) => Outcome::Retry(format!("the RM answered {s}")),
        }
    }

    /// Commits every branch left (concurrently) and settles the session: `Committed`
    /// and forgotten when all are done, `CommitFailed` when one gave up,
    /// `CommitRetrying` (the loop tries again) otherwise. The session must be marked
    /// `driving` by the caller.
    pub(super) async fn commit_branches(self: &Arc<Self>, s: &Arc<Session>) -> GlobalStatus {
        let branches: Vec<Branch> = s
            .state()
            .branches
            .iter()
            .filter(|b| b.status != BranchStatus::PhaseOneFailed)
            .cloned()
            .collect();
        let outcomes =
            futures_util::future::join_all(branches.iter().map(|b| self.drive_branch(s, b, true)))
                .await;
        let mut st = s.state();
        let mut failed = None;
        for (b, o) in branches.iter().zip(outcomes) {
            match o {
                Outcome::Done => st.branches.retain(|x| x.id != b.id),
                Outcome::Retry(why) => {
                    tracing::info!(xid = %s.xid, branch = b.id, %why, "branch commit will be retried")
                }
                Outcome::Failed(status) => failed = Some((b.id, status)),
            }
        }
        st.branches
            .retain(|b| b.status != BranchStatus::PhaseOneFailed);
        st.driving = false;
        st.status = if let Some((id, status)) = failed {
            tracing::warn!(xid = %s.xid, branch = id, %status, "branch cannot be committed");
            GlobalStatus::CommitFailed
        } else if st.branches.is_empty() {
            GlobalStatus::Committed
        } else if self.retry_expired(s) {
            GlobalStatus::CommitRetryTimeout
        } else {
            GlobalStatus::CommitRetrying
        };
        let status = st.status;
        drop(st);
        if status != GlobalStatus::CommitRetrying {
            self.finish(s, status);
        }
        status
    }

    /// Rolls back every branch left, last registered first, stopping at the first that
    /// cannot be rolled back now (as Seata does); each branch's rows are released once
    /// it is rolled back. Settles as `Rollbacked` / `TimeoutRollbacked`, the failed or
    /// retrying status, and forgets a finished session.
    pub(super) async fn rollback_branches(
        self: &Arc<Self>,
        s: &Arc<Session>,
        timeout: bool,
    ) -> GlobalStatus {
        let branches: Vec<Branch> = s.state().branches.iter().rev().cloned().collect();
        let mut failed = None;
        let mut retry = false;
        for b in &branches {
            if b.status == BranchStatus::PhaseOneFailed {
                s.state().branches.retain(|x| x.id != b.id);
                self.locks.release(s.tx_id, &b.rows);
                continue;
            }
            match self.drive_branch(s, b, false).await {
                Outcome::Done => {
                    s.state().branches.retain(|x| x.id != b.id);
                    self.locks.release(s.tx_id, &b.rows);
                }
                Outcome::Retry(why) => {
                    tracing::info!(xid = %s.xid, branch = b.id, %why, "branch rollback will be retried");
                    retry = true;
                    break;
                }
                Outcome::Failed(status) => {
                    tracing::warn!(xid = %s.xid, branch = b.id, %status, "branch cannot be rolled back");
                    failed = Some(status);
                    break;
                }
            }
        }
        let mut st = s.state();
        st.driving = false;
        st.status = match (timeout, failed.is_some(), retry) {
            (false, true, _) => GlobalStatus::RollbackFailed,
            (true, true, _) => GlobalStatus::TimeoutRollbackFailed,
            (_, false, true) if self.retry_expired(s) => GlobalStatus::RollbackRetryTimeout,
            (false, false, true) => GlobalStatus::RollbackRetrying,
            (true, false, true) => GlobalStatus::TimeoutRollbackRetrying,
            (false, false, false) => GlobalStatus::Rollbacked,
            (true, false, false) => GlobalStatus::TimeoutRollbacked,
        };
        let status = st.status;
        drop(st);
        if !matches!(
            status,
            GlobalStatus::RollbackRetrying | GlobalStatus::TimeoutRollbackRetrying
        ) {
            self.finish(s, status);
        }
        status
    }

    fn retry_expired(&self, s: &Session) -> bool {
        self.options
            .max_retry_time
            .is_some_and(|max| s.begun.elapsed() > max)
    }

    /// The session reached a final status: release what it holds, forget it, count it.
    fn finish(&self, s: &Session, status: GlobalStatus) {
        let rows: Vec<_> = s.state().branches.drain(..).flat_map(|b| b.rows).collect();
        self.locks.release(s.tx_id, &rows);
        self.sessions.remove(&s.xid);
        let counter = match status {
            GlobalStatus::Committed => &self.stats.committed,
            GlobalStatus::Rollbacked => &self.stats.rolled_back,
            GlobalStatus::TimeoutRollbacked => &self.stats.timed_out,
            _ => &self.stats.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(xid = %s.xid, %status, "global transaction finished");
    }

    /// One round of the background loop: roll back sessions past their timeout, and
    /// drive again every session whose phase two could not finish.
    pub(super) async fn housekeeping(self: &Arc<Self>) {
        let due = self.sessions.select(|s| {
            let st = s.state();
            !st.driving
                && match st.status {
                    GlobalStatus::Begin => s.timed_out(),
                    GlobalStatus::CommitRetrying
                    | GlobalStatus::RollbackRetrying
                    | GlobalStatus::TimeoutRollbacking
                    | GlobalStatus::TimeoutRollbackRetrying => true,
                    _ => false,
                }
        });
        for s in due {
            let status = {
                let mut st = s.state();
                if st.driving {
                    continue;
                }
                if st.status == GlobalStatus::Begin {
                    if !s.timed_out() {
                        continue;
                    }
                    tracing::info!(xid = %s.xid, name = %s.name, timeout = ?s.timeout, "global transaction timed out; rolling back");
                    st.active = false;
                    st.status = GlobalStatus::TimeoutRollbacking;
                }
                st.driving = true;
                st.status
            };
            let inner = self.clone();
            tokio::spawn(async move {
                match status {
                    GlobalStatus::CommitRetrying => {
                        inner.commit_branches(&s).await;
                    }
                    GlobalStatus::RollbackRetrying => {
                        inner.rollback_branches(&s, false).await;
                    }
                    _ => {
                        inner.rollback_branches(&s, true).await;
                    }
                }
            });
        }
    }
}

fn failed_status(commit: bool, why: &str) -> BranchStatus {
    tracing::error!(%why, "cannot send phase two");
    if commit {
        BranchStatus::PhaseTwoCommitFailedUnretryable
    } else {
        BranchStatus::PhaseTwoRollbackFailedUnretryable
    }
}
