//! What an answered call says about the server that answered it.
//!
//! Every call ends in one of six ways:
//!
//! | outcome | who decides | what the endpoint's stats record |
//! |---|---|---|
//! | success | [`Classify`] ([`Outcome::Success`]) | a success and its latency |
//! | the caller's own failure | [`Classify`] ([`Outcome::CallerFailure`]) | a success and its latency: the server answered and is healthy (a lock conflict, an unknown transaction) |
//! | the server's failure | [`Classify`] ([`Outcome::ServerFailure`]) | a failure, priced as an answer taking [`ClientOptions::failure_cost`](crate::ClientOptions::failure_cost), and one more failure in a row toward ejection |
//! | sent to the wrong server | [`Classify`] ([`Outcome::Misdirected`]) | nothing: the endpoint is set aside at once, the registry asked to read the cluster again, and the call sent again where it now points (the request was not applied) |
//! | transport failure | the client (the connection died) | a failure in a row; retried elsewhere when not written |
//! | timeout | the client | a failure in a row |
//!
//! The first four are read from the answer, and only the protocol knows how: a
//! [`Classify`] does it. A client takes its classifier from
//! [`ClientOptions::classifier`](crate::ClientOptions::classifier), else from its
//! [`Handshake`](crate::Handshake) (a [`SeataRegistration`](crate::SeataRegistration)
//! brings [`Classifier::seata`], whose table is in `message::outcome`); with neither,
//! every answer is a success, as a client that cannot read its answers must assume.
//!
//! Why it matters: a server that answers at once that it cannot work (a Seata TC whose
//! store failed answers every GlobalBegin `FailedStore` within a millisecond) looks to a
//! load-aware balancer like its fastest, least busy server. Counted as successes, its
//! failures draw most of the traffic to it. Classified, they eject it and price it as a
//! slow server, as Envoy's outlier detection, linkerd's failure accrual and Finagle do.

use std::sync::Arc;

use crate::payload::Payload;

/// How an answered call went, as the balancer and the ejection rule see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done.
    Success,
    /// The server answered and is healthy, but refused this request for a reason of the
    /// caller's (a lock conflict, an unknown or finished transaction, bad input). Counts
    /// as a success for the server's health and cost.
    CallerFailure,
    /// The server answered that it cannot work (its store, its own I/O). Counts
    /// against it: toward ejection, and as a slow answer in the load-aware balancers'
    /// cost.
    ServerFailure,
    /// The server did not serve the request and says another one does (a Seata raft
    /// follower answers `NotRaftLeader`: only the leader serves, and the follower
    /// applied nothing). The client's listing is out of date: the endpoint is set
    /// aside without waiting for failures to add up (and whatever the ejection cap),
    /// the registry is asked to read the cluster again at once, and the call is sent
    /// again on another endpoint, waiting within its timeout for the registry to name
    /// one. Healthy otherwise: nothing is counted against it.
    Misdirected,
}

/// Reads an answer's [`Outcome`]. Called on every answer of a client that has one, on
/// the caller's task, so it should only peek (no full decode, no allocation on
/// success).
pub trait Classify: Send + Sync + 'static {
    /// The outcome `answer` (a call's response) reports.
    fn classify(&self, answer: &Payload) -> Outcome;

    /// A request that shows whether an endpoint ejected for server failures can work
    /// again: sent on its connection after the ejection time (and after a PING), its
    /// answer classified. `None` (the default): a PING alone decides, and the first
    /// calls after the return are the trial.
    ///
    /// It must be harmless to send at any time (a read of something that does not
    /// exist, say), since it is sent whatever the server's state.
    fn probe(&self) -> Option<Payload> {
        None
    }
}

impl<F> Classify for F
where
    F: Fn(&Payload) -> Outcome + Send + Sync + 'static,
{
    fn classify(&self, answer: &Payload) -> Outcome {
        self(answer)
    }
}

/// A shared [`Classify`], as [`ClientOptions`](crate::ClientOptions) holds it.
#[derive(Clone)]
pub struct Classifier(Arc<dyn Classify>);

impl Classifier {
    /// Wraps `classify`.
    pub fn new(classify: impl Classify) -> Self {
        Classifier(Arc::new(classify))
    }

    /// Seata's: every transaction response classified by its result and exception code
    /// (the table is `message::outcome`'s docs), a GlobalStatus of an XID that does not
    /// exist as the probe.
    pub fn seata() -> Self {
        Classifier::new(crate::message::SeataClassifier)
    }

    /// The outcome of `answer`.
    #[inline]
    pub fn classify(&self, answer: &Payload) -> Outcome {
        self.0.classify(answer)
    }

    /// The probe request, if the protocol has one ([`Classify::probe`]).
    pub fn probe(&self) -> Option<Payload> {
        self.0.probe()
    }
}

/// The outcome of a call's `answer` by a client's `classifier`: without either (no
/// classifier, or a one-way send), a success.
#[inline]
pub(crate) fn outcome_of(classifier: Option<&Classifier>, answer: Option<&Payload>) -> Outcome {
    match (classifier, answer) {
        (Some(c), Some(a)) => c.classify(a),
        _ => Outcome::Success,
    }
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Classifier")
    }
}
