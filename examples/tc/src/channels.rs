//! Who is connected: each registered connection's role, and the RMs by resource, so
//! phase two finds an RM again (after it reconnects, on another port) the way Seata's
//! `ChannelManager.getChannel` does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use meshline::rpc::Connection;
use meshline::rpc::message::BranchType;

/// What a connection registered as (kept in its state slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// TM or RM.
    pub role: Role,
    /// `applicationId`.
    pub application_id: String,
    /// `transactionServiceGroup`.
    pub group: String,
    /// The client's version.
    pub version: String,
}

/// A TM or an RM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// RegisterTM.
    Tm,
    /// RegisterRM.
    Rm,
}

/// An RM connection serving a resource.
#[derive(Debug, Clone)]
struct RmChannel {
    application_id: String,
    peer: SocketAddr,
    conn: Connection,
}

/// The RMs by resource id.
#[derive(Debug, Default)]
pub struct Channels {
    by_resource: Mutex<HashMap<String, Vec<RmChannel>>>,
}

impl Channels {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<RmChannel>>> {
        self.by_resource.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `conn` (an RM of `application_id`) serves `resources`.
    pub fn add_rm<'a>(
        &self,
        conn: &Connection,
        application_id: &str,
        resources: impl Iterator<Item = &'a str>,
    ) {
        let mut m = self.map();
        for r in resources {
            let list = m.entry(r.to_string()).or_default();
            if !list.iter().any(|c| c.conn.id() == conn.id()) {
                list.push(RmChannel {
                    application_id: application_id.to_string(),
                    peer: conn.peer(),
                    conn: conn.clone(),
                });
            }
        }
    }

    /// `conn` closed: it serves nothing any more.
    pub fn remove(&self, conn: &Connection) {
        let mut m = self.map();
        m.retain(|_, list| {
            list.retain(|c| c.conn.id() != conn.id());
            !list.is_empty()
        });
    }

    /// `conn` no longer serves `resources` (an UnregisterRM); returns how many of them
    /// it served.
    pub fn remove_rm<'a>(
        &self,
        conn: &Connection,
        resources: impl Iterator<Item = &'a str>,
    ) -> usize {
        let mut m = self.map();
        let mut removed = 0;
        for r in resources {
            if let Some(list) = m.get_mut(r) {
                let before = list.len();
                list.retain(|c| c.conn.id() != conn.id());
                removed += before - list.len();
                if list.is_empty() {
                    m.remove(r);
                }
            }
        }
        removed
    }

    /// The connection to send a branch's phase two on: the RM that registered it
    /// (`application_id` at `peer`), else one of that application on the same host,
    /// else one of that application anywhere, else (AT only, whose phase two any
    /// instance with the resource can do) one of another application with the resource.
    pub fn find(
        &self,
        resource: &str,
        application_id: &str,
        peer: SocketAddr,
        branch_type: BranchType,
    ) -> Option<Connection> {
        let m = self.map();
        let list = m.get(resource)?;
        let open = |c: &&RmChannel| !c.conn.is_closed();
        let same_app = |c: &&RmChannel| c.application_id == application_id;
        list.iter()
            .filter(open)
            .find(|c| same_app(c) && c.peer == peer)
            .or_else(|| {
                list.iter()
                    .filter(open)
                    .find(|c| same_app(c) && c.peer.ip() == peer.ip())
            })
            .or_else(|| list.iter().filter(open).find(same_app))
            .or_else(|| {
                (branch_type == BranchType::AT)
                    .then(|| list.iter().find(|c| !c.conn.is_closed()))
                    .flatten()
            })
            .map(|c| c.conn.clone())
    }

    /// RM connections serving `resource`.
    pub fn count(&self, resource: &str) -> usize {
        self.map().get(resource).map_or(0, Vec::len)
    }
}
