//! What a backend built on `Server` relies on: the connection limit, the accept hook,
//! stable connection ids with a state slot, connect and close notifications, and a
//! server that stops when dropped.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use meshline_rpc_client::{
    CallOptions, Connection, ConnectionId, InboundRequest, Payload, Server, ServerConfig,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const SEC: Duration = Duration::from_secs(1);

async fn echo(req: InboundRequest) -> Option<Payload> {
    let mut p = req.payload;
    p.head.insert("conn", req.connection.id().to_string());
    Some(p)
}

/// Reads until the peer closes; true when it did within `limit`.
async fn closed_by_peer(sock: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(limit, sock.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let server = Server::builder(echo)
        .config(ServerConfig {
            max_connections: 3,
            read_idle: None,
            ..ServerConfig::default()
        })
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut kept = Vec::new();
    for _ in 0..3 {
        kept.push(TcpStream::connect(addr).await.unwrap());
    }
    until(SEC, || server.connection_count() == 3).await.unwrap();
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_peer(&mut extra, SEC * 2).await,
        "the 4th must be closed"
    );
    assert_eq!(server.connection_count(), 3);
    assert_eq!(server.stats().refused_over_limit, 1);
    // A place frees when one closes: bookkeeping without any new accept.
    drop(kept.pop());
    until(SEC, || server.connection_count() == 2)
        .await
        .expect("a closed connection left the map");
    let _again = TcpStream::connect(addr).await.unwrap();
    until(SEC, || server.connection_count() == 3).await.unwrap();
    assert_eq!(server.stats().accepted, 4);
}

#[tokio::test]
async fn the_accept_hook_decides_by_peer_address() {
    let seen: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
    let s2 = seen.clone();
    let server = Server::builder(echo)
        .on_accept(move |peer| {
            let mut s = s2.lock().unwrap();
            s.push(peer);
            if s.len() == 2 {
                Err("second connection refused by policy".into())
            } else {
                Ok(())
            }
        })
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr();
    let _first = TcpStream::connect(addr).await.unwrap();
    until(SEC, || server.connection_count() == 1).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_peer(&mut second, SEC * 2).await);
    assert_eq!(server.stats().refused_by_hook, 1);
    assert_eq!(server.connection_count(), 1);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|a| a.ip().is_loopback()));
}

/// Per-connection state set on connect, read in the handler, torn down on close; the
/// id is stable, and finds the connection again.
#[tokio::test]
async fn ids_state_and_close_notifications() {
    struct Session {
        name: String,
        calls: AtomicUsize,
    }
    let closed: Arc<Mutex<Vec<(ConnectionId, String)>>> = Arc::default();
    let c2 = closed.clone();
    let handler = |req: InboundRequest| async move {
        let session = req.connection.state::<Session>()?;
        let n = session.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Some(
            req.payload
                .with_head("session", session.name.clone())
                .with_head("calls", n.to_string())
                .with_head("conn", req.connection.id().to_string()),
        )
    };
    let server = Server::builder(handler)
        .on_connect(|conn: &Connection| {
            conn.set_state(Session {
                name: format!("s-{}", conn.id().get()),
                calls: AtomicUsize::new(0),
            })
        })
        .on_close(move |conn, reason| {
            c2.lock()
                .unwrap()
                .push((conn.id(), reason.message().to_string()))
        })
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let hub = hub_with(vec![instance(server.local_addr())]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 1, SEC).await;
    let mut ids = std::collections::HashSet::new();
    for i in 1..=3 {
        let r = client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .unwrap();
        assert_eq!(r.payload.head.get("calls"), Some(i.to_string().as_str()));
        ids.insert(r.payload.head.get("conn").unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "one connection, one id");
    let conn = server.connections().pop().unwrap();
    assert_eq!(ids.iter().next().unwrap(), &conn.id().to_string());
    assert!(server.connection(conn.id()).unwrap().ptr_eq(&conn));
    assert_eq!(
        conn.state::<Session>().unwrap().name,
        format!("s-{}", conn.id().get())
    );
    assert!(
        conn.state::<String>().is_none(),
        "typed: another type is absent"
    );
    // Close from the client side: the server is told once, with the reason.
    client.shutdown(SEC).await;
    until(SEC, || closed.lock().unwrap().len() == 1)
        .await
        .expect("on_close not called");
    let (id, reason) = closed.lock().unwrap()[0].clone();
    assert_eq!(id, conn.id());
    assert!(reason.contains("closed by peer"), "{reason}");
    assert!(server.connection(id).is_none());
    assert_eq!(server.connection_count(), 0);
}

/// Dropping a `Server` stops it accepting and serving.
#[tokio::test]
async fn a_dropped_server_stops() {
    let s = start("s", Mode::Echo).await;
    let hub = hub_of(&[&s]);
    let client = build_alive(
        builder(&hub, "RandomLoadBalance").configure(no_reconnect),
        1,
        SEC,
    )
    .await;
    let addr = s.addr();
    drop(s);
    until(SEC, || client.alive().is_empty())
        .await
        .expect("connections of a dropped server must close");
    let mut refused = false;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "a dropped server must stop accepting");
}
