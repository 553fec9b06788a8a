//! The connections to the configured Redis servers: one shared multiplexed command
//! connection with failover between servers ([`Servers::run`]), and pub/sub connections
//! for watches. Separate because failover is its own concern, independent of the layout
//! and of what the commands do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use meshline_registry_core::{Instance, RegistryError};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use super::{KIND, RedisSettings};
use crate::common::split_addrs;
use crate::tls::tls_feature;

fn redis_err(server: &str, op: &str, e: redis::RedisError) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), e)
}

/// True when the connection should be dropped and the next server tried.
fn connection_broken(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.code() == Some("READONLY")
}

/// "no server answered: <why>", naming each server's failure when there are several.
fn no_server_answered(addrs: &[String], failures: &[(usize, impl std::fmt::Display)]) -> String {
    match failures {
        [] => "no server configured".to_string(),
        [(_, why)] => format!("no server answered: {why}"),
        many => {
            let each: Vec<String> = many
                .iter()
                .map(|(i, why)| format!("{}: {why}", addrs[*i]))
                .collect();
            format!("no server answered: {}", each.join("; "))
        }
    }
}

/// A TLS client of `info` (a `TcpTls` address) with the CA, identity of `m`.
#[cfg(feature = "redis-tls")]
fn tls_client(
    info: redis::ConnectionInfo,
    m: &meshline_registry_core::tls::TlsMaterial,
) -> Result<redis::Client, redis::RedisError> {
    crate::tls::ensure_crypto_provider();
    redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls: m.identity.as_ref().map(|(c, k)| redis::ClientTlsConfig {
                client_cert: c.clone(),
                client_key: k.clone(),
            }),
            root_cert: m.ca_pem.clone(),
        },
    )
}

/// Connections to the configured servers, with failover between them.
pub(super) struct Servers {
    clients: Vec<redis::Client>,
    pub(super) addrs: Vec<String>,
    timeout: Duration,
    current: tokio::sync::Mutex<Option<(usize, MultiplexedConnection)>>,
    next: AtomicUsize,
}

impl Servers {
    pub(super) fn new(config: &RedisSettings) -> Result<Self, RegistryError> {
        let addrs = split_addrs(&config.server_addr);
        if addrs.is_empty() {
            return Err(RegistryError::Config(
                "registry.redis.serverAddr is empty: give host:port, e.g. 127.0.0.1:6379".into(),
            ));
        }
        let mut tls = config.tls.clone();
        if let Some(a) = addrs.iter().find(|a| a.starts_with("rediss://")) {
            tls.asked_by_url(a);
        }
        let material = crate::tls::prepare(&tls, KIND, "redis", tls_feature!("redis-tls"))?;
        #[cfg(feature = "redis-tls")]
        if let Some(m) = &material {
            crate::tls::refuse_server_name(m, "redis")?;
        }
        let mut clients = Vec::with_capacity(addrs.len());
        for a in &addrs {
            if material.is_some() && a.starts_with("redis://") {
                return Err(RegistryError::Config(format!(
                    "registry.redis.serverAddr entry `{a}` is plain redis:// but TLS is \
                     configured: write rediss:// or host:port"
                )));
            }
            let addr = a
                .strip_prefix("redis://")
                .or_else(|| a.strip_prefix("rediss://"))
                .unwrap_or(a)
                .trim_end_matches('/');
            let inst = Instance::parse(addr).map_err(|e| {
                RegistryError::Config(format!("registry.redis.serverAddr entry `{a}`: {e}"))
            })?;
            let mut redis_info = RedisConnectionInfo::default().set_db(config.db);
            if let Some(u) = &config.username {
                redis_info = redis_info.set_username(u);
            }
            if let Some(p) = &config.password {
                redis_info = redis_info.set_password(p.expose());
            }
            let host = inst.host().to_string();
            let conn_addr = match &material {
                Some(_) => ConnectionAddr::TcpTls {
                    host,
                    port: inst.port(),
                    insecure: false,
                    tls_params: None,
                },
                None => ConnectionAddr::Tcp(host, inst.port()),
            };
            let info = conn_addr
                .into_connection_info()
                .map_err(|e| redis_err(a, "configure", e))?
                .set_redis_settings(redis_info);
            let client = match &material {
                #[cfg(feature = "redis-tls")]
                Some(m) => tls_client(info, m).map_err(|e| redis_err(a, "configure TLS", e))?,
                _ => redis::Client::open(info).map_err(|e| redis_err(a, "configure", e))?,
            };
            clients.push(client);
        }
        Ok(Servers {
            clients,
            addrs,
            timeout: config.command_timeout.max(Duration::from_millis(100)),
            current: tokio::sync::Mutex::new(None),
            next: AtomicUsize::new(0),
        })
    }

    /// The shared command connection, opening one (trying each server in turn) if needed.
    async fn conn(&self) -> Result<(usize, MultiplexedConnection), RegistryError> {
        let mut cur = self.current.lock().await;
        if let Some((i, c)) = cur.as_ref() {
            return Ok((*i, c.clone()));
        }
        let n = self.clients.len();
        let start = self.next.load(Ordering::Relaxed);
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match self.clients[i]
                .get_multiplexed_async_connection_with_config(&cfg)
                .await
            {
                Ok(c) => {
                    if !failures.is_empty() {
                        tracing::info!(registry = KIND, server = %self.addrs[i], "connected to redis");
                    }
                    *cur = Some((i, c.clone()));
                    self.next.store(i, Ordering::Relaxed);
                    return Ok((i, c));
                }
                Err(e) => failures.push((i, e)),
            }
        }
        if let Some((i, _)) = failures.last() {
            self.next.store((i + 1) % n, Ordering::Relaxed);
        }
        Err(RegistryError::unavailable(
            KIND,
            self.addrs.join(","),
            no_server_answered(&self.addrs, &failures),
        ))
    }

    async fn drop_conn(&self, idx: usize) {
        let mut cur = self.current.lock().await;
        if matches!(cur.as_ref(), Some((i, _)) if *i == idx) {
            *cur = None;
            self.next
                .store((idx + 1) % self.clients.len(), Ordering::Relaxed);
        }
    }

    /// Runs `cmd`, built once, with [`run`](Self::run)'s failover, reading its answer
    /// as `T`.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, RegistryError> {
        self.run(
            op,
            |mut c| async move { cmd.query_async::<T>(&mut c).await },
        )
        .await
    }

    /// Runs one command (or pipeline) with failover: a broken connection is dropped and
    /// the command tried once more on a fresh one.
    pub(super) async fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, RegistryError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            let (idx, conn) = self.conn().await?;
            match tokio::time::timeout(self.timeout, f(conn)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if connection_broken(&e) => {
                    self.drop_conn(idx).await;
                    if attempt == 0 {
                        attempt += 1;
                        continue;
                    }
                    return Err(redis_err(&self.addrs[idx], op, e));
                }
                Ok(Err(e)) => return Err(redis_err(&self.addrs[idx], op, e)),
                Err(_) => {
                    self.drop_conn(idx).await;
                    return Err(RegistryError::timeout(
                        KIND,
                        &self.addrs[idx],
                        op,
                        self.timeout,
                    ));
                }
            }
        }
    }

    /// A pub/sub connection to the first server that answers, starting at the current one.
    pub(super) async fn pubsub(&self) -> Result<redis::aio::PubSub, RegistryError> {
        let n = self.clients.len();
        let start = self.next.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match tokio::time::timeout(self.timeout, self.clients[i].get_async_pubsub()).await {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(e)) => failures.push((i, e.to_string())),
                Err(_) => failures.push((i, format!("no answer within {:?}", self.timeout))),
            }
        }
        Err(RegistryError::unavailable(
            KIND,
            self.addrs.join(","),
            format!("pub/sub: {}", no_server_answered(&self.addrs, &failures)),
        ))
    }
}
