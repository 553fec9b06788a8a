//! The bank over HTTP (axum): `POST /try?account=..&amount=..` runs a leg's try inside
//! the transaction the request carries (`TX_XID`, bound by `BindXidLayer`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use meshline::tx::http::BindXidLayer;

use super::Bank;

#[derive(serde::Deserialize)]
struct Leg {
    account: String,
    amount: i64,
}

async fn try_leg(State(bank): State<Arc<Bank>>, Query(leg): Query<Leg>) -> (StatusCode, String) {
    match bank.try_leg(leg.account, leg.amount).await {
        Ok(branch) => (StatusCode::OK, format!("branch {branch}")),
        Err(e) => (StatusCode::CONFLICT, e),
    }
}

/// Serves until the process stops; returns the bound address once listening.
pub async fn serve(bank: Arc<Bank>, listen: SocketAddr) -> std::io::Result<SocketAddr> {
    let app = axum::Router::new()
        .route("/try", post(try_leg))
        .with_state(bank)
        .layer(BindXidLayer);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}
