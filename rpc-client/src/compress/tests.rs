//! Each compressor against bytes written by an independent implementation (Python's
//! zlib, gzip, bz2 and zipfile, which for gzip and deflate wrap the same zlib Java's
//! `Deflater` does; the LZ4 block and its XXH32 checksum computed by a separate
//! Python script from lz4-java's format description), both ways where the format is
//! deterministic, round trips for all, and the decompression cap.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A GlobalBeginRequest body (20 bytes), three times.
const DATA: &str = "00010000ea60000c6f726465722d63726561746500010000ea60000c6f726465722d63726561746500010000ea60000c6f726465722d637265617465";
const LIMIT: usize = 8 * 1024 * 1024;

#[test]
fn reads_what_independent_implementations_write() {
    let data = hex(DATA);
    let cases: &[(Compressor, &str)] = &[
        // python3: zlib.compress(data, 6): Java's `new Deflater()` is zlib level 6.
        (
            Compressor::Deflater,
            "789c636064607895c0c0935f94925aa49b5c949a5892ca40a418000895123d",
        ),
        // python3: gzip.compress(data, 6, mtime=0).
        (
            Compressor::Gzip,
            "1f8b0800000000000003636064607895c0c0935f94925aa49b5c949a5892ca40a418007d1401e73c000000",
        ),
        // python3: bz2.compress(data, 9)[2:] (Ant's stream has no "BZ").
        (
            Compressor::Bzip2,
            "683931415926535923b90ff80000025181600400026e009400001020003100d0015feaa0027ea957195d4a79186d7455f3aca223cfc5dc914e142408ee43fe00",
        ),
        // What ZipUtil returns: local header (flags 0x0808), raw deflate, data
        // descriptor, no central directory (assembled with Python's zlib and struct).
        (
            Compressor::Zip,
            "504b03041400080808002e6b8359000000000000000000000000030000007a6970636064607895c0c0935f94925aa49b5c949a5892ca40a41800504b07087d1401e7190000003c000000",
        ),
        // A complete archive from Python's zipfile (sizes in the header, central
        // directory after): ZipInputStream reads it, so must we.
        (
            Compressor::Zip,
            "504b03041400000008009771835d7d1401e7190000003c000000030000007a6970636064607895c0c0935f94925aa49b5c949a5892ca40a41800504b010214031400000008009771835d7d1401e7190000003c0000000300000000000000000000008001000000007a6970504b05060000000001000100310000003a0000000000",
        ),
    ];
    for (c, wire) in cases {
        let got = c
            .decompress(&hex(wire), LIMIT)
            .unwrap_or_else(|e| panic!("{c}: {e}"));
        assert_eq!(&got[..], &data[..], "{c}");
    }
}

#[test]
fn lz4_block_stream_is_lz4_javas_byte_for_byte() {
    // "hello" does not shrink, so it is stored (token 0x10); checksum XXH32(seed
    // 0x9747b28c) & 0x0fffffff = 0x0a41bfe3, then the 21-byte end block. Computed by
    // an independent Python XXH32.
    let wire = hex(
        "4c5a34426c6f636b100500000005000000e3bf410a68656c6c6f4c5a34426c6f636b10000000000000000000000000",
    );
    assert_eq!(Compressor::Lz4.compress(b"hello").unwrap(), &wire[..]);
    assert_eq!(
        Compressor::Lz4.decompress(&wire, LIMIT).unwrap(),
        &b"hello"[..]
    );
}

#[test]
fn compressed_bodies_carry_the_headers_java_reads() {
    let data = hex(DATA);
    // flate2's deflate differs from zlib's in general; what matters to a Java peer is
    // that its Inflater reads ours: the zlib header and Adler-32 trailer must be there.
    let z = Compressor::Deflater.compress(&data).unwrap();
    assert_eq!(&z[..2], &[0x78, 0x9c]);
    let adler = {
        let (mut a, mut b) = (1u32, 0u32);
        for x in &data {
            a = (a + *x as u32) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    };
    assert_eq!(&z[z.len() - 4..], &adler.to_be_bytes());
    let g = Compressor::Gzip.compress(&data).unwrap();
    assert_eq!(&g[..3], &[0x1f, 0x8b, 0x08]);
    let bz = Compressor::Bzip2.compress(&data).unwrap();
    assert_eq!(
        &bz[..2],
        b"h9",
        "Ant's bzip2 stream starts at the block size"
    );
    let zip = Compressor::Zip.compress(&data).unwrap();
    assert_eq!(&zip[..4], b"PK\x03\x04");
    assert_eq!(&zip[30..33], b"zip", "the one entry is named `zip`");
    let zs = Compressor::Zstd.compress(&data).unwrap();
    assert_eq!(&zs[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(&zs).ok(),
        Some(Some(data.len() as u64)),
        "Java sizes its output from the frame's content size: it must be there"
    );
}

#[test]
fn every_compressor_round_trips() {
    let small = hex(DATA);
    let big: Vec<u8> = (0..100_000u32)
        .map(|i| (i % 251) as u8 ^ (i >> 9) as u8)
        .collect();
    for c in Compressor::ALL {
        if c == Compressor::SevenZ {
            continue;
        }
        for data in [&small[..], &big[..], &[][..]] {
            let z = c.compress(data).unwrap();
            assert_eq!(&c.decompress(&z, LIMIT).unwrap()[..], data, "{c}");
            assert_eq!(decompress(c.code(), &z, LIMIT).unwrap(), data, "{c}");
        }
    }
}

#[test]
fn a_bomb_stops_at_the_cap() {
    // 4 MiB of zeros compresses to a few KiB; with a 1 MiB cap every decoder stops.
    let zeros = vec![0u8; 4 * 1024 * 1024];
    let cap = 1024 * 1024;
    for c in Compressor::ALL {
        if matches!(c, Compressor::SevenZ) {
            continue;
        }
        let z = c.compress(&zeros).unwrap();
        if c != Compressor::None {
            assert!(z.len() < 300 * 1024, "{c}: {} bytes", z.len());
        }
        let err = c.decompress(&z, cap).unwrap_err();
        assert_eq!(
            err,
            CompressError::TooLarge {
                compressor: c.name(),
                limit: cap
            },
            "{c}"
        );
        assert!(err.to_string().contains("more than 1048576 bytes"), "{err}");
    }
}

#[test]
fn names_codes_and_refusals() {
    for c in Compressor::ALL {
        assert_eq!(Compressor::from_code(c.code()), Ok(c));
        if c != Compressor::SevenZ {
            assert_eq!(Compressor::from_name(&c.name().to_uppercase()), Ok(c));
        }
    }
    assert_eq!(Compressor::from_name("sevenz"), Err(CompressError::SevenZ));
    assert_eq!(Compressor::from_name("7Z"), Err(CompressError::SevenZ));
    assert!(
        CompressError::SevenZ
            .to_string()
            .contains("removed it in 1.8.0"),
        "{}",
        CompressError::SevenZ
    );
    assert_eq!(
        Compressor::from_name("snappy"),
        Err(CompressError::UnknownName("snappy".into()))
    );
    assert_eq!(Compressor::from_code(8), Err(CompressError::UnknownCode(8)));
    assert_eq!(
        decompress(3, b"7z\xbc\xaf", LIMIT),
        Err(CompressError::SevenZ)
    );
}

#[test]
fn corrupt_bodies_are_errors_naming_the_compressor() {
    let data = hex(DATA);
    for c in Compressor::ALL {
        if matches!(c, Compressor::None | Compressor::SevenZ) {
            continue;
        }
        let z = c.compress(&data).unwrap();
        // Truncated in the middle, and garbage.
        for bad in [&z[..z.len() / 2], &b"not compressed at all, just text"[..]] {
            match c.decompress(bad, LIMIT) {
                Err(CompressError::Corrupt { compressor, .. }) => assert_eq!(compressor, c.name()),
                other => panic!("{c}: {other:?}"),
            }
        }
    }
    // A checksum that does not match is caught (lz4, zip).
    let mut lz = Compressor::Lz4.compress(&data).unwrap().to_vec();
    lz[17] ^= 1;
    assert!(matches!(
        Compressor::Lz4.decompress(&lz, LIMIT),
        Err(CompressError::Corrupt { reason, .. }) if reason.contains("checksum")
    ));
    let mut zip = Compressor::Zip.compress(&data).unwrap().to_vec();
    let n = zip.len();
    zip[n - 12] ^= 1;
    assert!(matches!(
        Compressor::Zip.decompress(&zip, LIMIT),
        Err(CompressError::Corrupt { reason, .. }) if reason.contains("CRC")
    ));
}

proptest::proptest! {
    /// No byte string makes a decoder panic or exceed the cap.
    #[test]
    fn random_input_never_panics(
        code in 0u8..9,
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
    ) {
        if let Ok(out) = decompress(code, &body, 4096) {
            proptest::prop_assert!(out.len() <= 4096);
        }
    }
}
