//! What Seata's `ZipUtil` writes: a `java.util.zip.ZipOutputStream` with one entry
//! named `zip`, whose bytes are taken *before* the stream is closed. So there is a
//! local file header, the raw deflate data and a data descriptor, and no central
//! directory: zip libraries that start from the central directory cannot read it, and
//! Java's `ZipInputStream` (what the TC reads with) reads entries front to back. Both
//! directions are written here on top of `flate2`'s raw deflate.

use std::io::Write;

use super::CompressError;

const LOCAL: u32 = 0x0403_4b50;
const DESCRIPTOR: u32 = 0x0807_4b50;
const NAME: &str = "zip";
/// General purpose flags: bit 3 (sizes in the data descriptor), bit 11 (UTF-8 name),
/// as the JDK sets them for a deflated entry without a known CRC.
const FLAGS: u16 = 0x0808;

/// One entry named `zip`, deflated, sizes and CRC in a data descriptor.
pub(super) fn compress(data: &[u8]) -> Vec<u8> {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    let mut deflated =
        flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = deflated.write_all(data);
    let deflated = deflated.finish().unwrap_or_default();
    let mut out = Vec::with_capacity(30 + 3 + deflated.len() + 16);
    out.extend_from_slice(&LOCAL.to_le_bytes());
    out.extend_from_slice(&20u16.to_le_bytes()); // version needed: 2.0 (deflate)
    out.extend_from_slice(&FLAGS.to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes()); // method: deflate
    out.extend_from_slice(&0u32.to_le_bytes()); // DOS time and date
    out.extend_from_slice(&0u32.to_le_bytes()); // CRC (in the descriptor)
    out.extend_from_slice(&0u32.to_le_bytes()); // compressed size (in the descriptor)
    out.extend_from_slice(&0u32.to_le_bytes()); // size (in the descriptor)
    out.extend_from_slice(&(NAME.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // extra field length
    out.extend_from_slice(NAME.as_bytes());
    out.extend_from_slice(&deflated);
    out.extend_from_slice(&DESCRIPTOR.to_le_bytes());
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(deflated.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn corrupt(reason: impl Into<String>) -> CompressError {
    CompressError::Corrupt {
        compressor: NAME,
        reason: reason.into(),
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The first entry's data, at most `limit` bytes, its CRC checked. Anything after the
/// entry (a data descriptor, a central directory from a complete archive) is ignored,
/// as `ZipInputStream` does for Seata's single entry.
pub(super) fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, CompressError> {
    if data.len() < 30 || u32_at(data, 0) != LOCAL {
        return Err(corrupt("no local file header"));
    }
    let flags = u16_at(data, 6);
    let method = u16_at(data, 8);
    let header_crc = u32_at(data, 14);
    let header_csize = u32_at(data, 18) as usize;
    let name_len = u16_at(data, 26) as usize;
    let extra_len = u16_at(data, 28) as usize;
    let start = 30 + name_len + extra_len;
    if data.len() < start {
        return Err(corrupt("local file header runs past the body"));
    }
    let body = &data[start..];
    let (out, used) = match method {
        8 => {
            let mut d = flate2::read::DeflateDecoder::new(body);
            let out = super::read_capped(NAME, &mut d, limit)?;
            (out, d.total_in() as usize)
        }
        0 => {
            if flags & 0x08 != 0 {
                return Err(corrupt("stored entry without sizes in its header"));
            }
            if header_csize > body.len() {
                return Err(corrupt("stored entry runs past the body"));
            }
            if header_csize > limit {
                return Err(CompressError::TooLarge {
                    compressor: NAME,
                    limit,
                });
            }
            (body[..header_csize].to_vec(), header_csize)
        }
        m => return Err(corrupt(format!("unsupported zip method {m}"))),
    };
    let want_crc = if flags & 0x08 != 0 {
        let rest = &body[used.min(body.len())..];
        // The descriptor's signature is optional.
        let at = if rest.len() >= 4 && u32_at(rest, 0) == DESCRIPTOR {
            4
        } else {
            0
        };
        if rest.len() < at + 4 {
            return Err(corrupt("data descriptor missing"));
        }
        u32_at(rest, at)
    } else {
        header_crc
    };
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    if crc.sum() != want_crc {
        return Err(corrupt("CRC mismatch"));
    }
    Ok(out)
}
