//! Membership: which endpoints the client follows, which are alive (in the picks),
//! and each endpoint's life. Everything that decides whether an endpoint takes calls
//! lives here, under one lock; the rest of the client only picks and books outcomes.
//!
//! ```text
//!  registry Watch ──snapshot──▶ follow ─▶ Membership::apply ── subset ──▶ slots
//!                                             │ (diff against the slots, once)
//!                                             ├─ new slot ──spawn──▶ endpoint task
//!                                             └─ gone slot ──drain─▶ endpoint task
//!  endpoint task ──Report──▶ Membership::report ──Edit──▶ Balancer (the alive set)
//!  a call's failure ─────────▶ ejection ──────────Edit──▶ Balancer
//!  every interval: the rates ─▶ outlier ─▶ ejection
//!  Balancer ──pick──▶ the call's connection
//! ```
//!
//! - `state`: the slots (one per endpoint followed, with its task and generation), the
//!   ejected endpoints and the draining tasks.
//! - `subset`: which of a large listing the client connects to.
//! - `endpoint`: one endpoint's task (connect, handshake or PING, reconnect with
//!   backoff, drain). It reports what happens ([`Report`]) and knows nothing else of
//!   the membership.
//! - `alive`: the alive set, which *is* the balancer's membership: each balancer
//!   endpoint carries its [`AliveEndpoint`] (connection and failure count) as payload,
//!   so nothing keeps a second index of the alive endpoints and a pick hands back the
//!   connection to send on.
//! - `ejection`: failure accrual and the return of an ejected endpoint.
//! - `outlier`: the rate rules (success rate, failure percentage) judged every
//!   interval, ejecting through `ejection`.
//!
//! A slot has a generation number: when an endpoint leaves and comes back, the old
//! task (still draining) and the new one share the key but not the generation, and the
//! old task's reports never touch the new slot.

pub(crate) mod alive;
mod ejection;
mod endpoint;
pub(crate) mod outlier;
mod state;
pub(crate) mod subset;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use meshline_loadbalance::{Balancer, Edit};
use meshline_registry_core::{Instance, InstanceKey, Refresher, Watch};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::metrics::{Counter, Counters};
use super::options::ClientOptions;
use crate::connection::{Connection, InboundHandler};
use crate::handshake::Handshake;
use alive::{AliveEndpoint, AliveSet, EndpointState};
use endpoint::{Connector, Report, Reports};
use state::{Slot, State};

/// The membership of one client: the slots, the alive set (its balancer) and what
/// ejection and the endpoint tasks need.
pub(crate) struct Membership {
    pub target: String,
    pub counters: Counters,
    pub options: ClientOptions,
    /// The alive set: every connected, handshaken endpoint, carrying its
    /// [`AliveEndpoint`]. Changed only with the state lock held (so changes are
    /// applied in order, and a reader holding the lock sees the current set).
    pub balancer: Balancer<AliveEndpoint>,
    /// The alive set as last published (see [`Membership::publish_alive`]).
    pub alive_tx: watch::Sender<Arc<AliveSet>>,
    state: Mutex<State>,
    /// How the endpoint tasks connect.
    connector: Arc<Connector>,
    pub shutdown: CancellationToken,
    next_generation: AtomicU64,
    /// Asks the registry to read the cluster again now (see [`Membership::set_aside`]).
    pub(super) refresher: Refresher,
}

impl Membership {
    pub fn new(
        target: String,
        options: ClientOptions,
        balancer: Balancer<AliveEndpoint>,
        handshake: Option<Arc<dyn Handshake>>,
        inbound: Option<Arc<dyn InboundHandler>>,
        refresher: Refresher,
    ) -> Self {
        let (alive_tx, _) = watch::channel(Arc::new(AliveSet::new(balancer.snapshot())));
        let shutdown = CancellationToken::new();
        let connector = Arc::new(Connector::new(
            &options,
            handshake,
            inbound,
            shutdown.clone(),
        ));
        Membership {
            target,
            counters: Counters::default(),
            options,
            balancer,
            alive_tx,
            state: Mutex::new(State::default()),
            connector,
            shutdown,
            next_generation: AtomicU64::new(1),
            refresher,
        }
    }

    pub fn count(&self, c: Counter) {
        self.counters.count(c, &self.target);
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `edits` to the alive set (the balancer) and publishes the result to
    /// readers. Takes the locked state as proof that the state lock is held, so changes
    /// are applied in order and agree with the slots; it also keeps the state's
    /// `warm_since` (slow start's reference).
    fn publish_alive(&self, st: &mut State, edits: impl IntoIterator<Item = Edit<AliveEndpoint>>) {
        self.balancer.apply(edits);
        let set = Arc::new(AliveSet::new(self.balancer.snapshot()));
        if !set.is_empty() {
            st.redirected_at = None;
        }
        if set.is_empty() {
            st.warm_since = None;
        } else if st.warm_since.is_none() {
            st.warm_since = Some(tokio::time::Instant::now());
        }
        metrics::gauge!("meshline_rpc_alive_endpoints", "target" => self.target.clone())
            .set(set.len() as f64);
        self.alive_tx.send_replace(set);
    }

    /// When a connection joining now starts its slow-start ramp: now, when the client
    /// has slow start and its alive set has not been empty for at least the window;
    /// otherwise it takes its full share at once. So the connections of a client that
    /// is starting, or of a whole cluster coming back together, do not ramp (there is
    /// no warm endpoint to take their share), and one joining a warm cluster does.
    fn ramp_from(&self, st: &State) -> Option<tokio::time::Instant> {
        let window = self.options.slow_start.as_ref()?.window;
        let now = tokio::time::Instant::now();
        st.warm_since
            .filter(|w| now.duration_since(*w) >= window)
            .map(|_| now)
    }

    /// The alive set now (read it with the state lock held for a consistent view).
    fn alive_now(&self) -> AliveSet {
        AliveSet::new(self.balancer.snapshot())
    }

    /// Records `state` on the slot of `key` if it is still generation `generation`.
    fn set_state(&self, key: &InstanceKey, generation: u64, state: EndpointState) {
        if let Some(s) = self.state().slot_mut(key, generation) {
            s.state = state;
        }
    }

    /// Puts the connection in the alive set; false when the slot is gone (or is a newer
    /// generation's).
    fn mark_alive(&self, key: &InstanceKey, generation: u64, conn: &Connection) -> bool {
        let mut st = self.state();
        let Some(slot) = st.slot_mut(key, generation) else {
            return false;
        };
        slot.state = EndpointState::Alive;
        slot.connects += 1;
        let instance = slot.instance.clone();
        let ramp_from = self.ramp_from(&st);
        let joined = Edit::Insert(
            (*instance).clone(),
            AliveEndpoint::new(
                instance,
                conn.clone(),
                self.options.limits.endpoint_limit(),
                ramp_from,
            ),
        );
        self.publish_alive(&mut st, [joined]);
        true
    }

    /// Takes the connection out of the alive set (if it is the one there) and records
    /// `state` on the slot (if it is still this generation's).
    fn mark_dead(
        &self,
        key: &InstanceKey,
        generation: u64,
        conn: &Connection,
        state: EndpointState,
    ) {
        let mut st = self.state();
        if let Some(s) = st.slot_mut(key, generation) {
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
            self.publish_alive(&mut st, [Edit::Remove(key.clone())]);
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
                    Some(c) => subset::aperture(instances, k, c),
                    None => {
                        let current: HashSet<InstanceKey> = st.endpoints.keys().cloned().collect();
                        subset::choose(&current, instances, k)
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
                    let reports: Arc<dyn Reports> = self.clone();
                    let task = tokio::spawn(
                        endpoint::endpoint_task(
                            self.connector.clone(),
                            reports,
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
            self.publish_alive(&mut st, edits);
        }
    }
}

impl Reports for Membership {
    fn report(&self, key: &InstanceKey, generation: u64, report: Report<'_>) -> bool {
        match report {
            Report::Connecting => self.set_state(key, generation, EndpointState::Connecting),
            Report::Connected { conn, again } => {
                self.count(Counter::Connects);
                if again {
                    self.count(Counter::Reconnects);
                }
                return self.mark_alive(key, generation, conn);
            }
            Report::Lost { conn, state } => self.mark_dead(key, generation, conn, state),
            Report::Failed(state) => {
                match state {
                    EndpointState::Refused(_) => self.count(Counter::HandshakeFailures),
                    _ => self.count(Counter::ConnectFailures),
                }
                self.set_state(key, generation, state);
            }
        }
        true
    }
}

/// Follows the registry: applies every snapshot until the watch ends or the client
/// shuts down.
pub(crate) async fn follow(inner: Arc<Membership>, mut watch: Watch) {
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

    /// `f`'s first `Some` within 5 s, polled every 10 ms: the membership's state has no
    /// event to wait on.
    async fn until<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            if let Some(v) = f() {
                return Some(v);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// Waits (up to 5 s) until the client follows some endpoints: its membership
    /// applied the first snapshot (state with no event to wait on).
    async fn until_following(inner: &Membership) {
        until(|| (!inner.state().endpoints.is_empty()).then_some(())).await;
    }

    /// A client of `options` following the hub's cluster "c", with a 30 s backoff so
    /// that an endpoint that fails its connect stays as it is while the test looks.
    async fn client_following(hub: &WatchHub, options: ClientOptions) -> RpcClient {
        RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("RandomLoadBalance")
            .options(options)
            .configure(|o| {
                o.backoff_initial = Duration::from_secs(30);
                o.backoff_max = Duration::from_secs(30);
            })
            .build()
            .await
            .unwrap()
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
        let client = client_following(&hub, ClientOptions::default()).await;
        let cap = crate::DEFAULT_MAX_CONNECTED_MEMBERS;
        assert_eq!(client.options().subset_size, Some(cap));
        let inner = client.handle.members.clone();
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
        let client = client_following(&hub, o).await;
        let inner = client.handle.members.clone();
        until_following(&inner).await;
        let mut ports: Vec<u16> = inner.state().endpoints.keys().map(|k| k.port).collect();
        ports.sort_unstable();
        assert_eq!(ports, [21003, 21004, 21005]);
        client.shutdown(Duration::from_secs(1)).await;
    }

    /// An old endpoint task (its endpoint removed and added again) never writes its state
    /// into the new slot for the same key: the generation tells them apart.
    #[tokio::test]
    async fn an_old_generation_never_touches_a_new_slot() {
        let hub = WatchHub::new("t", EmptyProtection::Apply);
        hub.publish("c", vec![]);
        let client = client_following(&hub, ClientOptions::default()).await;
        let inner = client.handle.members.clone();
        // Port 1: nothing listens, so the slot settles in Down. Listed, unlisted and
        // listed again through the registry, each step awaited in the slots.
        let inst = Instance::new("127.0.0.1", 1).unwrap();
        let key = inst.key().clone();
        let generation =
            |inner: &Membership| inner.state().endpoints.get(&key).map(|s| s.generation);
        hub.publish("c", vec![inst.clone()]);
        let old = until(|| generation(&inner)).await.expect("listed");
        hub.publish("c", vec![]);
        until(|| generation(&inner).is_none().then_some(()))
            .await
            .expect("unlisted");
        hub.publish("c", vec![inst.clone()]);
        let new = until(|| generation(&inner)).await.expect("listed again");
        assert_ne!(old, new);
        // The new task fails its connect and sleeps its (30 s) backoff.
        until(|| {
            matches!(inner.state().endpoints[&key].state, EndpointState::Down(_)).then_some(())
        })
        .await
        .expect("the new task's connect to a closed port never failed");
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
