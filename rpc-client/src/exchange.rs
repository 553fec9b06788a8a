//! One typed Seata request over an [`RpcClient`]: encode, route, call, decode the answer
//! into the response type asked for. What the TM and RM layers are made of.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::Instance;

use crate::client::{CallOptions, RpcClient};
use crate::message::{SeataMessage, TransactionResult};
use crate::payload::Payload;
use crate::tx_error::TransactionError;

/// A decoded answer and who gave it.
pub(crate) struct Answer {
    pub message: SeataMessage,
    pub endpoint: Arc<Instance>,
}

/// Sends `msg` routed by `route` (an XID, or a GlobalBegin's transaction name, as
/// Seata's balancers key them) and decodes the answer (decompressed within the
/// client's frame limit).
pub(crate) async fn exchange(
    client: &RpcClient,
    operation: &'static str,
    xid: Option<&str>,
    route: &str,
    msg: &SeataMessage,
    timeout: Option<Duration>,
) -> Result<Answer, TransactionError> {
    let payload = request_payload(client, msg)
        .map_err(|source| TransactionError::Encode { operation, source })?;
    let mut opts = CallOptions::xid(route);
    if is_read(msg) {
        opts = opts.idempotent();
    }
    if let Some(t) = timeout {
        opts = opts.with_timeout(t);
    }
    let resp = client
        .call(payload, opts)
        .await
        .map_err(|source| TransactionError::Rpc {
            operation,
            xid: xid.map(str::to_string),
            source: Box::new(source),
        })?;
    let limit = client.options().transport.max_frame_len;
    let message =
        resp.payload
            .decode_seata_limited(limit)
            .map_err(|source| TransactionError::BadAnswer {
                operation,
                endpoint: resp.endpoint.to_string(),
                source,
            })?;
    Ok(Answer {
        message,
        endpoint: resp.endpoint,
    })
}

/// `msg` in the codec the client's connections send, written once: in protobuf when
/// they send protobuf (`transport.serialization = protobuf`, or gRPC) and do not batch,
/// instead of in the seata codec for the connection to rewrite. Batching connections
/// merge seata-codec bodies (and rewrite the merged frame), and a message the protobuf
/// messages cannot carry goes in the seata codec: both as before.
fn request_payload(
    client: &RpcClient,
    msg: &SeataMessage,
) -> Result<Payload, crate::message::MessageError> {
    let t = &client.options().transport;
    let protobuf = t.codec == crate::codec::CODEC_PROTOBUF || t.protocol == crate::Protocol::Grpc;
    if protobuf && t.batch.is_none() {
        let format = crate::BodyFormat {
            codec: crate::codec::CODEC_PROTOBUF,
            compressor: crate::Compressor::None,
        };
        if let Ok(p) = Payload::seata_as(msg, format) {
            return Ok(p);
        }
    }
    Payload::seata(msg)
}

impl Answer {
    /// An answer of another type than asked for.
    pub fn unexpected(&self, operation: &'static str, expected: &'static str) -> TransactionError {
        TransactionError::BadAnswer {
            operation,
            endpoint: self.endpoint.to_string(),
            source: crate::message::MessageError::UnexpectedType {
                expected,
                got: self.message.type_code(),
            },
        }
    }

    /// `Err(Refused)` when the result says Failed.
    pub fn check(
        &self,
        operation: &'static str,
        xid: Option<&str>,
        result: &TransactionResult,
        status: Option<crate::message::GlobalStatus>,
    ) -> Result<(), TransactionError> {
        if result.is_success() {
            Ok(())
        } else {
            Err(TransactionError::refused(
                operation,
                xid,
                &self.endpoint,
                result,
                status,
            ))
        }
    }
}

/// Whether `msg` only reads the TC's state, so a hedging client may send it twice:
/// GlobalStatus and GlobalLockQuery. Every other request changes something.
fn is_read(msg: &SeataMessage) -> bool {
    matches!(
        msg,
        SeataMessage::GlobalStatus(_) | SeataMessage::GlobalLockQuery(_)
    )
}

/// After a lost connection on `client`: waits, at most twice `backoff_initial` plus
/// `connect_timeout`, until the TC the XID names is alive again when the client
/// follows it and it is not alive now, or until any TC is when none is. Seata's TM and
/// RM reconnect to that TC before they send again; without the wait, the attempts
/// left fail "none is alive" within microseconds, or go to another TC, which does not
/// hold the transaction.
pub(crate) async fn wait_for_reconnect(client: &RpcClient, op: &str, xid: &str) {
    let named = meshline_loadbalance::parse_xid_address(xid).filter(|a| {
        client
            .endpoints()
            .iter()
            .any(|e| e.instance.socket_addr() == Some(*a))
    });
    let is_up = |alive: &crate::client::AliveSet| match named {
        Some(a) => alive
            .endpoints()
            .iter()
            .any(|e| e.instance.socket_addr() == Some(a)),
        None => !alive.is_empty(),
    };
    let mut rx = client.subscribe_alive();
    if is_up(&rx.borrow_and_update()) {
        return;
    }
    let o = client.options();
    let bound = (o.backoff_initial * 2 + o.connect_timeout).min(o.request_timeout);
    if tokio::time::timeout(bound, rx.wait_for(|a| is_up(a)))
        .await
        .is_err()
    {
        tracing::warn!(%xid, tc = ?named, waited = ?bound, "{op}: the TC was not connected again");
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use crate::message::{BranchRegisterRequest, GlobalBeginRequest, GlobalEndRequest};

    #[test]
    fn only_status_and_lock_queries_are_reads() {
        assert!(is_read(&SeataMessage::GlobalStatus(GlobalEndRequest::new(
            "x"
        ))));
        assert!(is_read(&SeataMessage::GlobalLockQuery(
            BranchRegisterRequest::default()
        )));
        assert!(!is_read(&SeataMessage::GlobalCommit(
            GlobalEndRequest::new("x")
        )));
        assert!(!is_read(&SeataMessage::GlobalRollback(
            GlobalEndRequest::new("x")
        )));
        assert!(!is_read(&SeataMessage::GlobalBegin(
            GlobalBeginRequest::default()
        )));
        assert!(!is_read(&SeataMessage::BranchRegister(
            BranchRegisterRequest::default()
        )));
    }
}
