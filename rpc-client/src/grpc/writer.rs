//! The writing half: v1 [`Frame`]s in, one DATA frame per message out, never past the
//! peer's flow-control windows.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncWrite;

use super::frame::{self, Head};
use super::headers;
use super::message::to_message;
use super::{GrpcError, Link};
use crate::codec::Frame;
use crate::transport::CloseReason;

/// Appends `f` to `buf` as one DATA frame on our stream (a server's first one preceded
/// by its HEADERS, as Seata's `GrpcEncoder` writes them).
///
/// A message the peer's frame size cannot hold in one DATA frame is refused: Seata's
/// Java decoder would misread it split. `limit` bounds a compressed body rewritten on
/// the way.
pub(crate) fn put(
    link: &Link,
    f: &Frame,
    buf: &mut BytesMut,
    limit: usize,
) -> Result<(), GrpcError> {
    let Some(stream) = link.stream() else {
        return Err(GrpcError::Message(
            "nothing to write on: the peer has not opened its stream".into(),
        ));
    };
    let msg = to_message(f, limit)?;
    let len = prost::Message::encoded_len(&msg);
    let max = link.peer_max_frame();
    if len + 5 > max {
        return Err(GrpcError::TooLarge {
            len: len + 5,
            max,
            why: "the peer's HTTP/2 frame size; Seata reads one message per DATA frame",
        });
    }
    if let Some(s) = link.take_first_headers() {
        frame::headers(buf, s, &headers::java_open(), max);
    }
    buf.reserve(frame::HEADER_LEN + 5 + len);
    Head {
        len: 5 + len,
        kind: frame::DATA,
        flags: 0,
        stream,
    }
    .put(buf);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    prost::Message::encode(&msg, buf).expect("reserved above");
    Ok(())
}

/// Writes the control frames waiting on `link`, then `frames` (whole HTTP/2 frames) as
/// the peer's windows allow, waiting for WINDOW_UPDATEs in between. Fails when the
/// socket takes no byte, or the peer grants no window, for `deadline`.
pub(crate) async fn write<W: AsyncWrite + Unpin>(
    link: &Link,
    wr: &mut W,
    frames: &[u8],
    deadline: Option<Duration>,
) -> Result<(), CloseReason> {
    let mut off = 0;
    loop {
        let control = link.take_control();
        if !control.is_empty() {
            crate::deadline_write::write_with_deadline(wr, &control, deadline).await?;
        }
        if off == frames.len() {
            return Ok(());
        }
        let n = link.reserve(&frames[off..]);
        if n > 0 {
            crate::deadline_write::write_with_deadline(wr, &frames[off..off + n], deadline).await?;
            off += n;
            continue;
        }
        // A window update that lands before this wait leaves a permit on `changed`,
        // so none is missed.
        let changed = link.changed.notified();
        if link.has_control() {
            continue;
        }
        let waited = match deadline {
            Some(d) => tokio::time::timeout(d, changed).await.is_ok(),
            None => {
                changed.await;
                true
            }
        };
        if !waited {
            return Err(CloseReason::new(format!(
                "write stalled: the peer granted no HTTP/2 flow-control window for {:?} \
                 (transport.writeTimeout) with {} bytes still to write; it is not reading",
                deadline.unwrap_or_default(),
                frames.len() - off
            )));
        }
    }
}
