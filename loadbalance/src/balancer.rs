//! The balancer a client holds: the current picker behind an `ArcSwap`, rebuilt on
//! membership change, and the in-flight accounting around every pick.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use meshline_registry_core::{Instance, InstanceKey};

use crate::picker::EmptyPicker;
use crate::{Endpoint, EndpointStats, LoadBalance, PickRequest, Picker, StatsRegistry};

/// One membership snapshot with the picker built for it.
pub struct Snapshot {
    endpoints: Arc<[Endpoint]>,
    picker: Arc<dyn Picker>,
    /// Position of each identity in `endpoints`.
    index: HashMap<InstanceKey, usize>,
}

impl Snapshot {
    fn new(endpoints: Arc<[Endpoint]>, picker: Arc<dyn Picker>) -> Snapshot {
        let index = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (e.key().clone(), i))
            .collect();
        Snapshot {
            endpoints,
            picker,
            index,
        }
    }

    /// The endpoint with identity `key`, if it is a member: for requests bound to one
    /// server (a broadcast, a call to a named endpoint) that still want its in-flight
    /// count and latency recorded ([`Endpoint::begin`]). O(1).
    pub fn endpoint(&self, key: &InstanceKey) -> Option<&Endpoint> {
        self.index.get(key).map(|&i| &self.endpoints[i])
    }

    /// The endpoints, in the order the picker's indices refer to.
    pub fn endpoints(&self) -> &Arc<[Endpoint]> {
        &self.endpoints
    }

    /// The picker.
    pub fn picker(&self) -> &Arc<dyn Picker> {
        &self.picker
    }
}

/// Spreads requests over a cluster with one [`LoadBalance`] algorithm.
///
/// - [`update`](Self::update) (on every membership change) turns instances into
///   [`Endpoint`]s, reusing the stats of identities already known, builds a picker and
///   swaps it in atomically;
/// - [`pick`](Self::pick) (per request) loads the current picker without locking, asks
///   it for an endpoint and returns it with an [`InFlightGuard`].
pub struct Balancer {
    lb: Arc<dyn LoadBalance>,
    registry: StatsRegistry,
    current: ArcSwap<Snapshot>,
}

impl Balancer {
    /// A balancer with no endpoints yet.
    pub fn new(lb: Arc<dyn LoadBalance>) -> Self {
        // The group's total is kept on every request only if the algorithm reads it.
        let registry = if lb.reads_group_in_flight() {
            StatsRegistry::new()
        } else {
            StatsRegistry::summing()
        };
        Balancer {
            lb,
            registry,
            current: ArcSwap::from_pointee(Snapshot::new(
                Arc::from(Vec::new()),
                Arc::new(EmptyPicker),
            )),
        }
    }

    /// The algorithm.
    pub fn load_balance(&self) -> &Arc<dyn LoadBalance> {
        &self.lb
    }

    /// The stats registry (one entry per endpoint identity ever seen and still used).
    pub fn stats_registry(&self) -> &StatsRegistry {
        &self.registry
    }

    /// Replaces the membership with `instances` (duplicates keep their first
    /// occurrence). Stats of identities already known are kept.
    pub fn update(&self, instances: &[Instance]) {
        let endpoints = self.registry.endpoints(instances);
        self.install(endpoints);
    }

    /// Replaces the membership with ready-made endpoints (their stats are used as
    /// given; build them with [`Balancer::stats_registry`] to keep stats across
    /// updates).
    pub fn update_endpoints(&self, endpoints: Vec<Endpoint>) {
        self.install(endpoints);
    }

    fn install(&self, endpoints: Vec<Endpoint>) {
        crate::stats::clock::now_nanos();
        let picker = if endpoints.is_empty() {
            Arc::new(EmptyPicker) as Arc<dyn Picker>
        } else {
            self.lb.build(&endpoints)
        };
        tracing::debug!(
            lb = self.lb.name(),
            endpoints = endpoints.len(),
            "picker rebuilt"
        );
        self.current
            .store(Arc::new(Snapshot::new(Arc::from(endpoints), picker)));
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The current endpoints.
    pub fn endpoints(&self) -> Arc<[Endpoint]> {
        self.current.load().endpoints.clone()
    }

    /// The current endpoint with identity `key`, if it is a member (see
    /// [`Snapshot::endpoint`]).
    pub fn endpoint(&self, key: &InstanceKey) -> Option<Endpoint> {
        self.current.load().endpoint(key).cloned()
    }

    /// Chooses an endpoint for `req` and counts a request in flight on it. `None`
    /// when there is no eligible endpoint. Lock-free and allocation-free.
    pub fn pick(&self, req: &PickRequest<'_>) -> Option<Picked> {
        let snap = self.current.load();
        let index = snap.picker.pick(req)?;
        let Some(endpoint) = snap.endpoints.get(index) else {
            tracing::error!(
                lb = self.lb.name(),
                index,
                len = snap.endpoints.len(),
                "picker returned an index out of range; treating as no endpoint"
            );
            return None;
        };
        Some(Picked {
            guard: InFlightGuard::begin(endpoint),
            index,
        })
    }
}

impl fmt::Debug for Balancer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balancer")
            .field("lb", &self.lb.name())
            .field("endpoints", &self.current.load().endpoints.len())
            .finish()
    }
}

/// The result of [`Balancer::pick`]: the chosen endpoint and the guard that keeps it
/// counted as busy until the request ends.
///
/// The guard holds the endpoint (one reference count for both), so picking and dropping
/// the result costs one reference-count increment and decrement besides the in-flight
/// bookkeeping.
#[derive(Debug)]
pub struct Picked {
    guard: InFlightGuard,
    index: usize,
}

impl Picked {
    /// The chosen endpoint.
    #[inline]
    pub fn endpoint(&self) -> &Endpoint {
        &self.guard.endpoint
    }

    /// Its position in the snapshot it was picked from (for index exclusions; prefer
    /// key exclusions, which survive membership changes).
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The in-flight guard.
    #[inline]
    pub fn guard(&self) -> &InFlightGuard {
        &self.guard
    }

    /// Splits into the endpoint and the guard (to move the guard into a future). The
    /// endpoint is a clone (one reference-count increment); to keep only the guard, use
    /// [`into_guard`](Self::into_guard), whose [`InFlightGuard::endpoint`] is the same.
    #[inline]
    pub fn into_parts(self) -> (Endpoint, InFlightGuard) {
        (self.guard.endpoint.clone(), self.guard)
    }

    /// The guard alone (it still knows its endpoint: [`InFlightGuard::endpoint`]).
    #[inline]
    pub fn into_guard(self) -> InFlightGuard {
        self.guard
    }

    /// Records a success with its latency and ends the request.
    #[inline]
    pub fn success(self, latency: Duration) {
        self.guard.success(latency);
    }

    /// Records a failure (error or timeout) and ends the request.
    #[inline]
    pub fn failure(self) {
        self.guard.failure();
    }
}

/// Counts one request in flight on an endpoint; dropping it ends the count, whatever
/// happened: success, error, timeout, or a future dropped mid-call (cancellation).
///
/// [`success`](Self::success) and [`failure`](Self::failure) also feed the latency
/// estimate and failure counters; a plain drop records nothing but the end. The guard
/// keeps its endpoint (and so the endpoint's stats) alive until it ends, even when
/// the endpoint has left the membership meanwhile.
#[must_use = "dropping the guard at once ends the request's in-flight count"]
pub struct InFlightGuard {
    endpoint: Endpoint,
}

impl InFlightGuard {
    /// Counts a request on `endpoint` and keeps a clone of it.
    #[inline]
    pub(crate) fn begin(endpoint: &Endpoint) -> Self {
        endpoint.stats().begin();
        InFlightGuard {
            endpoint: endpoint.clone(),
        }
    }

    /// The endpoint's stats.
    #[inline]
    pub fn stats(&self) -> &EndpointStats {
        self.endpoint.stats()
    }

    /// The endpoint this request is counted on.
    #[inline]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Records a success taking `latency` and ends the request.
    pub fn success(self, latency: Duration) {
        self.stats().record_success(latency);
    }

    /// Records a failure (an error or a timeout) and ends the request.
    pub fn failure(self) {
        self.stats().record_failure();
    }

    /// Ends the request recording nothing (same as dropping the guard).
    #[inline]
    pub fn cancel(self) {}
}

impl Drop for InFlightGuard {
    #[inline]
    fn drop(&mut self) {
        self.endpoint.stats().end();
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("endpoint", &format_args!("{}", self.endpoint))
            .field("in_flight", &self.stats().in_flight())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::by_name;

    fn cluster(n: usize) -> Vec<Instance> {
        (0..n)
            .map(|i| Instance::parse(&format!("10.4.0.{}:8091", i + 1)).unwrap())
            .collect()
    }

    /// One word for the guard (the endpoint), one for the index: `Option<Picked>` comes
    /// back in two registers.
    #[test]
    fn a_pick_is_two_words() {
        assert_eq!(size_of::<Endpoint>(), size_of::<usize>());
        assert_eq!(size_of::<InFlightGuard>(), size_of::<usize>());
        assert_eq!(size_of::<Option<Picked>>(), 2 * size_of::<usize>());
    }

    #[test]
    fn the_group_total_is_counted_only_for_algorithms_that_read_it() {
        for (name, counted) in [
            ("BoundedLoad", true),
            ("zone:BoundedLoad", true),
            ("RoundRobinLoadBalance", false),
            ("LeastActiveLoadBalance", false),
            ("P2C", false),
            ("zone:XID", false),
        ] {
            let b = Balancer::new(by_name(name).unwrap());
            assert_eq!(b.stats_registry().group().counted(), counted, "{name}");
            b.update(&cluster(4));
            let held: Vec<Picked> = (0..6)
                .map(|_| b.pick(&PickRequest::default()).unwrap())
                .collect();
            assert_eq!(b.stats_registry().group().in_flight(), 6, "{name}");
            drop(held);
            assert_eq!(b.stats_registry().group().in_flight(), 0, "{name}");
        }
    }

    #[test]
    fn parts_and_guards_keep_the_endpoint_and_end_once() {
        let b = Balancer::new(by_name("RoundRobinLoadBalance").unwrap());
        b.update(&cluster(2));
        let picked = b.pick(&PickRequest::default()).unwrap();
        let key = picked.endpoint().key().clone();
        let (endpoint, guard) = picked.into_parts();
        assert_eq!(endpoint.key(), &key);
        assert_eq!(guard.endpoint().key(), &key);
        // The endpoint leaves the membership; the guard still counts on it.
        b.update(&[]);
        assert_eq!(guard.stats().in_flight(), 1);
        drop(endpoint);
        assert_eq!(guard.stats().in_flight(), 1);
        let stats = guard.endpoint().stats_arc().clone();
        guard.success(Duration::from_millis(2));
        assert_eq!(
            (stats.in_flight(), stats.successes(), stats.picks()),
            (0, 1, 1)
        );
        b.update(&cluster(2));
        let guard = b.pick(&PickRequest::default()).unwrap().into_guard();
        assert_eq!(guard.stats().in_flight(), 1);
        guard.cancel();
        assert_eq!(b.stats_registry().group().in_flight(), 0);
    }
}
