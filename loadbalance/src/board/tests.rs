use super::*;

#[test]
fn slots_are_dense_and_reused_lowest_first() {
    let board = Board::new();
    let a = board.acquire();
    let b = board.acquire();
    let c = board.acquire();
    assert_eq!((a.id(), b.id(), c.id()), (0, 1, 2));
    assert!(Arc::ptr_eq(a.page(), c.page()));
    b.counter().fetch_add(3, Ordering::Relaxed);
    b.counter().fetch_sub(3, Ordering::Relaxed);
    drop(b);
    let d = board.acquire();
    assert_eq!(d.id(), 1);
    assert_eq!(d.counter().load(Ordering::Relaxed), 0);
    let many: Vec<Slot> = (0..LANES).map(|_| board.acquire()).collect();
    assert_eq!(many.last().unwrap().id() as usize, LANES + 2);
    assert!(!Arc::ptr_eq(many.last().unwrap().page(), a.page()));
}

#[test]
fn select_bit_finds_every_set_bit() {
    let mut rng = fastrand::Rng::with_seed(3);
    let mut masks = vec![1u64, u64::MAX, 1 << 63, 0x8000_0000_0000_0001, 0xff00];
    masks.extend((0..2000).map(|_| rng.u64(..) & rng.u64(..)));
    for x in masks.into_iter().filter(|&x| x != 0) {
        let bits: Vec<usize> = (0..64).filter(|&b| x >> b & 1 == 1).collect();
        for (r, &b) in bits.iter().enumerate() {
            assert_eq!(select_bit(x, r as u32), b, "{x:#x} r={r}");
        }
    }
}

/// Every width this CPU has is compared with the scalar scan (the reference);
/// widths it lacks are skipped, and the test says which ran (`--nocapture`), so a
/// run on a CPU without AVX2 or AVX-512 cannot pass for one that checked them.
#[test]
fn every_scan_width_agrees_with_the_scalar_scan() {
    let (ran, skipped): (Vec<Scan>, Vec<Scan>) = [Scan::Scalar, Scan::Avx2, Scan::Avx512]
        .into_iter()
        .partition(|&scan| scan <= Scan::supported());
    eprintln!("board scan widths compared: {ran:?}; not on this CPU: {skipped:?}");
    assert_eq!(
        ran.first(),
        Some(&Scan::Scalar),
        "the reference always runs"
    );
    let mut compared = vec![0usize; ran.len()];
    let board = Board::new();
    let slots: Vec<Slot> = (0..LANES).map(|_| board.acquire()).collect();
    let page = slots[0].page().clone();
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..500 {
        let mut veto = [0u32; LANES];
        let mut mul = [0u32; LANES];
        for l in 0..LANES {
            let count = match rng.u8(..10) {
                0 => u32::MAX,
                1 => rng.u32(..),
                _ => rng.u32(..6),
            };
            page.lane(l).store(count, Ordering::Relaxed);
            if rng.u8(..4) == 0 {
                veto[l] = u32::MAX;
            }
            mul[l] = [60, 30, 20, 15, 12][rng.usize(..5)];
        }
        let plain = page_min_scalar::<false>(&page, &veto, &mul);
        let weighted = page_min_scalar::<true>(&page, &veto, &mul);
        for (k, &scan) in ran.iter().enumerate() {
            assert_eq!(
                page_min::<false>(&page, &veto, &mul, scan),
                plain,
                "{scan:?}"
            );
            assert_eq!(
                page_min::<true>(&page, &veto, &mul, scan),
                weighted,
                "{scan:?}"
            );
            compared[k] += 1;
        }
    }
    assert!(compared.iter().all(|&c| c == 500), "{ran:?}: {compared:?}");
}
