//! The pick path allocates nothing: a counting global allocator watches every
//! algorithm (and the whole `Balancer::pick` path) over many picks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use meshline_loadbalance::{Balancer, Edit, PickRequest, by_name};

mod common;
use common::{ALGORITHMS, instances};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn picks_do_not_allocate() {
    // The counter itself works, so that the zero below can fail: one allocation
    // while counting is seen exactly once, a growth (realloc) once more, and nothing
    // is counted while counting is off.
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let boxed = std::hint::black_box(Box::new(7u64));
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed) - before,
        1,
        "a Box is one allocation"
    );
    let mut grown: Vec<u64> = std::hint::black_box(Vec::with_capacity(1));
    grown.extend([1, 2, 3, 4, 5]);
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed) - before,
        3,
        "and a Vec's growth one more"
    );
    COUNTING.with(|c| c.set(false));
    let idle = ALLOCATIONS.load(Ordering::Relaxed);
    let unseen = std::hint::black_box(Box::new(8u64));
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        idle,
        "counted while counting was off"
    );
    drop((boxed, grown, unseen));

    let xids: Vec<String> = (0..64)
        .map(|i| format!("10.0.0.{}:8091:{}", i % 100, 1000 + i))
        .collect();
    let keys: Vec<Vec<u8>> = (0..64)
        .map(|i| format!("account-{i}").into_bytes())
        .collect();
    let excluded_idx = [1usize, 2, 3];
    let excluded_keys = [instances(100, false)[5].key().clone()];
    for &name in ALGORITHMS {
        for weighted in [false, true] {
            let balancer = Balancer::new(by_name(name).unwrap());
            balancer.update(&instances(100, weighted));
            // The same membership carrying payloads (a client's connections): its pick
            // hands back the payload without allocating either.
            let carrying: Balancer<String> = Balancer::with_payload(by_name(name).unwrap());
            carrying.apply(
                instances(100, weighted)
                    .into_iter()
                    .map(|i| Edit::Insert(i.clone(), i.to_string())),
            );
            let snapshot = balancer.snapshot();
            let picker = snapshot.picker().clone();
            let run = |count: bool| {
                COUNTING.with(|c| c.set(count));
                let mut held = 0usize;
                for i in 0..20_000usize {
                    let xid = &xids[i % xids.len()];
                    let key = &keys[i % keys.len()];
                    let mut req = match i % 4 {
                        0 => PickRequest::xid(xid),
                        1 => PickRequest::default().with_key(key),
                        2 => PickRequest::default().with_hash(i as u64),
                        _ => PickRequest::default().with_source(IpAddr::from([
                            192,
                            168,
                            (i / 256) as u8,
                            i as u8,
                        ])),
                    }
                    .with_zone(["a", "b", "c", "d"][i % 4]);
                    if i % 5 == 0 {
                        req = req.excluding(&excluded_idx);
                    } else if i % 7 == 0 {
                        req = req.excluding(&excluded_keys);
                    }
                    if picker.pick(&req).is_some() {
                        held += 1;
                    }
                    if let Some(p) = carrying.pick(&req) {
                        assert!(p.payload().starts_with(p.endpoint().instance().host()));
                    }
                    // The whole path: pick, guard, outcome.
                    if let Some(p) = balancer.pick(&req) {
                        match i % 3 {
                            0 => p.success(Duration::from_micros(100 + (i % 50) as u64)),
                            1 => p.failure(),
                            _ => drop(p),
                        }
                    }
                }
                COUNTING.with(|c| c.set(false));
                held
            };
            // Warm-up: thread-local RNG seeding and clock initialisation happen here.
            run(false);
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let picked = run(true);
            let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
            // Every request has an eligible endpoint (at most 3 of 100 are excluded,
            // no weight is 0): each pick must succeed, not merely some.
            assert_eq!(
                picked, 20_000,
                "{name} (weighted: {weighted}): picks failed"
            );
            assert_eq!(
                allocations, 0,
                "{name} (weighted: {weighted}) allocated on the pick path"
            );
        }
    }
}
