//! The Nacos configuration centre client (`config.type=nacos`): [`NacosCentre`].

use std::sync::Arc;

use async_trait::async_trait;
use meshline_registry_core::centre::ConfigCentre;
use meshline_registry_core::config::ConfigError;
use meshline_registry_core::{Config, RegistryError};
use nacos_sdk::api::config::{
    ConfigChangeListener, ConfigResponse, ConfigService, ConfigServiceBuilder,
};
use tokio::sync::mpsc;

use crate::{KIND, NacosSettings, connect, timed};

/// Seata's config group default (`NacosConfiguration.DEFAULT_GROUP`).
pub const DEFAULT_CONFIG_GROUP: &str = "SEATA_GROUP";

/// `config.type=nacos`: Seata's configuration in Nacos' config service, as
/// `NacosConfiguration` (`config/seata-config-nacos`) keeps it.
///
/// - The blob is data id `config.nacos.dataId` (default `seata.properties`) in group
///   `config.nacos.group` (default `SEATA_GROUP`, Seata's config default, unlike the
///   registry's `DEFAULT_GROUP`) of namespace `config.nacos.namespace` (default empty:
///   `public`). A single Seata key is a data id of its own in the same group (the layout
///   Seata's `nacos-config.sh` pushes).
/// - The connection keys are the registry's (`serverAddr`, `namespace`,
///   `username`/`password`, `accessKey`/`secretKey`, `contextPath`, `grpcPort`,
///   `tls.*`), read from `config.nacos.*` by the same [`NacosSettings`] code; what
///   nacos-sdk does with them is what the registry does (see the crate docs).
/// - An empty content counts as absent (Seata's `StringUtils.isNotBlank` check).
///
/// Changes are followed with nacos-sdk config listeners (Nacos 2.x pushes a change
/// notification over gRPC, the client re-reads and calls the listener when the MD5
/// differs); they are removed when the follower's receiver is dropped.
pub struct NacosCentre {
    config: ConfigService,
    group: String,
    /// `serverAddr` (and the gRPC port when set), namespace: for messages.
    server: String,
}

impl std::fmt::Debug for NacosCentre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NacosCentre")
            .field("server", &self.server)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

/// Passes nacos-sdk's change callbacks on as notifications.
struct Notifier {
    tx: mpsc::Sender<()>,
}

impl ConfigChangeListener for Notifier {
    fn notify(&self, resp: ConfigResponse) {
        tracing::debug!(centre = KIND, data_id = %resp.data_id(), group = %resp.group(), "config changed");
        let _ = self.tx.try_send(());
    }
}

impl NacosCentre {
    /// Connects to the Nacos that `config.nacos.*` names.
    ///
    /// Fails when nacos-sdk cannot connect within 10 s; the error names the server and
    /// what a TCP connect to its gRPC port said (e.g. "Connection refused").
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let section = config.centre.section(&["nacos"]);
        let n = NacosSettings::from_section(&section, &["dataId", "group"])?;
        if n.protocol == crate::Protocol::Http {
            return Err(RegistryError::Config(
                "config.nacos.protocol is http, but the configuration centre runs on \
                 nacos-sdk, which speaks only Nacos 2.x gRPC (the registry speaks Nacos \
                 1.x's HTTP API; the centre cannot)"
                    .into(),
            ));
        }
        let group = section
            .get("group")
            .filter(|g| !g.is_empty())
            .unwrap_or(DEFAULT_CONFIG_GROUP)
            .to_string();
        let p = connect::prepare(&n, &config.application_id)?;
        let props = p.props.clone();
        let builder = match p.login {
            connect::Login::Http => ConfigServiceBuilder::new(props).enable_auth_plugin_http(),
            connect::Login::Aliyun => ConfigServiceBuilder::new(props).enable_auth_plugin_aliyun(),
            connect::Login::None => ConfigServiceBuilder::new(props),
        };
        let mut server = p.server.clone();
        if !n.namespace.is_empty() {
            server = format!("{server} namespace `{}`", n.namespace);
        }
        let config = p.build(&server, builder.build()).await?;
        Ok(NacosCentre {
            config,
            group,
            server,
        })
    }

    /// The config group read (`config.nacos.group`, default `SEATA_GROUP`).
    pub fn group(&self) -> &str {
        &self.group
    }
}

#[async_trait]
impl ConfigCentre for NacosCentre {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn location(&self) -> String {
        format!("{} group `{}`", self.server, self.group)
    }

    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<Option<String>, RegistryError> = async {
            let read = tokio::time::timeout(
                crate::REQUEST_TIMEOUT,
                self.config.get_config(name.to_string(), self.group.clone()),
            )
            .await
            .map_err(|_| {
                RegistryError::timeout(KIND, &self.server, "get config", crate::REQUEST_TIMEOUT)
            })?;
            match read {
                Ok(resp) if resp.content().trim().is_empty() => Ok(None),
                Ok(resp) => Ok(Some(resp.content().clone())),
                Err(nacos_sdk::api::error::Error::ConfigNotFound(_)) => Ok(None),
                Err(e) => Err(crate::nacos_err(
                    &self.server,
                    &format!("get config `{name}`"),
                    e,
                )),
            }
        }
        .await;
        r.map_err(ConfigError::centre)
    }

    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError> {
        // The backend's own error travels whole (RegistryError converts it back).
        let r: Result<mpsc::Receiver<()>, RegistryError> = async {
            let (tx, rx) = mpsc::channel(1);
            let listener: Arc<dyn ConfigChangeListener> = Arc::new(Notifier { tx: tx.clone() });
            for name in &names {
                timed(
                    &self.server,
                    "listen config",
                    self.config
                        .add_listener(name.clone(), self.group.clone(), listener.clone()),
                )
                .await?;
            }
            // The listeners go when the follower's receiver is dropped.
            let (config, group) = (self.config.clone(), self.group.clone());
            tokio::spawn(async move {
                tx.closed().await;
                for name in names {
                    if let Err(e) = config
                        .remove_listener(name.clone(), group.clone(), listener.clone())
                        .await
                    {
                        tracing::debug!(centre = KIND, data_id = name, error = %e, "cannot remove a config listener");
                    }
                }
            });
            Ok(rx)
        }
        .await;
        r.map_err(ConfigError::centre)
    }
}
