//! The fast consistent-hash ring of a large cluster, kept in pages so that a membership
//! change rewrites only the pages it touches.
//!
//! The same points as the flat [`Ring`](super::ring::Ring) (`point_hash(base, p)` for
//! each endpoint's `p`-th point), the same order (hash, then endpoint identity on a
//! tie) and so the same answer for every key. What differs is the layout: the points
//! are split by the top bits of their hash into pages of a few hundred, each with its
//! own lookup table, shared between successive rings (`Arc`). A point names a *node*,
//! a number that stays with an endpoint while it is a member, and the ring maps nodes
//! to the current endpoint indices; so when one endpoint joins a cluster of 10 000, the
//! indices of half the others shift without a point changing, and only the ~160 pages
//! receiving the newcomer's points are rewritten (a fresh ring of 1.6 million points
//! is 12.8 MB: copying it alone would take longer than the whole update should).
//!
//! Building from scratch is also cheaper than the flat ring's at this size: points are
//! scattered into pages a few kilobytes each, and each page is counting-sorted while it
//! sits in the L1 cache.

use std::ptr::NonNull;
use std::sync::Arc;

use meshline_instance::InstanceKey;

use super::ring::{identity_hash, point_hash};
use crate::picker::Members;

/// Rings of at least this many points are paged (about 1640 endpoints at the default
/// 160 points each); smaller ones are flat: one pick is two dependent loads shorter
/// (measured at 1000 endpoints: about 7 ns a pick, a third of it), and a rebuild takes
/// under 3 ms.
pub(crate) const PAGED_MIN_POINTS: u64 = 1 << 18;

/// Points per page aimed at by a fresh build.
const PAGE_POINTS: u64 = 512;

/// Lookup-table bits per page (256 buckets, about two points each).
const LUT_BITS: u32 = 8;
const LUT_MASK: usize = (1 << LUT_BITS) - 1;

/// Marks a node number no endpoint holds.
const FREE: u32 = u32::MAX;

/// Bits of the counting sort that orders a fresh page (two buckets per lookup bucket).
const SORT_BITS: u32 = LUT_BITS + 1;

/// Buffers a fresh build reuses from page to page.
#[derive(Default)]
struct Scratch {
    starts: Vec<u32>,
    points: Vec<u64>,
}

/// Points and lookup tables of one or more pages: a fresh build makes one block for
/// all its pages (one allocation each, written once), an update one per rewritten page.
struct Block {
    /// Per page, sorted `hash << 32 | node`, ties in endpoint identity order.
    points: Box<[u64]>,
    /// Per page, `1 << LUT_BITS` + 1 entries: `lut[b]` is the first point (counted
    /// from the page's start) whose hash bits below the page's own start at or after
    /// bucket `b`; the last entry is the page's number of points.
    luts: Box<[u32]>,
}

/// One page: its points and its lookup table, in a shared [`Block`].
///
/// It points into the block directly rather than holding offsets, so that a lookup
/// reads the page and then the table and the points (no load of the block's own
/// pointers in between): a pick has one dependent load fewer.
#[derive(Clone)]
struct Page {
    /// Keeps `points` and `lut` alive (a block is never changed once built).
    _block: Arc<Block>,
    points: NonNull<u64>,
    len: u32,
    lut: NonNull<u32>,
}

// SAFETY: `points` and `lut` point into the immutable heap slices of `block`, which
// the page keeps alive; reading them from any thread is reading shared `[u64]` and
// `[u32]`, which are `Sync`.
unsafe impl Send for Page {}
// SAFETY: as above.
unsafe impl Sync for Page {}

impl Page {
    /// Page `len` points from `start` in `block`, with the lookup table at `lut`.
    fn new(block: &Arc<Block>, start: usize, len: usize, lut: usize) -> Page {
        let points = &block.points[start..start + len];
        let table = &block.luts[lut..lut + LUT_MASK + 2];
        Page {
            points: NonNull::from(points).cast(),
            len: len as u32,
            lut: NonNull::from(table).cast(),
            _block: block.clone(),
        }
    }

    #[inline]
    fn points(&self) -> &[u64] {
        // SAFETY: `Page::new` took this range from `block.points` (checked by slicing),
        // and `block` is alive and never changed.
        unsafe { std::slice::from_raw_parts(self.points.as_ptr(), self.len as usize) }
    }

    #[inline]
    fn lut(&self) -> &[u32] {
        // SAFETY: as above, for `block.luts`.
        unsafe { std::slice::from_raw_parts(self.lut.as_ptr(), LUT_MASK + 2) }
    }
}

pub(crate) struct PagedRing {
    /// Cloned whole on an update: the fresh build's pages share one block, so that is
    /// a few thousand increments of one reference count.
    pages: Box<[Page]>,
    /// `32 - page bits`.
    page_shift: u32,
    /// `page_shift - LUT_BITS`.
    lut_shift: u32,
    /// Endpoint index of each node ([`FREE`] for an unused number).
    index_of: Box<[u32]>,
    /// Node of each endpoint.
    node_of: Box<[u32]>,
    /// Per node: the identity hash its points derive from, and its number of points.
    bases: Box<[u64]>,
    counts: Box<[u64]>,
    len: usize,
    /// The number of points the page geometry was chosen for.
    planned: usize,
}

/// The node tables of an updated ring (see [`PagedRing::renumber`]).
struct Renumbered {
    index_of: Vec<u32>,
    bases: Vec<u64>,
    counts: Vec<u64>,
    node_of: Vec<u32>,
    /// Nodes of the endpoints that joined.
    joined: Vec<u32>,
    /// Per node number of the old ring: gone.
    removed: Vec<bool>,
}

/// One page after the change: `old`'s points with `moves` (this page's, sorted by
/// hash) applied. Between the hashes that change, the page is copied as it is; at each
/// such hash, the old points that stay and the arrivals are merged in identity order.
fn merge_page<'a>(
    old: &[u64],
    moves: &[(u32, u64, bool)],
    removed: &[bool],
    key: impl Fn(u64) -> &'a InstanceKey,
) -> Vec<u64> {
    let mut points = Vec::with_capacity(old.len() + moves.len());
    let mut pos = 0;
    let mut e = 0;
    while e < moves.len() {
        let h = moves[e].1 >> 32;
        let below = pos + old[pos..].partition_point(|&p| p >> 32 < h);
        points.extend_from_slice(&old[pos..below]);
        let at_h = below + old[below..].partition_point(|&p| p >> 32 == h);
        let e_end = e + moves[e..].iter().take_while(|m| m.1 >> 32 == h).count();
        let mut staying = old[below..at_h]
            .iter()
            .copied()
            .filter(|&p| !removed[p as u32 as usize])
            .peekable();
        let mut arriving = moves[e..e_end]
            .iter()
            .filter(|m| m.2)
            .map(|m| m.1)
            .peekable();
        loop {
            let take_staying = match (staying.peek(), arriving.peek()) {
                (Some(&s), Some(&a)) => key(s) <= key(a),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_staying {
                staying.next()
            } else {
                arriving.next()
            };
            points.extend(next);
        }
        pos = at_h;
        e = e_end;
    }
    points.extend_from_slice(&old[pos..]);
    points
}

impl PagedRing {
    /// This ring updated for a membership change, or `None` when the change is not one
    /// a few pages can absorb (then build afresh): `from[i]` is new endpoint `i`'s index
    /// in the previous membership if it is unchanged there, `left` the previous
    /// endpoints that are gone (or changed), `counts` every new endpoint's points.
    pub(crate) fn update(
        &self,
        members: &Members,
        from: impl Fn(usize) -> Option<usize>,
        left: impl ExactSizeIterator<Item = usize>,
        counts: &[u64],
    ) -> Option<PagedRing> {
        let n = members.len();
        if counts.len() != n {
            return None;
        }
        let n_left = left.len();
        // Large changes are cheaper rebuilt.
        let n_joined = (n + n_left).saturating_sub(self.node_of.len());
        if n_left > n / 8 + 16 || n_joined > n / 8 + 16 {
            return None;
        }
        let r = self.renumber(members, from, left, counts, n_joined)?;
        let len = r.counts.iter().sum::<u64>() as usize;
        if len == 0 || len > self.planned * 2 || len < self.planned / 2 {
            return None;
        }
        let key = |point: u64| members.endpoints[r.index_of[point as u32 as usize] as usize].key();
        let moves = self.moves(&r, key);
        let mut pages: Vec<Page> = self.pages.to_vec();
        let mut k = 0;
        while k < moves.len() {
            let page = moves[k].0 as usize;
            let end = k + moves[k..]
                .iter()
                .take_while(|m| m.0 as usize == page)
                .count();
            let points = merge_page(self.pages[page].points(), &moves[k..end], &r.removed, key);
            pages[page] = Page::indexed(points.into_boxed_slice(), self.lut_shift);
            k = end;
        }
        Some(PagedRing {
            pages: pages.into_boxed_slice(),
            page_shift: self.page_shift,
            lut_shift: self.lut_shift,
            index_of: r.index_of.into_boxed_slice(),
            node_of: r.node_of.into_boxed_slice(),
            bases: r.bases.into_boxed_slice(),
            counts: r.counts.into_boxed_slice(),
            len,
            planned: self.planned,
        })
    }

    /// The node tables after the change: gone nodes freed, joining endpoints given the
    /// freed numbers (lowest first) or new ones, unchanged endpoints kept on theirs.
    /// `None` when an unchanged endpoint's number of points changed (the weights' gcd
    /// or the ring's scale moved: build afresh).
    fn renumber(
        &self,
        members: &Members,
        from: impl Fn(usize) -> Option<usize>,
        left: impl ExactSizeIterator<Item = usize>,
        counts: &[u64],
        n_joined: usize,
    ) -> Option<Renumbered> {
        let mut removed = vec![false; self.index_of.len()];
        let mut free: Vec<u32> = left
            .map(|j| {
                let node = self.node_of[j];
                removed[node as usize] = true;
                node
            })
            .collect();
        free.sort_unstable_by(|a, b| b.cmp(a));
        // Room for the nodes that join without reusing a number: no reallocation.
        let room = self.index_of.len() + n_joined;
        let mut index_of = Vec::with_capacity(room);
        index_of.extend_from_slice(&self.index_of);
        let mut bases = Vec::with_capacity(room);
        bases.extend_from_slice(&self.bases);
        let mut node_counts = Vec::with_capacity(room);
        node_counts.extend_from_slice(&self.counts);
        for &node in &free {
            index_of[node as usize] = FREE;
            node_counts[node as usize] = 0;
        }
        let mut node_of = Vec::with_capacity(counts.len());
        let mut joined: Vec<u32> = Vec::new();
        let mut text = String::new();
        for (i, &count) in counts.iter().enumerate() {
            let node = match from(i) {
                Some(j) => {
                    // An unchanged endpoint keeps its points only if it keeps their
                    // number (the weights' gcd and the ring's scale did not change).
                    let node = self.node_of[j];
                    if count != self.counts[node as usize] {
                        return None;
                    }
                    node
                }
                None => {
                    let node = free.pop().unwrap_or(index_of.len() as u32);
                    if node == FREE {
                        return None;
                    }
                    if node as usize == index_of.len() {
                        index_of.push(FREE);
                        bases.push(0);
                        node_counts.push(0);
                    }
                    bases[node as usize] = identity_hash(members.endpoints[i].key(), &mut text);
                    node_counts[node as usize] = count;
                    joined.push(node);
                    node
                }
            };
            index_of[node as usize] = i as u32;
            node_of.push(node);
        }
        Some(Renumbered {
            index_of,
            bases,
            counts: node_counts,
            node_of,
            joined,
            removed,
        })
    }

    /// Every point that goes or comes, as `(page, point, comes)`, sorted by page, then
    /// hash, departures before arrivals, arrivals of one hash by identity (`key` gives a
    /// point's identity in the new membership).
    fn moves<'a>(
        &self,
        r: &Renumbered,
        key: impl Fn(u64) -> &'a InstanceKey,
    ) -> Vec<(u32, u64, bool)> {
        let mut moves: Vec<(u32, u64, bool)> = Vec::new();
        for (node, &gone) in r.removed.iter().enumerate() {
            if gone {
                for p in 0..self.counts[node] {
                    let h = point_hash(self.bases[node], p);
                    moves.push((
                        h >> self.page_shift,
                        u64::from(h) << 32 | node as u64,
                        false,
                    ));
                }
            }
        }
        for &node in &r.joined {
            for p in 0..r.counts[node as usize] {
                let h = point_hash(r.bases[node as usize], p);
                moves.push((
                    h >> self.page_shift,
                    u64::from(h) << 32 | u64::from(node),
                    true,
                ));
            }
        }
        // By page, then arrivals in ring order (hash, then identity).
        moves.sort_unstable_by(|a, b| {
            (a.0, a.1 >> 32)
                .cmp(&(b.0, b.1 >> 32))
                .then_with(|| match (a.2, b.2) {
                    (true, true) => key(a.1).cmp(key(b.1)),
                    _ => a.2.cmp(&b.2),
                })
        });
        moves
    }

    /// The page and offset of the first point at or after the key hash `h`, wrapping
    /// to the first point of the ring.
    #[inline]
    fn position(&self, h: u64) -> (usize, usize) {
        let h = (h >> 32) as u32;
        let p = (h >> self.page_shift) as usize;
        let page = &self.pages[p];
        let (points, lut) = (page.points(), page.lut());
        let b = (h >> self.lut_shift) as usize & LUT_MASK;
        let mut i = lut[b] as usize;
        let end = lut[b + 1] as usize;
        while i < end && ((points[i] >> 32) as u32) < h {
            i += 1;
        }
        if i < points.len() {
            return (p, i);
        }
        self.next_page(p)
    }

    /// The first point of the first non-empty page after `p`, wrapping around.
    #[cold]
    fn next_page(&self, p: usize) -> (usize, usize) {
        let n = self.pages.len();
        let mut q = p;
        for _ in 0..n {
            q = (q + 1) & (n - 1);
            if self.pages[q].len > 0 {
                return (q, 0);
            }
        }
        (p, 0)
    }

    /// The endpoint of the point at `(page, offset)`.
    #[inline]
    fn endpoint_at(&self, (p, i): (usize, usize)) -> usize {
        self.index_of[self.pages[p].points()[i] as u32 as usize] as usize
    }

    /// The endpoint for the key hash `h`. The ring must not be empty.
    #[inline]
    pub(crate) fn node(&self, h: u64) -> usize {
        self.endpoint_at(self.position(h))
    }

    /// Walks the ring from `h` and returns the first endpoint accepted by `ok` (each
    /// point visited once).
    pub(crate) fn walk(&self, h: u64, mut ok: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let (mut p, mut i) = self.position(h);
        for _ in 0..self.len {
            let e = self.endpoint_at((p, i));
            if ok(e) {
                return Some(e);
            }
            i += 1;
            if i == self.pages[p].len as usize {
                (p, i) = self.next_page(p);
            }
        }
        None
    }

    /// Whether this ring shares any page with `other` (for tests).
    #[cfg(test)]
    pub(crate) fn shares_pages_with(&self, other: &PagedRing) -> bool {
        self.pages
            .iter()
            .zip(other.pages.iter())
            .any(|(a, b)| a.points == b.points && a.len > 0)
    }

    /// Every point as `(hash, endpoint index)`, in ring order (for tests).
    #[cfg(test)]
    pub(crate) fn points(&self) -> Vec<(u32, usize)> {
        self.pages
            .iter()
            .flat_map(|pg| pg.points().iter())
            .map(|&pt| {
                (
                    (pt >> 32) as u32,
                    self.index_of[pt as u32 as usize] as usize,
                )
            })
            .collect()
    }
}

/// Sorts a group of consecutive pages of a fresh build in place (nodes are endpoint
/// indices through `index_of`): hash and node, then identity among equal hashes; and
/// fills their lookup tables (`luts`: one table of `LUT_MASK + 2` entries per page,
/// each ending with its page's number of points). A group is one page, or a power of
/// two of them: the build writes its points by group, and fewer, larger targets (a
/// few thousand points each) cost the scattering writes fewer cache and TLB misses.
///
/// A counting sort on [`SORT_BITS`] bits below each page's own, with `scratch` reused
/// from group to group (it stays in the L1 cache), leaves under one point per bucket on
/// average, and an insertion pass from the scratch back into the group finishes the
/// order. Most points are already in place and most of the others one place out, so
/// the pass takes one branch-free step (order the point and its predecessor) and
/// branches only when the point must go further back: a branch on "already in
/// order", mispredicted for about one point in five, cost as much as the rest of the
/// sort. The same pass notes whether two neighbours share a hash (a few pages of a
/// 10 000-endpoint ring), so that only those groups are scanned for ties.
fn sort_pages(
    points: &mut [u64],
    luts: &mut [u32],
    lut_shift: u32,
    members: &Members,
    index_of: &[u32],
    scratch: &mut Scratch,
) {
    let pages = luts.len() / (LUT_MASK + 2);
    debug_assert!(pages.is_power_of_two() && luts.len() == pages * (LUT_MASK + 2));
    let fine = pages << SORT_BITS;
    let fine_shift = lut_shift - (SORT_BITS - LUT_BITS);
    let bucket = |pt: u64| ((pt >> 32) as u32 >> fine_shift) as usize & (fine - 1);
    let starts = &mut scratch.starts;
    starts.clear();
    starts.resize(fine + 1, 0);
    for &pt in points.iter() {
        starts[bucket(pt) + 1] += 1;
    }
    // Counts to starts, with the running sum in a register.
    let mut sum = 0u32;
    for slot in starts.iter_mut() {
        sum += *slot;
        *slot = sum;
    }
    for (q, lut) in luts.chunks_exact_mut(LUT_MASK + 2).enumerate() {
        let first = q << SORT_BITS;
        let base = starts[first];
        for (b, slot) in lut.iter_mut().enumerate() {
            *slot = starts[first + (b << (SORT_BITS - LUT_BITS))] - base;
        }
    }
    let n = points.len();
    if scratch.points.len() < n {
        scratch.points.resize(n, 0);
    }
    let sorted = &mut scratch.points[..n];
    for &pt in points.iter() {
        let slot = &mut starts[bucket(pt)];
        sorted[*slot as usize] = pt;
        *slot += 1;
    }
    let same_hash = |a: u64, b: u64| a >> 32 == b >> 32;
    let mut ties = false;
    let Some(&first) = sorted.first() else {
        return;
    };
    points[0] = first;
    // The last two points written, kept in registers (reading them back from the
    // page would chain every step through a store and a load).
    let (mut before, mut prev) = (0u64, first);
    for k in 1..n {
        let v = sorted[k];
        let (mut lo, hi) = (v.min(prev), v.max(prev));
        points[k - 1] = lo;
        points[k] = hi;
        ties |= same_hash(lo, hi);
        if k >= 2 {
            ties |= same_hash(before, lo);
            if before > lo {
                // Rare: further back (a bucket of three or more out of order).
                let mut j = k - 1;
                while j > 0 && points[j - 1] > points[j] {
                    points.swap(j - 1, j);
                    j -= 1;
                }
                // The point's new neighbours are the only new adjacencies.
                ties |= (j > 0 && same_hash(points[j - 1], points[j]))
                    || same_hash(points[j], points[j + 1]);
                lo = points[k - 1];
            }
        }
        (before, prev) = (lo, hi);
    }
    // Equal hashes (rare): endpoint identity order, as the flat ring.
    if ties {
        order_ties(points, members, index_of);
    }
}

/// Reorders each run of equal hashes in sorted `points` by endpoint identity (nodes
/// are endpoint indices through `index_of`).
fn order_ties(points: &mut [u64], members: &Members, index_of: &[u32]) {
    let mut k = 0;
    while k + 1 < points.len() {
        if points[k] >> 32 != points[k + 1] >> 32 {
            k += 1;
            continue;
        }
        let h = points[k] >> 32;
        let end = k + points[k..].iter().take_while(|&&p| p >> 32 == h).count();
        points[k..end].sort_by(|a, b| {
            let ka = members.endpoints[index_of[*a as u32 as usize] as usize].key();
            ka.cmp(members.endpoints[index_of[*b as u32 as usize] as usize].key())
        });
        k = end;
    }
}

impl Page {
    /// A page of its own holding `points`, already in ring order, with its lookup
    /// table.
    fn indexed(points: Box<[u64]>, lut_shift: u32) -> Page {
        let mut lut = vec![0u32; LUT_MASK + 2];
        for &pt in points.iter() {
            lut[((pt >> 32) as u32 >> lut_shift) as usize & LUT_MASK] += 1;
        }
        let mut start = 0u32;
        for slot in lut.iter_mut() {
            let count = *slot;
            *slot = start;
            start += count;
        }
        let len = points.len();
        let block = Arc::new(Block {
            points,
            luts: lut.into_boxed_slice(),
        });
        Page::new(&block, 0, len, 0)
    }
}

mod build;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing;
