//! The header blocks this transport writes, and reading the peer's.
//!
//! Ours use no compression state: each block starts with a dynamic-table size update
//! to 0 and then holds literal fields "without indexing" (RFC 7541 §6.3, §6.2.2), so
//! they are valid whatever table size the peer allows and never need its SETTINGS
//! first. They are written once per connection, so nothing is lost by it. The peer's
//! blocks are read with `loona-hpack`, which keeps the dynamic table they use.

use super::GrpcError;

/// Most bytes of decoded header fields a block may hold (names and values).
const MAX_HEADER_LIST: usize = 64 * 1024;

/// A client's request HEADERS: a standard gRPC call of `SeataService.sendRequest`.
pub fn request(authority: &str) -> Vec<u8> {
    block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", super::PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        (
            "user-agent",
            concat!("meshline/", env!("CARGO_PKG_VERSION")),
        ),
    ])
}

/// The HEADERS Seata's `GrpcEncoder` opens its side of the stream with (a server's
/// answer, and a Java client's request alike).
pub fn java_open() -> Vec<u8> {
    block(&[
        (":status", "200"),
        ("grpc-status", "0"),
        ("content-type", "application/grpc"),
    ])
}

/// A header block of literal fields without indexing.
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    // Dynamic table size update to 0: 001 prefix, 5-bit integer.
    let mut out = vec![0x20];
    for (name, value) in fields {
        // Literal without indexing, new name: a zero byte, then the two strings.
        out.push(0x00);
        string(&mut out, name.as_bytes());
        string(&mut out, value.as_bytes());
    }
    out
}

/// A string literal, not Huffman coded: 7-bit prefix length, then the bytes.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, s.len(), 7, 0x00);
    out.extend_from_slice(s);
}

/// An HPACK integer (RFC 7541 §5.1) with an `n`-bit prefix under `flags`.
fn integer(out: &mut Vec<u8>, mut v: usize, n: u8, flags: u8) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// The peer's header blocks, read in order with one decoder per connection.
pub struct Reader {
    hpack: loona_hpack::Decoder<'static>,
}

impl Reader {
    pub fn new() -> Reader {
        Reader {
            hpack: loona_hpack::Decoder::new(),
        }
    }

    /// The fields of one complete header block.
    pub fn read(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, GrpcError> {
        let mut fields = Vec::new();
        let mut size = 0usize;
        let mut over = false;
        self.hpack
            .decode_with_cb(block, |name, value| {
                size += name.len() + value.len() + 32;
                if size > MAX_HEADER_LIST {
                    over = true;
                    return;
                }
                fields.push((
                    String::from_utf8_lossy(&name).into_owned(),
                    String::from_utf8_lossy(&value).into_owned(),
                ));
            })
            .map_err(|e| GrpcError::Http2(format!("HPACK: {e:?}")))?;
        if over {
            return Err(GrpcError::Http2(format!(
                "a header list over {MAX_HEADER_LIST} bytes"
            )));
        }
        Ok(fields)
    }
}
