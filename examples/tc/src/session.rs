//! Global sessions and their branches, kept in memory only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use meshline::rpc::message::{BranchStatus, BranchType, GlobalStatus};

use super::locks::RowKey;

/// One branch of a global transaction.
#[derive(Debug, Clone)]
pub struct Branch {
    /// Its id.
    pub id: i64,
    /// AT, TCC, SAGA or XA.
    pub branch_type: BranchType,
    /// The resource it runs on.
    pub resource_id: String,
    /// Its application data, handed back in phase two.
    pub application_data: Option<String>,
    /// The application of the RM that registered it.
    pub application_id: String,
    /// That RM's address.
    pub peer: SocketAddr,
    /// Its status.
    pub status: BranchStatus,
    /// The rows it locked.
    pub rows: Vec<RowKey>,
}

/// What changes in a session, under its lock.
#[derive(Debug)]
pub struct State {
    /// The global status.
    pub status: GlobalStatus,
    /// Still takes branches (false once commit or rollback began).
    pub active: bool,
    /// Branches not finished with.
    pub branches: Vec<Branch>,
    /// Phase two is under way for it (the background loop leaves it alone).
    pub driving: bool,
}

/// A global transaction.
#[derive(Debug)]
pub struct Session {
    /// Its XID (shared with the session map's key).
    pub xid: Arc<str>,
    /// The transaction id (the XID's last part).
    pub tx_id: i64,
    /// The name the TM gave.
    pub name: String,
    /// Its timeout.
    pub timeout: Duration,
    /// When it began.
    pub begun: Instant,
    /// The TM that began it: its application and transaction group (a SAGA's phase two
    /// goes to the RM serving `applicationId#txServiceGroup`) and address.
    pub begun_by: Begetter,
    state: Mutex<State>,
}

/// The TM that began a session.
#[derive(Debug, Clone)]
pub struct Begetter {
    /// Its `applicationId`.
    pub application_id: String,
    /// Its `transactionServiceGroup`.
    pub group: String,
    /// Its address.
    pub peer: SocketAddr,
}

impl Session {
    /// A session in `Begin`.
    pub fn new(
        xid: Arc<str>,
        tx_id: i64,
        name: String,
        timeout: Duration,
        begun_by: Begetter,
    ) -> Self {
        Session {
            xid,
            tx_id,
            name,
            timeout,
            begun: Instant::now(),
            begun_by,
            state: Mutex::new(State {
                status: GlobalStatus::Begin,
                active: true,
                branches: Vec::new(),
                driving: false,
            }),
        }
    }

    /// Its mutable state.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once its timeout has passed.
    pub fn timed_out(&self) -> bool {
        self.begun.elapsed() > self.timeout
    }

    /// A SAGA transaction: its first branch is SAGA (Seata's `GlobalSession.isSaga`).
    /// Its phase two is one request to the saga RM, not one per branch.
    pub fn is_saga(&self) -> bool {
        self.state()
            .branches
            .first()
            .is_some_and(|b| b.branch_type == BranchType::SAGA)
    }

    /// The resource a SAGA's phase two goes to: `applicationId#txServiceGroup` of the
    /// TM that began it (Seata's `SagaCore.getSagaResourceId`).
    pub fn saga_resource(&self) -> String {
        format!("{}#{}", self.begun_by.application_id, self.begun_by.group)
    }
}

/// Every session by XID.
#[derive(Debug, Default)]
pub struct Sessions {
    by_xid: DashMap<Arc<str>, Arc<Session>, foldhash::fast::RandomState>,
}

impl Sessions {
    /// Adds a session.
    pub fn insert(&self, s: Arc<Session>) {
        self.by_xid.insert(s.xid.clone(), s);
    }

    /// The session of `xid`.
    pub fn get(&self, xid: &str) -> Option<Arc<Session>> {
        self.by_xid.get(xid).map(|s| s.clone())
    }

    /// Forgets `xid` (the transaction finished).
    pub fn remove(&self, xid: &str) {
        self.by_xid.remove(xid);
    }

    /// Sessions for which `f` holds (a snapshot: the background loops work on it
    /// without holding the map).
    pub fn select(&self, mut f: impl FnMut(&Session) -> bool) -> Vec<Arc<Session>> {
        self.by_xid
            .iter()
            .filter(|e| f(e.value()))
            .map(|e| e.value().clone())
            .collect()
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.by_xid.len()
    }
}
