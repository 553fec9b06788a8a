use super::*;
use crate::Endpoint;
use crate::algorithms::ring::{Ring, point_counts};
use meshline_instance::Instance;

/// `MESHLINE_RING_TIMING=paged|flat cargo test --release -p meshline-loadbalance --lib
/// ring_build_timing -- --ignored` under `perf stat -e task-clock`: CPU time of 20
/// builds at 10 000 endpoints, robust to a loaded machine.
#[test]
#[ignore]
fn ring_build_timing() {
    let eps: Vec<Endpoint> = (0..10_000u32)
        .map(|i| {
            Endpoint::new(
                Instance::parse(&format!("10.{}.{}.{}:8091", i >> 16, i >> 8 & 255, i & 255))
                    .unwrap(),
            )
        })
        .collect();
    let m = Members::new(&eps);
    let paged = std::env::var("MESHLINE_RING_TIMING").as_deref() != Ok("flat");
    let start = std::time::Instant::now();
    for _ in 0..20 {
        let (counts, _) = point_counts(&m, 160);
        if paged {
            std::hint::black_box(PagedRing::build(&m, counts));
        } else {
            std::hint::black_box(Ring::with_counts(&m, &counts));
        }
    }
    eprintln!("{:?} per build (wall)", start.elapsed() / 20);
}
