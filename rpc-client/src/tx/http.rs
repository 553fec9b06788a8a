//! The XID across HTTP and gRPC calls, with Seata's names: tower layers that put the
//! current transaction on outgoing requests ([`PropagateXidLayer`]) and run incoming
//! ones inside the transaction they carry ([`BindXidLayer`]). Feature `http`.
//!
//! Seata's integrations carry the XID in the header `TX_XID` and the branch type in
//! `TX_BRANCH_TYPE` (Java's HTTP executor and interceptor, its gRPC interceptors as
//! metadata, seata-go's gin and grpc middlewares). HTTP/2 and gRPC metadata names are
//! lower case on the wire (`tx_xid`, as Java's `Metadata.Key.of` writes them too), and
//! HTTP/1 names are matched without regard to case: one name serves both.
//!
//! The layers work on `http::Request`, so one pair serves every tower-based stack:
//!
//! | stack | outgoing | incoming |
//! |---|---|---|
//! | hyper / axum | `ServiceBuilder::new().layer(PropagateXidLayer)` around the client | `Router::layer(BindXidLayer)` |
//! | tonic | `.layer(PropagateXidLayer)` around the `Channel` | `Server::builder().layer(BindXidLayer)` |
//! | reqwest (not tower) | `.headers(tx::http::current_headers())` | — |
//!
//! A request that carries an XID runs its handler inside that transaction as a
//! [`Participant`](super::Role::Participant): `Required` blocks in the handler join it,
//! and branches registered there belong to it. An `TX_XID` that is not an XID
//! ([`valid_xid`](super::valid_xid)) is ignored (logged), as is an unknown branch type.
//!
//! Header names with an underscore are dropped by some proxies (nginx's default
//! `underscores_in_headers off`): such a proxy between two services loses the
//! transaction, as it does for Seata's Java services.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, HeaderValue, Request};
use tower_layer::Layer;
use tower_service::Service;

use super::context::{self, current};
use crate::message::BranchType;

/// The XID header (Seata's `RootContext.KEY_XID`, `TX_XID`).
pub const XID_HEADER: HeaderName = HeaderName::from_static("tx_xid");

/// The branch type header (Seata's `RootContext.KEY_BRANCH_TYPE`, `TX_BRANCH_TYPE`).
pub const BRANCH_TYPE_HEADER: HeaderName = HeaderName::from_static("tx_branch_type");

/// The headers that carry the current transaction (empty with none): for clients
/// that are not tower services, such as reqwest.
pub fn current_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    insert_current(&mut headers);
    headers
}

/// Puts the current transaction's headers on `headers` (replacing any), if one is
/// current.
fn insert_current(headers: &mut HeaderMap) {
    let Some(tx) = current() else {
        return;
    };
    // An XID bound here is printable ASCII (checked when bound or begun): a valid value.
    match HeaderValue::from_str(tx.xid()) {
        Ok(v) => {
            headers.insert(XID_HEADER, v);
        }
        Err(_) => {
            tracing::warn!(
                xid = tx.xid(),
                "the XID cannot be a header value; not propagated"
            );
            return;
        }
    }
    if let Some(b) = tx.branch_type() {
        headers.insert(BRANCH_TYPE_HEADER, HeaderValue::from_static(b.java_name()));
    }
}

/// The transaction an incoming request carries: its XID and branch type, if valid.
pub fn incoming(headers: &HeaderMap) -> Option<(String, Option<BranchType>)> {
    let raw = headers.get(XID_HEADER)?;
    let Some(xid) = raw.to_str().ok().filter(|x| super::valid_xid(x)) else {
        tracing::warn!(value = ?raw, "a request's TX_XID is not an XID; handled outside any transaction");
        return None;
    };
    let branch_type = headers.get(BRANCH_TYPE_HEADER).and_then(|v| {
        let name = v.to_str().unwrap_or("");
        let parsed = [
            BranchType::AT,
            BranchType::TCC,
            BranchType::SAGA,
            BranchType::XA,
        ]
        .into_iter()
        .find(|b| b.java_name().eq_ignore_ascii_case(name));
        if parsed.is_none() {
            tracing::debug!(value = ?v, "unknown TX_BRANCH_TYPE ignored");
        }
        parsed
    });
    Some((xid.to_string(), branch_type))
}

/// A layer for clients: every request sent while a transaction is current carries
/// `TX_XID` (and `TX_BRANCH_TYPE` when a branch type is bound). The transaction is
/// read when the request is handed to the service (`call`), in the caller's task.
#[derive(Debug, Clone, Copy, Default)]
pub struct PropagateXidLayer;

impl<S> Layer<S> for PropagateXidLayer {
    type Service = PropagateXid<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PropagateXid { inner }
    }
}

/// The service [`PropagateXidLayer`] makes.
#[derive(Debug, Clone)]
pub struct PropagateXid<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for PropagateXid<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        insert_current(req.headers_mut());
        self.inner.call(req)
    }
}

/// A layer for servers: a request carrying `TX_XID` is handled inside that
/// transaction ([`with_xid`](super::with_xid)); one without runs as before. A
/// transaction already current where the server runs is kept (Seata binds the header
/// only when none is).
#[derive(Debug, Clone, Copy, Default)]
pub struct BindXidLayer;

impl<S> Layer<S> for BindXidLayer {
    type Service = BindXid<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BindXid { inner }
    }
}

/// The service [`BindXidLayer`] makes.
#[derive(Debug, Clone)]
pub struct BindXid<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for BindXid<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let bind = if current().is_none() {
            incoming(req.headers())
        } else {
            None
        };
        let fut = self.inner.call(req);
        match bind {
            Some((xid, branch_type)) => {
                Box::pin(async move { context::with_xid(&xid, branch_type, fut).await })
            }
            None => Box::pin(fut),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn headers_carry_the_current_transaction_and_bad_ones_are_ignored() {
        assert!(current_headers().is_empty());
        let h = context::with_xid("10.0.0.7:8091:9", Some(BranchType::TCC), async {
            current_headers()
        })
        .await;
        assert_eq!(h.get("TX_XID").unwrap(), "10.0.0.7:8091:9");
        assert_eq!(h.get("tx_branch_type").unwrap(), "TCC");
        assert_eq!(
            incoming(&h),
            Some(("10.0.0.7:8091:9".into(), Some(BranchType::TCC)))
        );
        let mut bad = HeaderMap::new();
        bad.insert(XID_HEADER, HeaderValue::from_static("has space"));
        assert_eq!(incoming(&bad), None);
        let mut odd = HeaderMap::new();
        odd.insert(XID_HEADER, HeaderValue::from_static("x:1:2"));
        odd.insert(BRANCH_TYPE_HEADER, HeaderValue::from_static("NOPE"));
        assert_eq!(incoming(&odd), Some(("x:1:2".into(), None)));
    }
}
