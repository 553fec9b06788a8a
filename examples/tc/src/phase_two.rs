//! Phase two: committing or rolling back every branch over its RM's connection, and
//! the background loop that retries what could not finish and rolls back what timed
//! out (Seata's `DefaultCoordinator` schedules, one period for all).

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use meshline::rpc::Payload;
use meshline::rpc::message::{
    BranchEndRequest, BranchStatus, BranchType, GlobalStatus, SeataMessage,
};

use super::Inner;
use super::session::{Branch, Session, State};

/// What one branch's phase two came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Committed or rolled back.
    Done,
    /// The RM answered a status to try again later.
    Retry(String),
    /// It could not be sent or got no answer (no RM connected, a timeout): in Seata an
    /// exception out of `branchCommit`, which the first attempt answers to the TM as
    /// `Failed` / `Unknown` with the session's status (`DefaultCore.doGlobalCommit`).
    Unsent(String),
    /// The RM gave up on it for good.
    Failed(BranchStatus),
}

/// Where a phase-two request goes: the resource, and the RM's application and address.
struct Target<'a> {
    resource: &'a str,
    application_id: &'a str,
    peer: std::net::SocketAddr,
    branch_type: BranchType,
}

impl Inner {
    /// Sends one phase-two request and reads the RM's answer: its status, or why it
    /// could not be sent or got no answer (an [`Outcome::Unsent`]). A request that
    /// cannot be encoded is answered for the RM as failed for good.
    async fn send_phase_two(
        &self,
        s: &Session,
        to: Target<'_>,
        req: BranchEndRequest,
        commit: bool,
    ) -> Result<BranchStatus, String> {
        if self.crashed() {
            return Err("the TC crashed".into());
        }
        let Some(conn) =
            self.channels
                .find(to.resource, to.application_id, to.peer, to.branch_type)
        else {
            // Seata's words (AbstractNettyRemotingServer.sendSyncRequest).
            return Err(format!(
                "rm client is not connected. dbkey:{},clientId:{}",
                to.resource, to.application_id
            ));
        };
        let msg = if commit {
            SeataMessage::BranchCommit(req)
        } else {
            SeataMessage::BranchRollback(req)
        };
        let payload = match Payload::seata(&msg) {
            Ok(p) => p,
            Err(e) => return Ok(failed_status(commit, &e.to_string())),
        };
        self.stats.phase_two_sent.fetch_add(1, Ordering::Relaxed);
        let answer = conn
            .call(payload, self.options.phase_two_timeout)
            .await
            .map_err(|e| format!("{} at {}: {e}", msg.name(), conn.peer()))?;
        match answer.decode_seata_limited(self.options.max_frame_len) {
            Ok(SeataMessage::BranchCommitResponse(r)) if commit => Ok(r.branch_status),
            Ok(SeataMessage::BranchRollbackResponse(r)) if !commit => Ok(r.branch_status),
            Ok(other) => Err(format!("the RM answered {}", other.name())),
            Err(e) => Err(format!("unreadable answer from the RM of {}: {e}", s.xid)),
        }
    }

    /// Sends one branch's commit or rollback to its RM and judges the answer.
    async fn drive_branch(&self, s: &Session, b: &Branch, commit: bool) -> Outcome {
        let to = Target {
            resource: &b.resource_id,
            application_id: &b.application_id,
            peer: b.peer,
            branch_type: b.branch_type,
        };
        let req = BranchEndRequest {
            xid: s.xid.to_string(),
            branch_id: b.id,
            branch_type: b.branch_type,
            resource_id: b.resource_id.clone(),
            application_data: b.application_data.clone(),
        };
        let status = match self.send_phase_two(s, to, req, commit).await {
            Ok(status) => status,
            Err(why) => return Outcome::Unsent(why),
        };
        use BranchStatus::*;
        match (commit, status) {
            (true, PhaseTwoCommitted | PhaseOneRdonly) => Outcome::Done,
            (false, PhaseTwoRollbacked | PhaseOneRdonly) => Outcome::Done,
            // The XA transaction is unknown to the database: after the session's
            // timeout plus `xaer_nota_retry_timeout` it is taken as done
            // (DefaultCore.isXaerNotaTimeout).
            (true, PhaseTwoCommitFailedXaerNotaRetryable)
            | (false, PhaseTwoRollbackFailedXaerNotaRetryable)
                if self.xaer_nota_expired(s) =>
            {
                tracing::info!(xid = %s.xid, branch = b.id, %status, "XAER_NOTA past its retry time; the branch is taken as done");
                Outcome::Done
            }
            (true, PhaseTwoCommitFailedUnretryable)
            | (false, PhaseTwoRollbackFailedUnretryable) => Outcome::Failed(status),
            (_, s) => Outcome::Retry(format!("the RM answered {s}")),
        }
    }

    /// A SAGA's phase two: one request to the RM serving `applicationId#group`, branch
    /// id -1, the global status's name as its application data (Seata's `SagaCore`).
    async fn drive_saga(
        &self,
        s: &Session,
        commit: bool,
        status: GlobalStatus,
    ) -> Result<BranchStatus, String> {
        let resource = s.saga_resource();
        let to = Target {
            resource: &resource,
            application_id: &s.begun_by.application_id,
            peer: s.begun_by.peer,
            branch_type: BranchType::SAGA,
        };
        let req = BranchEndRequest {
            xid: s.xid.to_string(),
            branch_id: -1,
            branch_type: BranchType::SAGA,
            resource_id: resource.clone(),
            application_data: Some(status.java_name().to_string()),
        };
        self.send_phase_two(s, to, req, commit).await
    }

    /// Commits the branches left and settles the session, as `DefaultCore.doGlobalCommit`
    /// does: branches whose phase one failed and read-only XA branches are dropped; on
    /// the first attempt AT branches are left to the background loop (their phase one
    /// is committed already); every other branch is sent its commit, concurrently.
    ///
    /// The status: `Committed` (forgotten) when nothing is left, `AsyncCommitting` when
    /// only AT branches are (the loop commits them), `CommitFailed` when an RM gave up,
    /// else `CommitRetrying` (or `CommitRetryTimeout`). With it, on the first attempt,
    /// why a branch could not be sent (Seata answers that `Failed` / `Unknown`). The
    /// caller marks the session `driving`.
    pub(super) async fn commit_branches(
        self: &Arc<Self>,
        s: &Arc<Session>,
        retrying: bool,
    ) -> (GlobalStatus, Option<String>) {
        if s.is_saga() {
            return self.commit_saga(s, retrying).await;
        }
        let branches: Vec<Branch> = {
            let mut st = s.state();
            st.branches.retain(|b| {
                b.status != BranchStatus::PhaseOneFailed
                    && !(b.branch_type == BranchType::XA
                        && b.status == BranchStatus::PhaseOneRdonly)
            });
            st.branches
                .iter()
                .filter(|b| {
                    retrying || self.options.at_commit_sync || b.branch_type != BranchType::AT
                })
                .cloned()
                .collect()
        };
        let outcomes =
            futures_util::future::join_all(branches.iter().map(|b| self.drive_branch(s, b, true)))
                .await;
        let mut st = s.state();
        let mut failed = None;
        let mut unsent = None;
        for (b, o) in branches.iter().zip(outcomes) {
            match o {
                Outcome::Done => st.branches.retain(|x| x.id != b.id),
                Outcome::Retry(why) => {
                    tracing::info!(xid = %s.xid, branch = b.id, %why, "branch commit will be retried")
                }
                Outcome::Unsent(why) => {
                    tracing::info!(xid = %s.xid, branch = b.id, %why, "branch commit not sent; will be retried");
                    unsent.get_or_insert(why);
                }
                Outcome::Failed(status) => failed = Some((b.id, status)),
            }
        }
        st.driving = false;
        st.status = if let Some((id, status)) = failed {
            tracing::warn!(xid = %s.xid, branch = id, %status, "branch cannot be committed");
            GlobalStatus::CommitFailed
        } else if st.branches.is_empty() {
            GlobalStatus::Committed
        } else if !self.options.at_commit_sync
            && st.branches.iter().all(|b| b.branch_type == BranchType::AT)
        {
            GlobalStatus::AsyncCommitting
        } else if self.retry_expired(s) {
            GlobalStatus::CommitRetryTimeout
        } else {
            GlobalStatus::CommitRetrying
        };
        let status = self.settle(
            s,
            st,
            &[GlobalStatus::CommitRetrying, GlobalStatus::AsyncCommitting],
        );
        (
            status,
            unsent.filter(|_| !retrying && status == GlobalStatus::CommitRetrying),
        )
    }

    /// A SAGA's commit (`SagaCore.doGlobalCommit`): its RM's answer settles the session;
    /// a request that could not be sent turns the session to a rollback retry.
    async fn commit_saga(
        self: &Arc<Self>,
        s: &Arc<Session>,
        retrying: bool,
    ) -> (GlobalStatus, Option<String>) {
        use BranchStatus::*;
        let sent = self.drive_saga(s, true, GlobalStatus::Committing).await;
        let (status, unsent) = match sent {
            Ok(PhaseTwoCommitted) => (GlobalStatus::Committed, None),
            Ok(PhaseTwoRollbacked) => (GlobalStatus::Rollbacked, None),
            Ok(PhaseTwoRollbackFailedRetryable) => (GlobalStatus::RollbackRetrying, None),
            Ok(PhaseOneFailed) => (GlobalStatus::Finished, None),
            Ok(PhaseTwoCommitFailedUnretryable) => (GlobalStatus::CommitFailed, None),
            Ok(_) => (GlobalStatus::CommitRetrying, None),
            Err(why) => (GlobalStatus::RollbackRetrying, Some(why)),
        };
        self.settle_saga(s, status);
        (status, unsent.filter(|_| !retrying))
    }

    /// A SAGA's rollback (`SagaCore.doGlobalRollback`): compensation is the RM's.
    async fn rollback_saga(
        self: &Arc<Self>,
        s: &Arc<Session>,
        timeout: bool,
        retrying: bool,
    ) -> (GlobalStatus, Option<String>) {
        use BranchStatus::*;
        let asked = if timeout {
            GlobalStatus::TimeoutRollbacking
        } else {
            GlobalStatus::Rollbacking
        };
        let (done, retry, failed) = if timeout {
            (
                GlobalStatus::TimeoutRollbacked,
                GlobalStatus::TimeoutRollbackRetrying,
                GlobalStatus::TimeoutRollbackFailed,
            )
        } else {
            (
                GlobalStatus::Rollbacked,
                GlobalStatus::RollbackRetrying,
                GlobalStatus::RollbackFailed,
            )
        };
        let (status, unsent) = match self.drive_saga(s, false, asked).await {
            Ok(PhaseTwoRollbacked) => (done, None),
            Ok(PhaseTwoRollbackFailedUnretryable) => (failed, None),
            Ok(_) => (retry, None),
            Err(why) => (retry, Some(why)),
        };
        self.settle_saga(s, status);
        (status, unsent.filter(|_| !retrying))
    }

    /// A SAGA session takes `status`: forgotten when final.
    fn settle_saga(&self, s: &Arc<Session>, status: GlobalStatus) {
        let mut st = s.state();
        st.driving = false;
        st.status = status;
        drop(st);
        if !matches!(
            status,
            GlobalStatus::CommitRetrying
                | GlobalStatus::RollbackRetrying
                | GlobalStatus::TimeoutRollbackRetrying
        ) {
            self.finish(s, status);
        }
    }

    /// Rolls back every branch left, last registered first, stopping at the first that
    /// cannot be rolled back now (as Seata does); each branch's rows are released once
    /// it is rolled back. Settles as `Rollbacked` / `TimeoutRollbacked`, the failed or
    /// retrying status, and forgets a finished session. With the status, on the first
    /// attempt, why a branch could not be sent (Seata answers that `Failed` /
    /// `Unknown`).
    pub(super) async fn rollback_branches(
        self: &Arc<Self>,
        s: &Arc<Session>,
        timeout: bool,
        retrying: bool,
    ) -> (GlobalStatus, Option<String>) {
        if s.is_saga() {
            return self.rollback_saga(s, timeout, retrying).await;
        }
        let branches: Vec<Branch> = s.state().branches.iter().rev().cloned().collect();
        let mut failed = None;
        let mut retry = false;
        let mut unsent = None;
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
                Outcome::Unsent(why) => {
                    tracing::info!(xid = %s.xid, branch = b.id, %why, "branch rollback not sent; will be retried");
                    unsent = Some(why);
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
        let status = self.settle(
            s,
            st,
            &[
                GlobalStatus::RollbackRetrying,
                GlobalStatus::TimeoutRollbackRetrying,
            ],
        );
        let retrying_now = matches!(
            status,
            GlobalStatus::RollbackRetrying | GlobalStatus::TimeoutRollbackRetrying
        );
        (status, unsent.filter(|_| !retrying && retrying_now))
    }

    /// Whether an XAER_NOTA answer for `s` has been retried long enough: past the
    /// session's timeout plus the longer of its timeout and
    /// [`TcOptions::xaer_nota_retry_timeout`](super::TcOptions::xaer_nota_retry_timeout).
    fn xaer_nota_expired(&self, s: &Session) -> bool {
        s.begun.elapsed() > s.timeout + s.timeout.max(self.options.xaer_nota_retry_timeout)
    }

    /// Lets go of `s`'s lock, its phase two decided as `st.status`, and ends the session
    /// unless that status is one its phase two goes on in (`pending`): the status.
    fn settle(
        &self,
        s: &Session,
        st: MutexGuard<'_, State>,
        pending: &[GlobalStatus],
    ) -> GlobalStatus {
        let status = st.status;
        drop(st);
        if !pending.contains(&status) {
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
    pub(super) fn finish(&self, s: &Session, status: GlobalStatus) {
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
    /// drive again every session whose phase two could not finish; at most
    /// [`DRIVES_AT_ONCE`](crate::DRIVES_AT_ONCE) at a time, the round waiting for room.
    pub(super) async fn housekeeping(self: &Arc<Self>) {
        let due = self.sessions.select(|s| is_due(s, &s.state()));
        for s in due {
            let Ok(permit) = self.drives.clone().acquire_owned().await else {
                return;
            };
            let status = {
                let mut st = s.state();
                // Looked at again: the session may have moved on while the round waited.
                if !is_due(&s, &st) {
                    continue;
                }
                if st.status == GlobalStatus::Begin {
                    tracing::info!(xid = %s.xid, name = %s.name, timeout = ?s.timeout, "global transaction timed out; rolling back");
                    st.active = false;
                    st.status = GlobalStatus::TimeoutRollbacking;
                }
                st.driving = true;
                st.status
            };
            let running = self.stats.background_drives.fetch_add(1, Ordering::Relaxed) + 1;
            self.stats
                .background_drives_peak
                .fetch_max(running, Ordering::Relaxed);
            let inner = self.clone();
            tokio::spawn(async move {
                match status {
                    GlobalStatus::CommitRetrying | GlobalStatus::AsyncCommitting => {
                        inner.commit_branches(&s, true).await;
                    }
                    GlobalStatus::RollbackRetrying => {
                        inner.rollback_branches(&s, false, true).await;
                    }
                    _ => {
                        inner.rollback_branches(&s, true, true).await;
                    }
                }
                inner
                    .stats
                    .background_drives
                    .fetch_sub(1, Ordering::Relaxed);
                drop(permit);
            });
        }
    }
}

/// Whether the background loop drives `s` now: not driven already, and timed out in
/// `Begin` or waiting for its phase two to be driven (again).
fn is_due(s: &Session, st: &State) -> bool {
    !st.driving
        && match st.status {
            GlobalStatus::Begin => s.timed_out(),
            GlobalStatus::CommitRetrying
            | GlobalStatus::AsyncCommitting
            | GlobalStatus::RollbackRetrying
            | GlobalStatus::TimeoutRollbacking
            | GlobalStatus::TimeoutRollbackRetrying => true,
            _ => false,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshline::rpc::message::{BranchStatus, BranchType, GlobalStatus};

    use super::*;
    use crate::session::Begetter;

    /// `n` AT transactions committed (`AsyncCommitting`), each with a branch whose RM
    /// is not connected: every drive ends at once, "not sent".
    fn async_committing(inner: &Inner, n: usize) {
        let peer: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        for i in 0..n {
            let s = Session::new(
                format!("127.0.0.1:8091:{i}").into(),
                i as i64,
                "t".into(),
                Duration::from_secs(60),
                Begetter {
                    application_id: "app".into(),
                    group: "g".into(),
                    peer,
                },
            );
            {
                let mut st = s.state();
                st.status = GlobalStatus::AsyncCommitting;
                st.active = false;
                st.branches.push(Branch {
                    id: i as i64,
                    branch_type: BranchType::AT,
                    resource_id: "db".into(),
                    application_data: None,
                    application_id: "app".into(),
                    peer,
                    status: BranchStatus::Registered,
                    rows: Vec::new(),
                });
            }
            inner.sessions.insert(Arc::new(s));
        }
    }

    /// A round that finds twenty thousand commits due leaves the runtime to the rest
    /// of the TC: at most [`DRIVES_AT_ONCE`](crate::DRIVES_AT_ONCE) drives are queued
    /// at a time, so a connection's reader (answering a PING) waits for a few hundred
    /// of them at the most, not for all. Started all at once, they queued in front of
    /// it for as long as they all took, and clients closed their connections as
    /// silent.
    #[tokio::test]
    async fn a_round_with_thousands_of_commits_due_queues_a_few_hundred_at_a_time() {
        let tc = crate::Coordinator::new(crate::TcOptions {
            period: Duration::from_secs(3600),
            ..Default::default()
        });
        let inner = tc.inner.clone();
        async_committing(&inner, 20_000);
        inner.housekeeping().await;
        let st = tc.stats();
        while st.background_drives.load(Ordering::Relaxed) > 0 {
            tokio::task::yield_now().await;
        }
        let peak = st.background_drives_peak.load(Ordering::Relaxed);
        assert!(
            peak as usize <= crate::DRIVES_AT_ONCE && peak >= 1,
            "{peak} drives at once"
        );
        // Every session was driven, and is no longer: its commit could not be sent, so
        // it stays to be driven again.
        assert_eq!(tc.open_sessions(), 20_000);
        assert!(inner.sessions.select(|s| s.state().driving).is_empty());
        assert_eq!(st.phase_two_sent.load(Ordering::Relaxed), 0);
    }
}
