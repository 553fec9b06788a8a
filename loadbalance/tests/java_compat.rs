//! Seata-Java compatibility of the ConsistentHash ring (reference/seata-compat.md §3):
//! a Rust client must send an XID to the TC a Java client would pick.

use meshline_loadbalance::hash::java_hash;
use meshline_loadbalance::{
    Balancer, ConsistentHashLoadBalance, LoadBalanceOptions, PickRequest, by_name, by_name_with,
};
use meshline_registry_core::Instance;
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
