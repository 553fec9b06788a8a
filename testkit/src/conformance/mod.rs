//! The behaviours every registry backend must show, written once and run by each
//! backend's test file against its real server (or double).
//!
//! A backend's test file implements [`Harness`] (make a client of the running server,
//! stop and restart the server), and where it can [`Crash`] (drop a client without
//! deregistering) and [`Garbage`] (write entries the client must skip, bypassing it).
//! [`conformance_harness!`](crate::conformance_harness) writes the first two from
//! what is the backend's own. Then [`conformance_tests!`](crate::conformance_tests) makes one
//! `#[tokio::test]` per behaviour:
//!
//! ```ignore
//! meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
//!     crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);
//! ```
//!
//! The behaviours:
//!
//! - [`round_trip`]: register on one client, see it on another client's watch and
//!   lookup, unregister, `close` deregisters at once, a closed client refuses work and
//!   its watches end.
//! - [`drop_ends_watches`]: dropping a client removes its members at once (well before
//!   their TTL) and ends its watches; a name watched again after its last watch was
//!   dropped still follows changes.
//! - [`crash_removed_within_ttl`]: a member is kept alive past its TTL; a crashed
//!   registrant is removed by expiry: not before the TTL could run out, not after it.
//! - [`outage_stale_resync`]: server down -> the watch goes stale and keeps its snapshot;
//!   server back -> connected again, our registration restored and kept alive, the watch
//!   follows changes.
//! - [`garbage_skipped`]: malformed entries are skipped (initial list and changes), the
//!   watch stays connected and keeps following.
//! - [`empty_protection`]: removals are applied while a member is left; the last
//!   removal is not applied (the last list is kept) with protection on.
//!
//! And the fault behaviours ([`faults`]), for the backends that implement their traits:
//!
//! - [`unreachable_is_named`] ([`Unreachable`]): a closed port is an error naming the
//!   address and the cause, within the backend's timeouts.
//! - [`refused_removal_retried`], [`close_removes_a_refused_removal`] and
//!   [`close_meets_a_held_refusal`] ([`RefuseRemoval`]): an unregister the registry
//!   refuses is not forgotten, and `close` removes it itself, or reports the refusal.
//! - [`secrets_never_shown`] ([`Secrets`]): a password or token never shows, at
//!   `trace`, through a refused login and a server restart.
//! - [`nearby_lists_other_clusters`] ([`SeataLayout`]): what `nearby` lists when the
//!   asked cluster is empty, and its error when the server is gone.
//!
//! Every wait is for a condition, bounded by what the protocol allows plus a margin a
//! loaded 2-core machine keeps; the few "nothing changes for a while" checks are over a
//! span the protocol defines (a TTL), and fail on any change within it.

use std::time::Duration;

use meshline_registry_core::{Config, RegistryError, RegistryService};

pub mod faults;
mod membership;
pub use membership::{
    crash_removed_within_ttl, drop_ends_watches, empty_protection, garbage_skipped,
    outage_stale_resync, round_trip,
};
pub mod nearby;
pub use faults::{
    REMOVAL_CLUSTER, RefuseRemoval, Secrets, Unreachable, close_meets_a_held_refusal,
    close_removes_a_refused_removal, refused_removal_retried, retry_bound, secrets_never_shown,
    unreachable_is_named,
};
pub use nearby::{SeataLayout, nearby_lists_other_clusters};

/// How long a change may take to reach another client's watch (push backends take
/// milliseconds, polling ones a period; the rest is margin for a loaded machine).
pub const DELIVERY: Duration = Duration::from_secs(10);

/// A removal within this after a deregistering call (`close`, drop) came from the
/// deregistration: clients made with [`Opts::long_ttl`] keep members for 30 s or more.
pub const LONG_TTL_FLOOR: Duration = Duration::from_secs(15);

/// How a behaviour wants a client set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opts {
    /// `registry.empty-protection`.
    pub empty_protection: bool,
    /// A registration lifetime (TTL, session timeout, lease) of at least 30 s, longer
    /// than any wait of the suite: only a real deregistration removes a member quickly.
    pub long_ttl: bool,
}

impl Opts {
    /// Short TTL, empty protection off.
    pub const PLAIN: Opts = Opts {
        empty_protection: false,
        long_ttl: false,
    };
    /// Short TTL, empty protection on.
    pub const PROTECTED: Opts = Opts {
        empty_protection: true,
        long_ttl: false,
    };
    /// Long TTL, empty protection off.
    pub const LONG_TTL: Opts = Opts {
        empty_protection: false,
        long_ttl: true,
    };
}

/// A backend's registration lifetime (TTL, session timeout, lease), as the suite sets
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Lifetime {
    /// The key that sets it; `None` where there is none to set (a registration that
    /// lives with the client's connection, a read-only registry).
    pub key: Option<&'static str>,
    /// The value for the suite's clients, and the one (30 s or more) for
    /// [`Opts::long_ttl`].
    pub short: &'static str,
    /// See `short`.
    pub long: &'static str,
    /// `short` as a duration: members are kept alive well past it, and the suite holds
    /// "nothing changes" spans of it.
    pub ttl: Duration,
}

impl Lifetime {
    /// A lifetime set by `key`: `short` (which is `ttl`) and `long`.
    pub const fn set(
        key: &'static str,
        short: &'static str,
        long: &'static str,
        ttl: Duration,
    ) -> Self {
        Lifetime {
            key: Some(key),
            short,
            long,
            ttl,
        }
    }

    /// No key: `ttl` is the span the suite holds a registration (and the server down)
    /// for.
    pub const fn fixed(ttl: Duration) -> Self {
        Lifetime {
            key: None,
            short: "",
            long: "",
            ttl,
        }
    }
}

/// A backend under test with its running server.
///
/// The suite calls it from multi-thread tokio tests (the macro makes them so), so the
/// server's blocking restart runs in `tokio::task::block_in_place`.
#[allow(async_fn_in_trait)] // used from the tests' own runtime only
pub trait Harness {
    /// The backend's client type.
    type Registry: RegistryService;

    /// The backend's registration lifetime.
    const LIFETIME: Lifetime;

    /// How long a watch may take to be connected again after the server is back
    /// (reconnect backoff plus session setup and resync, with margin).
    const RESYNC_WITHIN: Duration;

    /// The backend's config for the running server (the test's timings), `extra` keys
    /// on top.
    fn config(&self, extra: &[(&str, &str)]) -> Config;

    /// A client made with `cfg`, or the error as the backend reports it.
    async fn connect_config(&self, cfg: &Config) -> Result<Self::Registry, RegistryError>;

    /// The running server (or double), for the outage.
    fn server(&mut self) -> &mut dyn Server;

    /// A new client of the running server, configured as `opts` asks.
    async fn connect(&self, opts: Opts) -> Self::Registry {
        let protection = if opts.empty_protection {
            "true"
        } else {
            "false"
        };
        let life = Self::LIFETIME;
        let mut keys = vec![("registry.empty-protection", protection)];
        if let Some(key) = life.key {
            keys.push((key, if opts.long_ttl { life.long } else { life.short }));
        }
        let cfg = self.config(&keys);
        self.connect_config(&cfg)
            .await
            .unwrap_or_else(|e| panic!("connect with {opts:?}: {e}"))
    }
}

/// A test server that can go down and come back on the same address: the real servers
/// of this crate (killed, restarted on the same ports and data dir) and the doubles
/// (every connection closed, restarted with no state).
pub trait Server: Send {
    /// Stops it abruptly.
    fn go_down(&mut self);
    /// Starts it again on the same address; returns once it answers.
    fn come_back(&mut self) -> crate::Result<()>;
}

macro_rules! server {
    ($down:ident: $($t:ty),*) => {$(
        impl Server for $t {
            fn go_down(&mut self) {
                self.$down()
            }
            fn come_back(&mut self) -> crate::Result<()> {
                self.restart()
            }
        }
    )*};
}
server!(kill: crate::Etcd, crate::ZooKeeper, crate::Redis, crate::Rnacos);
server!(stop: crate::ConsulDouble, crate::EurekaDouble, crate::RaftDouble, crate::NamingserverDouble);

/// A backend whose client can crash: stop without deregistering, as a killed process.
pub trait Crash: Harness {
    /// Ends `reg` without deregistering anything (the backends' `abandon`; the suite
    /// drops it afterwards, which then does nothing).
    fn crash(&self, reg: &Self::Registry);

    /// When the server removes a crashed registrant's members.
    fn expiry(&self) -> Expiry;
}

/// When a crashed registrant's members are removed by expiry, from the protocol.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    /// Not before: the registration was last refreshed at most one refresh period
    /// before the crash, so it lives at least TTL minus that period (minus the server's
    /// clock granularity). A removal before this came from a deregistration.
    pub not_before: Duration,
    /// At the latest: TTL plus the server's expiry check period plus the watcher's
    /// poll period, plus a margin for a loaded machine.
    pub within: Duration,
}

impl Expiry {
    /// A registration refreshed at least twice per `ttl`, expired by a server that
    /// looks every `check` (and seen by watchers at once or within `check` too): not
    /// before half the TTL, at the latest the TTL plus `check` plus 2 s of margin.
    pub fn after(ttl: Duration, check: Duration) -> Expiry {
        Expiry {
            not_before: ttl / 2,
            within: ttl + check + Duration::from_secs(2),
        }
    }
}

/// A backend whose registry can hold entries its client must skip.
#[allow(async_fn_in_trait)]
pub trait Garbage: Harness {
    /// Writes entries under `cluster` the way the server stores members but malformed
    /// (bad address, port 0, undecodable value...), bypassing our client. Each `round`
    /// writes different entries, so the second call is a change the watch sees.
    async fn put_garbage(&self, cluster: &str, round: u32);
}

/// Implements [`Harness`] for a backend's harness struct, and [`Crash`] when `expiry`
/// is given, from what is the backend's own: its client type (`registry`), the field
/// holding the running server (`server`), its [`Lifetime`], how long a watch may take
/// to come back after an outage (`resync_within`), the config for the running server
/// (`config`, an expression of the harness `h` and the `extra` keys) and, for
/// [`Crash`], the [`Expiry`]. Clients are made by the backend's `connect(&Config)`,
/// or by `connect` when given (an async fn of `&Config`); a crash is the backend's
/// `abandon`. Every field but `connect` and `expiry` is required, in this order:
///
/// ```ignore
/// meshline_testkit::conformance_harness!(RedisHarness {
///     registry: RedisRegistry,
///     server: redis,
///     lifetime: Lifetime::set("registry.redis.ttl", "2s", "60s", TTL),
///     resync_within: Duration::from_secs(15),
///     config: |h, extra| config(&h.redis.addr(), extra),
///     expiry: Expiry::after(TTL, Duration::from_millis(500)),
/// });
/// ```
#[macro_export]
macro_rules! conformance_harness {
    ($harness:ident {
        registry: $registry:ty,
        server: $server:ident,
        lifetime: $lifetime:expr,
        resync_within: $resync:expr,
        config: |$h:ident, $extra:ident| $config:expr,
        $(connect: $connect:expr,)?
        $(expiry: $expiry:expr,)?
    }) => {
        impl $crate::conformance::Harness for $harness {
            type Registry = $registry;
            const LIFETIME: $crate::conformance::Lifetime = $lifetime;
            const RESYNC_WITHIN: ::std::time::Duration = $resync;

            fn config(&self, $extra: &[(&str, &str)]) -> $crate::conformance::__macro::Config {
                let $h = self;
                $config
            }
            async fn connect_config(
                &self,
                cfg: &$crate::conformance::__macro::Config,
            ) -> ::std::result::Result<$registry, $crate::conformance::__macro::RegistryError> {
                $crate::conformance_harness!(@connect $registry, cfg $(, $connect)?)
            }
            fn server(&mut self) -> &mut dyn $crate::conformance::Server {
                &mut self.$server
            }
        }

        $(
            impl $crate::conformance::Crash for $harness {
                fn crash(&self, reg: &$registry) {
                    reg.abandon();
                }
                fn expiry(&self) -> $crate::conformance::Expiry {
                    $expiry
                }
            }
        )?
    };
    (@connect $registry:ty, $cfg:ident) => {
        <$registry>::connect($cfg).await
    };
    (@connect $registry:ty, $cfg:ident, $connect:expr) => {
        ($connect)($cfg).await
    };
}

/// What [`conformance_harness!`](crate::conformance_harness) names in the code it
/// writes.
#[doc(hidden)]
pub mod __macro {
    pub use meshline_registry_core::{Config, RegistryError};
}

/// Makes one `#[tokio::test]` per named behaviour of [`crate::conformance`], each on a
/// fresh harness from `$harness` (an expression of a future, e.g. `harness()`), in a
/// module `conformance` (or the one named first: `mod secrets: secret_harness() =>
/// secrets_never_shown`, for a second harness in the same file). The tests run on a
/// 2-worker multi-thread runtime, except [`secrets_never_shown`], which needs the
/// current-thread one.
#[macro_export]
macro_rules! conformance_tests {
    (mod $module:ident: $harness:expr => $($behaviour:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $( $crate::conformance_test!($harness, $behaviour); )+
        }
    };
    ($harness:expr => $($behaviour:ident),+ $(,)?) => {
        $crate::conformance_tests!(mod conformance: $harness => $($behaviour),+);
    };
}

/// One test of [`conformance_tests!`](crate::conformance_tests), on the runtime its
/// behaviour needs.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_test {
    ($harness:expr, secrets_never_shown) => {
        #[tokio::test]
        async fn secrets_never_shown() {
            let mut h = $harness.await;
            $crate::conformance::secrets_never_shown(&mut h).await;
        }
    };
    ($harness:expr, $behaviour:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $behaviour() {
            let mut h = $harness.await;
            $crate::conformance::$behaviour(&mut h).await;
        }
    };
}
