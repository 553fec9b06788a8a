//! One client connection, over either transport: the accept loop (connection limits
//! first), the admission flow (first frame, login queue or resume), the read loop and
//! the writer task, and the refusals said on the way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::admission::Refusal;
use super::commands::command;
use super::core::{GatewayStats, Shared};
use super::forward::{forward, push};
use super::limits::Limited;
use super::outbound::Outbound;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::queue::{self, Turn};
use super::session::{Link, Session};
use super::transport::{self, ClientReader, ClientWriter, Incoming};
use super::wire;

pub(super) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    kind: fn(TcpStream) -> Incoming,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shared.stop.cancelled() => return,
            _ = shared.drain.accepting_stopped() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Before anything is spent on the connection.
                if let Err(limited) = shared.limits.check_connect(peer.ip()) {
                    refuse_over_limit(&shared, kind(stream), peer, limited);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_client(shared.clone(), kind(stream), peer));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// AUTH_FAIL: `code text`.
fn fail_frame(r: Refusal, text: &str) -> ClientFrame {
    ClientFrame::new(
        GATEWAY_MODULE,
        op::AUTH_FAIL,
        0,
        Bytes::from(format!("{} {text}", r.code())),
    )
    .with_flags(protocol::RELIABLE)
}

async fn refuse(wr: ClientWriter, r: Refusal, stats: &GatewayStats) {
    refuse_saying(wr, r, &r.to_string(), stats).await
}

async fn refuse_saying(mut wr: ClientWriter, r: Refusal, text: &str, stats: &GatewayStats) {
    stats.refused.fetch_add(1, Ordering::Relaxed);
    let frame = fail_frame(r, text);
    let _ = tokio::time::timeout(Duration::from_millis(500), wr.write(&[frame])).await;
    wr.close(CloseCode::Policy, text).await;
}

/// A connection over a connection-rate limit: told why (AUTH_FAIL, code 10, naming the
/// limit; over WebSocket after the handshake) while a refusal slot is free, else
/// closed at once. Either way nothing else is set up for it.
fn refuse_over_limit(shared: &Arc<Shared>, conn: Incoming, peer: SocketAddr, limited: Limited) {
    tracing::debug!(%peer, %limited, "connection refused");
    let Some(slot) = shared.limits.refusal_slot() else {
        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let deadline = shared.settings.auth_deadline.min(Duration::from_secs(1));
        if let Ok((mut reader, wr)) = conn
            .open(shared.settings.max_frame, deadline, &shared.settings.id)
            .await
        {
            let text = format!("{}: {limited}", Refusal::RateLimited);
            refuse_saying(wr, Refusal::RateLimited, &text, &shared.stats).await;
            // Read what the client already sent until it closes (bounded): closing a
            // socket with unread data resets it, and the reset can destroy the refusal
            // before the client has read it.
            let _ = tokio::time::timeout(deadline, async {
                while let Some(Ok(_)) = reader.next().await {}
            })
            .await;
        }
        drop(slot);
    });
}

/// Who the first frame proved the client is.
enum Claim {
    /// A verified token: a new session, once the login queue admits it.
    Login(String),
    /// A resumed session.
    Resumed(Arc<Session>),
}

/// Admission: the first frame, within the deadline, must be AUTH or RESUME.
async fn admit(shared: &Arc<Shared>, reader: &mut ClientReader) -> Result<Claim, Refusal> {
    let first = tokio::time::timeout(shared.settings.auth_deadline, reader.next()).await;
    let frame = match first {
        Err(_) => return Err(Refusal::Late),
        Ok(None) | Ok(Some(Err(_))) => return Err(Refusal::Malformed),
        Ok(Some(Ok(f))) => f,
    };
    if frame.module != GATEWAY_MODULE {
        return Err(Refusal::NotAuth);
    }
    let text = std::str::from_utf8(&frame.payload).map_err(|_| Refusal::Malformed)?;
    match frame.opcode {
        op::AUTH => {
            let admitted = shared.verifier.verify(text)?;
            Ok(Claim::Login(admitted.account))
        }
        op::RESUME => {
            let (id, secret) = text.split_once(' ').ok_or(Refusal::Malformed)?;
            // From memory, or from the shared store whichever gateway held it.
            let s = shared.sessions.resume(id, secret).await?;
            tokio::spawn(rebind(shared.clone(), s.clone()));
            Ok(Claim::Resumed(s))
        }
        _ => Err(Refusal::NotAuth),
    }
}

/// Tells every backend a resumed session is bound to that the session is on this
/// gateway now (`cmd=rebind`, see [`wire`]): their pushes and fan-out for it go through
/// this gateway's connection, which carries the command.
async fn rebind(shared: Arc<Shared>, session: Arc<Session>) {
    for (slot, backend) in session.bindings() {
        // Static slots are clusters; dynamic ones `m:<module>`, served by its cluster.
        let cluster = match slot.strip_prefix("m:") {
            Some(m) => match m.parse().ok().and_then(|m| shared.settings.modules.get(&m)) {
                Some(route) => route.cluster.clone(),
                None => continue,
            },
            None => slot.clone(),
        };
        let Some(client) = shared.backends().get(&cluster) else {
            continue;
        };
        let cmd = command("rebind", Bytes::new())
            .with_head(wire::SESSION, session.id.clone())
            .with_head(wire::GATEWAY, shared.settings.id.clone());
        if let Err(e) = client.send_oneway_to(&backend, cmd, None).await {
            tracing::debug!(session = %session.id, %slot, %backend, error = %e, "rebind not sent");
        }
    }
}

/// One client, over either transport: admission, then the read loop here and the
/// write loop in its own task.
async fn serve_client(shared: Arc<Shared>, conn: Incoming, peer: SocketAddr) {
    // Connections still authenticating have their own cap, apart from players.
    let permit = shared.unauthenticated.clone().try_acquire_owned();
    // A WebSocket handshake is part of authenticating: bounded by the auth deadline (the
    // first frame then has its own). A WebSocket client over the cap is refused after
    // its handshake: AUTH_FAIL needs a message to travel in.
    let (mut reader, mut wr) = match conn
        .open(
            shared.settings.max_frame,
            shared.settings.auth_deadline,
            &shared.settings.id,
        )
        .await
    {
        Ok(x) => x,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "client transport not set up");
            return;
        }
    };
    let Ok(permit) = permit else {
        refuse(wr, Refusal::Busy, &shared.stats).await;
        return;
    };
    let claim = match admit(&shared, &mut reader).await {
        Ok(x) => x,
        Err(r) => {
            drop(permit);
            tracing::debug!(%peer, reason = %r, "client refused");
            refuse(wr, r, &shared.stats).await;
            return;
        }
    };
    drop(permit);
    // A new login waits its turn in the login queue; a resume was online already and
    // bypasses it (see `queue`). Held until the connection ends: counted online.
    let (_online, session, resumed) = match claim {
        Claim::Resumed(s) => (shared.queue.bypass(), s, true),
        Claim::Login(account) => {
            match queue::wait_turn(&shared.queue, &mut reader, &mut wr, &shared.stop).await {
                Turn::Admitted(online) => (online, shared.sessions.create(account), false),
                Turn::Full(text) => {
                    tracing::debug!(%peer, %account, "login queue full; refused");
                    refuse_saying(wr, Refusal::Busy, &text, &shared.stats).await;
                    return;
                }
                Turn::Left => {
                    tracing::debug!(%peer, %account, "left the login queue");
                    return;
                }
            }
        }
    };
    shared.stats.admitted.fetch_add(1, Ordering::Relaxed);
    let link = Arc::new(Link {
        outbound: Arc::new(Outbound::new(
            shared.settings.send_queue_soft,
            shared.settings.send_queue_hard,
        )),
        addr: peer,
    });
    if let Some(old) = session.attach(link.clone()) {
        old.outbound.close("session resumed on another connection");
    }
    let ok = format!("{} {} {}", session.id, session.secret(), shared.settings.id);
    link.outbound.push(
        ClientFrame::new(
            GATEWAY_MODULE,
            op::AUTH_OK,
            u32::from(resumed),
            Bytes::from(ok),
        )
        .with_flags(protocol::RELIABLE),
    );
    tracing::debug!(%peer, session = %session.id, account = %session.account, resumed, "client admitted");
    let writer = tokio::spawn(write_client(link.outbound.clone(), wr));
    // Bounded per-client concurrency: at the cap we stop reading, and TCP pushes back.
    // The forwards are driven here, in the connection's task (no task spawned per
    // message); the ones still running when the connection ends finish in a task of
    // their own, as they would have.
    let mut in_flight = FuturesUnordered::new();
    let ctx = Arc::new(Forwarding {
        shared: shared.clone(),
        session: session.clone(),
        link: link.clone(),
    });
    // The WebSocket close code, if the connection is still open at the end.
    let mut close = CloseCode::Normal;
    // Created once: the reader stops when the writer's queue closes (overflow, kick,
    // resume elsewhere).
    let queue_closed = link.outbound.closed();
    tokio::pin!(queue_closed);
    // Refused messages of this connection (`limits.kick-after`).
    let mut abuse = shared.limits.abuse_meter();
    loop {
        let next = tokio::select! {
            n = reader.next(), if in_flight.len() < MAX_IN_FLIGHT => n,
            Some(()) = in_flight.next(), if !in_flight.is_empty() => continue,
            _ = shared.stop.cancelled() => {
                close = CloseCode::Away;
                break;
            }
            _ = &mut queue_closed => break,
        };
        let frame = match next {
            None => break,
            Some(Err(e)) => {
                tracing::debug!(%peer, error = %e, "bad client frame; closing");
                close = transport::close_code(&e);
                link.outbound.close(format!("protocol error: {e}"));
                break;
            }
            Some(Ok(f)) => f,
        };
        if frame.module == GATEWAY_MODULE {
            if frame.opcode == op::PING {
                link.outbound.push(
                    ClientFrame::new(GATEWAY_MODULE, op::PING, frame.seq, Bytes::new())
                        .with_flags(protocol::REPLY),
                );
            }
            continue;
        }
        if let Err(limited) =
            shared
                .limits
                .check_message(&session.account, frame.module, frame.opcode)
        {
            push(
                &shared,
                &link.outbound,
                ClientFrame::new(
                    frame.module,
                    frame.opcode,
                    frame.seq,
                    Bytes::from(format!("rate limited: {limited}")),
                )
                .with_flags(protocol::REPLY | protocol::RELIABLE | protocol::ERROR),
            );
            if abuse.refused() {
                tracing::info!(%peer, account = %session.account, %limited, "disconnected: over its rate limits");
                kick_after_flush(&link.outbound, "rate limited: sustained abuse").await;
                close = CloseCode::Policy;
                break;
            }
            continue;
        }
        // Drawn here, in the client's order: held messages are replayed in it.
        let ticket = shared.protect.ticket();
        in_flight.push(forward_in(ctx.clone(), frame, ticket));
    }
    session.detach(&link);
    link.outbound.close("client disconnected");
    if !in_flight.is_empty() {
        tokio::spawn(async move { while in_flight.next().await.is_some() {} });
    }
    if let Ok(wr) = writer.await {
        let reason = link.outbound.closed_reason().unwrap_or_default();
        wr.close(close, &reason).await;
    }
}

/// Requests forwarded at once per connection: at the cap the connection is not read.
const MAX_IN_FLIGHT: usize = 32;

/// What a connection's forwards share (one reference count per message, on the
/// connection's own allocation).
struct Forwarding {
    shared: Arc<Shared>,
    session: Arc<Session>,
    link: Arc<Link>,
}

async fn forward_in(ctx: Arc<Forwarding>, frame: ClientFrame, ticket: u64) {
    forward(&ctx.shared, &ctx.session, &ctx.link, frame, ticket).await;
}

/// Sends KICK with `reason` and closes the queue once what is queued before it has been
/// taken by the writer (within 250 ms): a closed queue is not written any more.
async fn kick_after_flush(outbound: &Outbound, reason: &str) {
    outbound.push(
        ClientFrame::new(GATEWAY_MODULE, op::KICK, 0, Bytes::from(reason.to_string()))
            .with_flags(protocol::RELIABLE),
    );
    let _ = tokio::time::timeout(Duration::from_millis(250), async {
        while outbound.queued_bytes() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    outbound.close(reason);
}

/// Writes the queue to the client until it is closed; hands the writer back so the
/// connection can be closed with the reason.
async fn write_client(outbound: Arc<Outbound>, mut wr: ClientWriter) -> ClientWriter {
    while let Ok(batch) = outbound.next_batch(64 * 1024).await {
        match tokio::time::timeout(Duration::from_secs(10), wr.write(&batch)).await {
            Ok(Ok(())) => {}
            _ => {
                outbound.close("client write failed or stalled");
                break;
            }
        }
    }
    wr
}
