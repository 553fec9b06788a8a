//! Everything that lists the registry backends is held to the one table of them,
//! `meshline::registry::REGISTRY_TYPES`: a backend added to a manifest, a README or
//! the crate docs without its entry (or an entry without them) fails here.
//!
//! What is derived at run time needs no test of this kind: `resolve_type`, the "not
//! compiled in" errors, the centres (`meshline::centre::resolve_centre`), the doctor's
//! centres, the CLI's `--registry` help and `meshline types`, and the test script's
//! refusal checks (which read `meshline types`).

use std::collections::BTreeSet;
use std::path::Path;

use meshline::registry::REGISTRY_TYPES;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `[features]` of a manifest: name -> what it enables.
fn features(rel: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let doc: toml::Table = read(rel).parse().expect(rel);
    doc["features"]
        .as_table()
        .expect("a [features] table")
        .iter()
        .map(|(k, v)| {
            let list = v
                .as_array()
                .expect("a feature is a list")
                .iter()
                .map(|s| s.as_str().expect("a string").to_string())
                .collect();
            (k.clone(), list)
        })
        .collect()
}

/// The features that compile a backend in, and their TLS features.
fn table_features() -> (BTreeSet<&'static str>, BTreeSet<&'static str>) {
    let plain = REGISTRY_TYPES.iter().map(|t| t.feature).collect();
    let tls = REGISTRY_TYPES
        .iter()
        .filter_map(|t| t.tls_feature)
        .collect();
    (plain, tls)
}

#[test]
fn the_facade_manifest_has_a_feature_for_each_entry_and_no_other_backend() {
    let f = features("Cargo.toml");
    let (plain, tls) = table_features();
    for t in REGISTRY_TYPES {
        let enables = f
            .get(t.feature)
            .unwrap_or_else(|| panic!("{}: no feature `{}`", t.seata_name, t.feature));
        assert!(
            enables.iter().any(|e| e.contains(t.crate_name)
                || (t.crate_name == "meshline-registry-others" && e == "_others")),
            "feature `{}` does not enable {}: {enables:?}",
            t.feature,
            t.crate_name
        );
        if t.crate_name == "meshline-registry-others" {
            // `meshline::others` is there whenever one of its backends is.
            assert!(
                enables.contains(&"_others".to_string()),
                "feature `{}` must enable `_others`",
                t.feature
            );
        }
        assert!(
            f["all"].contains(&t.feature.to_string()),
            "`all` lacks {}",
            t.feature
        );
        if let Some(tls_feature) = t.tls_feature {
            let enables = f
                .get(tls_feature)
                .unwrap_or_else(|| panic!("{}: no feature `{tls_feature}`", t.seata_name));
            assert!(enables.contains(&t.feature.to_string()), "{tls_feature}");
            // nacos-sdk's TLS switch turns every Nacos connection of the process to TLS
            // and pulls OpenSSL: it is left out of `all-tls` on purpose.
            if tls_feature != "nacos-tls" {
                assert!(
                    f["all-tls"].contains(&tls_feature.to_string()),
                    "{tls_feature}"
                );
            }
        }
    }
    // Every feature that pulls a backend crate in belongs to an entry.
    for (name, enables) in &f {
        let backend = enables
            .iter()
            .any(|e| e.contains("meshline-registry-") || e == "_others");
        let known = plain.contains(name.as_str())
            || tls.contains(name.as_str())
            || matches!(name.as_str(), "all" | "all-tls" | "_others");
        assert!(
            !backend || known,
            "feature `{name}` compiles a backend in but no entry of REGISTRY_TYPES names it"
        );
    }
}

#[test]
fn the_cli_forwards_each_entrys_features() {
    let f = features("cli/Cargo.toml");
    let (plain, tls) = table_features();
    for feature in plain.iter().chain(&tls) {
        let enables = f
            .get(*feature)
            .unwrap_or_else(|| panic!("cli/Cargo.toml has no feature `{feature}`"));
        assert!(
            enables.contains(&format!("meshline/{feature}")),
            "cli feature `{feature}` does not forward to meshline: {enables:?}"
        );
    }
}

/// The CLI's `all-tls` (what `scripts/test.sh` builds the CLI with) turns on every
/// entry's TLS feature the facade's `all-tls` does.
#[test]
fn the_clis_all_tls_names_every_tls_feature() {
    let f = features("cli/Cargo.toml");
    for t in REGISTRY_TYPES {
        if let Some(tls_feature) = t.tls_feature.filter(|&f| f != "nacos-tls") {
            assert!(
                f["all-tls"].contains(&tls_feature.to_string()),
                "cli/Cargo.toml: `all-tls` lacks `{tls_feature}`"
            );
        }
    }
}

/// Every backend that takes registrations over the network has its end-to-end test in
/// `cli/tests/backends.rs` (register, look up, unregister on a signal), compiled with
/// its feature.
#[test]
fn the_cli_tests_register_with_every_writable_network_backend() {
    let tests = read("cli/tests/backends.rs");
    for t in REGISTRY_TYPES
        .iter()
        .filter(|t| !t.read_only && t.feature != "file")
    {
        let header = format!("#[cfg(feature = \"{}\")]\n#[test]\nfn ", t.feature);
        assert!(
            tests.contains(&header),
            "cli/tests/backends.rs has no test under `{}` for `{}`",
            t.feature,
            t.seata_name
        );
    }
}

#[test]
fn the_backends_crate_has_a_feature_for_each_of_its_entries() {
    let f = features("registry-others/Cargo.toml");
    for t in REGISTRY_TYPES
        .iter()
        .filter(|t| t.crate_name == "meshline-registry-others")
    {
        assert!(
            f.contains_key(t.feature),
            "registry-others lacks `{}`",
            t.feature
        );
    }
}

/// The rows of the first markdown table in `text` whose header starts with `first`:
/// the first two cells of each.
fn table_rows(text: &str, first: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim_start_matches("//!").trim();
        if !inside {
            inside =
                line.starts_with('|') && line.trim_start_matches('|').trim().starts_with(first);
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells[0].starts_with("---") {
            continue;
        }
        rows.push((
            cells[0].to_string(),
            cells.get(1).unwrap_or(&"").to_string(),
        ));
    }
    rows
}

/// The backticked words of a cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_table_has_a_row_per_entry() {
    let rows = table_rows(&read("README.md"), "`registry.type`");
    assert!(
        !rows.is_empty(),
        "the README's registry table was not found"
    );
    for t in REGISTRY_TYPES {
        let names: Vec<String> = std::iter::once(t.seata_name)
            .chain(t.aliases.iter().copied())
            .map(str::to_string)
            .collect();
        let row = rows
            .iter()
            .find(|(types, _)| ticked(types).first() == Some(&t.seata_name.to_string()))
            .unwrap_or_else(|| panic!("README.md: no row for `{}`", t.seata_name));
        assert_eq!(
            ticked(&row.0),
            names,
            "README.md: the names of `{}`",
            t.seata_name
        );
        assert_eq!(
            ticked(&row.1).first().map(String::as_str),
            Some(t.feature),
            "README.md: the feature of `{}`",
            t.seata_name
        );
    }
    assert_eq!(
        rows.len(),
        REGISTRY_TYPES.len(),
        "README.md: a row without an entry"
    );
}
