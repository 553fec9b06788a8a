//! One server checked once, step by step, on the client's own code: TCP connect, a
//! Seata heartbeat exchange (PING/PONG), and the handshake the client would run
//! (RegisterTM), over the wire the client speaks (`transport.protocol`: v1, or Seata's
//! gRPC). What `meshline doctor` reports for each TC, with round-trip times.
//!
//! Each step runs only when the one before it succeeded, and each has its own deadline,
//! so a server that accepts and then says nothing is reported as such ("no PONG within
//! 3 s") rather than as a generic timeout.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::codec::{CODEC_SEATA, Frame, FrameCodec, MessageType};
use crate::connection::{ConnConfig, Connection};
use crate::handshake::Handshake;
use crate::transport::TransportOptions;

/// What one step of a probe found: its round-trip time, or why it failed.
pub type StepResult = Result<Duration, String>;

/// The outcome of [`probe`] for one server.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// TCP connect time, or the connect error.
    pub connect: StepResult,
    /// PING -> PONG round trip; `None` when the connect failed.
    pub ping: Option<StepResult>,
    /// The handshake's round trip, or the server's refusal in the handshake's words;
    /// `None` when no handshake was asked for or an earlier step failed.
    pub handshake: Option<StepResult>,
}

impl ProbeReport {
    /// True when every step that ran succeeded and the handshake (if asked) ran.
    pub fn accepted(&self) -> bool {
        self.connect.is_ok()
            && matches!(self.ping, Some(Ok(_)))
            && !matches!(self.handshake, Some(Err(_)))
    }
}

/// Checks the server at `host:port`: connect (within `step_timeout`), a heartbeat PING
/// answered by a PONG with the same id (within `step_timeout`), then `handshake` on a
/// connection made exactly as the client makes them (within the handshake's own
/// timeout when it has one, else `step_timeout`). The connection is closed at the end.
pub async fn probe(
    host: &str,
    port: u16,
    transport: &TransportOptions,
    handshake: Option<&dyn Handshake>,
    step_timeout: Duration,
) -> ProbeReport {
    let started = Instant::now();
    let stream = match tokio::time::timeout(step_timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return failed_connect(format!("connect failed: {e}")),
        Err(_) => return failed_connect(format!("connect timed out after {step_timeout:?}")),
    };
    let connect = Ok(started.elapsed());
    if transport.protocol == crate::Protocol::Grpc {
        return probe_grpc(stream, connect, transport, handshake, step_timeout).await;
    }
    let (stream, ping) = ping_once(stream, transport, step_timeout).await;
    let Some(stream) = stream.filter(|_| ping.is_ok()) else {
        return ProbeReport {
            connect,
            ping: Some(ping),
            handshake: None,
        };
    };
    let handshake = match handshake {
        None => None,
        Some(h) => Some(run_handshake(stream, transport, h, step_timeout).await),
    };
    ProbeReport {
        connect,
        ping: Some(ping),
        handshake,
    }
}

fn failed_connect(reason: String) -> ProbeReport {
    ProbeReport {
        connect: Err(reason),
        ping: None,
        handshake: None,
    }
}

/// Sends one PING and waits for its PONG, on a plain framed stream; returns the stream
/// for the next step when nothing else was read with the PONG.
async fn ping_once(
    stream: TcpStream,
    transport: &TransportOptions,
    within: Duration,
) -> (Option<TcpStream>, StepResult) {
    const ID: u32 = 1;
    let codec = FrameCodec::new(transport.normalized().max_frame_len);
    let mut framed = Framed::new(stream, codec);
    let sent = Instant::now();
    if let Err(e) = framed.send(Frame::ping(ID)).await {
        return (None, Err(format!("sending PING failed: {e}")));
    }
    let answer = tokio::time::timeout(within, async {
        loop {
            match framed.next().await {
                None => return Err("the server closed the connection after the PING".to_string()),
                Some(Err(e)) => return Err(format!("not a Seata frame: {e}")),
                Some(Ok(f))
                    if f.msg_type == MessageType::HeartbeatResponse && f.request_id == ID =>
                {
                    return Ok(sent.elapsed());
                }
                // A server may send its own PING first; anything else is unexpected.
                Some(Ok(f)) if f.msg_type == MessageType::HeartbeatRequest => continue,
                Some(Ok(f)) => {
                    return Err(format!(
                        "expected a PONG, got message type {:?} (id {})",
                        f.msg_type, f.request_id
                    ));
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err(format!("no PONG within {within:?}")));
    let parts = framed.into_parts();
    if answer.is_ok() && parts.read_buf.is_empty() {
        (Some(parts.io), answer)
    } else {
        (None, answer)
    }
}

/// The steps over Seata's gRPC: one connection as the client makes it (the HTTP/2
/// preface and stream first: a v1 PING would make the TC read the connection as v1),
/// its PING as a `GrpcMessageProto` of type 3, then the handshake on the same stream.
async fn probe_grpc(
    stream: TcpStream,
    connect: StepResult,
    transport: &TransportOptions,
    handshake: Option<&dyn Handshake>,
    step_timeout: Duration,
) -> ProbeReport {
    let (conn, task) = match start(stream, transport) {
        Ok(c) => c,
        Err(e) => {
            return ProbeReport {
                connect,
                ping: Some(Err(e)),
                handshake: None,
            };
        }
    };
    let ping = conn.ping(step_timeout).await.map_err(|e| match e {
        crate::RpcError::Timeout { .. } => format!("no PONG within {step_timeout:?} (gRPC)"),
        e => format!("no PONG over gRPC: {e}"),
    });
    let handshake = match (handshake, &ping) {
        (Some(h), Ok(_)) => Some(handshake_on(&conn, h, step_timeout).await),
        _ => None,
    };
    conn.close_with("probe done");
    let _ = task.await;
    ProbeReport {
        connect,
        ping: Some(ping),
        handshake,
    }
}

/// A connection on `stream` made as the client makes them, without heartbeats.
fn start(
    stream: TcpStream,
    transport: &TransportOptions,
) -> Result<(Connection, tokio::task::JoinHandle<crate::CloseReason>), String> {
    let config = ConnConfig {
        transport: transport.clone(),
        write_idle: None,
        read_idle: None,
        probe: None,
        heartbeat_codec: CODEC_SEATA,
        on_close: None,
    };
    Connection::start(stream, config, "probe".to_string(), None)
        .map_err(|e| format!("socket setup failed: {e}"))
}

/// Runs `handshake` on `conn` within its own timeout (at most `step_timeout`, at least
/// 1 s) and reports its round trip.
async fn handshake_on(
    conn: &Connection,
    handshake: &dyn Handshake,
    step_timeout: Duration,
) -> StepResult {
    let within = handshake
        .timeout()
        .map(|t| t.min(step_timeout.max(Duration::from_secs(1))))
        .unwrap_or(step_timeout);
    let started = Instant::now();
    tokio::time::timeout(within, handshake.handshake(conn))
        .await
        .unwrap_or_else(|_| Err(format!("no answer to the handshake within {within:?}")))
        .map(|()| started.elapsed())
}

async fn run_handshake(
    stream: TcpStream,
    transport: &TransportOptions,
    handshake: &dyn Handshake,
    step_timeout: Duration,
) -> StepResult {
    let (conn, task) = start(stream, transport)?;
    let result = handshake_on(&conn, handshake, step_timeout).await;
    conn.close_with("probe done");
    let _ = task.await;
    result
}

#[cfg(test)]
mod tests;
