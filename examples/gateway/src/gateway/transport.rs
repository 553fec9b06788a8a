//! Client transports: the same [`ClientFrame`] over a TCP byte stream or as WebSocket
//! binary messages (one frame per message), behind one reader type and one writer type,
//! so admission, routing and the send queue are written once for both.
//!
//! - [`ClientReader`]: a stream of frames (or the [`ProtocolError`] that ends the
//!   connection); it ends when the client closes.
//! - [`ClientWriter`]: writes a batch of frames; [`ClientWriter::close`] says why the
//!   connection ends (a WebSocket close frame with a code and the reason; on TCP, FIN).
//!
//! Why the WebSocket limits come from `max-frame`: tungstenite compares a WebSocket
//! frame's announced length with `max_frame_size` *before* reserving its payload, and
//! a fragmented message's total with `max_message_size` before appending, so a client
//! announcing a huge message is refused (close 1009) before the gateway allocates for
//! it, as the TCP codec refuses an oversize length field. The eagerly allocated read
//! buffer is kept small (game messages are small; a larger one grows on demand up to
//! the cap) because the gateway holds tens of thousands of connections.
//!
//! A text message is refused (close 1003): the frame is binary, and a client sending
//! text speaks another protocol.
//!
//! Stickiness behind an L7 load balancer: the upgrade response sets the cookie
//! `MESHLINE_GW=<gateway id>` ([`STICKY_COOKIE`]; `Path=/; HttpOnly; SameSite=Lax`), so a
//! cookie-sticky balancer sends the browser's reconnects to the same gateway (AUTH_OK
//! names the gateway too, for clients that pick gateways themselves). Stickiness is an
//! optimisation only: a session resumes on any gateway sharing the Redis session store.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{SplitSink, Stream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError as WsProtocolError};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::http::header::SET_COOKIE;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Message, WebSocketConfig};
use tokio_util::codec::FramedRead;

use super::protocol::{ClientCodec, ClientFrame, ProtocolError};

/// Bytes of the frame's own length field, inside a WebSocket message.
const LEN_FIELD: usize = 4;
/// A TCP writer keeps its batch buffer between writes up to this capacity.
const KEPT_WRITE_BUFFER: usize = 16 * 1024;
/// A WebSocket close reason is at most 123 bytes (125 minus the code).
const MAX_CLOSE_REASON: usize = 123;
/// The cookie naming the gateway, set on every WebSocket upgrade response.
pub(crate) const STICKY_COOKIE: &str = "MESHLINE_GW";

/// The frames a client sends, whatever the transport.
pub(crate) type ClientReader =
    Pin<Box<dyn Stream<Item = Result<ClientFrame, ProtocolError>> + Send>>;

/// A connection just accepted, before its transport is set up.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// Frames straight on the byte stream.
    Tcp(TcpStream),
    /// A WebSocket upgrade still to be answered.
    WebSocket(TcpStream),
}

impl Incoming {
    /// Sets the transport up: a WebSocket handshake must finish within `deadline` (it is
    /// part of authenticating, and a client that never finishes it must not hold a
    /// connection; the error is then of kind `TimedOut`); frames over `max_frame`, and a
    /// first frame over `first_max` (the pre-auth cap), are refused before allocation
    /// (over WebSocket the first message is checked against `first_max` once read, the
    /// WebSocket layer's own cap being `max_frame`). The upgrade response carries the
    /// [`STICKY_COOKIE`] naming `gateway_id`.
    pub(crate) async fn open(
        self,
        max_frame: usize,
        first_max: usize,
        deadline: Duration,
        gateway_id: &str,
    ) -> io::Result<(ClientReader, ClientWriter)> {
        match self {
            Incoming::Tcp(stream) => Ok(tcp(stream, max_frame, Some(first_max))),
            Incoming::WebSocket(stream) => {
                let cookie = sticky_cookie(gateway_id);
                // The error type is tungstenite's `Callback` contract (an HTTP response).
                #[allow(clippy::result_large_err)]
                let add_cookie = move |_: &Request, mut response: Response| {
                    if let Some(c) = cookie {
                        response.headers_mut().append(SET_COOKIE, c);
                    }
                    Ok(response)
                };
                let ws = tokio::time::timeout(
                    deadline,
                    tokio_tungstenite::accept_hdr_async_with_config(
                        stream,
                        add_cookie,
                        Some(ws_config(max_frame)),
                    ),
                )
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "websocket handshake too slow")
                })?
                .map_err(io::Error::other)?;
                Ok(websocket(ws, max_frame, Some(first_max)))
            }
        }
    }
}

/// The `Set-Cookie` value naming gateway `id`; `None` (no cookie, logged once per
/// connection at debug) when the id holds characters a cookie value cannot.
fn sticky_cookie(id: &str) -> Option<HeaderValue> {
    // RFC 6265 cookie-octet: visible ASCII except `"`, `,`, `;` and `\`.
    let ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'));
    if !ok {
        tracing::debug!(
            id,
            "gateway id not usable as a cookie value; no sticky cookie"
        );
        return None;
    }
    HeaderValue::from_str(&format!(
        "{STICKY_COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax"
    ))
    .ok()
}

/// Connects to `addr`, from `local` when given (a client of a gateway choosing its
/// source address, as the tests do with 127.x.y.z).
async fn connect_from(addr: SocketAddr, local: Option<IpAddr>) -> io::Result<TcpStream> {
    let stream = match local {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket = if ip.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects to a gateway's TCP listener.
pub(crate) async fn connect_tcp(
    addr: SocketAddr,
    local: Option<IpAddr>,
    max_frame: usize,
) -> io::Result<(ClientReader, ClientWriter)> {
    let stream = connect_from(addr, local).await?;
    Ok(tcp(stream, max_frame, None))
}

/// Connects to a gateway's WebSocket listener (`ws://host:port/...`).
pub(crate) async fn connect_ws(
    url: &str,
    local: Option<IpAddr>,
    max_frame: usize,
) -> io::Result<(ClientReader, ClientWriter)> {
    let request = url
        .into_client_request()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let uri = request.uri();
    if uri.scheme_str() != Some("ws") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{url}: only ws:// URLs (TLS ends in front of the gateway)"),
        ));
    }
    let host = uri.host().unwrap_or("127.0.0.1").to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream = match local {
        None => {
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            stream
        }
        Some(_) => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let addr = tokio::net::lookup_host((host, port))
                .await?
                .next()
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, format!("{url}: no address"))
                })?;
            connect_from(addr, local).await?
        }
    };
    let (ws, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config(max_frame)))
            .await
            .map_err(io::Error::other)?;
    Ok(websocket(ws, max_frame, None))
}

fn tcp(
    stream: TcpStream,
    max_frame: usize,
    first_max: Option<usize>,
) -> (ClientReader, ClientWriter) {
    let (rd, wr) = stream.into_split();
    let codec = match first_max {
        Some(first) => ClientCodec::new(max_frame).with_first_frame_cap(first),
        None => ClientCodec::new(max_frame),
    };
    let reader = FramedRead::new(rd, codec).boxed();
    (
        reader,
        ClientWriter::Tcp {
            wr,
            buf: BytesMut::new(),
        },
    )
}

fn ws_config(max_frame: usize) -> WebSocketConfig {
    let max_message = max_frame.saturating_add(LEN_FIELD);
    WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

fn websocket(
    ws: WebSocketStream<TcpStream>,
    max_frame: usize,
    first_max: Option<usize>,
) -> (ClientReader, ClientWriter) {
    let (sink, stream) = ws.split();
    let state = (stream, first_max);
    let reader = futures_util::stream::unfold(state, move |(mut stream, mut first)| async move {
        loop {
            let item = match stream.next().await? {
                Ok(Message::Binary(b)) => {
                    ClientFrame::from_message(&b, first.take().unwrap_or(max_frame).min(max_frame))
                }
                Ok(Message::Text(_)) => Err(ProtocolError::NotBinary),
                Ok(Message::Close(_)) => return None,
                // Pings are answered by tungstenite itself.
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                // A client that closes the TCP connection without the closing handshake
                // has left; that is not a protocol error worth a log line.
                Err(WsError::Protocol(WsProtocolError::ResetWithoutClosingHandshake)) => {
                    return None;
                }
                Err(e) => Err(ws_error(e)),
            };
            return Some((item, (stream, first)));
        }
    })
    .boxed();
    (reader, ClientWriter::WebSocket(sink))
}

fn ws_error(e: WsError) -> ProtocolError {
    match e {
        // Reported like the TCP codec does: sizes of the frame after its length field.
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => {
            ProtocolError::TooLong {
                len: size.saturating_sub(LEN_FIELD),
                max: max_size.saturating_sub(LEN_FIELD),
            }
        }
        WsError::Io(e) => ProtocolError::Io(e),
        other => ProtocolError::WebSocket(other.to_string()),
    }
}

/// The WebSocket close code for a connection closed because of `e`.
pub(crate) fn close_code(e: &ProtocolError) -> CloseCode {
    match e {
        ProtocolError::TooLong { .. } => CloseCode::Size,
        ProtocolError::NotBinary => CloseCode::Unsupported,
        _ => CloseCode::Protocol,
    }
}

/// Where frames to a client are written.
pub(crate) enum ClientWriter {
    /// Frames back to back on the byte stream (a batch is one write).
    Tcp {
        /// The socket's write half.
        wr: OwnedWriteHalf,
        /// The batch being written (frames encoded straight into it; its capacity is
        /// kept between batches, and given back when one was large).
        buf: BytesMut,
    },
    /// One binary message per frame (a batch is one flush).
    WebSocket(SplitSink<WebSocketStream<TcpStream>, Message>),
}

impl std::fmt::Debug for ClientWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientWriter::Tcp { .. } => "ClientWriter::Tcp",
            ClientWriter::WebSocket(_) => "ClientWriter::WebSocket",
        })
    }
}

impl ClientWriter {
    /// Writes `frames` in order and flushes them.
    pub(crate) async fn write(&mut self, frames: &[ClientFrame]) -> io::Result<()> {
        match self {
            ClientWriter::Tcp { wr, buf } => {
                buf.clear();
                for f in frames {
                    f.encode_into(buf);
                }
                let written = wr.write_all(buf).await;
                if buf.capacity() > KEPT_WRITE_BUFFER {
                    // An idle connection holds no large buffer.
                    *buf = BytesMut::new();
                }
                written
            }
            ClientWriter::WebSocket(sink) => {
                for f in frames {
                    // `Bytes` end to end: the frame's buffer is the message's.
                    sink.feed(Message::Binary(f.to_bytes()))
                        .await
                        .map_err(io::Error::other)?;
                }
                sink.flush().await.map_err(io::Error::other)
            }
        }
    }

    /// Ends the connection, saying why where the transport can (`code` and `reason`
    /// in a WebSocket close frame; TCP only half-closes). Best effort, bounded in time.
    pub(crate) async fn close(self, code: CloseCode, reason: &str) {
        let bounded = Duration::from_millis(500);
        match self {
            ClientWriter::Tcp { mut wr, .. } => {
                let _ = tokio::time::timeout(bounded, wr.shutdown()).await;
            }
            ClientWriter::WebSocket(mut sink) => {
                let frame = CloseFrame {
                    code,
                    reason: truncate(reason, MAX_CLOSE_REASON).into(),
                };
                let _ = tokio::time::timeout(bounded, async {
                    sink.send(Message::Close(Some(frame))).await?;
                    sink.close().await
                })
                .await;
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Makes the kernel find a client that went silent (its host vanished, its link was cut:
/// no FIN, no RST) within `after` of its last sign of life, so its connection ends and
/// its session is detached (the resume window starts) instead of staying attached to a
/// dead socket for good. The protocol asks clients for no keep-alive of their own, so
/// TCP's is used: keep-alive probes once the connection has been idle for half of
/// `after`, then every second; and `TCP_USER_TIMEOUT` of `after`, which ends the
/// connection when probes or data stay unacknowledged that long (Linux; it bounds the
/// retransmission of pushes to a silent client too, which would otherwise go on for
/// about 15 minutes). Zero: nothing is set.
pub(crate) fn keep_alive(stream: &TcpStream, after: Duration) -> io::Result<()> {
    if after.is_zero() {
        return Ok(());
    }
    let sock = socket2::SockRef::from(stream);
    let idle = Duration::from_secs((after.as_secs() / 2).max(1));
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval(Duration::from_secs(1)),
    )?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(after))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_fit_a_close_frame_on_a_char_boundary() {
        let long = "é".repeat(100);
        let t = truncate(&long, MAX_CLOSE_REASON);
        assert!(t.len() <= MAX_CLOSE_REASON && t.len() >= MAX_CLOSE_REASON - 1);
        assert_eq!(truncate("short", MAX_CLOSE_REASON), "short");
    }

    #[test]
    fn the_sticky_cookie_names_the_gateway_or_is_left_out() {
        let c = sticky_cookie("gw-a").unwrap();
        assert_eq!(c, "MESHLINE_GW=gw-a; Path=/; HttpOnly; SameSite=Lax");
        for bad in ["", "gw a", "gw;a", "gw\"a", "gw\u{e9}"] {
            assert!(sticky_cookie(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn close_codes_name_the_problem() {
        assert_eq!(
            close_code(&ProtocolError::TooLong { len: 9, max: 1 }),
            CloseCode::Size
        );
        assert_eq!(
            close_code(&ProtocolError::NotBinary),
            CloseCode::Unsupported
        );
        assert_eq!(close_code(&ProtocolError::Truncated), CloseCode::Protocol);
    }
}
