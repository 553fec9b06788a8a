//! # meshline-example-tc
//!
//! An in-memory Seata TC and the programs around it, built only on the `meshline`
//! facade, the way an application would use it:
//!
//! | program | what it shows |
//! |---|---|
//! | `quickstart` | two TCs, a file registry, a TM and an RM: a commit, a rollback, following an unregister |
//! | `demo` | three TCs in-process, a TM and two RMs, 16 workers of global transactions, one TC killed under load, a table of what happened |
//! | `tc-server` | this crate's TC ([`Coordinator`]), registered in any registry the facade knows |
//! | `tm-client` | a TM: begins global transactions on its group's TCs, commits or rolls them back |
//! | `rm-client` | an RM: registers a resource, joins a transaction with a branch, answers phase two |
//! | `tx-bench` | global transactions per second through this TC against the echo rate of the same run |
//!
//! ```text
//! cargo run -p meshline-example-tc --bin quickstart
//! cargo run --release -p meshline-example-tc --bin demo
//! ```
//!
//! By default only the file registry is compiled in, so these build with a Rust
//! toolchain alone; with `--features all-registries` every registry backend is, so
//! `tc-server` and `tm-client` take any `registry.type` (that build needs `protoc`).
//! The game gateway example is its own crate beside this one (`examples/gateway`).
//!
//! # The TC
//!
//! An in-memory Seata TC: what the `tc-server`, `demo` and `quickstart` programs run.
//!
//! **Not durable**: sessions, branches and locks live in this process's memory only. A
//! TC that dies loses every transaction it had not finished, exactly as a Seata server
//! with `store.mode=file` would if its files were lost. It exists to show and test a
//! real two-phase commit end to end, not to replace Seata's server.
//!
//! What it does, following Seata's `DefaultCoordinator` / `DefaultCore`:
//!
//! - **Registration**: RegisterTM and RegisterRM on every connection (answered
//!   `identified = 1`, or 0 when told to refuse); the RMs are kept by resource id and
//!   application (`channels`), so phase two finds an RM again after it reconnects, as
//!   Seata's `ChannelManager` does.
//! - **Begin**: an XID as Seata makes it, `ip:port:transactionId`, with ids from a
//!   Seata-style `IdWorker` (`ids`).
//! - **Branches**: registration under a session that is still `Begin`; an AT branch's
//!   lock keys are taken in the global lock table (`locks`), a row held by another
//!   transaction answers `LockKeyConflict`; GlobalLockQuery reads the same table.
//! - **Commit and rollback** drive phase two over each RM's own connection, as
//!   requests from the server (`phase_two`): commit to every branch at once, rollback
//!   last branch first. A branch whose RM is not connected or does not answer is
//!   retried by the background loop (every `period`) until it is done, or until
//!   `max_retry_time`. As Seata's `DefaultCore`, an AT commit is answered `Committed`
//!   at once and committed by that loop; any other answers once its branches were
//!   sent (`Failed` / `Unknown` / `CommitRetrying` when one could not be). The
//!   behaviours a client can see, each beside Seata's source, are in
//!   docs/seata-compat.md, "The example TC beside Seata's".
//! - **Timeouts**: a session still `Begin` past its timeout is rolled back
//!   (`TimeoutRollbacked`); a commit that comes too late answers `TimeoutRollbacking`.
//! - **Batching**: a MergedWarpMessage's requests are served concurrently (`merge`).
//!   Clients of Seata 1.5.0 or later (meshline registers as 2.3.0) get each result as
//!   soon as it is ready, in BatchResultMessages matched by request id, so a merged
//!   GlobalBegin is not held back by the GlobalCommit beside it waiting for phase two.
//!   Older clients, and every client when [`TcOptions::batch_send_response`] is off,
//!   get one MergeResultMessage, in order, once the last result is ready.
//! - **Bad input** is refused, never echoed (`dispatch`).

#![warn(missing_docs)]

mod channels;
mod cluster;
mod dispatch;
mod ids;
mod locks;
mod merge;
mod phase_two;
mod session;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use meshline::rpc::message::GlobalStatus;
use meshline::rpc::{Server, ServerConfig};
use tokio::net::TcpListener;

pub use channels::{Client, Role};

impl Inner {
    fn crashed(&self) -> bool {
        self.crashed.load(Ordering::Relaxed)
    }

    fn store_failing(&self) -> bool {
        self.store_failing.load(Ordering::Relaxed)
    }

    fn raft_follower(&self) -> bool {
        self.raft_follower.load(Ordering::Relaxed)
    }
}

use channels::Channels;
pub use cluster::server_cluster;
use ids::IdWorker;
use locks::LockTable;
use session::Sessions;

/// `ip:port` as Seata writes it into an XID (`XID.generateXID`: the host address as
/// Java prints it, then the port): IPv6 neither bracketed nor compressed
/// (`0:0:0:0:0:0:0:1:8091:42`), so a client that splits at the last two `:` reads it.
pub fn java_address(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
            format!("{}:{port}", groups.join(":"))
        }
    }
}

/// How a coordinator behaves.
#[derive(Debug, Clone)]
pub struct TcOptions {
    /// The `ip:port` written into XIDs: the address clients know this TC by (the XID
    /// balancer routes a transaction back to it), in Java's form ([`java_address`]).
    pub xid_address: String,
    /// How often timed-out sessions are rolled back and unfinished phase twos retried
    /// (Seata: 1 s).
    pub period: Duration,
    /// How long a BranchCommit / BranchRollback waits for the RM
    /// (`transport.rpcTcRequestTimeout`, 15 s).
    pub phase_two_timeout: Duration,
    /// Give up retrying phase two this long after the transaction began (Seata's
    /// `server.maxCommitRetryTimeout`; `None`, Seata's -1, retries forever).
    pub max_retry_time: Option<Duration>,
    /// Commit AT transactions before answering, as this TC once did: the answer waits
    /// for phase two (or says `CommitRetrying` when a branch is left to retry). Off
    /// (the default, Seata's way): an AT commit is answered `Committed` at once and its
    /// branches are committed by the background loop (`AsyncCommitting`), whose
    /// retries are the TC's business. For tests that want phase two done when the
    /// commit returns.
    pub at_commit_sync: bool,
    /// How long an XA branch answered `XAER_NOTA` (the database no longer knows the XA
    /// transaction) is retried past the session's timeout before it is taken as done:
    /// the longer of this and the session's timeout (Seata's
    /// `server.xaerNotaRetryTimeout`, 60 s).
    pub xaer_nota_retry_timeout: Duration,
    /// Answer registrations with `identified = 0` (to see a client's refusal path).
    pub refuse_registration: bool,
    /// Put the head entry `tc = <tag>` on every answer (which TC answered).
    pub tag: Option<String>,
    /// Largest frame, and the cap on a decompressed body.
    pub max_frame_len: usize,
    /// The version answered to registrations.
    pub version: String,
    /// Answer the MergedWarpMessages of clients of Seata 1.5.0 or later result by
    /// result, in BatchResultMessages, as each is ready (Seata's
    /// `transport.enableTcServerBatchSendResponse`, read by [`batch_send_response`]);
    /// off, or for older clients, one MergeResultMessage answers the whole frame once
    /// its last request is done.
    ///
    /// **On by default, where Seata's default is off.** The one-answer path holds a
    /// merged GlobalBegin (or BranchRegister) back until every request of its frame is
    /// done, a GlobalCommit beside it included, which waits for phase two on the RMs:
    /// head-of-line blocking that makes batching the TM too slower than batching the
    /// RMs alone, where BatchResult answers make it faster (15-30 % in
    /// examples/tc/BENCHMARKS.md). The version check keeps this safe for old clients, and
    /// every meshline client (2.3.0) takes both kinds of answer. Seata's TC (where the
    /// switch came in 1.5.0) leaves it off; set the key to `false` to see a stock Seata
    /// TC's answers.
    pub batch_send_response: bool,
}

/// Seata's key for [`TcOptions::batch_send_response`].
pub const BATCH_SEND_RESPONSE_KEY: &str = "transport.enableTcServerBatchSendResponse";

/// [`TcOptions::batch_send_response`] from `config`'s
/// `transport.enableTcServerBatchSendResponse` (`true` when absent, this TC's default);
/// an invalid value is an error naming the key.
pub fn batch_send_response(config: &meshline::Config) -> Result<bool, meshline::RegistryError> {
    let on = config
        .part("transport")
        .reader()
        .boolean("enableTcServerBatchSendResponse", true)?;
    Ok(on)
}

impl Default for TcOptions {
    fn default() -> Self {
        TcOptions {
            xid_address: "127.0.0.1:8091".into(),
            period: Duration::from_secs(1),
            phase_two_timeout: Duration::from_secs(15),
            max_retry_time: None,
            at_commit_sync: false,
            xaer_nota_retry_timeout: Duration::from_secs(60),
            refuse_registration: false,
            tag: None,
            max_frame_len: meshline::rpc::codec::DEFAULT_MAX_FRAME_LEN,
            version: env!("CARGO_PKG_VERSION").into(),
            batch_send_response: true,
        }
    }
}

/// What a coordinator did, for reports.
#[derive(Debug, Default)]
pub struct TcStats {
    /// Registrations answered.
    pub registrations: AtomicU64,
    /// Transaction requests answered `NotRaftLeader` (see [`Coordinator::raft_follower`]).
    pub not_leader: AtomicU64,
    /// UnregisterRM requests served (an RM leaving in order).
    pub unregistered: AtomicU64,
    /// Global transactions begun.
    pub begun: AtomicU64,
    /// Committed (every branch).
    pub committed: AtomicU64,
    /// Rolled back on request.
    pub rolled_back: AtomicU64,
    /// Rolled back because they timed out.
    pub timed_out: AtomicU64,
    /// Ended failed (a branch gave up, or retries ran out).
    pub failed: AtomicU64,
    /// BranchCommit / BranchRollback requests sent to RMs.
    pub phase_two_sent: AtomicU64,
    /// Phase twos the background loop has started and not finished.
    pub background_drives: AtomicU64,
    /// The most of those at once: at most [`DRIVES_AT_ONCE`].
    pub background_drives_peak: AtomicU64,
    /// Branch registrations refused for a lock held by another transaction.
    pub lock_conflicts: AtomicU64,
    /// Requests refused as bad input (undecodable, wrong codec, unknown type).
    pub bad_requests: AtomicU64,
    /// MergedWarpMessages served (batched requests from Seata-style clients).
    pub merged_frames: AtomicU64,
    /// MergedWarpMessages answered with one MergeResultMessage (old clients, or batch
    /// responses off).
    pub merge_results: AtomicU64,
    /// BatchResultMessages sent (each carries the results of one merged frame that
    /// were ready together; a frame takes one or more).
    pub batch_results: AtomicU64,
    /// Requests read (any codec, answered or not).
    pub requests: AtomicU64,
    /// Of those, requests in Seata's protobuf codec (answered in it).
    pub protobuf_requests: AtomicU64,
}

pub(crate) struct Inner {
    /// Set by [`Coordinator::crash`]: nothing more happens.
    crashed: AtomicBool,
    /// Set by [`Coordinator::fail_store`]: every transaction request is answered
    /// `FailedStore`.
    store_failing: AtomicBool,
    /// Set by [`Coordinator::raft_follower`]: every transaction request is answered
    /// `NotRaftLeader`.
    raft_follower: AtomicBool,
    options: TcOptions,
    sessions: Sessions,
    locks: LockTable,
    channels: Channels,
    ids: IdWorker,
    stats: Arc<TcStats>,
    /// Phase twos the background loop drives at once (see [`DRIVES_AT_ONCE`]).
    drives: Arc<tokio::sync::Semaphore>,
}

/// At most this many phase twos run from the background loop at once
/// ([`TcStats::background_drives_peak`]). AT commits
/// answer `AsyncCommitting` and are driven from the loop, so a busy TC finds tens of
/// thousands due in a round; started all at once they queue in front of every
/// connection's reader on the runtime, and the TC answers nothing, PINGs included,
/// for as long as they take (clients then close the connection as silent).
pub const DRIVES_AT_ONCE: usize = 256;

/// An in-memory TC. Cheap to clone; its background loop stops when the last clone and
/// the server's handler are gone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("xid_address", &self.inner.options.xid_address)
            .field("sessions", &self.inner.sessions.len())
            .finish()
    }
}

impl Coordinator {
    /// A coordinator with `options`; starts its background loop on the current tokio
    /// runtime.
    pub fn new(options: TcOptions) -> Self {
        let worker = fastrand::u16(..);
        let inner = Arc::new(Inner {
            crashed: AtomicBool::new(false),
            store_failing: AtomicBool::new(false),
            raft_follower: AtomicBool::new(false),
            ids: IdWorker::new(worker),
            sessions: Sessions::default(),
            locks: LockTable::default(),
            channels: Channels::default(),
            stats: Arc::default(),
            drives: Arc::new(tokio::sync::Semaphore::new(DRIVES_AT_ONCE)),
            options,
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let period = inner.options.period.max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { break };
                if inner.crashed() {
                    break;
                }
                inner.housekeeping().await;
            }
        });
        Coordinator { inner }
    }

    /// Binds `listen`, and serves a coordinator whose XIDs name `advertise` and the
    /// port bound (port 0 picks a free one).
    pub async fn serve(
        listen: SocketAddr,
        advertise: IpAddr,
        mut options: TcOptions,
        config: ServerConfig,
    ) -> std::io::Result<(Server, Coordinator)> {
        let listener = TcpListener::bind(listen).await?;
        let port = listener.local_addr()?.port();
        options.xid_address = java_address(advertise, port);
        options.max_frame_len = config.transport.max_frame_len;
        let tc = Coordinator::new(options);
        let server = tc.server_builder().config(config).serve(listener)?;
        Ok((server, tc))
    }

    /// Serves a coordinator on an already bound (non-blocking) listener, e.g. one bound
    /// inside a test network's host; its XIDs name `advertise` and the listener's port.
    pub fn serve_std(
        listener: std::net::TcpListener,
        advertise: IpAddr,
        mut options: TcOptions,
        config: ServerConfig,
    ) -> std::io::Result<(Server, Coordinator)> {
        let port = listener.local_addr()?.port();
        options.xid_address = java_address(advertise, port);
        options.max_frame_len = config.transport.max_frame_len;
        let tc = Coordinator::new(options);
        let server = tc
            .server_builder()
            .config(config)
            .serve(TcpListener::from_std(listener)?)?;
        Ok((server, tc))
    }

    /// A server builder wired to this coordinator: its request handler, and its
    /// close hook (an RM that disconnects is no longer a phase-two target).
    pub fn server_builder(&self) -> meshline::rpc::ServerBuilder {
        let inner = self.inner.clone();
        let closed = self.inner.clone();
        Server::builder(move |req| inner.clone().on_request(req))
            .on_close(move |conn, _| closed.channels.remove(conn))
    }

    /// What a crash does to this coordinator (with [`Server::kill`] for its sockets):
    /// from now on it answers nothing, sends no phase two and retries nothing, and its
    /// sessions are lost with it. Requests already being served get no answer.
    pub fn crash(&self) {
        self.inner.crashed.store(true, Ordering::SeqCst);
    }

    /// What a Seata TC whose session store fails (its database down, its disk full)
    /// does, while `failing`: registrations and PINGs are answered as ever, and every
    /// transaction request at once with `Failed` / `FailedStore`, as Seata's
    /// `AbstractTCInboundHandler` answers a `StoreException`. The fastest TC to answer,
    /// and useless: what a balancer must learn to avoid.
    pub fn fail_store(&self, failing: bool) {
        self.inner.store_failing.store(failing, Ordering::SeqCst);
    }

    /// What a Seata TC of a raft cluster does while it is not the leader
    /// (`RaftCoordinator.exceptionHandleTemplate`): registrations and PINGs are
    /// answered as ever, and every transaction request at once with `Failed` /
    /// `NotRaftLeader`, applying nothing. Its sessions stay (a raft cluster replicates
    /// them; here they are this TC's own).
    pub fn raft_follower(&self, follower: bool) {
        self.inner.raft_follower.store(follower, Ordering::SeqCst);
    }

    /// What it did so far.
    pub fn stats(&self) -> &TcStats {
        &self.inner.stats
    }

    /// The address its XIDs name.
    pub fn xid_address(&self) -> &str {
        &self.inner.options.xid_address
    }

    /// Global transactions not finished.
    pub fn open_sessions(&self) -> usize {
        self.inner.sessions.len()
    }

    /// Rows locked by unfinished transactions.
    pub fn locked_rows(&self) -> usize {
        self.inner.locks.len()
    }

    /// The status of `xid` (`Finished` when unknown).
    pub fn status(&self, xid: &str) -> GlobalStatus {
        self.inner.status_of(xid)
    }

    /// RM connections serving `resource`.
    pub fn rm_connections(&self, resource: &str) -> usize {
        self.inner.channels.count(resource)
    }
}
