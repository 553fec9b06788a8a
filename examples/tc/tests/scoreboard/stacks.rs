//! The two stacks the scoreboard compares, on the same rpc-client connections.
//!
//! - **meshline**: an `RpcClient` as a user who wants its resilience sets it up:
//!   `xid:P2C` (XID calls to the TC they name, the rest by peak-EWMA P2C), Seata's
//!   classifier (through the TM handshake), slow start over 2 s, hedging of reads at
//!   the 95th percentile, and its defaults for the rest (ejection, probe, retry budget,
//!   limits).
//! - **tower**: tower's own parts composed as its docs compose them, over an
//!   `RpcClient` used only as a connection pool (`call_to` one named endpoint; its
//!   ejection and outlier detection off, every answer read as a success): each TC a
//!   service behind `PeakEwma` (tower's default RTT guess for an unmeasured service,
//!   30 ms, and a 10 s decay), `p2c::Balance` over the same registry watch
//!   (`meshline::tower::WatchDiscover`), `ConcurrencyLimit` (64), `Retry` of failed
//!   calls within a `TpsBudget` (20 % of calls, 10 a second at least: tower's
//!   example), and `Hedge` of reads at the 95th percentile. A call the TC answers with
//!   the server's failure is an error to it (what the Seata TM makes of it), so tower
//!   retries it. tower's retry cannot tell a request that never left from one that
//!   may have been applied: the retries of writes (GlobalBegins) after an error that
//!   may have been delivered are counted ([`Stack::risky_retries`]), each a
//!   transaction perhaps begun twice. meshline retries only what was not written.
//!
//! Both: a 2 s call timeout, hedging latencies over 1 s periods (the runs are seconds
//! long).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use meshline::rpc::{
    CallOptions, Classifier, Hedging, Outcome, Payload, RpcClient, RpcError, SeataRegistration,
    SlowStart,
};
use meshline::tower::WatchDiscover;
use meshline::{Instance, Watch};
use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::limit::ConcurrencyLimit;
use tower::load::{CompleteOnResponse, PeakEwma};
use tower::retry::Retry;
use tower::retry::budget::{Budget, TpsBudget};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt};

use super::load::Req;

/// Every call's timeout, in both stacks.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Hedging's latency period, in both stacks.
const HEDGE_PERIOD: Duration = Duration::from_secs(1);

/// What a call gives back: the TC that answered (`host:port`) and its answer.
pub type Answer = (String, Payload);

/// One client of either stack.
#[derive(Clone)]
pub enum Stack {
    Meshline(RpcClient),
    Tower(
        BoxCloneSyncService<Req, Answer, BoxError>,
        RpcClient,
        Arc<AtomicU64>,
    ),
}

/// Which stack a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Meshline,
    Tower,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Meshline => "meshline",
            Kind::Tower => "tower",
        }
    }
}

impl Stack {
    /// A client of `kind` following `watch`, registered with `handshake`.
    pub async fn build(kind: Kind, watch: Watch, handshake: SeataRegistration) -> Stack {
        match kind {
            Kind::Meshline => Stack::Meshline(meshline(watch, handshake).await),
            Kind::Tower => tower_stack(watch, handshake).await,
        }
    }

    /// One call.
    pub async fn call(&self, req: Req) -> Result<Answer, String> {
        match self {
            Stack::Meshline(client) => {
                let mut opts = match &req.xid {
                    Some(xid) => CallOptions::xid(xid).idempotent(),
                    None => CallOptions::new(),
                };
                opts = opts.with_timeout(CALL_TIMEOUT);
                client
                    .call(req.payload, opts)
                    .await
                    .map(|r| (r.endpoint.to_string(), r.payload))
                    .map_err(|e| e.to_string())
            }
            Stack::Tower(service, ..) => service
                .clone()
                .oneshot(req)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// The client under the stack (for waiting on its connections and shutting down).
    pub fn client(&self) -> &RpcClient {
        match self {
            Stack::Meshline(c) | Stack::Tower(_, c, _) => c,
        }
    }

    /// Writes sent again after an error that may have been delivered (tower's only;
    /// meshline never does it).
    pub fn risky_retries(&self) -> u64 {
        match self {
            Stack::Meshline(_) => 0,
            Stack::Tower(_, _, n) => n.load(Ordering::Relaxed),
        }
    }
}

async fn meshline(watch: Watch, handshake: SeataRegistration) -> RpcClient {
    RpcClient::builder()
        .watch(watch, "c")
        .load_balance_name("xid:P2C")
        .handshake(handshake)
        .configure(|o| {
            o.request_timeout = CALL_TIMEOUT;
            o.slow_start = Some(SlowStart::over(Duration::from_secs(2)));
            o.hedging = Some(Hedging {
                period: HEDGE_PERIOD,
                ..Hedging::default()
            });
            quick_reconnects(o);
        })
        .build()
        .await
        .expect("meshline client")
}

/// Both stacks reconnect alike: quickly, as a restarted TC's clients should.
fn quick_reconnects(o: &mut meshline::rpc::ClientOptions) {
    o.backoff_initial = Duration::from_millis(50);
    o.backoff_max = Duration::from_millis(500);
    o.connect_timeout = Duration::from_millis(500);
}

/// The connection pool under the tower stack: connections and their liveness
/// (reconnects, the silent-peer probe), nothing that judges answers.
async fn pool(watch: Watch, handshake: SeataRegistration) -> RpcClient {
    RpcClient::builder()
        .watch(watch, "c")
        .load_balance_name("RoundRobinLoadBalance")
        .handshake(handshake)
        .configure(|o| {
            o.request_timeout = CALL_TIMEOUT;
            o.classifier = Some(Classifier::new(|_: &Payload| Outcome::Success));
            o.eject_after_failures = 0;
            o.outlier.max_ejection_percent = 0;
            quick_reconnects(o);
        })
        .build()
        .await
        .expect("tower's connection pool")
}

/// One TC as a tower service: `call_to` it on the pool; the server's failure is an
/// error.
fn tc_service(
    pool: RpcClient,
    instance: &Instance,
) -> PeakEwma<BoxCloneSyncService<Req, Answer, BoxError>, CompleteOnResponse> {
    let key = instance.key().clone();
    let seata = Classifier::seata();
    let svc = tower::service_fn(move |req: Req| {
        let (pool, key, seata) = (pool.clone(), key.clone(), seata.clone());
        async move {
            let r = pool.call_to(&key, req.payload, Some(CALL_TIMEOUT)).await?;
            if seata.classify(&r.payload) == Outcome::ServerFailure {
                return Err::<Answer, BoxError>(
                    format!("{} answered with the server's failure", r.endpoint).into(),
                );
            }
            Ok((r.endpoint.to_string(), r.payload))
        }
    });
    PeakEwma::new(
        BoxCloneSyncService::new(svc),
        Duration::from_millis(30),
        Duration::from_secs(10).as_nanos() as f64,
        CompleteOnResponse::default(),
    )
}

async fn tower_stack(watch: Watch, handshake: SeataRegistration) -> Stack {
    let pool = pool(watch.clone(), handshake).await;
    let make = {
        let pool = pool.clone();
        move |i: &Instance| tc_service(pool.clone(), i)
    };
    let balance = Balance::new(WatchDiscover::new(watch, make));
    let shared = Buffer::new(balance, 1024);
    let limited = ConcurrencyLimit::new(shared, 64);
    let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2));
    let risky = Arc::new(AtomicU64::new(0));
    let policy = RetryFailed {
        budget,
        risky: risky.clone(),
    };
    let retry = Retry::new(policy, limited);
    let hedge = tower::hedge::Hedge::new::<Req>(retry, HedgeReads, 20, 0.95, HEDGE_PERIOD);
    let service = BoxCloneSyncService::new(Buffer::new(hedge, 1024).map_err(BoxError::from));
    Stack::Tower(service, pool, risky)
}

/// tower's retry: a failed call again, while the budget allows.
#[derive(Clone)]
struct RetryFailed {
    budget: Arc<TpsBudget>,
    /// Writes retried after an error that may have been delivered.
    risky: Arc<AtomicU64>,
}

impl tower::retry::Policy<Req, Answer, BoxError> for RetryFailed {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        req: &mut Req,
        result: &mut Result<Answer, BoxError>,
    ) -> Option<Self::Future> {
        match result {
            Ok(_) => {
                self.budget.deposit();
                None
            }
            Err(e) => {
                if !self.budget.withdraw() {
                    return None;
                }
                let maybe_applied = e
                    .downcast_ref::<RpcError>()
                    .is_some_and(|e| !e.is_not_delivered());
                if maybe_applied && !req.idempotent() {
                    self.risky.fetch_add(1, Ordering::Relaxed);
                }
                Some(std::future::ready(()))
            }
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// tower's hedge: reads only.
#[derive(Clone)]
struct HedgeReads;

impl tower::hedge::Policy<Req> for HedgeReads {
    fn clone_request(&self, req: &Req) -> Option<Req> {
        req.idempotent().then(|| req.clone())
    }

    fn can_retry(&self, req: &Req) -> bool {
        req.idempotent()
    }
}
