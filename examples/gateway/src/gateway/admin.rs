//! The admin HTTP port (`gateway.admin-listen`): serves the browser client page,
//! `GET /gateway.html` (examples/gateway/static/gateway.html, compiled in), and the metrics
//! ([`metrics`](super::metrics)): `GET /metrics` (Prometheus text), `GET /status` and
//! `GET /status.json` (the gateway's recent [`history`](super::history)).
//! `POST /drain` asks the gateway to drain (see [`drain`](super::drain)). Nothing on
//! this port is authenticated: bind it to loopback or an operator network, never to the
//! public one.
//!
//! Why hand-written HTTP and not a server crate: this port serves one static file to a
//! browser on the operator's side; a request line, a bounded header read and a
//! `Connection: close` answer are all it takes, and a framework would be the largest
//! dependency of the example for the smallest feature. The read is capped (8 KiB) and
//! timed (5 s), so the port costs nothing to a client that sends garbage or nothing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::metrics::Pages;

/// The browser client: connects to the WebSocket listener, authenticates with the
/// token in its URL, joins a room and shows the room's pushes.
pub const GATEWAY_HTML: &str = include_str!("../../static/gateway.html");

const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Accepts admin connections until `stop`. `POST /drain` cancels `drain` (asks for a
/// drain: see [`drain`](super::drain)); this port has no authentication, so it must
/// never be reachable from the public network.
pub(crate) async fn serve(
    listener: TcpListener,
    stop: CancellationToken,
    drain: CancellationToken,
    pages: Pages,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let drain = drain.clone();
                let pages = pages.clone();
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, &drain, &pages).await {
                        tracing::debug!(%peer, error = %e, "admin request failed");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    drain: &CancellationToken,
    pages: &Pages,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() >= MAX_REQUEST_HEAD {
                return Ok(false);
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(false);
            }
            head.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let response = match read {
        Ok(Ok(true)) => super::drain::admin_route(&head, drain)
            .or_else(|| pages.answer(&head))
            .unwrap_or_else(|| route(&head)),
        Ok(Err(e)) => return Err(e),
        _ => respond(
            "400 Bad Request",
            "text/plain",
            "request head too large, cut short or too slow\n",
        ),
    };
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// The response to the request whose head is `head`.
fn route(head: &[u8]) -> Vec<u8> {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    // The query (the page's token and WebSocket address) is the page's business.
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/gateway.html") => {
            let mut r = respond("200 OK", "text/html; charset=utf-8", GATEWAY_HTML);
            if method == "HEAD" {
                let end = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
                r.truncate(end);
            }
            r
        }
        ("GET" | "HEAD", _) => respond(
            "404 Not Found",
            "text/plain",
            "try /gateway.html, /status, /status.json or /metrics\n",
        ),
        _ => respond("405 Method Not Allowed", "text/plain", "GET only\n"),
    }
}

pub(super) fn respond(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: &[u8]) -> String {
        String::from_utf8_lossy(r)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    #[test]
    fn serves_the_page_and_nothing_else() {
        let ok = route(b"GET /gateway.html?token=a.b.c.d&ws=ws://x:1 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status(&ok), "HTTP/1.1 200 OK");
        assert!(String::from_utf8_lossy(&ok).contains("<ul id=\"log\">"));
        let head = route(b"HEAD /gateway.html HTTP/1.1\r\n\r\n");
        assert!(head.ends_with(b"\r\n\r\n"));
        assert_eq!(
            status(&route(b"GET /etc/passwd HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status(&route(b"POST /gateway.html HTTP/1.1\r\n\r\n")),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(
            status(&route(b"\xff\xfe")),
            "HTTP/1.1 405 Method Not Allowed"
        );
    }
}
