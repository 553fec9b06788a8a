//! One request of the Nacos 1.x open API, to the first server of `serverAddr` that
//! answers.
//!
//! As Nacos 1.x's Java client sends them (`NamingProxy.reqApi`): every parameter in the
//! query string (the beat's body is the only form), `namespaceId` and `app` always, and
//! the login's `accessToken` (or the RAM signature's `ak`, `data`, `signature`) as
//! query parameters too. A server that cannot be reached or answers 5xx is left for
//! the next one, and the next request starts at the one that answered last; an answer
//! of 4xx is the server's verdict on the request and is returned as it is (403: refused
//! by its auth, which the registry names with the keys to check).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;

use crate::grpc::Error;
use crate::grpc::auth::Auth;
use crate::grpc::server::Server;

/// The most of an answer read: a service list of a few thousand instances.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// How one request is sent: the servers, the login and the HTTP client.
pub(crate) struct Caller {
    pub(crate) servers: Vec<Server>,
    /// `http` or `https`.
    pub(crate) scheme: &'static str,
    /// Without slashes (`nacos`).
    pub(crate) context_path: String,
    pub(crate) namespace: String,
    pub(crate) app_name: String,
    pub(crate) auth: Auth,
    pub(crate) http: reqwest::Client,
    /// The server that answered last.
    current: AtomicUsize,
}

/// One request: method, path under `/<contextPath>/v1/`, query and form.
pub(crate) struct Request<'a> {
    pub(crate) method: Method,
    pub(crate) path: &'a str,
    pub(crate) query: Vec<(&'a str, String)>,
    pub(crate) form: Option<Vec<(&'a str, String)>>,
    /// The grouped service the request is about (`group@@service`), for a RAM
    /// signature; empty for none.
    pub(crate) group: &'a str,
    pub(crate) service: &'a str,
}

impl Caller {
    /// A caller for `servers`; `timeout` bounds each HTTP exchange.
    pub(crate) fn new(
        servers: Vec<Server>,
        scheme: &'static str,
        context_path: String,
        namespace: String,
        app_name: String,
        auth: Auth,
        timeout: Duration,
    ) -> Result<Caller, Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("meshline-nacos-v1/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Transport(e.to_string()))?;
        Ok(Caller {
            servers,
            scheme,
            context_path,
            namespace,
            app_name,
            auth,
            http,
            current: AtomicUsize::new(0),
        })
    }

    /// Sends `req` to the server that answered last, then to each other in turn, and
    /// returns the first answer that is not a server failure.
    pub(crate) async fn send(&self, req: &Request<'_>) -> Result<Vec<u8>, Error> {
        let n = self.servers.len();
        let first = self.current.load(Ordering::Relaxed) % n.max(1);
        let mut last = Error::NotConnected("no server address".into());
        for i in 0..n {
            let at = (first + i) % n;
            match self.send_to(&self.servers[at], req).await {
                Ok(body) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(body);
                }
                Err(e @ Error::Refused { .. }) => return Err(e),
                Err(e) => {
                    tracing::debug!(registry = "nacos", server = %self.servers[at].authority(self.servers[at].http_port), error = %e, "nacos v1 request failed; next server");
                    last = e;
                }
            }
        }
        Err(last)
    }

    async fn send_to(&self, server: &Server, req: &Request<'_>) -> Result<Vec<u8>, Error> {
        self.auth.refresh(server).await;
        let url = format!(
            "{}://{}/{}/v1/{}",
            self.scheme,
            server.authority(server.http_port),
            self.context_path,
            req.path
        );
        let mut query: Vec<(String, String)> = vec![("app".into(), self.app_name.clone())];
        // A request about another namespace (`nearby`) names it itself.
        if !req.query.iter().any(|(k, _)| *k == "namespaceId") {
            query.push(("namespaceId".into(), self.namespace.clone()));
        }
        query.extend(req.query.iter().map(|(k, v)| (k.to_string(), v.clone())));
        query.extend(self.auth.headers(req.group, req.service));
        let mut builder = self
            .http
            .request(req.method.clone(), &url)
            .query(&query)
            .header("Request-Module", "Naming");
        if let Some(form) = &req.form {
            builder = builder.form(form);
        }
        // reqwest's error names the URL, whose query holds the access token: say what
        // failed without it.
        let answer = builder
            .send()
            .await
            .map_err(|e| Error::Transport(transport_reason(&e)))?;
        let status = answer.status();
        let body = read_capped(answer).await?;
        if status.is_success() {
            return Ok(body);
        }
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        if status.is_server_error() {
            return Err(Error::Transport(format!("HTTP {status}: {text}")));
        }
        Err(Error::Refused {
            code: i32::from(status.as_u16()),
            message: text,
        })
    }
}

/// What failed in an HTTP exchange, without its URL (which carries the token).
fn transport_reason(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connect failed"
    } else {
        "request failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {cause}")
    }
}

/// The answer's body, refused past [`MAX_BODY`].
async fn read_capped(mut answer: reqwest::Response) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    while let Some(chunk) = answer
        .chunk()
        .await
        .map_err(|e| Error::Transport(format!("reading the answer: {}", transport_reason(&e))))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(Error::Answer(format!(
                "an answer larger than {MAX_BODY} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
