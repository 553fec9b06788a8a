//! The RM's side of phase two against a hand-written TC (a plain `Server`, as a Java
//! TC behaves on the wire): BranchCommit and BranchRollback requests in the codec and
//! compressor the TC is configured with get answers in the request's, with the request's
//! id and the handler's status; UndoLogDelete (one-way) reaches the handler and is not
//! answered; a handler's error is a failed answer with a retryable status.

use crate::tx_world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::codec::{CODEC_PROTOBUF, CODEC_SEATA};
use meshline::rpc::compress::Compressor;
use meshline::rpc::message::{
    BranchCommitRequest, BranchEndRequest, BranchRollbackRequest, BranchStatus, BranchType,
    SeataMessage, UndoLogDeleteRequest, register_reply,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::{BodyFormat, InboundRequest, Payload, Server};
use meshline::{EmptyProtection, Instance, WatchHub};
use tokio::sync::mpsc;
use tx_world::Connected;

#[derive(Clone)]
struct Handler {
    undo: mpsc::UnboundedSender<UndoLogDeleteRequest>,
    seen: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl BranchHandler for Handler {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("commit {}", r.branch_id));
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("rollback {}", r.branch_id));
        Err("undo log missing".into())
    }

    async fn undo_log_delete(&self, r: UndoLogDeleteRequest) {
        let _ = self.undo.send(r);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_two_answers_echo_the_request_and_undo_log_delete_reaches_the_handler() {
    // A TC that only registers clients; the test drives phase two by hand.
    let tc = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        |req: InboundRequest| async move {
            let msg = req.payload.decode_seata().ok()?;
            Payload::seata(&register_reply(&msg, true, "2.3.0")?).ok()
        },
    )
    .await
    .unwrap();
    let hub = Arc::new(WatchHub::new("test", EmptyProtection::Apply));
    hub.publish(
        "c",
        vec![Instance::new("127.0.0.1", tc.local_addr().port()).unwrap()],
    );
    let (undo, mut undo_rx) = mpsc::unbounded_channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    // Held to the end: phase two reaches the handler through its connection.
    let _rm = ResourceManager::builder()
        .watch(hub.subscribe("c"), "c")
        .resource("db-a")
        .handler(Handler {
            undo,
            seen: seen.clone(),
        })
        .load_balance_name("XID")
        .connected(1)
        .await;
    let conn = tc.connections().pop().expect("the RM's connection");

    let req = BranchEndRequest {
        xid: "127.0.0.1:8091:1".into(),
        branch_id: 42,
        branch_type: BranchType::AT,
        resource_id: "db-a".into(),
        application_data: None,
    };
    // In the seata codec with each compressor, and in the protobuf codec (a TC with
    // `transport.serialization = protobuf`), plain and compressed.
    let formats = [
        (CODEC_SEATA, Compressor::None),
        (CODEC_SEATA, Compressor::Gzip),
        (CODEC_SEATA, Compressor::Zstd),
        (CODEC_PROTOBUF, Compressor::None),
        (CODEC_PROTOBUF, Compressor::Gzip),
    ]
    .map(|(codec, compressor)| BodyFormat { codec, compressor });
    for format in formats {
        let p = Payload::seata_as(&SeataMessage::BranchCommit(req.clone()), format).unwrap();
        let answer = conn.call(p, Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            BodyFormat::of(&answer),
            format,
            "answered in the request's codec and compressor"
        );
        match answer.decode_seata().unwrap() {
            SeataMessage::BranchCommitResponse(r) => {
                assert!(r.result.is_success());
                assert_eq!((r.xid.as_str(), r.branch_id), ("127.0.0.1:8091:1", 42));
                assert_eq!(r.branch_status, BranchStatus::PhaseTwoCommitted);
            }
            other => panic!("{other:?}"),
        }
    }
    // A handler error: failed, with its message and a retryable status.
    let p = Payload::seata(&SeataMessage::BranchRollback(req.clone())).unwrap();
    match conn
        .call(p, Duration::from_secs(5))
        .await
        .unwrap()
        .decode_seata()
        .unwrap()
    {
        SeataMessage::BranchRollbackResponse(r) => {
            assert!(!r.result.is_success());
            assert_eq!(r.result.message.as_deref(), Some("undo log missing"));
            assert_eq!(
                r.branch_status,
                BranchStatus::PhaseTwoRollbackFailedRetryable
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            "commit 42",
            "commit 42",
            "commit 42",
            "commit 42",
            "commit 42",
            "rollback 42"
        ]
    );
    // UndoLogDelete is one-way: it reaches the handler.
    let undo = UndoLogDeleteRequest {
        branch_type: BranchType::AT,
        resource_id: "db-a".into(),
        save_days: 3,
    };
    conn.send_oneway(Payload::seata(&SeataMessage::UndoLogDelete(undo.clone())).unwrap())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), undo_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, undo);
    // Something an RM does not take (a GlobalBegin from a "TC") gets no answer, and
    // the connection stays usable.
    let odd = Payload::seata(&SeataMessage::GlobalBegin(Default::default())).unwrap();
    assert!(matches!(
        conn.call(odd, Duration::from_millis(300)).await,
        Err(meshline::rpc::RpcError::Timeout { .. })
    ));
    let p = Payload::seata(&SeataMessage::BranchCommit(req)).unwrap();
    assert!(conn.call(p, Duration::from_secs(5)).await.is_ok());
}
