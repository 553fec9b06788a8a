//! What a Nacos server is: its version (which protocol the registry speaks to it), and
//! why a connect failed (each server's gRPC port, and Nacos 1.x).
//!
//! nacos-sdk (the configuration centre's client) reports a failed connect only as "the
//! connection is not connected" and keeps the I/O error ("Connection refused") to
//! itself, and the registry's client reports the last server's error only; so we try
//! one TCP connection to each server's gRPC port (`registry.nacos.grpcPort`, or the
//! HTTP port + 1000) and name every outcome.
//!
//! A Nacos 1.x server serves HTTP only: the registry speaks its v1 API
//! (`registry.nacos.protocol` `http`, or `auto`, which asks [`version`]); the
//! configuration centre (nacos-sdk) speaks gRPC only. When a gRPC port does not accept,
//! we ask the HTTP port `GET /<contextPath>/v1/console/server/state` (present in Nacos
//! 1.x and 2.x; it answers `{"version":"1.4.1",…}`) and say what answered: a 1.x
//! version is named with the key that makes the registry speak HTTP; an HTTP answer
//! without a version is named as "Nacos 1.x, or a 2.x server whose gRPC port is
//! elsewhere".

use meshline_registry_core::probe::PROBE_TIMEOUT;

use crate::address::{Scheme, ServerAddrs};

/// The most of an HTTP answer we read.
const MAX_BODY: usize = 64 * 1024;

/// `host:port (gRPC): outcome` for each server, joined by `; `, with what its HTTP port
/// said when the gRPC port did not accept.
pub(crate) async fn probe_servers(addrs: &ServerAddrs, grpc_port: Option<u16>) -> String {
    let mut out = Vec::new();
    for (host, http_port) in addrs.hosts() {
        let port = grpc_port.unwrap_or_else(|| http_port.saturating_add(1000));
        let target = format!("{host}:{port}");
        let connect = tokio::net::TcpStream::connect(&target);
        let outcome = match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
            Ok(Ok(_)) => {
                out.push(format!("{target} (gRPC): accepts TCP connections"));
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("TCP connect timed out after {PROBE_TIMEOUT:?}"),
        };
        let mut line = format!("{target} (gRPC): {outcome}");
        if let Some(http) = http_finding(addrs, &host, http_port, port).await {
            line.push_str("; ");
            line.push_str(&http);
        }
        out.push(line);
    }
    out.join("; ")
}

/// The version the first server that says one answers with (`GET
/// /<contextPath>/v1/console/server/state`), each asked for at most
/// [`PROBE_TIMEOUT`]; `None` when none says (rnacos answers 404; a server down).
pub(crate) async fn version(addrs: &ServerAddrs) -> Option<String> {
    for (host, http_port) in addrs.hosts() {
        if let Some((200, body)) = server_state(addrs, &host, http_port).await
            && let Some(v) = version_in(&body)
        {
            return Some(v);
        }
    }
    None
}

/// The `version` of a server-state answer.
fn version_in(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("version")?
        .as_str()
        .map(str::to_string)
}

/// What `host:http_port` says over HTTP, when it answers at all.
async fn http_finding(
    addrs: &ServerAddrs,
    host: &str,
    http_port: u16,
    grpc_port: u16,
) -> Option<String> {
    let (status, body) = server_state(addrs, host, http_port).await?;
    Some(describe(
        &format!("{host}:{http_port}"),
        grpc_port,
        status,
        &body,
    ))
}

/// The status and (capped) body of `host:http_port`'s server-state answer.
async fn server_state(addrs: &ServerAddrs, host: &str, http_port: u16) -> Option<(u16, Vec<u8>)> {
    let scheme = match addrs.scheme {
        Scheme::Https => "https",
        Scheme::Http => "http",
        Scheme::Unspecified if cfg!(feature = "tls") => "https",
        Scheme::Unspecified => "http",
    };
    let url = format!(
        "{scheme}://{host}:{http_port}/{}/v1/console/server/state",
        addrs.context_path
    );
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .ok()?;
    let answer = match client.get(&url).send().await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(registry = "nacos", %url, error = %e, "no HTTP answer");
            return None;
        }
    };
    let status = answer.status().as_u16();
    let body = answer.bytes().await.unwrap_or_default();
    Some((status, body[..body.len().min(MAX_BODY)].to_vec()))
}

/// The finding for an HTTP answer `status` + `body` from `http` whose gRPC port
/// `grpc_port` did not accept.
fn describe(http: &str, grpc_port: u16, status: u16, body: &[u8]) -> String {
    let version = (status == 200).then(|| version_in(body)).flatten();
    match version {
        Some(v) if v.starts_with("1.") => format!(
            "{http} answers HTTP as Nacos {v}: Nacos 1.x speaks HTTP only; set \
             registry.nacos.protocol to http (or auto) for the registry (the \
             configuration centre needs Nacos 2.x)"
        ),
        Some(v) => format!(
            "{http} answers HTTP as Nacos {v}, but not on gRPC port {grpc_port}: set \
             registry.nacos.grpcPort if the server's gRPC port is not HTTP + 1000"
        ),
        None => format!(
            "{http} answers HTTP (status {status}), but not on gRPC port {grpc_port}: a \
             Nacos 1.x server (HTTP only: set registry.nacos.protocol to http), or a 2.x \
             server whose gRPC port is elsewhere (set registry.nacos.grpcPort)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_name_the_version() {
        let one = describe(
            "h:8848",
            9848,
            200,
            br#"{"standalone_mode":"standalone","function_mode":null,"version":"1.4.1"}"#,
        );
        assert!(
            one.contains("Nacos 1.4.1") && one.contains("registry.nacos.protocol to http"),
            "{one}"
        );
        let two = describe("h:8848", 9848, 200, br#"{"version":"2.3.0"}"#);
        assert!(
            two.contains("Nacos 2.3.0") && two.contains("registry.nacos.grpcPort"),
            "{two}"
        );
        assert!(!two.contains("registry.nacos.protocol"), "{two}");
        for (status, body) in [(404, &b"not found"[..]), (200, &b"<html>"[..])] {
            let other = describe("h:8848", 9848, status, body);
            assert!(
                other.contains(&format!("status {status}"))
                    && other.contains(
                        "Nacos 1.x server (HTTP only: set registry.nacos.protocol to http)"
                    ),
                "{other}"
            );
        }
    }
}
