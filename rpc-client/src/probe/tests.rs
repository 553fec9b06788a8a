use std::net::SocketAddr;

use super::*;
use crate::message::{RegisterTmRequest, register_reply};
use crate::{InboundRequest, Payload, SeataRegistration, Server};

/// A TC on loopback that answers registrations with `accept`.
async fn tc(accept: bool) -> Server {
    Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        move |req: InboundRequest| async move {
            let msg = req.payload.decode_seata().ok()?;
            let reply = register_reply(&msg, accept, "2.3.0")?;
            Payload::seata(&reply).ok()
        },
    )
    .await
    .unwrap()
}

fn tm() -> SeataRegistration {
    SeataRegistration::tm(RegisterTmRequest {
        version: "2.3.0".into(),
        application_id: "doctor".into(),
        transaction_service_group: "default_tx_group".into(),
        extra_data: None,
    })
}

const STEP: Duration = Duration::from_secs(3);

async fn run(addr: SocketAddr, handshake: Option<&dyn Handshake>) -> ProbeReport {
    probe(
        &addr.ip().to_string(),
        addr.port(),
        &TransportOptions::default(),
        handshake,
        STEP,
    )
    .await
}

#[tokio::test]
async fn an_accepting_tc_passes_every_step() {
    let server = tc(true).await;
    let h = tm();
    let r = run(server.local_addr(), Some(&h)).await;
    assert!(r.connect.is_ok(), "{r:?}");
    assert!(matches!(r.ping, Some(Ok(_))), "{r:?}");
    assert!(matches!(r.handshake, Some(Ok(_))), "{r:?}");
    assert!(r.accepted());
}

#[tokio::test]
async fn a_refusing_tc_is_named_with_its_answer() {
    let server = tc(false).await;
    let h = tm();
    let r = run(server.local_addr(), Some(&h)).await;
    assert!(matches!(r.ping, Some(Ok(_))), "{r:?}");
    let err = r.handshake.clone().unwrap().unwrap_err();
    assert!(err.contains("TC refused TM registration"), "{err}");
    assert!(err.contains("2.3.0"), "{err}");
    assert!(!r.accepted());
}

#[tokio::test]
async fn a_closed_port_fails_the_connect_step_only() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let h = tm();
    let r = probe(
        "127.0.0.1",
        port,
        &TransportOptions::default(),
        Some(&h),
        STEP,
    )
    .await;
    let err = r.connect.clone().unwrap_err();
    assert!(err.contains("connect failed"), "{err}");
    assert_eq!((r.ping.clone(), r.handshake.clone()), (None, None));
    assert!(!r.accepted());
}

/// A listener that accepts one connection and never answers (not a Seata server, or a
/// hung one), for 30 s.
async fn silent_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    });
    (addr, hold)
}

/// Probes a [`silent_server`] over `transport`, each step given 300 ms.
async fn probe_silent_server(transport: &TransportOptions) -> ProbeReport {
    let (addr, hold) = silent_server().await;
    let r = probe(
        "127.0.0.1",
        addr.port(),
        transport,
        None,
        Duration::from_millis(300),
    )
    .await;
    hold.abort();
    r
}

#[tokio::test]
async fn a_silent_server_fails_the_ping_step_with_its_deadline() {
    let r = probe_silent_server(&TransportOptions::default()).await;
    assert!(r.connect.is_ok());
    let err = r.ping.clone().unwrap().unwrap_err();
    assert!(err.contains("no PONG within 300ms"), "{err}");
    assert_eq!(r.handshake, None);
}

/// An HTTP server where a TC was expected: its answer is not a Seata frame.
#[tokio::test]
async fn a_non_seata_server_is_named_as_such() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf).await;
        let _ = s
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    let r = run(addr, None).await;
    let err = r.ping.clone().unwrap().unwrap_err();
    assert!(err.contains("not a Seata frame"), "{err}");
}

fn grpc() -> TransportOptions {
    TransportOptions {
        protocol: crate::Protocol::Grpc,
        ..TransportOptions::default()
    }
}

/// With `transport.protocol = grpc` every step runs over gRPC on one connection: a v1
/// PING first would make the TC read the connection as v1 and the gRPC handshake after
/// it would fail.
#[tokio::test]
async fn a_tc_is_probed_over_grpc_when_the_client_speaks_it() {
    let server = tc(true).await;
    let addr = server.local_addr();
    let h = tm();
    let r = probe(&addr.ip().to_string(), addr.port(), &grpc(), Some(&h), STEP).await;
    assert!(matches!(r.ping, Some(Ok(_))), "{r:?}");
    assert!(matches!(r.handshake, Some(Ok(_))), "{r:?}");
    assert!(r.accepted());

    let refusing = tc(false).await;
    let addr = refusing.local_addr();
    let r = probe(&addr.ip().to_string(), addr.port(), &grpc(), Some(&h), STEP).await;
    let err = r.handshake.clone().unwrap().unwrap_err();
    assert!(err.contains("TC refused TM registration"), "{err}");
}

#[tokio::test]
async fn a_silent_server_fails_the_grpc_ping_step_with_its_deadline() {
    let r = probe_silent_server(&grpc()).await;
    let err = r.ping.clone().unwrap().unwrap_err();
    assert!(err.contains("no PONG within 300ms (gRPC)"), "{err}");
    assert_eq!(r.handshake, None);
}
