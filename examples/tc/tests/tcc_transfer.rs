//! The TCC transfer example end to end: a real `tc-server`, three `bank` processes
//! (two over HTTP, one over gRPC), each with its own SQLite database behind Seata's
//! fence, and a TM here moving money from alice (bank-a) to bob (bank-b) with a fee to
//! bank-c, in one global transaction per transfer. Faults, one scenario each: a leg
//! refused, a confirm whose answer is lost, a cancel that overtakes its try, a service
//! killed before the commit. After each, the three databases must hold the 100 they
//! started with between them, nothing frozen or in flight; the table of what they hold
//! is printed (the README's table comes from this test).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{TcProcess, stdout_lines};
use meshline::ConfigLoader;
use meshline::rpc::tm::TransactionManager;
use meshline::tx;
use meshline::tx::http::PropagateXidLayer;
use tonic::codegen::http;
use tower::ServiceBuilder;

/// A `bank` process and its output lines.
struct Bank {
    name: &'static str,
    db: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    addr: SocketAddr,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Bank {
    fn start(dir: &Path, config: &Path, name: &'static str, grpc: bool, seed: &str) -> Bank {
        let db = dir.join(format!("{name}.db"));
        let mut args = vec![
            "--name".to_string(),
            name.into(),
            "--db".into(),
            db.display().to_string(),
            "--config".into(),
            config.display().to_string(),
            "--seed".into(),
            seed.into(),
        ];
        if grpc {
            args.push("--grpc".into());
        }
        let (child, addr, lines) = spawn(name, &args, &[]);
        Bank {
            name,
            db,
            args,
            child: Some(child),
            addr,
            lines,
            seen: Vec::new(),
        }
    }

    /// SIGKILL, as a crash.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Started again on the same database, with `faults` (`--try-delay-ms 1500`...).
    fn restart(&mut self, faults: &[&str]) {
        self.kill();
        let (child, addr, lines) = spawn(self.name, &self.args, faults);
        self.child = Some(child);
        self.addr = addr;
        self.lines = lines;
    }

    /// Waits for an output line that starts with `prefix` and contains `has`.
    fn line(&mut self, prefix: &str, has: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self
                .seen
                .iter()
                .find(|l| l.starts_with(prefix) && l.contains(has))
            {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(e) => panic!(
                    "{}: no line `{prefix}..{has}..` ({e}); seen {:?}",
                    self.name, self.seen
                ),
            }
        }
    }

    /// Forgets the lines seen so far (each scenario looks at its own).
    fn forget(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
        self.seen.clear();
    }
}

impl Drop for Bank {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(
    name: &str,
    args: &[String],
    faults: &[&str],
) -> (Child, SocketAddr, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bank"))
        .args(args)
        .args(faults)
        .env("MESHLINE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn bank");
    let lines = stdout_lines(&mut child);
    let banner = lines
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
    let addr = banner
        .strip_prefix(&format!("bank {name} listening on "))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected banner {banner:?}"));
    (child, addr, lines)
}

/// One account row: (balance, frozen, incoming).
async fn account(db: &Path, id: &str) -> (i64, i64, i64) {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", db.display()))
        .await
        .unwrap();
    let row = sqlx::query_as("SELECT balance, frozen, incoming FROM account WHERE id = ?")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    row
}

/// Waits until nothing is frozen or incoming anywhere (phase two done), then returns
/// the three balances.
async fn settled(banks: &[Bank; 3]) -> [i64; 3] {
    let ids = ["alice", "bob", "fees"];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut rows = Vec::new();
        for (b, id) in banks.iter().zip(ids) {
            rows.push(account(&b.db, id).await);
        }
        if rows.iter().all(|r| r.1 == 0 && r.2 == 0) {
            return [rows[0].0, rows[1].0, rows[2].0];
        }
        assert!(
            Instant::now() < deadline,
            "phase two did not settle: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn http_try(addr: SocketAddr, account: &str, amount: i64) -> Result<String, String> {
    let resp = reqwest::Client::new()
        .post(format!(
            "http://{addr}/try?account={account}&amount={amount}"
        ))
        .headers(tx::http::current_headers())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ok = resp.status().is_success();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if ok { Ok(text) } else { Err(text) }
}

#[derive(Clone, PartialEq, prost::Message)]
struct TryRequest {
    #[prost(string, tag = "1")]
    account: String,
    #[prost(sint64, tag = "2")]
    amount: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TryReply {
    #[prost(bool, tag = "1")]
    ok: bool,
    #[prost(string, tag = "2")]
    text: String,
}

/// The gRPC leg, given up after `patience`.
async fn grpc_try(
    addr: SocketAddr,
    account: &str,
    amount: i64,
    patience: Duration,
) -> Result<String, String> {
    let call = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let mut grpc = tonic::client::Grpc::new(
            ServiceBuilder::new()
                .layer(PropagateXidLayer)
                .service(channel),
        );
        grpc.ready().await.map_err(|e| e.to_string())?;
        let reply: tonic::Response<TryReply> = grpc
            .unary(
                tonic::Request::new(TryRequest {
                    account: account.into(),
                    amount,
                }),
                http::uri::PathAndQuery::from_static("/meshline.bank.Bank/Try"),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let r = reply.into_inner();
        if r.ok { Ok(r.text) } else { Err(r.text) }
    };
    tokio::time::timeout(patience, call)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {patience:?}")))
}

/// A transfer of `amount` from alice to `to` at bank-b, with a fee of 1 to bank-c.
async fn transfer(
    tm: &TransactionManager,
    banks: &[Bank; 3],
    to: &str,
    amount: i64,
    patience: Duration,
) -> Result<(), String> {
    let (a, b, c) = (banks[0].addr, banks[1].addr, banks[2].addr);
    tm.transactional("transfer")
        .run(|_| async move {
            http_try(a, "alice", -(amount + 1)).await?;
            http_try(b, to, amount).await?;
            grpc_try(c, "fees", 1, patience).await?;
            Ok::<_, String>(())
        })
        .await
        .map_err(|e| e.to_string())
}

async fn tm_of(config: &Path) -> TransactionManager {
    let live = meshline::centre::live_config(ConfigLoader::new().file(config))
        .await
        .unwrap();
    let config = live.current();
    let discovery = meshline::centre::discovery_from_live(&live).await.unwrap();
    let tm = TransactionManager::builder()
        .config(&config)
        .discovery(discovery, config.tx_service_group.clone())
        .application_id("transfer")
        .build()
        .await
        .unwrap();
    tm.client()
        .wait_alive(1, Duration::from_secs(10))
        .await
        .unwrap();
    tm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_is_never_created_or_lost() {
    let tc = TcProcess::start("tc", 0, None);
    let dir = tempfile::tempdir().unwrap();
    let config = tc.write_client_config(dir.path(), "client.properties");
    let mut banks = [
        Bank::start(dir.path(), &config, "bank-a", false, "alice=100"),
        Bank::start(dir.path(), &config, "bank-b", false, "bob=0"),
        Bank::start(dir.path(), &config, "bank-c", true, "fees=0"),
    ];
    let tm = tm_of(&config).await;
    let quick = Duration::from_secs(10);
    let mut table = vec![("start", settled(&banks).await)];

    // 1. A transfer that commits.
    transfer(&tm, &banks, "bob", 5, quick).await.unwrap();
    table.push(("transfer 5 (+1 fee) commits", settled(&banks).await));
    assert_eq!(table.last().unwrap().1, [94, 5, 1]);

    // 2. bank-b refuses its leg (no such account): bank-a's try is cancelled.
    banks[0].forget();
    let e = transfer(&tm, &banks, "nobody", 5, quick).await.unwrap_err();
    assert!(e.contains("no account nobody"), "{e}");
    banks[0].line("cancel ", "alice ran");
    table.push(("a leg refused: rolled back", settled(&banks).await));
    assert_eq!(table.last().unwrap().1, [94, 5, 1]);

    // 3. bank-a's confirm answer is lost: the TC sends it again, the fence runs it once.
    banks[0].restart(&["--lose-confirm-answers", "1"]);
    transfer(&tm, &banks, "bob", 5, quick).await.unwrap();
    let ran = banks[0].line("confirm ", "alice ran");
    let branch = ran.split(' ').nth(1).unwrap().to_string();
    banks[0].line(&format!("confirm {branch} "), "already-done");
    table.push(("a confirm sent twice", settled(&banks).await));
    assert_eq!(table.last().unwrap().1, [88, 10, 2]);

    // 4. bank-c is slow (its try's work waits 3 s after the branch is registered): the
    //    TM gives up on it after 1 s and rolls back; the cancel reaches bank-c before
    //    its try does (an empty rollback), and the late try is refused.
    banks[2].restart(&["--try-delay-ms", "3000"]);
    let e = transfer(&tm, &banks, "bob", 5, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(e.contains("no answer within"), "{e}");
    banks[2].line("cancel ", "fees empty-rollback");
    banks[2].line("try fees refused", "");
    table.push(("a cancel before its try", settled(&banks).await));
    assert_eq!(table.last().unwrap().1, [88, 10, 2]);

    // 5. bank-b is killed after its try, before the commit: the TC commits, and
    //    confirms bank-b's branch once it is back.
    banks[2].restart(&[]);
    let global = tm.begin("transfer", Duration::from_secs(30)).await.unwrap();
    let (a, b, c) = (banks[0].addr, banks[1].addr, banks[2].addr);
    tx::with_xid(global.xid(), None, async {
        http_try(a, "alice", -6).await.unwrap();
        http_try(b, "bob", 5).await.unwrap();
        grpc_try(c, "fees", 1, quick).await.unwrap();
    })
    .await;
    banks[1].kill();
    let status = global.commit().await.unwrap();
    banks[1].restart(&[]);
    banks[1].line("confirm ", "bob ran");
    table.push(("bank-b killed before the commit", settled(&banks).await));
    assert_eq!(table.last().unwrap().1, [82, 15, 3]);

    println!(
        "\n| after | alice (bank-a, HTTP) | bob (bank-b, HTTP) | fees (bank-c, gRPC) | total |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (what, [a, b, c]) in &table {
        println!("| {what} | {a} | {b} | {c} | {} |", a + b + c);
        assert_eq!(a + b + c, 100, "{what}: money created or lost");
    }
    println!("\n(the commit with bank-b down answered {status})");
}
