//! Deadlines, retries and error mapping for etcd calls: every unary call and stream
//! opening goes through [`timed`], and every etcd-client error becomes a
//! [`RegistryError`] that keeps its cause. Separate because the lease keeper, the
//! watches and the registry operations all share it.

use std::time::Duration;

use meshline_registry_core::RegistryError;

use crate::KIND;

pub(crate) fn backend_err(server: &str, op: &str, e: etcd_client::Error) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), EtcdError(e))
}

/// An etcd-client error with its cause exposed: etcd-client's own error type does not
/// implement `source()`, and its `Display` for a transport error is only "transport
/// error: transport error", so "Connection refused" would be lost.
#[derive(Debug)]
struct EtcdError(etcd_client::Error);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            // tonic's transport error says only "transport error"; its causes follow.
            etcd_client::Error::TransportError(_) => f.write_str("transport error"),
            // tonic's status text ends with its source's `Debug` form; the source
            // follows as a cause instead.
            etcd_client::Error::GRpcStatus(s) => {
                write!(f, "gRPC status {:?}", s.code())?;
                if !s.message().is_empty() {
                    write!(f, ": {}", s.message())?;
                }
                Ok(())
            }
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            etcd_client::Error::TransportError(e) => std::error::Error::source(e),
            etcd_client::Error::GRpcStatus(s) => std::error::Error::source(s),
            etcd_client::Error::IoError(e) => std::error::Error::source(e),
            etcd_client::Error::InvalidUri(e) => Some(e),
            _ => None,
        }
    }
}

/// True for errors worth retrying at once on another endpoint (a member that is down,
/// a connection that broke).
fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic_code_unavailable(),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

fn tonic_code_unavailable() -> tonic::Code {
    tonic::Code::Unavailable
}

/// Runs the call made by `f` against `server` (the endpoint list, for error messages)
/// with a deadline (the balanced gRPC channel waits forever when no endpoint is
/// reachable), retrying transient failures within it: with several endpoints, a request
/// routed to a dead member fails fast and the next attempt goes elsewhere.
///
/// When the deadline passes after transient failures, the error is the last failure
/// (a refused connection says why), not a bare timeout.
pub(crate) async fn timed<T, F, Fut>(
    server: &str,
    op: &'static str,
    after: Duration,
    mut f: F,
) -> Result<T, RegistryError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + after;
    let mut attempt = 0u32;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let pause = (Duration::from_millis(20) * 2u32.pow(attempt.min(4)))
                    .min(Duration::from_millis(200));
                if transient(&e) && tokio::time::Instant::now() + pause < deadline {
                    attempt += 1;
                    last = Some(e);
                    tokio::time::sleep(pause).await;
                    continue;
                }
                return Err(backend_err(server, op, e));
            }
            Err(_) => {
                return Err(match last {
                    Some(e) => backend_err(
                        server,
                        &format!("{op}: no answer within {after:?}, last failure"),
                        e,
                    ),
                    None => RegistryError::timeout(KIND, server, op, after),
                });
            }
        }
    }
}
