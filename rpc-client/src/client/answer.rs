//! What an answered call tells its endpoint: [`RpcClient::book_answer`].

use std::time::Duration;

use meshline_loadbalance::InFlightGuard;

use super::RpcClient;
use super::membership::alive::alive_of;
use super::metrics::Counter;
use crate::outcome::{Outcome, outcome_of};
use crate::payload::Payload;

impl RpcClient {
    /// Books an answered call on its endpoint by what the answer says (see
    /// [`Outcome`]): a success or the caller's failure as a success; the server's
    /// failure as a failure in a row (toward ejection) priced as a slow answer
    /// ([`ClientOptions::failure_cost`]). The caller gets the answer either way.
    pub(super) fn book_answer(
        &self,
        guard: InFlightGuard,
        answer: Option<&Payload>,
        elapsed: Duration,
    ) {
        let inner = &self.handle.members;
        let entry = alive_of(guard.endpoint());
        let outcome = outcome_of(inner.options.classifier.as_ref(), answer);
        if outcome == Outcome::ServerFailure {
            inner.count(Counter::ServerFailures);
            tracing::debug!(endpoint = %entry.instance, "answered with the server's failure");
            inner.server_failed(entry);
            guard.failure_costing(elapsed.max(inner.options.failure_cost));
        } else {
            if entry.succeeded() {
                // The first success after a row of failures: a call picked before the
                // recheck or the ejection's probe found the endpoint working again. Its
                // estimate, priced up by the failures, starts again as the recheck
                // would start it; a fast answer blended into that price would keep it
                // priced out for seconds.
                inner.restart_price(entry.instance.key(), elapsed);
            }
            guard.success(elapsed);
        }
    }
}
