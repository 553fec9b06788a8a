//! The x86-64 board scans, written once over the vector width: AVX2 (eight lanes a
//! vector) and AVX-512 (sixteen). Each read of a page's lanes is an aligned vector
//! load in inline assembly (see the parent module's docs for why that is an untorn read
//! of every lane).
//!
//! The scans ([`page_min`], [`ties`]) are generic over a [`Width`] and
//! `#[inline(always)]`, with no target feature of their own; the entry points
//! (`page_min_avx2`, `ties_small_avx512`, ...) enable their width's feature and call
//! them, so each scan is compiled once per width inside a function where that width's
//! intrinsics inline.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{LANES, Page, SMALL_PAGES};

/// The most vectors a scan keeps in registers: one AVX2 page (eight), two AVX2 pages
/// or four AVX-512 pages (sixteen). Both x86-64 widths have sixteen or more vector
/// registers.
const REGS: usize = 16;

/// One vector width of `u32` lanes, and the operations the scans use.
///
/// # Safety
/// An implementation's methods may run only where its instructions are available: the
/// scans are called from functions that enable the width's target feature.
unsafe trait Width {
    /// A vector of [`Self::LANES`] `u32` lanes.
    type V: Copy;
    /// Lanes per vector.
    const LANES: usize;
    /// Lanes `LANES * k ..` of `page`, each read untorn. `k < super::LANES / LANES`.
    unsafe fn load(page: &Page, k: usize) -> Self::V;
    /// An unaligned load of `LANES` values at `p`.
    unsafe fn loadu(p: *const u32) -> Self::V;
    /// Every lane `x`.
    unsafe fn splat(x: u32) -> Self::V;
    /// Lane-wise unsigned minimum.
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise unsigned maximum.
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise product, low 32 bits.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise or.
    unsafe fn or(a: Self::V, b: Self::V) -> Self::V;
    /// The smallest lane (unsigned).
    unsafe fn hmin(v: Self::V) -> u32;
    /// The largest lane (unsigned).
    unsafe fn hmax(v: Self::V) -> u32;
    /// Bit `i` set where lane `i` of `a` equals lane `i` of `b`.
    unsafe fn eq_mask(a: Self::V, b: Self::V) -> u64;
}

/// AVX2: eight lanes.
struct Avx2;
/// AVX-512F: sixteen lanes.
struct Avx512;

/// Eight lanes of `page` starting at lane `8 * k`, each read untorn (module docs).
///
/// # Safety
/// `k < LANES / 8`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load8(page: &Page, k: usize) -> __m256i {
    let v: __m256i;
    // SAFETY: the address is inside the page and 32-byte aligned (the page is
    // 64-byte aligned and 8 lanes are 32 bytes); the load only reads.
    unsafe {
        asm!(
            "vmovdqa {v}, ymmword ptr [{p}]",
            p = in(reg) page.base().add(8 * k),
            v = out(ymm_reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}

/// Sixteen lanes of `page` starting at lane `16 * k`, each read untorn.
///
/// # Safety
/// `k < LANES / 16`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load16(page: &Page, k: usize) -> __m512i {
    let v: __m512i;
    // SAFETY: the address is inside the page and 64-byte aligned (16 lanes are one
    // line of the 64-byte-aligned page); the load only reads.
    unsafe {
        asm!(
            "vmovdqa64 {v}, zmmword ptr [{p}]",
            p = in(reg) page.base().add(16 * k),
            v = out(zmm_reg) v,
            options(nostack, readonly, preserves_flags),
        );
    }
    v
}

/// Folds the eight lanes of `m` with `f` (min or max) in three shuffles.
#[inline]
#[target_feature(enable = "avx2")]
fn fold8(m: __m256i, f: impl Fn(__m128i, __m128i) -> __m128i) -> u32 {
    let m = f(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
    let m = f(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
    let m = f(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
    _mm_cvtsi128_si32(m) as u32
}

// SAFETY: the scans run these only inside functions enabling AVX2.
unsafe impl Width for Avx2 {
    type V = __m256i;
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn load(page: &Page, k: usize) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { load8(page, k) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const u32) -> __m256i {
        // SAFETY: the trait's contract; the caller's pointer has eight values.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn splat(x: u32) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn min(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_min_epu32(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_max_epu32(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_mullo_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn hmin(v: __m256i) -> u32 {
        // SAFETY: the trait's contract.
        unsafe { fold8(v, |a, b| _mm_min_epu32(a, b)) }
    }
    #[inline(always)]
    unsafe fn hmax(v: __m256i) -> u32 {
        // SAFETY: the trait's contract.
        unsafe { fold8(v, |a, b| _mm_max_epu32(a, b)) }
    }
    #[inline(always)]
    unsafe fn eq_mask(a: __m256i, b: __m256i) -> u64 {
        // SAFETY: the trait's contract.
        let bits = unsafe { _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b))) };
        u64::from(bits as u8)
    }
}

// SAFETY: the scans run these only inside functions enabling AVX-512F.
unsafe impl Width for Avx512 {
    type V = __m512i;
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn load(page: &Page, k: usize) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { load16(page, k) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const u32) -> __m512i {
        // SAFETY: the trait's contract; the caller's pointer has sixteen values.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn splat(x: u32) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn min(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_min_epu32(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_max_epu32(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_mullo_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn hmin(v: __m512i) -> u32 {
        // SAFETY: the trait's contract.
        unsafe { _mm512_reduce_min_epu32(v) }
    }
    #[inline(always)]
    unsafe fn hmax(v: __m512i) -> u32 {
        // SAFETY: the trait's contract.
        unsafe { _mm512_reduce_max_epu32(v) }
    }
    #[inline(always)]
    unsafe fn eq_mask(a: __m512i, b: __m512i) -> u64 {
        // SAFETY: the trait's contract. The compare yields the mask directly.
        u64::from(unsafe { _mm512_cmpeq_epi32_mask(a, b) })
    }
}

/// The keys of `page`'s vector `k` (see [`super::page_min`]: the count, times the
/// weight multiplier when `W`, or-ed with the veto), and the running maximum of the raw
/// counts when `W`.
///
/// # Safety
/// `X`'s instructions are available; `k < LANES / X::LANES`.
#[inline(always)]
unsafe fn keys<X: Width, const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
    k: usize,
    mx: &mut X::V,
) -> X::V {
    // SAFETY: the contract; `veto` and `mul` have LANES elements, so `X::LANES` from
    // `X::LANES * k` are inside them.
    unsafe {
        let count = X::load(page, k);
        let key = if W {
            *mx = X::max(*mx, count);
            X::mul(count, X::loadu(mul.as_ptr().add(X::LANES * k)))
        } else {
            count
        };
        X::or(key, X::loadu(veto.as_ptr().add(X::LANES * k)))
    }
}

/// The minimum of `v[..n]` (`n` a power of two), by halving: the vectors are
/// independent, so the CPU overlaps each level's minimums.
///
/// # Safety
/// `X`'s instructions are available; `n` is a power of two, `1 <= n <= REGS`.
#[inline(always)]
unsafe fn tree_min<X: Width>(mut m: [X::V; REGS], n: usize) -> u32 {
    let mut width = n;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            // SAFETY: the contract.
            m[i] = unsafe { X::min(m[i], m[i + width]) };
        }
    }
    // SAFETY: the contract.
    unsafe { X::hmin(m[0]) }
}

/// [`super::page_min`] one vector at a time: the page's smallest key, the mask of its
/// lanes holding it, and the largest raw count when `W`.
///
/// # Safety
/// `X`'s instructions are available.
#[inline(always)]
unsafe fn page_min<X: Width, const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
) -> (u32, u64, u32) {
    let per_page = LANES / X::LANES;
    // SAFETY: the contract, for every call below.
    unsafe {
        let mut mx = X::splat(0);
        let mut v = [X::splat(0); REGS];
        for (k, slot) in v.iter_mut().enumerate().take(per_page) {
            *slot = keys::<X, W>(page, veto, mul, k, &mut mx);
        }
        let min = tree_min::<X>(v, per_page);
        let b = X::splat(min);
        let mut mask = 0u64;
        for (k, x) in v.iter().enumerate().take(per_page) {
            mask |= X::eq_mask(*x, b) << (X::LANES * k);
        }
        (min, mask, if W { X::hmax(mx) } else { 0 })
    }
}

/// Up to `N` pages at once: all their keys in registers, one vertical minimum, one
/// horizontal reduction, and per page the member lanes equal to the overall minimum
/// (pages beyond `pages.len()` get an empty mask), plus the largest raw count when `W`.
///
/// # Safety
/// `X`'s instructions are available; `pages.len() <= N`; `veto` and `member` (and
/// `mul` when `W`) are at least as long as `pages`; `N * LANES / X::LANES <= REGS`.
#[inline(always)]
unsafe fn ties<X: Width, const W: bool, const N: usize>(
    pages: &[std::sync::Arc<Page>],
    veto: &[[u32; LANES]],
    mul: &[[u32; LANES]],
    member: &[u64],
) -> ([u64; N], u32) {
    let per_page = LANES / X::LANES;
    // SAFETY: the contract, for every call below; indexes below `pages.len()` are in
    // every slice.
    unsafe {
        let ones = X::splat(u32::MAX);
        let mut mx = X::splat(0);
        let mut v = [ones; REGS];
        // Loops of constant length with the page count tested inside: they unroll, so
        // `v` stays in registers (a loop bounded by `pages.len()` indexes it in memory).
        for p in 0..N {
            if p < pages.len() {
                let veto = veto.get_unchecked(p);
                let mul = if W { mul.get_unchecked(p) } else { veto };
                for k in 0..per_page {
                    v[p * per_page + k] =
                        keys::<X, W>(pages.get_unchecked(p), veto, mul, k, &mut mx);
                }
            }
        }
        let b = X::splat(tree_min::<X>(v, N * per_page));
        let mut out = [0u64; N];
        for (p, slot) in out.iter_mut().enumerate() {
            if p < pages.len() {
                let mut mask = 0u64;
                for k in 0..per_page {
                    mask |= X::eq_mask(v[p * per_page + k], b) << (X::LANES * k);
                }
                *slot = mask & *member.get_unchecked(p);
            }
        }
        (out, if W { X::hmax(mx) } else { 0 })
    }
}

/// [`super::page_min`] eight lanes at a time.
///
/// # Safety
/// AVX2 must be available.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn page_min_avx2<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
) -> (u32, u64, u32) {
    // SAFETY: AVX2 is enabled here.
    unsafe { page_min::<Avx2, W>(page, veto, mul) }
}

/// [`super::page_min`] sixteen lanes at a time; the compares yield the tie mask
/// directly (no move-mask per vector).
///
/// # Safety
/// AVX-512F must be available.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn page_min_avx512<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
) -> (u32, u64, u32) {
    // SAFETY: AVX-512F is enabled here.
    unsafe { page_min::<Avx512, W>(page, veto, mul) }
}

/// Two pages at once with AVX2 (sixteen vectors in registers; see [`ties`]).
///
/// # Safety
/// AVX2 must be available; `pages.len() <= 2`; `veto` and `member` (and `mul` when
/// `W`) are at least as long as `pages`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn ties_pair_avx2<const W: bool>(
    pages: &[std::sync::Arc<Page>],
    veto: &[[u32; LANES]],
    mul: &[[u32; LANES]],
    member: &[u64],
) -> ([u64; 2], u32) {
    // SAFETY: AVX2 is enabled here; two pages of eight vectors fill REGS.
    unsafe { ties::<Avx2, W, 2>(pages, veto, mul, member) }
}

/// Up to [`SMALL_PAGES`] pages at once with AVX-512 (sixteen vectors in registers;
/// see [`ties`]).
///
/// # Safety
/// AVX-512F must be available; `pages.len() <= SMALL_PAGES`; `veto` and `member` (and
/// `mul` when `W`) are at least as long as `pages`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn ties_small_avx512<const W: bool>(
    pages: &[std::sync::Arc<Page>],
    veto: &[[u32; LANES]],
    mul: &[[u32; LANES]],
    member: &[u64],
) -> ([u64; SMALL_PAGES], u32) {
    // SAFETY: AVX-512F is enabled here; four pages of four vectors fill REGS.
    unsafe { ties::<Avx512, W, SMALL_PAGES>(pages, veto, mul, member) }
}
