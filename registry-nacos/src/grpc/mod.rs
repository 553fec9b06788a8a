//! Our own Nacos 2 naming client over gRPC (see [`client`] for why it is not
//! nacos-sdk's): [`proto`] the two protobuf messages, [`wire`] the JSON bodies,
//! [`auth`] login and signatures, [`server`] one server of the list, [`conn`] one
//! connection, [`client`] the client's calls, `shared` what the client and its supervisor share
//! (the connection's state, what is redone), `verify` the check
//! that the server still lists what the client registered, and `supervisor` the task
//! that keeps one connection live and moves it when it dies.

pub(crate) mod auth;
pub(crate) mod client;
pub(crate) mod conn;
pub(crate) mod proto;
pub(crate) mod server;
pub(crate) mod shared;
mod supervisor;
mod verify;
pub(crate) mod wire;

pub use supervisor::{HEALTH_PERIOD, HEALTH_TIMEOUT, HEALTH_TRIES};
pub use verify::VERIFY_PERIOD;
pub use wire::ServiceInstance;

/// Locks `m`, also after a panic elsewhere poisoned it (what it guards stays valid
/// between statements: plain maps and options).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a naming request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a failure (`errorCode` 403: refused by its auth; 301:
    /// it does not know the connection).
    #[error("refused by the server (error code {code}): {message}")]
    Refused {
        /// Nacos' `errorCode`.
        code: i32,
        /// Nacos' message.
        message: String,
    },
    /// The connection failed (reset, closed, TLS, no route).
    #[error("{0}")]
    Transport(String),
    /// No live connection: no server answered (the last error).
    #[error("not connected: {0}")]
    NotConnected(String),
    /// An answer that does not parse.
    #[error("unexpected answer: {0}")]
    Answer(String),
    /// The client was dropped.
    #[error("the client is closed")]
    Closed,
}
