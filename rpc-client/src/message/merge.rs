//! Batching envelopes: MergedWarpMessage (59), MergeResultMessage (60) and
//! BatchResultMessage (121), `docs/seata-messages.md` §7.
//!
//! All three are `[i32 length][i16 count][entries][msgIds]`: each entry is a whole
//! message body (`[i16 type code][fields]`) with no length of its own, so an entry can
//! only be skipped by decoding it. A client sends requests merged (one-way, with a new
//! frame id, each request's own id in `msgIds`); the TC answers with one
//! MergeResultMessage whose results match the requests by position, or (Seata 1.5+,
//! `transport.enableTcServerBatchSendResponse` on the TC) with one or more
//! BatchResultMessages whose results carry the request ids.
//!
//! Only transaction requests travel in a MergedWarpMessage and only their responses
//! in the answers; anything else nested (a registration, another envelope) is refused.

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::{Reader, Writer};
use super::{MessageError, SeataMessage, type_code};

/// Most entries one envelope carries (its count is an `i16`).
pub const MAX_ENTRIES: usize = i16::MAX as usize;

/// `MergedWarpMessage` (59): several requests in one frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergedWarpMessage {
    /// The requests.
    pub msgs: Vec<SeataMessage>,
    /// Each request's own frame id, in the same order (since Seata 1.5.0; empty from
    /// older clients).
    pub msg_ids: Vec<i32>,
}

/// `MergeResultMessage` (60): the results of a MergedWarpMessage, by position.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeResultMessage {
    /// `msgs[i]` answers the i-th request of the batch.
    pub msgs: Vec<SeataMessage>,
}

/// `BatchResultMessage` (121): some results of a MergedWarpMessage, by request id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchResultMessage {
    /// The results.
    pub results: Vec<SeataMessage>,
    /// `msg_ids[i]` is the request id `results[i]` answers.
    pub msg_ids: Vec<i32>,
}

/// Requests that may travel in a MergedWarpMessage: what Seata's clients send through
/// their balanced sync path.
pub fn is_mergeable_request(code: i16) -> bool {
    matches!(
        code,
        type_code::GLOBAL_BEGIN
            | type_code::GLOBAL_COMMIT
            | type_code::GLOBAL_ROLLBACK
            | type_code::BRANCH_REGISTER
            | type_code::BRANCH_STATUS_REPORT
            | type_code::GLOBAL_STATUS
            | type_code::GLOBAL_REPORT
            | type_code::GLOBAL_LOCK_QUERY
    )
}

/// Responses to those requests: what a MergeResultMessage or BatchResultMessage holds.
fn is_mergeable_result(code: i16) -> bool {
    matches!(
        code,
        type_code::GLOBAL_BEGIN_RESULT
            | type_code::GLOBAL_COMMIT_RESULT
            | type_code::GLOBAL_ROLLBACK_RESULT
            | type_code::BRANCH_REGISTER_RESULT
            | type_code::BRANCH_STATUS_REPORT_RESULT
            | type_code::GLOBAL_STATUS_RESULT
            | type_code::GLOBAL_REPORT_RESULT
            | type_code::GLOBAL_LOCK_QUERY_RESULT
    )
}

/// Writes `[i32 length][i16 count]`, the entries, then the ids: when given, one for
/// each entry.
fn encode_envelope(
    w: &mut Writer<'_>,
    outer: i16,
    msgs: &[SeataMessage],
    ids: Option<&[i32]>,
    nested_ok: fn(i16) -> bool,
) -> Result<(), MessageError> {
    if let Some(ids) = ids
        && ids.len() != msgs.len()
    {
        return Err(MessageError::IdsMismatch {
            type_code: outer,
            entries: msgs.len(),
            ids: ids.len(),
        });
    }
    if msgs.len() > MAX_ENTRIES {
        return Err(MessageError::TooManyEntries {
            type_code: outer,
            count: msgs.len(),
        });
    }
    let mut inner = BytesMut::new();
    inner.put_i16(msgs.len() as i16);
    for m in msgs {
        if !nested_ok(m.type_code()) {
            return Err(MessageError::NotNestable {
                type_code: outer,
                nested: m.type_code(),
            });
        }
        m.encode_into(&mut inner)?;
    }
    for id in ids.unwrap_or(&[]) {
        inner.put_i32(*id);
    }
    if inner.len() > i32::MAX as usize {
        return Err(MessageError::FieldTooLong {
            field: "length",
            len: inner.len(),
            max: i32::MAX as usize,
        });
    }
    w.i32(inner.len() as i32);
    w.buf.put_slice(&inner);
    Ok(())
}

/// What an envelope holds: each entry's bytes and, when present, the ids.
struct Envelope<'a> {
    entries: Vec<(i16, &'a [u8])>,
    ids: Vec<i32>,
}

/// Reads an envelope from `r` (which must end with it). `ids`: `None` = no ids follow
/// the entries; `Some(true)` = `count` ids must follow; `Some(false)` = they may.
fn decode_envelope<'a>(
    r: &mut Reader<'a>,
    ids: Option<bool>,
    nested_ok: fn(i16) -> bool,
) -> Result<Envelope<'a>, MessageError> {
    let outer = r.type_code;
    let len = r.i32("length")?;
    if len < 2 {
        return Err(MessageError::BadLength {
            type_code: outer,
            field: "length",
            len: len.into(),
        });
    }
    let len = len as usize;
    if len > r.remaining() {
        return Err(r.truncated("length"));
    }
    let (body, rest) = r.buf.split_at(len);
    r.buf = rest;
    let mut inner = Reader::new(body, outer);
    let count = inner.i16("count")?;
    if count < 0 {
        return Err(MessageError::BadLength {
            type_code: outer,
            field: "count",
            len: count.into(),
        });
    }
    let mut entries = Vec::with_capacity((count as usize).min(inner.remaining() / 2));
    for _ in 0..count {
        let start = inner.buf;
        let code = inner.i16("entry typeCode")?;
        if !nested_ok(code) {
            return Err(if SeataMessage::is_known_type(code) {
                MessageError::NotNestable {
                    type_code: outer,
                    nested: code,
                }
            } else {
                MessageError::UnknownType(code)
            });
        }
        let mut entry = Reader::new(inner.buf, code);
        SeataMessage::skip_fields(code, &mut entry)?;
        let used = start.len() - entry.buf.len();
        inner.buf = entry.buf;
        entries.push((code, &start[..used]));
    }
    let mut out_ids = Vec::new();
    let want_ids = match ids {
        None => false,
        Some(true) => true,
        Some(false) => inner.remaining() > 0,
    };
    if want_ids {
        out_ids.reserve(entries.len());
        for _ in 0..entries.len() {
            out_ids.push(inner.i32("msgIds")?);
        }
    }
    inner.finish()?;
    Ok(Envelope {
        entries,
        ids: out_ids,
    })
}

fn decode_all(entries: &[(i16, &[u8])]) -> Result<Vec<SeataMessage>, MessageError> {
    entries
        .iter()
        .map(|(_, bytes)| SeataMessage::decode_slice(bytes))
        .collect()
}

impl MergedWarpMessage {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        // No ids at all is a merge without them (nothing written after the entries).
        let ids = (!self.msg_ids.is_empty()).then_some(&self.msg_ids[..]);
        encode_envelope(
            w,
            type_code::SEATA_MERGE,
            &self.msgs,
            ids,
            is_mergeable_request,
        )
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let env = decode_envelope(r, Some(false), is_mergeable_request)?;
        Ok(MergedWarpMessage {
            msgs: decode_all(&env.entries)?,
            msg_ids: env.ids,
        })
    }
}

impl MergeResultMessage {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        encode_envelope(
            w,
            type_code::SEATA_MERGE_RESULT,
            &self.msgs,
            None,
            is_mergeable_result,
        )
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let env = decode_envelope(r, None, is_mergeable_result)?;
        Ok(MergeResultMessage {
            msgs: decode_all(&env.entries)?,
        })
    }
}

impl BatchResultMessage {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        encode_envelope(
            w,
            type_code::BATCH_RESULT,
            &self.results,
            Some(&self.msg_ids),
            is_mergeable_result,
        )
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let env = decode_envelope(r, Some(true), is_mergeable_result)?;
        Ok(BatchResultMessage {
            results: decode_all(&env.entries)?,
            msg_ids: env.ids,
        })
    }
}

/// The answer to a MergedWarpMessage, split into one body per result without copying
/// (each a slice of the answer, decodable on its own), for the connection to hand each
/// caller its own response.
#[derive(Debug)]
pub(crate) enum MergeReply {
    /// A MergeResultMessage: the i-th body answers the i-th merged request.
    Positional(Vec<Bytes>),
    /// A BatchResultMessage: `(request id, body)`.
    ById(Vec<(u32, Bytes)>),
}

/// Splits an (uncompressed) MergeResultMessage or BatchResultMessage body. Every entry
/// is decoded once to find where it ends, so a malformed one is an error here.
pub(crate) fn split_reply(body: &Bytes) -> Result<MergeReply, MessageError> {
    let mut r = Reader::new(body, 0);
    let code = r.i16("typeCode")?;
    r.type_code = code;
    let (env, positional) = match code {
        type_code::SEATA_MERGE_RESULT => {
            (decode_envelope(&mut r, None, is_mergeable_result)?, true)
        }
        type_code::BATCH_RESULT => (
            decode_envelope(&mut r, Some(true), is_mergeable_result)?,
            false,
        ),
        other => {
            return Err(MessageError::UnexpectedType {
                expected: "MergeResultMessage (60) or BatchResultMessage (121)",
                got: other,
            });
        }
    };
    r.finish()?;
    let slice = |entry: &[u8]| body.slice_ref(entry);
    Ok(if positional {
        MergeReply::Positional(env.entries.iter().map(|(_, e)| slice(e)).collect())
    } else {
        MergeReply::ById(
            env.ids
                .iter()
                .zip(&env.entries)
                .map(|(id, (_, e))| (*id as u32, slice(e)))
                .collect(),
        )
    })
}

/// A MergedWarpMessage body made of already encoded request bodies (each
/// `[i16 type code][fields]`, uncompressed), with their frame ids: what a connection's
/// writer sends when it merges queued requests. `bodies` must hold at most
/// [`MAX_ENTRIES`] entries.
pub(crate) fn merged_body<'a>(
    bodies: impl ExactSizeIterator<Item = (&'a Bytes, u32)> + Clone,
) -> BytesMut {
    let n = bodies.len();
    let entries: usize = bodies.clone().map(|(b, _)| b.len()).sum();
    let inner = 2 + entries + 4 * n;
    let mut out = BytesMut::with_capacity(2 + 4 + inner);
    out.put_i16(type_code::SEATA_MERGE);
    out.put_i32(inner as i32);
    out.put_i16(n as i16);
    for (b, _) in bodies.clone() {
        out.put_slice(b);
    }
    for (_, id) in bodies {
        out.put_i32(id as i32);
    }
    out
}
