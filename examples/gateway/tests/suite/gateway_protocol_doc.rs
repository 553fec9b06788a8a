//! docs/gateway-protocol.md is what client developers implement from: its tables and
//! examples must say what the code does. Each table marked `<!-- table: NAME -->` is
//! parsed and compared with the gateway's constants both ways (a row the code lacks and a
//! code the table lacks both fail); the frame and token examples are decoded and checked
//! with the gateway's own codec and verifier; every limit's documented default is fed
//! back through the configuration loader and must change nothing.

use std::collections::BTreeSet;
use std::fmt::Debug;

use hmac::{Hmac, KeyInit, Mac};
use meshline_example_gateway::game_backend::modules;
use meshline_example_gateway::gateway::admission::{Refusal, TokenVerifier};
use meshline_example_gateway::gateway::kick::Kick;
use meshline_example_gateway::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use meshline_example_gateway::gateway::settings::{GatewaySettings, ModuleKind};

const DOC: &str = include_str!("../../../../docs/gateway-protocol.md");

/// The rows of the table after `<!-- table: name -->`: cells trimmed, the header and
/// the separator row left out.
fn table(name: &str) -> Vec<Vec<String>> {
    let marker = format!("<!-- table: {name} -->");
    let start = DOC
        .find(&marker)
        .unwrap_or_else(|| panic!("no {marker} in the document"));
    let rows: Vec<Vec<String>> = DOC[start + marker.len()..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    assert!(rows.len() > 2, "table {name} has no rows");
    assert!(
        rows[1].iter().all(|c| c.chars().all(|ch| ch == '-')),
        "table {name}: the second line is not a separator"
    );
    rows.into_iter().skip(2).collect()
}

/// Asserts that table `name`, each row read by `row`, holds exactly what `code` lists
/// (a row the code lacks and a code the table lacks both fail); the table's rows so read.
fn assert_table<T: Ord + Debug>(
    name: &str,
    row: impl Fn(&[String]) -> T,
    code: impl IntoIterator<Item = T>,
) -> BTreeSet<T> {
    let doc: BTreeSet<T> = table(name).iter().map(|r| row(r)).collect();
    let code: BTreeSet<T> = code.into_iter().collect();
    assert_eq!(doc, code, "table {name}");
    doc
}

/// The code block after `<!-- example: name -->`.
fn example(name: &str) -> String {
    let marker = format!("<!-- example: {name} -->");
    let start = DOC
        .find(&marker)
        .unwrap_or_else(|| panic!("no {marker} in the document"));
    let rest = &DOC[start + marker.len()..];
    let open = rest.find("```").expect("a code block") + 3;
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").expect("the block's end")].to_string()
}

fn number(cell: &str) -> u16 {
    cell.parse()
        .unwrap_or_else(|_| panic!("`{cell}` is not a number"))
}

/// `` `x` `` -> `x`.
fn code(cell: &str) -> &str {
    cell.trim_matches('`')
}

#[test]
fn the_opcode_table_is_module_0_of_the_code() {
    assert_table(
        "opcodes",
        |r| (number(&r[0]), r[1].clone()),
        op::ALL.iter().map(|(name, o)| (*o, name.to_string())),
    );
    // Each row says which way it goes.
    for r in table("opcodes") {
        assert!(
            ["client → gateway", "gateway → client", "either way"].contains(&r[2].as_str()),
            "{r:?}"
        );
    }
}

#[test]
fn the_flag_table_is_the_code_s_flags() {
    assert_table(
        "flags",
        |r| (number(&r[0]), number(&r[1]) as u8, r[2].clone()),
        protocol::FLAGS
            .iter()
            .map(|(name, v)| (v.trailing_zeros() as u16, *v, name.to_string())),
    );
}

#[test]
fn the_refusal_table_has_every_code_name_and_text() {
    assert_table(
        "refusals",
        |r| (number(&r[0]), r[1].clone(), r[2].clone()),
        Refusal::ALL
            .iter()
            .map(|r| (r.code(), r.name().to_string(), r.to_string())),
    );
}

#[test]
fn the_kick_table_has_every_code_and_name() {
    assert_table(
        "kicks",
        |r| (number(&r[0]), r[1].clone()),
        Kick::ALL.iter().map(|k| (k.code(), k.name().to_string())),
    );
}

#[test]
fn the_binding_kinds_are_the_config_s() {
    let doc = assert_table(
        "kinds",
        |r| code(&r[0]).to_string(),
        ModuleKind::ALL.iter().map(|k| k.name().to_string()),
    );
    // And the configuration takes each name.
    for kind in &doc {
        let c = meshline::Config::from_text(
            &format!(
                "gateway.secret=k\ngateway.modules.9.cluster=c\ngateway.modules.9.kind={kind}\n"
            ),
            meshline::Format::Properties,
        )
        .unwrap();
        let s = GatewaySettings::from_config(&c).unwrap();
        assert_eq!(s.modules[&9].kind.name(), kind);
    }
}

#[test]
fn every_documented_default_is_the_default() {
    let base = || "gateway.secret=k\n".to_string();
    let parse = |text: &str| {
        let c = meshline::Config::from_text(text, meshline::Format::Properties).unwrap();
        GatewaySettings::from_config(&c).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    let defaults = format!("{:?}", parse(&base()));
    let rows = table("limits");
    assert!(rows.len() >= 20, "{} limits documented", rows.len());
    for r in rows {
        let key = code(&r[0]);
        let default = &r[1];
        assert!(key.starts_with("gateway."), "{key}");
        let text = format!("{}{key}={default}\n", base());
        assert_eq!(
            format!("{:?}", parse(&text)),
            defaults,
            "{key}={default} is not the default"
        );
        // The key is read: another value changes the settings.
        let other = match default.as_str() {
            "kick-old" => "allow".to_string(),
            d if d.ends_with('s') && d[..d.len() - 1].parse::<u64>().is_ok() => {
                format!("{}s", d[..d.len() - 1].parse::<u64>().unwrap() + 1)
            }
            d if d.ends_with("KiB") || d.ends_with("MiB") => format!("{}B", 12345),
            d => format!("{}", d.parse::<u64>().unwrap() + 1),
        };
        let text = format!("{}{key}={other}\n", base());
        assert_ne!(
            format!("{:?}", parse(&text)),
            defaults,
            "{key}={other} changed nothing: is it the key the code reads?"
        );
    }
}

#[test]
fn the_example_game_modules_are_the_backend_s() {
    assert_table(
        "modules",
        |r| (number(&r[0]), r[1].clone(), r[2].clone()),
        modules::ALL
            .iter()
            .map(|(id, name, kind)| (*id, name.to_string(), kind.to_string())),
    );
}

#[test]
fn the_frame_example_decodes_to_what_it_says() {
    let hex: String = example("frame").split_whitespace().collect();
    let bytes = hex::decode(hex).unwrap();
    let f = ClientFrame::from_message(&bytes, 1024).unwrap();
    assert_eq!(
        (f.module, f.opcode, f.seq, f.flags),
        (GATEWAY_MODULE, op::AUTH, 0, protocol::RELIABLE)
    );
    assert_eq!(&f.payload[..], b"abc");
    assert_eq!(&f.to_bytes()[..], &bytes[..]);
}

#[test]
fn the_token_example_is_what_the_gateway_computes_and_accepts() {
    let text = example("token");
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no `{name}:` line"))
            .trim()
            .to_string()
    };
    let (secret, account, expiry, nonce) = (
        field("secret"),
        field("account"),
        field("expiry"),
        field("nonce"),
    );
    let input = hex::decode(field("input hex")).unwrap();
    assert_eq!(input, format!("{account}\n{expiry}\n{nonce}").into_bytes());
    assert_eq!(
        field("input"),
        format!("{account}\\n{expiry}\\n{nonce}"),
        "the escaped input line"
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(&input);
    let signature = hex::encode(mac.finalize().into_bytes());
    assert_eq!(field("signature"), signature);
    let token = field("token");
    assert_eq!(token, format!("{account}.{expiry}.{nonce}.{signature}"));
    let expiry: u64 = expiry.parse().unwrap();
    let admitted = TokenVerifier::new(secret.as_bytes().to_vec())
        .verify_at(&token, expiry - 1)
        .unwrap();
    assert_eq!(admitted.account, account);
    assert_eq!(
        TokenVerifier::new(secret.into_bytes()).verify_at(&token, expiry),
        Err(Refusal::Expired),
        "refused from its expiry second on"
    );
}
