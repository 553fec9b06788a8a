//! The frame cap is checked before anything is allocated for the frame: a client that
//! announces 64 MiB after login makes the gateway allocate nothing near that size (the
//! largest allocation of the whole process while the gateway reads the header, kicks the
//! client and closes is measured by a counting global allocator), is told why
//! (`KICK 1 OVERSIZE`) and is closed; other clients are not touched.
//!
//! Alone in its test binary: the allocator counts every allocation of the process, so
//! no other test may run beside it.
mod gateway_world;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::AtomicUsize;

use gateway_world::*;

/// The system allocator, remembering the largest size asked for since the last reset.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter only reads sizes.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_frame_closes_the_connection_before_allocating() {
    let w = world(1, |_| {}).await;
    let alice = w.player("alice").await;
    let mut raw = TcpStream::connect(w.gateway.local_addr()).await.unwrap();
    raw.write_all(&w.auth_frame("bob")).await.unwrap();
    // AUTH_OK, read whole (the length first, then the rest).
    let mut len = [0u8; 4];
    raw.read_exact(&mut len).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
    raw.read_exact(&mut rest).await.unwrap();
    let ok = ClientFrame::from_message(&[&len[..], &rest].concat(), 4096).unwrap();
    assert_eq!(
        (ok.module, ok.opcode),
        (GATEWAY_MODULE, op::AUTH_OK),
        "{ok:?}"
    );
    // Everything set up; from here the largest allocation is what the header costs.
    let mut buf = vec![0u8; 512];
    LARGEST.store(0, Ordering::Relaxed);
    // 64 MiB announced, against a 4 KiB max-frame: the gateway kicks on the header.
    raw.write_all(&(64u32 << 20).to_be_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match raw.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("an oversize frame closes the connection");
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest < 64 * 1024,
        "the largest allocation while refusing a 64 MiB frame was {largest} bytes"
    );
    let kick = ClientFrame::from_message(&got, 4096).unwrap();
    assert_eq!(kick_code(&kick), 1, "OVERSIZE: {kick:?}");
    assert!(
        String::from_utf8_lossy(&kick.payload).contains("over the 4096-byte limit"),
        "{kick:?}"
    );
    // Others are unaffected.
    assert!(alice.request(modules::LOBBY, 1, Bytes::new()).await.is_ok());
}
