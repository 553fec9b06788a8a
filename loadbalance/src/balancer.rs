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
        Balancer {
            lb,
            registry: StatsRegistry::new(),
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
            index,
            guard: InFlightGuard::begin(endpoint.stats_arc().clone()),
            endpoint: endpoint.clone(),
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
#[derive(Debug)]
pub struct Picked {
    endpoint: Endpoint,
    index: usize,
    guard: InFlightGuard,
}

impl Picked {
    /// The chosen endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Its position in the snapshot it was picked from (for index exclusions; prefer
    /// key exclusions, which survive membership changes).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The in-flight guard.
    pub fn guard(&self) -> &InFlightGuard {
        &self.guard
    }

    /// Splits into the endpoint and the guard (to move the guard into a future).
    pub fn into_parts(self) -> (Endpoint, InFlightGuard) {
        (self.endpoint, self.guard)
    }

    /// Records a success with its latency and ends the request.
    pub fn success(self, latency: Duration) {
        self.guard.success(latency);
    }

    /// Records a failure (error or timeout) and ends the request.
    pub fn failure(self) {
        self.guard.failure();
    }
}

/// Counts one request in flight on an endpoint; dropping it ends the count, whatever
/// happened: success, error, timeout, or a future dropped mid-call (cancellation).
///
/// [`success`](Self::success) and [`failure`](Self::failure) also feed the latency
/// estimate and failure counters; a plain drop records nothing but the end.
#[must_use = "dropping the guard at once ends the request's in-flight count"]
pub struct InFlightGuard {
    stats: Arc<EndpointStats>,
}

impl InFlightGuard {
    pub(crate) fn begin(stats: Arc<EndpointStats>) -> Self {
        stats.begin();
        InFlightGuard { stats }
    }

    /// The endpoint's stats.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Records a success taking `latency` and ends the request.
    pub fn success(self, latency: Duration) {
        self.stats.record_success(latency);
    }

    /// Records a failure (an error or a timeout) and ends the request.
    pub fn failure(self) {
        self.stats.record_failure();
    }

    /// Ends the request recording nothing (same as dropping the guard).
    pub fn cancel(self) {}
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.stats.end();
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("in_flight", &self.stats.in_flight())
            .finish()
    }
}
