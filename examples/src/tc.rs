//! The demo TC's front door, shared by the `tc-server` and `demo` programs.
//!
//! It answers what a Seata client sends a real TC on connect (RegisterTM / RegisterRM,
//! identified = 1 unless told to refuse; heartbeats are answered by the server helper)
//! and handles one demo request: any other request is echoed back with the head entry
//! `tc = <id>`, after `delay_ms` milliseconds when the request's head map asks for it
//! (the tests use that to keep calls in flight while a TC dies).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use meshline::rpc::message::register_reply;
use meshline::rpc::{InboundHandler, InboundRequest, Payload};

/// Longest `delay_ms` honoured, so a client cannot park a handler forever.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// Counters of one demo TC, for the programs' final report.
#[derive(Debug, Default)]
pub struct TcStats {
    /// Registrations answered.
    pub registrations: AtomicU64,
    /// Demo requests handled.
    pub requests: AtomicU64,
}

/// The request handler of demo TC `id`: answers registrations (refusing them when
/// `refuse_registration`, to exercise a client's handshake failure path) and echoes
/// everything else tagged `tc = <id>`, counting both in `stats`.
pub fn tc_handler(
    id: String,
    refuse_registration: bool,
    stats: Arc<TcStats>,
) -> impl InboundHandler {
    move |req: InboundRequest| {
        let id = id.clone();
        let stats = stats.clone();
        async move {
            if let Ok(msg) = req.payload.decode_seata()
                && let Some(reply) =
                    register_reply(&msg, !refuse_registration, env!("CARGO_PKG_VERSION"))
            {
                stats.registrations.fetch_add(1, Ordering::Relaxed);
                if refuse_registration {
                    tracing::info!(peer = %req.peer, "refusing registration (--refuse-registration)");
                } else {
                    tracing::debug!(peer = %req.peer, "client registered");
                }
                return match Payload::seata(&reply) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode registration reply");
                        None
                    }
                };
            }
            stats.requests.fetch_add(1, Ordering::Relaxed);
            if let Some(ms) = req
                .payload
                .head
                .get("delay_ms")
                .and_then(|v| v.parse::<u64>().ok())
            {
                tokio::time::sleep(Duration::from_millis(ms).min(MAX_DELAY)).await;
            }
            Some(req.payload.with_head("tc", id))
        }
    }
}
