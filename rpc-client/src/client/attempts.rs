//! The attempt loop of a balanced call: pick, send, and on failure try another
//! endpoint (a request never written is failed over; one answered "another server
//! serves" is sent where the registry points next), all under the call's timeout.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use meshline_loadbalance::{Endpoint, Exclusions};
use meshline_registry_core::{Instance, InstanceKey};
use tokio::sync::watch;

use super::membership::alive::alive_of;
use super::metrics::Counter;
use super::{AliveSet, CallOptions, RpcClient, limits};
use crate::codec::Frame;
use crate::connection::{SendFailure, SendKind};
use crate::error::RpcError;
use crate::outcome::Outcome;
use crate::payload::Payload;

/// The call's deadline, and what its attempt loop learned, kept outside the future so
/// a timeout can read it.
struct Progress {
    /// When the call times out: a wait for the registry to name a server ends then.
    deadline: tokio::time::Instant,
    /// The endpoint last tried (its stats and connection, to book a timeout on).
    last: Option<Endpoint>,
    /// The current attempt's frame is in a queue (a timeout now means "may have been
    /// delivered", not "overloaded").
    queued: bool,
}

impl RpcClient {
    /// Runs the attempt loop under the call's timeout.
    pub(super) async fn balanced(
        &self,
        payload: Payload,
        opts: &CallOptions<'_>,
        kind: SendKind,
        wait: bool,
        first_pick: Option<&OnceLock<InstanceKey>>,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        crate::payload::check(&payload, inner.options.transport.max_frame_len)?;
        let timeout = opts.timeout().unwrap_or(inner.options.request_timeout);
        let mut progress = Progress {
            deadline: tokio::time::Instant::now() + timeout,
            last: None,
            queued: false,
        };
        let started = Instant::now();
        let fut = self.attempts(payload, opts, &mut progress, kind, wait, first_pick);
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) if !progress.queued && progress.last.is_some() => {
                inner.count(Counter::Overloaded);
                Err(RpcError::Overloaded {
                    endpoint: progress.last.map(|e| e.to_string()).unwrap_or_default(),
                    queued_bytes: 0,
                    waited: Some(started.elapsed()),
                })
            }
            Err(_) => {
                inner.count(Counter::Timeouts);
                // A call that timed out counts against its endpoint: a TC that stops
                // answering is ejected from the picks after a few (see `ejection`).
                if let Some(last) = &progress.last {
                    last.stats().record_failure();
                    self.handle.members.call_failed(alive_of(last));
                }
                Err(RpcError::Timeout {
                    after: timeout,
                    endpoint: progress.last.map(|e| e.to_string()),
                })
            }
        }
    }

    /// Sends on `endpoint`'s connection: queue (waiting for room if `wait`), then wait
    /// for the outcome.
    async fn send_on(
        endpoint: &Endpoint,
        payload: Payload,
        kind: SendKind,
        wait: bool,
        progress: &mut Progress,
    ) -> Result<Option<Frame>, SendFailure> {
        progress.queued = false;
        progress.last = Some(endpoint.clone());
        let connection = &alive_of(endpoint).connection;
        let e = if wait {
            // Boxed: waiting for room is rare, and inline its state would grow every
            // call's future (which callers driving many calls allocate per call).
            Box::pin(connection.enqueue(payload, kind, true)).await?
        } else {
            connection.try_enqueue(payload, kind)?
        };
        progress.queued = true;
        e.outcome().await
    }

    async fn attempts(
        &self,
        payload: Payload,
        opts: &CallOptions<'_>,
        progress: &mut Progress,
        kind: SendKind,
        wait: bool,
        first_pick: Option<&OnceLock<InstanceKey>>,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        let route = *opts.pick_request();
        // Filled on the first retry: the caller's exclusions (as keys) plus every
        // endpoint that failed or was full during this call.
        let mut excluded: Option<Vec<InstanceKey>> = None;
        let mut last_failure: Option<String> = None;
        let mut full: Option<Endpoint> = None;
        let mut at_cap: Option<usize> = None;
        let mut attempts = 0u32;
        // The last answer that said another server serves (see `Outcome::Misdirected`),
        // and the alive set watched for the one the registry names next.
        let mut misdirected: Option<(Arc<Instance>, Option<Payload>)> = None;
        let mut alive: Option<watch::Receiver<Arc<AliveSet>>> = None;
        self.handle.retries.deposit();
        while attempts < inner.options.max_attempts.max(1) {
            let Some(picked) = self.pick(&route, excluded.as_deref()) else {
                // Every endpoint left was set aside, by this call or by another whose
                // answer said another server serves: wait, within the call's timeout,
                // for the registry to name one. Watched, then picked again, so a change
                // in between is not missed.
                if alive.is_none() && inner.awaits_redirect() {
                    alive = Some(self.subscribe_alive());
                    continue;
                }
                if let Some(rx) = alive.as_mut()
                    && matches!(
                        tokio::time::timeout_at(progress.deadline, rx.changed()).await,
                        Ok(Ok(()))
                    )
                {
                    continue;
                }
                break;
            };
            let mut exclude = |key: &InstanceKey| {
                excluded
                    .get_or_insert_with(|| self.caller_exclusions(route.exclusions()))
                    .push(key.clone());
            };
            // What the pick returns is sendable: the endpoint carries its connection.
            let endpoint = picked.endpoint();
            let entry = picked.payload();
            // An endpoint at its cap is skipped, as a full one is, without an attempt.
            let _slot = match limits::enter_endpoint(entry) {
                Ok(slot) => slot,
                Err(cap) => {
                    exclude(endpoint.key());
                    at_cap = Some(cap);
                    picked.into_guard().cancel();
                    continue;
                }
            };
            attempts += 1;
            if let Some(tap) = first_pick {
                // For a hedge: the endpoint its second request should avoid.
                let _ = tap.set(endpoint.key().clone());
            }
            let start = Instant::now();
            match Self::send_on(endpoint, payload.clone(), kind, false, progress).await {
                Ok(f) => {
                    let instance = entry.instance.clone();
                    let answer = f.map(Payload::from_frame);
                    let guard = picked.into_guard();
                    let outcome = self.book_answer(guard, answer.as_ref(), start.elapsed());
                    if outcome != Outcome::Misdirected {
                        return Ok((instance, answer));
                    }
                    // Not applied there: sent again where the registry points now (not
                    // a retry: the request was served nowhere). Watched from before the
                    // next pick, so a change in between is not missed.
                    alive.get_or_insert_with(|| self.subscribe_alive());
                    exclude(instance.key());
                    attempts -= 1;
                    misdirected = Some((instance, answer));
                }
                Err(SendFailure::Full) => {
                    inner.count(Counter::Overloaded);
                    tracing::debug!(endpoint = %entry.instance, "write queue full; trying another endpoint");
                    exclude(endpoint.key());
                    last_failure = Some(format!("{}: write queue full", entry.instance));
                    if full.is_none() {
                        full = Some(endpoint.clone());
                    }
                    picked.into_guard().cancel();
                }
                Err(SendFailure::NotWritten(reason)) => {
                    // Failover, not a retry: the request never left this client, so
                    // sending it elsewhere adds nothing to any server's load (a
                    // connection pool re-queues such a request the same way); the
                    // retry budget is for requests sent again.
                    inner.count(Counter::Retries);
                    tracing::debug!(endpoint = %entry.instance, %reason, "not written; trying another endpoint");
                    exclude(endpoint.key());
                    last_failure = Some(format!("{}: {reason}", entry.instance));
                    picked.failure();
                }
                Err(e @ SendFailure::MaybeDelivered(_)) => {
                    self.handle.members.call_failed(entry);
                    inner.count(Counter::MaybeDelivered);
                    let err = entry.connection.failure_error(e);
                    picked.failure();
                    return Err(err);
                }
            }
        }
        if let Some(answered) = misdirected {
            // No server that serves was named in time: the caller reads the answer.
            return Ok(answered);
        }
        if let Some(endpoint) = full {
            // Every candidate was full. `call` waits for room on the first one (within
            // the call's timeout); `try_call` says so now.
            return self
                .when_room(&endpoint, payload, kind, wait, progress)
                .await;
        }
        match (last_failure, at_cap) {
            (Some(last), _) => Err(RpcError::RetriesExhausted { attempts, last }),
            (None, Some(cap)) => Err(limits::endpoints_at_cap(inner, cap)),
            (None, None) => Err(RpcError::NoEndpoint {
                target: inner.target.clone(),
            }),
        }
    }

    /// Sends on `endpoint`, every candidate of a call having been full: waits for
    /// room there when `wait` (within the call's timeout), else fails as overloaded.
    async fn when_room(
        &self,
        endpoint: &Endpoint,
        payload: Payload,
        kind: SendKind,
        wait: bool,
        progress: &mut Progress,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        let entry = alive_of(endpoint);
        if !wait {
            return Err(entry.connection.overloaded(None));
        }
        let Ok(_slot) = limits::enter_endpoint(entry) else {
            return Err(entry.connection.overloaded(None));
        };
        // Counted in flight on it again, as the picks were (least-active and P2C
        // see the wait).
        let guard = endpoint.begin();
        let start = Instant::now();
        // Boxed, as the wait in `send_on`: a rare path kept out of every call's future.
        let waited = Box::pin(Self::send_on(endpoint, payload, kind, true, progress)).await;
        match waited {
            Ok(f) => {
                let answer = f.map(Payload::from_frame);
                self.book_answer(guard, answer.as_ref(), start.elapsed());
                Ok((entry.instance.clone(), answer))
            }
            Err(e) => {
                guard.failure();
                if matches!(e, SendFailure::MaybeDelivered(_)) {
                    inner.count(Counter::MaybeDelivered);
                }
                Err(entry.connection.failure_error(e))
            }
        }
    }

    /// The caller's own exclusions as keys (indices are resolved against the current
    /// picker's endpoint list), to which a retry adds the endpoints that failed.
    pub(super) fn caller_exclusions(&self, given: Exclusions<'_>) -> Vec<InstanceKey> {
        match given {
            Exclusions::None => Vec::new(),
            Exclusions::Keys(k) => k.to_vec(),
            Exclusions::Indices(ix) => {
                let eps = self.inner().balancer.endpoints();
                ix.iter()
                    .filter_map(|&i| eps.get(i).map(|e| e.key().clone()))
                    .collect()
            }
        }
    }
}
