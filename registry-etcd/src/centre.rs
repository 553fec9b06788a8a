//! `config.type=etcd3`: Seata's configuration in etcd, as `EtcdConfiguration` keeps it.
//!
//! The blob is the key `config.etcd3.key` (default `seata.properties`); a single Seata
//! key is stored under its own name (`service.vgroupMapping.my_group`). The connection
//! keys are the registry's (`serverAddr`, `username`/`password`, `tls.*`), read from
//! `config.etcd3.*`. Changes are followed with one etcd watch per followed key; a
//! broken watch ends the notification channel, and [`LiveConfig`] re-reads and follows
//! again.
//!
//! [`LiveConfig`]: meshline_registry_core::centre::LiveConfig

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::Client;
use meshline_registry_core::centre::ConfigCentre;
use meshline_registry_core::config::ConfigError;
use meshline_registry_core::{Config, RegistryError};
use tokio::sync::mpsc;

use crate::timed::timed;
use crate::{EtcdSettings, KIND, connect_client};

/// Deadline of one read of the centre.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Seata's configuration in etcd (`config.type=etcd3`).
pub struct EtcdCentre {
    client: Client,
    servers: String,
    /// How often each followed key's watch asks for progress (see `lib.rs`).
    heartbeat: Duration,
}

impl std::fmt::Debug for EtcdCentre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCentre")
            .field("servers", &self.servers)
            .finish()
    }
}

impl EtcdCentre {
    /// Connects to the etcd that `config.etcd3.*` (or `config.etcd.*`) names.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let section = config.centre.section(&["etcd", "etcd3"]);
        let settings = EtcdSettings::from_section(&section, &["key"])?;
        let (client, servers) = connect_client(&settings, OP_TIMEOUT).await?;
        Ok(EtcdCentre {
            client,
            servers,
            heartbeat: crate::heartbeat(settings.keepalive_time),
        })
    }
}

#[async_trait]
impl ConfigCentre for EtcdCentre {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn location(&self) -> String {
        self.servers.clone()
    }

    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<Option<String>, RegistryError> = async {
            let resp = timed(&self.servers, "get config", OP_TIMEOUT, || {
                let mut kv = self.client.kv_client();
                let key = name.to_string();
                async move { kv.get(key, None).await }
            })
            .await?;
            match resp.kvs().first() {
                None => Ok(None),
                Some(kv) => match std::str::from_utf8(kv.value()) {
                    Ok(text) => Ok(Some(text.to_string())),
                    Err(_) => {
                        tracing::warn!(
                            centre = KIND,
                            key = name,
                            "config value is not UTF-8; treated as absent"
                        );
                        Ok(None)
                    }
                },
            }
        }
        .await;
        r.map_err(ConfigError::centre)
    }

    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<mpsc::Receiver<()>, RegistryError> = async {
            let (tx, rx) = mpsc::channel(1);
            let mut streams = Vec::with_capacity(names.len());
            for name in &names {
                let stream = timed(&self.servers, "watch config", OP_TIMEOUT, || {
                    let mut w = self.client.watch_client();
                    let key = name.clone();
                    async move { w.watch(key, None).await }
                })
                .await?;
                streams.push(stream);
            }
            // etcd creates a watch at the revision current when it processes the request:
            // wait for each creation, so that every change after the notification below is
            // delivered.
            for stream in &mut streams {
                match tokio::time::timeout(OP_TIMEOUT, stream.message()).await {
                    Ok(Ok(Some(resp))) if resp.created() && !resp.canceled() => {}
                    Ok(Ok(Some(resp))) => {
                        return Err(RegistryError::unavailable(
                            KIND,
                            &self.servers,
                            format!(
                                "watch config: not created (canceled: {}, reason `{}`)",
                                resp.canceled(),
                                resp.cancel_reason()
                            ),
                        ));
                    }
                    Ok(Ok(None)) => {
                        return Err(RegistryError::unavailable(
                            KIND,
                            &self.servers,
                            "watch config: the stream ended before the watch was created",
                        ));
                    }
                    Ok(Err(e)) => {
                        return Err(crate::timed::backend_err(&self.servers, "watch config", e));
                    }
                    Err(_) => {
                        return Err(RegistryError::timeout(
                            KIND,
                            &self.servers,
                            "watch config",
                            OP_TIMEOUT,
                        ));
                    }
                }
            }
            // One broken watch stops them all, so that the channel closes and the follower
            // re-reads and follows every key again.
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let stop = std::sync::Arc::new(stop);
            for stream in streams {
                let tx = tx.clone();
                let stop = stop.clone();
                let mut stopped = stopped.clone();
                let (mut requests, mut stream) = stream.split();
                // Progress requests keep data coming from a live member, so the HTTP/2
                // keep-alive pings only a silent one (see `lib.rs`).
                let mut beat = tokio::time::interval(self.heartbeat);
                beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tokio::spawn(async move {
                    loop {
                        let msg = tokio::select! {
                            _ = tx.closed() => return,
                            _ = stopped.changed() => return,
                            _ = beat.tick() => {
                                if requests.request_progress().await.is_err() {
                                    stop.send_replace(true);
                                    return;
                                }
                                continue;
                            }
                            m = stream.message() => m,
                        };
                        match msg {
                            Ok(Some(resp)) if resp.canceled() => return,
                            Ok(Some(resp)) if resp.events().is_empty() => {}
                            Ok(Some(_)) => {
                                let _ = tx.try_send(());
                            }
                            // The stream broke: stop the others too; dropping every `tx`
                            // tells the follower to re-read and follow again.
                            Ok(None) | Err(_) => {
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
