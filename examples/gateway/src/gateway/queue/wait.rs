//! A verified login waiting its turn: the QUEUE frames (position and ETA), PINGs
//! answered, the client watched for leaving.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{Entry, LoginQueue, Online};
use crate::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use crate::gateway::transport::{ClientReader, ClientWriter};

/// Position updates at most this often.
const UPDATE_EVERY: Duration = Duration::from_secs(1);
/// A QUEUE frame at least this often, changed or not.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// A QUEUE frame that cannot be written within this drops the client from the queue.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// How a login's wait ended.
pub(crate) enum Turn {
    /// Its turn: it is online.
    Admitted(Online),
    /// Refused: the queue is full (the text says so).
    Full(String),
    /// The client left (or the gateway is stopping, or it could not be written to).
    Left,
}

/// The QUEUE frame for `position`.
pub(crate) fn queue_frame(position: usize, eta: Option<Duration>) -> ClientFrame {
    let eta_ms = eta.map_or(0, |d| d.as_millis().max(1) as u64);
    ClientFrame::new(
        GATEWAY_MODULE,
        op::QUEUE,
        0,
        Bytes::from(format!("{position} {eta_ms}")),
    )
    .with_flags(protocol::RELIABLE)
}

async fn send(wr: &mut ClientWriter, frame: ClientFrame) -> bool {
    matches!(
        tokio::time::timeout(WRITE_DEADLINE, wr.write(&[frame])).await,
        Ok(Ok(()))
    )
}

/// A verified login waits its turn (see the module docs), telling the client where it
/// stands and watching whether it leaves.
pub(crate) async fn wait_turn(
    queue: &Arc<LoginQueue>,
    reader: &mut ClientReader,
    wr: &mut ClientWriter,
    stop: &CancellationToken,
) -> Turn {
    let mut ticket = match queue.enter() {
        Entry::Admitted(online) => return Turn::Admitted(online),
        Entry::Full(n) => {
            return Turn::Full(format!("login queue full ({n} waiting): try again later"));
        }
        Entry::Waiting(t) => t,
    };
    let mut shown = ticket.position;
    if !send(wr, queue_frame(shown, queue.eta(shown))).await {
        return Turn::Left;
    }
    let mut last = Instant::now();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + UPDATE_EVERY, UPDATE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            granted = &mut ticket.granted => return match granted {
                Ok(online) => Turn::Admitted(online),
                Err(_) => Turn::Left,
            },
            next = reader.next() => match next {
                Some(Ok(f)) if f.module == GATEWAY_MODULE && f.opcode == op::PING => {
                    let pong = ClientFrame::new(GATEWAY_MODULE, op::PING, f.seq, Bytes::new())
                        .with_flags(protocol::REPLY);
                    if !send(wr, pong).await {
                        return Turn::Left;
                    }
                }
                // Requests wait for AUTH_OK: ignored while queued.
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return Turn::Left,
            },
            _ = tick.tick() => {
                let Some(position) = queue.position(&ticket) else {
                    continue; // admitted: the grant is on its way
                };
                if (position != shown && last.elapsed() >= UPDATE_EVERY) || last.elapsed() >= KEEPALIVE {
                    if !send(wr, queue_frame(position, queue.eta(position))).await {
                        return Turn::Left;
                    }
                    shown = position;
                    last = Instant::now();
                }
            }
            _ = stop.cancelled() => return Turn::Left,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_frames() {
        let f = queue_frame(8420, Some(Duration::from_secs(62)));
        assert_eq!((f.module, f.opcode), (GATEWAY_MODULE, op::QUEUE));
        assert_eq!(&f.payload[..], b"8420 62000");
        assert_eq!(&queue_frame(3, None).payload[..], b"3 0");
    }
}
