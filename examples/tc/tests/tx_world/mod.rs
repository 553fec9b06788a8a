//! A small transaction world for the TM / RM / TC tests: in-process coordinators on
//! free loopback ports, an in-memory registry listing them, TMs and RMs built the way
//! an application builds them, and RM handlers that record what phase two asked.

#![allow(dead_code)] // each test binary uses its own subset

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::message::{BranchCommitRequest, BranchRollbackRequest, BranchStatus};
use meshline::rpc::rm::{BranchHandler, ResourceManager, RmBuilder, async_trait};
use meshline::rpc::tm::{TmBuilder, TransactionManager};
use meshline::rpc::{RpcClient, Server, ServerConfig};
use meshline::{EmptyProtection, Instance, Watch, WatchHub};
use meshline_example_tc::{Coordinator, TcOptions};
use tokio::sync::Notify;

pub const GROUP: &str = "my_tx_group";

/// One TC: its server and its coordinator.
pub struct Tc {
    pub server: Server,
    pub tc: Coordinator,
}

impl Tc {
    /// What a crash does: the coordinator stops (no answer, no phase two, nothing
    /// retried) and every socket closes at once.
    pub fn crash(&self) {
        self.tc.crash();
        self.server.kill();
    }

    pub fn instance(&self) -> Instance {
        Instance::new("127.0.0.1", self.server.local_addr().port()).unwrap()
    }
}

/// Quick housekeeping and phase-two timeouts, so retries and timeouts show within a
/// test's patience; AT commits answered once phase two is done (`at_commit_sync`), so
/// a test of phase two's mechanics reads its results when the commit returns. The
/// asynchronous AT commit that Seata's TC does (and this TC by default) is tested on
/// its own (tc_as_seata.rs).
pub fn quick_options() -> TcOptions {
    TcOptions {
        period: Duration::from_millis(50),
        phase_two_timeout: Duration::from_secs(2),
        at_commit_sync: true,
        ..TcOptions::default()
    }
}

/// [`quick_options`] with Seata's asynchronous AT commit.
pub fn seata_options() -> TcOptions {
    TcOptions {
        at_commit_sync: false,
        ..quick_options()
    }
}

pub async fn start_tc(options: TcOptions, config: ServerConfig) -> Tc {
    let (server, tc) = Coordinator::serve(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1".parse().unwrap(),
        options,
        config,
    )
    .await
    .unwrap();
    Tc { server, tc }
}

/// `n` TCs listed in the hub's cluster `c`.
pub async fn world(n: usize) -> (Arc<WatchHub>, Vec<Tc>) {
    let hub = Arc::new(WatchHub::new("test", EmptyProtection::Apply));
    let mut tcs = Vec::new();
    for _ in 0..n {
        tcs.push(start_tc(quick_options(), ServerConfig::default()).await);
    }
    publish(&hub, &tcs);
    (hub, tcs)
}

pub fn publish(hub: &WatchHub, tcs: &[Tc]) {
    hub.publish("c", tcs.iter().map(Tc::instance).collect());
}

fn quick(o: &mut meshline::rpc::ClientOptions) {
    o.backoff_initial = Duration::from_millis(20);
    o.backoff_max = Duration::from_millis(200);
    o.connect_timeout = Duration::from_millis(500);
    o.request_timeout = Duration::from_secs(5);
}

/// The quick reconnects, then the test's own `configure`.
fn quick_then(
    configure: impl FnOnce(&mut meshline::rpc::ClientOptions),
) -> impl FnOnce(&mut meshline::rpc::ClientOptions) {
    |o| {
        quick(o);
        configure(o);
    }
}

/// A TM or RM builder, built and then waited on until `n` TCs are connected: what a
/// test needs before its first call (one made sooner finds no TC alive yet).
pub trait Connected: Sized {
    type Built;
    fn connected(self, n: usize) -> impl Future<Output = Self::Built>;
}

impl Connected for TmBuilder {
    type Built = TransactionManager;
    async fn connected(self, n: usize) -> TransactionManager {
        let tm = self.build().await.unwrap();
        wait_alive(tm.client(), n).await;
        tm
    }
}

impl Connected for RmBuilder {
    type Built = ResourceManager;
    async fn connected(self, n: usize) -> ResourceManager {
        let rm = self.build().await.unwrap();
        wait_alive(rm.client(), n).await;
        rm
    }
}

/// Waits until `client` has `n` TCs connected (up to 5 s).
async fn wait_alive(client: &RpcClient, n: usize) {
    client.wait_alive(n, Duration::from_secs(5)).await.unwrap();
}

pub async fn tm(hub: &WatchHub, n_alive: usize) -> TransactionManager {
    tm_watching(hub.subscribe("c"), "c", n_alive).await
}

/// A TM following `watch` (a registry's, named `name`), once `n_alive` TCs are connected.
pub async fn tm_watching(watch: Watch, name: &str, n_alive: usize) -> TransactionManager {
    TransactionManager::builder()
        .watch(watch, name)
        .transaction_service_group(GROUP)
        .application_id("order-service")
        .load_balance_name("XID")
        .configure(quick)
        .connected(n_alive)
        .await
}

/// A TM of `orders` on the hub's cluster `c`, built from `config` and then `configure`
/// (after the quick reconnects), once one TC is connected.
pub async fn tm_with(
    hub: &WatchHub,
    config: &meshline::Config,
    configure: impl FnOnce(&mut meshline::rpc::ClientOptions),
) -> TransactionManager {
    TransactionManager::builder()
        .watch(hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .application_id("orders")
        .config(config)
        .configure(quick_then(configure))
        .connected(1)
        .await
}

/// The builder of an RM of `app` serving `resource` with `handler`, on the hub's
/// cluster `c`: what every RM here shares.
fn rm_builder(hub: &WatchHub, app: &str, resource: &str, handler: Recorder) -> RmBuilder {
    ResourceManager::builder()
        .watch(hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .application_id(app)
        .resource(resource)
        .handler(handler)
}

/// An RM of `app` serving `resource` on the hub's cluster `c`, built from `config` and
/// then `configure`, once one TC is connected.
pub async fn rm_with(
    hub: &WatchHub,
    (app, resource): (&str, &str),
    handler: Recorder,
    config: &meshline::Config,
    configure: impl FnOnce(&mut meshline::rpc::ClientOptions),
) -> ResourceManager {
    rm_builder(hub, app, resource, handler)
        .config(config)
        .configure(quick_then(configure))
        .connected(1)
        .await
}

/// What an RM's handler was asked, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Commit(String, i64),
    Rollback(String, i64),
}

/// Records phase two; answers `status` (or fails `fail_first` times first); waits
/// `delay` before answering.
#[derive(Clone, Default)]
pub struct Recorder {
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub changed: Arc<Notify>,
    pub delay: Option<Duration>,
    pub fail_first: Arc<Mutex<u32>>,
}

impl Recorder {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Waits until the handler was called `n` times (an event, not a sleep), up to
    /// `limit`.
    pub async fn wait_calls(&self, n: usize, limit: Duration) -> Vec<Call> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            let calls = self.calls();
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "{} phase-two calls after {limit:?}, wanted {n}: {calls:?}",
                    self.calls().len()
                );
            }
        }
    }

    /// One phase-two call: waits `delay`, records `call`, then answers `done` unless this
    /// call is one of the `fail_first`.
    async fn answer(&self, call: Call, done: BranchStatus) -> Result<BranchStatus, String> {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if self.record(call) {
            Ok(done)
        } else {
            Err("database unavailable".into())
        }
    }

    fn record(&self, c: Call) -> bool {
        self.calls.lock().unwrap().push(c);
        self.changed.notify_waiters();
        let mut f = self.fail_first.lock().unwrap();
        if *f > 0 {
            *f -= 1;
            false
        } else {
            true
        }
    }
}

#[async_trait]
impl BranchHandler for Recorder {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        self.answer(
            Call::Commit(r.xid, r.branch_id),
            BranchStatus::PhaseTwoCommitted,
        )
        .await
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        self.answer(
            Call::Rollback(r.xid, r.branch_id),
            BranchStatus::PhaseTwoRollbacked,
        )
        .await
    }
}

/// An RM of `app` serving `resource`, batching as asked.
pub async fn rm(
    hub: &WatchHub,
    app: &str,
    resource: &str,
    handler: Recorder,
    batch: bool,
    n_alive: usize,
) -> ResourceManager {
    rm_builder(hub, app, resource, handler)
        .load_balance_name("XID")
        .configure(|o| {
            quick(o);
            if !batch {
                o.transport.batch = None;
            }
        })
        .connected(n_alive)
        .await
}

/// `n` TCs, a TM and one `stock` RM serving `db-a` through `handler` (batching), both
/// connected to all `n`: the world of the tests about one resource.
pub async fn stock_world(
    n: usize,
    handler: Recorder,
) -> (Arc<WatchHub>, Vec<Tc>, TransactionManager, ResourceManager) {
    let (hub, tcs) = world(n).await;
    let tm = tm(&hub, n).await;
    let rm = rm(&hub, "stock", "db-a", handler, true, n).await;
    (hub, tcs, tm, rm)
}

/// Shuts `rm`'s client down (its connections close) and waits up to 2 s until `tc`
/// holds no connection serving `resource`: an RM gone before phase two.
pub async fn rm_gone(tc: &Tc, rm: &ResourceManager, resource: &str) {
    rm.client().shutdown(Duration::from_secs(1)).await;
    assert!(
        until(Duration::from_secs(2), || tc.tc.rm_connections(resource)
            == 0)
        .await,
        "the TC still holds a connection of {resource}"
    );
}

/// Whether `f` comes to hold within `limit` (polling, for state that has no event).
pub async fn until(limit: Duration, f: impl FnMut() -> bool) -> bool {
    meshline_testkit::until(limit, f).await.is_some()
}
