//! What Redis holds near a cluster: the other clusters of Seata's layout that have
//! members, from one bounded `SCAN` of `registry.redis.*_*`.
//!
//! `SCAN` walks the whole keyspace in steps; the walk stops after [`MAX_STEPS`] steps
//! or [`MAX_KEYS`] matching keys, so a huge shared Redis costs a bounded number of
//! round trips. Each key is split into its cluster and member by the layout module.

use std::collections::BTreeMap;

use meshline_registry_core::{Instance, Nearby, RegistryError};

use super::Inner;
use super::layout::{PREFIX, glob_escape, split_member};
use super::scan::ScanBound;

/// At most this many `SCAN` steps (of `COUNT 1000` each) are taken.
const MAX_STEPS: usize = 100;
/// The walk stops once this many matching keys were seen.
const MAX_KEYS: usize = 5000;
/// At most this many places are reported.
const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;

impl Inner {
    /// The clusters other than `cluster` with at least one member, in name order.
    pub(super) async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let pattern = format!("{}*_*", glob_escape(PREFIX));
        let bound = ScanBound {
            steps: MAX_STEPS,
            keys: MAX_KEYS,
        };
        let (keys, cut) = self.scan_keys(&pattern, Some(bound)).await?;
        if cut {
            tracing::debug!(
                registry = super::KIND,
                keys = keys.len(),
                "nearby: scan stopped at its bound; the places shown are from the keys seen"
            );
        }
        let mut clusters: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for key in &keys {
            match split_member(key) {
                Some((name, member)) if name != cluster => {
                    let members = clusters.entry(name).or_default();
                    if members.len() < MAX_MEMBERS {
                        members.push(member);
                    }
                }
                Some(_) => {}
                None => tracing::debug!(
                    registry = super::KIND,
                    key = %String::from_utf8_lossy(&key[..key.len().min(200)]),
                    "nearby: not a member key of Seata's layout; skipped"
                ),
            }
        }
        Ok(clusters
            .into_iter()
            .take(MAX_PLACES)
            .map(|(name, members)| Nearby {
                place: format!("cluster `{name}` (keys {PREFIX}{name}_*)"),
                members,
                cluster: Some(name),
                select_with: Vec::new(),
            })
            .collect())
    }
}
