//! Feeds arbitrary bytes to the v1 frame decoder (in two pieces, as a socket would)
//! and every decoded body (decompressed when it says so) to the Seata message decoder. Nothing may panic; every frame
//! that decodes must re-encode to the same bytes and decode again to the same frame.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use meshline_rpc_client::compress::decompress;
use meshline_rpc_client::{FrameCodec, SeataMessage};
use tokio_util::codec::{Decoder, Encoder};

fuzz_target!(|data: &[u8]| {
    let split = data
        .first()
        .map(|b| usize::from(*b))
        .unwrap_or(0)
        .min(data.len());
    let mut codec = FrameCodec::new(64 * 1024);
    let mut buf = BytesMut::from(&data[..split]);
    let mut pieces = [&data[split..]].into_iter();
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => {
                let _ = SeataMessage::decode(&frame.body);
                if let Ok(body) = decompress(frame.compressor, &frame.body, 64 * 1024) {
                    let _ = SeataMessage::decode(&body);
                }
                let mut again = BytesMut::new();
                codec
                    .encode(&frame, &mut again)
                    .expect("a decoded frame re-encodes");
                let back = codec
                    .decode(&mut again)
                    .expect("re-encoded frame decodes")
                    .expect("re-encoded frame is complete");
                assert_eq!(back, frame);
                assert!(again.is_empty());
            }
            Ok(None) => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => break,
            },
            Err(_) => break,
        }
    }
});
