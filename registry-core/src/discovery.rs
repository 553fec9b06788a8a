//! Seata's indirection from a transaction service group to a cluster.
//!
//! A Seata client is configured with a *tx-service-group* (`default_tx_group`); the
//! config maps it to a *cluster* (`service.vgroupMapping.default_tx_group=default`); the
//! registry lists the cluster's members. [`Discovery`] does the first step and forwards
//! the rest to a [`RegistryService`], so users can ask by group.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::centre::LiveConfig;
use crate::{
    Config, EmptyProtection, Health, Instance, RegistryError, RegistryService, Watch, WatchHub,
};

/// Where the group -> cluster table comes from.
#[derive(Clone)]
enum Mapping {
    /// Given once.
    Fixed(Arc<BTreeMap<String, String>>),
    /// Followed: the files or a configuration centre can change it ([`LiveConfig`]),
    /// and a group asked for is read from the centre.
    Live(LiveConfig),
}

/// A registry plus the `vgroupMapping` table: lookups and watches by tx-service-group.
///
/// The table is fixed ([`Discovery::new`], [`Discovery::from_config`]) or followed from
/// a configuration centre ([`Discovery::with_live_config`]): then a watch by group
/// moves to the new cluster when the group's mapping changes, and its holder (an
/// `RpcClient`) sees the new cluster's members as an ordinary membership change.
#[derive(Clone)]
pub struct Discovery {
    registry: Arc<dyn RegistryService>,
    mapping: Mapping,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("registry", &self.registry.kind())
            .field("mapping", &self.mapping())
            .field("live", &matches!(self.mapping, Mapping::Live(_)))
            .finish()
    }
}

impl Discovery {
    /// A discovery over `registry` with an explicit group -> cluster table.
    pub fn new(registry: Arc<dyn RegistryService>, mapping: BTreeMap<String, String>) -> Self {
        Discovery {
            registry,
            mapping: Mapping::Fixed(Arc::new(mapping)),
        }
    }

    /// A discovery over `registry` using `config.service.vgroup_mapping`.
    pub fn from_config(registry: Arc<dyn RegistryService>, config: &Config) -> Self {
        Discovery::new(registry, config.service.vgroup_mapping.clone())
    }

    /// A discovery over `registry` whose table follows `live` (its files, its
    /// configuration centre): watches move when a group's mapping changes, and a group
    /// other than the configuration's `txServiceGroup` is read from the centre when
    /// first looked up or watched ([`LiveConfig::ask_group`]), as Seata's `getConfig`
    /// reads any key.
    pub fn with_live_config(registry: Arc<dyn RegistryService>, live: &LiveConfig) -> Self {
        Discovery {
            registry,
            mapping: Mapping::Live(live.clone()),
        }
    }

    /// Asks a followed configuration for `group`'s mapping (a no-op for a fixed table,
    /// a known group, or a registry that maps groups itself).
    async fn ask(&self, group: &str) {
        if let Mapping::Live(live) = &self.mapping
            && !self.registry.resolves_groups()
        {
            live.ask_group(group).await;
        }
    }

    fn lookup_cluster(
        mapping: &BTreeMap<String, String>,
        group: &str,
    ) -> Result<String, RegistryError> {
        match mapping.get(group) {
            Some(c) if !c.trim().is_empty() => Ok(c.clone()),
            _ => Err(RegistryError::MissingMapping {
                group: group.to_string(),
            }),
        }
    }

    /// The cluster that `group` is mapped to now; `group` itself when the registry maps
    /// groups on its own ([`RegistryService::resolves_groups`]).
    pub fn cluster_for(&self, group: &str) -> Result<String, RegistryError> {
        if self.registry.resolves_groups() {
            return Ok(group.to_string());
        }
        match &self.mapping {
            Mapping::Fixed(m) => Self::lookup_cluster(m, group),
            Mapping::Live(live) => {
                Self::lookup_cluster(&live.current().service.vgroup_mapping, group)
            }
        }
    }

    /// The current members of the cluster `group` maps to.
    pub async fn lookup(&self, group: &str) -> Result<Vec<Instance>, RegistryError> {
        self.ask(group).await;
        let cluster = self.cluster_for(group)?;
        self.registry.lookup(&cluster).await
    }

    /// A watch on the cluster `group` maps to. With a followed table, the watch moves
    /// to the new cluster when the mapping changes (see [`Discovery::with_live_config`]);
    /// a mapping that disappears keeps the last cluster, with a warning.
    pub async fn watch(&self, group: &str) -> Result<Watch, RegistryError> {
        self.ask(group).await;
        let cluster = self.cluster_for(group)?;
        let inner = self.registry.watch(&cluster).await?;
        match &self.mapping {
            Mapping::Live(live) if !self.registry.resolves_groups() => Ok(follow_mapping(
                self.registry.clone(),
                live.subscribe(),
                group.to_string(),
                cluster,
                inner,
            )),
            _ => Ok(inner),
        }
    }

    /// The registry underneath.
    pub fn registry(&self) -> &Arc<dyn RegistryService> {
        &self.registry
    }

    /// The group -> cluster table now.
    pub fn mapping(&self) -> BTreeMap<String, String> {
        match &self.mapping {
            Mapping::Fixed(m) => (**m).clone(),
            Mapping::Live(live) => live.current().service.vgroup_mapping.clone(),
        }
    }
}

/// A watch by `group` that forwards the registry watch of the group's current cluster,
/// and switches clusters when the followed configuration maps the group elsewhere.
///
/// The forwarding hub applies empty lists as they come: the registry's own hub has
/// already applied the empty-list policy to each cluster, and a move to a cluster that
/// is empty must not keep the old cluster's members.
fn follow_mapping(
    registry: Arc<dyn RegistryService>,
    mut config: watch::Receiver<Arc<Config>>,
    group: String,
    mut cluster: String,
    mut inner: Watch,
) -> Watch {
    let hub = WatchHub::new(registry.kind(), EmptyProtection::Apply);
    let out = hub.subscribe(&group);
    // Health before lists, here and below: a watcher that sees a list sees the health
    // that came with it (as `WatchScope::publish_read`).
    mirror_health(&hub, &group, &inner.health());
    hub.forward(&group, inner.current().instances());
    // Snapshots and health are awaited on two clones of one watch (each wait needs the
    // watch mutably).
    let mut health = inner.clone();
    // A read asked for on this watch is asked of the cluster followed now.
    let asks = hub.refresher(&group);
    tokio::spawn(async move {
        let mut config_open = true;
        loop {
            tokio::select! {
                _ = hub.watchers_gone(&group) => break,
                _ = asks.requested() => inner.refresher().request(),
                next = inner.next() => match next {
                    Ok(s) => {
                        mirror_health(&hub, &group, &inner.health());
                        hub.forward(&group, s.instances());
                    }
                    Err(_) => break,
                },
                h = health.health_changed() => match h {
                    Ok(h) => mirror_health(&hub, &group, &h),
                    Err(_) => break,
                },
                changed = config.changed(), if config_open => {
                    if changed.is_err() {
                        config_open = false;
                        continue;
                    }
                    let wanted = config.borrow_and_update().service.vgroup_mapping.get(&group).cloned();
                    match wanted {
                        Some(c) if c.trim().is_empty() || c == cluster => {}
                        Some(c) => match registry.watch(&c).await {
                            Ok(w) => {
                                tracing::info!(
                                    group = %group, from = %cluster, to = %c,
                                    "service.vgroupMapping changed: following the new cluster"
                                );
                                health = w.clone();
                                inner = w;
                                cluster = c;
                                mirror_health(&hub, &group, &inner.health());
                                hub.forward(&group, inner.current().instances());
                            }
                            Err(e) => tracing::warn!(
                                group = %group, to = %c, error = %e,
                                "service.vgroupMapping changed but the new cluster cannot be watched; keeping the old one"
                            ),
                        },
                        None => tracing::warn!(
                            group = %group, cluster = %cluster,
                            "service.vgroupMapping.{group} was removed from the configuration; keeping cluster `{cluster}`"
                        ),
                    }
                }
            }
        }
        hub.close();
    });
    out
}

fn mirror_health(hub: &WatchHub, group: &str, health: &Health) {
    match health {
        Health::Connected => hub.mark_connected(group),
        Health::Stale { reason, .. } => hub.mark_stale(group, reason),
    }
}

#[cfg(test)]
mod centre_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::HubRegistry;

    #[tokio::test]
    async fn maps_group_to_cluster_and_names_missing_key() {
        let hub = Arc::new(WatchHub::new("hub", EmptyProtection::Protect));
        hub.publish("prod", vec![Instance::parse("10.1.1.1:8091").unwrap()]);
        let mut m = BTreeMap::new();
        m.insert("my_group".to_string(), "prod".to_string());
        let d = Discovery::new(Arc::new(HubRegistry(hub)), m);
        assert_eq!(d.lookup("my_group").await.unwrap().len(), 1);
        let mut w = d.watch("my_group").await.unwrap();
        assert_eq!(w.next().await.unwrap().len(), 1);
        let err = d.lookup("other").await.unwrap_err().to_string();
        assert!(err.contains("service.vgroupMapping.other"), "{err}");
    }
}
