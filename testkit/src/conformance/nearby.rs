//! `RegistryService::nearby` for the backends whose places are clusters of Seata's own
//! layout (etcd, ZooKeeper, Redis, Consul, Eureka): what `meshline doctor` shows when
//! the asked cluster is empty.

use std::time::{Duration, Instant};

use meshline_registry_core::{Nearby, RegistryService};

use super::{Harness, Opts};
use crate::watch::inst;

/// A backend whose registry a behaviour can fill the way Seata's TCs (and other
/// applications) write it, bypassing our client.
#[allow(async_fn_in_trait)]
pub trait SeataLayout: Harness {
    /// Writes member `addr` of `cluster` as a Seata TC does (the backend's layout).
    async fn put_member(&self, cluster: &str, addr: &str);

    /// Writes what is no place for a TC next to the clusters: garbage in the layout,
    /// entries of other applications, members nobody could use.
    async fn put_foreign(&self);

    /// The server's address as the backend's errors name it.
    fn address(&self) -> String;

    /// What the place of `cluster` must say (its key prefix, path or application).
    fn place_names(&self, cluster: &str) -> String {
        cluster.to_string()
    }
}

/// (cluster, sorted members) of each place, in order. Every place is a cluster that
/// needs no other key to select, and says where it is.
fn summary<H: SeataLayout>(h: &H, places: &[Nearby]) -> Vec<(String, Vec<String>)> {
    places
        .iter()
        .map(|p| {
            assert!(p.select_with.is_empty(), "{p:?}");
            let cluster = p.cluster.clone().unwrap_or_else(|| panic!("{p:?}"));
            assert!(p.place.contains(&h.place_names(&cluster)), "{p:?}");
            let mut members: Vec<String> = p.members.iter().map(|i| i.to_string()).collect();
            members.sort();
            (cluster, members)
        })
        .collect()
}

fn clusters<H: SeataLayout>(h: &H, places: &[Nearby]) -> Vec<String> {
    summary(h, places).into_iter().map(|(c, _)| c).collect()
}

/// An empty registry has nothing nearby; then the other clusters with members are
/// listed (with their members, a sample of at most 10 for a large one), ours included,
/// the asked cluster never, and nothing foreign. With the server gone, `nearby` is an
/// error naming its address, within 5 s.
pub async fn nearby_lists_other_clusters<H: SeataLayout>(h: &mut H) {
    let reg = h.connect(Opts::LONG_TTL).await;
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // `default2` shares `default`'s prefix; `a-b_c` has both separators of the layouts.
    for (cluster, addr) in [
        ("default2", "10.0.0.1:8091"),
        ("default2", "10.0.0.2:8091"),
        ("a-b_c", "10.0.0.3:8091"),
    ] {
        h.put_member(cluster, addr).await;
    }
    h.put_foreign().await;
    reg.register("prod", &inst("10.0.0.5:8091")).await.unwrap();

    assert!(reg.lookup("default").await.unwrap().is_empty());
    let one = |a: &str| vec![a.to_string()];
    assert_eq!(
        summary(h, &reg.nearby("default").await.unwrap()),
        vec![
            ("a-b_c".to_string(), one("10.0.0.3:8091")),
            (
                "default2".to_string(),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()]
            ),
            ("prod".to_string(), one("10.0.0.5:8091")),
        ]
    );
    // The asked cluster itself is never listed, even with members.
    assert_eq!(
        clusters(h, &reg.nearby("default2").await.unwrap()),
        vec!["a-b_c", "prod"]
    );

    // Many members: a sample.
    for i in 1..=30 {
        h.put_member("big", &format!("10.1.0.{i}:8091")).await;
    }
    let places = reg.nearby("default").await.unwrap();
    let big = places
        .iter()
        .find(|p| p.cluster.as_deref() == Some("big"))
        .expect("big listed");
    assert_eq!(big.members.len(), 10);

    // The server gone: an error naming it, within the operation timeouts.
    h.server().go_down();
    let t = Instant::now();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&h.address()), "no address in: {text}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{:?}: {text}",
        t.elapsed()
    );
}
