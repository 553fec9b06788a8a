//! The reader: reads bytes as they arrive, decodes frames, and dispatches them.
//!
//! It never waits on the writer. Answers and PONGs go to the response lane without
//! waiting (a full lane closes the connection, see [`crate::transport`]). The only thing
//! it waits for besides the socket is the inbound cap: with
//! `max_inbound_requests` handlers running it stops reading until one finishes, and TCP
//! pushes back on the peer.
//!
//! # Memory
//!
//! The read buffer grows with the bytes that have arrived, not with what a header
//! announces: a peer that announces an 8 MiB frame and sends 16 bytes costs one small
//! read buffer. When the socket has nothing more to read and no partial frame is held,
//! the buffer is released, so an idle connection holds none.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use futures_util::FutureExt;
use tokio::net::tcp::OwnedReadHalf;
use tracing::Instrument;

use super::liveness::Liveness;
use super::wire::Decoder;
use super::{Connection, InboundHandler, InboundRequest, Shared};
use crate::codec::{Frame, MessageType};
use crate::payload::Payload;
use crate::transport::CloseReason;

/// First read size, and the size after an idle release.
const READ_MIN: usize = 4 * 1024;
/// Largest single read reservation.
const READ_MAX: usize = 64 * 1024;

pub(super) async fn read_loop(
    shared: &Arc<Shared>,
    rd: OwnedReadHalf,
    mut codec: Decoder,
    mut liveness: Liveness,
    handler: Option<Arc<dyn InboundHandler>>,
) -> CloseReason {
    let mut buf = BytesMut::new();
    let mut want = READ_MIN;
    loop {
        // Everything already buffered first.
        loop {
            match codec.decode(shared, &mut buf) {
                Ok(Some(frame)) => {
                    if let Err(reason) = dispatch(shared, frame, handler.as_ref()).await {
                        return reason;
                    }
                    // Step aside now and then (tokio's cooperative budget) so the writer
                    // can start sending the answers queued so far while we decode the
                    // rest: the two ends then overlap instead of taking turns with one
                    // huge batch each.
                    tokio::task::consume_budget().await;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "protocol error; closing the connection");
                    return CloseReason::new(e.to_string());
                }
            }
        }
        if buf.capacity() - buf.len() < READ_MIN {
            buf.reserve(want);
        }
        let spare = buf.capacity() - buf.len();
        match rd.try_read_buf(&mut buf) {
            Ok(0) => return CloseReason::new("connection closed by peer"),
            Ok(n) => {
                if n == spare {
                    want = (want * 2).min(READ_MAX);
                }
                liveness.heard(shared);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if buf.is_empty() {
                    // Nothing half-read: hold no buffer while waiting.
                    buf = BytesMut::new();
                }
                if let Err(reason) = liveness.readable(shared, &rd).await {
                    return reason;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return CloseReason::io("read failed", e),
        }
    }
}

async fn dispatch(
    shared: &Arc<Shared>,
    frame: Frame,
    handler: Option<&Arc<dyn InboundHandler>>,
) -> Result<(), CloseReason> {
    match frame.msg_type {
        MessageType::Response => {
            let tx = shared.pending().remove(&frame.request_id);
            match tx {
                Some(tx) => {
                    let _ = tx.send(Ok(Some(frame)));
                }
                // The answer to merged requests, or to nothing we wait for.
                None => {
                    if let Some(frame) = super::merge::answer(shared, frame) {
                        tracing::debug!(
                            id = frame.request_id,
                            "response for an unknown or abandoned request"
                        );
                    }
                }
            }
            Ok(())
        }
        MessageType::HeartbeatRequest => shared.queue_response(Frame::pong_for(&frame)),
        MessageType::HeartbeatResponse => {
            // A PONG for `Connection::ping`; the heartbeat's own need no one told.
            let tx = shared.pings().remove(&frame.request_id);
            if let Some(tx) = tx {
                let _ = tx.send(());
            }
            Ok(())
        }
        MessageType::Request | MessageType::Oneway => {
            let Some(h) = handler else {
                tracing::warn!(
                    id = frame.request_id,
                    "the peer sent a request but no inbound handler is set; ignored"
                );
                return Ok(());
            };
            // The one wait of the reader: at the cap, until a handler finishes.
            shared.inbound.acquire().await;
            let permit = InboundPermit(shared.clone());
            let oneway = frame.msg_type == MessageType::Oneway;
            let id = frame.request_id;
            let conn = Connection {
                shared: shared.clone(),
            };
            let req = InboundRequest {
                peer: shared.peer,
                oneway,
                request_id: id,
                payload: Payload::from_frame(frame),
                connection: conn,
            };
            let mut fut = h.handle(req);
            match (&mut fut).now_or_never() {
                Some(resp) => {
                    drop(permit);
                    if let (false, Some(p)) = (oneway, resp) {
                        shared.answer(id, p)?;
                    }
                }
                None => {
                    let shared = shared.clone();
                    tokio::spawn(
                        async move {
                            let resp = fut.await;
                            drop(permit);
                            match (oneway, resp) {
                                (false, Some(p)) => {
                                    if let Err(e) = shared.answer(id, p) {
                                        tracing::debug!(error = %e, id, "could not send response");
                                    }
                                }
                                (false, None) => tracing::debug!(id, "handler gave no response"),
                                (true, _) => {}
                            }
                        }
                        .in_current_span(),
                    );
                }
            }
            Ok(())
        }
    }
}

/// One running inbound handler; dropping it (also on panic) frees its place.
struct InboundPermit(Arc<Shared>);

impl Drop for InboundPermit {
    fn drop(&mut self) {
        self.0.inbound.active.fetch_sub(1, Ordering::AcqRel);
        self.0.inbound.freed.notify_one();
    }
}
