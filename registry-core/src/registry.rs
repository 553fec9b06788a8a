//! The trait every registry backend implements.

use async_trait::async_trait;

use crate::{Instance, Nearby, RegistryError, Watch};

/// A service registry: where servers announce themselves and clients find them.
///
/// Implemented by every backend (file, etcd3, zk, redis, nacos, consul, eureka). The
/// guarantees every implementation gives:
///
/// - [`watch`](Self::watch) yields full snapshots, the current one first; identical
///   snapshots are not re-sent; garbage in the registry is skipped with a warning.
/// - Reconnect, resync and re-registration after any session loss are the backend's
///   job, with jittered exponential backoff ([`crate::Backoff`]). While the registry is
///   unreachable, watchers keep the last good snapshot and see [`crate::Health::Stale`].
/// - A registration keeps itself alive until [`unregister`](Self::unregister) or
///   [`close`](Self::close); `close` removes everything this client registered.
///
/// Why one trait for finding and announcing, where pingora and volo keep registration
/// out of discovery: every Seata registry type both reads and writes the same layout
/// with one client and one session (a ZooKeeper session owns our ephemeral nodes, an
/// etcd lease our keys, a Nacos gRPC connection our instances), and the close that
/// removes our registrations must also end our watches, so the two halves share the
/// client's whole life ([`crate::Lifecycle`]). Callers that only discover hold the
/// same `Arc<dyn RegistryService>` and never call `register`; the one read-only type,
/// `file`, answers it with [`RegistryError::ReadOnly`] naming the registries that can.
#[async_trait]
pub trait RegistryService: Send + Sync + 'static {
    /// The registry type, as Seata spells it (`file`, `etcd3`, `zk`, `redis`, `nacos`,
    /// `consul`, `eureka`).
    fn kind(&self) -> &'static str;

    /// Announces `instance` as a member of `cluster` and keeps the announcement alive.
    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError>;

    /// Withdraws an announcement made by [`register`](Self::register).
    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError>;

    /// The current members of `cluster` (one round trip; no watch is kept).
    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError>;

    /// Follows `cluster`: the first value is the current state, then every change.
    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError>;

    /// Removes everything this client registered and stops background work.
    async fn close(&self) -> Result<(), RegistryError>;

    /// True when the registry itself maps a transaction service group to its cluster,
    /// so [`crate::Discovery`] passes the group through as the name to look up instead
    /// of reading `service.vgroupMapping.<group>`.
    ///
    /// Seata's namingserver (`registry.type=seata`) is such a registry: a TC announces
    /// the groups it serves in its metadata, and clients discover by vGroup. Every other
    /// registry lists clusters, and keeps the default `false`.
    fn resolves_groups(&self) -> bool {
        false
    }

    /// Places near `cluster` that have members, for diagnosis when `cluster` lists none
    /// (`meshline doctor`): other clusters of the same layout, the same service in other
    /// groups or namespaces, other services. Bounded work (one listing, at most a few
    /// hundred places). The default lists nothing: a backend that cannot list its
    /// registry says nothing rather than guessing.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let _ = cluster;
        Ok(Vec::new())
    }

    /// Where `cluster`'s members were read from, for a registry that reads them from
    /// the configuration (the `file` registry: a file, a configuration centre's key,
    /// the built-in default), so `meshline doctor` can say which source won. `None`
    /// (the default): the registry itself holds the members.
    fn source_of(&self, cluster: &str) -> Option<String> {
        let _ = cluster;
        None
    }
}
