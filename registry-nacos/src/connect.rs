//! What the registry and the configuration centre share to reach Nacos: the client
//! properties made from [`NacosSettings`] (server list, namespace, gRPC port, login)
//! and the error of a failed connect, which names the server and what a TCP connect to
//! its gRPC port said (or that the server speaks only Nacos 1.x HTTP).

use std::future::Future;

use meshline_registry_core::RegistryError;
use meshline_registry_core::config::Secret;
use meshline_registry_core::probe::ConnectFailure;
use nacos_sdk::api::props::ClientProps;

use crate::grpc::auth::Auth;
use crate::grpc::client::NamingClient;
use crate::grpc::server::Server;
use crate::http::V1Client;
use crate::http::call::Caller;
use crate::naming::Naming;
use crate::{CONNECT_TIMEOUT, KIND, NacosSettings, Protocol, REQUEST_TIMEOUT, address, probe};

/// Which of nacos-sdk's auth plugins the settings ask for.
pub(crate) enum Login {
    /// `username`/`password`: the HTTP login.
    Http,
    /// `accessKey`/`secretKey`: Aliyun's signature.
    Aliyun,
    /// No login.
    None,
}

/// Client properties and login for a Nacos service builder (naming or config).
pub(crate) struct Prepared {
    pub props: ClientProps,
    pub login: Login,
    /// The server as messages show it (with the gRPC port when set).
    pub server: String,
    addrs: address::ServerAddrs,
    grpc_port: Option<u16>,
    /// `username`/`password`, `accessKey`/`secretKey`, for our naming client.
    user: Option<(String, Secret)>,
    ram: Option<(String, Secret)>,
    namespace: String,
    app_name: String,
    protocol: Protocol,
}

/// Checks the addresses and TLS of `n` and makes the client properties.
pub(crate) fn prepare(n: &NacosSettings, app_name: &str) -> Result<Prepared, RegistryError> {
    crate::tls::check(&n.tls)?;
    let http_login = n.username.is_some() && n.password.is_some();
    let addrs = address::ServerAddrs::parse(
        &n.server_addr,
        n.context_path.as_deref(),
        cfg!(feature = "tls"),
        http_login,
    )?;
    crate::tls::check_plain(
        &n.server_addr,
        addrs.scheme != address::Scheme::Unspecified,
        &n.tls,
        cfg!(feature = "tls"),
    )?;
    if addrs.context_path != address::DEFAULT_CONTEXT_PATH {
        tracing::debug!(
            context_path = %addrs.context_path,
            "nacos contextPath: no effect on gRPC (used only to check for Nacos 1.x)"
        );
    }
    let mut props = ClientProps::new()
        .server_addr(addrs.sdk_list.clone())
        .namespace(n.namespace.clone())
        .app_name(app_name.to_string())
        .env_first(false);
    if let Some(p) = n.grpc_port {
        props = props.remote_grpc_port(p);
    }
    let login = if let (Some(u), Some(p)) = (&n.username, &n.password) {
        props = props
            .auth_username(u.clone())
            .auth_password(p.expose().to_string());
        Login::Http
    } else if let (Some(ak), Some(sk)) = (&n.access_key, &n.secret_key) {
        props = props
            .auth_access_key(ak.clone())
            .auth_access_secret(sk.expose().to_string());
        Login::Aliyun
    } else {
        Login::None
    };
    let server = match n.grpc_port {
        Some(p) => format!("{} (gRPC port {p})", n.server_addr),
        None => n.server_addr.clone(),
    };
    Ok(Prepared {
        props,
        login,
        server,
        addrs,
        grpc_port: n.grpc_port,
        user: n.username.clone().zip(n.password.clone()),
        ram: n.access_key.clone().zip(n.secret_key.clone()),
        namespace: n.namespace.clone(),
        app_name: app_name.to_string(),
        protocol: n.protocol,
    })
}

impl Prepared {
    /// Connects the naming client `registry.nacos.protocol` asks for (`auto`: the one
    /// the server's version calls for, see [`Protocol`]).
    pub(crate) async fn naming(&self, server: &str) -> Result<Naming, RegistryError> {
        let http = match self.protocol {
            Protocol::Http => true,
            Protocol::Grpc => false,
            Protocol::Auto => match probe::version(&self.addrs).await {
                Some(v) if v.starts_with("1.") => {
                    tracing::info!(registry = KIND, version = %v, "Nacos 1.x: the registry speaks its v1 HTTP API");
                    true
                }
                _ => false,
            },
        };
        if http {
            self.v1(server).await.map(Naming::Http)
        } else {
            self.grpc(server).await.map(Naming::Grpc)
        }
    }

    /// Each server of `serverAddr`.
    fn servers(&self, tls: bool) -> Vec<Server> {
        self.addrs
            .hosts()
            .into_iter()
            .map(|(host, http_port)| Server {
                // `[v6]` as written; the client brackets it where an address needs it.
                host: host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .map(str::to_string)
                    .unwrap_or(host),
                http_port,
                grpc_port: self
                    .grpc_port
                    .unwrap_or_else(|| http_port.saturating_add(1000)),
                tls,
            })
            .collect()
    }

    /// Our gRPC naming client ([`crate::grpc`]) on these servers, in the configured
    /// namespace (each request can name another: `nearby` reads other namespaces on
    /// the same connection). Every server is TLS in a build with the `tls` feature, as
    /// nacos-sdk's are.
    async fn grpc(&self, server: &str) -> Result<NamingClient, RegistryError> {
        let tls = cfg!(feature = "tls");
        let servers = self.servers(tls);
        let auth = self.auth(tls)?;
        let connect = NamingClient::connect(
            servers,
            self.namespace.clone(),
            self.app_name.clone(),
            auth,
            CONNECT_TIMEOUT,
        );
        self.build(server, connect).await
    }

    /// The Nacos 1.x client ([`crate::http`]) on these servers' HTTP ports, once one
    /// answers.
    async fn v1(&self, server: &str) -> Result<V1Client, RegistryError> {
        let tls = self.addrs.scheme == address::Scheme::Https
            || (self.addrs.scheme == address::Scheme::Unspecified && cfg!(feature = "tls"));
        let namespace = if self.namespace.is_empty() {
            "public".to_string()
        } else {
            self.namespace.clone()
        };
        let fail =
            |e: crate::grpc::Error| crate::nacos_err(server, "connect (Nacos v1 HTTP API)", e);
        let caller = Caller::new(
            self.servers(tls),
            if tls { "https" } else { "http" },
            self.addrs.context_path.clone(),
            namespace,
            self.app_name.clone(),
            self.auth(tls)?,
            REQUEST_TIMEOUT,
        )
        .map_err(fail)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, V1Client::connect(caller)).await {
            Ok(r) => r.map_err(fail),
            Err(_) => Err(fail(crate::grpc::Error::NotConnected(format!(
                "no server answered within {CONNECT_TIMEOUT:?}"
            )))),
        }
    }

    /// The login or signature the settings ask for.
    fn auth(&self, tls: bool) -> Result<Auth, RegistryError> {
        Auth::new(
            self.user.as_ref().map(|(u, p)| (u.as_str(), p.expose())),
            self.ram.as_ref().map(|(a, s)| (a.as_str(), s.expose())),
            tls,
        )
        .map_err(|e| RegistryError::Config(format!("registry.nacos: {e}")))
    }

    /// Awaits a service builder's `build()` for at most [`CONNECT_TIMEOUT`]; on failure,
    /// probes the servers and returns the error naming the server and the cause.
    pub(crate) async fn build<T, E>(
        &self,
        server: &str,
        build: impl Future<Output = Result<T, E>>,
    ) -> Result<T, RegistryError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let (what, source) = match tokio::time::timeout(CONNECT_TIMEOUT, build).await {
            Ok(Ok(service)) => return Ok(service),
            Ok(Err(e)) => (e.to_string(), Some(Box::new(e) as _)),
            Err(_) => (format!("not connected within {CONNECT_TIMEOUT:?}"), None),
        };
        let probe = probe::probe_servers(&self.addrs, self.grpc_port).await;
        Err(RegistryError::backend(
            KIND,
            server.to_string(),
            "connect",
            ConnectFailure {
                what,
                probe,
                source,
            },
        ))
    }
}
