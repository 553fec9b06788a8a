//! The client's per-call work outside the socket, each part
//! alone and in sequence:
//!
//! - `pick`: the balancer's pick with its in-flight guard and the payload read, on a
//!   `Balancer<T>` of 100 endpoints whose payload is a shared handle, as the client's
//!   `Balancer<AliveEndpoint>` (round robin; see loadbalance's `payload_pick` for every
//!   algorithm);
//! - `encode`: a request frame (two head entries, a 256-byte body) appended to the
//!   write buffer (`Frame::encode_into`, what the connection's writer does);
//! - `pending`: the pending-response entry, built the way the connection keeps it (a
//!   `std::sync::Mutex<HashMap<u32, tokio::sync::oneshot::Sender<_>>>`: a oneshot made,
//!   inserted under the lock, removed under the lock by the reader when the answer
//!   comes, sent and received). The connection's own map is private: this is the same
//!   structure with the same operations, not the connection's code;
//! - `budget`: the retry budget's deposit every balanced call makes, as the client
//!   makes it (a counter increment, and every 16th call one deposit worth 16 into
//!   tower's `TpsBudget`, which takes a lock and reads the clock); `budget_each`: a
//!   deposit into `TpsBudget` on every call, for comparison;
//! - `together`: the four in one iteration.
//!
//! ```text
//! cargo bench -p meshline-rpc-client --bench call_overhead -- --warm-up-time 1 --measurement-time 3
//! ```

use std::collections::HashMap;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group, criterion_main};
use meshline_loadbalance::{Balancer, Edit, PickRequest, by_name};
use meshline_registry_core::Instance;
use meshline_rpc_client::{Frame, HeadMap, MessageType};
use tokio::sync::oneshot;
use tower::retry::budget::{Budget, TpsBudget};

const MAX_FRAME: usize = 8 << 20;

fn balancer() -> Balancer<Arc<SocketAddr>> {
    let b = Balancer::with_payload(by_name("RoundRobinLoadBalance").unwrap());
    b.apply((0..100u16).map(|i| {
        let addr = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 8091));
        Edit::Insert(Instance::parse(&addr.to_string()).unwrap(), Arc::new(addr))
    }));
    b
}

fn request(id: u32) -> Frame {
    let mut head = HeadMap::new();
    head.insert("route", "lobby");
    head.insert("account", "1000042");
    Frame {
        msg_type: MessageType::Request,
        codec: 0x1,
        compressor: 0,
        request_id: id,
        head,
        body: Bytes::from(vec![7u8; 256]),
    }
}

type Pending = Mutex<HashMap<u32, oneshot::Sender<Frame>>>;

/// One pending entry's life: made and inserted by the caller, removed and completed by
/// the reader, received by the caller.
#[inline]
fn pending_round(pending: &Pending, id: u32, answer: Frame) -> Frame {
    let (tx, mut rx) = oneshot::channel();
    pending.lock().unwrap().insert(id, tx);
    let tx = pending.lock().unwrap().remove(&id).unwrap();
    let _ = tx.send(answer);
    rx.try_recv().unwrap()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("call_overhead");
    let b = balancer();
    let req = PickRequest::default();
    group.bench_function("pick", |bench| {
        bench.iter(|| {
            let picked = b.pick(black_box(&req)).unwrap();
            black_box(picked.payload());
        })
    });
    let frame = request(1);
    let mut buf = BytesMut::with_capacity(64 << 10);
    group.bench_function("encode", |bench| {
        bench.iter(|| {
            if buf.len() > 60 << 10 {
                buf.clear();
            }
            black_box(&frame).encode_into(&mut buf, MAX_FRAME).unwrap();
        })
    });
    let pending: Pending = Mutex::new(HashMap::with_capacity(1024));
    let answer = Frame::ping(1);
    let mut id = 0u32;
    group.bench_function("pending", |bench| {
        bench.iter(|| {
            id = id.wrapping_add(1);
            black_box(pending_round(&pending, id, answer.clone()))
        })
    });
    let budget = TpsBudget::new(std::time::Duration::from_secs(10), 10, 0.2 * 16.0);
    let calls = std::sync::atomic::AtomicU32::new(0);
    let deposit = || {
        if calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 16 == 15 {
            black_box(&budget).deposit();
        }
    };
    group.bench_function("budget", |bench| bench.iter(deposit));
    let each = TpsBudget::new(std::time::Duration::from_secs(10), 10, 0.2);
    group.bench_function("budget_each", |bench| {
        bench.iter(|| black_box(&each).deposit())
    });
    group.bench_function("together", |bench| {
        bench.iter(|| {
            id = id.wrapping_add(1);
            deposit();
            let picked = b.pick(black_box(&req)).unwrap();
            black_box(picked.payload());
            if buf.len() > 60 << 10 {
                buf.clear();
            }
            black_box(&frame).encode_into(&mut buf, MAX_FRAME).unwrap();
            black_box(pending_round(&pending, id, answer.clone()))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
