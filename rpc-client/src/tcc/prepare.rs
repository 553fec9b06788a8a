//! The try of a TCC action: its branch registered with Seata's context, then the try
//! run inside the transaction with the branch type bound (Seata's
//! `ActionInterceptorHandler.proceed`).

use std::future::Future;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use super::action::TccAction;
use super::application_data::{self, Registration};
use super::context::{ActionParams, BusinessActionContext};
use crate::message::BranchType;
use crate::rm::ResourceManager;
use crate::tx;
use crate::tx_error::TransactionError;

/// Why a TCC try did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TccError<E> {
    /// No transaction is current: nothing to register the branch with. (Seata Java
    /// runs such a try as a plain call, with no confirm or cancel ever to follow; it
    /// is refused here, as the mistake it almost always is.)
    #[error("a TCC try needs a global transaction, and none is current")]
    NoTransaction,
    /// The branch could not be registered: the try did not run.
    #[error("TCC branch register failed; the try did not run: {0}")]
    Register(TransactionError),
    /// The try failed. Its branch is registered: when the transaction rolls back, the
    /// action's cancel runs with `ctx`.
    #[error("TCC try failed: {error}")]
    Try {
        /// The try's error.
        error: E,
        /// The branch's context.
        ctx: BusinessActionContext,
    },
}

impl ResourceManager {
    /// Runs the try of `action` in the current global transaction: registers a TCC
    /// branch whose applicationData is the JSON Seata Java's interceptor writes (the
    /// `params`, the action's names and Seata's keys; a Java RM of the same action can
    /// end it), then runs `try_` with the branch's context, the branch type bound as
    /// `TCC` ([`tx::current`] shows it). The RM must serve the action's name as a
    /// resource, with a [`TccActions`](super::TccActions) handler, for phase two to
    /// come back to it.
    pub async fn tcc_prepare<A, T, E, F, Fut>(
        &self,
        action: &A,
        params: ActionParams,
        try_: F,
    ) -> Result<T, TccError<E>>
    where
        A: TccAction + ?Sized,
        F: FnOnce(BusinessActionContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let xid = tx::current_xid().ok_or(TccError::NoTransaction)?;
        let names = action.method_names();
        let start_millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        let host = local_host(self);
        let data = application_data::write(
            &params,
            &Registration {
                action_name: action.name(),
                prepare: &names.prepare,
                commit: &names.commit,
                rollback: &names.rollback,
                use_fence: action.use_fence(),
                start_millis,
                host,
            },
        );
        let branch_id = self
            .branch_register(&xid, BranchType::TCC, action.name(), None, Some(&data))
            .await
            .map_err(TccError::Register)?;
        // What was just written reads back: the same map phase two will see.
        let map = application_data::read(Some(&data)).unwrap_or_default();
        let ctx = BusinessActionContext::new(xid, branch_id, action.name(), map);
        tracing::debug!(
            xid = ctx.xid(),
            branch = branch_id,
            action = action.name(),
            "TCC branch registered; running the try"
        );
        tx::context::with_branch_type(BranchType::TCC, try_(ctx.clone()))
            .await
            .map_err(|error| TccError::Try { error, ctx })
    }
}

/// This process's address as Seata's `NetUtil.getLocalIp` gives it (`host-name`): the
/// local address the system routes to a TC from, found once (a UDP socket
/// `connect`ed, which sends nothing); `127.0.0.1` when there is no TC to route to.
fn local_host(rm: &ResourceManager) -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    if let Some(h) = HOST.get() {
        return h;
    }
    let alive = rm.client().alive();
    let peer = alive.endpoints().iter().next().map(|e| e.connection.peer());
    let Some(ip) = peer.and_then(route_from) else {
        return "127.0.0.1";
    };
    HOST.get_or_init(|| ip.to_string())
}

fn route_from(peer: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(peer).ok()?;
    Some(s.local_addr().ok()?.ip())
}
