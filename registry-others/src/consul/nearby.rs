//! What Consul holds near a cluster: the other services with Seata's tag that have
//! passing members.
//!
//! In Seata's layout a cluster is a Consul service named after it, tagged `services`.
//! `GET /v1/catalog/services` lists every service with its tags in one call; the
//! services carrying Seata's tag are then read exactly as a lookup reads a cluster
//! (`/v1/health/service/<name>?passing=true&tag=services`), a few at a time.

use std::sync::Arc;

use meshline_registry_core::{Nearby, RegistryError};
use reqwest::Method;
use tokio::task::JoinSet;

use super::agent::REQUEST_TIMEOUT;
use super::{Inner, KIND, parse};
use crate::common::Call;

/// At most this many services with Seata's tag are read (and reported).
const MAX_PLACES: usize = 100;
/// At most this many health reads are in flight at once.
const IN_FLIGHT: usize = 8;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;

/// The services other than `cluster` (Consul matches names case-insensitively) that
/// carry Seata's tag and have passing members, in name order.
pub(super) async fn nearby(
    inner: &Arc<Inner>,
    cluster: &str,
) -> Result<Vec<Nearby>, RegistryError> {
    let (body, _) = inner
        .agent
        .call(
            Call::new(Method::GET, &["v1", "catalog", "services"]),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| e.into_registry(KIND, inner.server(), "list services"))?;
    let mut names = parse::parse_catalog_services(&body).map_err(|m| {
        RegistryError::unavailable(KIND, inner.server(), format!("list services: {m}"))
    })?;
    names.retain(|n| !n.eq_ignore_ascii_case(cluster));
    if names.len() > MAX_PLACES {
        tracing::debug!(
            registry = KIND,
            services = names.len(),
            "nearby: more tagged services than reported; the first {MAX_PLACES} by name are read"
        );
        names.truncate(MAX_PLACES);
    }
    let mut reads = JoinSet::new();
    let mut places: Vec<Option<Nearby>> = vec![None; names.len()];
    let mut next = 0;
    loop {
        while next < names.len() && reads.len() < IN_FLIGHT {
            let (inner, name, at) = (inner.clone(), names[next].clone(), next);
            reads.spawn(async move { (at, inner.query(&name, None).await) });
            next += 1;
        }
        let Some(joined) = reads.join_next().await else {
            break;
        };
        let Ok((at, read)) = joined else { continue };
        let name = &names[at];
        let (mut members, _) = read.map_err(|m| {
            RegistryError::unavailable(KIND, inner.server(), format!("lookup `{name}`: {m}"))
        })?;
        if members.is_empty() {
            continue;
        }
        members.truncate(MAX_MEMBERS);
        places[at] = Some(Nearby {
            place: format!("service `{name}` (tag `{}`)", parse::SEATA_TAG),
            members,
            cluster: Some(name.clone()),
            select_with: Vec::new(),
        });
    }
    Ok(places.into_iter().flatten().collect())
}
