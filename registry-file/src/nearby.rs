//! What the file registry holds near a cluster: the other clusters with a grouplist.
//!
//! The whole registry is the configuration's `service.<cluster>.grouplist` keys, so
//! the listing is exact and costs nothing; the bounds only keep a huge generated file
//! from flooding the report.

use std::collections::BTreeMap;

use meshline_registry_core::Nearby;

/// At most this many places are reported.
pub(crate) const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
pub(crate) const MAX_MEMBERS: usize = 10;

/// The clusters other than `cluster` whose grouplist has at least one valid address,
/// in name order, each selected by mapping the group to it.
pub(crate) fn nearby(lists: &BTreeMap<String, String>, cluster: &str) -> Vec<Nearby> {
    lists
        .iter()
        .filter(|(name, _)| name.as_str() != cluster)
        .filter_map(|(name, text)| {
            let mut members = crate::parse_list(name, text);
            if members.is_empty() {
                return None;
            }
            members.truncate(MAX_MEMBERS);
            Some(Nearby {
                place: format!("cluster `{name}` (service.{name}.grouplist)"),
                members,
                cluster: Some(name.clone()),
                select_with: Vec::new(),
            })
        })
        .take(MAX_PLACES)
        .collect()
}
