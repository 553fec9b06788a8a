//! The load board: every endpoint's in-flight counter, packed densely so that a
//! least-active pick reads sixteen counters per cache line and eight per vector load.
//!
//! ## Why the counters do not live in [`crate::EndpointStats`]
//!
//! Least-active must compare the *current* in-flight count of every endpoint on every
//! pick. With one counter per stats struct (each on its own cache line) that is one
//! pointer chase and one cache line per endpoint: about 80 ns at 100 endpoints on our
//! bench machine, and under load every one of those lines bounces between cores. Here
//! the counters of one [`crate::StatsRegistry`] are `AtomicU32` lanes in pages of
//! [`LANES`]; a slot is taken when an identity first appears and handed back when its
//! stats are freed (only after every in-flight guard on it has dropped, so a freed slot
//! always reads 0). A cluster's counters end up in a few contiguous pages, which a
//! picker scans with vector loads.
//!
//! The cost: up to sixteen endpoints' counters share a cache line, so increments on
//! different endpoints from different cores contend for it. That is the traffic the
//! registry-wide [`crate::stats::LoadGroup`] counter causes for the whole cluster when
//! it is kept (bounded-load hashing), and least-active (which reads every counter)
//! gains far more than it pays. The board also answers `LoadGroup::in_flight` for a
//! group that keeps no counter ([`Board::total`]).
//!
//! ## Reading lanes with vector loads
//!
//! Rust has no atomic vector load, and a plain (non-atomic) read of memory another
//! thread writes atomically is a data race. On x86-64 we read a page with `vmovdqa` in
//! inline assembly instead: the architecture performs an aligned vector load as a set
//! of accesses each at least 8 bytes wide and naturally aligned (Intel SDM vol. 3
//! §9.1.1, AMD APM vol. 2 §7.3.2), so every 4-byte lane is read untorn, which is
//! exactly what a sequence of relaxed `AtomicU32::load`s would observe. That is the
//! argument `portable-atomic` and `atomic-memcpy` rest on. Everywhere else (and on
//! x86-64 without AVX2) the lanes are read one relaxed load at a time.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Counters per page.
pub(crate) const LANES: usize = 64;

/// Pages the AVX-512 scan holds in registers at once (256 endpoints).
pub(crate) const SMALL_PAGES: usize = 4;

/// [`LANES`] in-flight counters, 64-byte aligned (four cache lines).
#[repr(C, align(64))]
pub(crate) struct Page {
    lanes: [AtomicU32; LANES],
}

impl Page {
    fn new() -> Page {
        Page {
            lanes: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// One lane.
    #[inline]
    pub(crate) fn lane(&self, lane: usize) -> &AtomicU32 {
        &self.lanes[lane]
    }

    /// Address of lane 0, for the vector scan.
    #[inline]
    pub(crate) fn base(&self) -> *const u32 {
        self.lanes.as_ptr().cast()
    }
}

/// Hands out counter slots, lowest free slot first, so a cluster stays in as few pages
/// as possible.
pub(crate) struct Board {
    inner: Mutex<Inner>,
}

struct Inner {
    pages: Vec<Arc<Page>>,
    free: BTreeSet<u32>,
    next: u32,
}

impl Board {
    pub(crate) fn new() -> Arc<Board> {
        Arc::new(Board {
            inner: Mutex::new(Inner {
                pages: Vec::new(),
                free: BTreeSet::new(),
                next: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every critical section is a push/insert/remove: a panic cannot leave the
        // board half-updated, so a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a free slot.
    pub(crate) fn acquire(self: &Arc<Board>) -> Slot {
        let mut inner = self.lock();
        let id = match inner.free.pop_first() {
            Some(id) => id,
            None => {
                let id = inner.next;
                inner.next += 1;
                id
            }
        };
        let page_no = id as usize / LANES;
        while inner.pages.len() <= page_no {
            inner.pages.push(Arc::new(Page::new()));
        }
        let page = inner.pages[page_no].clone();
        drop(inner);
        // A released slot reads 0 already (see the module docs); storing it again
        // costs nothing and keeps that true even if an invariant is ever broken.
        page.lane(id as usize % LANES).store(0, Ordering::Relaxed);
        let counter = std::ptr::NonNull::from(page.lane(id as usize % LANES));
        Slot {
            counter,
            board: self.clone(),
            page,
            id,
        }
    }

    fn release(&self, id: u32) {
        self.lock().free.insert(id);
    }

    /// The sum of every counter on the board (free slots read 0). Takes the lock.
    pub(crate) fn total(&self) -> u64 {
        let inner = self.lock();
        inner
            .pages
            .iter()
            .flat_map(|page| page.lanes.iter())
            .map(|lane| u64::from(lane.load(Ordering::Relaxed)))
            .sum()
    }
}

/// One endpoint's counter: a lane of a page of a board. Handed back on drop.
pub(crate) struct Slot {
    /// The lane itself, so reading a count is one load, not three.
    counter: std::ptr::NonNull<AtomicU32>,
    board: Arc<Board>,
    page: Arc<Page>,
    id: u32,
}

impl Slot {
    /// The in-flight counter.
    #[inline]
    pub(crate) fn counter(&self) -> &AtomicU32 {
        // SAFETY: `counter` points into `self.page`, which this slot keeps alive, and an
        // atomic is only ever accessed through shared references.
        unsafe { self.counter.as_ref() }
    }

    /// The board this slot belongs to.
    #[inline]
    pub(crate) fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// The page holding this slot.
    #[inline]
    pub(crate) fn page(&self) -> &Arc<Page> {
        &self.page
    }

    /// The slot number on its board (page = id / LANES, lane = id % LANES).
    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

/// A slot's counter without the slot: one load to read, for pickers that keep the
/// owning stats alive themselves (they hold the `Arc<EndpointStats>`).
#[derive(Clone, Copy)]
pub(crate) struct CounterRef(std::ptr::NonNull<AtomicU32>);

impl CounterRef {
    /// The count.
    ///
    /// # Safety
    /// The [`Slot`] this came from must still be alive.
    #[inline]
    pub(crate) unsafe fn load(self) -> u32 {
        // SAFETY: the caller keeps the slot, hence its page, alive.
        unsafe { self.0.as_ref() }.load(Ordering::Relaxed)
    }
}

// SAFETY: a pointer to an `AtomicU32`, only ever read atomically.
unsafe impl Send for CounterRef {}
// SAFETY: as above.
unsafe impl Sync for CounterRef {}

impl Slot {
    /// The counter as a [`CounterRef`].
    #[inline]
    pub(crate) fn counter_ref(&self) -> CounterRef {
        CounterRef(self.counter)
    }
}

// SAFETY: the raw pointer is to an `AtomicU32` (itself `Send + Sync`) inside the
// `Arc<Page>` the slot owns; every other field is `Send + Sync`.
unsafe impl Send for Slot {}
// SAFETY: as above.
unsafe impl Sync for Slot {}

impl Drop for Slot {
    fn drop(&mut self) {
        self.board.release(self.id);
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

/// The smallest key over the eligible lanes of one page, the lanes holding it, and (for
/// weighted keys) the largest raw count seen.
///
/// A lane's key is its in-flight count, times `mul[l]` when `W` (weighted pickers: `mul`
/// is `lcm(weights) / weight`, so keys compare exactly as `count / weight`), OR-ed
/// with `veto[l]` (0 for an eligible lane, `u32::MAX` for any other). Callers AND the
/// mask with their member mask, since an eligible key could in theory also read
/// `u32::MAX`, and fall back to an exact scan when the largest count is above the
/// picker's cap (the multiplication could have wrapped).
#[inline]
pub(crate) fn page_min<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
    scan: Scan,
) -> (u32, u64, u32) {
    #[cfg(target_arch = "x86_64")]
    match scan {
        // SAFETY: `Scan` only names widths the CPU supports (`Scan::supported`).
        Scan::Avx512 => return unsafe { x86::page_min_avx512::<W>(page, veto, mul) },
        // SAFETY: as above.
        Scan::Avx2 => return unsafe { x86::page_min_avx2::<W>(page, veto, mul) },
        Scan::Scalar => {}
    }
    let _ = scan;
    page_min_scalar::<W>(page, veto, mul)
}

/// [`page_min`] with one relaxed atomic load per lane.
pub(crate) fn page_min_scalar<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
) -> (u32, u64, u32) {
    let mut keys = [0u32; LANES];
    let mut min = u32::MAX;
    let mut max = 0u32;
    for l in 0..LANES {
        let count = page.lane(l).load(Ordering::Relaxed);
        let key = if W {
            max = max.max(count);
            count.wrapping_mul(mul[l])
        } else {
            count
        } | veto[l];
        keys[l] = key;
        min = min.min(key);
    }
    let mut mask = 0u64;
    for (l, &k) in keys.iter().enumerate() {
        mask |= u64::from(k == min) << l;
    }
    (min, mask, max)
}

/// Position of the `r`-th (from 0) set bit of `x`, which must have more than `r` bits
/// set. Branch-free broadword select (a mispredicted branch here costs more than the
/// whole page scan): byte popcounts, their prefix sums in one multiplication, the first
/// byte whose prefix exceeds `r`, then a table lookup inside that byte. (BMI2 `pdep`
/// would be one instruction, but it is microcoded and slow on AMD Zen 1 and 2.)
#[inline(always)]
pub(crate) fn select_bit(x: u64, r: u32) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut s = x - ((x >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // Byte i: set bits in bytes 0..=i (at most 64, so the high bit of each byte is free).
    let prefix = s.wrapping_mul(ONES);
    // High bit of byte i set iff prefix_i >= r + 1; no borrow crosses a byte.
    let ge = ((prefix | HIGH) - (u64::from(r & 63) + 1) * ONES) & HIGH;
    let byte = (ge.trailing_zeros() / 8) & 7;
    let before = ((prefix << 8) >> (8 * byte)) as u8;
    let b = (x >> (8 * byte)) as u8;
    let k = r.wrapping_sub(u32::from(before)) & 7;
    (8 * byte + u32::from(SELECT_IN_BYTE[usize::from(b)][k as usize])) as usize
}

/// `SELECT_IN_BYTE[b][k]`: position of the `k`-th set bit of `b` (8 when there is none).
static SELECT_IN_BYTE: [[u8; 8]; 256] = {
    let mut t = [[8u8; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        let mut bit = 0;
        while bit < 8 {
            if b >> bit & 1 == 1 {
                t[b][k] = bit as u8;
                k += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    t
};

/// How wide a least-active picker reads the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Scan {
    /// One relaxed atomic load per lane (any CPU).
    Scalar,
    /// Eight lanes per load (x86-64 with AVX2 and POPCNT).
    Avx2,
    /// Sixteen lanes per load, up to four pages in registers (x86-64 with AVX-512F,
    /// AVX2, POPCNT and BMI2).
    Avx512,
}

/// Environment variable that caps the scan width: `scalar`, `avx2` or `avx512`
/// (benchmarks and debugging; the default is the widest the CPU supports).
pub(crate) const SCAN_ENV: &str = "MESHLINE_LB_SCAN";

impl Scan {
    /// The widest scan this CPU supports.
    pub(crate) fn supported() -> Scan {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("popcnt") {
                if has!("avx512f") && has!("bmi2") {
                    return Scan::Avx512;
                }
                return Scan::Avx2;
            }
        }
        Scan::Scalar
    }

    /// [`Scan::supported`], capped by [`SCAN_ENV`] when it is set (read at every
    /// picker build, which is rare).
    pub(crate) fn detect() -> Scan {
        let best = Scan::supported();
        match std::env::var(SCAN_ENV) {
            Err(_) => best,
            Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
                "scalar" => Scan::Scalar,
                "avx2" => best.min(Scan::Avx2),
                "avx512" | "" => best,
                other => {
                    tracing::warn!(
                        value = other,
                        "{SCAN_ENV} is not scalar, avx2 or avx512; using the widest scan"
                    );
                    best
                }
            },
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(test)]
mod tests;
