//! The Consul configuration centre client (`config.type=consul`): [`ConsulCentre`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use meshline_registry_core::centre::ConfigCentre;
use meshline_registry_core::config::ConfigError;
use meshline_registry_core::{Config, RegistryError};
use reqwest::{Method, StatusCode};
use tokio::sync::mpsc;

use super::agent::{Agent, CallError, REQUEST_TIMEOUT};
use super::follow::{BLOCKING_MARGIN, BLOCKING_WAIT, next_index};
use super::{ConsulSettings, KIND};
use crate::common::Call;

/// `config.type=consul`: Seata's configuration in Consul's KV store, as
/// `ConsulConfiguration` (`config/seata-config-consul`) keeps it.
///
/// - The blob is the KV key `config.consul.key` (default `seata.properties`); a single
///   Seata key is the KV key of the same name (`service.vgroupMapping.my_group`).
/// - A value is read with `GET /v1/kv/<key>?raw` (the stored bytes as they are, the
///   same text Seata's client decodes from the base64 `Value`); a 404 is an absent key,
///   and so are an empty value and one that is not UTF-8 (with a warning).
/// - The connection keys are the registry's (`serverAddr`, `aclToken` sent as
///   `X-Consul-Token`, `tls.*`, `maxBodyBytes`), read from `config.consul.*` by the
///   same [`ConsulSettings`] code and the same agent connection.
///
/// Changes are followed as Seata's `ConsulListener` does, with one blocking query per
/// key (`?index=<last X-Consul-Index>&wait=30s`), under Consul's index rules (the same
/// as the registry's watches: an index that goes backwards means a restarted agent and
/// is read afresh). A query that fails (the agent is unreachable) stops every follower:
/// the notification channel closes and [`LiveConfig`] re-reads and follows again.
///
/// [`LiveConfig`]: meshline_registry_core::centre::LiveConfig
pub struct ConsulCentre {
    agent: Arc<Agent>,
}

impl std::fmt::Debug for ConsulCentre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsulCentre")
            .field("agent", &self.agent.server())
            .finish()
    }
}

/// The path segments of KV key `key` (`a/b` is two segments, as Consul nests keys).
fn kv_path(key: &str) -> Vec<&str> {
    let mut segments = vec!["v1", "kv"];
    segments.extend(key.split('/'));
    segments
}

/// The value of one KV read, and the index it answered with.
struct KvRead {
    value: Option<String>,
    index: u64,
}

impl Agent {
    /// `GET /v1/kv/<key>?raw`, blocking when `block` is given.
    async fn kv_get(&self, key: &str, block: Option<u64>) -> Result<KvRead, String> {
        let mut q = vec![("raw", String::new())];
        let mut timeout = REQUEST_TIMEOUT;
        if let Some(index) = block {
            q.push(("index", index.to_string()));
            q.push(("wait", format!("{}s", BLOCKING_WAIT.as_secs())));
            timeout = BLOCKING_WAIT + BLOCKING_WAIT / 16 + BLOCKING_MARGIN;
        }
        let (status, body, index) = self
            .send(Call::new(Method::GET, &kv_path(key)).query(&q), timeout)
            .await
            .map_err(|e| e.describe())?;
        match status {
            StatusCode::NOT_FOUND => Ok(KvRead { value: None, index }),
            StatusCode::OK if body.is_empty() => Ok(KvRead { value: None, index }),
            StatusCode::OK => match String::from_utf8(body) {
                Ok(text) => Ok(KvRead {
                    value: Some(text),
                    index,
                }),
                Err(_) => {
                    tracing::warn!(
                        centre = KIND,
                        key,
                        "config value is not UTF-8; treated as absent"
                    );
                    Ok(KvRead { value: None, index })
                }
            },
            other => Err(CallError::status(other, &body).describe()),
        }
    }
}

impl ConsulCentre {
    /// Connects to the agent that `config.consul.*` names (checked with
    /// `GET /v1/status/leader`, which needs no token: a wrong `aclToken` shows at the
    /// first read).
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let section = config.centre.section(&["consul"]);
        // `ttl` and `deregisterCriticalServiceAfter` are registration settings: read,
        // unused here.
        let c = ConsulSettings::from_section(&section, &["key"])?;
        let agent = Agent::connect(&c, "config.consul").await?;
        Ok(ConsulCentre {
            agent: Arc::new(agent),
        })
    }
}

#[async_trait]
impl ConfigCentre for ConsulCentre {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn location(&self) -> String {
        self.agent.server().to_string()
    }

    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<Option<String>, RegistryError> = async {
            self.agent
                .kv_get(name, None)
                .await
                .map(|r| r.value)
                .map_err(|e| {
                    RegistryError::unavailable(
                        KIND,
                        self.agent.server(),
                        format!("get config `{name}`: {e}"),
                    )
                })
        }
        .await;
        r.map_err(ConfigError::centre)
    }

    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<mpsc::Receiver<()>, RegistryError> = async {
            let (tx, rx) = mpsc::channel(1);
            // The first index of each key is read here: a failure reaches the caller, and a
            // change made after this call is past that index.
            let mut first = Vec::with_capacity(names.len());
            for name in names {
                let read = self.agent.kv_get(&name, None).await.map_err(|e| {
                    RegistryError::unavailable(
                        KIND,
                        self.agent.server(),
                        format!("watch config `{name}`: {e}"),
                    )
                })?;
                first.push((name, read.index));
            }
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let stop = Arc::new(stop);
            for (name, index) in first {
                let (agent, tx, stop, mut stopped) = (
                    self.agent.clone(),
                    tx.clone(),
                    stop.clone(),
                    stopped.clone(),
                );
                tokio::spawn(async move {
                    let mut index = index;
                    loop {
                        let started = Instant::now();
                        let block = (index > 0).then_some(index);
                        let res = tokio::select! {
                            _ = tx.closed() => return,
                            _ = stopped.changed() => return,
                            r = agent.kv_get(&name, block) => r,
                        };
                        match res {
                            Ok(read) => {
                                let prev = index;
                                index = next_index(prev, read.index);
                                if read.index != prev {
                                    let _ = tx.try_send(());
                                }
                                // A query that came back at once without a newer index.
                                if read.index <= prev && started.elapsed() < Duration::from_millis(50) {
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                            }
                            Err(e) => {
                                tracing::debug!(centre = KIND, key = name, error = %e, "config blocking query failed");
                                stop.send_replace(true);
                                return;
                            }
                        }
                    }
                });
            }
            Ok(rx)
        }
        .await;
        r.map_err(ConfigError::centre)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_keys_are_path_segments() {
        assert_eq!(
            kv_path("seata.properties"),
            ["v1", "kv", "seata.properties"]
        );
        assert_eq!(kv_path("seata/a.b"), ["v1", "kv", "seata", "a.b"]);
    }
}
