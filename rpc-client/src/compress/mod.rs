//! Body compression as Seata does it (`transport.compressor`), byte-compatible with
//! Seata Java's compressors, and decompression that cannot be made to allocate more
//! than a frame's worth.
//!
//! A Seata frame's byte 11 names the compressor of its body; the whole body (type code
//! included) is compressed. Requests use the sender's `transport.compressor`, responses
//! echo the request's (`docs/seata-compat.md`, and Seata's `AbstractNettyRemoting`),
//! so a client must read whatever a TC is configured with.
//!
//! | code | name | format (what Java's `*Util` writes) | crate |
//! |---|---|---|---|
//! | 0 | none | the body as is | |
//! | 1 | gzip | RFC 1952, one member | `flate2` |
//! | 2 | zip | one entry named `zip`: local header, raw deflate, data descriptor, no central directory (`zip` module) | `flate2` |
//! | 3 | 7z | removed from Seata in 1.8.0; refused with a message | |
//! | 4 | bzip2 | bzip2 without the leading `BZ` (Ant's `CBZip2OutputStream`) | `bzip2` |
//! | 5 | lz4 | lz4-java's `LZ4BlockOutputStream`, 1024-byte blocks (`lz4` module) | `lz4_flex`, `xxhash-rust` |
//! | 6 | deflater | zlib, RFC 1950 (`java.util.zip.Deflater`) | `flate2` |
//! | 7 | zstd | one zstd frame with its content size, level 3 | `zstd` |
//!
//! # The decompression cap
//!
//! Seata Java decompresses without a limit: a few kilobytes of zeros compressed with
//! any of these formats expand to gigabytes (a "zip bomb"). Every decoder here stops
//! at a cap (the connection's frame limit, 8 MiB by default) and reports
//! [`CompressError::TooLarge`] instead of allocating more.

mod lz4;
mod zip;

use std::io::Read;

use bytes::Bytes;

/// The compressors Seata defines (`CompressorType`), by their wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compressor {
    /// 0: not compressed.
    #[default]
    None,
    /// 1: gzip.
    Gzip,
    /// 2: zip (one entry).
    Zip,
    /// 3: 7z; defined by Seata but removed in 1.8.0. Refused.
    SevenZ,
    /// 4: bzip2 (without its `BZ` magic).
    Bzip2,
    /// 5: lz4-java's block stream.
    Lz4,
    /// 6: zlib (`Deflater`).
    Deflater,
    /// 7: zstd.
    Zstd,
}

/// Why a body could not be compressed or decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The frame names a compressor code Seata does not define.
    #[error("unknown compressor code {0} (Seata defines 0..=7)")]
    UnknownCode(u8),
    /// `transport.compressor` names no compressor.
    #[error("unknown compressor `{0}`: use none, gzip, zip, bzip2, lz4, deflater or zstd")]
    UnknownName(String),
    /// 7z: Seata removed it in 1.8.0 and no TC since reads it.
    #[error(
        "the 7z compressor (code 3) is not supported: Seata removed it in 1.8.0; use zstd, gzip or lz4"
    )]
    SevenZ,
    /// Decompressing would exceed the cap.
    #[error("{compressor} body decompresses to more than {limit} bytes (the frame limit); refused")]
    TooLarge {
        /// The compressor.
        compressor: &'static str,
        /// The cap.
        limit: usize,
    },
    /// The compressed bytes are not valid for the format.
    #[error("{compressor} body is corrupt: {reason}")]
    Corrupt {
        /// The compressor.
        compressor: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Compressor {
    /// Every compressor, by code.
    pub const ALL: [Compressor; 8] = [
        Compressor::None,
        Compressor::Gzip,
        Compressor::Zip,
        Compressor::SevenZ,
        Compressor::Bzip2,
        Compressor::Lz4,
        Compressor::Deflater,
        Compressor::Zstd,
    ];

    /// The wire code (frame byte 11).
    pub fn code(self) -> u8 {
        match self {
            Compressor::None => 0,
            Compressor::Gzip => 1,
            Compressor::Zip => 2,
            Compressor::SevenZ => 3,
            Compressor::Bzip2 => 4,
            Compressor::Lz4 => 5,
            Compressor::Deflater => 6,
            Compressor::Zstd => 7,
        }
    }

    /// The compressor for a wire code.
    pub fn from_code(code: u8) -> Result<Compressor, CompressError> {
        Compressor::ALL
            .get(code as usize)
            .copied()
            .ok_or(CompressError::UnknownCode(code))
    }

    /// Seata's name (`transport.compressor` value, lower case).
    pub fn name(self) -> &'static str {
        match self {
            Compressor::None => "none",
            Compressor::Gzip => "gzip",
            Compressor::Zip => "zip",
            Compressor::SevenZ => "7z",
            Compressor::Bzip2 => "bzip2",
            Compressor::Lz4 => "lz4",
            Compressor::Deflater => "deflater",
            Compressor::Zstd => "zstd",
        }
    }

    /// The compressor a `transport.compressor` value names (any case; Seata's names,
    /// `sevenz` and `7z` alike). 7z is refused: no Seata since 1.8.0 reads it.
    pub fn from_name(name: &str) -> Result<Compressor, CompressError> {
        let n = name.trim().to_ascii_lowercase();
        let c = match n.as_str() {
            "none" | "" => Compressor::None,
            "gzip" => Compressor::Gzip,
            "zip" => Compressor::Zip,
            "7z" | "sevenz" => return Err(CompressError::SevenZ),
            "bzip2" => Compressor::Bzip2,
            "lz4" => Compressor::Lz4,
            "deflater" => Compressor::Deflater,
            "zstd" => Compressor::Zstd,
            _ => return Err(CompressError::UnknownName(name.trim().to_string())),
        };
        Ok(c)
    }

    /// Compresses `data` the way Seata Java does.
    pub fn compress(self, data: &[u8]) -> Result<Bytes, CompressError> {
        use flate2::Compression;
        use std::io::Write;
        let io = |e: std::io::Error| CompressError::Corrupt {
            compressor: self.name(),
            reason: e.to_string(),
        };
        Ok(match self {
            Compressor::None => Bytes::copy_from_slice(data),
            Compressor::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
                e.write_all(data).map_err(io)?;
                e.finish().map_err(io)?.into()
            }
            Compressor::Deflater => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
                e.write_all(data).map_err(io)?;
                e.finish().map_err(io)?.into()
            }
            Compressor::Zip => zip::compress(data).into(),
            Compressor::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
                e.write_all(data).map_err(io)?;
                let mut out = e.finish().map_err(io)?;
                // Ant's CBZip2OutputStream writes no "BZ" magic; Seata's TC expects none.
                out.drain(..2);
                out.into()
            }
            Compressor::Lz4 => lz4::compress(data).into(),
            Compressor::Zstd => zstd::bulk::compress(data, 3).map_err(io)?.into(),
            Compressor::SevenZ => return Err(CompressError::SevenZ),
        })
    }

    /// Decompresses `data`, refusing to produce more than `limit` bytes.
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Bytes, CompressError> {
        let name = self.name();
        let out = match self {
            Compressor::None => {
                if data.len() > limit {
                    return Err(CompressError::TooLarge {
                        compressor: name,
                        limit,
                    });
                }
                return Ok(Bytes::copy_from_slice(data));
            }
            Compressor::Gzip => read_capped(name, flate2::read::MultiGzDecoder::new(data), limit)?,
            Compressor::Deflater => read_capped(name, flate2::read::ZlibDecoder::new(data), limit)?,
            Compressor::Zip => zip::decompress(data, limit)?,
            Compressor::Bzip2 => {
                let with_magic = (&b"BZ"[..]).chain(data);
                read_capped(name, bzip2::read::BzDecoder::new(with_magic), limit)?
            }
            Compressor::Lz4 => lz4::decompress(data, limit)?,
            Compressor::Zstd => {
                let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(|e| {
                    CompressError::Corrupt {
                        compressor: name,
                        reason: e.to_string(),
                    }
                })?;
                // A frame may ask for a window of up to 128 MiB; a body never needs more
                // than the frame limit (window log 23 = 8 MiB, or the cap if larger).
                let log = (usize::BITS - limit.max(1).leading_zeros()).clamp(10, 27);
                d.window_log_max(log).map_err(|e| CompressError::Corrupt {
                    compressor: name,
                    reason: e.to_string(),
                })?;
                read_capped(name, d, limit)?
            }
            Compressor::SevenZ => return Err(CompressError::SevenZ),
        };
        Ok(out.into())
    }
}

impl std::fmt::Display for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads `r` to its end, failing once more than `limit` bytes come out.
pub(crate) fn read_capped(
    compressor: &'static str,
    r: impl Read,
    limit: usize,
) -> Result<Vec<u8>, CompressError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap)
        .read_to_end(&mut out)
        .map_err(|e| CompressError::Corrupt {
            compressor,
            reason: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(CompressError::TooLarge { compressor, limit });
    }
    Ok(out)
}

/// Decompresses a body whose frame says compressor `code`, up to `limit` bytes.
pub fn decompress(code: u8, data: &[u8], limit: usize) -> Result<Bytes, CompressError> {
    Compressor::from_code(code)?.decompress(data, limit)
}

#[cfg(test)]
mod tests;
