//! Seata-Java compatibility of the ConsistentHash ring (docs/seata-compat.md §3.1):
//! a Rust client must send an XID to the TC a Java client would pick.

use meshline_instance::Instance;
use meshline_loadbalance::hash::java_hash;
use meshline_loadbalance::{
    Balancer, ConsistentHashLoadBalance, LoadBalanceOptions, PickRequest, by_name, by_name_with,
};
use std::sync::Arc;

fn tcs(ports: &[u16]) -> Vec<Instance> {
    ports
        .iter()
        .map(|p| Instance::parse(&format!("127.0.0.1:{p}")).unwrap())
        .collect()
}

/// Keys that JDK 17 (Seata's `ConsistentHashLoadBalance`, 10 virtual nodes, ring of
/// 127.0.0.1:8091/8092/8093) sends to `/127.0.0.1:8093`.
const JAVA_VECTORS: [&str; 3] = [
    "127.0.0.1:8091:123456",
    "192.168.1.10:8091:2612341069705662465",
    "XID",
];

#[test]
fn node_hash_vector() {
    assert_eq!(java_hash(b"/127.0.0.1:80910"), -3231723763894495209);
    assert_eq!(
        Instance::parse("127.0.0.1:8091")
            .unwrap()
            .java_inet_socket_string()
            + "0",
        "/127.0.0.1:80910"
    );
}

#[test]
fn xids_land_where_java_sends_them() {
    for lb in [
        Arc::new(ConsistentHashLoadBalance::java(10)) as Arc<dyn meshline_loadbalance::LoadBalance>,
        by_name("ConsistentHashJava").unwrap(),
        by_name_with(
            "ConsistentHashLoadBalance",
            &LoadBalanceOptions {
                consistent_hash: meshline_loadbalance::HashMode::java(),
                ..LoadBalanceOptions::default()
            },
        )
        .unwrap(),
    ] {
        // Java's ring does not depend on list order (barring 64-bit collisions).
        for order in [[8091, 8092, 8093], [8093, 8091, 8092], [8092, 8093, 8091]] {
            let balancer = Balancer::new(lb.clone());
            balancer.update(&tcs(&order));
            for xid in JAVA_VECTORS {
                let picked = balancer.pick(&PickRequest::xid(xid)).unwrap();
                assert_eq!(
                    picked.endpoint().instance().java_inet_socket_string(),
                    "/127.0.0.1:8093",
                    "{xid} with order {order:?}"
                );
                // The same with the hash prepared once (per transaction).
                let prepared = PickRequest::xid(xid)
                    .with_java_hash(meshline_loadbalance::hash::java_hash(xid.as_bytes()));
                let picked = balancer.pick(&prepared).unwrap();
                assert_eq!(
                    picked.endpoint().instance().java_inet_socket_string(),
                    "/127.0.0.1:8093",
                    "{xid} prepared, with order {order:?}"
                );
            }
        }
    }
}

#[test]
fn java_ring_is_sticky_and_walks_on_exclusion() {
    let balancer = Balancer::new(Arc::new(ConsistentHashLoadBalance::java(10)));
    balancer.update(&tcs(&[8091, 8092, 8093]));
    let key = Instance::parse("127.0.0.1:8093").unwrap().key().clone();
    for xid in JAVA_VECTORS {
        let again = balancer.pick(&PickRequest::xid(xid)).unwrap();
        assert_eq!(again.endpoint().instance().port(), 8093);
        let excluded = [key.clone()];
        let other = balancer
            .pick(&PickRequest::xid(xid).excluding(&excluded))
            .unwrap();
        assert_ne!(other.endpoint().instance().port(), 8093);
    }
    // With 8093 gone, Java's ring sends these keys to the next point: the same
    // endpoint the exclusion walk chose.
    let gone = Balancer::new(Arc::new(ConsistentHashLoadBalance::java(10)));
    gone.update(&tcs(&[8091, 8092]));
    for xid in JAVA_VECTORS {
        let excluded = [key.clone()];
        let walked = balancer
            .pick(&PickRequest::xid(xid).excluding(&excluded))
            .unwrap();
        let rebuilt = gone.pick(&PickRequest::xid(xid)).unwrap();
        assert_eq!(walked.endpoint().key(), rebuilt.endpoint().key(), "{xid}");
    }
}

/// A prepared hash routes exactly like hashing the key on every pick, on larger rings
/// and for any key, and is what the ring actually uses (a wrong one routes elsewhere).
#[test]
fn prepared_java_hash_routes_like_hashing_each_pick() {
    let ports: Vec<u16> = (8000..8100).collect();
    let balancer = Balancer::new(by_name("ConsistentHashJava").unwrap());
    balancer.update(&tcs(&ports));
    let mut moved = 0;
    for k in 0..2000u64 {
        let xid = format!(
            "10.0.{}.{}:8091:{}",
            k % 7,
            k % 251,
            2_612_341_069_705_662_465u64 + k
        );
        let h = meshline_loadbalance::hash::java_hash(xid.as_bytes());
        let plain = balancer.pick(&PickRequest::xid(&xid)).unwrap();
        let prepared = balancer
            .pick(&PickRequest::xid(&xid).with_java_hash(h))
            .unwrap();
        assert_eq!(plain.endpoint().key(), prepared.endpoint().key(), "{xid}");
        let other = balancer
            .pick(&PickRequest::xid(&xid).with_java_hash(h.wrapping_add(i64::MAX / 3)))
            .unwrap();
        moved += usize::from(other.endpoint().key() != plain.endpoint().key());
    }
    assert!(
        moved > 1500,
        "a different prepared hash moved only {moved} of 2000"
    );
}

/// The port each of `keys` is sent to by `lb` on the ring 127.0.0.1:8091..8093.
fn ports_for(lb: Arc<dyn meshline_loadbalance::LoadBalance>, keys: &[String]) -> Vec<u16> {
    let balancer = Balancer::new(lb);
    balancer.update(&tcs(&[8091, 8092, 8093]));
    keys.iter()
        .map(|k| {
            balancer
                .pick(&PickRequest::xid(k))
                .unwrap()
                .endpoint()
                .instance()
                .port()
        })
        .collect()
}

/// Seata's name read from Seata's keys (`client.loadBalance.type=ConsistentHashLoadBalance`,
/// `client.loadBalance.virtualNodes`) is Java's ring: the JDK-17 vectors route as Java
/// routes them, and `virtualNodes` sizes the ring.
#[test]
fn seata_config_consistent_hash_is_the_java_ring_honouring_virtual_nodes() {
    use meshline_config::balancer::LoadBalanceConfig;
    use meshline_config::{Config, Format};
    let load = |vnodes: u32| {
        let text = format!(
            "client.loadBalance.type=ConsistentHashLoadBalance\n\
             client.loadBalance.virtualNodes={vnodes}\n"
        );
        let c = Config::from_text(&text, Format::Properties).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        {
            let keys = LoadBalanceConfig::from_config(&c).unwrap();
            meshline_loadbalance::from_seata_keys(&keys.kind, keys.virtual_nodes).unwrap()
        }
    };
    // The configuration's default for the key is the ring's own default.
    assert_eq!(
        LoadBalanceConfig::default().virtual_nodes,
        meshline_loadbalance::SEATA_DEFAULT_VIRTUAL_NODES
    );
    let vectors: Vec<String> = JAVA_VECTORS.iter().map(|s| s.to_string()).collect();
    assert_eq!(ports_for(load(10), &vectors), vec![8093, 8093, 8093]);
    // The same name in Seata's HOCON file.conf and Spring YAML shapes.
    for (text, format) in [
        (
            "client { loadBalance { type = \"ConsistentHashLoadBalance\"\n virtualNodes = 10 } }",
            Format::Hocon,
        ),
        (
            "seata:\n  client:\n    load-balance:\n      type: ConsistentHashLoadBalance\n      virtual-nodes: 10\n",
            Format::Yaml,
        ),
    ] {
        let c = Config::from_text(text, format).unwrap();
        let lb = {
            let keys = LoadBalanceConfig::from_config(&c).unwrap();
            meshline_loadbalance::from_seata_keys(&keys.kind, keys.virtual_nodes).unwrap()
        };
        assert_eq!(
            ports_for(lb, &vectors),
            vec![8093, 8093, 8093],
            "{format:?}"
        );
    }
    // virtualNodes is honoured: 3 points per server is Java's 3-point ring, a different
    // ring from the 10-point one.
    let keys: Vec<String> = (0..300)
        .map(|i| format!("10.0.0.1:8091:{}", 2_612_341_069_705_662_465u64 + i))
        .collect();
    let three = ports_for(load(3), &keys);
    assert_eq!(
        three,
        ports_for(Arc::new(ConsistentHashLoadBalance::java(3)), &keys)
    );
    let ten = ports_for(load(10), &keys);
    assert_eq!(
        ten,
        ports_for(Arc::new(ConsistentHashLoadBalance::java(10)), &keys)
    );
    let moved = three.iter().zip(&ten).filter(|(a, b)| a != b).count();
    assert!(moved > 0, "virtualNodes 3 and 10 gave the same ring");
}

/// meshline's own names keep the fast (XXH3) ring, which is not Java's.
#[test]
fn meshline_consistent_hash_names_keep_the_fast_ring() {
    let keys: Vec<String> = (0..300)
        .map(|i| format!("10.0.0.1:8091:{}", 2_612_341_069_705_662_465u64 + i))
        .collect();
    let java = ports_for(by_name("ConsistentHashLoadBalance").unwrap(), &keys);
    let fast = ports_for(Arc::new(ConsistentHashLoadBalance::new()), &keys);
    assert_ne!(java, fast);
    for name in ["ConsistentHash", "consistent-hash", "ch", "ketama"] {
        assert_eq!(ports_for(by_name(name).unwrap(), &keys), fast, "{name}");
    }
    for name in ["ConsistentHashJava", "java-consistent-hash", "ch-java"] {
        assert_eq!(ports_for(by_name(name).unwrap(), &keys), java, "{name}");
    }
}
