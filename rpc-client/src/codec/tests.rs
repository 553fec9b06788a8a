use super::*;

pub(crate) fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn encode(f: &Frame) -> Vec<u8> {
    let mut b = BytesMut::new();
    FrameCodec::default().encode(f, &mut b).unwrap();
    b.to_vec()
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
    let mut c = FrameCodec::default();
    let mut b = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(f) = c.decode(&mut b)? {
        out.push(f);
    }
    assert!(b.is_empty(), "left over bytes: {b:?}");
    Ok(out)
}

#[test]
fn ping_pong_vectors() {
    // docs/seata-compat.md §4.3
    let ping = hex("dada0100000010001003010000000001");
    assert_eq!(encode(&Frame::ping(1)), ping);
    let f = decode_all(&ping).unwrap().remove(0);
    assert_eq!(f, Frame::ping(1));
    let pong = hex("dada0100000010001004010000000001");
    assert_eq!(encode(&Frame::pong_for(&f)), pong);
}

#[test]
fn ping_with_head_vector() {
    let v = hex("dada010000001600160301000000000700016b000176");
    let mut f = Frame::ping(7);
    f.head.insert("k", "v");
    assert_eq!(encode(&f), v);
    let d = decode_all(&v).unwrap().remove(0);
    assert_eq!(d.head.get("k"), Some("v"));
    assert_eq!(d, f);
}

#[test]
fn null_and_empty_head_values() {
    let mut f = Frame::ping(9);
    f.head.insert_opt("n", None);
    f.head.insert("e", "");
    let bytes = encode(&f);
    let d = decode_all(&bytes).unwrap().remove(0);
    assert_eq!(
        d.head.iter().collect::<Vec<_>>(),
        vec![("n", None), ("e", Some(""))]
    );
}

#[test]
fn decodes_byte_by_byte_and_back_to_back() {
    let mut f = Frame::ping(3);
    f.msg_type = MessageType::Request;
    f.head.insert("player", "42");
    f.body = Bytes::from_static(b"hello");
    let one = encode(&f);
    let mut stream = one.clone();
    stream.extend_from_slice(&encode(&Frame::ping(4)));
    let mut c = FrameCodec::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in &stream {
        buf.put_u8(*b);
        if let Some(x) = c.decode(&mut buf).unwrap() {
            got.push(x);
        }
    }
    assert_eq!(got, vec![f, Frame::ping(4)]);
}

#[test]
fn faults_are_named() {
    let cases: &[(&str, &str)] = &[
        ("dbda01", "bad magic 0xdbda"),
        ("dada02", "unsupported protocol version 2"),
        ("dada010000000f", "full length 15"),
        ("dada0180000000", "full length -2147483648"),
        (
            "dada010080000100",
            "8388609 bytes exceeds the 8388608-byte limit",
        ),
        ("dada0100000010000f", "head length 15"),
        ("dada0100000010001100", "head length 17"),
        ("dada010000001000100901", "unknown message type 9"),
        // head map: key length says 5 but only 1 byte left before the body.
        ("dada010000001300130001000000000100050a", "entry runs past"),
        // head map: odd single byte.
        ("dada0100000011001100010000000001ff", "truncated key length"),
        // head map: key length -2.
        (
            "dada01000000120012000100000000fffffe",
            "negative string length",
        ),
        // head map: null key.
        ("dada0100000014001400010000000001ffff0000", "null key"),
        // head map: invalid UTF-8 key.
        ("dada0100000015001500010000000001000180ffff", "not UTF-8"),
    ];
    for (input, want) in cases {
        let err = decode_all(&hex(input)).expect_err(input).to_string();
        assert!(err.contains(want), "{input}: `{err}` lacks `{want}`");
    }
}

#[test]
fn limit_is_checked_before_allocating() {
    let mut c = FrameCodec::new(1024);
    let mut b = BytesMut::from(&hex("dada0100000401")[..]);
    let err = c.decode(&mut b).unwrap_err().to_string();
    assert!(
        err.contains("1025 bytes exceeds the 1024-byte limit"),
        "{err}"
    );
    assert!(b.capacity() < 1024);
    // A frame at the limit is accepted.
    let f = Frame {
        body: Bytes::from(vec![7u8; 1024 - HEADER_LEN]),
        ..Frame::ping(1)
    };
    let mut out = BytesMut::new();
    c.encode(&f, &mut out).unwrap();
    assert_eq!(c.decode(&mut out).unwrap().unwrap(), f);
    // One more byte is refused on encode, too.
    let f2 = Frame {
        body: Bytes::from(vec![7u8; 1025 - HEADER_LEN]),
        ..Frame::ping(1)
    };
    assert!(matches!(
        c.encode(&f2, &mut BytesMut::new()),
        Err(FrameError::TooLong { len: 1025, .. })
    ));
}

#[test]
fn an_announced_length_is_not_reserved_before_the_bytes_arrive() {
    // A header announcing an 8 MiB request, then nothing more: the buffer must not
    // grow to the announced size (1,000 such peers would pin 8 GiB).
    let mut c = FrameCodec::default();
    let mut b = BytesMut::with_capacity(64);
    b.extend_from_slice(&hex("dada0100800000001000010000000007"));
    assert!(c.decode(&mut b).unwrap().is_none());
    assert!(b.capacity() < 4096, "capacity {}", b.capacity());
}

#[test]
fn a_repeated_head_key_keeps_its_last_value_as_java_does() {
    let mut wire = BytesMut::new();
    let mut f = Frame::ping(5);
    f.msg_type = MessageType::Request;
    f.head.insert("account", "attacker");
    f.head.insert("other", "x");
    f.encode_into(&mut wire, DEFAULT_MAX_FRAME_LEN).unwrap();
    // Append a second `account` entry to the head map by hand and fix the lengths.
    let extra = [&[0u8, 7][..], b"account", &[0, 6], b"victim"].concat();
    let head_end = HEADER_LEN + f.head.encoded_len().unwrap();
    let mut bytes = wire.to_vec();
    bytes.splice(head_end..head_end, extra.iter().copied());
    let full = bytes.len() as i32;
    bytes[3..7].copy_from_slice(&full.to_be_bytes());
    let head = (head_end + extra.len()) as i16;
    bytes[7..9].copy_from_slice(&head.to_be_bytes());
    let d = decode_all(&bytes).unwrap().remove(0);
    assert_eq!(d.head.get("account"), Some("victim"));
    assert_eq!(d.head.len(), 2, "{:?}", d.head);
    // The same with more than 16 entries (the indexed path).
    let mut many = HeadMap::new();
    for i in 0..40 {
        many.insert(format!("k{i}"), "first");
    }
    let mut raw = BytesMut::new();
    many.encode_into(&mut raw);
    for i in (0..40).step_by(3) {
        HeadMap::from_iter([(format!("k{i}"), "last")]).encode_into(&mut raw);
    }
    let m = HeadMap::decode(&raw).unwrap();
    assert_eq!(m.len(), 40);
    for i in 0..40 {
        let want = if i % 3 == 0 { "last" } else { "first" };
        assert_eq!(m.get(&format!("k{i}")), Some(want), "k{i}");
    }
}

#[test]
fn a_cloned_head_map_is_copied_on_write_only() {
    let mut a = HeadMap::with_capacity(2);
    assert!(a.is_empty());
    assert_eq!(
        a,
        HeadMap::new(),
        "an empty map with room equals an empty one"
    );
    a.insert("m", "1");
    a.insert(String::from("owned"), "x");
    let mut b = a.clone();
    // Shared until one side changes.
    assert!(std::ptr::eq(a.slice(), b.slice()));
    b.insert("m", "2");
    b.insert_opt("n", None);
    assert_eq!(
        a.get("m"),
        Some("1"),
        "the original is untouched by the clone's insert"
    );
    assert_eq!(a.len(), 2);
    assert_eq!(b.get("m"), Some("2"));
    assert_eq!(b.len(), 3);
    let c = a.clone();
    assert_eq!(a.remove("owned"), Some(Some("x".to_string())));
    assert_eq!(
        c.get("owned"),
        Some("x"),
        "the clone keeps what the original removed"
    );
    assert_eq!(a.remove("m"), Some(Some("1".to_string())));
    assert_eq!(a.remove("m"), None);
    assert_eq!(a, HeadMap::new(), "emptied by removals equals empty");
    assert_eq!(format!("{c:?}"), r#"{"m": Some("1"), "owned": Some("x")}"#);
    // A shared map encodes as an owned one: the wire vector of `ping_with_head_vector`.
    let mut owned = HeadMap::new();
    owned.insert(String::from("k"), "v");
    let mut f = Frame::ping(7);
    f.head = owned.clone();
    let _keep_shared = owned;
    assert_eq!(
        encode(&f),
        hex("dada010000001600160301000000000700016b000176")
    );
}

#[test]
fn head_entry_too_long_is_refused_on_encode() {
    let mut f = Frame::ping(1);
    f.head.insert("k", "x".repeat(40_000));
    assert!(matches!(
        FrameCodec::default().encode(&f, &mut BytesMut::new()),
        Err(FrameError::HeadEntryTooLong { len: 40_000 })
    ));
}

fn arb_frame() -> impl proptest::strategy::Strategy<Value = Frame> {
    use proptest::prelude::*;
    (
        0u8..5,
        any::<u8>(),
        any::<u8>(),
        any::<u32>(),
        proptest::collection::vec(("\\PC{0,8}", proptest::option::of("\\PC{0,8}")), 0..4),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(t, codec, compressor, id, head, body)| {
            let mut h = HeadMap::new();
            for (k, v) in head {
                h.insert_opt(k, v);
            }
            Frame {
                msg_type: MessageType::from_code(t).unwrap(),
                codec,
                compressor,
                request_id: id,
                head: h,
                body: Bytes::from(body),
            }
        })
}

proptest::proptest! {
    #[test]
    fn round_trip(frames in proptest::collection::vec(arb_frame(), 1..4), split in 0usize..200) {
        let mut wire = BytesMut::new();
        let mut c = FrameCodec::default();
        for f in &frames {
            c.encode(f, &mut wire).unwrap();
        }
        // Feed in two pieces at an arbitrary point.
        let split = split.min(wire.len());
        let tail = wire.split_off(split);
        let mut buf = wire;
        let mut got = Vec::new();
        while let Some(f) = c.decode(&mut buf).unwrap() { got.push(f); }
        buf.extend_from_slice(&tail);
        while let Some(f) = c.decode(&mut buf).unwrap() { got.push(f); }
        proptest::prop_assert!(buf.is_empty());
        proptest::prop_assert_eq!(got, frames);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let mut c = FrameCodec::new(4096);
        let mut buf = BytesMut::from(&bytes[..]);
        // Decode until an error, a need for more input, or the buffer is empty.
        while let Ok(Some(_)) = c.decode(&mut buf) {}
    }

    #[test]
    fn random_bytes_after_valid_header_never_panic(
        full in 16i32..200, head in 16i16..200, t in 0u8..5,
        rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..220),
    ) {
        let mut bytes = vec![0xda, 0xda, 1];
        bytes.extend_from_slice(&full.to_be_bytes());
        bytes.extend_from_slice(&head.to_be_bytes());
        bytes.push(t);
        bytes.extend_from_slice(&rest);
        let mut c = FrameCodec::new(4096);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = c.decode(&mut buf) {}
    }
}

#[test]
fn a_decoded_head_map_keeps_its_strings_in_the_frame_and_changes_like_a_built_one() {
    let mut f = Frame::ping(9);
    f.head.insert("acct", "alice");
    f.head.insert_opt("nil", None);
    f.head.insert("sid", "0123");
    f.body = bytes::Bytes::from_static(b"body");
    f.msg_type = MessageType::Request;
    let mut d = decode_all(&encode(&f)).unwrap().remove(0);
    assert_eq!(d.head, f.head);
    assert_eq!(&d.body[..], b"body", "the body after the head");
    // Its strings are spans of the frame's bytes: no copy was made.
    assert!(
        d.head
            .slice()
            .iter()
            .all(|(k, _)| matches!(k, super::Text::Span { .. }))
    );
    assert_eq!(d.head.get("acct"), Some("alice"));
    assert_eq!(d.head.get("nil"), None);
    assert_eq!(d.head.get("missing"), None);
    // Changed like a built map: replace, add, remove; and encoded again the same way.
    d.head.insert("acct", "bob");
    d.head.insert("new", "x");
    assert_eq!(d.head.remove("sid"), Some(Some("0123".to_string())));
    assert_eq!(
        d.head.iter().collect::<Vec<_>>(),
        [("acct", Some("bob")), ("nil", None), ("new", Some("x"))]
    );
    let again = decode_all(&encode(&d)).unwrap().remove(0);
    assert_eq!(again.head, d.head);
    assert_eq!(
        again.head.encoded_len().unwrap(),
        d.head.encoded_len().unwrap()
    );
}

#[test]
fn a_written_head_map_is_a_map_like_a_built_one_with_its_values_in_one_buffer() {
    let mut built = HeadMap::new();
    built.insert("m", "1");
    built.insert("acct", "alice");
    built.insert("role", "");
    let mut w = HeadMap::writer(3, 8);
    w.entry("m", "9").entry("acct", "alice").entry("role", "");
    // A key written twice keeps its last value, in its first place (as `insert`).
    w.entry("m", "1");
    let mut written = w.finish();
    assert_eq!(written, built);
    assert_eq!(written.iter().count(), 3);
    // Its values are spans of one buffer, its keys the static strings given.
    assert!(written.slice().iter().all(|(k, v)| {
        matches!(k, super::Text::Cow(std::borrow::Cow::Borrowed(_)))
            && matches!(v, Some(super::Text::Span { .. }))
    }));
    let mut f = Frame::ping(3);
    f.msg_type = MessageType::Request;
    f.head = written.clone();
    let mut g = Frame::ping(3);
    g.msg_type = MessageType::Request;
    g.head = built.clone();
    assert_eq!(
        encode(&f),
        encode(&g),
        "encoded byte for byte as the built map"
    );
    // Changed copy-on-write, like any map: the clone keeps its values.
    let kept = written.clone();
    written.insert("acct", "bob");
    assert_eq!(written.get("acct"), Some("bob"));
    assert_eq!(kept.get("acct"), Some("alice"));
    assert!(HeadMap::writer(0, 0).finish().is_empty());
}
