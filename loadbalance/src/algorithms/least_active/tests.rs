use super::*;
use crate::{InFlightGuard, StatsRegistry};
use meshline_instance::Instance;

/// The scan widths this CPU has (said on stderr, so a run without AVX2 or AVX-512
/// shows that it did not test them).
fn scans() -> Vec<Scan> {
    let scans: Vec<Scan> = [Scan::Scalar, Scan::Avx2, Scan::Avx512]
        .into_iter()
        .filter(|s| *s <= Scan::supported())
        .collect();
    eprintln!("least-active scan widths tested on this CPU: {scans:?}");
    scans
}

/// Every scan width, every page layout (one page, the in-register pages, the
/// per-page path, the reservoir beyond 32 pages), with identities on the board that
/// the picker must not choose (they carry no load, so a scan that let them through
/// would pick them): only least-loaded endpoints are picked, and ties are shared.
#[test]
fn every_scan_picks_only_the_least_loaded_and_shares_ties() {
    let mut rng = fastrand::Rng::with_seed(11);
    for n in [
        8usize, 9, 63, 64, 65, 100, 128, 200, 256, 257, 300, 1000, 2100,
    ] {
        for (mode, weighted) in [("uniform", false), ("weighted", true), ("fewest", true)] {
            let reg = StatsRegistry::new();
            let all: Vec<Instance> = (0..n + n / 4)
                .map(|i| {
                    let inst =
                        Instance::parse(&format!("10.1.{}.{}:8091", i / 250, i % 250)).unwrap();
                    // Weight 0 on a few: never chosen while others are eligible.
                    let w = if weighted { [1, 2, 3, 0, 2][i % 5] } else { 1 };
                    inst.with_weight(w)
                })
                .collect();
            let eps = reg.endpoints(&all);
            let members: Vec<Endpoint> = eps
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 5 != 2)
                .map(|(_, e)| e.clone())
                .collect();
            let mut held: Vec<InFlightGuard> = Vec::new();
            for e in &members {
                for _ in 0..rng.u32(1..4) {
                    held.push(e.begin());
                }
            }
            let lb = match mode {
                "fewest" => LeastActiveLoadBalance::unweighted("FewestRequests"),
                _ => LeastActiveLoadBalance::new(),
            };
            let key = |i: usize| -> (u64, u64) {
                let w = u64::from(members[i].weight());
                let w = if mode == "weighted" { w } else { w.min(1) };
                (members[i].stats().in_flight(), w)
            };
            let better = |a: (u64, u64), b: (u64, u64)| a.0 * b.1 < b.0 * a.1;
            let eligible: Vec<usize> = (0..members.len()).filter(|&i| key(i).1 > 0).collect();
            let best = eligible
                .iter()
                .copied()
                .fold(None::<usize>, |b, i| match b {
                    Some(b) if !better(key(i), key(b)) => Some(b),
                    _ => Some(i),
                })
                .unwrap();
            let ties: Vec<usize> = eligible
                .iter()
                .copied()
                .filter(|&i| !better(key(best), key(i)))
                .collect();
            for scan in scans() {
                let mut picker = lb.make(&members, scan).unwrap();
                let req = PickRequest::default();
                if scan != Scan::Scalar {
                    let view = picker.view.as_mut().expect("a board view");
                    if mode == "weighted" {
                        // Above the cap the view declines and the exact scan answers.
                        let cap = view.cap;
                        view.cap = 1;
                        assert_eq!(view.pick::<true>(), None);
                        let i = picker.pick(&req).unwrap();
                        assert!(ties.contains(&i), "n={n} over the cap: picked {i}");
                        picker.view.as_mut().unwrap().cap = cap;
                    }
                } else {
                    assert!(picker.view.is_none());
                }
                let rounds = 200 * ties.len().min(50);
                let mut hits = vec![0usize; members.len()];
                for _ in 0..rounds {
                    // The view itself must answer (no silent fallback).
                    let i = match (&picker.view, picker.weighted) {
                        (Some(view), true) => view.pick::<true>(),
                        (Some(view), false) => view.pick::<false>(),
                        (None, _) => picker.pick(&req),
                    };
                    let i = i.unwrap_or_else(|| panic!("n={n} {mode} {scan:?}: no pick"));
                    assert_eq!(picker.pick(&req).map(|j| ties.contains(&j)), Some(true));
                    hits[i] += 1;
                }
                for (i, &h) in hits.iter().enumerate() {
                    assert!(
                        h == 0 || ties.contains(&i),
                        "n={n} {mode} {scan:?}: picked {i} {:?}, best {:?}",
                        key(i),
                        key(best)
                    );
                }
                if ties.len() <= 50 {
                    let expect = rounds / ties.len();
                    for &t in &ties {
                        assert!(
                            hits[t] > expect / 2 && hits[t] < expect * 2,
                            "n={n} {mode} {scan:?}: tie {t} got {} of {rounds}, expected ~{expect}",
                            hits[t]
                        );
                    }
                }
            }
            drop(held);
        }
    }
}

/// Threads picking through the board scan while guards end on other threads and the
/// membership churns: every count returns to zero.
#[test]
fn concurrent_picks_and_churn_leave_no_count_behind() {
    use crate::Balancer;
    use std::sync::mpsc;
    let all: Vec<Instance> = (0..150)
        .map(|i| Instance::parse(&format!("10.2.{}.{}:8091", i / 250, i % 250)).unwrap())
        .collect();
    let balancer = Arc::new(Balancer::new(Arc::new(LeastActiveLoadBalance::new())));
    balancer.update(&all);
    let (tx, rx) = mpsc::channel::<InFlightGuard>();
    let ender = std::thread::spawn(move || {
        for g in rx {
            drop(g);
        }
    });
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let balancer = balancer.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..20_000usize {
                    let p = balancer.pick(&PickRequest::default()).unwrap();
                    let (_, g) = p.into_parts();
                    match (i + t) % 3 {
                        0 => drop(g),
                        1 => tx.send(g).unwrap(),
                        _ => held.push(g),
                    }
                    if held.len() > 64 {
                        held.clear();
                    }
                }
            })
        })
        .collect();
    for k in 0..200 {
        let n = 20 + (k * 7) % 130;
        balancer.update(&all[..n]);
    }
    for w in workers {
        w.join().unwrap();
    }
    drop(tx);
    ender.join().unwrap();
    balancer.update(&all);
    for e in balancer.endpoints().iter() {
        assert_eq!(e.stats().in_flight(), 0, "{e}");
    }
    assert_eq!(balancer.stats_registry().group().in_flight(), 0);
}
