//! Hash functions: stable across processes, so every client maps a key the same way.

use sha2::{Digest, Sha256};

/// XXH3-64 of `bytes`: a specified algorithm (the same value in every process, every
/// version of this crate and every language with an XXH3 library), ~1 ns per 8 bytes.
#[inline]
pub fn key_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// A bijective 64-bit finaliser (SplitMix64 / Stafford variant 13): spreads sequential
/// numbers over the whole ring.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Seata-Java's `ConsistentHashLoadBalance.hash`: SHA-256 over `key` fed twice
/// (`update(key)` then `digest(key)`), first 8 bytes big-endian as a signed long.
///
/// Keys up to 123 bytes (every ring point's text, typical XIDs) are padded
/// by hand in a stack buffer and handed to the SHA-256 compression function
/// directly: the hasher's buffering and finalisation cost about as much as the
/// compression itself (with SHA-NI) on one or two blocks, and a Java ring of 10 000
/// endpoints hashes 100 000 point texts. Longer keys take the hasher.
#[inline]
pub fn java_hash(key: &[u8]) -> i64 {
    // key ‖ key, 0x80, zeros, the message length in bits (64-bit big-endian): whole
    // 64-byte blocks (FIPS 180-4, 5.1.1). The buffer is sized for the key (zeroing
    // four blocks for every short ring-point text is measurable).
    match 2 * key.len() + 9 {
        0..=64 => java_hash_padded::<1>(key),
        65..=128 => java_hash_padded::<2>(key),
        _ if key.len() <= SHORT_KEY => java_hash_padded::<SHORT_BLOCKS>(key),
        _ => java_hash_streamed(key),
    }
}

/// The first 8 bytes of the SHA-256 of a message already padded into `blocks`
/// (FIPS 180-4, 5.1.1), as a big-endian signed long: [`java_hash`] for callers that
/// pad many similar messages in one buffer.
#[inline]
pub(crate) fn sha256_head(blocks: &[[u8; 64]]) -> i64 {
    let mut state = SHA256_IV;
    sha2::block_api::compress256(&mut state, blocks);
    ((u64::from(state[0]) << 32) | u64::from(state[1])) as i64
}

/// [`java_hash`] of a key whose padded message fits in `B` blocks.
#[inline]
fn java_hash_padded<const B: usize>(key: &[u8]) -> i64 {
    let len = 2 * key.len();
    let blocks = (len + 9).div_ceil(64);
    let mut buf = [[0u8; 64]; B];
    let flat = buf.as_flattened_mut();
    flat[..key.len()].copy_from_slice(key);
    flat[key.len()..len].copy_from_slice(key);
    flat[len] = 0x80;
    flat[blocks * 64 - 8..blocks * 64].copy_from_slice(&(len as u64 * 8).to_be_bytes());
    sha256_head(&buf[..blocks])
}

/// Blocks of the stack buffer [`java_hash`] pads short keys in.
const SHORT_BLOCKS: usize = 4;

/// Longest key [`java_hash`] pads by hand: twice the key plus 9 bytes of padding fit
/// in [`SHORT_BLOCKS`] blocks.
const SHORT_KEY: usize = (SHORT_BLOCKS * 64 - 9) / 2;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// [`java_hash`] through the streaming hasher (any length).
fn java_hash_streamed(key: &[u8]) -> i64 {
    let digest = Sha256::new().chain_update(key).chain_update(key).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_jdk17_vector() {
        // seata-compat.md section 3: hash("/127.0.0.1:80910") on JDK 17.
        let h = java_hash(b"/127.0.0.1:80910");
        assert_eq!(h, -3231723763894495209);
        assert_eq!(h as u64, 0xd326_9c5b_f0e1_5817);
    }

    /// The hand-padded path is SHA-256: equal to the streaming hasher at every length
    /// around the block boundaries and the short-key limit.
    #[test]
    fn java_hash_equals_the_streaming_hasher() {
        // `java_hash`'s documentation names the limit.
        assert_eq!(SHORT_KEY, 123);
        let mut rng = fastrand::Rng::with_seed(22);
        for len in 0..=SHORT_KEY + 40 {
            for _ in 0..8 {
                let key: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
                assert_eq!(java_hash(&key), java_hash_streamed(&key), "length {len}");
            }
        }
    }

    #[test]
    fn xxh3_is_the_specified_function() {
        // Reference value of XXH3-64 with seed 0 for the empty input.
        assert_eq!(key_hash(b""), 0x2d06_8005_38d3_94c2);
    }
}
