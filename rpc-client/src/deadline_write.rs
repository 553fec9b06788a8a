//! Writing to a socket under a deadline: the one rule both wires (v1 frames, and
//! Seata's gRPC) use to tell a peer that stopped reading from a slow one.

use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::transport::CloseReason;

/// Writes `buf`; fails when the socket accepts no byte for `deadline`.
pub(crate) async fn write_with_deadline<W: AsyncWrite + Unpin>(
    wr: &mut W,
    buf: &[u8],
    deadline: Option<Duration>,
) -> Result<(), CloseReason> {
    let Some(deadline) = deadline else {
        return wr
            .write_all(buf)
            .await
            .map_err(|e| CloseReason::io("write failed", e));
    };
    let mut off = 0;
    while off < buf.len() {
        match tokio::time::timeout(deadline, wr.write(&buf[off..])).await {
            Ok(Ok(0)) => {
                return Err(CloseReason::io(
                    "write failed",
                    std::io::ErrorKind::WriteZero.into(),
                ));
            }
            Ok(Ok(n)) => off += n,
            Ok(Err(e)) => return Err(CloseReason::io("write failed", e)),
            Err(_) => {
                return Err(CloseReason::new(format!(
                    "write stalled: the peer accepted no data for {deadline:?} \
                     (transport.writeTimeout) with {} bytes still to write; it is not reading",
                    buf.len() - off
                )));
            }
        }
    }
    Ok(())
}
