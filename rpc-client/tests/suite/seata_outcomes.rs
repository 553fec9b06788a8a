//! The TM reads a commit or rollback as Seata's own TM does, against a test TC that
//! answers exactly as Seata's does (built from Seata's `AbstractTCInboundHandler`,
//! `AbstractExceptionHandler` and `DefaultCore`, not from the example TC):
//!
//! - an exception after the decision (`DefaultCore.doGlobalCommit` wraps a branch
//!   commit that could not be sent in `TransactionException(ex)`, code `Unknown`) is
//!   answered `Failed` with the session's status (`checkTransactionStatus`):
//!   `CommitRetrying`, `RollbackRetrying`. Decided: the TM returns the status;
//! - a store that fails after the decision leaves the decided status (`Committing`);
//! - a failure before the decision (the session lock, the store) leaves `Begin`: not
//!   decided, an error with the TC's code;
//! - a session the TC no longer has is `Finished` (success): heuristic, as before.
//!
//! The XID's transaction id says which case the test TC plays.

use crate::common;

use std::time::Duration;

use meshline_rpc_client::message::{
    GlobalBeginResponse, GlobalEndResponse, GlobalStatus, SeataMessage, TransactionExceptionCode,
    TransactionResult, register_reply,
};
use meshline_rpc_client::tm::{TmOptions, TransactionManager};
use meshline_rpc_client::{InboundRequest, Payload, Server, ServerConfig, TransactionError};

/// What the test TC answers to a GlobalCommit / GlobalRollback of the XID ending in
/// `id`, as Seata's TC would in the case the comment names.
fn seata_answer(commit: bool, id: u32) -> GlobalEndResponse {
    use GlobalStatus as S;
    use TransactionExceptionCode as E;
    let failed = |e, msg: &str, status| GlobalEndResponse {
        result: TransactionResult::failed(e, format!("TransactionException[{msg}]")),
        global_status: status,
    };
    // The operation's name in the TC's messages, and the statuses it moves through.
    let (op, retrying, deciding, done) = if commit {
        ("commit", S::CommitRetrying, S::Committing, S::Committed)
    } else {
        (
            "rollback",
            S::RollbackRetrying,
            S::Rollbacking,
            S::Rollbacked,
        )
    };
    let store_failed = format!("global {op} request failed");
    match id {
        // A TCC branch whose RM is not connected: phase two could not be sent, the
        // session is queued to retry (DefaultCore.doGlobalCommit, catch Exception).
        1 => failed(E::Unknown, "rm not connected", retrying),
        // The store failed after the session changed status.
        2 => failed(E::FailedStore, &store_failed, deciding),
        // The store failed before anything changed: the session is still Begin.
        3 => failed(E::FailedStore, &store_failed, S::Begin),
        // The global session lock could not be taken (GlobalSession.lock).
        4 => failed(
            E::FailedLockGlobalTransaction,
            "Lock global session failed",
            S::Begin,
        ),
        // AT: committed asynchronously, answered at once.
        5 if commit => GlobalEndResponse::success(S::AsyncCommitting),
        // The TC no longer has the session.
        6 => GlobalEndResponse::success(S::Finished),
        _ => GlobalEndResponse::success(done),
    }
}

async fn seata_like_tc() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let me = listener.local_addr().unwrap();
    // An XID naming another TC of the test (not the placeholder 127.0.0.1:8091): this
    // TC does not hold it, and answers as Seata's TC does for a session it no longer
    // has (`Finished`).
    let elsewhere = move |xid: &str| {
        meshline_loadbalance::parse_xid_address(xid).is_some_and(|a| a.port() != 8091 && a != me)
    };
    // The first commit of transaction 8 loses its connection (the TC is still up).
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = move |req: InboundRequest| {
        let dropped = dropped.clone();
        async move {
            let msg = req.payload.decode_seata().ok()?;
            if let Some(reply) = register_reply(&msg, true, "2.3.0") {
                return Some(Payload::seata(&reply).unwrap());
            }
            let id = |xid: &str| {
                xid.rsplit(':')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
            };
            let answer = match msg {
                SeataMessage::GlobalBegin(_) => {
                    SeataMessage::GlobalBeginResponse(GlobalBeginResponse {
                        result: TransactionResult::success(),
                        xid: Some("127.0.0.1:8091:7".into()),
                        extra_data: None,
                    })
                }
                SeataMessage::GlobalCommit(r) if elsewhere(&r.xid) => {
                    SeataMessage::GlobalCommitResponse(GlobalEndResponse::success(
                        GlobalStatus::Finished,
                    ))
                }
                SeataMessage::GlobalCommit(r)
                    if id(&r.xid) == 8
                        && !dropped.swap(true, std::sync::atomic::Ordering::SeqCst) =>
                {
                    req.connection.close_with("the test drops the connection");
                    return None;
                }
                SeataMessage::GlobalCommit(r) => {
                    SeataMessage::GlobalCommitResponse(seata_answer(true, id(&r.xid)))
                }
                SeataMessage::GlobalRollback(r) => {
                    SeataMessage::GlobalRollbackResponse(seata_answer(false, id(&r.xid)))
                }
                _ => return None,
            };
            Some(Payload::seata(&answer).unwrap())
        }
    };
    Server::from_listener(listener, ServerConfig::default(), handler).unwrap()
}

/// A TM over `server`, and the registry it follows (the watch ends with it).
async fn tm(
    server: &Server,
) -> (
    std::sync::Arc<meshline_registry_core::WatchHub>,
    TransactionManager,
) {
    tm_over(&[server]).await
}

/// A TM over `servers`, routing by XID, and the registry it follows.
async fn tm_over(
    servers: &[&Server],
) -> (
    std::sync::Arc<meshline_registry_core::WatchHub>,
    TransactionManager,
) {
    let hub = common::hub_with(
        servers
            .iter()
            .map(|s| common::instance(s.local_addr()))
            .collect(),
    );
    let registered = common::builder(&hub, "XID").handshake(common::seata_tm());
    let client = common::build_alive(registered, servers.len(), Duration::from_secs(5)).await;
    (
        hub,
        TransactionManager::from_client(client, TmOptions::default()),
    )
}

fn xid(id: u32) -> String {
    format!("127.0.0.1:8091:{id}")
}

#[tokio::test]
async fn a_decided_outcome_is_ok_whatever_the_result_code() {
    let server = seata_like_tc().await;
    let (_hub, tm) = tm(&server).await;
    for (commit, id, want) in [
        (true, 1, GlobalStatus::CommitRetrying),
        (false, 1, GlobalStatus::RollbackRetrying),
        (true, 2, GlobalStatus::Committing),
        (false, 2, GlobalStatus::Rollbacking),
        (true, 5, GlobalStatus::AsyncCommitting),
        (true, 9, GlobalStatus::Committed),
    ] {
        let got = if commit {
            tm.commit(&xid(id)).await
        } else {
            tm.rollback(&xid(id)).await
        };
        assert_eq!(got.unwrap(), want, "commit: {commit}, transaction {id}");
    }
}

#[tokio::test]
async fn an_undecided_answer_is_the_tcs_refusal_with_its_code() {
    let server = seata_like_tc().await;
    let (_hub, tm) = tm(&server).await;
    for (op, r) in [
        ("commit", tm.commit(&xid(3)).await),
        ("rollback", tm.rollback(&xid(3)).await),
    ] {
        match r {
            Err(TransactionError::Refused {
                exception: TransactionExceptionCode::FailedStore,
                status: Some(GlobalStatus::Begin),
                ..
            }) => {}
            other => panic!("{op} with the store failed before the decision: {other:?}"),
        }
    }
    match tm.commit(&xid(4)).await {
        Err(TransactionError::Refused {
            exception: TransactionExceptionCode::FailedLockGlobalTransaction,
            ..
        }) => {}
        other => panic!("commit with the session lock not taken: {other:?}"),
    }
    // A success that says the TC no longer knows it stays heuristic.
    let e = tm.commit(&xid(6)).await.unwrap_err();
    assert_eq!(
        e.exception_code(),
        TransactionExceptionCode::CommitHeuristic
    );
    assert_eq!(tm.rollback(&xid(6)).await.unwrap(), GlobalStatus::Finished);
}

/// A commit whose connection is lost on the way (the TC stays up) is sent again once
/// the client has connected again, as Seata's TM does (its send reconnects first):
/// the retries are not spent in the microseconds before the reconnect, each failing
/// "none is alive".
#[tokio::test]
async fn a_commit_whose_connection_drops_is_sent_again_once_reconnected() {
    let server = seata_like_tc().await;
    let (_hub, tm) = tm(&server).await;
    let started = std::time::Instant::now();
    assert_eq!(tm.commit(&xid(8)).await.unwrap(), GlobalStatus::Committed);
    // The reconnect's first backoff is 50 ms (common::builder): the retry waited for it,
    // and no longer than a few of them.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// With two TCs, a commit whose connection to its own TC (the one its XID names) is
/// lost goes back to that TC once it is connected again, as Seata's TM reconnects to
/// the XID's TC; not to the other TC, which does not hold the transaction and answers
/// `Finished` (an outcome the TM could then only call heuristic).
#[tokio::test]
async fn a_commit_whose_connection_drops_goes_back_to_the_tc_its_xid_names() {
    let a = seata_like_tc().await;
    let b = seata_like_tc().await;
    let (_hub, tm) = tm_over(&[&a, &b]).await;
    let xid = format!("{}:8", a.local_addr());
    assert_eq!(tm.commit(&xid).await.unwrap(), GlobalStatus::Committed);
}
