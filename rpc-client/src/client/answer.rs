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
    ///
    /// An answer saying another server serves the request ([`Outcome::Misdirected`])
    /// sets the endpoint aside; the outcome tells the caller to send the call again.
    pub(super) fn book_answer(
        &self,
        guard: InFlightGuard,
        answer: Option<&Payload>,
        elapsed: Duration,
    ) -> Outcome {
        let inner = &self.handle.members;
        let outcome = outcome_of(inner.options.classifier.as_ref(), answer);
        if outcome == Outcome::Misdirected {
            let entry = alive_of(guard.endpoint());
            tracing::info!(endpoint = %entry.instance, "answered that another server serves; set aside, the registry read again");
            inner.set_aside(
                entry,
                "answered that another server serves (not the raft leader)",
            );
            // Not the server's failure, and no answer worth pricing.
            guard.cancel();
        } else if outcome == Outcome::ServerFailure {
            inner.count(Counter::ServerFailures);
            // Priced first, counted in the row after. A success booked at the same
            // time on another call (one the server answered before it failed) ends
            // the row and restarts the price only if it sees this failure in the
            // row, so then after this price: in the other order the price could land
            // after the restart and outlast the row that would recheck it, leaving
            // the endpoint priced out with nothing to bring it back.
            let endpoint = guard.endpoint().clone();
            guard.failure_costing(elapsed.max(inner.options.failure_cost));
            let entry = alive_of(&endpoint);
            tracing::debug!(endpoint = %entry.instance, "answered with the server's failure");
            inner.server_failed(entry);
        } else {
            let entry = alive_of(guard.endpoint());
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
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Barrier};

    use meshline_loadbalance::PickRequest;
    use meshline_registry_core::{EmptyProtection, Instance, WatchHub};

    use super::*;
    use crate::message::{
        GlobalBeginResponse, SeataMessage, TransactionExceptionCode, TransactionResult,
    };
    use crate::{Classifier, InboundRequest, Server, ServerConfig};

    fn begin_answer(result: TransactionResult) -> Payload {
        Payload::seata(&SeataMessage::GlobalBeginResponse(GlobalBeginResponse {
            result,
            xid: None,
            extra_data: None,
        }))
        .unwrap()
    }

    /// A server's failure and a success answered on one endpoint, booked at the same
    /// moment on two threads (a TC whose store fails while calls it answered before
    /// are still being read), round after round: afterwards, either the failure is in
    /// the row (so its recheck runs and restarts the price once the endpoint works),
    /// or the endpoint's estimate is not the failure's price. Never priced out with
    /// the row ended: then nothing would bring it back until the price decayed (a TC
    /// repaired and left unused for most of a minute).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_success_booked_with_a_server_failure_never_leaves_the_endpoint_priced_out_unwatched()
    {
        const ROUNDS: usize = 20_000;
        let server = Server::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            |_req: InboundRequest| async { None },
        )
        .await
        .unwrap();
        let hub = WatchHub::new("t", EmptyProtection::Apply);
        let port = server.local_addr().port();
        hub.publish("c", vec![Instance::new("127.0.0.1", port).unwrap()]);
        let client = RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("P2C")
            .configure(|o| {
                o.classifier = Some(Classifier::seata());
                // No recheck runs during the test: what it would find is not asked.
                o.ejection_time = Duration::from_secs(3600);
            })
            .build()
            .await
            .unwrap();
        client.wait_alive(1, Duration::from_secs(5)).await.unwrap();
        let failure_cost = client.options().failure_cost;
        let failed = begin_answer(TransactionResult::failed(
            TransactionExceptionCode::FailedStore,
            "store down",
        ));
        let ok = begin_answer(TransactionResult::success());
        let took = Duration::from_micros(50);

        // Two threads that book one answer each per round, released together.
        let start = Arc::new(Barrier::new(3));
        let mut lanes = Vec::new();
        let mut threads = Vec::new();
        for answer in [failed, ok.clone()] {
            let (tx, rx) = mpsc::channel::<Option<InFlightGuard>>();
            let (client, start, rt) = (
                client.clone(),
                start.clone(),
                tokio::runtime::Handle::current(),
            );
            threads.push(std::thread::spawn(move || {
                let _rt = rt.enter();
                while let Ok(Some(guard)) = rx.recv() {
                    start.wait();
                    client.book_answer(guard, Some(&answer), took);
                    start.wait();
                }
            }));
            lanes.push(tx);
        }
        let route = PickRequest::default();
        let mut stuck = 0;
        for _ in 0..ROUNDS {
            for lane in &lanes {
                let guard = client
                    .pick(&route, None)
                    .expect("one endpoint")
                    .into_guard();
                lane.send(Some(guard)).unwrap();
            }
            start.wait();
            start.wait();
            let picked = client.pick(&route, None).expect("one endpoint");
            let entry = alive_of(picked.endpoint());
            let estimate = picked.endpoint().stats().latency_estimate();
            if entry.failures_in_a_row() == 0 && estimate.is_some_and(|e| e >= failure_cost / 2) {
                stuck += 1;
            }
            // The next round starts from a working endpoint: a success ends any row and
            // restarts the price.
            client.book_answer(picked.into_guard(), Some(&ok), took);
            if entry_priced_out(&client, failure_cost) {
                // A plain success blended into a price that nothing restarted.
                let picked = client.pick(&route, None).expect("one endpoint");
                picked.endpoint().stats().restart_estimate(took);
                picked.into_guard().cancel();
            }
        }
        for lane in &lanes {
            lane.send(None).unwrap();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            stuck, 0,
            "{stuck} of {ROUNDS} rounds left the endpoint priced as a failure with no row \
             of failures (no recheck) to bring it back"
        );
        client.shutdown(Duration::from_secs(1)).await;
        server.shutdown(Duration::from_secs(1)).await;
    }

    fn entry_priced_out(client: &RpcClient, failure_cost: Duration) -> bool {
        let picked = client
            .pick(&PickRequest::default(), None)
            .expect("one endpoint");
        let priced_out = picked
            .endpoint()
            .stats()
            .latency_estimate()
            .is_some_and(|e| e >= failure_cost / 2);
        picked.into_guard().cancel();
        priced_out
    }
}
