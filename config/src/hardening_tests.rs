//! Secrets in warnings, odd environments and durations (items 2, 5, 6).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Instant;

use proptest::prelude::*;

use super::loader::{env_entries, utf8_vars};
use super::*;

const SECRET: &str = "Zq9-very-secret-Pw";

#[test]
fn unknown_keys_are_reported_by_name_never_by_value() {
    for text in [
        format!("registry.pasword={SECRET}\n"),
        format!("pasword={SECRET}\n"),
        format!("client.pasword={SECRET}\n"),
    ] {
        let cfg = ConfigLoader::new()
            .text(text.clone(), Format::Properties)
            .load()
            .unwrap();
        assert_eq!(cfg.warnings.len(), 1, "{text}: {:?}", cfg.warnings);
        assert!(cfg.warnings[0].contains("pasword"), "{:?}", cfg.warnings);
        assert!(
            !cfg.warnings[0].contains(SECRET),
            "the value leaked: {:?}",
            cfg.warnings
        );
    }
}

#[test]
fn non_utf8_variables_are_skipped_not_a_panic() {
    let vars = vec![
        (
            OsString::from("MESHLINE_REGISTRY__TYPE"),
            OsString::from("etcd3"),
        ),
        (
            OsString::from_vec(b"MESHLINE_BAD_\xff".to_vec()),
            OsString::from("x"),
        ),
        (
            OsString::from("MESHLINE_TX_SERVICE_GROUP"),
            OsString::from_vec(b"\xfe\xff".to_vec()),
        ),
    ];
    let good = utf8_vars(vars);
    assert_eq!(
        good,
        vec![("MESHLINE_REGISTRY__TYPE".to_string(), "etcd3".to_string())]
    );
}

#[test]
fn durations_beyond_the_cap_are_refused_not_an_overflow() {
    for t in ["18446744073709551615", "600000y", "18446744073709551615ms"] {
        let e = parse_duration(t).expect_err(t);
        assert!(e.contains("365 days") || e.contains("expected"), "{t}: {e}");
    }
    assert!(parse_duration_with_unit("1000y").is_err());
    assert_eq!(parse_duration("365d").unwrap(), MAX_DURATION);
    // The largest accepted value still fits a deadline.
    let d = parse_duration("365d").unwrap();
    assert!(Instant::now().checked_add(d + d).is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text: an error or a duration that can be added to a deadline (twice, as a
    /// session timeout plus a connect timeout).
    #[test]
    fn any_duration_text_is_an_error_or_a_usable_duration(t in "\\PC{0,24}", n in any::<u64>(), unit in prop::sample::select(vec!["", "ms", "s", "m", "h", "d", "y", "ns"])) {
        for text in [t.clone(), format!("{n}{unit}")] {
            for d in [parse_duration(&text), parse_duration_with_unit(&text)].into_iter().flatten() {
                prop_assert!(d <= MAX_DURATION);
                prop_assert!(Instant::now().checked_add(d.saturating_add(d)).is_some());
            }
        }
    }

    /// Any environment entry: ours become non-empty key paths, others are dropped.
    #[test]
    fn any_env_entry_is_routed_or_dropped(k in "(MESHLINE_)?[A-Za-z_]{0,12}(__[A-Za-z_]{0,8}){0,3}", v in "\\PC{0,16}", raw in prop::collection::vec(any::<u8>(), 0..24)) {
        let vars = vec![
            (OsString::from(k.clone()), OsString::from(v.clone())),
            (OsString::from_vec(raw.clone()), OsString::from_vec(raw)),
        ];
        let entries = env_entries(utf8_vars(vars));
        for (path, _) in &entries {
            prop_assert!(!path.is_empty());
        }
        // Applying them never panics (errors are fine: values are random).
        let mut cfg = Config::default();
        let _ = apply_all(&mut cfg, &mut Default::default(), entries, "environment");
    }
}
