//! The x86-64 board scans: AVX2 (eight lanes a load) and AVX-512 (sixteen), each
//! read of a page's lanes an aligned vector load in inline assembly (see the parent
//! module's docs for why that is an untorn read of every lane).

use std::arch::asm;
use std::arch::x86_64::*;

use super::{LANES, Page, SMALL_PAGES};

/// Eight lanes of `page` starting at lane `8 * k`, each read untorn (module docs).
///
/// # Safety
/// AVX must be available; `k < LANES / 8`.
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
/// AVX-512F must be available; `k < LANES / 16`.
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

#[inline]
#[target_feature(enable = "avx2")]
fn hmin_epu32(m: __m256i) -> u32 {
    let m = _mm_min_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
    let m = _mm_min_epu32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
    let m = _mm_min_epu32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
    _mm_cvtsi128_si32(m) as u32
}

#[inline]
#[target_feature(enable = "avx2")]
fn hmax_epu32(m: __m256i) -> u32 {
    let m = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
    let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
    let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
    _mm_cvtsi128_si32(m) as u32
}

/// Eight keys of `page` from lane `8 * k` (see [`super::page_min`]), and the
/// running maximum of the raw counts when `W`.
///
/// # Safety
/// AVX2 must be available; `k < LANES / 8`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn keys8<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
    k: usize,
    mx: &mut __m256i,
) -> __m256i {
    // SAFETY: k < LANES / 8; `veto` and `mul` have LANES elements (unaligned loads).
    unsafe {
        let count = load8(page, k);
        let key = if W {
            *mx = _mm256_max_epu32(*mx, count);
            _mm256_mullo_epi32(count, _mm256_loadu_si256(mul.as_ptr().add(8 * k).cast()))
        } else {
            count
        };
        _mm256_or_si256(key, _mm256_loadu_si256(veto.as_ptr().add(8 * k).cast()))
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
    let mut v = [_mm256_setzero_si256(); LANES / 8];
    let mut m = _mm256_set1_epi32(-1);
    let mut mx = _mm256_setzero_si256();
    for (k, slot) in v.iter_mut().enumerate() {
        // SAFETY: k < LANES / 8.
        let x = unsafe { keys8::<W>(page, veto, mul, k, &mut mx) };
        *slot = x;
        m = _mm256_min_epu32(m, x);
    }
    let min = hmin_epu32(m);
    let b = _mm256_set1_epi32(min as i32);
    let mut mask = 0u64;
    for (k, x) in v.iter().enumerate() {
        let eq = _mm256_castsi256_ps(_mm256_cmpeq_epi32(*x, b));
        mask |= u64::from(_mm256_movemask_ps(eq) as u8) << (8 * k);
    }
    (min, mask, if W { hmax_epu32(mx) } else { 0 })
}

/// Two pages at once with AVX2 (see [`ties_small_avx512`]).
///
/// # Safety
/// AVX2 must be available; `pages.len() == 2`; `veto` and `member` (and `mul` when
/// `W`) hold at least two entries.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn ties_pair_avx2<const W: bool>(
    pages: &[std::sync::Arc<Page>],
    veto: &[[u32; LANES]],
    mul: &[[u32; LANES]],
    member: &[u64],
) -> ([u64; 2], u32) {
    const V: usize = LANES / 8;
    let mut mx = _mm256_setzero_si256();
    let mut v = [_mm256_setzero_si256(); 2 * V];
    for p in 0..2 {
        // SAFETY: the contract: two pages, and their arrays.
        let (page, veto, mul) = unsafe {
            (
                pages.get_unchecked(p),
                veto.get_unchecked(p),
                if W {
                    mul.get_unchecked(p)
                } else {
                    veto.get_unchecked(p)
                },
            )
        };
        for k in 0..V {
            // SAFETY: k < LANES / 8.
            v[p * V + k] = unsafe { keys8::<W>(page, veto, mul, k, &mut mx) };
        }
    }
    let mut m = v;
    let mut width = m.len();
    while width > 1 {
        width /= 2;
        for i in 0..width {
            m[i] = _mm256_min_epu32(m[i], m[i + width]);
        }
    }
    let b = _mm256_set1_epi32(hmin_epu32(m[0]) as i32);
    let mut out = [0u64; 2];
    for (p, slot) in out.iter_mut().enumerate() {
        let mut mask = 0u64;
        for k in 0..V {
            let eq = _mm256_castsi256_ps(_mm256_cmpeq_epi32(v[p * V + k], b));
            mask |= u64::from(_mm256_movemask_ps(eq) as u8) << (8 * k);
        }
        // SAFETY: the contract: two entries.
        *slot = mask & unsafe { *member.get_unchecked(p) };
    }
    (out, if W { hmax_epu32(mx) } else { 0 })
}

/// Sixteen keys of `page` from lane `16 * k` (see [`super::page_min`]), and the
/// running maximum of the raw counts when `W`.
///
/// # Safety
/// AVX-512F must be available; `k < LANES / 16`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn keys16<const W: bool>(
    page: &Page,
    veto: &[u32; LANES],
    mul: &[u32; LANES],
    k: usize,
    mx: &mut __m512i,
) -> __m512i {
    // SAFETY: k < LANES / 16; `veto` and `mul` have LANES elements.
    unsafe {
        let count = load16(page, k);
        let key = if W {
            *mx = _mm512_max_epu32(*mx, count);
            _mm512_mullo_epi32(count, _mm512_loadu_si512(mul.as_ptr().add(16 * k).cast()))
        } else {
            count
        };
        _mm512_or_si512(key, _mm512_loadu_si512(veto.as_ptr().add(16 * k).cast()))
    }
}

/// [`super::page_min`] sixteen lanes at a time; the compares yield the tie mask
/// directly (no move-mask and shift per vector).
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
    let mut mx = _mm512_setzero_si512();
    let mut v = [_mm512_setzero_si512(); LANES / 16];
    for (k, slot) in v.iter_mut().enumerate() {
        // SAFETY: k < LANES / 16.
        *slot = unsafe { keys16::<W>(page, veto, mul, k, &mut mx) };
    }
    let m = _mm512_min_epu32(_mm512_min_epu32(v[0], v[1]), _mm512_min_epu32(v[2], v[3]));
    let min = _mm512_reduce_min_epu32(m);
    let b = _mm512_set1_epi32(min as i32);
    let mut mask = 0u64;
    for (k, x) in v.iter().enumerate() {
        mask |= u64::from(_mm512_cmpeq_epi32_mask(*x, b)) << (16 * k);
    }
    (min, mask, if W { _mm512_reduce_max_epu32(mx) } else { 0 })
}

/// Up to [`SMALL_PAGES`] pages at once with AVX-512: all their keys in registers,
/// one vertical minimum, one horizontal reduction, and per page the member lanes
/// equal to the overall minimum (pages beyond `pages.len()` get an empty mask), plus
/// the largest raw count when `W`.
///
/// # Safety
/// AVX-512F must be available; `pages.len() <= SMALL_PAGES`; `veto` and `member`
/// (and `mul` when `W`) are at least as long as `pages`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn ties_small_avx512<const W: bool>(
    pages: &[std::sync::Arc<Page>],
    veto: &[[u32; LANES]],
    mul: &[[u32; LANES]],
    member: &[u64],
) -> ([u64; SMALL_PAGES], u32) {
    const V: usize = LANES / 16;
    let ones = _mm512_set1_epi32(-1);
    let mut mx = _mm512_setzero_si512();
    let mut v = [ones; SMALL_PAGES * V];
    for p in 0..SMALL_PAGES {
        if p < pages.len() {
            // SAFETY: p < pages.len() <= veto.len() (and mul.len() when W).
            let (veto, mul) = unsafe {
                (
                    veto.get_unchecked(p),
                    if W {
                        mul.get_unchecked(p)
                    } else {
                        veto.get_unchecked(p)
                    },
                )
            };
            for k in 0..V {
                // SAFETY: k < LANES / 16.
                v[p * V + k] = unsafe { keys16::<W>(&pages[p], veto, mul, k, &mut mx) };
            }
        }
    }
    let mut m = v;
    let mut width = m.len();
    while width > 1 {
        width /= 2;
        for i in 0..width {
            m[i] = _mm512_min_epu32(m[i], m[i + width]);
        }
    }
    let b = _mm512_set1_epi32(_mm512_reduce_min_epu32(m[0]) as i32);
    let mut out = [0u64; SMALL_PAGES];
    for (p, slot) in out.iter_mut().enumerate() {
        if p < pages.len() {
            let mut mask = 0u64;
            for k in 0..V {
                mask |= u64::from(_mm512_cmpeq_epi32_mask(v[p * V + k], b)) << (16 * k);
            }
            // SAFETY: p < pages.len() <= member.len().
            *slot = mask & unsafe { *member.get_unchecked(p) };
        }
    }
    (out, if W { _mm512_reduce_max_epu32(mx) } else { 0 })
}
