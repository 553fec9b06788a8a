//! An in-process registry: registrations of this process only, published through a
//! [`WatchHub`]. For running the gateway, its backends and bots in one process (tests,
//! single-binary demos) without any server; every real deployment uses a registry the
//! facade builds from the config instead.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use meshline::{EmptyProtection, Instance, RegistryError, RegistryService, Watch, WatchHub};

/// Registrations kept in memory, watchable like any registry.
pub struct MemoryRegistry {
    hub: WatchHub,
    members: Mutex<BTreeMap<String, Vec<Instance>>>,
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegistry").finish_non_exhaustive()
    }
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        MemoryRegistry {
            hub: WatchHub::new("memory", EmptyProtection::Apply),
            members: Mutex::new(BTreeMap::new()),
        }
    }
}

impl MemoryRegistry {
    fn publish(&self, cluster: &str, list: Vec<Instance>) {
        self.hub.publish(cluster, list);
    }
}

#[async_trait]
impl RegistryService for MemoryRegistry {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let list = {
            let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
            let l = m.entry(cluster.to_string()).or_default();
            l.retain(|i| i.key() != instance.key());
            l.push(instance.clone());
            l.clone()
        };
        self.publish(cluster, list);
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let list = {
            let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
            let l = m.entry(cluster.to_string()).or_default();
            l.retain(|i| i.key() != instance.key());
            l.clone()
        };
        self.publish(cluster, list);
        Ok(())
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        Ok(m.get(cluster).cloned().unwrap_or_default())
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        if self.hub.current(cluster).is_none() {
            self.publish(cluster, Vec::new());
        }
        Ok(self.hub.subscribe(cluster))
    }

    async fn close(&self) -> Result<(), RegistryError> {
        let clusters: Vec<String> = {
            let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
            let c = m.keys().cloned().collect();
            m.clear();
            c
        };
        for c in clusters {
            self.publish(&c, Vec::new());
        }
        Ok(())
    }
}
