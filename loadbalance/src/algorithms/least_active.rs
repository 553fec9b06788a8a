//! Seata's `LeastActiveLoadBalance`: the endpoint with the fewest requests in flight,
//! uniformly at random among ties.
//!
//! Seata-Java's version reads counters keyed `"/ip:port"` that its hook writes under
//! `"ip:port"`, and only decrements after a successful synchronous send, so in
//! production every count reads 0 (it is random) or only grows. Here the count is the
//! endpoint's [`crate::EndpointStats::in_flight`], incremented by every pick and
//! decremented when the [`crate::InFlightGuard`] drops: exact on success, error,
//! timeout and cancellation.
//!
//! Weighted (Dubbo-style): with unequal weights the endpoint minimising
//! `in_flight / weight` wins, so a weight-2 server carries twice the concurrency.
//! The pick reads every endpoint's counter: O(n), no allocation, no lock. Endpoints
//! made by one [`crate::StatsRegistry`] (every [`crate::Balancer`]) keep their counters
//! side by side on its load board, and from 8 endpoints on the picker scans those
//! pages eight lanes per vector load (AVX2 on x86-64, detected at run time): minimum,
//! tie mask, one random draw; AVX-512 holds up to four pages in registers. Weighted
//! pickers compare `in_flight × lcm(weights) / weight`, exact in integers. Other
//! endpoints, requests with exclusions (retries), and CPUs without AVX2 take the
//! one-by-one scan. `MESHLINE_LB_SCAN=avx2|scalar` caps the width (for benchmarks).

use std::sync::Arc;

use crate::board::{CounterRef, LANES, Page, SMALL_PAGES, Scan, page_min, select_bit};
use crate::picker::{EmptyPicker, Members, gcd};
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker};

/// Fewest in-flight requests, weighted, random among ties (Seata name
/// `LeastActiveLoadBalance`).
#[derive(Debug, Clone, Copy)]
pub struct LeastActiveLoadBalance {
    weighted: bool,
    name: &'static str,
}

impl Default for LeastActiveLoadBalance {
    fn default() -> Self {
        LeastActiveLoadBalance {
            weighted: true,
            name: "LeastActiveLoadBalance",
        }
    }
}

impl LeastActiveLoadBalance {
    /// Weighted least-active.
    pub fn new() -> Self {
        LeastActiveLoadBalance::default()
    }

    /// Ignores weights (the game gateways' "fewest requests").
    pub fn unweighted(name: &'static str) -> Self {
        LeastActiveLoadBalance {
            weighted: false,
            name,
        }
    }
}

impl LoadBalance for LeastActiveLoadBalance {
    fn name(&self) -> &str {
        self.name
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        self.build_with_scan(endpoints, Scan::detect())
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        // The endpoint list is shared with the balancer's snapshot, not copied.
        let members = Members::shared(change.endpoints().clone());
        match self.make_from(members, Scan::detect()) {
            Some(p) => Arc::new(p),
            None => Arc::new(EmptyPicker),
        }
    }
}

impl LeastActiveLoadBalance {
    fn build_with_scan(&self, endpoints: &[Endpoint], scan: Scan) -> Arc<dyn Picker> {
        match self.make(endpoints, scan) {
            Some(p) => Arc::new(p),
            None => Arc::new(EmptyPicker),
        }
    }

    fn make(&self, endpoints: &[Endpoint], scan: Scan) -> Option<LeastActivePicker> {
        self.make_from(Members::new(endpoints), scan)
    }

    fn make_from(&self, members: Members, scan: Scan) -> Option<LeastActivePicker> {
        if members.len() == 0 {
            return None;
        }
        let weighted = self.weighted && !members.uniform;
        let view = BoardView::build(&members.endpoints, &members.weights, weighted, scan);
        let counters = members
            .endpoints
            .iter()
            .map(|e| e.stats().slot().counter_ref())
            .collect();
        Some(LeastActivePicker {
            counters,
            weighted,
            members,
            view,
        })
    }
}

struct LeastActivePicker {
    /// The endpoints' in-flight counters, read one load each by the one-by-one scan
    /// (kept alive by `members`' endpoints, which hold their stats).
    counters: Box<[CounterRef]>,
    weighted: bool,
    members: Members,
    /// The endpoints' counters as board pages, when they share one board densely
    /// enough for the vector scan to beat reading them one by one.
    view: Option<BoardView>,
}

/// The pages of the load board that hold this picker's endpoints' counters, with
/// what the scan needs per lane (built once per membership change).
struct BoardView {
    pages: Box<[Arc<Page>]>,
    /// Per page: lanes of endpoints this picker may choose (weight above 0).
    member: Box<[u64]>,
    /// Per page: 0 for member lanes, `u32::MAX` for the rest (other balancers'
    /// endpoints, departed ones still draining, free slots).
    veto: Box<[[u32; LANES]]>,
    /// Per page: the endpoint index of each member lane.
    index: Box<[[u32; LANES]]>,
    /// Weighted pickers only, per page: `lcm(weights) / weight` of each member lane, so
    /// that `count × mul` orders lanes exactly as `count / weight`.
    mul: Box<[[u32; LANES]]>,
    /// Weighted pickers only: the largest count whose key cannot wrap. A larger one
    /// (never seen in practice) sends the pick to the exact one-by-one scan.
    cap: u32,
    scan: Scan,
}

/// Pages whose tie masks the per-page scan keeps on the stack (2048 endpoints).
const MAX_STACK_PAGES: usize = 32;

/// Fewer endpoints than this are read one by one: a page scan reads 64 lanes.
const MIN_VIEW_ENDPOINTS: usize = 8;

/// Largest `lcm(weights)` a weighted view accepts; counts up to 2^16 then fit.
const MAX_WEIGHT_LCM: u64 = 1 << 16;

impl BoardView {
    fn build(
        endpoints: &[Endpoint],
        weights: &[u32],
        weighted: bool,
        scan: Scan,
    ) -> Option<BoardView> {
        let stats = || endpoints.iter().map(Endpoint::stats);
        let n = endpoints.len();
        if n < MIN_VIEW_ENDPOINTS || scan == Scan::Scalar {
            // Reading lanes one by one through the view is no faster than reading the
            // endpoints one by one.
            return None;
        }
        let board = endpoints[0].stats().slot().board();
        if !stats().all(|s| Arc::ptr_eq(s.slot().board(), board)) {
            return None;
        }
        let lcm = if weighted {
            let mut l = 1u64;
            for &w in weights.iter().filter(|&&w| w > 0) {
                l = l / u64::from(gcd(l as u32, w)) * u64::from(w);
                if l > MAX_WEIGHT_LCM {
                    return None;
                }
            }
            l as u32
        } else {
            1
        };
        // Board pages in slot order: each used page number's rank among the used ones,
        // by a table over page numbers (slots are dense: the board hands out the
        // lowest free one), not a sort and a binary search per endpoint.
        let ids: Vec<u32> = stats().map(|s| s.slot().id()).collect();
        // (The table has one entry per 64 slots of the board, which holds only this
        // balancer's endpoints and those still draining.)
        let last_page = ids.iter().max().map_or(0, |&id| id as usize / LANES);
        let mut rank = vec![u32::MAX; last_page + 1];
        for &id in &ids {
            rank[id as usize / LANES] = 0;
        }
        let mut p = 0usize;
        for r in rank.iter_mut().filter(|r| **r == 0) {
            *r = p as u32;
            p += 1;
        }
        // Sparse layouts (a few endpoints per page) are cheaper to read one by one.
        if p > n / MIN_VIEW_ENDPOINTS + 1 {
            return None;
        }
        let mut pages: Vec<Option<Arc<Page>>> = vec![None; p];
        let mut member = vec![0u64; p];
        let mut veto = vec![[u32::MAX; LANES]; p];
        let mut index = vec![[u32::MAX; LANES]; p];
        let mut mul = if weighted {
            vec![[0u32; LANES]; p]
        } else {
            Vec::new()
        };
        for (i, (s, &id)) in stats().zip(&ids).enumerate() {
            let pg = rank[id as usize / LANES] as usize;
            let lane = id as usize % LANES;
            if pages[pg].is_none() {
                pages[pg] = Some(s.slot().page().clone());
            }
            if weights[i] == 0 {
                continue;
            }
            member[pg] |= 1 << lane;
            veto[pg][lane] = 0;
            index[pg][lane] = i as u32;
            if weighted {
                mul[pg][lane] = lcm / weights[i];
            }
        }
        Some(BoardView {
            pages: pages
                .into_iter()
                .collect::<Option<Vec<_>>>()?
                .into_boxed_slice(),
            member: member.into_boxed_slice(),
            veto: veto.into_boxed_slice(),
            index: index.into_boxed_slice(),
            mul: mul.into_boxed_slice(),
            cap: (u32::MAX - 1) / lcm,
            scan,
        })
    }

    /// Fewest in flight (weighted when `W`) among member lanes, uniform among ties,
    /// with the widest scan the CPU offers. `None` sends the pick to the one-by-one
    /// scan (no eligible lane, or a count above the weighted cap).
    #[inline]
    fn pick<const W: bool>(&self) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        match self.scan {
            // SAFETY: `Scan::Avx512` is only chosen when the CPU has AVX-512F, AVX2,
            // POPCNT and BMI2 (`Scan::supported`).
            Scan::Avx512 => return unsafe { self.pick_avx512::<W>() },
            // SAFETY: `Scan::Avx2` is only chosen when the CPU has AVX2 and POPCNT.
            Scan::Avx2 => return unsafe { self.pick_avx2::<W>() },
            Scan::Scalar => {}
        }
        self.pick_with::<W>(fastrand::u64(..), |page, veto, mul| {
            page_min::<W>(page, veto, mul, Scan::Scalar)
        })
    }

    /// [`Self::pick`] compiled for AVX-512: up to [`SMALL_PAGES`] pages are scanned
    /// together in registers.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2, POPCNT and BMI2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,popcnt,bmi2")]
    unsafe fn pick_avx512<const W: bool>(&self) -> Option<usize> {
        use crate::board::x86;
        use std::arch::x86_64::_pdep_u64;
        // Drawn first, so the generator runs alongside the scan instead of after it.
        let x = fastrand::u64(..);
        // Every AVX-512 CPU has a fast `pdep` (the slow microcoded one is AMD Zen 1/2).
        let select =
            |mask: u64, r: u32| _pdep_u64(1u64.wrapping_shl(r), mask).trailing_zeros() as usize;
        let n_pages = self.pages.len();
        if n_pages == 1 {
            // SAFETY: this function's contract.
            let (_, mask, max) = unsafe {
                x86::page_min_avx512::<W>(&self.pages[0], &self.veto[0], self.mul::<W>(0))
            };
            return self.choose_capped::<W>(&[mask & self.member[0]], max, x, select);
        }
        if n_pages <= SMALL_PAGES {
            // SAFETY: this function's contract; the view's arrays have one entry per page.
            let (masks, max) = unsafe {
                x86::ties_small_avx512::<W>(&self.pages, &self.veto, &self.mul, &self.member)
            };
            return self.choose_capped::<W>(&masks[..n_pages], max, x, select);
        }
        // SAFETY: this function's contract.
        self.pick_with::<W>(x, |page, veto, mul| unsafe {
            x86::page_min_avx512::<W>(page, veto, mul)
        })
    }

    /// [`Self::pick`] compiled for AVX2 (the page scan inlined, POPCNT for the tie
    /// counts).
    ///
    /// # Safety
    /// The CPU must support AVX2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn pick_avx2<const W: bool>(&self) -> Option<usize> {
        use crate::board::x86;
        let x = fastrand::u64(..);
        if self.pages.len() == 1 {
            // SAFETY: this function's contract.
            let (_, mask, max) =
                unsafe { x86::page_min_avx2::<W>(&self.pages[0], &self.veto[0], self.mul::<W>(0)) };
            return self.choose_capped::<W>(&[mask & self.member[0]], max, x, select_bit);
        }
        if self.pages.len() == 2 {
            // SAFETY: this function's contract; two pages, one array entry per page.
            let (masks, max) = unsafe {
                x86::ties_pair_avx2::<W>(&self.pages, &self.veto, &self.mul, &self.member)
            };
            return self.choose_capped::<W>(&masks, max, x, select_bit);
        }
        // SAFETY: this function's contract.
        self.pick_with::<W>(x, |page, veto, mul| unsafe {
            x86::page_min_avx2::<W>(page, veto, mul)
        })
    }

    /// Up to [`MAX_STACK_PAGES`] pages: each page's minimum and ties in one pass (the
    /// pages are independent, so the CPU overlaps them), then the pages holding the
    /// overall minimum. Beyond that, a reservoir over pages (a page wins a tie with
    /// probability proportional to its number of tied lanes).
    #[inline(always)]
    fn pick_with<const W: bool>(
        &self,
        x: u64,
        page_min: impl Fn(&Page, &[u32; LANES], &[u32; LANES]) -> (u32, u64, u32),
    ) -> Option<usize> {
        let n_pages = self.pages.len();
        let mut max_count = 0u32;
        if n_pages <= MAX_STACK_PAGES {
            let mut mins = [u32::MAX; MAX_STACK_PAGES];
            let mut masks = [0u64; MAX_STACK_PAGES];
            let mut min = u32::MAX;
            for (p, page) in self.pages.iter().enumerate() {
                let (m, mask, max) = page_min(page, &self.veto[p], self.mul::<W>(p));
                max_count = max_count.max(max);
                let mask = mask & self.member[p];
                // A page with no eligible lane must not set the minimum.
                let m = if mask == 0 { u32::MAX } else { m };
                mins[p] = m;
                masks[p] = mask;
                min = min.min(m);
            }
            for p in 0..n_pages {
                masks[p] &= u64::from(mins[p] == min).wrapping_neg();
            }
            return self.choose_capped::<W>(&masks[..n_pages], max_count, x, select_bit);
        }
        let mut best = u32::MAX;
        let mut ties = 0u32;
        let mut chosen_page = 0usize;
        let mut chosen_mask = 0u64;
        for (p, page) in self.pages.iter().enumerate() {
            let (min, mask, max) = page_min(page, &self.veto[p], self.mul::<W>(p));
            max_count = max_count.max(max);
            let mask = mask & self.member[p];
            let count = mask.count_ones();
            if count == 0 {
                continue;
            }
            if ties == 0 || min < best {
                best = min;
                ties = count;
                chosen_page = p;
                chosen_mask = mask;
            } else if min == best {
                ties += count;
                if fastrand::u32(..ties) < count {
                    chosen_page = p;
                    chosen_mask = mask;
                }
            }
        }
        let count = chosen_mask.count_ones();
        if count == 0 || (W && max_count > self.cap) {
            return None;
        }
        let r = ((u128::from(x) * u128::from(count)) >> 64) as u32;
        Some(self.index[chosen_page][select_bit(chosen_mask, r)] as usize)
    }

    /// Page `p`'s multipliers for weighted keys (unweighted scans ignore the argument,
    /// so they get the veto row, which is always there).
    #[inline(always)]
    fn mul<const W: bool>(&self, p: usize) -> &[u32; LANES] {
        if W { &self.mul[p] } else { &self.veto[p] }
    }

    /// [`Self::choose`] unless a weighted scan saw a count above the cap (`None`: the
    /// one-by-one scan answers).
    #[inline(always)]
    fn choose_capped<const W: bool>(
        &self,
        masks: &[u64],
        max_count: u32,
        x: u64,
        select: impl Fn(u64, u32) -> usize,
    ) -> Option<usize> {
        if W && max_count > self.cap {
            return None;
        }
        self.choose(masks, x, select)
    }

    /// The tied lane numbered `x × ties / 2^64` across `masks` (one per page, in page
    /// order) as an endpoint index: a uniform choice, since `x` is a uniform 64-bit draw
    /// (multiply-shift; the bias is below `ties / 2^64`). The page is found by a
    /// branch-free walk (a mispredicted branch costs more than scanning a page).
    #[inline(always)]
    fn choose(&self, masks: &[u64], x: u64, select: impl Fn(u64, u32) -> usize) -> Option<usize> {
        let total: u32 = masks.iter().map(|m| m.count_ones()).sum();
        if total == 0 {
            return None;
        }
        let r = ((u128::from(x) * u128::from(total)) >> 64) as u32;
        let (mut page, mut skipped, mut end) = (0usize, 0u32, 0u32);
        for &m in masks {
            let c = m.count_ones();
            end += c;
            let past = end <= r;
            page += usize::from(past);
            skipped += if past { c } else { 0 };
        }
        let lane = select(masks[page], r - skipped);
        Some(self.index[page][lane & (LANES - 1)] as usize)
    }
}

impl LeastActivePicker {
    /// Exact least-loaded among `ok` endpoints, uniform among ties.
    #[inline(always)]
    fn select(&self, ok: impl Fn(usize) -> bool, weight: impl Fn(usize) -> u64) -> Option<usize> {
        // (load, weight) of the best so far; compare load_a * w_b with load_b * w_a.
        let mut best: Option<(u64, u64)> = None;
        let mut first = 0usize;
        let mut ties = 0usize;
        for (i, &c) in self.counters.iter().enumerate() {
            if !ok(i) {
                continue;
            }
            // SAFETY: `self.members` keeps every counter alive.
            let load = u64::from(unsafe { c.load() });
            let wi = weight(i);
            if wi == 0 {
                continue;
            }
            match best {
                Some((bl, bw)) => {
                    let (l, r) = (
                        u128::from(load) * u128::from(bw),
                        u128::from(bl) * u128::from(wi),
                    );
                    if l < r {
                        best = Some((load, wi));
                        first = i;
                        ties = 1;
                    } else if l == r {
                        ties += 1;
                    }
                }
                None => {
                    best = Some((load, wi));
                    first = i;
                    ties = 1;
                }
            }
        }
        let (bl, bw) = best?;
        if ties == 1 {
            return Some(first);
        }
        // The r-th tie; counters may have moved since the first pass, in which case the
        // first minimum found is still a fine answer.
        let mut r = fastrand::usize(..ties);
        for (i, &c) in self.counters.iter().enumerate().skip(first) {
            if !ok(i) {
                continue;
            }
            let wi = weight(i);
            if wi > 0
                // SAFETY: as above.
                && u128::from(unsafe { c.load() }) * u128::from(bw)
                    == u128::from(bl) * u128::from(wi)
            {
                if r == 0 {
                    return Some(i);
                }
                r -= 1;
            }
        }
        Some(first)
    }
}

/// Endpoints up to which the common case collects ties in one pass on the stack.
const TIE_BUFFER: usize = 128;

impl LeastActivePicker {
    /// Equal weights, nothing excluded, at most [`TIE_BUFFER`] endpoints: one
    /// branch-light pass that keeps the indices of the current minimum's ties.
    #[inline]
    fn select_uniform(&self) -> Option<usize> {
        let mut ties = [0u8; TIE_BUFFER];
        let mut len = 0usize;
        let mut min = u64::MAX;
        for (i, &c) in self.counters.iter().enumerate() {
            // SAFETY: `self.members` keeps every counter alive.
            let load = u64::from(unsafe { c.load() });
            if load < min {
                min = load;
                len = 0;
            }
            ties[len & (TIE_BUFFER - 1)] = i as u8;
            len += usize::from(load == min);
        }
        match len {
            0 => None,
            1 => Some(usize::from(ties[0])),
            _ => Some(usize::from(ties[fastrand::usize(..len)])),
        }
    }
}

impl Picker for LeastActivePicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let w = &self.members.weights;
        let all = req.exclusions().is_empty();
        if all && let Some(view) = &self.view {
            let picked = if self.weighted {
                view.pick::<true>()
            } else {
                view.pick::<false>()
            };
            if picked.is_some() {
                return picked;
            }
        }
        match (all, self.weighted, self.members.uniform) {
            // Equal weights, nothing excluded: the common case.
            (true, _, true) if self.counters.len() <= TIE_BUFFER => self.select_uniform(),
            (true, _, true) => self.select(|_| true, |_| 1),
            (true, true, false) => self.select(|_| true, |i| u64::from(w[i])),
            (true, false, false) => self.select(|_| true, |i| u64::from(w[i].min(1))),
            (false, true, _) => self.select(
                |i| !req.is_excluded(i, &self.members.endpoints[i]),
                |i| u64::from(w[i]),
            ),
            (false, false, _) => self.select(
                |i| !req.is_excluded(i, &self.members.endpoints[i]),
                |i| u64::from(w[i].min(1)),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
