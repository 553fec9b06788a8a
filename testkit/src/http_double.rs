//! The runner shared by the in-process HTTP doubles (Consul, Eureka).
//!
//! Each double runs on its own OS thread with its own single-threaded tokio runtime, so
//! it works from sync tests and from any async runtime alike, and so that stopping it is
//! a hard stop: dropping the runtime drops every open connection (blocking queries
//! included), exactly like a killed agent. A restart binds the same port again with a
//! brand-new, empty state (a registry restarted without persistence).
//!
//! Tests can make chosen requests fail ([`Faults`]): a double then answers them with a
//! given status and leaves its state alone, as a registry that refuses or breaks one
//! kind of call (a deregistration) while the rest works. Faults survive restarts.
//!
//! Also here: the few request helpers both doubles use the same way (a poison-tolerant
//! lock, a query-string lookup) and Go's duration syntax, which Consul speaks.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot, watch};

use crate::{Error, Result, io_err};

/// What a double hands the runner on each start: its router (holding fresh state) and
/// the background work (TTL expiry, eviction...) to run next to it.
pub(crate) struct Built {
    pub router: axum::Router,
    pub background: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// Builds a double's router and background work on fresh state; called on each start.
type Build = Box<dyn Fn() -> Built + Send + Sync>;

/// A running or stopped in-process HTTP server on a fixed port.
pub(crate) struct HttpDouble {
    name: &'static str,
    addr: SocketAddr,
    build: Build,
    /// Serve HTTPS with this configuration (see [`HttpDouble::start_tls`]).
    tls: Option<Arc<rustls::ServerConfig>>,
    faults: Faults,
    running: Option<Running>,
}

/// Requests a double answers with an injected status instead of serving them (see
/// [`HttpDouble::fail`]). Shared by every start of one double.
#[derive(Clone, Default)]
pub(crate) struct Faults {
    rules: Arc<Mutex<Vec<Fault>>>,
}

#[derive(Clone)]
struct Fault {
    method: axum::http::Method,
    path_prefix: String,
    status: axum::http::StatusCode,
}

impl Faults {
    /// The status to answer `method path` with, if a rule matches.
    fn matching(&self, method: &axum::http::Method, path: &str) -> Option<axum::http::StatusCode> {
        lock(&self.rules)
            .iter()
            .find(|f| f.method == method && path.starts_with(&f.path_prefix))
            .map(|f| f.status)
    }
}

/// The middleware applying [`Faults`]: a matching request is answered with its status
/// and a short body naming the injection, and never reaches the double's handlers.
async fn apply_faults(
    axum::extract::State(faults): axum::extract::State<Faults>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match faults.matching(req.method(), req.uri().path()) {
        Some(status) => (status, "fault injected by the test").into_response(),
        None => next.run(req).await,
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl HttpDouble {
    /// Binds `127.0.0.1:port` (0 = any free port) and starts serving what `build`
    /// makes; `build` is called again, for fresh state, on each restart.
    pub(crate) fn start(
        name: &'static str,
        port: u16,
        build: impl Fn() -> Built + Send + Sync + 'static,
    ) -> Result<Self> {
        Self::start_tls(name, port, None, build)
    }

    /// [`HttpDouble::start`], serving HTTPS with `tls` when given (restarts too).
    pub(crate) fn start_tls(
        name: &'static str,
        port: u16,
        tls: Option<Arc<rustls::ServerConfig>>,
        build: impl Fn() -> Built + Send + Sync + 'static,
    ) -> Result<Self> {
        let listener = bind(name, port)?;
        let addr = listener
            .local_addr()
            .map_err(io_err(format!("{name}: read the bound address")))?;
        let mut d = HttpDouble {
            name,
            addr,
            build: Box::new(build),
            tls,
            faults: Faults::default(),
            running: None,
        };
        d.run(listener)?;
        Ok(d)
    }

    fn run(&mut self, listener: TcpListener) -> Result<()> {
        let Built { router, background } = (self.build)();
        let router = router.layer(axum::middleware::from_fn_with_state(
            self.faults.clone(),
            apply_faults,
        ));
        let (stop, stop_rx) = oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_err(format!("{}: build a tokio runtime", self.name)))?;
        let name = self.name;
        let tls = self.tls.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-double"))
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("{name} double: cannot use the listener: {e}");
                            return;
                        }
                    };
                    tokio::spawn(background);
                    let serve: Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> = match tls
                    {
                        None => Box::pin(axum::serve(listener, router).into_future()),
                        Some(config) => Box::pin(
                            axum::serve(TlsListener::new(listener, config), router).into_future(),
                        ),
                    };
                    tokio::select! {
                        r = serve => {
                            if let Err(e) = r {
                                eprintln!("{name} double: server error: {e}");
                            }
                        }
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime here aborts every connection task: clients see
                // their sockets closed, as with a killed server.
                drop(rt);
            })
            .map_err(io_err(format!("{name}: spawn the server thread")))?;
        self.running = Some(Running { stop, thread });
        Ok(())
    }

    /// Stops serving and closes every connection. Idempotent.
    pub(crate) fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.stop.send(());
            let _ = r.thread.join();
        }
    }

    /// Stops (if running) and starts again on the same port with fresh state.
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.stop();
        // The port was ours a moment ago; SO_REUSEADDR (set by std on Unix) lets us
        // rebind at once. Retry for a while: the old socket may still be closing, and
        // on a busy machine another test's outgoing connection can hold the port as its
        // ephemeral source port for a moment (listeners bound to port 0 and client
        // sockets share one range).
        let mut last = None;
        for _ in 0..250 {
            match bind(self.name, self.addr.port()) {
                Ok(l) => return self.run(l),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(last.unwrap_or_else(|| Error::Other(format!("{}: cannot rebind", self.name))))
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// From now on, answers every `method` request whose path starts with
    /// `path_prefix` with `status` (its handlers and state untouched), until
    /// [`clear_faults`](Self::clear_faults). Kept across restarts.
    pub(crate) fn fail(&self, method: &str, path_prefix: &str, status: u16) -> Result<()> {
        let method = axum::http::Method::from_bytes(method.as_bytes())
            .map_err(|e| Error::Other(format!("{}: bad method `{method}`: {e}", self.name)))?;
        let status = axum::http::StatusCode::from_u16(status)
            .map_err(|e| Error::Other(format!("{}: bad status {status}: {e}", self.name)))?;
        lock(&self.faults.rules).push(Fault {
            method,
            path_prefix: path_prefix.to_string(),
            status,
        });
        Ok(())
    }

    /// Serves every request normally again.
    pub(crate) fn clear_faults(&self) {
        lock(&self.faults.rules).clear();
    }

    /// `https` when serving TLS, else `http`.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The `Debug` form of the public double type named `type_name` that wraps this.
    pub(crate) fn fmt_as(
        &self,
        type_name: &str,
        f: &mut std::fmt::Formatter<'_>,
    ) -> std::fmt::Result {
        f.debug_struct(type_name)
            .field("addr", &self.addr())
            .field("running", &self.is_running())
            .finish()
    }
}

impl Drop for HttpDouble {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TLS listener for axum: TCP accepts go on while handshakes run in their own tasks
/// (a client that never finishes its handshake blocks nobody); a failed handshake (a
/// client that does not trust our CA) is dropped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    done_tx: mpsc::UnboundedSender<(TlsIo, SocketAddr)>,
    done_rx: mpsc::UnboundedReceiver<(TlsIo, SocketAddr)>,
}

type TlsIo = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        TlsListener {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(config),
            done_tx,
            done_rx,
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                Some(done) = self.done_rx.recv() => return done,
                r = self.tcp.accept() => match r {
                    Ok((stream, addr)) => {
                        let acceptor = self.acceptor.clone();
                        let tx = self.done_tx.clone();
                        tokio::spawn(async move {
                            let limit = std::time::Duration::from_secs(10);
                            if let Ok(Ok(tls)) =
                                tokio::time::timeout(limit, acceptor.accept(stream)).await
                            {
                                let _ = tx.send((tls, addr));
                            }
                        });
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                },
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn bind(name: &str, port: u16) -> Result<TcpListener> {
    let l = TcpListener::bind(("127.0.0.1", port))
        .map_err(io_err(format!("{name}: bind 127.0.0.1:{port}")))?;
    l.set_nonblocking(true)
        .map_err(io_err(format!("{name}: set the listener non-blocking")))?;
    Ok(l)
}

/// Writes the public face of a double type that wraps one [`HttpDouble`] in a field
/// `server`: its `Debug`, `addr`, `stop`, `restart` and `is_running`, which only hand
/// over to the runner, so every double's tests drive an outage the same way.
///
/// With `start: "name", Options, build` too: `start` and `start_tls` for a double whose
/// whole state is made by `build(options)` on each start, and the fault injection
/// (`fail`, `clear_faults`).
macro_rules! http_double_face {
    ($double:ident) => {
        impl std::fmt::Debug for $double {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.server.fmt_as(stringify!($double), f)
            }
        }

        impl $double {
            /// The bound address.
            pub fn addr(&self) -> std::net::SocketAddr {
                self.server.addr()
            }

            /// Stops serving: every connection (held requests too) is closed, as when
            /// the server is killed.
            pub fn stop(&mut self) {
                self.server.stop();
            }

            /// Starts it again on the same port with **no** state (a server restarted
            /// without persistence).
            pub fn restart(&mut self) -> $crate::Result<()> {
                self.server.restart()
            }

            /// True between start/restart and stop.
            pub fn is_running(&self) -> bool {
                self.server.is_running()
            }
        }
    };
    ($double:ident, start: $name:literal, $opts:ty, $build:path) => {
        $crate::http_double::http_double_face!($double);

        impl $double {
            /// Starts the double on `127.0.0.1:<opts.port>`.
            pub fn start(opts: $opts) -> $crate::Result<Self> {
                Self::serve(opts, None)
            }

            /// Starts the double serving HTTPS with `tls` (e.g.
            /// [`TestPki::server_config`](crate::TestPki::server_config)); restarts serve
            /// HTTPS too.
            pub fn start_tls(
                opts: $opts,
                tls: std::sync::Arc<rustls::ServerConfig>,
            ) -> $crate::Result<Self> {
                Self::serve(opts, Some(tls))
            }

            fn serve(
                opts: $opts,
                tls: Option<std::sync::Arc<rustls::ServerConfig>>,
            ) -> $crate::Result<Self> {
                let port = opts.port;
                let server =
                    $crate::http_double::HttpDouble::start_tls($name, port, tls, move || {
                        $build(opts.clone())
                    })?;
                Ok($double { server })
            }

            /// Makes chosen calls fail: from now on every `method` request whose path
            /// starts with `path_prefix` is answered with `status` and changes nothing,
            /// until [`clear_faults`](Self::clear_faults); the other calls are served as
            /// usual. Kept across restarts. Errors on an invalid method or status.
            pub fn fail(&self, method: &str, path_prefix: &str, status: u16) -> $crate::Result<()> {
                self.server.fail(method, path_prefix, status)
            }

            /// Serves every call normally again.
            pub fn clear_faults(&self) {
                self.server.clear_faults()
            }
        }
    };
}
pub(crate) use http_double_face;

/// The end of a long poll (a watch the server holds open): 200 as soon as `moved`
/// holds after a change announced on `changes`, 304 when `hold` runs out first. The
/// caller subscribes before it checks whether the client is already behind, so no
/// change falls between that check and the wait.
pub(crate) async fn long_poll(
    mut changes: watch::Receiver<u64>,
    hold: std::time::Duration,
    moved: impl Fn() -> bool,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let waited = tokio::time::timeout(hold, async {
        while changes.changed().await.is_ok() {
            if moved() {
                return true;
            }
        }
        false
    })
    .await;
    match waited {
        Ok(true) => StatusCode::OK.into_response(),
        _ => StatusCode::NOT_MODIFIED.into_response(),
    }
}

/// Locks a double's state, going on after a panic in another handler (the state is
/// still the best answer a test can get).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The first value of `key` in a query string.
pub(crate) fn query_get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Parses a Go `time.ParseDuration` string (`10s`, `1m30s`, `250ms`, `1.5h`, `0`).
pub(crate) fn parse_go_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    if t == "0" {
        return Some(std::time::Duration::ZERO);
    }
    if t.is_empty() || t.starts_with('-') {
        return None;
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let mut rest = t;
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += n * secs;
    }
    std::time::Duration::try_from_secs_f64(total).ok()
}

/// Formats a duration as Go does for whole seconds / milliseconds (`2s`, `1500ms`).
pub(crate) fn go_duration_string(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "-1s", "1x", "1s2"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
        assert_eq!(go_duration_string(Duration::from_secs(2)), "2s");
        assert_eq!(go_duration_string(Duration::from_millis(1500)), "1500ms");
    }
}
