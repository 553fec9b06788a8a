//! A browser is a real client: headless Chromium loads the gateway's page
//! (examples/gateway/static/gateway.html, served by the gateway's admin port), which connects to
//! the WebSocket listener, authenticates with the token in its URL, joins a room and
//! lists the room's snapshots; the test reads the page's DOM while it runs.
//!
//! Chromium is driven over the Chrome DevTools Protocol with the WebSocket client the
//! gateway already uses (no driver, no CDP crate): `Runtime.evaluate` reads `#count`
//! and `#log` until three snapshots are there. `--dump-dom --virtual-time-budget=N`
//! (no protocol at all) was tried first and does not work here: virtual time
//! fast-forwards while the page only waits on its WebSocket, so the DOM is dumped
//! right after the room is joined, before the first snapshot arrives in real time.
//!
//! The same browser then loads the admin port's `/status` page, which reads `/metrics`
//! in the page, while a player sends requests: it must show the sessions, the room
//! cluster's backends as "1 of 2" once one of two is killed, the refusals by reason (one
//! forged token), and its three charts (messages/s, p99, sessions over the last 5
//! minutes, drawn in SVG by the page's own script) must have points with data. The test
//! takes a screenshot of it (`Page.captureScreenshot`) and saves it as
//! `$CARGO_TARGET_TMPDIR/gateway-status.png`.
//!
//! Needs Debian's `chromium` (scripts/install-test-deps.sh installs it, `$CHROMIUM`
//! names another). Without it the test fails: a browser test that can skip is not a test.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use meshline_example_gateway::client::GatewayClient;
use meshline_example_gateway::game_backend::{GameBackend, modules};
use meshline_example_gateway::gateway::Gateway;
use meshline_example_gateway::gateway::admission::{Refusal, TokenMinter};
use meshline_example_gateway::gateway::settings::{GatewaySettings, ModuleKind};
use meshline_example_gateway::memory_registry::MemoryRegistry;

use crate::gateway_world::{route, wait_alive};

const SECRET: &str = "browser-secret";

/// The Chromium binary: `$CHROMIUM`, else the first of Debian's and others' names on
/// `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_browser_joins_a_room_and_shows_its_snapshots() {
    let chromium = chromium().expect(
        "chromium is not installed: run scripts/install-test-deps.sh (apt-get install \
         chromium), or name a Chromium binary in $CHROMIUM",
    );
    let registry = Arc::new(MemoryRegistry::default());
    let mut backends = Vec::new();
    for id in ["be-0", "be-1"] {
        backends.push(
            GameBackend::start(
                id,
                "127.0.0.1:0".parse().unwrap(),
                registry.clone(),
                &["room"],
                Duration::from_millis(100),
            )
            .await
            .unwrap(),
        );
    }
    let mut settings = GatewaySettings {
        id: "gw-browser".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ws_listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        secret: SECRET.into(),
        register_cluster: None,
        ..GatewaySettings::default()
    };
    settings.modules.insert(
        modules::ROOM,
        route(modules::ROOM, "room", ModuleKind::Keyed),
    );
    let gateway = Gateway::start(settings, registry.clone()).await.unwrap();
    wait_alive(&gateway, "room", 2, Duration::from_secs(5)).await;
    // Each launch gets its own token (a token is good for one login).
    let page = || {
        let token = TokenMinter::new(SECRET).mint("browser", Duration::from_secs(60));
        format!(
            "http://{}/gateway.html?token={token}&ws=ws://{}/&room=arena",
            gateway.admin_addr().unwrap(),
            gateway.ws_addr().unwrap()
        )
    };
    let mut browser = Browser::launch(&chromium, page).await;
    let log = browser.log.path().to_path_buf();
    let chromium_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let cdp = &mut browser.cdp;
    let session = cdp.attach_to_page().await;
    // The page's view, polled until three snapshots are listed (or 20 s pass).
    let read = "JSON.stringify({count: Number(document.getElementById('count').textContent), \
                status: document.getElementById('status').textContent, \
                log: document.getElementById('log').textContent})";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let view = loop {
        let v = cdp.evaluate(&session, read).await;
        let view: Value = serde_json::from_str(v.as_str().unwrap_or("{}")).unwrap();
        if view["count"].as_u64().unwrap_or(0) >= 3 || tokio::time::Instant::now() > deadline {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let count = view["count"].as_u64().unwrap_or(0);
    assert!(
        count >= 3,
        "the page listed {count} room pushes: {view}\nchromium:\n{}",
        chromium_log()
    );
    let shown = view["log"].as_str().unwrap_or("");
    assert!(shown.contains("arena snapshot"), "{view}");
    assert!(
        gateway
            .stats()
            .pushed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    );

    // The status page, in a second tab, while a player sends requests; one forged
    // login; the room cluster's backend that does not hold the arena killed.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    match GatewayClient::auth(gateway.local_addr(), &forged).await {
        Err(meshline_example_gateway::client::ClientError::Refused(text)) => assert_eq!(
            text.split(' ').next(),
            Some(Refusal::Forged.code().to_string().as_str()),
            "{text}"
        ),
        other => panic!("expected the forged refusal, got {other:?}"),
    }
    let home = gateway
        .keys()
        .remembered(modules::ROOM, "arena")
        .expect("the arena's home");
    let idx = backends
        .iter()
        .position(|b| b.local_addr().port() != home.port)
        .unwrap();
    backends.remove(idx).kill();
    let player = GatewayClient::auth(
        gateway.local_addr(),
        &TokenMinter::new(SECRET).mint("player", Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let playing = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                player
                    .request(modules::ROOM, 2, &b"arena"[..])
                    .await
                    .expect("the arena's state");
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            n
        })
    };
    let status_url = format!("http://{}/status?every=250", gateway.admin_addr().unwrap());
    let status = cdp.open(&status_url).await;
    let read = "JSON.stringify({gateway: document.getElementById('gateway').textContent, \
                draining: document.getElementById('draining').textContent, \
                sessions: document.getElementById('sessions').textContent, \
                auth: document.getElementById('conn-auth').textContent, \
                error: document.getElementById('error').textContent, \
                room: [...(document.querySelector('tr[data-cluster=\"room\"]') || \
                       {cells: []}).cells].map(c => c.textContent), \
                forged: [...(document.querySelector('tr[data-reason=\"forged\"]') || \
                       {cells: []}).cells].map(c => c.textContent), \
                refused: document.getElementById('refused-total').textContent, \
                module: document.querySelector('tr[data-module=\"room\"]') !== null, \
                charts: Object.fromEntries([...document.querySelectorAll('svg.chart')] \
                  .map(c => [c.id, {points: Number(c.dataset.points), \
                    last: c.dataset.last === '' ? null : Number(c.dataset.last), \
                    lines: c.querySelectorAll('polyline').length}]))})";
    let charted = |view: &Value| {
        let chart = |id: &str| &view["charts"][id];
        let full = |id: &str| chart(id)["points"].as_u64().unwrap_or(0) >= 4;
        let positive = |id: &str| chart(id)["last"].as_f64().is_some_and(|v| v > 0.0);
        ["chart-msgs", "chart-p99", "chart-sessions"]
            .iter()
            .all(|id| full(id) && positive(id))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let view = loop {
        let v = cdp.evaluate(&status, read).await;
        let view: Value = serde_json::from_str(v.as_str().unwrap_or("{}")).unwrap();
        if (view["sessions"] == "2"
            && view["room"][1] == "1 of 2"
            && view["forged"][1] == "1"
            && view["module"] == true
            && charted(&view))
            || tokio::time::Instant::now() > deadline
        {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The picture, while the charts have their data.
    let png = cdp.screenshot(&status).await;
    let saved = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-status.png");
    std::fs::write(&saved, &png).unwrap();
    eprintln!("status page screenshot: {}", saved.display());
    stop.cancel();
    let requests = playing.await.unwrap();
    assert!(requests > 0);
    assert_eq!(view["gateway"], "gw-browser", "{view}");
    assert_eq!(view["draining"], "no", "{view}");
    assert_eq!(view["sessions"], "2", "the page's and the player's: {view}");
    assert_eq!(view["auth"], "2", "{view}");
    assert_eq!(view["error"], "", "{view}");
    // cluster, alive of total, breaker (n/a without breakers), ...
    assert_eq!(view["room"][0], "room", "{view}");
    assert_eq!(view["room"][1], "1 of 2", "{view}");
    assert_eq!(view["forged"], json!(["forged", "1"]), "{view}");
    assert_eq!(view["refused"], "1", "{view}");
    assert_eq!(
        view["module"], true,
        "the room module's requests are listed: {view}"
    );
    assert!(charted(&view), "every chart has points and data: {view}");
    for id in ["chart-msgs", "chart-p99", "chart-sessions"] {
        assert!(
            view["charts"][id]["lines"].as_u64().unwrap_or(0) >= 1,
            "{id} draws a line: {view}"
        );
    }
    // Two sessions: the sessions chart's newest point says so.
    assert_eq!(view["charts"]["chart-sessions"]["last"], 2.0, "{view}");
    // A PNG, of the page's size.
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert!(width >= 800 && height >= 600, "{width}x{height}");
}

/// Decodes standard base64 (what DevTools sends screenshots in).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            other => panic!("not base64: {other}"),
        }
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'=' && !b.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= value(*c) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// A headless Chromium showing the page, and the DevTools connection to it.
struct Browser {
    cdp: Cdp,
    process: tokio::process::Child,
    /// The profile, and Chromium's TMPDIR inside it (its singleton socket folder).
    profile: tempfile::TempDir,
    /// Chromium's stderr.
    log: tempfile::NamedTempFile,
}

impl Drop for Browser {
    /// Chromium asked to quit (SIGTERM: it removes its own singleton files), killed if
    /// it has not within 5 s, waited for, and then its profile removed. Killing it
    /// without waiting left the profile and the singleton folder behind, written by
    /// the browser's helpers after the folder was removed (test.sh's leftover check
    /// named them).
    fn drop(&mut self) {
        if let Some(pid) = self.process.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match self.process.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if std::time::Instant::now() > deadline => {
                    let _ = self.process.start_kill();
                    deadline_wait(&mut self.process);
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        remove_when_quiet(self.profile.path());
    }
}

/// Waits up to 2 s for a killed process to be reaped.
fn deadline_wait(process: &mut tokio::process::Child) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        if !matches!(process.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes `dir`, again while a helper process that outlived the browser for a moment
/// still writes into it (up to 5 s).
fn remove_when_quiet(dir: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match std::fs::remove_dir_all(dir) {
            Err(e)
                if e.kind() != std::io::ErrorKind::NotFound
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ if dir.exists() && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => return,
        }
    }
}

impl Browser {
    /// How many times a Chromium that does not announce its DevTools endpoint within
    /// [`Cdp::connect`]'s 20 s is killed and started again. It starts in 1-2 s here,
    /// but once in a CI run it announced nothing for 20 s; that is the browser's start,
    /// not the page under test.
    const LAUNCHES: usize = 3;

    /// Starts Chromium on `page()` (a fresh URL per launch) and connects to it.
    async fn launch(chromium: &Path, page: impl Fn() -> String) -> Browser {
        let mut failed = Vec::new();
        for _ in 0..Self::LAUNCHES {
            let profile = tempfile::tempdir().unwrap();
            let tmp = profile.path().join("tmp");
            std::fs::create_dir(&tmp).unwrap();
            let log = tempfile::NamedTempFile::new().unwrap();
            let mut process = tokio::process::Command::new(chromium)
                .env("TMPDIR", &tmp)
                .args([
                    "--headless",
                    "--no-sandbox", // CI runs as root
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-dev-shm-usage",
                    "--remote-debugging-port=0",
                    "--window-size=1280,1400",
                ])
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .arg(page())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(log.reopen().unwrap())
                .kill_on_drop(true)
                .spawn()
                .expect("chromium starts");
            if let Some(cdp) = Cdp::connect(profile.path()).await {
                return Browser {
                    cdp,
                    process,
                    profile,
                    log,
                };
            }
            let _ = process.kill().await;
            let _ = process.wait().await;
            remove_when_quiet(profile.path());
            failed.push(std::fs::read_to_string(log.path()).unwrap_or_default());
        }
        panic!(
            "chromium's DevTools endpoint did not come up in {} launches:\n{}",
            Self::LAUNCHES,
            failed.join("\n---\n")
        );
    }
}

/// A Chrome DevTools Protocol connection to the browser.
struct Cdp {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Cdp {
    /// Connects to the endpoint Chromium announces in `<profile>/DevToolsActivePort`
    /// (port, then the browser's WebSocket path), waiting up to 20 s for it.
    async fn connect(profile: &Path) -> Option<Cdp> {
        let file = profile.join("DevToolsActivePort");
        for _ in 0..200 {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let [port, path, ..] = text.lines().collect::<Vec<_>>()[..]
                && let Ok((ws, _)) =
                    tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}{path}")).await
            {
                return Some(Cdp { ws, next_id: 1 });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Calls `method` (in `session`, if given) and returns its result.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
        loop {
            let reply = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 10 s"));
            let text = match reply {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(_)) => continue,
                other => panic!("DevTools connection ended during {method}: {other:?}"),
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            // Events and other calls' answers are not this one.
            if v["id"].as_u64() != Some(id) {
                continue;
            }
            assert!(v.get("error").is_none(), "{method} failed: {v}");
            return v["result"].clone();
        }
    }

    /// Attaches to the page Chromium was started on; returns the session id.
    async fn attach_to_page(&mut self) -> String {
        for _ in 0..100 {
            let targets = self.call(None, "Target.getTargets", json!({})).await;
            let page = targets["targetInfos"].as_array().and_then(|all| {
                all.iter().find(|t| {
                    t["type"] == "page"
                        && t["url"]
                            .as_str()
                            .is_some_and(|u| u.contains("/gateway.html"))
                })
            });
            if let Some(t) = page {
                return self.attach(&t["targetId"]).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromium shows no gateway.html page");
    }

    /// Opens `url` in a new tab; returns the session id attached to it.
    async fn open(&mut self, url: &str) -> String {
        let t = self
            .call(None, "Target.createTarget", json!({ "url": url }))
            .await;
        self.attach(&t["targetId"]).await
    }

    /// Attaches to target `target_id`, its messages on this connection (`flatten`);
    /// returns the session id.
    async fn attach(&mut self, target_id: &Value) -> String {
        let r = self
            .call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await;
        r["sessionId"].as_str().unwrap().to_string()
    }

    /// A PNG of the whole page `session` shows.
    async fn screenshot(&mut self, session: &str) -> Vec<u8> {
        let r = self
            .call(
                Some(session),
                "Page.captureScreenshot",
                json!({ "format": "png", "captureBeyondViewport": true }),
            )
            .await;
        base64_decode(r["data"].as_str().expect("screenshot data"))
    }

    /// Evaluates `expression` in the page; returns its value.
    async fn evaluate(&mut self, session: &str, expression: &str) -> Value {
        let r = self
            .call(
                Some(session),
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true }),
            )
            .await;
        r["result"]["value"].clone()
    }
}
