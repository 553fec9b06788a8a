//! What the connection does to Seata requests on their way out and to merged answers
//! on their way in ([`crate::transport`] explains both options).
//!
//! - **Compression**: a Seata-codec request body not yet compressed is compressed with
//!   the connection's compressor as it is written.
//! - **Merging**: transaction requests in one write batch go out as one
//!   `MergedWarpMessage` (one-way, a new frame id, the requests' own ids inside). Each
//!   request's sender is in the pending table under its own id, exactly as if it had
//!   been sent alone, so timeouts, cancellation and a dying connection treat it as any
//!   other written request. The merged frame's id maps to those ids in `Shared::merges`
//!   until the answer comes: a `MergeResultMessage` (results by position) or one or
//!   more `BatchResultMessage`s (results by id). Each result is handed to its caller
//!   as the response frame it would have got alone.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;

use super::Shared;
use super::lanes::Outcome;
use crate::codec::{
    CODEC_PROTOBUF, CODEC_SEATA, COMPRESSOR_NONE, Frame, HEADER_LEN, HeadMap, MessageType,
};
use crate::compress::Compressor;
use crate::message::merge::{MAX_ENTRIES, MergeReply, merged_body, split_reply};
use crate::message::{is_mergeable_request, type_name};
use crate::transport::CloseReason;

/// Merge records kept before the ones whose requests are all gone (timed out, never
/// answered) are dropped.
const PRUNE_AT: usize = 256;

/// A Seata-codec body nobody compressed yet.
fn plain_seata(frame: &Frame) -> bool {
    frame.codec == CODEC_SEATA && frame.compressor == COMPRESSOR_NONE && !frame.body.is_empty()
}

/// True when the writer may put `frame` into a MergedWarpMessage.
pub(super) fn is_mergeable(frame: &Frame) -> bool {
    frame.msg_type == MessageType::Request
        && plain_seata(frame)
        && frame.head.is_empty()
        && frame.body.len() >= 2
        && is_mergeable_request(i16::from_be_bytes([frame.body[0], frame.body[1]]))
}

/// Makes a request's Seata body what the connection writes: in its codec
/// ([`transcode_request`]), then compressed ([`compress_request`]).
pub(super) fn prepare_request(shared: &Shared, frame: &mut Frame) {
    transcode_request(shared.codec, frame);
    compress_request(shared.compressor, frame);
}

/// Rewrites a request's Seata-codec body in the protobuf codec when the connection
/// sends that (`transport.serialization = protobuf`). A body the protobuf messages
/// cannot carry (a v1-only constant) or that does not decode goes as it is, with a
/// warning: the peer reads the seata codec either way.
pub(super) fn transcode_request(codec: u8, frame: &mut Frame) {
    if codec != CODEC_PROTOBUF || !plain_seata(frame) {
        return;
    }
    let body = crate::message::SeataMessage::decode(&frame.body)
        .map_err(|e| e.to_string())
        .and_then(|m| crate::message::protobuf::encode(&m).map_err(|e| e.to_string()));
    match body {
        Ok(b) => {
            frame.body = b.into();
            frame.codec = CODEC_PROTOBUF;
        }
        Err(e) => tracing::warn!(error = %e, "request sent in the seata codec"),
    }
}

/// Compresses a request's Seata message body, in either codec Seata's messages are
/// written in, with the connection's compressor (a no-op without one, or for a body
/// that is not a Seata message or already compressed). A body that cannot be
/// compressed is sent as it is, with a warning: the peer reads it either way.
pub(super) fn compress_request(compressor: Compressor, frame: &mut Frame) {
    let message = frame.codec == CODEC_SEATA || frame.codec == CODEC_PROTOBUF;
    if compressor == Compressor::None
        || !message
        || frame.compressor != COMPRESSOR_NONE
        || frame.body.is_empty()
    {
        return;
    }
    match compressor.compress(&frame.body) {
        Ok(b) => {
            frame.body = b;
            frame.compressor = compressor.code();
        }
        Err(e) => tracing::warn!(error = %e, "request body not compressed"),
    }
}

/// Writes `requests` (mergeable, their callers still waiting) into `buf`: alone when
/// there is one, else as MergedWarpMessages of at most [`MAX_ENTRIES`] that fit the
/// frame limit. Registers each request in `pending` and each merged frame in
/// `Shared::merges`.
pub(super) fn write_merged(
    shared: &Shared,
    requests: Vec<(Frame, oneshot::Sender<Outcome>)>,
    pending: &mut HashMap<u32, oneshot::Sender<Outcome>>,
    buf: &mut BytesMut,
) {
    let (max, per_entry) = shared.merge_bound();
    // Register every caller first: an id still in use (wrapped) is not sent, and its
    // dropped sender tells the caller "not written".
    let mut ready: Vec<Frame> = Vec::with_capacity(requests.len());
    for (frame, tx) in requests {
        if tx.is_closed() {
            continue;
        }
        match pending.entry(frame.request_id) {
            Entry::Occupied(_) => {
                tracing::warn!(
                    id = frame.request_id,
                    "request id still in use after wrapping; not sent"
                );
            }
            Entry::Vacant(slot) => {
                slot.insert(tx);
                ready.push(frame);
            }
        }
    }
    if ready.len() == 1 {
        put_lone(shared, ready.pop().expect("one frame"), pending, buf);
        return;
    }
    // Envelope overhead: frame header, type code, length, count.
    const ENVELOPE: usize = HEADER_LEN + 2 + 4 + 2;
    let mut chunk: Vec<Frame> = Vec::new();
    let mut size = ENVELOPE;
    let mut merges = shared.merges();
    for f in ready {
        let add = f.body.len() + per_entry;
        if !chunk.is_empty() && (chunk.len() >= MAX_ENTRIES || size + add > max) {
            flush(
                shared,
                std::mem::take(&mut chunk),
                pending,
                &mut merges,
                buf,
            );
            size = ENVELOPE;
        }
        size += add;
        chunk.push(f);
    }
    if !chunk.is_empty() {
        flush(shared, chunk, pending, &mut merges, buf);
    }
    if merges.len() > PRUNE_AT {
        merges.retain(|_, ids| ids.iter().any(|id| pending.contains_key(id)));
    }
}

/// A request with nothing to merge it with, framed alone into `buf`; one that cannot be
/// framed is dropped and its caller's slot freed.
fn put_lone(
    shared: &Shared,
    mut f: Frame,
    pending: &mut HashMap<u32, oneshot::Sender<Outcome>>,
    buf: &mut BytesMut,
) {
    prepare_request(shared, &mut f);
    if let Err(e) = shared.put(&f, buf) {
        tracing::error!(error = %e, "dropping unframeable request");
        pending.remove(&f.request_id);
    }
}

/// One merged frame (or the lone request) into `buf`.
fn flush(
    shared: &Shared,
    mut chunk: Vec<Frame>,
    pending: &mut HashMap<u32, oneshot::Sender<Outcome>>,
    merges: &mut HashMap<u32, Vec<u32>>,
    buf: &mut BytesMut,
) {
    if chunk.len() == 1 {
        put_lone(shared, chunk.pop().expect("one frame"), pending, buf);
        return;
    }
    let ids: Vec<u32> = chunk.iter().map(|f| f.request_id).collect();
    let body = merged_body(chunk.iter().map(|f| (&f.body, f.request_id)));
    let mut frame = Frame {
        msg_type: MessageType::Oneway,
        codec: CODEC_SEATA,
        compressor: COMPRESSOR_NONE,
        request_id: shared.next_id(),
        head: HeadMap::new(),
        body: body.freeze(),
    };
    prepare_request(shared, &mut frame);
    match shared.put(&frame, buf) {
        Ok(()) => {
            tracing::trace!(
                id = frame.request_id,
                requests = ids.len(),
                "merged requests"
            );
            merges.insert(frame.request_id, ids);
        }
        Err(e) if e.is_too_large() => {
            // The estimate of the merged size missed (bodies grow when rewritten in
            // the protobuf codec): the halves go separately.
            tracing::debug!(error = %e, requests = ids.len(), "merged frame too large; split");
            let rest = chunk.split_off(chunk.len() / 2);
            flush(shared, chunk, pending, merges, buf);
            flush(shared, rest, pending, merges, buf);
        }
        Err(e) => {
            tracing::error!(error = %e, "dropping unframeable merged requests");
            for id in ids {
                pending.remove(&id);
            }
        }
    }
}

/// The response frame a merged request's caller gets.
fn response(request_id: u32, body: Bytes) -> Frame {
    Frame {
        msg_type: MessageType::Response,
        codec: CODEC_SEATA,
        compressor: COMPRESSOR_NONE,
        request_id,
        head: HeadMap::new(),
        body,
    }
}

/// Handles a response whose id is a merged frame's; `frame` is handed back when it is
/// not one. A result goes to its caller; an answer that cannot be read fails every
/// request still waiting in that batch with the reason (they were delivered: the TC
/// answered, unreadably).
pub(super) fn answer(shared: &Shared, frame: Frame) -> Option<Frame> {
    let Some(ids) = shared.merges().remove(&frame.request_id) else {
        return Some(frame);
    };
    let outer = frame.request_id;
    let body = if frame.compressor == COMPRESSOR_NONE {
        Ok(frame.body)
    } else {
        crate::compress::decompress(frame.compressor, &frame.body, shared.max_frame_len)
            .map_err(|e| e.to_string())
    };
    // A merged answer in the protobuf codec is split as its seata-codec twin.
    let body = match body {
        Ok(b) if frame.codec == CODEC_PROTOBUF => crate::message::protobuf::decode(&b)
            .map_err(|e| e.to_string())
            .and_then(|m| m.encode().map_err(|e| e.to_string())),
        other => other,
    };
    let reply = body.and_then(|b| split_reply(&b).map_err(|e| e.to_string()));
    match reply {
        Ok(MergeReply::Positional(parts)) if parts.len() == ids.len() => {
            let mut p = shared.pending();
            for (id, part) in ids.into_iter().zip(parts) {
                if let Some(tx) = p.remove(&id) {
                    let _ = tx.send(Ok(Some(response(id, part))));
                }
            }
        }
        Ok(MergeReply::Positional(parts)) => fail(
            shared,
            &ids,
            format!(
                "the TC answered {} merged requests with {} results",
                ids.len(),
                parts.len()
            ),
        ),
        Ok(MergeReply::ById(parts)) => {
            let mut rest = ids;
            {
                let mut p = shared.pending();
                for (id, part) in parts {
                    match rest.iter().position(|x| *x == id) {
                        Some(i) => {
                            rest.swap_remove(i);
                            if let Some(tx) = p.remove(&id) {
                                let _ = tx.send(Ok(Some(response(id, part))));
                            }
                        }
                        None => tracing::debug!(
                            outer,
                            id,
                            kind = type_name(i16::from_be_bytes([part[0], part[1]])),
                            "BatchResultMessage answers a request that is not in this batch; ignored"
                        ),
                    }
                }
            }
            // A TC may answer one batch with several BatchResultMessages.
            if !rest.is_empty() {
                shared.merges().insert(outer, rest);
            }
        }
        Err(reason) => fail(
            shared,
            &ids,
            format!("unreadable answer to merged requests: {reason}"),
        ),
    }
    None
}

fn fail(shared: &Shared, ids: &[u32], reason: String) {
    tracing::warn!(%reason, requests = ids.len(), "merged requests failed");
    let reason = CloseReason::new(reason);
    let mut p = shared.pending();
    for id in ids {
        if let Some(tx) = p.remove(id) {
            let _ = tx.send(Err(reason.clone()));
        }
    }
}
