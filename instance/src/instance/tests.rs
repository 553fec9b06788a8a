use super::*;

#[test]
fn from_a_socket_address() {
    let v4: std::net::SocketAddr = "10.0.0.1:8091".parse().unwrap();
    assert_eq!(Instance::try_from(v4).unwrap().to_string(), "10.0.0.1:8091");
    let v6: std::net::SocketAddr = "[::1]:8091".parse().unwrap();
    let i = Instance::try_from(v6).unwrap();
    assert_eq!(i.host(), "::1");
    assert_eq!(i.port(), 8091);
    let zero: std::net::SocketAddr = "10.0.0.1:0".parse().unwrap();
    assert!(Instance::try_from(zero).is_err());
}

#[test]
fn ipv4() {
    let i = Instance::parse("127.0.0.1:8091").unwrap();
    assert_eq!(i.host(), "127.0.0.1");
    assert_eq!(i.port(), 8091);
    assert_eq!(i.to_string(), "127.0.0.1:8091");
    assert_eq!(i.to_java_string(), "127.0.0.1:8091");
    assert_eq!(i.java_inet_socket_string(), "/127.0.0.1:8091");
    assert_eq!(i.socket_addr(), Some("127.0.0.1:8091".parse().unwrap()));
}

#[test]
fn seata_ipv6_vectors() {
    // seata-compat.md 1.3: etcd key/value with zero-padded unbracketed IPv6.
    let a = Instance::parse("2000:0000:0000:0000:0001:2345:6789:abcd:8091").unwrap();
    assert_eq!(a.port(), 8091);
    assert_eq!(a.ip(), Some("2000::1:2345:6789:abcd".parse().unwrap()));
    // Java's form, and the bracketed form, are the same instance.
    let b = Instance::parse("2000:0:0:0:1:2345:6789:abcd:8091").unwrap();
    let c = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
    assert_eq!(a.key(), b.key());
    assert_eq!(a.key(), c.key());
    assert_eq!(a.to_java_string(), "2000:0:0:0:1:2345:6789:abcd:8091");
    assert_eq!(a.to_string(), "[2000::1:2345:6789:abcd]:8091");
    assert_eq!(
        Instance::parse("2000:0:0:0:1:2345:6789:abcd:8092")
            .unwrap()
            .java_inet_socket_string(),
        "/[2000:0:0:0:1:2345:6789:abcd]:8092"
    );
    // Scope ids are dropped as Java does.
    let s = Instance::parse("[fe80::1%eth0]:9000").unwrap();
    assert_eq!(s.host(), "fe80::1");
    // Round trip through Display.
    assert_eq!(Instance::parse(&a.to_string()).unwrap().key(), a.key());
}

#[test]
fn dns_names() {
    let i = Instance::parse("TC-1.Example.com:8091").unwrap();
    assert_eq!(i.host(), "tc-1.example.com");
    assert_eq!(i.ip(), None);
    assert_eq!(
        i.java_inet_socket_string(),
        "tc-1.example.com/<unresolved>:8091"
    );
    assert!(Instance::parse("localhost:1").is_ok());
}

#[test]
fn bad_addresses_are_errors_naming_the_text() {
    for bad in [
        "",
        "   ",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:80x",
        ":8091",
        "[::1:8091",
        "[::1]8091",
        "[]:80",
        "1:2:3:8091",
        "999.1.1.1:80",
        "bad host:80",
        "-bad.example:80",
        "a..b:80",
        "ho$t:80",
        "[zz::1]:80",
    ] {
        let err = Instance::parse(bad).expect_err(bad);
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("`{bad}`")) || bad.trim().is_empty(),
            "{msg}"
        );
    }
}

/// IPv6 addresses with runs of zero groups (most groups are 0), so their text has
/// the `::`-compressed forms a uniform `u128` almost never gives.
fn ipv6_with_zero_runs() -> impl proptest::strategy::Strategy<Value = Ipv6Addr> {
    use proptest::prelude::*;
    proptest::collection::vec(prop_oneof![3 => Just(0u16), 2 => any::<u16>()], 8)
        .prop_map(|g| Ipv6Addr::new(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]))
}

/// Any IPv4 address, any IPv6 address, or an IPv6 address with zero runs.
fn any_ip() -> impl proptest::strategy::Strategy<Value = IpAddr> {
    use proptest::prelude::*;
    prop_oneof![
        any::<std::net::Ipv4Addr>().prop_map(IpAddr::V4),
        any::<Ipv6Addr>().prop_map(IpAddr::V6),
        ipv6_with_zero_runs().prop_map(IpAddr::V6),
    ]
}

#[test]
fn the_ipv6_generator_makes_compressed_forms() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let texts: Vec<String> = (0..200)
        .map(|_| {
            ipv6_with_zero_runs()
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string()
        })
        .collect();
    let compressed = texts.iter().filter(|t| t.contains("::")).count();
    assert!(
        compressed >= 100,
        "{compressed} of 200 have `::`: {texts:?}"
    );
    assert!(texts.iter().any(|t| t.starts_with("::")), "{texts:?}");
    assert!(texts.iter().any(|t| t.ends_with("::")), "{texts:?}");
    assert!(
        texts.iter().any(|t| !t.contains("::")),
        "no uncompressed form: {texts:?}"
    );
}

proptest::proptest! {
    /// Every spelling of an IPv6 address with zero runs (compressed, Java's full
    /// form, zero-padded, bracketed or not) is one identity, shown compressed.
    #[test]
    fn compressed_ipv6_spellings_are_one_instance(ip in ipv6_with_zero_runs(), port in 1u16..) {
        if ip.to_ipv4_mapped().is_none() {
            let g = ip.segments();
            let java = g.iter().map(|x| format!("{x:x}")).collect::<Vec<_>>().join(":");
            let padded = g.iter().map(|x| format!("{x:04x}")).collect::<Vec<_>>().join(":");
            let want = Instance::parse(&format!("[{ip}]:{port}")).unwrap();
            proptest::prop_assert_eq!(want.ip(), Some(IpAddr::V6(ip)));
            proptest::prop_assert_eq!(want.to_string(), format!("[{ip}]:{port}"));
            proptest::prop_assert_eq!(want.to_java_string(), format!("{java}:{port}"));
            for text in [format!("{java}:{port}"), format!("{padded}:{port}"), format!("[{java}]:{port}")] {
                let i = Instance::parse(&text).unwrap();
                proptest::prop_assert_eq!(i.key(), want.key(), "{}", text);
            }
        }
    }

    #[test]
    fn parse_never_panics(s in "\\PC{0,64}") {
        let _ = Instance::parse(&s);
    }

    #[test]
    fn socket_addrs_round_trip(ip in any_ip(), port in 1u16..) {
        let sa = SocketAddr::new(ip, port);
        let i = Instance::parse(&sa.to_string()).unwrap();
        let canon = match ip { IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip), _ => ip };
        proptest::prop_assert_eq!(i.ip(), Some(canon));
        let j = Instance::parse(&i.to_java_string()).unwrap();
        proptest::prop_assert_eq!(i.key(), j.key());
    }
}
