use super::*;
use crate::Endpoint;
use crate::algorithms::ring::{Ring, point_counts};
use crate::hash::mix64;
use meshline_instance::Instance;
use proptest::prelude::*;

fn instance(i: u32, weight: u32) -> Instance {
    Instance::parse(&format!(
        "10.{}.{}.{}:{}",
        i >> 16 & 255,
        i >> 8 & 255,
        i & 255,
        8000 + i % 7
    ))
    .unwrap()
    .with_weight(weight)
}

fn members(list: &[Instance]) -> Members {
    Members::new(&list.iter().cloned().map(Endpoint::new).collect::<Vec<_>>())
}

fn fresh(m: &Members, per_weight: u32) -> PagedRing {
    let (counts, _) = point_counts(m, per_weight);
    PagedRing::build(m, counts)
}

/// The flat ring's points as `(hash, endpoint)`, in ring order.
fn flat_points(m: &Members, per_weight: u32) -> (Ring, Vec<(u32, usize)>) {
    let ring = Ring::build(m, per_weight);
    let points = (0..ring.len())
        .map(|pos| (ring.hash_at(pos), ring.node_at(pos)))
        .collect();
    (ring, points)
}

#[test]
fn identity_hash_is_the_hash_of_the_display_text() {
    let mut text = String::new();
    for a in [
        "10.0.0.1:1",
        "10.0.0.1:65535",
        "[2000::1]:8091",
        "tc-1.example.com:80",
        "1.2.3.4:100",
    ] {
        let key = Instance::parse(a).unwrap().key().clone();
        assert_eq!(
            identity_hash(&key, &mut text),
            crate::hash::key_hash(key.to_string().as_bytes()),
            "{a}"
        );
    }
}

#[test]
fn a_paged_ring_is_the_flat_ring() {
    for (n, weighted) in [
        (1u32, false),
        (3, true),
        (40, false),
        (250, true),
        (900, false),
    ] {
        let list: Vec<Instance> = (0..n)
            .map(|i| instance(i * 7919, if weighted { 1 + i % 4 } else { 1 }))
            .collect();
        let m = members(&list);
        let paged = fresh(&m, 160);
        let (flat, points) = flat_points(&m, 160);
        assert_eq!(paged.points(), points, "n={n}");
        for k in 0..20_000u64 {
            let h = mix64(k);
            assert_eq!(paged.node(h), flat.node(h), "n={n} key {k}");
            let skip = |i: usize| i % 3 != (k % 3) as usize;
            assert_eq!(paged.walk(h, skip), flat.walk(h, skip), "n={n} key {k}");
        }
        for h in [0, u64::MAX, u64::MAX << 32, 1 << 63] {
            assert_eq!(paged.node(h), flat.node(h));
        }
    }
}

#[test]
fn equal_hashes_are_in_identity_order_as_on_the_flat_ring() {
    // Endpoints given one base collide on every point.
    let list: Vec<Instance> = (0..6).map(|i| instance(9 - i, 1)).collect();
    let m = members(&list);
    let bases = vec![7, 7, 7, 9, 9, 11];
    let counts = vec![300; 6];
    let paged = PagedRing::with_bases(&m, bases.clone(), counts.clone());
    let flat = Ring::from_bases(&m, &bases, &counts);
    let flat_points: Vec<(u32, usize)> = (0..flat.len())
        .map(|p| (flat.hash_at(p), flat.node_at(p)))
        .collect();
    assert_eq!(paged.points(), flat_points);
}

/// A ring built in two halves on two threads (what a large ring gets on a machine with
/// two cores) is still the flat ring, point for point, equal hashes written by both
/// halves included.
#[test]
fn a_ring_built_in_halves_is_the_flat_ring() {
    for n in [1u32, 2, 250] {
        let list: Vec<Instance> = (0..n).map(|i| instance(i * 7919, 1 + i % 3)).collect();
        let m = members(&list);
        let (counts, _) = point_counts(&m, 160);
        let paged = PagedRing::build_in(&m, None, counts, true);
        let (flat, points) = flat_points(&m, 160);
        assert_eq!(paged.points(), points, "n={n}");
        for k in 0..20_000u64 {
            let h = mix64(k);
            assert_eq!(paged.node(h), flat.node(h), "n={n} key {k}");
        }
    }
    // Endpoints given one base collide on every point; the first and the last are
    // in different halves.
    let list: Vec<Instance> = (0..4).map(|i| instance(9 - i, 1)).collect();
    let m = members(&list);
    let bases = vec![7, 9, 9, 7];
    let counts = vec![300; 4];
    let paged = PagedRing::build_in(&m, Some(bases.clone()), counts.clone(), true);
    let flat = Ring::from_bases(&m, &bases, &counts);
    let flat_points: Vec<(u32, usize)> = (0..flat.len())
        .map(|p| (flat.hash_at(p), flat.node_at(p)))
        .collect();
    assert_eq!(paged.points(), flat_points);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A ring updated for endpoints joining, leaving and changing weight is, point
    /// for point, the ring built afresh for the new membership (and so the flat
    /// ring): the same keys go to the same endpoints.
    #[test]
    fn an_updated_ring_is_the_ring_built_afresh(
        n in 20u32..300,
        seed in any::<u64>(),
        steps in 1usize..4,
    ) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let weighted = seed % 2 == 0;
        let mut ids: Vec<(u32, u32)> = (0..n)
            .map(|_| (rng.u32(..1 << 20), if weighted { 2 } else { 1 }))
            .collect();
        let sorted = |ids: &[(u32, u32)]| {
            let mut list: Vec<Instance> = ids.iter().map(|&(i, w)| instance(i, w)).collect();
            list.sort_by(|a, b| a.key().cmp(b.key()));
            list.dedup_by(|a, b| a.key() == b.key());
            list
        };
        let mut list = sorted(&ids);
        let mut m = members(&list);
        let mut ring = fresh(&m, 160);
        let mut updated = 0;
        for _ in 0..steps {
            // A few leave, a few join, one changes weight (2 -> 4 keeps the gcd).
            for _ in 0..rng.usize(0..4) {
                let k = rng.usize(..ids.len());
                ids.swap_remove(k);
            }
            for _ in 0..rng.usize(0..4) {
                ids.push((rng.u32(..1 << 20), if weighted { 2 * rng.u32(1..3) } else { 1 }));
            }
            if weighted {
                let k = rng.usize(..ids.len());
                ids[k].1 = 4;
            }
            let next = sorted(&ids);
            let from: Vec<Option<usize>> = next
                .iter()
                .map(|inst| list.iter().position(|old| old == inst))
                .collect();
            let left: Vec<usize> = (0..list.len())
                .filter(|j| !from.contains(&Some(*j)))
                .collect();
            let next_m = members(&next);
            let (counts, _) = point_counts(&next_m, 160);
            let again = fresh(&next_m, 160);
            if let Some(u) = ring.update(&next_m, |i| from[i], left.iter().copied(), &counts) {
                updated += 1;
                prop_assert_eq!(u.points(), again.points());
                prop_assert_eq!(u.points(), flat_points(&next_m, 160).1);
                for k in 0..2000u64 {
                    prop_assert_eq!(u.node(mix64(k ^ seed)), again.node(mix64(k ^ seed)));
                }
                ring = u;
            } else {
                ring = again;
            }
            list = next;
            m = next_m;
        }
        let _ = &m;
        // Small changes at equal gcd are always absorbed.
        prop_assert!(updated > 0 || weighted);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// One page sorted by `sort_pages` is the page sorted plainly, equal hashes in
    /// identity order, whatever the duplicates: hashes drawn from a few values, some
    /// within one bucket of the counting sort, put three or more points in a bucket,
    /// out of order, and ties in every place the insertion pass can make them; short
    /// pages have single ties (one missed tie leaves the page unscanned).
    #[test]
    fn a_sorted_page_is_the_plain_sort(
        len in prop_oneof![0usize..10, 0usize..900],
        (spread, step) in prop_oneof![
            Just((4u32, 1u32 << 18)),
            Just((8, 1)),
            Just((64, 37)),
            Just((300, 3000)),
            Just((1 << 20, 1)),
        ],
        seed in any::<u64>(),
    ) {
        let list: Vec<Instance> = (0..16).map(|i| instance(15 - i, 1)).collect();
        let m = members(&list);
        let index_of: Vec<u32> = (0..16).collect();
        let mut rng = fastrand::Rng::with_seed(seed);
        // A page whose own bits are the top 12: hashes below them vary.
        let lut_shift = 20 - LUT_BITS;
        let page: Vec<u64> = (0..len)
            .map(|_| {
                let h = (7u32 << 20) | (rng.u32(..spread) * step);
                u64::from(h) << 32 | rng.u64(..16)
            })
            .collect();
        let mut sorted = page.clone();
        let mut lut = vec![0u32; LUT_MASK + 2];
        sort_pages(&mut sorted, &mut lut, lut_shift, &m, &index_of, &mut Scratch::default());
        let mut want = page;
        want.sort_unstable();
        order_ties(&mut want, &m, &index_of);
        prop_assert_eq!(sorted, want);
    }
}
