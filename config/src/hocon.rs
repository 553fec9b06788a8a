//! Seata 1.x's HOCON files (`registry.conf`, `file.conf`) as flat `(path, value)`
//! entries.
//!
//! Seata reads them with Typesafe Config (`config/seata-config-core/.../FileConfiguration.java`,
//! `file/SimpleFileConfig.java`): `ConfigFactory.load(parseFileAnySyntax(file))`, so
//! the whole HOCON language applies: `key = value` and `key { }`, dotted path keys
//! (`vgroupMapping.default_tx_group = "default"`), quoted keys, `#` and `//` comments,
//! unquoted and multi-line (`"""`) strings, `include` relative to the file, and `${...}`
//! substitutions, which may name the process environment. The parsing is done by the
//! `hocon-parser` crate (Apache-2.0, a Lightbend-spec parser tested against the spec's
//! conformance fixtures, bounded nesting depth, only `indexmap` as a dependency).
//!
//! A path of nested objects becomes the entry's path segments; a key written quoted
//! with dots in it (`"a.b" = 1`) stays one segment, which the router joins back with
//! `.` where Seata takes the rest of the key as a name (group and cluster names). An
//! array of scalars becomes one comma-separated value, as in the other formats.

use std::path::Path;

use hocon::{HoconValue, ParseOptions, ScalarType};

use super::keys::Entry;

/// Parses HOCON `text`; relative `include`s are resolved against `base_dir` (the
/// folder of the file the text came from) when given.
pub(super) fn parse(text: &str, base_dir: Option<&Path>) -> Result<Vec<Entry>, String> {
    let mut opts = ParseOptions::defaults();
    if let Some(dir) = base_dir {
        opts = opts.with_base_dir(dir.to_path_buf());
    }
    let parsed =
        hocon::parse_string_with_options(text, opts).map_err(|e| format!("bad HOCON: {e}"))?;
    let mut out = Vec::new();
    let mut path = Vec::new();
    for key in parsed.keys() {
        if let Some(value) = parsed.get(&quote(key)) {
            path.push(key.to_string());
            flatten(&mut path, value, &mut out);
            path.pop();
        }
    }
    out.sort();
    Ok(out)
}

/// A top-level key as a one-segment HOCON path expression (`Config::get` takes paths).
fn quote(key: &str) -> String {
    let mut q = String::with_capacity(key.len() + 2);
    q.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

fn flatten(path: &mut Vec<String>, value: &HoconValue, out: &mut Vec<Entry>) {
    match value {
        HoconValue::Object(fields) => {
            for (k, child) in fields {
                path.push(k.clone());
                flatten(path, child, out);
                path.pop();
            }
        }
        HoconValue::Array(items) => {
            let joined = items
                .iter()
                .filter_map(|i| match i {
                    HoconValue::Scalar(s) => Some(scalar(s)),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(",");
            out.push((path.clone(), joined));
        }
        HoconValue::Scalar(s) => out.push((path.clone(), scalar(s))),
        // Not produced by a resolved parse (the fused parse resolves or fails).
        _ => {}
    }
}

fn scalar(s: &hocon::ScalarValue) -> String {
    match s.value_type {
        ScalarType::Null => String::new(),
        _ => s.raw.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn get<'a>(entries: &'a [Entry], key: &[&str]) -> Option<&'a str> {
        entries
            .iter()
            .find(|(p, _)| p.iter().map(String::as_str).eq(key.iter().copied()))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn seata_syntax() {
        let text = r#"
# comment
// comment too
registry {
  type = "nacos"
  nacos { serverAddr = "127.0.0.1:8848", group : SEATA_GROUP }
}
service {
  vgroupMapping.my_group = "prod"   # trailing comment
  "vgroupMapping.a.b" = x
  prod.grouplist = "10.0.0.1:8091"
}
transport.rpcRmRequestTimeout = 2000
transport.rpcRmRequestTimeout = 15000
base = "10.0.0"
client.note = """two
lines"""
client.list = [a, b]
client.sub = ${base}".9:8091"
client.empty = null
"#;
        let e = parse(text, None).unwrap();
        assert_eq!(get(&e, &["registry", "type"]), Some("nacos"));
        assert_eq!(
            get(&e, &["registry", "nacos", "group"]),
            Some("SEATA_GROUP")
        );
        assert_eq!(
            get(&e, &["service", "vgroupMapping", "my_group"]),
            Some("prod")
        );
        assert_eq!(get(&e, &["service", "vgroupMapping.a.b"]), Some("x"));
        assert_eq!(
            get(&e, &["service", "prod", "grouplist"]),
            Some("10.0.0.1:8091")
        );
        assert_eq!(
            get(&e, &["transport", "rpcRmRequestTimeout"]),
            Some("15000")
        );
        assert_eq!(get(&e, &["client", "note"]), Some("two\nlines"));
        assert_eq!(get(&e, &["client", "list"]), Some("a,b"));
        assert_eq!(get(&e, &["client", "sub"]), Some("10.0.0.9:8091"));
        assert_eq!(get(&e, &["client", "empty"]), Some(""));
    }

    #[test]
    fn includes_are_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("part.conf"),
            "service.x.grouplist = \"1.2.3.4:1\"\n",
        )
        .unwrap();
        let e = parse(
            "include \"part.conf\"\nregistry.type = file\n",
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(get(&e, &["service", "x", "grouplist"]), Some("1.2.3.4:1"));
        assert_eq!(get(&e, &["registry", "type"]), Some("file"));
    }

    #[test]
    fn errors_are_messages() {
        for bad in ["registry {", "a = ${missing}", "[1, 2]", "a = \"open"] {
            let err = parse(bad, None).expect_err(bad);
            assert!(err.starts_with("bad HOCON"), "{bad}: {err}");
        }
    }

    proptest! {
        /// Arbitrary text never panics the HOCON reader: it is entries or an error.
        #[test]
        fn never_panics(text in "\\PC{0,200}") {
            let _ = parse(&text, None);
        }

        /// Text made of HOCON's own punctuation, which reaches deeper parser paths.
        #[test]
        fn never_panics_on_hocon_tokens(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("{"), Just("}"), Just("["), Just("]"), Just("="), Just(":"),
                    Just(","), Just("\n"), Just("a"), Just("a.b"), Just("\"q\""),
                    Just("${a}"), Just("${?b}"), Just("+="), Just("include"), Just("#"),
                    Just("//"), Just("\"\"\""), Just("1"), Just("."), Just(" "),
                ],
                0..60,
            )
        ) {
            let _ = parse(&parts.concat(), None);
        }
    }
}
