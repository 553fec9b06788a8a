//! What etcd holds near a cluster: the other clusters of Seata's layout that have
//! members, from one bounded prefix listing of `registry-seata-`.
//!
//! Seata's own client lists `registry-seata-<cluster>` without the trailing `-`, so a
//! cluster `default` there also sees `default2`; ours asks for the exact cluster. When
//! the exact cluster is empty, the clusters sharing the layout are the first thing to
//! show: each key is split into its cluster and member by the layout module.

use std::collections::BTreeMap;

use etcd_client::GetOptions;
use meshline_registry_core::{Instance, Nearby, RegistryError};

use crate::Inner;
use crate::layout::{LAYOUT_PREFIX, split_member};
use crate::timed::timed;

/// At most this many keys are read: one range request, a few hundred kilobytes at most.
const MAX_KEYS: i64 = 5000;
/// At most this many places are reported.
const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;

impl Inner {
    /// The clusters other than `cluster` with at least one member, in name order.
    pub(crate) async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let resp = timed(
            &self.servers,
            "list registry-seata-",
            self.op_timeout,
            || {
                let mut kv = self.client.kv_client();
                async move {
                    kv.get(
                        LAYOUT_PREFIX,
                        Some(GetOptions::new().with_prefix().with_limit(MAX_KEYS)),
                    )
                    .await
                }
            },
        )
        .await?;
        if resp.more() {
            tracing::debug!(
                registry = crate::KIND,
                keys = MAX_KEYS,
                "nearby: more keys than listed; the places shown are from the first ones"
            );
        }
        let mut clusters: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for kv in resp.kvs() {
            match split_member(kv.key(), kv.value()) {
                Some((name, member)) if name != cluster => {
                    let members = clusters.entry(name).or_default();
                    if members.len() < MAX_MEMBERS
                        && !members.iter().any(|m| m.key() == member.key())
                    {
                        members.push(member);
                    }
                }
                Some(_) => {}
                None => tracing::debug!(
                    registry = crate::KIND,
                    key = %String::from_utf8_lossy(&kv.key()[..kv.key().len().min(200)]),
                    "nearby: not a member key of Seata's layout; skipped"
                ),
            }
        }
        Ok(clusters
            .into_iter()
            .take(MAX_PLACES)
            .map(|(name, members)| Nearby {
                place: format!("cluster `{name}` (keys {LAYOUT_PREFIX}{name}-*)"),
                members,
                cluster: Some(name),
                select_with: Vec::new(),
            })
            .collect())
    }
}
