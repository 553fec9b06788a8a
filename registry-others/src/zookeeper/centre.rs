//! The ZooKeeper configuration centre client (`config.type=zk`): [`ZkCentre`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::centre::ConfigCentre;
use meshline_registry_core::config::ConfigError;
use meshline_registry_core::{Config, RegistryError};
use tokio::sync::{Mutex, mpsc};
use zookeeper_client as zk;

use super::session::new_session;
use super::{KIND, Settings, ZkSettings, zk_err};

/// The root of Seata's single-key nodes (`ZookeeperConfiguration.ROOT_PATH`).
pub const ROOT: &str = "/seata";

/// The longest one read of the centre may take.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The node a centre name means: a path as is, else `/seata/<name>` (Seata's
/// `buildPath`).
pub fn node_path(name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("{ROOT}/{name}")
    }
}

/// `config.type=zk`: Seata's configuration in ZooKeeper, as `ZookeeperConfiguration`
/// (`config/seata-config-zk`) keeps it.
///
/// - The blob is the node `config.zk.nodePath` (default `/seata/seata.properties`); a
///   single Seata key `k` is the node `/seata/k`. A name given to
///   [`ConfigCentre::get`] that starts with `/` is a path, any other is `/seata/<name>`.
/// - Node data is UTF-8 text; an empty node counts as absent (Seata's `readData`
///   returns null for it), and so does data that is not UTF-8 (with a warning).
/// - `config.zk.serializer` is accepted and has no effect: Seata 2.x declares the key
///   but reads every node as UTF-8 bytes, and so does meshline. A Seata 1.x deployment
///   with a custom Java `ZkSerializer` stores bytes only that class can read; set such
///   values as UTF-8 text to share them with meshline.
/// - The connection keys are the registry's (`serverAddr`, `sessionTimeout`,
///   `connectTimeout`, `username`/`password` digest, `tls.*`), read from `config.zk.*`
///   (or `config.zookeeper.*`) by the same [`ZkSettings`] code.
///
/// Changes are followed with one existence watch per followed node (ZooKeeper fires it
/// when the node is created, changed or deleted, so a node that does not exist yet is
/// followed too), re-armed after each event. A session that ends (expired, closed, auth
/// failed) ends the notification channel; [`LiveConfig`] then re-reads and follows
/// again, and the next call here builds a new session.
///
/// [`LiveConfig`]: meshline_registry_core::centre::LiveConfig
pub struct ZkCentre {
    settings: Settings,
    /// The current session; replaced by the next call after it ended.
    client: Mutex<zk::Client>,
}

impl std::fmt::Debug for ZkCentre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkCentre")
            .field("connect_string", &self.settings.connect_string)
            .finish()
    }
}

impl ZkCentre {
    /// Connects to the ZooKeeper that `config.zk.*` (or `config.zookeeper.*`) names.
    ///
    /// Fails when no session can be established within the session timeout; the error
    /// names the connect string and what a TCP connect to each server said.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let section = config.centre.section(&["zookeeper", "zk"]);
        let c = ZkSettings::from_section(&section, &["nodePath", "serializer"])?;
        if let Some(s) = section.get("serializer").filter(|s| !s.is_empty()) {
            tracing::info!(
                centre = KIND,
                serializer = s,
                "config.zk.serializer has no effect: nodes are read as UTF-8 text, as Seata 2.x reads them"
            );
        }
        let settings = Settings::new(&c, "config.zk")?;
        let client = new_session(&settings).await?;
        Ok(ZkCentre {
            settings,
            client: Mutex::new(client),
        })
    }

    /// The current session, or a new one when it ended.
    async fn client(&self) -> Result<zk::Client, RegistryError> {
        let mut client = self.client.lock().await;
        if client.state().is_terminated() {
            let fresh = new_session(&self.settings).await?;
            tracing::info!(
                centre = KIND,
                session = %fresh.session_id(),
                "config centre: new zookeeper session"
            );
            *client = fresh;
        }
        Ok(client.clone())
    }

    fn err(&self, op: &str, e: zk::Error) -> RegistryError {
        zk_err(&self.settings.connect_string, op, e)
    }
}

#[async_trait]
impl ConfigCentre for ZkCentre {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn location(&self) -> String {
        self.settings.connect_string.clone()
    }

    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<Option<String>, RegistryError> = async {
            let path = node_path(name);
            let client = self.client().await?;
            let read = tokio::time::timeout(OP_TIMEOUT, client.get_data(&path))
                .await
                .map_err(|_| {
                    RegistryError::timeout(
                        KIND,
                        &self.settings.connect_string,
                        "get config",
                        OP_TIMEOUT,
                    )
                })?;
            match read {
                Ok((data, _)) if data.is_empty() => Ok(None),
                Ok((data, _)) => match String::from_utf8(data) {
                    Ok(text) => Ok(Some(text)),
                    Err(_) => {
                        tracing::warn!(
                            centre = KIND,
                            path,
                            "config node data is not UTF-8; treated as absent"
                        );
                        Ok(None)
                    }
                },
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(self.err(&format!("get config {path}"), e)),
            }
        }
        .await;
        r.map_err(ConfigError::centre)
    }

    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<mpsc::Receiver<()>, RegistryError> = async {
            let client = self.client().await?;
            let (tx, rx) = mpsc::channel(1);
            // The first watch of each node is armed here, so that a failure reaches the
            // caller and no change after this call is missed.
            let mut armed = Vec::with_capacity(names.len());
            for name in &names {
                let path = node_path(name);
                let watcher = arm(&client, &path)
                    .await
                    .map_err(|e| self.err(&format!("watch config {path}"), e))?;
                armed.push((path, watcher));
            }
            // A session that ended stops every follower, so that the channel closes and the
            // caller follows again (on a new session).
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let stop = Arc::new(stop);
            for (path, watcher) in armed {
                let (tx, stop, mut stopped, client) =
                    (tx.clone(), stop.clone(), stopped.clone(), client.clone());
                tokio::spawn(async move {
                    let mut watcher = watcher;
                    loop {
                        let ev = tokio::select! {
                            _ = tx.closed() => return,
                            _ = stopped.changed() => return,
                            ev = watcher.changed() => ev,
                        };
                        if ev.session_state.is_terminated() {
                            tracing::debug!(centre = KIND, path, state = ?ev.session_state, "config watch ended with the session");
                            stop.send_replace(true);
                            return;
                        }
                        // Re-armed before the notification: the read it triggers comes
                        // after the new watch, so no change falls between the two.
                        watcher = match arm(&client, &path).await {
                            Ok(w) => w,
                            Err(e) => {
                                tracing::debug!(centre = KIND, path, error = %e, "cannot re-arm a config watch");
                                stop.send_replace(true);
                                return;
                            }
                        };
                        let _ = tx.try_send(());
                    }
                });
            }
            Ok(rx)
        }
        .await;
        r.map_err(ConfigError::centre)
    }
}

/// An existence watch on `path`: it fires when the node is created, its data changes
/// or it is deleted.
async fn arm(client: &zk::Client, path: &str) -> Result<zk::OneshotWatcher, zk::Error> {
    let (_, watcher) = client.check_and_watch_stat(path).await?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_seata_nodes() {
        assert_eq!(
            node_path("/seata/seata.properties"),
            "/seata/seata.properties"
        );
        assert_eq!(
            node_path("service.vgroupMapping.my_group"),
            "/seata/service.vgroupMapping.my_group"
        );
    }
}
