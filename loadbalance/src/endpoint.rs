//! One pickable server: a registry [`Instance`], its shared [`EndpointStats`] and what a
//! caller sends through (its payload), behind one reference count.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use meshline_instance::{Instance, InstanceKey};

use crate::{EndpointStats, InFlightGuard};

/// A server a picker can choose: what the registry said about it, the live counters
/// every balancer reads, and the payload a [`crate::Balancer<T>`] attached to it (a
/// connection handle: what a caller sends through once the endpoint is picked).
///
/// One shared pointer to all three: cloning is one reference-count increment (an
/// [`InFlightGuard`] holds the endpoint it counts on, so that is also what a request
/// costs in reference counting, and the payload comes with it for free). Two
/// endpoints with the same [`InstanceKey`] built through one [`crate::StatsRegistry`]
/// (or one [`crate::Balancer`]) share their stats.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<Inner>,
}

/// `repr(C)`, stats first: what every pick touches (the reference count in the `Arc`
/// header, the stats pointer) sits together at the allocation's start, whatever the
/// instance's size.
#[repr(C)]
struct Inner {
    stats: Arc<EndpointStats>,
    /// [`hash_key`] of the identity, computed once: the snapshot's key index is rebuilt
    /// on every membership change without hashing 10 000 strings again.
    key_hash: u64,
    /// What a [`crate::Balancer<T>`] attached (its `T`); `None` for a plain endpoint
    /// (`T = ()`: no allocation).
    payload: Option<Arc<dyn Any + Send + Sync>>,
    instance: Instance,
}

/// The process-wide hash of an identity that [`Endpoint`]s carry (foldhash, seeded at
/// random once per process: fast on short keys, and not predictable from outside, so
/// registry data cannot be crafted to collide).
pub(crate) fn hash_key(key: &InstanceKey) -> u64 {
    use std::hash::BuildHasher;
    static STATE: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    STATE.get_or_init(Default::default).hash_one(key)
}

impl Endpoint {
    /// An endpoint with fresh stats of its own.
    ///
    /// Prefer [`crate::StatsRegistry::endpoints`] or [`crate::Balancer::update`], which keep
    /// stats across membership changes and count a cluster's load in one group.
    pub fn new(instance: Instance) -> Self {
        Endpoint::with_stats(instance, Arc::new(EndpointStats::new()))
    }

    /// An endpoint using the given stats.
    pub fn with_stats(instance: Instance, stats: Arc<EndpointStats>) -> Self {
        Endpoint::carrying(instance, stats, None)
    }

    /// An endpoint using the given stats and carrying `payload` (see
    /// [`crate::Edit::Insert`]).
    pub(crate) fn carrying(
        instance: Instance,
        stats: Arc<EndpointStats>,
        payload: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        let key_hash = hash_key(instance.key());
        Endpoint {
            inner: Arc::new(Inner {
                stats,
                key_hash,
                payload,
                instance,
            }),
        }
    }

    /// The payload, if this endpoint carries one of type `T`: every endpoint of a
    /// [`crate::Balancer<T>`] (other than `T = ()`) carries the `T` it joined with.
    /// A pick's [`crate::Picked::payload`] is the typed way to it; this one serves
    /// endpoints found otherwise ([`crate::Snapshot::endpoint`]).
    #[inline]
    pub fn payload<T: Any>(&self) -> Option<&T> {
        self.inner.payload.as_deref()?.downcast_ref()
    }

    /// What the registry says about this server.
    #[inline]
    pub fn instance(&self) -> &Instance {
        &self.inner.instance
    }

    /// The identity (host, port).
    #[inline]
    pub fn key(&self) -> &InstanceKey {
        self.inner.instance.key()
    }

    /// [`hash_key`] of the identity.
    #[inline]
    pub(crate) fn key_hash(&self) -> u64 {
        self.inner.key_hash
    }

    /// Whether `instance` says exactly what this endpoint's instance says (identity,
    /// weight, zone, metadata): the endpoint can stand for it unchanged.
    #[inline]
    pub(crate) fn is(&self, instance: &Instance) -> bool {
        self.key() == instance.key() && self.same_data(instance)
    }

    /// [`is`](Self::is) without the identity (known to be equal): weight, zone and
    /// metadata.
    #[inline]
    pub(crate) fn same_data(&self, instance: &Instance) -> bool {
        let mine = self.instance();
        mine.weight() == instance.weight()
            && mine.zone() == instance.zone()
            && mine.metadata() == instance.metadata()
    }

    /// The registry weight (0 = no new traffic, unless every endpoint has weight 0).
    #[inline]
    pub fn weight(&self) -> u32 {
        self.inner.instance.weight()
    }

    /// The zone label, if any.
    #[inline]
    pub fn zone(&self) -> Option<&str> {
        self.inner.instance.zone()
    }

    /// The live counters.
    #[inline]
    pub fn stats(&self) -> &EndpointStats {
        &self.inner.stats
    }

    /// The live counters as a shared pointer (to keep them beyond this endpoint).
    #[inline]
    pub fn stats_arc(&self) -> &Arc<EndpointStats> {
        &self.inner.stats
    }

    /// Counts a request in flight on this endpoint without going through a picker
    /// (for example a broadcast to every endpoint). The count drops with the guard.
    /// Nothing is counted on the endpoints of a balancer whose algorithm reads no load
    /// ([`crate::LoadBalance::reads_in_flight`]); the guard still keeps the endpoint.
    #[inline]
    pub fn begin(&self) -> InFlightGuard {
        InFlightGuard::begin(self)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("address", &format_args!("{}", self.instance()))
            .field("weight", &self.weight())
            .field("zone", &self.zone())
            .field("in_flight", &self.stats().in_flight())
            .finish()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.instance(), f)
    }
}
