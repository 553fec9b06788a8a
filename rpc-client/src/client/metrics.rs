//! The client's counters: kept as atomics for [`RpcClient::stats`](crate::RpcClient::stats)
//! and reported through the `metrics` facade, labelled `target`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Totals since the client started (the same events the `metrics` counters count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Connections established (and handshaken).
    pub connects: u64,
    /// Of those, re-connections to an endpoint connected before.
    pub reconnects: u64,
    /// Connect attempts that failed.
    pub connect_failures: u64,
    /// Handshakes refused or failed.
    pub handshake_failures: u64,
    /// Calls retried on another endpoint because they were not written.
    pub retries: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls failed as "may have been delivered".
    pub maybe_delivered: u64,
    /// Calls that found a full write queue (then tried elsewhere or failed as
    /// overloaded).
    pub overloaded: u64,
    /// Endpoints ejected from picks after failures in a row.
    pub ejections: u64,
    /// Calls answered with the server's failure ([`Outcome::ServerFailure`](crate::Outcome::ServerFailure)).
    pub server_failures: u64,
    /// Requests not sent again because the retry budget was spent (see
    /// [`RetryBudget`](crate::RetryBudget)).
    pub retries_refused: u64,
    /// Calls refused because the client or every candidate endpoint had its limit of
    /// calls in flight (see [`CallLimits`](crate::limits::CallLimits)).
    pub limit_refused: u64,
    /// Calls refused because the client's circuit breaker was open.
    pub circuit_refused: u64,
    /// Second requests sent by hedging ([`Hedging`](crate::Hedging)).
    pub hedges: u64,
    /// Calls answered by their hedge.
    pub hedges_won: u64,
    /// Answers saying the request belongs to another server
    /// ([`Outcome::Misdirected`](crate::Outcome::Misdirected): a raft follower's
    /// `NotRaftLeader`); each set its endpoint aside and sent the call again.
    pub misdirected: u64,
}

#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Connects,
    Reconnects,
    ConnectFailures,
    HandshakeFailures,
    Retries,
    Timeouts,
    MaybeDelivered,
    Overloaded,
    Ejections,
    ServerFailures,
    RetriesRefused,
    LimitRefused,
    CircuitRefused,
    Hedges,
    HedgesWon,
    Misdirected,
}

impl Counter {
    const ALL: usize = 16;

    fn metric(self) -> &'static str {
        match self {
            Counter::Connects => "meshline_rpc_connects_total",
            Counter::Reconnects => "meshline_rpc_reconnects_total",
            Counter::ConnectFailures => "meshline_rpc_connect_failures_total",
            Counter::HandshakeFailures => "meshline_rpc_handshake_failures_total",
            Counter::Retries => "meshline_rpc_retries_total",
            Counter::Timeouts => "meshline_rpc_timeouts_total",
            Counter::MaybeDelivered => "meshline_rpc_maybe_delivered_total",
            Counter::Overloaded => "meshline_rpc_overloaded_total",
            Counter::Ejections => "meshline_rpc_ejections_total",
            Counter::ServerFailures => "meshline_rpc_server_failures_total",
            Counter::RetriesRefused => "meshline_rpc_retries_refused_total",
            Counter::LimitRefused => "meshline_rpc_limit_refused_total",
            Counter::CircuitRefused => "meshline_rpc_circuit_refused_total",
            Counter::Hedges => "meshline_rpc_hedges_total",
            Counter::HedgesWon => "meshline_rpc_hedges_won_total",
            Counter::Misdirected => "meshline_rpc_misdirected_total",
        }
    }
}

/// One client's counters.
#[derive(Default)]
pub(crate) struct Counters([AtomicU64; Counter::ALL]);

impl Counters {
    pub fn count(&self, c: Counter, target: &str) {
        self.0[c as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(c.metric(), "target" => target.to_string()).increment(1);
    }

    pub fn stats(&self) -> ClientStats {
        let g = |c: Counter| self.0[c as usize].load(Ordering::Relaxed);
        ClientStats {
            connects: g(Counter::Connects),
            reconnects: g(Counter::Reconnects),
            connect_failures: g(Counter::ConnectFailures),
            handshake_failures: g(Counter::HandshakeFailures),
            retries: g(Counter::Retries),
            timeouts: g(Counter::Timeouts),
            maybe_delivered: g(Counter::MaybeDelivered),
            overloaded: g(Counter::Overloaded),
            ejections: g(Counter::Ejections),
            server_failures: g(Counter::ServerFailures),
            retries_refused: g(Counter::RetriesRefused),
            limit_refused: g(Counter::LimitRefused),
            circuit_refused: g(Counter::CircuitRefused),
            hedges: g(Counter::Hedges),
            hedges_won: g(Counter::HedgesWon),
            misdirected: g(Counter::Misdirected),
        }
    }
}
