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
use super::backend_news;
use super::core::{GatewayStats, Shared};
use super::forward::{forward, push};
use super::kick::Kick;
use super::limits::{AbuseMeter, Limited};
use super::outbound::Outbound;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, ProtocolError, op};
use super::queue::{self, Online, Turn};
use super::session::{DuplicateLogin, Link, Login, Session};
use super::transport::{self, ClientReader, ClientWriter, Incoming};

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
                if let Err(e) = transport::keep_alive(&stream, shared.settings.client_keepalive) {
                    tracing::debug!(%peer, error = %e, "client keep-alive not set");
                }
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
    stats.count_refusal(r);
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
        shared.stats.count_refusal(Refusal::RateLimited);
        return;
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let deadline = shared.settings.auth_deadline.min(Duration::from_secs(1));
        if let Ok((mut reader, wr)) = conn
            .open(
                shared.settings.max_frame,
                shared.settings.auth_max_frame,
                deadline,
                &shared.settings.id,
            )
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
    /// A resumed session, and the last push number the client says it received.
    Resumed(Arc<Session>, u32),
}

/// The refusal for a first frame that is not one: too large, or not a frame at all
/// (never a token error: no token was read).
fn refusal_of(e: &ProtocolError) -> Refusal {
    match e {
        ProtocolError::TooLong { .. } => Refusal::TooLarge,
        _ => Refusal::BadFrame,
    }
}

/// `session_id resume_secret [last_push_seq]`.
fn resume_request(text: &str) -> Option<(&str, &str, u32)> {
    let mut parts = text.split(' ');
    let (id, secret) = (parts.next()?, parts.next()?);
    let last = match parts.next() {
        None | Some("") => 0,
        Some(n) => n.parse().ok()?,
    };
    parts.next().is_none().then_some((id, secret, last))
}

/// Admission: the first frame, within the deadline, must be AUTH or RESUME. `Ok(None)`:
/// the connection closed before sending anything (nobody to refuse).
async fn admit(shared: &Arc<Shared>, reader: &mut ClientReader) -> Result<Option<Claim>, Refusal> {
    let first = tokio::time::timeout(shared.settings.auth_deadline, reader.next()).await;
    let frame = match first {
        Err(_) => return Err(Refusal::Late),
        Ok(None) => return Ok(None),
        Ok(Some(Err(e))) => return Err(refusal_of(&e)),
        Ok(Some(Ok(f))) => f,
    };
    if frame.module != GATEWAY_MODULE {
        return Err(Refusal::NotAuth);
    }
    match frame.opcode {
        op::AUTH => {
            let text = std::str::from_utf8(&frame.payload).map_err(|_| Refusal::Malformed)?;
            let admitted = shared.verifier.verify(text)?;
            if shared.settings.duplicate_login == DuplicateLogin::RefuseNew
                && shared.sessions.of_account(&admitted.account).is_some()
            {
                return Err(Refusal::AlreadyOnline);
            }
            Ok(Some(Claim::Login(admitted.account)))
        }
        op::RESUME => {
            let text = std::str::from_utf8(&frame.payload).map_err(|_| Refusal::BadResume)?;
            let (id, secret, last) = resume_request(text).ok_or(Refusal::BadResume)?;
            // From memory, or from the shared store whichever gateway held it.
            let s = shared.sessions.resume(id, secret).await?;
            tokio::spawn(backend_news::rebind(shared.clone(), s.clone()));
            Ok(Some(Claim::Resumed(s, last)))
        }
        _ => Err(Refusal::NotAuth),
    }
}

/// One client, over either transport: admission, then the read loop here and the
/// write loop in its own task.
async fn serve_client(shared: Arc<Shared>, conn: Incoming, peer: SocketAddr) {
    // Connections still authenticating have their own cap, apart from players.
    let permit = shared.unauthenticated.clone().try_acquire_owned();
    let Some((mut reader, wr)) = open_transport(&shared, conn, peer).await else {
        return;
    };
    let Ok(permit) = permit else {
        refuse(wr, Refusal::Busy, &shared.stats).await;
        return;
    };
    let claim = match admit(&shared, &mut reader).await {
        Ok(Some(x)) => x,
        Ok(None) => {
            shared
                .stats
                .closed_before_frame
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "connection closed before its first frame");
            return;
        }
        Err(r) => {
            drop(permit);
            tracing::debug!(%peer, reason = %r, "client refused");
            refuse(wr, r, &shared.stats).await;
            return;
        }
    };
    drop(permit);
    let Some((admitted, wr)) = enter(&shared, claim, &mut reader, wr, peer).await else {
        return;
    };
    // `_online` is held until the connection ends: counted online.
    let Admitted {
        _online,
        session,
        resumed_after,
    } = admitted;
    shared.stats.admitted.fetch_add(1, Ordering::Relaxed);
    let link = attach(&shared, &session, resumed_after, peer);
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
                close = bad_frame(&link, peer, e);
                break;
            }
            Some(Ok(f)) => f,
        };
        match screen(&ctx, &frame, &mut abuse, peer) {
            Screened::Forward => {}
            Screened::Skip => continue,
            Screened::Close(code) => {
                close = code;
                break;
            }
        }
        // Drawn here, in the client's order: held messages are replayed in it.
        let ticket = shared.protect.ticket();
        in_flight.push(forward_in(ctx.clone(), frame, ticket));
    }
    // A kick chooses the WebSocket close code where the loop did not.
    close = match link.outbound.kicked() {
        Some(Kick::Drain | Kick::Shutdown) => CloseCode::Away,
        Some(Kick::Abuse | Kick::SlowClient) => CloseCode::Policy,
        _ => close,
    };
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

/// Sets up the client's transport (a WebSocket handshake included); `None` when it
/// could not be, the failure counted when it was too slow.
async fn open_transport(
    shared: &Shared,
    conn: Incoming,
    peer: SocketAddr,
) -> Option<(ClientReader, ClientWriter)> {
    // A WebSocket handshake is part of authenticating: bounded by the auth deadline (the
    // first frame then has its own). A WebSocket client over the cap is refused after
    // its handshake: AUTH_FAIL needs a message to travel in.
    match conn
        .open(
            shared.settings.max_frame,
            shared.settings.auth_max_frame,
            shared.settings.auth_deadline,
            &shared.settings.id,
        )
        .await
    {
        Ok(x) => Some(x),
        Err(e) => {
            if e.kind() == std::io::ErrorKind::TimedOut {
                shared
                    .stats
                    .handshake_timeouts
                    .fetch_add(1, Ordering::Relaxed);
            }
            tracing::debug!(%peer, error = %e, "client transport not set up");
            None
        }
    }
}

/// An admitted client's session, and its place among those online.
struct Admitted {
    /// Counts the client online until dropped, when the connection ends.
    _online: Online,
    session: Arc<Session>,
    /// For a resume: the last push number the client says it received.
    resumed_after: Option<u32>,
}

/// From a claim to a session: a new login waits its turn in the login queue and logs
/// in (kicking a session it replaces); a resume was online already and bypasses it
/// (see `queue`). `None` when the client was refused or left; the writer comes back
/// otherwise.
async fn enter(
    shared: &Shared,
    claim: Claim,
    reader: &mut ClientReader,
    mut wr: ClientWriter,
    peer: SocketAddr,
) -> Option<(Admitted, ClientWriter)> {
    let account = match claim {
        Claim::Resumed(session, last) => {
            let admitted = Admitted {
                _online: shared.queue.bypass(),
                session,
                resumed_after: Some(last),
            };
            return Some((admitted, wr));
        }
        Claim::Login(account) => account,
    };
    let online = match queue::wait_turn(&shared.queue, reader, &mut wr, &shared.stop).await {
        Turn::Admitted(online) => online,
        Turn::Full(text) => {
            tracing::debug!(%peer, %account, "login queue full; refused");
            refuse_saying(wr, Refusal::Busy, &text, &shared.stats).await;
            return None;
        }
        Turn::Left => {
            tracing::debug!(%peer, %account, "left the login queue");
            return None;
        }
    };
    match shared
        .sessions
        .login(account, shared.settings.duplicate_login)
    {
        Ok(Login { session, replaced }) => {
            if let Some(l) = replaced.and_then(|old| old.link()) {
                l.outbound.kick(
                    Kick::DuplicateLogin,
                    "the account logged in again; this session has ended",
                );
            }
            let admitted = Admitted {
                _online: online,
                session,
                resumed_after: None,
            };
            Some((admitted, wr))
        }
        Err(r) => {
            refuse(wr, r, &shared.stats).await;
            None
        }
    }
}

/// The client's link, attached to its session with the welcome (AUTH_OK); a link the
/// session had on another connection is kicked.
fn attach(
    shared: &Shared,
    session: &Session,
    resumed_after: Option<u32>,
    peer: SocketAddr,
) -> Arc<Link> {
    let link = Arc::new(Link {
        outbound: Arc::new(Outbound::new(
            shared.settings.send_queue_soft,
            shared.settings.send_queue_hard,
        )),
        addr: peer,
        addr_text: peer.to_string(),
    });
    let ok = format!("{} {} {}", session.id, session.secret(), shared.settings.id);
    let welcome = ClientFrame::new(
        GATEWAY_MODULE,
        op::AUTH_OK,
        u32::from(resumed_after.is_some()),
        Bytes::from(ok),
    )
    .with_flags(protocol::RELIABLE);
    if let Some(old) = session.attach(link.clone(), welcome, resumed_after) {
        old.outbound
            .kick(Kick::Takeover, "session resumed on another connection");
    }
    tracing::debug!(%peer, session = %session.id, account = %session.account, resumed = resumed_after.is_some(), "client admitted");
    link
}

/// A frame that could not be read: the client is told why where it can be (kicked),
/// and the WebSocket close code for it is returned.
fn bad_frame(link: &Link, peer: SocketAddr, e: ProtocolError) -> CloseCode {
    tracing::debug!(%peer, error = %e, "bad client frame; closing");
    let close = transport::close_code(&e);
    match e {
        // The socket failed: nobody to tell.
        ProtocolError::Io(_) => link.outbound.close(format!("i/o error: {e}")),
        ProtocolError::TooLong { .. } => link.outbound.kick(Kick::Oversize, &e.to_string()),
        _ => link.outbound.kick(Kick::BadFrame, &e.to_string()),
    }
    close
}

/// What the read loop does with a client's frame.
enum Screened {
    /// Forward it to its backend.
    Forward,
    /// Nothing more (answered here, or refused): read the next.
    Skip,
    /// Stop reading; the connection closes with this WebSocket close code.
    Close(CloseCode),
}

/// The gateway's own frames (PING answered, the rest ignored) and the message rate
/// limits, before a frame is forwarded: a refused message is answered with the limit,
/// and a client over its rate limits for too long is kicked.
fn screen(
    ctx: &Forwarding,
    frame: &ClientFrame,
    abuse: &mut AbuseMeter,
    peer: SocketAddr,
) -> Screened {
    let (shared, link) = (&ctx.shared, &ctx.link);
    if frame.module == GATEWAY_MODULE {
        if frame.opcode == op::PING {
            link.outbound.push(
                ClientFrame::new(GATEWAY_MODULE, op::PING, frame.seq, Bytes::new())
                    .with_flags(protocol::REPLY),
            );
        }
        return Screened::Skip;
    }
    let Err(limited) =
        shared
            .limits
            .check_message(&ctx.session.account, frame.module, frame.opcode)
    else {
        return Screened::Forward;
    };
    push(
        shared,
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
        tracing::info!(%peer, account = %ctx.session.account, %limited, "disconnected: over its rate limits");
        link.outbound
            .kick(Kick::Abuse, "rate limited: sustained abuse");
        return Screened::Close(CloseCode::Policy);
    }
    Screened::Skip
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
    let _due = ctx.link.outbound.expect_reply();
    forward(&ctx.shared, &ctx.session, &ctx.link, frame, ticket).await;
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
