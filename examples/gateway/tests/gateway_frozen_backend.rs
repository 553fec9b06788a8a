//! A frozen backend: a real `game-backend` process under SIGSTOP for 6 s. Its kernel
//! still accepts TCP connections, so a reconnect to it succeeds at once while nothing
//! answers. The gateway must let it go once and not take it back before it answers: each
//! of its rooms moves once (exactly one `MOVED` per room while it is frozen), and the
//! lobby, which it served too, stalls for no request started a second after the freeze.
//! Taking a reconnect for a return would move its rooms back and forth every ~2 s and
//! stall lobby calls for 0.7 s each time.
//!
//! runs one at a time: it times lobby calls to within a quarter of a second (and
//! leaves most of the CPU idle meanwhile).

mod gateway_world;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use gateway_world::*;
use meshline::{Instance, RegistryService};
use tokio::time::Instant;

const FROZEN: Duration = Duration::from_secs(6);
/// The most rooms joined while looking for two on each backend.
const MAX_ROOMS: usize = 64;
/// A lobby call slower than this is a stall (one answers in well under a millisecond).
const STALL: Duration = Duration::from_millis(250);

/// A `game-backend` child process, killed and reaped on drop.
struct BackendProcess {
    child: Child,
    addr: std::net::SocketAddr,
}

impl BackendProcess {
    fn start(id: &str) -> BackendProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_game-backend"))
            .args(["--id", id, "--port", "0"])
            .env("MESHLINE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn game-backend");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the banner");
        let addr = line
            .trim()
            .strip_prefix(&format!("game-backend {id} listening on "))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected banner `{line}`"));
        BackendProcess { child, addr }
    }

    fn instance(&self) -> Instance {
        Instance::new(&self.addr.ip().to_string(), self.addr.port()).unwrap()
    }

    fn signal(&self, sig: &str) {
        let out = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .output()
            .expect("kill(1)");
        assert!(out.status.success(), "kill {sig}: {out:?}");
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_backend_moves_its_rooms_once_and_stalls_the_lobby_only_at_first() {
    let w = world(0, |_| {}).await;
    let frozen = BackendProcess::start("be-frozen");
    let other = BackendProcess::start("be-other");
    for cluster in CLUSTERS {
        for be in [&frozen, &other] {
            w.registry.register(cluster, &be.instance()).await.unwrap();
        }
    }
    for cluster in ["lobby", "room"] {
        w.gateway
            .backend(cluster)
            .unwrap()
            .wait_alive(2, Duration::from_secs(5))
            .await
            .unwrap();
    }
    // Rooms, one member each, until at least two live on each backend (where a room
    // lives is a hash of its name and the backends' addresses).
    let mut members = Vec::new();
    let (mut on_frozen, mut on_other) = (0, 0);
    for r in 0..MAX_ROOMS {
        if on_frozen >= 2 && on_other >= 2 {
            break;
        }
        let p = w.player(&format!("member{r}")).await;
        let room = format!("hall{r}");
        let joined = p.request(modules::ROOM, 1, room.clone()).await.unwrap();
        if last_word(&joined) == "be-frozen" {
            on_frozen += 1;
        } else {
            on_other += 1;
        }
        members.push((room, p));
    }
    let rooms = members.len();
    assert!(
        on_frozen >= 2 && on_other >= 2,
        "{on_frozen} of {rooms} rooms on the backend to freeze"
    );
    // Every MOVED each member gets, with when.
    let start = Instant::now();
    let moved: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for (_, p) in members {
        let (moved, stop) = (moved.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Some(f) = p.next_push(Duration::from_millis(100)).await
                    && (f.module, f.opcode) == (GATEWAY_MODULE, op::MOVED)
                {
                    let key = String::from_utf8_lossy(&f.payload).into_owned();
                    moved.lock().unwrap().push((start.elapsed(), key));
                }
            }
        }));
    }
    // Lobby calls throughout: when each started, how long it took.
    let lobby = w.player("lobby-prober").await;
    let calls: Arc<Mutex<Vec<(Duration, Duration)>>> = Arc::default();
    let prober = {
        let (calls, stop) = (calls.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let at = start.elapsed();
                let r = lobby.request(modules::LOBBY, 1, &b"x"[..]).await;
                calls
                    .lock()
                    .unwrap()
                    .push((at, at.max(start.elapsed()) - at));
                if let Err(e) = r {
                    panic!("a lobby call failed at {at:?}: {e}");
                }
            }
        })
    };
    // The freeze comes once the lobby is seen working: a hundred calls answered.
    until(
        "lobby calls before the freeze",
        Duration::from_secs(5),
        || calls.lock().unwrap().len() >= 100,
    )
    .await;
    let frozen_at = start.elapsed();
    frozen.signal("-STOP");
    tokio::time::sleep(FROZEN).await;
    let thawed_at = start.elapsed();
    frozen.signal("-CONT");
    // Thawed, it answers again and is taken back.
    w.gateway
        .backend("lobby")
        .unwrap()
        .wait_alive(2, Duration::from_secs(5))
        .await
        .expect("the thawed backend is back in the lobby's alive set");
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    prober.await.unwrap();

    let moved = moved.lock().unwrap().clone();
    let while_frozen: Vec<&(Duration, String)> = moved
        .iter()
        .filter(|(t, _)| *t >= frozen_at && *t < thawed_at)
        .collect();
    let mut per_room: HashMap<&str, usize> = HashMap::new();
    for (_, key) in &while_frozen {
        *per_room.entry(key.as_str()).or_default() += 1;
    }
    assert_eq!(
        per_room.len(),
        on_frozen,
        "every room of the frozen backend moved, and only those: {while_frozen:?}"
    );
    assert!(
        per_room.values().all(|n| *n == 1),
        "each moved exactly once while frozen: {while_frozen:?}"
    );
    let calls = calls.lock().unwrap().clone();
    let late_stalls: Vec<&(Duration, Duration)> = calls
        .iter()
        .filter(|(at, took)| {
            *at >= frozen_at + Duration::from_secs(1) && *at < thawed_at && *took > STALL
        })
        .collect();
    let first_second = calls
        .iter()
        .filter(|(at, took)| *at >= frozen_at && *took > STALL)
        .count();
    eprintln!(
        "frozen {FROZEN:?}: {on_frozen} of {rooms} rooms moved, {} MOVED while frozen; \
         {} lobby calls, {first_second} stalled (>{STALL:?}), {} of them a second after the freeze",
        while_frozen.len(),
        calls.len(),
        late_stalls.len()
    );
    assert!(
        late_stalls.is_empty(),
        "lobby calls stalled a second after the freeze: {late_stalls:?}"
    );
    assert!(calls.len() > 100, "only {} lobby calls", calls.len());
}
