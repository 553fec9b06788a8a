//! A paged ring built from scratch: count each group of pages' points, write every
//! point into its group, sort each group. At 10 000 endpoints (1.6 million points)
//! that is about 10 ms of one core, so each pass runs in two halves on two threads when
//! the machine has them (`crate::parallel`): the first two passes split the endpoints, the
//! third the groups. The result is the same point for point however it was split: a
//! page's points are sorted by hash, ties by endpoint identity, whatever order the
//! halves wrote them in.

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::{Block, LUT_MASK, PAGE_POINTS, Page, PagedRing, SORT_BITS, Scratch, sort_pages};
use crate::algorithms::ring::{identity_hashes, point_hash};
use crate::parallel;
use crate::picker::Members;

/// Rings of at least this many points (about 1640 endpoints of 160) are built on two
/// threads when there are two cores: below it the build takes under 3 ms and a
/// helper thread's start is a larger share of it.
const PARALLEL_MIN_POINTS: u64 = super::PAGED_MIN_POINTS;

/// Pages per group (up to): points are counted, written and sorted by group.
/// Grouping four pages (about 1600 points, 12.5 KB) cut the writing pass by a
/// quarter at 10 000 endpoints (its 1024 targets fit the TLB, 4096 did not), and the
/// sort of a group still runs in the L1 cache.
const GROUP_BITS: u32 = 2;

/// Every point of the endpoints with these `bases` and `counts` (node numbers from
/// `first`), as (hash, `hash << 32 | node`).
fn each(first: usize, bases: &[u64], counts: &[u64], mut f: impl FnMut(u32, u64)) {
    for (i, (&base, &count)) in bases.iter().zip(counts).enumerate() {
        let node = (first + i) as u64;
        for p in 0..count {
            let h = point_hash(base, p);
            f(h, u64::from(h) << 32 | node);
        }
    }
}

/// One half of the endpoints: the first node number, and their bases and counts.
#[derive(Clone, Copy)]
struct Half<'a> {
    first: usize,
    bases: &'a [u64],
    counts: &'a [u64],
}

/// The bases of `members`' endpoints `range` (their identity hashes), unless given.
fn bases_of(members: &Members, range: std::ops::Range<usize>, given: Option<&[u64]>) -> Vec<u64> {
    match given {
        Some(bases) => bases[range].to_vec(),
        None => identity_hashes(&members.endpoints[range]),
    }
}

impl Half<'_> {
    /// How many of this half's points fall in each group (`hash >> group_shift`).
    fn group_counts(&self, group_shift: u32, n_groups: usize) -> Vec<u32> {
        let mut per_group = vec![0u32; n_groups];
        each(self.first, self.bases, self.counts, |h, _| {
            per_group[(u64::from(h) >> group_shift) as usize] += 1
        });
        per_group
    }

    /// Writes this half's points into `out`, each group's from `cursors[g][0]` up to
    /// (and, when done, exactly reaching) `cursors[g][1]`.
    fn scatter(&self, group_shift: u32, cursors: &mut [[u32; 2]], out: &Out) {
        each(self.first, self.bases, self.counts, |h, point| {
            let [next, end] = &mut cursors[(u64::from(h) >> group_shift) as usize];
            // Always true (the cursors were counted from these same points); checked,
            // because the other half writes beside this one into the same buffer.
            assert!(*next < *end, "a ring group got more points than counted");
            out.write(*next as usize, point);
            *next += 1;
        });
        assert!(
            cursors.iter().all(|[next, end]| next == end),
            "a ring group got fewer points than counted"
        );
    }
}

/// The build's point buffer, written by both halves at disjoint slots.
struct Out {
    ptr: *mut MaybeUninit<u64>,
    len: usize,
}

// SAFETY: the halves write disjoint slots (each group's range is split between them by
// the counts, and `Half::scatter` stays within its share), and nothing reads the
// buffer until both are done.
unsafe impl Sync for Out {}

impl Out {
    #[inline]
    fn write(&self, slot: usize, point: u64) {
        assert!(slot < self.len);
        // SAFETY: in bounds (checked), and no other thread writes or reads this slot
        // (see the `Sync` impl).
        unsafe { (*self.ptr.add(slot)).write(point) };
    }
}

impl PagedRing {
    /// A fresh ring of `counts[i]` points per endpoint `i` of `members`, derived from
    /// the endpoint's identity hash (`identity_hash`); node `i` is endpoint `i`.
    pub(crate) fn build(members: &Members, counts: Vec<u64>) -> PagedRing {
        let total = counts.iter().sum::<u64>();
        let split = total >= PARALLEL_MIN_POINTS && parallel::available();
        PagedRing::build_in(members, None, counts, split)
    }

    /// [`build`](Self::build) with the points derived from `bases` instead (tests give
    /// several endpoints one base, so that their points collide).
    #[cfg(test)]
    pub(super) fn with_bases(members: &Members, bases: Vec<u64>, counts: Vec<u64>) -> PagedRing {
        PagedRing::build_in(members, Some(bases), counts, false)
    }

    /// [`build`](Self::build) (from `bases` if given), in two halves on two threads
    /// when `split`.
    pub(super) fn build_in(
        members: &Members,
        bases: Option<Vec<u64>>,
        counts: Vec<u64>,
        split: bool,
    ) -> PagedRing {
        let total = counts.iter().sum::<u64>();
        let page_bits = (total / PAGE_POINTS)
            .max(2)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(1, 32 - SORT_BITS);
        let page_shift = 32 - page_bits;
        let n_pages = 1usize << page_bits;
        let group_bits = GROUP_BITS.min(page_bits);
        let group_shift = page_shift + group_bits;
        let n_groups = n_pages >> group_bits;
        let group_luts = (LUT_MASK + 2) << group_bits;
        // The endpoints in two halves of about as many points each.
        let mid = if split {
            let mut sum = 0;
            counts
                .iter()
                .position(|&c| {
                    sum += c;
                    sum >= total / 2
                })
                .map_or(counts.len(), |i| i + 1)
        } else {
            counts.len()
        };
        // Each half hashes its endpoints' identities (a few pointer chases each: about
        // a millisecond at 10 000), then counts its points per group. Points are
        // generated twice (cheap arithmetic) rather than stored twice: once to count
        // each group's points, once to write each where its group starts in one
        // buffer, the only large memory the build writes.
        let n = counts.len();
        let given = bases.as_deref();
        let counted = |range: std::ops::Range<usize>| {
            let bases = bases_of(members, range.clone(), given);
            let half = Half {
                first: range.start,
                bases: &bases,
                counts: &counts[range],
            };
            let per_group = half.group_counts(group_shift, n_groups);
            (bases, per_group)
        };
        let ((mut all_bases, lo_groups), (hi_bases, hi_groups)) =
            parallel::join(split, || counted(0..mid), || counted(mid..n));
        all_bases.extend_from_slice(&hi_bases);
        let bases = all_bases;
        let lo = Half {
            first: 0,
            bases: &bases[..mid],
            counts: &counts[..mid],
        };
        let hi = Half {
            first: mid,
            bases: &bases[mid..],
            counts: &counts[mid..],
        };
        let mut group_starts = Vec::with_capacity(n_groups + 1);
        let mut lo_cursors = Vec::with_capacity(n_groups);
        let mut hi_cursors = Vec::with_capacity(n_groups);
        let mut sum = 0u32;
        for (&l, &h) in lo_groups.iter().zip(&hi_groups) {
            group_starts.push(sum);
            lo_cursors.push([sum, sum + l]);
            hi_cursors.push([sum + l, sum + l + h]);
            sum += l + h;
        }
        group_starts.push(sum);
        // Written slot by slot, without zeroing it first (a 12.8 MB memset for 10 000
        // endpoints).
        let mut points: Vec<u64> = Vec::with_capacity(total as usize);
        let out = Out {
            ptr: points.spare_capacity_mut().as_mut_ptr(),
            len: total as usize,
        };
        parallel::join(
            split,
            || lo.scatter(group_shift, &mut lo_cursors, &out),
            || hi.scatter(group_shift, &mut hi_cursors, &out),
        );
        // SAFETY: the groups' ranges `group_starts[g]..group_starts[g + 1]` partition
        // `0..total`, and the two halves wrote every slot of their shares of each (their
        // cursors reached their ends, checked in `scatter`), so all `total` elements are
        // initialised.
        unsafe { points.set_len(total as usize) };
        let mut points = points.into_boxed_slice();
        let index_of: Box<[u32]> = (0..members.len() as u32).collect();
        let lut_shift = page_shift - super::LUT_BITS;
        let mut luts = vec![0u32; n_pages * (LUT_MASK + 2)].into_boxed_slice();
        // The groups in two halves: each sorted by one thread, in its own scratch.
        let half = if split { n_groups / 2 } else { n_groups };
        let (lo_points, hi_points) = points.split_at_mut(group_starts[half] as usize);
        let (lo_luts, hi_luts) = luts.split_at_mut(half * group_luts);
        let sort = |points: &mut [u64], luts: &mut [u32], starts: &[u32]| {
            let mut scratch = Scratch::default();
            let base = starts[0];
            for (g, luts) in luts.chunks_exact_mut(group_luts).enumerate() {
                let group =
                    &mut points[(starts[g] - base) as usize..(starts[g + 1] - base) as usize];
                sort_pages(group, luts, lut_shift, members, &index_of, &mut scratch);
            }
        };
        parallel::join(
            split,
            || sort(lo_points, lo_luts, &group_starts[..=half]),
            || sort(hi_points, hi_luts, &group_starts[half..]),
        );
        // Each page's table ends with its number of points.
        let mut starts = Vec::with_capacity(n_pages + 1);
        let mut sum = 0u32;
        starts.push(sum);
        for lut in luts.chunks_exact(LUT_MASK + 2) {
            sum += lut[LUT_MASK + 1];
            starts.push(sum);
        }
        let block = Arc::new(Block { points, luts });
        let pages = (0..n_pages)
            .map(|p| {
                let (start, end) = (starts[p] as usize, starts[p + 1] as usize);
                Page::new(&block, start, end - start, p * (LUT_MASK + 2))
            })
            .collect();
        PagedRing {
            pages,
            page_shift,
            lut_shift,
            node_of: index_of.clone(),
            index_of,
            bases: bases.into_boxed_slice(),
            counts: counts.into_boxed_slice(),
            len: total as usize,
            planned: total as usize,
        }
    }
}
