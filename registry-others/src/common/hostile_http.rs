//! The HTTP backends' shared body cap and error texts, against a hostile server.

use std::time::Duration;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Instance, RegistryService};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "Http-Secret-4d2e";

/// Answers every GET with an endless chunked body (`endless`) or `[]`, and every
/// other request with a 500 carrying a 1 MiB body.
async fn hostile(endless: bool) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let get = buf[..n].starts_with(b"GET");
                if get && endless {
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").await;
                    let chunk = format!("10000\r\n{}\r\n", "[".repeat(0x10000));
                    while s.write_all(chunk.as_bytes()).await.is_ok() {}
                } else if get {
                    let body = "{\"applications\":{\"application\":[]}}";
                    let _ = s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes()).await;
                } else {
                    let body = "E".repeat(1 << 20);
                    let _ = s.write_all(format!("HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes()).await;
                }
            });
        }
    });
    addr
}

fn config(kind: &str, key: &str, addr: &str) -> meshline_registry_core::Config {
    ConfigLoader::new()
        .set("registry.type", kind)
        .set(format!("registry.{kind}.{key}"), addr)
        .set(format!("registry.{kind}.maxBodyBytes"), "1MiB")
        .load()
        .unwrap()
}

/// The error of `connect`, against the endless body: it must come within 20 s (the
/// reading stops at the cap) and name `maxBodyBytes`.
async fn capped_connect_error<R>(
    connect: impl std::future::Future<Output = Result<R, meshline_registry_core::RegistryError>>,
) -> String {
    let r = tokio::time::timeout(Duration::from_secs(20), connect)
        .await
        .expect("reading stops at the cap");
    let e = match r {
        Ok(_) => panic!("connect succeeded against an endless body"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("maxBodyBytes"), "{e}");
    e
}

#[tokio::test]
async fn an_endless_body_stops_at_the_cap() {
    let addr = hostile(true).await;
    capped_connect_error(crate::consul::ConsulRegistry::connect(&config(
        "consul",
        "serverAddr",
        &addr,
    )))
    .await;
    let url = format!("http://meshline:{SECRET}@{addr}/eureka");
    let e = capped_connect_error(crate::eureka::EurekaRegistry::connect(&config(
        "eureka",
        "serviceUrl",
        &url,
    )))
    .await;
    assert!(!e.contains(SECRET), "the password is in the error: {e}");
}

/// The error of registering an instance with `registry`, which the hostile server
/// refuses with a megabyte of text: checked to be short (the body is truncated).
async fn short_register_error(registry: &impl RegistryService) -> String {
    let e = registry
        .register("c", &Instance::parse("10.0.0.1:8091").unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.len() < 1024, "{} bytes", e.len());
    e
}

#[tokio::test]
async fn error_bodies_are_truncated_and_urls_redacted() {
    let addr = hostile(false).await;
    let url = format!("http://meshline:{SECRET}@{addr}/eureka");
    let eureka = crate::eureka::EurekaRegistry::connect(&config("eureka", "serviceUrl", &url))
        .await
        .unwrap();
    let e = short_register_error(&eureka).await;
    assert!(e.contains("500"), "{e}");
    assert!(!e.contains(SECRET), "the password is in the error: {e}");
    assert!(!format!("{eureka:?}").contains(SECRET));
    let consul = crate::consul::ConsulRegistry::connect(&config("consul", "serverAddr", &addr))
        .await
        .unwrap();
    short_register_error(&consul).await;
}
