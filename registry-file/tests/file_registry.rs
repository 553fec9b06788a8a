//! File registry: lookups, read-only errors, hot reload and broken edits.

use std::time::Duration;

use meshline_registry_core::{Config, Health, RegistryError, RegistryService};
use meshline_registry_file::FileRegistry;

const WITHIN: Duration = Duration::from_secs(1);

fn write(path: &std::path::Path, text: &str) {
    // Write to a temp file and rename, as editors do, so the reader never sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A temp dir holding the file `name` with `text` in it, and that file's path.
fn file_with(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    write(&path, text);
    (dir, path)
}

fn addrs(s: &meshline_registry_core::Snapshot) -> Vec<String> {
    names(s.instances())
}

fn names(list: &[meshline_registry_core::Instance]) -> Vec<String> {
    list.iter().map(|i| i.to_string()).collect()
}

/// Asserts that `r` is the answer of a closed registry.
fn assert_closed<T>(r: Result<T, RegistryError>) {
    assert!(matches!(r, Err(RegistryError::Closed { .. })));
}

/// A watch of `cluster` on `reg` whose first snapshot (returned with it) lists
/// `members`.
async fn watch_showing(
    reg: &FileRegistry,
    cluster: &str,
    members: &[&str],
) -> (
    meshline_registry_core::Watch,
    meshline_registry_core::Snapshot,
) {
    let mut w = reg.watch(cluster).await.unwrap();
    let first = w.next().await.unwrap();
    assert_eq!(addrs(&first), members);
    (w, first)
}

/// Writes `text` to `path` (an edit) and checks that what `w` sees next, within
/// [`WITHIN`], lists `members`.
async fn edit_shows(
    path: &std::path::Path,
    text: &str,
    w: &mut meshline_registry_core::Watch,
    members: &[&str],
) {
    write(path, text);
    let s = tokio::time::timeout(WITHIN, w.next())
        .await
        .expect("edit not seen within 1 s")
        .unwrap();
    assert_eq!(addrs(&s), members);
}

#[tokio::test]
async fn default_config_lists_the_default_tc() {
    let reg = FileRegistry::from_config(&Config::default()).unwrap();
    let list = reg.lookup("default").await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].to_string(), "127.0.0.1:8091");
    let err = reg.lookup("nope").await.unwrap_err().to_string();
    assert!(err.contains("service.nope.grouplist"), "{err}");
}

#[tokio::test]
async fn register_is_refused_as_read_only() {
    let reg = FileRegistry::from_config(&Config::default()).unwrap();
    let i = meshline_registry_core::Instance::parse("10.0.0.1:8091").unwrap();
    assert!(matches!(
        reg.register("default", &i).await,
        Err(RegistryError::ReadOnly { .. })
    ));
    assert!(matches!(
        reg.unregister("default", &i).await,
        Err(RegistryError::ReadOnly { .. })
    ));
}

#[tokio::test]
async fn bad_entries_are_skipped_not_fatal() {
    let cfg = Config::from_text(
        "service.prod.grouplist=10.0.0.1:8091;not an address;[::1]:8092;10.0.0.3:99999",
        meshline_registry_core::config::Format::Properties,
    )
    .unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    let list = names(&reg.lookup("prod").await.unwrap());
    assert_eq!(list, vec!["10.0.0.1:8091", "[::1]:8092"]);
}

#[tokio::test]
async fn edits_reach_watchers_and_broken_edits_keep_last_good() {
    let (_dir, path) = file_with(
        "meshline.yaml",
        "service:\n  grouplist:\n    prod: \"10.0.0.1:8091\"\n",
    );
    let cfg = Config::load(Some(&path)).unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    let (mut w, _) = watch_showing(&reg, "prod", &["10.0.0.1:8091"]).await;

    // A good edit arrives within a second.
    edit_shows(
        &path,
        "service:\n  grouplist:\n    prod: \"10.0.0.1:8091;10.0.0.2:8091\"\n",
        &mut w,
        &["10.0.0.1:8091", "10.0.0.2:8091"],
    )
    .await;
    assert!(w.health().is_connected());

    // A broken edit: the last good list stays, health says why.
    write(&path, "service:\n  grouplist: [unclosed\n");
    let h = tokio::time::timeout(WITHIN * 2, w.health_changed())
        .await
        .expect("stale not reported")
        .unwrap();
    assert!(matches!(h, Health::Stale { .. }), "{h:?}");
    assert_eq!(addrs(&w.current()), vec!["10.0.0.1:8091", "10.0.0.2:8091"]);
    assert_eq!(reg.lookup("prod").await.unwrap().len(), 2);

    // Fixing the file resumes updates.
    edit_shows(
        &path,
        "service:\n  grouplist:\n    prod: \"10.0.0.3:8091\"\n",
        &mut w,
        &["10.0.0.3:8091"],
    )
    .await;
    assert!(w.health().is_connected());

    // A file that loses the cluster entirely: empty protection keeps the list.
    write(&path, "service:\n  grouplist:\n    other: \"10.9.9.9:1\"\n");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(addrs(&w.current()), vec!["10.0.0.3:8091"]);

    reg.close().await.unwrap();
    assert_closed(reg.lookup("prod").await);
}

#[tokio::test]
async fn registry_file_name_points_at_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main.properties");
    let lists = dir.path().join("lists.properties");
    std::fs::write(
        &main,
        "registry.type=file\nregistry.file.name=lists.properties\n",
    )
    .unwrap();
    write(&lists, "service.prod.grouplist=10.0.0.1:8091\n");
    let cfg = Config::load(Some(&main)).unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    assert_eq!(reg.followed_path(), Some(lists.as_path()));
    let mut w = reg.watch("prod").await.unwrap();
    assert_eq!(w.next().await.unwrap().len(), 1);
    edit_shows(
        &lists,
        "service.prod.grouplist=10.0.0.1:8091;10.0.0.2:8091\n",
        &mut w,
        &["10.0.0.1:8091", "10.0.0.2:8091"],
    )
    .await;
}

/// A `registry.file.name` that cannot be read is an error naming the path and the
/// cause, never a silent fallback to the built-in `default -> 127.0.0.1:8091`.
#[test]
fn an_unreadable_registry_file_name_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("registry.conf");
    write(
        &main,
        "registry { type = file\n file { name = \"missing.conf\" } }\n",
    );
    let cfg = Config::load(Some(&main)).unwrap();
    let e = FileRegistry::from_config(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("registry.file.name") && e.contains("missing.conf") && e.contains("cannot read"),
        "{e}"
    );
    // A file that is there but broken: the same, with the parse error.
    write(&dir.path().join("missing.conf"), "service {\n");
    let e = FileRegistry::from_config(&cfg).unwrap_err().to_string();
    assert!(e.contains("missing.conf") && e.contains("HOCON"), "{e}");
    // Seata's shipped pair: registry.conf names file.conf, which is read.
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../registry-core/tests/fixtures/seata"
    );
    let cfg = Config::load(Some(&std::path::Path::new(fixtures).join("registry.conf"))).unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    assert_eq!(
        reg.followed_path(),
        Some(std::path::Path::new(fixtures).join("file.conf").as_path())
    );
}

/// `nearby` lists the other clusters that have members, each with the cluster name to
/// map the group to; the asked cluster and clusters without a valid address are not
/// listed; a registry holding nothing lists nothing.
#[tokio::test]
async fn nearby_lists_the_other_clusters_with_members() {
    let cfg = Config::from_text(
        "service.default.grouplist=\n\
         service.default2.grouplist=10.0.0.1:8091;10.0.0.2:8091\n\
         service.broken.grouplist=not an address\n\
         service.other.grouplist=10.0.0.9:8091\n",
        meshline_registry_core::config::Format::Properties,
    )
    .unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    let places = reg.nearby("default").await.unwrap();
    let got: Vec<(Option<String>, Vec<String>, Vec<String>)> = places
        .iter()
        .map(|p| {
            (
                p.cluster.clone(),
                p.members.iter().map(|i| i.to_string()).collect(),
                p.select_with.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                Some("default2".to_string()),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()],
                vec![]
            ),
            (
                Some("other".to_string()),
                vec!["10.0.0.9:8091".to_string()],
                vec![]
            ),
        ]
    );
    assert!(places[0].place.contains("default2"), "{}", places[0].place);

    // A cluster with very many members is sampled.
    let many: Vec<String> = (1..=50).map(|i| format!("10.1.0.{i}:8091")).collect();
    let reg = FileRegistry::from_grouplists([("big".to_string(), many.join(";"))].into());
    let places = reg.nearby("default").await.unwrap();
    assert_eq!(places.len(), 1);
    assert_eq!(places[0].members.len(), 10);

    let empty = FileRegistry::from_grouplists(Default::default());
    assert!(empty.nearby("default").await.unwrap().is_empty());

    empty.close().await.unwrap();
    assert_closed(empty.nearby("default").await);
}

/// The registry rebuilds from every source of its configuration. A
/// grouplist given by the environment was replaced by the file's (the built-in
/// `127.0.0.1:8091`) on the first 250 ms poll; a key set in code was lost the same way.
#[tokio::test]
async fn an_environment_grouplist_survives_polls_and_edits_of_the_file() {
    let (_dir, path) = file_with(
        "meshline.properties",
        "service.other.grouplist=10.0.0.9:1\n",
    );
    let mut cfg = meshline_registry_core::config::ConfigLoader::new()
        .file(&path)
        .env_vars([("MESHLINE_SERVICE__default__GROUPLIST", "10.0.0.5:8091")])
        .load()
        .unwrap();
    cfg.set("service.coded.grouplist", "10.0.0.7:8091").unwrap();
    let reg = FileRegistry::from_config(&cfg).unwrap();
    let (w, first) = watch_showing(&reg, "default", &["10.0.0.5:8091"]).await;
    let (mut other, _) = watch_showing(&reg, "other", &["10.0.0.9:1"]).await;

    // An edit of the file, which also gives `default` a list of its own: the edit is
    // seen, the environment still wins for `default`, and the key set in code stays.
    edit_shows(
        &path,
        "service.other.grouplist=10.0.0.9:2\nservice.default.grouplist=10.0.0.1:1\n",
        &mut other,
        &["10.0.0.9:2"],
    )
    .await;
    let now = w.current();
    assert_eq!(addrs(&now), vec!["10.0.0.5:8091"]);
    assert_eq!(now.revision(), first.revision(), "`default` moved: {now:?}");
    let coded = names(&reg.lookup("coded").await.unwrap());
    assert_eq!(coded, vec!["10.0.0.7:8091"]);
    reg.close().await.unwrap();
}
