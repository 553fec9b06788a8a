//! A userspace TCP proxy that makes a path slow, lossy, narrow or dead, changeable
//! while connections run (this kernel has no `netem`).
//!
//! Each direction of each connection is a reader and a writer joined by a bounded
//! queue of chunks with a release time. A chunk is released `delay` plus a uniform
//! random part of `jitter` after it was read, never before the chunk ahead of it (TCP
//! keeps order), and no faster than `bandwidth` allows. Loss cannot drop bytes from a
//! TCP stream without breaking it; what loss does to a TCP connection is stall it for a
//! retransmission, so a "lost" chunk is held for an extra [`RETRANSMIT`] (Linux's
//! minimum retransmission timeout), delaying everything behind it. `blackhole` stops
//! both directions: nothing is read (the sender's window fills) and nothing written,
//! without closing anything, until it is lifted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a lost segment stalls its connection: Linux's minimum RTO (200 ms).
pub const RETRANSMIT: Duration = Duration::from_millis(200);

/// What the proxy does to the bytes (each direction alike).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Added to every chunk's trip.
    pub delay: Duration,
    /// A uniform random extra of up to this much per chunk.
    pub jitter: Duration,
    /// Probability (0..=1) that a chunk is "lost": held for [`RETRANSMIT`] more.
    pub loss: f64,
    /// Bytes per second per direction; `None`: unlimited.
    pub bandwidth: Option<u64>,
    /// Pass nothing either way (connections stay open and silent).
    pub blackhole: bool,
}

/// A running proxy: connections to [`addr`](Self::addr) go to the upstream.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn faults(f: &Mutex<Faults>) -> Faults {
    *f.lock().unwrap_or_else(|p| p.into_inner())
}

impl FaultProxy {
    /// A proxy on a free `127.0.0.1` port to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.set_nonblocking(true)?;
        FaultProxy::start_on(l, upstream)
    }

    /// A proxy serving `listener` (non-blocking; e.g. from [`Host::bind_tcp`](super::Host::bind_tcp),
    /// to proxy from inside a namespace) to `upstream`.
    pub fn start_on(
        listener: std::net::TcpListener,
        upstream: SocketAddr,
    ) -> std::io::Result<FaultProxy> {
        let addr = listener.local_addr()?;
        let f = Arc::new(Mutex::new(Faults::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = f.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{addr}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "fault proxy runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept_loop(listener, upstream, shared) => {}
                    }
                });
            })?;
        Ok(FaultProxy {
            addr,
            faults: f,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes the faults, for every connection, at once.
    pub fn set(&self, faults: Faults) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        faults(&self.faults)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, f: Arc<Mutex<Faults>>) {
    while let Ok((client, _)) = listener.accept().await {
        let f = f.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::join!(pump(cr, sw, f.clone()), pump(sr, cw, f));
        });
    }
}

/// One direction: read, stamp each chunk with its release time, write it then.
async fn pump(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    f: Arc<Mutex<Faults>>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let writer_faults = f.clone();
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            while faults(&writer_faults).blackhole {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    };
    let reader = async move {
        let mut last = Instant::now();
        let mut line_free = Instant::now();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            while faults(&f).blackhole {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let n = match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let now = Instant::now();
            let fl = faults(&f);
            let mut at = now + fl.delay;
            if !fl.jitter.is_zero() {
                at += fl.jitter.mul_f64(fastrand::f64());
            }
            if fl.loss > 0.0 && fastrand::f64() < fl.loss {
                at += RETRANSMIT;
            }
            if let Some(bw) = fl.bandwidth.filter(|b| *b > 0) {
                let start = at.max(line_free);
                line_free = start + Duration::from_secs_f64(n as f64 / bw as f64);
                at = line_free;
            }
            at = at.max(last);
            last = at;
            if tx.send((at, buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}
