//! Seata's indirection from a transaction service group to a cluster.
//!
//! A Seata client is configured with a *tx-service-group* (`default_tx_group`); the
//! config maps it to a *cluster* (`service.vgroupMapping.default_tx_group=default`); the
//! registry lists the cluster's members. [`Discovery`] does the first step and forwards
//! the rest to a [`RegistryService`], so users can ask by group.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{Config, Instance, RegistryError, RegistryService, Watch};

/// A registry plus the `vgroupMapping` table: lookups and watches by tx-service-group.
#[derive(Clone)]
pub struct Discovery {
    registry: Arc<dyn RegistryService>,
    mapping: Arc<BTreeMap<String, String>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("registry", &self.registry.kind())
            .field("mapping", &self.mapping)
            .finish()
    }
}

impl Discovery {
    /// A discovery over `registry` with an explicit group -> cluster table.
    pub fn new(registry: Arc<dyn RegistryService>, mapping: BTreeMap<String, String>) -> Self {
        Discovery {
            registry,
            mapping: Arc::new(mapping),
        }
    }

    /// A discovery over `registry` using `config.service.vgroup_mapping`.
    pub fn from_config(registry: Arc<dyn RegistryService>, config: &Config) -> Self {
        Discovery::new(registry, config.service.vgroup_mapping.clone())
    }

    /// The cluster that `group` is mapped to; `group` itself when the registry maps
    /// groups on its own ([`RegistryService::resolves_groups`]).
    pub fn cluster_for<'a>(&'a self, group: &'a str) -> Result<&'a str, RegistryError> {
        if self.registry.resolves_groups() {
            return Ok(group);
        }
        match self.mapping.get(group) {
            Some(c) if !c.trim().is_empty() => Ok(c.as_str()),
            _ => Err(RegistryError::MissingMapping {
                group: group.to_string(),
            }),
        }
    }

    /// The current members of the cluster `group` maps to.
    pub async fn lookup(&self, group: &str) -> Result<Vec<Instance>, RegistryError> {
        let cluster = self.cluster_for(group)?;
        self.registry.lookup(cluster).await
    }

    /// A watch on the cluster `group` maps to.
    pub async fn watch(&self, group: &str) -> Result<Watch, RegistryError> {
        let cluster = self.cluster_for(group)?;
        self.registry.watch(cluster).await
    }

    /// The registry underneath.
    pub fn registry(&self) -> &Arc<dyn RegistryService> {
        &self.registry
    }

    /// The group -> cluster table.
    pub fn mapping(&self) -> &BTreeMap<String, String> {
        &self.mapping
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EmptyProtection, WatchHub};
    use async_trait::async_trait;

    struct Fixed(WatchHub);

    #[async_trait]
    impl RegistryService for Fixed {
        fn kind(&self) -> &'static str {
            "fixed"
        }
        async fn register(&self, _: &str, _: &Instance) -> Result<(), RegistryError> {
            Err(RegistryError::ReadOnly {
                kind: "fixed",
                op: "register",
            })
        }
        async fn unregister(&self, _: &str, _: &Instance) -> Result<(), RegistryError> {
            Err(RegistryError::ReadOnly {
                kind: "fixed",
                op: "unregister",
            })
        }
        async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
            Ok(self
                .0
                .current(cluster)
                .map(|s| s.instances().to_vec())
                .unwrap_or_default())
        }
        async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
            Ok(self.0.subscribe(cluster))
        }
        async fn close(&self) -> Result<(), RegistryError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn maps_group_to_cluster_and_names_missing_key() {
        let hub = WatchHub::new("fixed", EmptyProtection::Protect);
        hub.publish("prod", vec![Instance::parse("10.1.1.1:8091").unwrap()]);
        let mut m = BTreeMap::new();
        m.insert("my_group".to_string(), "prod".to_string());
        let d = Discovery::new(Arc::new(Fixed(hub)), m);
        assert_eq!(d.lookup("my_group").await.unwrap().len(), 1);
        let mut w = d.watch("my_group").await.unwrap();
        assert_eq!(w.next().await.unwrap().len(), 1);
        let err = d.lookup("other").await.unwrap_err().to_string();
        assert!(err.contains("service.vgroupMapping.other"), "{err}");
    }
}
