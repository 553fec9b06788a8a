//! The balancer a client holds: the current picker (see `current.rs`), rebuilt on
//! membership change, and the in-flight accounting around every pick.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use meshline_instance::{Instance, InstanceKey};

use crate::change::{JOINED, MembershipChange};
use crate::current::Current;
use crate::index::KeyIndex;
use crate::picker::EmptyPicker;
use crate::{
    Edit, Endpoint, InFlightGuard, LoadBalance, PickRequest, Picked, Picker, Snapshot,
    StatsRegistry,
};

/// Spreads requests over a cluster with one [`LoadBalance`] algorithm, and hands each
/// request the chosen endpoint's payload `T` (what to send through: a connection
/// handle), so nothing is looked up after the pick.
///
/// - membership comes in as a whole list ([`update`](Balancer::update), `T = ()`, e.g.
///   each snapshot of a registry watch) or as the [`Edit`]s a caller already knows
///   ([`apply`](Self::apply): "this endpoint connected, here is its connection",
///   "that one dropped"): either way instances become [`Endpoint`]s, reusing the stats
///   of identities already known, and a picker is built and swapped in atomically;
/// - [`pick`](Self::pick) (per request) loads the current picker without locking, asks
///   it for an endpoint and returns it with an [`InFlightGuard`] and its payload
///   ([`Picked::payload`]).
///
/// An update in identity order (as every registry snapshot is) is merged against the
/// previous membership, and edits are placed by the snapshot's key index: unchanged
/// endpoints are carried over as they are, only new identities touch the stats
/// registry, and the algorithm gets the difference ([`LoadBalance::rebuild`]), so one
/// member joining a cluster of 10 000 does not cost a rebuild of everything.
///
/// Membership changes are applied one at a time (an internal lock orders concurrent
/// ones); picks never wait for them.
///
/// Each thread that picks keeps a reference to the snapshot it last picked from, so
/// a pick costs no locked instruction to read the membership. That thread lets the
/// snapshot go at its first pick after a change (or when the balancer is dropped):
/// until then an endpoint that left stays allocated, with its payload, so a payload
/// should not rely on its drop to close what the endpoint held.
pub struct Balancer<T = ()> {
    lb: Arc<dyn LoadBalance>,
    registry: StatsRegistry,
    current: Current,
    /// Held while a membership change is computed and installed, so two concurrent
    /// changes cannot both start from the same snapshot and lose one.
    writer: Mutex<()>,
    _payload: PhantomData<fn(T) -> T>,
}

impl Balancer<()> {
    /// A balancer with no endpoints yet, whose endpoints carry no payload (the caller
    /// keeps its own map from endpoint to connection, or needs none: a balancer over
    /// addresses).
    pub fn new(lb: Arc<dyn LoadBalance>) -> Self {
        Balancer::with_payload(lb)
    }

    /// Replaces the membership with `instances` (duplicates keep their first
    /// occurrence). Stats of identities already known are kept.
    pub fn update(&self, instances: &[Instance]) {
        let _writer = self.write_lock();
        let previous = self.current.load_full();
        match self.merge(&previous, instances) {
            Some((endpoints, from)) => self.install(endpoints, true, &previous, Some(from)),
            None => {
                let endpoints = self.registry.endpoints(instances);
                self.install(endpoints, false, &previous, None);
            }
        }
    }

    /// Replaces the membership with ready-made endpoints (their stats are used as
    /// given; build them with [`Balancer::stats_registry`] to keep stats across
    /// updates).
    pub fn update_endpoints(&self, endpoints: Vec<Endpoint>) {
        let _writer = self.write_lock();
        let previous = self.current.load_full();
        self.install(endpoints, false, &previous, None);
    }
}

impl<T: Any + Send + Sync> Balancer<T> {
    /// A balancer with no endpoints yet, whose endpoints each carry a `T` given when
    /// they join ([`Edit::Insert`]) and handed back with every pick
    /// ([`Picked::payload`]).
    pub fn with_payload(lb: Arc<dyn LoadBalance>) -> Self {
        // The group's total is kept on every request only if the algorithm reads it,
        // and the endpoints' counts only if it reads those.
        let registry = if lb.reads_group_in_flight() {
            StatsRegistry::new()
        } else if lb.reads_in_flight() {
            StatsRegistry::summing()
        } else {
            StatsRegistry::uncounted()
        };
        Balancer {
            lb,
            registry,
            current: Current::new(Snapshot::empty()),
            writer: Mutex::new(()),
            _payload: PhantomData,
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

    /// Applies membership edits the caller already knows (see [`Edit`]): no diff of
    /// the whole membership, only the edited identities are looked at. Edits that
    /// change nothing (removing a non-member) build no picker.
    pub fn apply(&self, edits: impl IntoIterator<Item = Edit<T>>) {
        let edits: Vec<Edit<T>> = edits.into_iter().collect();
        if edits.is_empty() {
            return;
        }
        let _writer = self.write_lock();
        let previous = self.current.load_full();
        if let Some((endpoints, from)) = crate::edit::resolve(&previous, &self.registry, edits) {
            let sorted = previous.sorted();
            self.install(endpoints, sorted, &previous, Some(from));
        }
    }

    fn write_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // Nothing is left half-done under this lock by a panic (the snapshot is swapped
        // whole), so a poisoned lock is still usable.
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The endpoints for `instances` merged against the previous (identity-ordered)
    /// membership, with each one's previous position ([`JOINED`] for a new or changed
    /// one); `None` when either list is not in strictly ascending identity order.
    fn merge(
        &self,
        previous: &Snapshot,
        instances: &[Instance],
    ) -> Option<(Vec<Endpoint>, Vec<u32>)> {
        if !previous.sorted() || previous.len() >= JOINED as usize {
            return None;
        }
        let old = &previous.endpoints()[..];
        let mut out = Vec::with_capacity(instances.len());
        let mut from = Vec::with_capacity(instances.len());
        let mut stats = None;
        let mut j = 0;
        let mut last: Option<&InstanceKey> = None;
        // Whether the previous instance was found in the old list: then this one, if
        // found further on, is known to be greater (the old list is strictly ordered)
        // and the order check's string comparison is skipped.
        let mut last_found = false;
        for inst in instances {
            let key = inst.key();
            let mut same = None;
            while let Some(e) = old.get(j) {
                match e.key().cmp(key) {
                    std::cmp::Ordering::Less => j += 1,
                    std::cmp::Ordering::Equal => {
                        same = Some(e);
                        j += 1;
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if !(last_found && same.is_some()) && last.is_some_and(|l| l >= key) {
                return None;
            }
            last = Some(key);
            last_found = same.is_some();
            match same {
                Some(e) if e.same_data(inst) => {
                    out.push(e.clone());
                    from.push((j - 1) as u32);
                }
                Some(e) => {
                    out.push(Endpoint::with_stats(inst.clone(), e.stats_arc().clone()));
                    from.push(JOINED);
                }
                None => {
                    let reg = stats.get_or_insert_with(|| {
                        let mut reg = self.registry.updating(old.len());
                        // At least this many identities are new.
                        reg.reserve(instances.len().saturating_sub(old.len()));
                        reg
                    });
                    out.push(Endpoint::with_stats(inst.clone(), reg.stats(key)));
                    from.push(JOINED);
                }
            }
        }
        if stats.is_none() {
            // Nothing new: still prune what earlier updates left behind, as every
            // update does (a lock and a length check when there is nothing to prune).
            drop(self.registry.updating(old.len()));
        }
        Some((out, from))
    }

    fn install(
        &self,
        endpoints: Vec<Endpoint>,
        sorted: bool,
        previous: &Snapshot,
        from: Option<Vec<u32>>,
    ) {
        crate::stats::clock::now_nanos();
        let endpoints: Arc<[Endpoint]> = Arc::from(endpoints);
        // A merged update or edits of an ordered membership (distinct identities)
        // carry the key index over.
        let carry = sorted && from.is_some();
        let (picker, index) = if endpoints.is_empty() {
            (Arc::new(EmptyPicker) as Arc<dyn Picker>, None)
        } else {
            let from = from.unwrap_or_else(|| carried_over(previous, &endpoints));
            let joined: Vec<u32> = (0..endpoints.len() as u32)
                .filter(|&i| from[i as usize] == JOINED)
                .collect();
            // Where each previous endpoint is now (`JOINED`: it left).
            let mut new_of_old = vec![JOINED; previous.len()];
            for (i, &j) in from.iter().enumerate().filter(|&(_, &j)| j != JOINED) {
                new_of_old[j as usize] = i as u32;
            }
            let left: Vec<u32> = (0..new_of_old.len() as u32)
                .filter(|&j| new_of_old[j as usize] == JOINED)
                .collect();
            let picker = self.lb.rebuild(&MembershipChange::new(
                &endpoints, previous, &from, &joined, &left,
            ));
            let index = carry.then(|| previous.index().carry(&new_of_old, &endpoints, &joined));
            (picker, index)
        };
        tracing::debug!(
            lb = self.lb.name(),
            endpoints = endpoints.len(),
            "picker rebuilt"
        );
        let index = index.unwrap_or_else(|| KeyIndex::build(&endpoints));
        self.current.store(Arc::new(Snapshot::with_index(
            endpoints, picker, index, sorted,
        )));
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The current endpoints.
    pub fn endpoints(&self) -> Arc<[Endpoint]> {
        self.current.load().endpoints().clone()
    }

    /// The current endpoint with identity `key`, if it is a member (see
    /// [`Snapshot::endpoint`]).
    pub fn endpoint(&self, key: &InstanceKey) -> Option<Endpoint> {
        self.current.load().endpoint(key).cloned()
    }

    /// Chooses an endpoint for `req` and counts a request in flight on it; the result
    /// carries the endpoint's payload ([`Picked::payload`]). `None` when there is no
    /// eligible endpoint. Lock-free and allocation-free.
    #[inline]
    pub fn pick(&self, req: &PickRequest<'_>) -> Option<Picked<T>> {
        self.current.with(|snap| {
            let index = snap.picker().pick(req)?;
            let Some(endpoint) = snap.endpoints().get(index) else {
                return self.out_of_range(index, snap.len());
            };
            Some(Picked::new(InFlightGuard::begin(endpoint), index))
        })
    }

    #[cold]
    #[inline(never)]
    fn out_of_range(&self, index: usize, len: usize) -> Option<Picked<T>> {
        tracing::error!(
            lb = self.lb.name(),
            index,
            len,
            "picker returned an index out of range; treating as no endpoint"
        );
        None
    }
}

/// Where each of `endpoints` was in `previous` when it is the same endpoint (identity,
/// instance data and stats), for updates that were not merged. A list naming one
/// previous endpoint twice (ready-made endpoints with a repeated identity) is reported
/// as all new, so that algorithms build from scratch.
fn carried_over(previous: &Snapshot, endpoints: &[Endpoint]) -> Vec<u32> {
    let mut claimed = vec![false; previous.len()];
    let mut from = Vec::with_capacity(endpoints.len());
    for e in endpoints {
        let j = previous.position(e.key()).filter(|&j| {
            let old = &previous.endpoints()[j];
            old.is(e.instance()) && Arc::ptr_eq(old.stats_arc(), e.stats_arc())
        });
        match j {
            Some(j) if claimed[j] => return vec![JOINED; endpoints.len()],
            Some(j) if j < JOINED as usize => {
                claimed[j] = true;
                from.push(j as u32);
            }
            _ => from.push(JOINED),
        }
    }
    from
}

impl<T> fmt::Debug for Balancer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balancer")
            .field("lb", &self.lb.name())
            .field("endpoints", &self.current.load().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        // The payload lives in the endpoint: a pick carrying one is no larger.
        assert_eq!(
            size_of::<Option<Picked<[u64; 8]>>>(),
            2 * size_of::<usize>()
        );
    }

    #[test]
    fn requests_are_counted_as_far_as_the_algorithm_reads_them() {
        // (algorithm, group total kept, endpoint counts kept)
        for (name, total, lanes) in [
            ("BoundedLoad", true, true),
            ("zone:BoundedLoad", true, true),
            ("LeastActiveLoadBalance", false, true),
            ("P2C", false, true),
            ("xid:LeastActiveLoadBalance", false, true),
            ("RoundRobinLoadBalance", false, false),
            ("RandomLoadBalance", false, false),
            ("ConsistentHash", false, false),
            ("JumpHash", false, false),
            ("AccountHash", false, false),
            ("zone:XID", false, false),
            ("xid:RoundRobinLoadBalance", false, false),
        ] {
            let b = Balancer::new(by_name(name).unwrap());
            let group = b.stats_registry().group().clone();
            assert_eq!(group.counted(), total, "{name}");
            assert_eq!(group.counts_in_flight(), lanes, "{name}");
            b.update(&cluster(4));
            let held: Vec<Picked> = (0..6)
                .map(|_| b.pick(&PickRequest::default()).unwrap())
                .collect();
            let on_endpoints: u64 = b.endpoints().iter().map(|e| e.stats().in_flight()).sum();
            let want = if lanes { 6 } else { 0 };
            assert_eq!((group.in_flight(), on_endpoints), (want, want), "{name}");
            drop(held);
            let on_endpoints: u64 = b.endpoints().iter().map(|e| e.stats().in_flight()).sum();
            assert_eq!((group.in_flight(), on_endpoints), (0, 0), "{name}");
        }
    }

    #[test]
    fn parts_and_guards_keep_the_endpoint_and_end_once() {
        // An algorithm that reads load, so that requests are counted.
        let b = Balancer::new(by_name("LeastActiveLoadBalance").unwrap());
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
        assert_eq!((stats.in_flight(), stats.successes()), (0, 1));
        b.update(&cluster(2));
        let guard = b.pick(&PickRequest::default()).unwrap().into_guard();
        assert_eq!(guard.stats().in_flight(), 1);
        guard.cancel();
        assert_eq!(b.stats_registry().group().in_flight(), 0);
    }
}
