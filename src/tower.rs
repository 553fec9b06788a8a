//! tower/tonic integration (feature `tower`): a registry [`Watch`] as a
//! [`tower::discover::Discover`], so a tower balancer (`tower::balance::p2c::Balance`,
//! tonic's `Channel::balance_channel` fed by hand, any `Discover` consumer) follows a
//! cluster through meshline's registries.
//!
//! Why here, in the facade, and not in registry-core: the adapter joins the core's
//! [`Watch`] to a third-party trait. Kept out of the core, the core depends on no
//! service framework and a build without the feature compiles no tower; the facade is
//! where a user already chooses what to compile in. It needs nothing private: any
//! [`Watch`] (from a [`Discovery`], a backend, or a [`crate::WatchHub`]) will do.
//!
//! Membership comes as full snapshots; the adapter diffs each against the previous one
//! and yields tower's changes, keyed by the instance's identity ([`InstanceKey`],
//! host and port): `Change::Insert(key, service)` for a member that joined, or whose
//! registry data (weight, zone, metadata) changed (tower replaces the service of an
//! existing key), and `Change::Remove(key)` for one that left. The services are made
//! by the caller's function from each [`Instance`] (a connection, a tonic `Channel` to
//! its address), once per join or change, never per request. When the registry is
//! closed the stream ends, and a tower balancer keeps the services it has.
//!
//! ```
//! # async fn demo() {
//! use std::convert::Infallible;
//! use meshline::tower::WatchDiscover;
//! use meshline::{EmptyProtection, Instance, WatchHub};
//! use tower::{Service, ServiceExt};
//!
//! let hub = WatchHub::new("example", EmptyProtection::Apply);
//! hub.publish("game", vec![Instance::parse("10.0.0.1:7000").unwrap()]);
//! // Each member becomes a service that answers with its own address.
//! let discover = WatchDiscover::new(hub.subscribe("game"), |instance: &Instance| {
//!     let address = instance.to_string();
//!     let answer = tower::service_fn(move |_: ()| {
//!         let address = address.clone();
//!         async move { Ok::<_, Infallible>(address) }
//!     });
//!     tower::load::Constant::new(answer, 0)
//! });
//! let mut balance = tower::balance::p2c::Balance::new(discover);
//! let answer = balance.ready().await.unwrap().call(()).await.unwrap();
//! assert_eq!(answer, "10.0.0.1:7000");
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::tower::discover::Change;
use futures_core::Stream;
use meshline_registry_core::{Discovery, Instance, InstanceKey, RegistryError, Watch};

/// A [`Watch`] as a [`tower::discover::Discover`]: each snapshot's difference from the
/// previous one as `Change::Insert` / `Change::Remove`, keyed by [`InstanceKey`], with
/// services made by `make` (see the [module docs](self)).
///
/// It is a `Stream<Item = Result<Change<InstanceKey, S>, Infallible>>`, which tower
/// takes as a `Discover`. The first poll yields an insert for every current member.
pub struct WatchDiscover<S, F> {
    watch: Watch,
    make: F,
    /// The members the consumer was told about, with the data their service was made
    /// from.
    members: BTreeMap<InstanceKey, Instance>,
    /// Changes of the last snapshot not yet yielded.
    pending: VecDeque<Change<InstanceKey, S>>,
}

// Nothing of `S` or `F` is ever pinned (no pin projection), so the adapter can move
// freely whatever they are; tower's balancers need `Discover + Unpin`.
impl<S, F> Unpin for WatchDiscover<S, F> {}

impl<S, F> WatchDiscover<S, F>
where
    F: FnMut(&Instance) -> S,
{
    /// Follows `watch`, making each member's service with `make`.
    pub fn new(watch: Watch, make: F) -> Self {
        WatchDiscover {
            watch,
            make,
            members: BTreeMap::new(),
            pending: VecDeque::new(),
        }
    }

    /// Follows the cluster `group` maps to in `discovery` (Seata's `txServiceGroup ->
    /// vgroupMapping -> cluster`), making each member's service with `make`.
    pub async fn from_discovery(
        discovery: &Discovery,
        group: &str,
        make: F,
    ) -> Result<Self, RegistryError> {
        Ok(WatchDiscover::new(discovery.watch(group).await?, make))
    }

    /// The members the consumer has been told about so far (after the changes yielded).
    pub fn members(&self) -> impl ExactSizeIterator<Item = &Instance> {
        self.members.values()
    }

    /// Queues the changes from the current members to `snapshot`'s.
    fn diff(&mut self, snapshot: &[Instance]) {
        let mut next = BTreeMap::new();
        for instance in snapshot {
            let key = instance.key();
            match self.members.remove(key) {
                Some(known) if known == *instance => {
                    next.insert(key.clone(), known);
                }
                // Joined, or described anew: tower replaces the service of a known key.
                _ => {
                    let service = (self.make)(instance);
                    self.pending.push_back(Change::Insert(key.clone(), service));
                    next.insert(key.clone(), instance.clone());
                }
            }
        }
        // What is left was not in the snapshot: it left.
        for key in std::mem::replace(&mut self.members, next).into_keys() {
            self.pending.push_back(Change::Remove(key));
        }
    }
}

impl<S, F> Stream for WatchDiscover<S, F>
where
    F: FnMut(&Instance) -> S,
{
    type Item = Result<Change<InstanceKey, S>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            match Pin::new(&mut this.watch).poll_next(cx) {
                Poll::Ready(Some(snapshot)) => this.diff(snapshot.instances()),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S, F> fmt::Debug for WatchDiscover<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchDiscover")
            .field("watch", &self.watch)
            .field("members", &self.members.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}
