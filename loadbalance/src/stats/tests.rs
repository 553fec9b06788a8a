//! Stats that outlive picker rebuilds: identities keep their counters, estimates decay,
//! and freed identities hand their board slots back.

use super::*;
use meshline_instance::Instance;

#[test]
fn same_identity_keeps_its_stats_across_updates() {
    let reg = StatsRegistry::new();
    let a = Instance::parse("10.0.0.1:80").unwrap();
    let b = Instance::parse("10.0.0.2:80").unwrap();
    let first = reg.endpoints(&[a.clone(), b.clone()]);
    first[0].stats().begin();
    let second = reg.endpoints(&[b.clone(), a.clone().with_weight(5)]);
    assert!(Arc::ptr_eq(first[0].stats_arc(), second[1].stats_arc()));
    assert_eq!(second[1].stats().in_flight(), 1);
    assert_eq!(reg.group().in_flight(), 1);
    second[1].stats().end();
    assert_eq!(reg.group().in_flight(), 0);
}

#[test]
fn a_summed_group_is_exact_without_a_counter() {
    let reg = StatsRegistry::summing();
    assert!(!reg.group().counted());
    let a = Instance::parse("10.0.0.1:80").unwrap();
    let b = Instance::parse("10.0.0.2:80").unwrap();
    let eps = reg.endpoints(&[a.clone(), b]);
    let g1 = eps[0].begin();
    let g2 = eps[1].begin();
    let g3 = eps[1].begin();
    assert_eq!(reg.group().in_flight(), 3);
    // `b` leaves with two requests in flight: they are still counted.
    drop(eps);
    let _eps = reg.endpoints(&[a]);
    assert_eq!(reg.group().in_flight(), 3);
    drop((g2, g3));
    assert_eq!(reg.group().in_flight(), 1);
    drop(g1);
    assert_eq!(reg.group().in_flight(), 0);
    // Nothing ever touched the counter.
    assert_eq!(reg.group().in_flight.load(Ordering::Relaxed), 0);
    // A counted group keeps it.
    let reg = StatsRegistry::new();
    let eps = reg.endpoints(&[Instance::parse("10.0.0.3:80").unwrap()]);
    let g = eps[0].begin();
    assert_eq!(reg.group().in_flight.load(Ordering::Relaxed), 1);
    drop(g);
    assert_eq!(reg.group().in_flight(), 0);
}

#[test]
fn forgotten_when_unused_and_duplicates_dropped() {
    let reg = StatsRegistry::new();
    let a = Instance::parse("10.0.0.1:80").unwrap();
    let eps = reg.endpoints(&[a.clone(), a.clone()]);
    assert_eq!(eps.len(), 1);
    drop(eps);
    let _eps = reg.endpoints(&[]);
    assert!(reg.is_empty());
}

#[test]
fn peak_ewma_takes_peaks_and_decays() {
    let s = EndpointStats::new();
    assert!(s.latency_estimate().is_none());
    s.record_success(Duration::from_millis(10));
    let e = s.latency_estimate().unwrap();
    assert!(
        e <= Duration::from_millis(10) && e > Duration::from_millis(9),
        "{e:?}"
    );
    s.record_success(Duration::from_millis(50));
    assert!(s.latency_estimate().unwrap() > Duration::from_millis(49));
    // A lower sample right away barely moves a peak.
    s.record_success(Duration::from_millis(1));
    assert!(s.latency_estimate().unwrap() > Duration::from_millis(40));
    // Far in the future the estimate has decayed towards zero.
    let far = clock::coarse_nanos() + 100 * DEFAULT_EWMA_DECAY.as_nanos() as u64;
    assert!(s.rtt_estimate_ns(far, 1.0, 1.0 / DEFAULT_EWMA_DECAY.as_nanos() as f64) < 1.0);
    s.record_failure();
    s.record_failure();
    assert_eq!(s.consecutive_failures(), 2);
    s.record_success(Duration::from_millis(1));
    assert_eq!(s.consecutive_failures(), 0);
    assert_eq!(s.failures(), 2);
}
