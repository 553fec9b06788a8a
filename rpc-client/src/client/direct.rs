//! Sends that bypass the balancer: to one named endpoint (state bound to a server) and
//! to every alive endpoint (broadcasts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_loadbalance::InFlightGuard;
use meshline_registry_core::{Instance, InstanceKey};
use tracing::Instrument;

use super::membership::alive::alive_of;
use super::metrics::Counter;
use super::{Response, RpcClient};
use crate::codec::Frame;
use crate::connection::SendKind;
use crate::error::RpcError;
use crate::payload::Payload;

impl RpcClient {
    /// Sends a request to one named endpoint, bypassing the balancer: for state bound
    /// to a server (a game session's room, a Seata branch's TC). No retry elsewhere;
    /// [`RpcError::NoEndpoint`] when that endpoint is not alive.
    pub async fn call_to(
        &self,
        endpoint: &InstanceKey,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Result<Response, RpcError> {
        let (instance, frame) = self
            .direct(endpoint, payload, timeout, SendKind::Request)
            .instrument(
                tracing::debug_span!("rpc_call_to", target = %self.target(), endpoint = %endpoint),
            )
            .await?;
        Ok(Response {
            endpoint: instance,
            payload: frame
                .map(Payload::from_frame)
                .unwrap_or_else(|| Payload::new(bytes::Bytes::new())),
        })
    }

    /// Sends a one-way request to one named endpoint, bypassing the balancer, and
    /// returns once it is handed to the socket. No retry elsewhere.
    pub async fn send_oneway_to(
        &self,
        endpoint: &InstanceKey,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Result<Arc<Instance>, RpcError> {
        self.direct(endpoint, payload, timeout, SendKind::Oneway)
            .instrument(tracing::debug_span!("rpc_oneway_to", target = %self.target(), endpoint = %endpoint))
            .await
            .map(|(i, _)| i)
    }

    async fn direct(
        &self,
        endpoint: &InstanceKey,
        payload: Payload,
        timeout: Option<Duration>,
        kind: SendKind,
    ) -> Result<(Arc<Instance>, Option<Frame>), RpcError> {
        let inner = self.inner();
        let _call = self.begin()?;
        let timeout = timeout.unwrap_or(inner.options.request_timeout);
        // One lookup: the alive endpoint carries its stats and its connection.
        let Some(member) = inner.balancer.endpoint(endpoint) else {
            return Err(RpcError::NoEndpoint {
                target: format!("{} (endpoint {endpoint})", inner.target),
            });
        };
        crate::payload::check(&payload, inner.options.transport.max_frame_len)?;
        let entry = alive_of(&member);
        let guard = member.begin();
        let start = Instant::now();
        let result = entry
            .connection
            .send_within(payload, kind, timeout, true)
            .await;
        self.record(&result, guard, start);
        result.map(|f| (entry.instance.clone(), f))
    }

    /// Books a direct send's outcome on its guard and the counters.
    fn record<T>(&self, result: &Result<T, RpcError>, guard: InFlightGuard, start: Instant) {
        let inner = self.inner();
        match result {
            Ok(_) => {}
            Err(RpcError::Timeout { .. }) => inner.count(Counter::Timeouts),
            Err(RpcError::MaybeDelivered { .. }) => inner.count(Counter::MaybeDelivered),
            Err(RpcError::Overloaded { .. }) => inner.count(Counter::Overloaded),
            Err(_) => {}
        }
        match result {
            Ok(_) => guard.success(start.elapsed()),
            Err(RpcError::Overloaded { .. }) => guard.cancel(),
            Err(_) => guard.failure(),
        }
    }

    /// Sends the request to every alive endpoint and collects each answer (or error),
    /// each with `timeout` (default [`ClientOptions::request_timeout`](crate::ClientOptions::request_timeout)). Empty when
    /// nothing is alive or the client is shutting down.
    pub async fn send_to_all(
        &self,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Vec<(Arc<Instance>, Result<Payload, RpcError>)> {
        self.to_all(payload, timeout, SendKind::Request)
            .instrument(tracing::debug_span!("rpc_send_to_all", target = %self.target()))
            .await
            .into_iter()
            .map(|(i, r)| {
                let r = r.map(|f| {
                    f.map(Payload::from_frame)
                        .unwrap_or_else(|| Payload::new(bytes::Bytes::new()))
                });
                (i, r)
            })
            .collect()
    }

    /// Sends a one-way request to every alive endpoint; each result says whether it was
    /// handed to that endpoint's socket within `timeout`. Empty when nothing is alive or
    /// the client is shutting down.
    pub async fn send_oneway_to_all(
        &self,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Vec<(Arc<Instance>, Result<(), RpcError>)> {
        self.to_all(payload, timeout, SendKind::Oneway)
            .instrument(tracing::debug_span!("rpc_oneway_to_all", target = %self.target()))
            .await
            .into_iter()
            .map(|(i, r)| (i, r.map(|_| ())))
            .collect()
    }

    async fn to_all(
        &self,
        payload: Payload,
        timeout: Option<Duration>,
        kind: SendKind,
    ) -> Vec<(Arc<Instance>, Result<Option<Frame>, RpcError>)> {
        let inner = self.inner();
        let Ok(_call) = self.begin() else {
            return Vec::new();
        };
        let timeout = timeout.unwrap_or(inner.options.request_timeout);
        let alive = self.alive();
        if let Err(e) = crate::payload::check(&payload, inner.options.transport.max_frame_len) {
            let reason = e.to_string();
            return alive
                .endpoints()
                .iter()
                .map(|a| {
                    let err = RpcError::Config(format!("cannot frame the request: {reason}"));
                    (a.instance.clone(), Err(err))
                })
                .collect();
        }
        let sends = alive.balanced().iter().map(|member| {
            let payload = payload.clone();
            let a = alive_of(member);
            let guard = member.begin();
            async move {
                let start = Instant::now();
                let r = a.connection.send_within(payload, kind, timeout, true).await;
                self.record(&r, guard, start);
                (a.instance.clone(), r)
            }
        });
        futures_util::future::join_all(sends).await
    }
}
