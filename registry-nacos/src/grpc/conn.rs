//! One gRPC connection to one Nacos server, and nothing more: Nacos 2 ties a client's
//! ephemeral registrations and subscriptions to the connection that made them (its
//! connection id is derived from the TCP connection), so a connection here is exactly
//! one TCP connection. Its channel cannot reconnect by itself (the connector hands out
//! one socket, once): when that socket is gone, the connection is dead, and the client
//! ([`super::client`]) opens a new one and redoes its registrations there.
//!
//! Opening is Nacos' own sequence: `ServerCheckRequest` (the connection id), the
//! stream with `ConnectionSetupRequest` as its first message, then health checks until
//! the server knows the connection (a request before that is refused with error 301).
//! The server's requests on the stream are answered: `ClientDetectionRequest` (rnacos
//! and Nacos drop a connection that does not), `NotifySubscriberRequest` (a push, handed
//! to the client), `ConnectResetRequest` (the server wants the client elsewhere: the
//! connection is declared dead) and `SetupAckRequest`.
//!
//! Dropping the last handle of a [`Conn`] ends its tasks and closes the socket, which is
//! how the server learns the client left (it then drops what this connection
//! registered).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::uri::PathAndQuery;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

use super::proto::{Payload, STREAM_PATH, UNARY_PATH};
use super::server::Server;
use super::wire::{Outcome, ServerCheck, ServerRequest, WithServiceInfo};
use super::{Error, lock};

/// How long opening a connection (TCP, TLS, server check, setup) may take.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(3);
/// How many health checks confirm a new connection before it is given up.
const SETUP_CHECKS: u32 = 5;

/// What the setup message says about the client.
pub(crate) struct Setup {
    /// The namespace (`tenant`).
    pub(crate) namespace: String,
    /// `AppName` label.
    pub(crate) app_name: String,
}

/// Where the server's pushes go.
pub(crate) type PushFn = Arc<dyn Fn(super::wire::ServiceInfo) + Send + Sync>;

/// One open connection. See the [module docs](self).
pub(crate) struct Conn {
    pub(crate) server: Server,
    /// The server's id of this connection.
    pub(crate) id: String,
    channel: Channel,
    client_ip: String,
    /// Cancelled when the connection is dead; `why` says why.
    /// Shared with the stream's task, which declares it when the stream ends.
    death: Arc<Death>,
    reader: tokio::task::AbortHandle,
}

/// Whether a connection is dead, and why: the first reason given is kept.
#[derive(Default)]
struct Death {
    dead: CancellationToken,
    why: Mutex<Option<String>>,
}

impl Death {
    fn declare(&self, why: String) {
        lock(&self.why).get_or_insert(why);
        self.dead.cancel();
    }

    fn why(&self) -> Option<String> {
        lock(&self.why).clone()
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("server", &self.server.to_string())
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Opens a connection to `server` (bounded by the caller; see [`OPEN_TIMEOUT`]).
    pub(crate) async fn open(
        server: &Server,
        setup: &Setup,
        headers: HashMap<String, String>,
        push: PushFn,
    ) -> Result<Arc<Conn>, Error> {
        let (channel, local) = connect_once(server).await?;
        let client_ip = local.map(|ip| ip.to_string()).unwrap_or_default();
        let check = unary(
            &channel,
            Payload::new(
                "ServerCheckRequest",
                &client_ip,
                headers.clone(),
                json!({"headers": {}, "requestId": null})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await?;
        let id = serde_json::from_slice::<ServerCheck>(check.json())
            .ok()
            .and_then(|c| c.connection_id)
            .unwrap_or_default();

        let (to_server, from_us) = mpsc::channel::<Payload>(64);
        let setup_body = json!({
            "clientVersion": concat!("Nacos-Rust-Client:meshline-", env!("CARGO_PKG_VERSION")),
            "abilities": {
                "remoteAbility": {"supportRemoteConnection": true},
                "configAbility": {"supportRemoteMetrics": false},
                "namingAbility": {"supportDeltaPush": false, "supportRemoteMetric": false}
            },
            "tenant": setup.namespace,
            "labels": {"source": "sdk", "module": "naming", "AppName": setup.app_name},
            "headers": headers,
            "requestId": null,
        });
        let first = Payload::new(
            "ConnectionSetupRequest",
            &client_ip,
            headers.clone(),
            setup_body.to_string().into_bytes(),
        );
        // The channel is new and has room: this cannot wait.
        to_server
            .try_send(first)
            .map_err(|e| Error::Transport(format!("the setup message was not queued: {e}")))?;
        let death = Arc::new(Death::default());
        let reader = tokio::spawn(read_stream(
            channel.clone(),
            from_us,
            to_server,
            client_ip.clone(),
            push,
            death.clone(),
        ));
        let conn = Arc::new(Conn {
            server: server.clone(),
            id,
            channel,
            client_ip,
            death,
            reader: reader.abort_handle(),
        });
        // Health checks until the server has taken the setup.
        let mut last = None;
        for i in 0..SETUP_CHECKS {
            if conn.is_dead() {
                break;
            }
            match conn.health_check().await {
                Ok(()) => return Ok(conn),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(50 << i)).await;
        }
        Err(match (conn.death.why(), last) {
            (Some(r), _) => Error::Transport(r),
            (None, Some(e)) => e,
            (None, None) => Error::Transport("the connection ended during setup".into()),
        })
    }

    /// One request: `kind` with `body`; the answer's JSON when the server took it.
    pub(crate) async fn call(
        &self,
        kind: &str,
        headers: HashMap<String, String>,
        body: &serde_json::Value,
    ) -> Result<Vec<u8>, Error> {
        if self.is_dead() {
            return Err(Error::Transport(self.why()));
        }
        let payload = Payload::new(
            kind,
            &self.client_ip,
            headers,
            body.to_string().into_bytes(),
        );
        // A call on a connection declared dead (a health check went unanswered) ends
        // then, not at the caller's deadline: the client can retry it on the next one.
        let sent = tokio::select! {
            r = unary(&self.channel, payload) => r,
            _ = self.dead() => Err(Error::Transport(self.why())),
        };
        let answer = match sent {
            Ok(a) => a,
            Err(e) => {
                if let Error::Transport(t) = &e {
                    self.kill(t.clone());
                }
                return Err(e);
            }
        };
        tracing::trace!(registry = "nacos", kind, answer = %String::from_utf8_lossy(answer.json()), "nacos answer");
        let outcome: Outcome = serde_json::from_slice(answer.json())
            .map_err(|e| Error::Answer(format!("{kind}: {e}")))?;
        if answer.kind() == "ErrorResponse" || outcome.result_code != 200 {
            return Err(Error::Refused {
                code: outcome.error_code,
                message: outcome.message.unwrap_or_default(),
            });
        }
        Ok(answer.body.map(|b| b.value).unwrap_or_default())
    }

    /// A `HealthCheckRequest`.
    pub(crate) async fn health_check(&self) -> Result<(), Error> {
        self.call(
            "HealthCheckRequest",
            HashMap::new(),
            &json!({"headers": {}, "requestId": null}),
        )
        .await
        .map(|_| ())
    }

    /// Declares the connection dead (the first reason is kept).
    pub(crate) fn kill(&self, why: String) {
        self.death.declare(why);
        self.reader.abort();
    }

    /// True once the connection is dead.
    pub(crate) fn is_dead(&self) -> bool {
        self.death.dead.is_cancelled()
    }

    /// Resolves when the connection is dead.
    pub(crate) async fn dead(&self) {
        self.death.dead.cancelled().await
    }

    /// Why the connection is dead.
    pub(crate) fn why(&self) -> String {
        self.death
            .why()
            .unwrap_or_else(|| "the connection ended".to_string())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A channel over one TCP connection to `server` that never reconnects, and the
/// local address it was made from (the client's IP in Nacos' metadata).
async fn connect_once(server: &Server) -> Result<(Channel, Option<IpAddr>), Error> {
    let scheme = if server.tls { "https" } else { "http" };
    let uri = format!("{scheme}://{server}");
    #[allow(unused_mut)]
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| Error::Transport(format!("{uri}: {e}")))?
        .connect_timeout(OPEN_TIMEOUT)
        .tcp_nodelay(true);
    #[cfg(feature = "tls")]
    if server.tls {
        endpoint = endpoint
            .tls_config(tls_config()?)
            .map_err(|e| Error::Transport(format!("TLS: {e}")))?;
    }
    let used = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let local: Arc<Mutex<Option<IpAddr>>> = Arc::new(Mutex::new(None));
    let (host, port) = (server.host.clone(), server.grpc_port);
    let seen = local.clone();
    let connector = tower::service_fn(move |_: http::Uri| {
        let (used, host, seen) = (used.clone(), host.clone(), seen.clone());
        async move {
            if used.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "this Nacos connection is closed (the client opens a new one)",
                ));
            }
            let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            s.set_nodelay(true)?;
            *lock(&seen) = s.local_addr().ok().map(|a| a.ip());
            Ok(hyper_util::rt::TokioIo::new(s))
        }
    });
    let channel = endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|e| Error::Transport(chain(&e)))?;
    let ip = *lock(&local);
    Ok((channel, ip))
}

#[cfg(feature = "tls")]
fn tls_config() -> Result<tonic::transport::ClientTlsConfig, Error> {
    let mut c = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(path) = std::env::var_os(crate::tls::CA_ENV) {
        let pem = std::fs::read(&path).map_err(|e| {
            Error::Transport(format!(
                "reading {}: {e}",
                std::path::Path::new(&path).display()
            ))
        })?;
        c = c.ca_certificate(tonic::transport::Certificate::from_pem(pem));
    }
    Ok(c)
}

/// An error and its causes, as one line ("transport error: ...: Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// One unary call.
async fn unary(channel: &Channel, payload: Payload) -> Result<Payload, Error> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| Error::Transport(chain(&e)))?;
    let codec = tonic_prost::ProstCodec::<Payload, Payload>::default();
    grpc.unary(
        tonic::Request::new(payload),
        PathAndQuery::from_static(UNARY_PATH),
        codec,
    )
    .await
    .map(|r| r.into_inner())
    .map_err(|s| Error::Transport(status_text(&s)))
}

fn status_text(s: &tonic::Status) -> String {
    let mut t = format!("{:?}: {}", s.code(), s.message());
    if let Some(src) = std::error::Error::source(s) {
        t.push_str(": ");
        t.push_str(&chain(src));
    }
    t
}

/// The connection's stream: sends what `from_us` gives, answers the server's
/// requests, hands pushes to `push`; on its end, declares the connection's death.
async fn read_stream(
    channel: Channel,
    from_us: mpsc::Receiver<Payload>,
    to_server: mpsc::Sender<Payload>,
    client_ip: String,
    push: PushFn,
    death: Arc<Death>,
) {
    let end = |reason: String| death.declare(reason);
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        return end(chain(&e));
    }
    let codec = tonic_prost::ProstCodec::<Payload, Payload>::default();
    let outgoing = tokio_stream::wrappers::ReceiverStream::new(from_us);
    let mut incoming = match grpc
        .streaming(
            tonic::Request::new(outgoing),
            PathAndQuery::from_static(STREAM_PATH),
            codec,
        )
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => return end(format!("the stream did not open: {}", status_text(&s))),
    };
    loop {
        let p = match incoming.message().await {
            Ok(Some(p)) => p,
            Ok(None) => return end("the server ended the connection's stream".into()),
            Err(s) => {
                return end(format!(
                    "the connection's stream failed: {}",
                    status_text(&s)
                ));
            }
        };
        let answer = match p.kind() {
            "ClientDetectionRequest" => "ClientDetectionResponse",
            "SetupAckRequest" => "SetupAckResponse",
            "NotifySubscriberRequest" => {
                match serde_json::from_slice::<WithServiceInfo>(p.json()) {
                    Ok(w) => push(w.service_info),
                    Err(e) => {
                        tracing::warn!(registry = "nacos", error = %e, "skipping a push that does not parse")
                    }
                }
                "NotifySubscriberResponse"
            }
            "ConnectResetRequest" => {
                reply(&to_server, &client_ip, "ConnectResetResponse", &p).await;
                return end(
                    "the server asked the client to reconnect (ConnectResetRequest)".into(),
                );
            }
            other => {
                tracing::debug!(
                    registry = "nacos",
                    kind = other,
                    "ignoring a server request"
                );
                continue;
            }
        };
        if !reply(&to_server, &client_ip, answer, &p).await {
            return end("the connection's stream closed".into());
        }
    }
}

/// Answers the server's request `to` with a success of type `kind`.
async fn reply(
    to_server: &mpsc::Sender<Payload>,
    client_ip: &str,
    kind: &str,
    to: &Payload,
) -> bool {
    let id = serde_json::from_slice::<ServerRequest>(to.json())
        .ok()
        .and_then(|r| r.request_id);
    let body = json!({"resultCode": 200, "errorCode": 0, "success": true, "requestId": id});
    to_server
        .send(Payload::new(
            kind,
            client_ip,
            HashMap::new(),
            body.to_string().into_bytes(),
        ))
        .await
        .is_ok()
}
