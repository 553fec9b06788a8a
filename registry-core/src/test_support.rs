//! Test-only helpers shared by the crate's unit tests.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Instance, RegistryError, RegistryService, Watch, WatchHub};

/// A read-only registry whose members are whatever the test publishes into its hub.
pub(crate) struct HubRegistry(pub(crate) Arc<WatchHub>);

#[async_trait]
impl RegistryService for HubRegistry {
    fn kind(&self) -> &'static str {
        "hub"
    }
    async fn register(&self, _: &str, _: &Instance) -> Result<(), RegistryError> {
        Err(RegistryError::ReadOnly {
            kind: "hub",
            op: "register",
        })
    }
    async fn unregister(&self, _: &str, _: &Instance) -> Result<(), RegistryError> {
        Err(RegistryError::ReadOnly {
            kind: "hub",
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
