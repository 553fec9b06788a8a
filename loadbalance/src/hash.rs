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
#[inline]
pub fn java_hash(key: &[u8]) -> i64 {
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

    #[test]
    fn xxh3_is_the_specified_function() {
        // Reference value of XXH3-64 with seed 0 for the empty input.
        assert_eq!(key_hash(b""), 0x2d06_8005_38d3_94c2);
    }
}
