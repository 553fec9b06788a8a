//! The client's shared core: which endpoints it follows (from the registry's
//! snapshots), which are alive, and the gate that counts calls for shutdown.
//!
//! Every endpoint the registry lists gets a slot with its own task (see `endpoint`).
//! A slot has a generation number: when an endpoint leaves and comes back, the old
//! task (still draining) and the new one share the key but not the generation, and the
//! old task's reports never touch the new slot.
//!
//! One membership path: each registry snapshot is diffed once, against the slots.
//! What that diff and the endpoint tasks learn reaches the balancer as [`Edit`]s
//! ("this endpoint connected, here is its connection", "that one dropped"): the
//! balancer's membership *is* the alive set, each endpoint carrying its
//! [`AliveEndpoint`] as payload, so nothing else keeps a second index of the alive
//! endpoints and a pick hands back the connection to send on.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use meshline_loadbalance::{Balancer, Edit};
use meshline_registry_core::{Discovery, Instance, InstanceKey, Watch};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::alive::{AliveEndpoint, AliveSet, EndpointState};
use super::gate::{CallGate, CallGuard};
use super::metrics::{Counter, Counters};
use super::options::ClientOptions;
use crate::codec::CODEC_SEATA;
use crate::connection::{ConnConfig, Connection, InboundHandler};
use crate::error::RpcError;
use crate::handshake::Handshake;

#[derive(Default)]
pub(crate) struct State {
    pub endpoints: BTreeMap<InstanceKey, Slot>,
    /// Connected endpoints out of the picks after failures (see `ejection`).
    pub ejected: BTreeMap<InstanceKey, super::ejection::Ejected>,
    /// Tasks of endpoints the registry removed, still draining; `shutdown` waits for
    /// them.
    pub draining: Vec<JoinHandle<()>>,
    /// The member count last warned about for being over the subset cap (`None` while
    /// the registry lists no more than the cap): one warning per change, not per
    /// snapshot.
    pub over_cap_warned: Option<usize>,
}

pub(crate) struct Slot {
    pub instance: Arc<Instance>,
    pub state: EndpointState,
    pub connects: u64,
    pub generation: u64,
    pub cmd: watch::Sender<bool>,
    pub task: Option<JoinHandle<()>>,
    /// Ejections in a row, and when it last came back (see `ejection`).
    pub ejections: u32,
    pub returned_at: Option<std::time::Instant>,
}

pub(crate) struct Inner {
    pub target: String,
    pub counters: Counters,
    /// Kept for the client's lifetime: some registries stop following their source when
    /// the last handle to them is dropped.
    pub _discovery: Option<Discovery>,
    pub options: ClientOptions,
    /// The alive set: every connected, handshaken endpoint, carrying its
    /// [`AliveEndpoint`]. Changed only with the state lock held (so changes are
    /// applied in order, and a reader holding the lock sees the current set).
    pub balancer: Balancer<AliveEndpoint>,
    /// The alive set as last published (see [`Inner::publish_alive`]).
    pub alive_tx: watch::Sender<Arc<AliveSet>>,
    pub state: Mutex<State>,
    pub handshake: Option<Arc<dyn Handshake>>,
    pub inbound: Option<Arc<dyn InboundHandler>>,
    /// Calls in flight and the closing flag (see `gate`).
    pub gate: CallGate,
    pub shutdown: CancellationToken,
    pub next_generation: AtomicU64,
}

impl Inner {
    pub fn count(&self, c: Counter) {
        self.counters.count(c, &self.target);
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a call, unless the client is closing.
    pub fn begin(&self) -> Result<CallGuard<'_>, RpcError> {
        self.gate.enter().ok_or(RpcError::Shutdown)
    }

    pub fn conn_config(&self) -> ConnConfig {
        let o = &self.options;
        ConnConfig {
            transport: o.transport.clone(),
            write_idle: o.heartbeat.then_some(o.write_idle),
            read_idle: o.heartbeat.then_some(o.read_idle),
            heartbeat_codec: CODEC_SEATA,
            probe: o.probe,
            on_close: None,
        }
    }

    /// Applies `edits` to the alive set (the balancer) and publishes the result to
    /// readers. Takes the locked state (unused otherwise) as proof that the state lock
    /// is held, so changes are applied in order and agree with the slots.
    pub(super) fn publish_alive(
        &self,
        _st: &State,
        edits: impl IntoIterator<Item = Edit<AliveEndpoint>>,
    ) {
        self.balancer.apply(edits);
        let set = Arc::new(AliveSet::new(self.balancer.snapshot()));
        metrics::gauge!("meshline_rpc_alive_endpoints", "target" => self.target.clone())
            .set(set.len() as f64);
        self.alive_tx.send_replace(set);
    }

    /// The alive set now (read it with the state lock held for a consistent view).
    pub(super) fn alive_now(&self) -> AliveSet {
        AliveSet::new(self.balancer.snapshot())
    }

    /// The slot for `key` if it is still generation `generation`.
    pub(super) fn slot_mut<'a>(
        st: &'a mut State,
        key: &InstanceKey,
        generation: u64,
    ) -> Option<&'a mut Slot> {
        st.endpoints
            .get_mut(key)
            .filter(|s| s.generation == generation)
    }

    pub fn set_state(&self, key: &InstanceKey, generation: u64, state: EndpointState) {
        if let Some(s) = Self::slot_mut(&mut self.state(), key, generation) {
            s.state = state;
        }
    }

    /// Puts the connection in the alive set; false when the slot is gone (or is a newer
    /// generation's).
    pub fn mark_alive(&self, key: &InstanceKey, generation: u64, conn: &Connection) -> bool {
        let mut st = self.state();
        let Some(slot) = Self::slot_mut(&mut st, key, generation) else {
            return false;
        };
        slot.state = EndpointState::Alive;
        slot.connects += 1;
        let instance = slot.instance.clone();
        let joined = Edit::Insert(
            (*instance).clone(),
            AliveEndpoint::new(instance, conn.clone()),
        );
        self.publish_alive(&st, [joined]);
        true
    }

    /// Takes the connection out of the alive set (if it is the one there) and records
    /// `state` on the slot (if it is still this generation's).
    pub fn mark_dead(
        &self,
        key: &InstanceKey,
        generation: u64,
        conn: &Connection,
        state: EndpointState,
    ) {
        let mut st = self.state();
        if let Some(s) = Self::slot_mut(&mut st, key, generation) {
            s.state = state;
        }
        if st
            .ejected
            .get(key)
            .is_some_and(|e| e.entry.connection.ptr_eq(conn))
        {
            st.ejected.remove(key);
        }
        let same = self
            .alive_now()
            .get(key)
            .is_some_and(|e| e.connection.ptr_eq(conn));
        if same {
            self.publish_alive(&st, [Edit::Remove(key.clone())]);
        }
    }

    /// Applies one membership snapshot.
    pub fn apply(self: &Arc<Self>, instances: &[Instance]) {
        let mut st = self.state();
        let wanted: Vec<Instance> = match self.options.subset_size {
            Some(k) => {
                if instances.len() > k {
                    if st.over_cap_warned != Some(instances.len()) {
                        st.over_cap_warned = Some(instances.len());
                        tracing::warn!(
                            listed = instances.len(),
                            cap = k,
                            "the registry lists more members than the client connects to; \
                             using a subset (stable random, or the deterministic aperture with \
                             transport.apertureCoordinate; raise transport.maxConnectedMembers \
                             if this is intended)"
                        );
                    }
                } else {
                    st.over_cap_warned = None;
                }
                match self.options.aperture {
                    Some(c) => crate::subset::aperture(instances, k, c),
                    None => {
                        let current: HashSet<InstanceKey> = st.endpoints.keys().cloned().collect();
                        crate::subset::choose(&current, instances, k)
                    }
                }
            }
            None => instances.to_vec(),
        };
        let wanted_keys: HashSet<&InstanceKey> = wanted.iter().map(Instance::key).collect();
        // Removed: drain.
        let removed: Vec<InstanceKey> = st
            .endpoints
            .keys()
            .filter(|k| !wanted_keys.contains(k))
            .cloned()
            .collect();
        // The alive set's changes, applied at once at the end.
        let alive = self.alive_now();
        let mut edits: Vec<Edit<AliveEndpoint>> = Vec::new();
        st.draining.retain(|t| !t.is_finished());
        for key in removed {
            if let Some(mut slot) = st.endpoints.remove(&key) {
                tracing::info!(endpoint = %key, "endpoint left the registry; draining");
                let _ = slot.cmd.send(false);
                if let Some(t) = slot.task.take() {
                    st.draining.push(t);
                }
            }
            if alive.get(&key).is_some() {
                edits.push(Edit::Remove(key.clone()));
            }
            st.ejected.remove(&key);
        }
        // Added or changed.
        for inst in wanted {
            let key = inst.key().clone();
            match st.endpoints.get_mut(&key) {
                Some(slot) => {
                    if *slot.instance != inst {
                        let described = Arc::new(inst);
                        slot.instance = described.clone();
                        if let Some(e) = st.ejected.get_mut(&key) {
                            e.entry.instance = described.clone();
                        }
                        if let Some(a) = alive.get(&key) {
                            let a = a.described_by(described.clone());
                            edits.push(Edit::Insert((*described).clone(), a));
                        }
                    }
                }
                None => {
                    tracing::info!(endpoint = %key, "endpoint joined; connecting");
                    let (cmd, cmd_rx) = watch::channel(true);
                    let instance = Arc::new(inst);
                    let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
                    let span =
                        tracing::info_span!("endpoint", target = %self.target, endpoint = %key);
                    let task = tokio::spawn(
                        super::endpoint::endpoint_task(
                            self.clone(),
                            instance.clone(),
                            generation,
                            cmd_rx,
                        )
                        .instrument(span),
                    );
                    st.endpoints.insert(
                        key,
                        Slot {
                            instance,
                            state: EndpointState::Connecting,
                            connects: 0,
                            generation,
                            cmd,
                            task: Some(task),
                            ejections: 0,
                            returned_at: None,
                        },
                    );
                }
            }
        }
        if !edits.is_empty() {
            self.publish_alive(&st, edits);
        }
    }
}

/// Follows the registry: applies every snapshot until the watch ends or the client
/// shuts down.
pub(crate) async fn follow(inner: Arc<Inner>, mut watch: Watch) {
    loop {
        let next = tokio::select! {
            n = watch.next() => n,
            _ = inner.shutdown.cancelled() => return,
        };
        match next {
            Ok(snapshot) => {
                tracing::debug!(
                    revision = snapshot.revision(),
                    members = snapshot.len(),
                    "membership snapshot"
                );
                inner.apply(snapshot.instances());
            }
            Err(e) => {
                tracing::warn!(error = %e, "membership watch ended; keeping the current endpoints");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use meshline_registry_core::{EmptyProtection, WatchHub};

    use super::*;
    use crate::RpcClient;

    /// Waits (up to 5 s) until the client follows some endpoints: its membership
    /// applied the first snapshot (state with no event to wait on).
    async fn until_following(inner: &Inner) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while inner.state().endpoints.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A registry listing 1,000 members gets at most the default cap of connections;
    /// the warning about it comes once per change.
    #[tokio::test]
    async fn a_huge_listing_connects_to_at_most_the_default_cap() {
        let hub = WatchHub::new("t", EmptyProtection::Apply);
        let many: Vec<Instance> = (0..1000u16)
            .map(|i| Instance::new("127.0.0.1", 20000 + i).unwrap())
            .collect();
        hub.publish("c", many.clone());
        let client = RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("RandomLoadBalance")
            .configure(|o| {
                o.backoff_initial = Duration::from_secs(30);
                o.backoff_max = Duration::from_secs(30);
            })
            .build()
            .await
            .unwrap();
        let cap = crate::DEFAULT_MAX_CONNECTED_MEMBERS;
        assert_eq!(client.options().subset_size, Some(cap));
        let inner = client.handle.inner.clone();
        until_following(&inner).await;
        let n = inner.state().endpoints.len();
        assert_eq!(n, cap, "connected to {n} of 1000 members");
        assert_eq!(inner.state().over_cap_warned, Some(1000));
        // The same listing again: the same subset, no new warning state.
        let before: Vec<InstanceKey> = inner.state().endpoints.keys().cloned().collect();
        inner.apply(&many);
        let after: Vec<InstanceKey> = inner.state().endpoints.keys().cloned().collect();
        assert_eq!(before, after);
        assert_eq!(inner.state().over_cap_warned, Some(1000));
        // Back under the cap: the warning is re-armed.
        inner.apply(&many[..10]);
        assert_eq!(inner.state().endpoints.len(), 10);
        assert_eq!(inner.state().over_cap_warned, None);
        client.shutdown(Duration::from_secs(1)).await;
    }

    #[test]
    fn max_connected_members_comes_from_config() {
        let mut config = meshline_registry_core::Config::default();
        let o = ClientOptions::from_config(&config).unwrap();
        assert_eq!(o.subset_size, Some(crate::DEFAULT_MAX_CONNECTED_MEMBERS));
        config.set("transport.maxConnectedMembers", "5").unwrap();
        assert_eq!(
            ClientOptions::from_config(&config).unwrap().subset_size,
            Some(5)
        );
        config.set("transport.maxConnectedMembers", "0").unwrap();
        assert_eq!(
            ClientOptions::from_config(&config).unwrap().subset_size,
            None
        );
    }

    /// `transport.apertureCoordinate` makes the subset the deterministic aperture: the
    /// client numbered 1 of 4, connecting to 3 of 12 members, takes the arc that starts
    /// a quarter of the way round the identity-ordered ring, every time.
    #[tokio::test]
    async fn an_aperture_coordinate_picks_its_arc_of_the_ring() {
        let mut config = meshline_registry_core::Config::default();
        config.set("transport.maxConnectedMembers", "3").unwrap();
        config.set("transport.apertureCoordinate", "1/4").unwrap();
        let o = ClientOptions::from_config(&config).unwrap();
        assert_eq!(o.aperture, crate::ApertureCoordinate::new(1, 4));
        config.set("transport.apertureCoordinate", "4/4").unwrap();
        let e = ClientOptions::from_config(&config).unwrap_err();
        assert!(e.to_string().contains("apertureCoordinate"), "{e}");

        let hub = WatchHub::new("t", EmptyProtection::Apply);
        let members: Vec<Instance> = (0..12u16)
            .map(|i| Instance::new("127.0.0.1", 21000 + i).unwrap())
            .collect();
        hub.publish("c", members.clone());
        let client = RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("RandomLoadBalance")
            .options(o)
            .configure(|o| {
                o.backoff_initial = Duration::from_secs(30);
                o.backoff_max = Duration::from_secs(30);
            })
            .build()
            .await
            .unwrap();
        let inner = client.handle.inner.clone();
        until_following(&inner).await;
        let mut ports: Vec<u16> = inner.state().endpoints.keys().map(|k| k.port).collect();
        ports.sort_unstable();
        assert_eq!(ports, [21003, 21004, 21005]);
        client.shutdown(Duration::from_secs(1)).await;
    }

    /// Fault 8: an old endpoint task (its endpoint removed and added again) wrote its
    /// state into the new slot for the same key.
    #[tokio::test]
    async fn an_old_generation_never_touches_a_new_slot() {
        let hub = WatchHub::new("t", EmptyProtection::Apply);
        hub.publish("c", vec![]);
        let client = RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("RandomLoadBalance")
            .configure(|o| {
                o.backoff_initial = Duration::from_secs(30);
                o.backoff_max = Duration::from_secs(30);
            })
            .build()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let inner = client.handle.inner.clone();
        // Port 1: nothing listens, so the slot settles in Down.
        let inst = Instance::new("127.0.0.1", 1).unwrap();
        let key = inst.key().clone();
        let generation = |inner: &Inner| inner.state().endpoints[&key].generation;
        inner.apply(std::slice::from_ref(&inst));
        let old = generation(&inner);
        inner.apply(&[]);
        inner.apply(std::slice::from_ref(&inst));
        let new = generation(&inner);
        assert_ne!(old, new);
        // Let the new task fail its connect and sleep its (30 s) backoff.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(matches!(
            inner.state().endpoints[&key].state,
            EndpointState::Down(_)
        ));
        inner.set_state(
            &key,
            old,
            EndpointState::Refused("from the old task".into()),
        );
        assert_ne!(
            inner.state().endpoints[&key].state,
            EndpointState::Refused("from the old task".into())
        );
        // The new generation's own reports still land.
        inner.set_state(&key, new, EndpointState::Draining);
        assert_eq!(inner.state().endpoints[&key].state, EndpointState::Draining);
        client.shutdown(Duration::from_secs(1)).await;
    }
}
