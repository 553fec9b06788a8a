//! What Eureka holds near a cluster: the other applications with UP instances.
//!
//! In Seata's layout a cluster is an application named after it, upper-cased. One full
//! fetch (`GET {serviceUrl}/apps`, the document a watch starts from) lists every
//! application; it is parsed by the same code as the watches' mirror, and each
//! application's UP members are picked by the same rule as a lookup.

use std::collections::BTreeMap;

use meshline_registry_core::{Nearby, RegistryError};

use super::{Inner, KIND, parse};

/// At most this many places are reported.
const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;

impl Inner {
    /// The applications other than `cluster`'s with at least one UP member, in name
    /// order.
    pub(super) async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let fail =
            |m: String| RegistryError::unavailable(KIND, self.server(), format!("list apps: {m}"));
        let doc = self
            .get_json(&["apps"])
            .await
            .map_err(|e| fail(e.describe()))?;
        let mirror = parse::Mirror::from_full(&doc).map_err(fail)?;
        let asked = parse::app_name(cluster);
        let apps: BTreeMap<&String, _> = mirror
            .apps
            .iter()
            .filter(|(name, _)| **name != asked)
            .collect();
        Ok(apps
            .into_iter()
            .filter_map(|(app, instances)| {
                // Seata's TC registers its application in lower case (`default`) and
                // its clients upper-case the cluster: either spelling selects it.
                let name = app.to_lowercase();
                let mut members = parse::up_instances(&name, instances.values());
                if members.is_empty() {
                    return None;
                }
                members.sort_by(|a, b| a.key().cmp(b.key()));
                members.truncate(MAX_MEMBERS);
                Some(Nearby {
                    place: format!("application `{app}`"),
                    members,
                    cluster: Some(name),
                    select_with: Vec::new(),
                })
            })
            .take(MAX_PLACES)
            .collect())
    }
}
