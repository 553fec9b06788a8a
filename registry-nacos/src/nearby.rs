//! What Nacos holds near a cluster: where a Seata TC is registered when the client
//! does not find it (Seata issues #3314, #4935, #5349; Nacos #11159).
//!
//! A Seata client reads service `registry.nacos.application` in group
//! `registry.nacos.group` and namespace `registry.nacos.namespace`, keeping the
//! instances of the Nacos cluster its group maps to. The TC writes the same four
//! coordinates from its own configuration, and they disagree in a handful of ways:
//! the shipped files say `SEATA_GROUP` where the code default is `DEFAULT_GROUP`, a
//! namespace set on one side only, another application name (`seata` vs
//! `seata-server`), another cluster name (`registry.nacos.cluster` on the TC).
//!
//! So the places looked at are, for the configured namespace, the public one and every
//! other namespace the server lists (at most [`MAX_NAMESPACES`]), and in each for the
//! configured group, `DEFAULT_GROUP`, `SEATA_GROUP` and every group the server's
//! service catalog names ([`crate::catalog`]: a team's own group name): the configured
//! service, `seata-server`, `seata`, the services Nacos' service list call names
//! in that group (first page) and the catalog's; each queried once for the instances
//! of every Nacos cluster (at most [`MAX_QUERIES`] queries). Every Nacos cluster with usable members (healthy
//! and enabled, as a lookup keeps them) is a place, except the one asked for.
//!
//! Every request names its namespace, so the other namespaces are read through the
//! registry's own connection.

use std::collections::BTreeMap;

use crate::catalog::{Catalog, Listed};
use crate::{Inner, KIND, timed, usable};
use meshline_registry_core::{Nearby, RegistryError};

/// Groups Seata users end up in: the code default and the shipped files' value.
const LIKELY_GROUPS: [&str; 2] = ["DEFAULT_GROUP", "SEATA_GROUP"];
/// Service names Seata users register their TC under.
const LIKELY_SERVICES: [&str; 2] = ["seata-server", "seata"];
/// The page size of the service list call (its first page only is read).
const LISTED_SERVICES: usize = 100;
/// At most this many instance queries per call.
const MAX_QUERIES: usize = 60;
/// At most this many namespaces besides the configured and the public one are read.
const MAX_NAMESPACES: usize = 10;
/// At most this many places are reported.
const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;
/// The cluster name Nacos gives an instance registered without one.
const NACOS_DEFAULT_CLUSTER: &str = "DEFAULT";

/// True for the namespace Nacos calls `public` (Seata's default, written empty).
fn is_public(namespace: &str) -> bool {
    namespace.is_empty() || namespace == "public"
}

/// The namespace as a place names it.
fn shown_namespace(namespace: &str) -> &str {
    if is_public(namespace) {
        "public"
    } else {
        namespace
    }
}

impl Inner {
    /// The places with members near `cluster` of the configured service, group and
    /// namespace, in order: the configured namespace first, then the public one; in
    /// each, the configured group first; in each, the configured service first.
    pub(crate) async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let configured = &self.settings.namespace;
        let catalog = match Catalog::open(&self.settings).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(registry = KIND, error = %e, "nearby: no service catalog; guessing groups");
                None
            }
        };
        let listed_in = |namespace: String| {
            let catalog = catalog.as_ref();
            async move {
                let Some(c) = catalog else { return Vec::new() };
                match c.services(&namespace).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::debug!(registry = KIND, namespace, error = %e, "nearby: no service catalog; guessing groups");
                        Vec::new()
                    }
                }
            }
        };
        let mut places = Vec::new();
        let mut budget = MAX_QUERIES;
        let listed = listed_in(configured.clone()).await;
        self.nearby_in(configured, cluster, &listed, &mut budget, &mut places)
            .await?;
        // Then the public namespace, then every other namespace the server lists.
        let mut others: Vec<String> = Vec::new();
        if !is_public(configured) {
            others.push(String::new());
        }
        if let Some(c) = &catalog {
            match c.namespaces().await {
                Ok(list) => others.extend(
                    list.into_iter()
                        .filter(|n| !is_public(n) && !same_namespace(n, configured))
                        .take(MAX_NAMESPACES),
                ),
                Err(e) => tracing::debug!(registry = KIND, error = %e, "nearby: no namespace list"),
            }
        }
        for namespace in others {
            if budget == 0 {
                break;
            }
            let listed = listed_in(namespace.clone()).await;
            match self
                .nearby_in(&namespace, cluster, &listed, &mut budget, &mut places)
                .await
            {
                Ok(()) => {}
                // The configured namespace answered: what it holds is still worth
                // showing, and the log says why this one is missing.
                Err(e) => tracing::warn!(
                    registry = KIND,
                    namespace = shown_namespace(&namespace),
                    error = %e,
                    "nearby: cannot read a namespace; showing the others"
                ),
            }
        }
        places.truncate(MAX_PLACES);
        Ok(places)
    }

    /// The places of one namespace.
    async fn nearby_in(
        &self,
        namespace: &str,
        cluster: &str,
        listed: &[Listed],
        budget: &mut usize,
        places: &mut Vec<Nearby>,
    ) -> Result<(), RegistryError> {
        let mut groups = vec![self.group.clone()];
        let others = LIKELY_GROUPS
            .iter()
            .map(|g| g.to_string())
            .chain(listed.iter().map(|l| l.group.clone()));
        for g in others {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        for group in &groups {
            let mut services = vec![self.service.clone()];
            services.extend(LIKELY_SERVICES.iter().map(|s| s.to_string()));
            services.extend(
                listed
                    .iter()
                    .filter(|l| &l.group == group)
                    .map(|l| l.service.clone()),
            );
            match timed(
                &self.server,
                "list services",
                self.naming
                    .service_names(Some(namespace), group, LISTED_SERVICES),
            )
            .await
            {
                Ok((listed, _total)) => services.extend(listed),
                // The instance queries below say whether the server is there; a server
                // without the list call still answers them.
                Err(e) => tracing::debug!(
                    registry = KIND,
                    group,
                    error = %e,
                    "nearby: no service list; querying the likely services only"
                ),
            }
            let mut unique: Vec<String> = Vec::new();
            for s in services {
                if !s.is_empty() && !unique.contains(&s) {
                    unique.push(s);
                }
            }
            for service in unique {
                if *budget == 0 {
                    tracing::debug!(
                        registry = KIND,
                        "nearby: query budget spent; the remaining services are not read"
                    );
                    return Ok(());
                }
                *budget -= 1;
                let list = timed(
                    &self.server,
                    "query instances",
                    self.naming.query(Some(namespace), group, &service, ""),
                )
                .await?;
                let mut by_cluster: BTreeMap<String, Vec<_>> = BTreeMap::new();
                for instance in list {
                    let name = instance
                        .cluster_name
                        .clone()
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| NACOS_DEFAULT_CLUSTER.to_string());
                    by_cluster.entry(name).or_default().push(instance);
                }
                for (nacos_cluster, instances) in by_cluster {
                    let here = Coordinates {
                        namespace,
                        group,
                        service: &service,
                        cluster: &nacos_cluster,
                    };
                    if self.is_asked(&here, cluster) {
                        continue;
                    }
                    let mut members = usable(&nacos_cluster, &instances);
                    if members.is_empty() {
                        continue;
                    }
                    members.sort_by(|a, b| a.key().cmp(b.key()));
                    members.truncate(MAX_MEMBERS);
                    places.push(self.place(&here, cluster, members));
                }
            }
        }
        Ok(())
    }

    /// True when `here` is the place a lookup of `cluster` reads.
    fn is_asked(&self, here: &Coordinates<'_>, cluster: &str) -> bool {
        same_namespace(here.namespace, &self.settings.namespace)
            && here.group == self.group
            && here.service == self.service
            && here.cluster == cluster
    }

    /// The place at `here`, with what selects it instead of the configured one.
    fn place(
        &self,
        here: &Coordinates<'_>,
        cluster: &str,
        members: Vec<meshline_registry_core::Instance>,
    ) -> Nearby {
        let mut select_with = Vec::new();
        if !same_namespace(here.namespace, &self.settings.namespace) {
            // Empty is Seata's way of saying `public`.
            let value = if is_public(here.namespace) {
                ""
            } else {
                here.namespace
            };
            select_with.push(format!("registry.nacos.namespace={value}"));
        }
        if here.group != self.group {
            select_with.push(format!("registry.nacos.group={}", here.group));
        }
        if here.service != self.service {
            select_with.push(format!("registry.nacos.application={}", here.service));
        }
        Nearby {
            place: format!(
                "service `{}` in group `{}`, namespace `{}`, Nacos cluster `{}`",
                here.service,
                here.group,
                shown_namespace(here.namespace),
                here.cluster
            ),
            members,
            cluster: (here.cluster != cluster).then(|| here.cluster.to_string()),
            select_with,
        }
    }
}

/// Where a Nacos instance lives, as a Seata client addresses it.
struct Coordinates<'a> {
    namespace: &'a str,
    group: &'a str,
    service: &'a str,
    cluster: &'a str,
}

fn same_namespace(a: &str, b: &str) -> bool {
    a == b || (is_public(a) && is_public(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_is_empty_or_public() {
        assert!(same_namespace("", "public"));
        assert!(same_namespace("dev", "dev"));
        assert!(!same_namespace("dev", ""));
        assert_eq!(shown_namespace(""), "public");
        assert_eq!(shown_namespace("dev"), "dev");
    }
}
