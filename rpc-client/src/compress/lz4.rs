//! lz4-java's block stream (`LZ4BlockOutputStream` / `LZ4BlockInputStream`), what
//! Seata's `Lz4Util` writes: not the LZ4 frame format.
//!
//! Each block: the ASCII magic `LZ4Block`, a token (`0x10` stored or `0x20` LZ4, low
//! nibble = log2(block size) - 10; Seata uses 1024-byte blocks, nibble 0), then
//! compressed length, original length and checksum as little-endian `i32`, then the
//! data. The checksum is XXH32 with seed `0x9747b28c` of the original bytes, masked to
//! 28 bits (lz4-java's `StreamingXXHash32.asChecksum`). The stream ends with an empty
//! block (lengths and checksum 0). lz4_flex does the LZ4 block codec, xxhash-rust the
//! checksum; this file only frames them.

use super::CompressError;

const MAGIC: &[u8; 8] = b"LZ4Block";
const HEADER: usize = 8 + 1 + 4 + 4 + 4;
/// Seata's block size.
const BLOCK: usize = 1024;
const METHOD_RAW: u8 = 0x10;
const METHOD_LZ4: u8 = 0x20;
const SEED: u32 = 0x9747_b28c;
const NAME: &str = "lz4";

fn checksum(data: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(data, SEED) & 0x0FFF_FFFF
}

fn put_header(out: &mut Vec<u8>, token: u8, compressed: usize, original: usize, check: u32) {
    out.extend_from_slice(MAGIC);
    out.push(token);
    out.extend_from_slice(&(compressed as i32).to_le_bytes());
    out.extend_from_slice(&(original as i32).to_le_bytes());
    out.extend_from_slice(&check.to_le_bytes());
}

/// Compresses as `new LZ4BlockOutputStream(out, 1024, fastCompressor())` then `close()`.
pub(super) fn compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 2 + HEADER * (data.len() / BLOCK + 2));
    for chunk in data.chunks(BLOCK) {
        let packed = lz4_flex::block::compress(chunk);
        let check = checksum(chunk);
        if packed.len() >= chunk.len() {
            put_header(&mut out, METHOD_RAW, chunk.len(), chunk.len(), check);
            out.extend_from_slice(chunk);
        } else {
            put_header(&mut out, METHOD_LZ4, packed.len(), chunk.len(), check);
            out.extend_from_slice(&packed);
        }
    }
    put_header(&mut out, METHOD_RAW, 0, 0, 0);
    out
}

fn corrupt(reason: impl Into<String>) -> CompressError {
    CompressError::Corrupt {
        compressor: NAME,
        reason: reason.into(),
    }
}

fn le_i32(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Decompresses a block stream, at most `limit` bytes out. Like lz4-java's reader it
/// stops at the empty end block; a stream that ends at a block boundary without one is
/// accepted too (Seata's `Lz4Util` returns what it read), one that ends inside a block is
/// not.
pub(super) fn decompress(mut data: &[u8], limit: usize) -> Result<Vec<u8>, CompressError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < HEADER {
            return Err(corrupt("stream ends inside a block header"));
        }
        if &data[..8] != MAGIC {
            return Err(corrupt("bad block magic (not lz4-java's LZ4Block stream)"));
        }
        let token = data[8];
        let method = token & 0xF0;
        let block_size = 1usize << (10 + (token & 0x0F) as u32);
        let compressed = le_i32(&data[9..13]);
        let original = le_i32(&data[13..17]);
        let check = u32::from_le_bytes([data[17], data[18], data[19], data[20]]);
        data = &data[HEADER..];
        if original == 0 && compressed == 0 {
            if check != 0 {
                return Err(corrupt("end block with a non-zero checksum"));
            }
            return Ok(out);
        }
        if original < 0
            || compressed < 0
            || original as usize > block_size
            || (method == METHOD_RAW && original != compressed)
            || (method != METHOD_RAW && method != METHOD_LZ4)
        {
            return Err(corrupt(format!(
                "bad block header (token {token:#04x}, lengths {compressed}/{original})"
            )));
        }
        let (compressed, original) = (compressed as usize, original as usize);
        if data.len() < compressed {
            return Err(corrupt("stream ends inside a block"));
        }
        if out.len() + original > limit {
            return Err(CompressError::TooLarge {
                compressor: NAME,
                limit,
            });
        }
        let start = out.len();
        if method == METHOD_RAW {
            out.extend_from_slice(&data[..compressed]);
        } else {
            out.resize(start + original, 0);
            let n = lz4_flex::block::decompress_into(&data[..compressed], &mut out[start..])
                .map_err(|e| corrupt(e.to_string()))?;
            if n != original {
                return Err(corrupt(format!(
                    "block decompressed to {n} bytes, header said {original}"
                )));
            }
        }
        if checksum(&out[start..]) != check {
            return Err(corrupt("block checksum mismatch"));
        }
        data = &data[compressed..];
    }
    Ok(out)
}
