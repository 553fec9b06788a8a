//! The fence against real databases: SQLite (a file), PostgreSQL and MariaDB (servers
//! the test starts), each with Seata's three TCC faults, shown harmful without the
//! fence and harmless with it:
//!
//! - a confirm the TC sends twice (idempotency),
//! - a cancel with no try before it (empty rollback),
//! - a try that arrives after its cancel (anti-suspension; here the business code
//!   even guards the first two by hand, with a reservation row, and still freezes
//!   money no one will release);
//!
//! and two confirms of one branch at once, a failing work that takes its fence row
//! back with it, and the log cleaner.
//!
//! The account: 100 in `balance`; a TCC debit of 5 freezes it (try), then takes it
//! (confirm) or gives it back (cancel). Money is right when `balance + frozen` is what
//! it should be and nothing stays frozen.

use std::time::Duration;

use meshline_rpc_client::tcc::BusinessActionContext;
use meshline_tcc_fence::{FenceError, FenceStatus, Fenced, TccFence};

fn ctx(branch: i64) -> BusinessActionContext {
    BusinessActionContext::new("127.0.0.1:8091:77", branch, "debit", Default::default())
}

/// The scenarios for one database type, over a pool made by `$pool`.
macro_rules! scenarios {
    ($db:ty) => {
        use sqlx::{Pool, Transaction};
        type Db = $db;

        async fn setup(pool: &Pool<Db>) -> TccFence<Db> {
            for sql in [
                "DROP TABLE IF EXISTS account",
                "DROP TABLE IF EXISTS reservation",
                "DROP TABLE IF EXISTS tcc_fence_log",
                "CREATE TABLE account (id VARCHAR(16) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL)",
                "CREATE TABLE reservation (branch_id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)",
                "INSERT INTO account (id, balance, frozen) VALUES ('alice', 100, 0)",
            ] {
                sqlx::query(sql).execute(pool).await.unwrap();
            }
            let fence = TccFence::new(pool.clone());
            fence.create_table().await.unwrap();
            fence.create_table().await.unwrap(); // idempotent: runs at every start
            fence
        }

        /// (balance, frozen).
        async fn money(pool: &Pool<Db>) -> (i64, i64) {
            sqlx::query_as("SELECT balance, frozen FROM account WHERE id = 'alice'")
                .fetch_one(pool)
                .await
                .unwrap()
        }

        async fn run(tx: &mut Transaction<'static, Db>, sql: &str) -> Result<(), sqlx::Error> {
            sqlx::query(sql).execute(&mut **tx).await.map(|_| ())
        }

        // The business, as a service writes it without a fence.
        const TRY: &str = "UPDATE account SET balance = balance - 5, frozen = frozen + 5 WHERE id = 'alice'";
        const CONFIRM: &str = "UPDATE account SET frozen = frozen - 5 WHERE id = 'alice'";
        const CANCEL: &str = "UPDATE account SET balance = balance + 5, frozen = frozen - 5 WHERE id = 'alice'";

        async fn a_confirm_sent_twice_takes_the_money_once(pool: Pool<Db>) {
            let fence = setup(&pool).await;
            let c = ctx(1);
            fence.prepare(&c, |tx| Box::pin(run(tx, TRY))).await.unwrap();
            assert!(matches!(fence.commit(&c, |tx| Box::pin(run(tx, CONFIRM))).await, Ok(Fenced::Ran(()))));
            assert!(matches!(fence.commit(&c, |tx| Box::pin(run(tx, CONFIRM))).await, Ok(Fenced::AlreadyDone)));
            assert_eq!(money(&pool).await, (95, 0), "with the fence");
            assert_eq!(fence.status(c.xid(), 1).await.unwrap(), Some(FenceStatus::Committed));
            // Without it, the second confirm takes 5 that is not frozen.
            let fence = setup(&pool).await;
            drop(fence);
            let mut tx = pool.begin().await.unwrap();
            for sql in [TRY, CONFIRM, CONFIRM] {
                run(&mut tx, sql).await.unwrap();
            }
            tx.commit().await.unwrap();
            assert_eq!(money(&pool).await, (95, -5), "without the fence, 5 vanished");
        }

        async fn a_cancel_with_no_try_gives_nothing_back(pool: Pool<Db>) {
            let fence = setup(&pool).await;
            let c = ctx(2);
            let r = fence.rollback(&c, |tx| Box::pin(run(tx, CANCEL))).await;
            assert!(matches!(r, Ok(Fenced::EmptyRollback)), "{r:?}");
            assert!(matches!(fence.rollback(&c, |tx| Box::pin(run(tx, CANCEL))).await, Ok(Fenced::AlreadyDone)));
            assert_eq!(money(&pool).await, (100, 0), "with the fence");
            assert_eq!(fence.status(c.xid(), 2).await.unwrap(), Some(FenceStatus::Suspended));
            // A confirm of a branch with no try is refused.
            let r = fence.commit(&ctx(9), |tx| Box::pin(run(tx, CONFIRM))).await;
            assert!(matches!(r, Err(FenceError::NoTry { branch_id: 9, .. })), "{r:?}");
            let fence = setup(&pool).await;
            drop(fence);
            sqlx::query(CANCEL).execute(&pool).await.unwrap();
            assert_eq!(money(&pool).await, (105, -5), "without the fence, 5 was created");
        }

        // A business that guards confirm and cancel by hand with a reservation row.
        const GUARDED_TRY: [&str; 2] = [
            "INSERT INTO reservation (branch_id, amount) VALUES (3, 5)",
            TRY,
        ];
        const GUARDED_CANCEL: [&str; 2] = [
            "UPDATE account SET balance = balance + 5, frozen = frozen - 5 WHERE id = 'alice' AND EXISTS (SELECT 1 FROM reservation WHERE branch_id = 3)",
            "DELETE FROM reservation WHERE branch_id = 3",
        ];

        async fn all(tx: &mut Transaction<'static, Db>, sqls: &[&str]) -> Result<(), sqlx::Error> {
            for sql in sqls {
                run(tx, sql).await?;
            }
            Ok(())
        }

        async fn a_try_after_its_cancel_is_refused(pool: Pool<Db>) {
            let fence = setup(&pool).await;
            let c = ctx(3);
            // The cancel overtook the try (network delay): an empty rollback...
            let r = fence.rollback(&c, |tx| Box::pin(all(tx, &GUARDED_CANCEL))).await;
            assert!(matches!(r, Ok(Fenced::EmptyRollback)), "{r:?}");
            // ... then the try arrives: refused, nothing frozen.
            let r = fence.prepare(&c, |tx| Box::pin(all(tx, &GUARDED_TRY))).await;
            assert!(matches!(r, Err(FenceError::Suspended { branch_id: 3, .. })), "{r:?}");
            assert_eq!(money(&pool).await, (100, 0), "with the fence");
            // Without it, the hand-written guard handles the empty cancel, and the late
            // try freezes 5 that no confirm or cancel will ever release.
            let fence = setup(&pool).await;
            drop(fence);
            let mut tx = pool.begin().await.unwrap();
            all(&mut tx, &GUARDED_CANCEL).await.unwrap();
            all(&mut tx, &GUARDED_TRY).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(money(&pool).await, (95, 5), "without the fence, 5 stays frozen");
        }

        async fn two_confirms_at_once_take_the_money_once_and_a_failed_work_leaves_no_trace(
            pool: Pool<Db>,
        ) {
            let fence = setup(&pool).await;
            let c = ctx(4);
            fence.prepare(&c, |tx| Box::pin(run(tx, TRY))).await.unwrap();
            let (a, b) = tokio::join!(
                fence.commit(&c, |tx| Box::pin(run(tx, CONFIRM))),
                fence.commit(&c, |tx| Box::pin(run(tx, CONFIRM)))
            );
            let ran = [&a, &b].iter().filter(|r| matches!(r, Ok(Fenced::Ran(())))).count();
            assert_eq!(ran, 1, "exactly one ran: {a:?} {b:?}");
            assert_eq!(money(&pool).await, (95, 0));
            // A cancel whose work fails: its row change is rolled back with it, and the
            // TC's retry finds the branch still tried.
            let c = ctx(5);
            fence.prepare(&c, |tx| Box::pin(run(tx, TRY))).await.unwrap();
            let r = fence
                .rollback(&c, |tx| {
                    Box::pin(async move {
                        run(tx, CANCEL).await?;
                        run(tx, "UPDATE no_such_table SET x = 1").await
                    })
                })
                .await;
            assert!(matches!(r, Err(FenceError::Work(_))), "{r:?}");
            assert_eq!(fence.status(c.xid(), 5).await.unwrap(), Some(FenceStatus::Tried));
            assert_eq!(money(&pool).await, (90, 5), "the failed cancel changed nothing");
            assert!(matches!(fence.rollback(&c, |tx| Box::pin(run(tx, CANCEL))).await, Ok(Fenced::Ran(()))));
            assert_eq!(money(&pool).await, (95, 0));
            // A confirm after that cancel does not apply.
            let r = fence.commit(&c, |tx| Box::pin(run(tx, CONFIRM))).await;
            assert!(matches!(r, Err(FenceError::Unexpected { status: FenceStatus::Rollbacked, .. })), "{r:?}");
        }

        async fn the_cleaner_deletes_old_ended_rows_only(pool: Pool<Db>) {
            let fence = setup(&pool).await;
            for (branch, end) in [(10, Some(true)), (11, Some(false)), (12, None), (13, Some(true))] {
                let c = ctx(branch);
                fence.prepare(&c, |tx| Box::pin(run(tx, TRY))).await.unwrap();
                match end {
                    Some(true) => { fence.commit(&c, |_| Box::pin(async { Ok::<_, sqlx::Error>(()) })).await.unwrap(); }
                    Some(false) => { fence.rollback(&c, |_| Box::pin(async { Ok::<_, sqlx::Error>(()) })).await.unwrap(); }
                    None => {}
                }
            }
            let empty = fence.rollback(&ctx(14), |_| Box::pin(async { Ok::<_, sqlx::Error>(()) })).await.unwrap();
            assert_eq!(empty, Fenced::EmptyRollback);
            assert_eq!(fence.clean(Duration::from_secs(3600)).await.unwrap(), 0, "nothing old yet");
            // Age every row but branch 13's by two hours.
            sqlx::query("UPDATE tcc_fence_log SET gmt_modified = '2000-01-01 00:00:00.000' WHERE branch_id <> 13")
                .execute(&pool)
                .await
                .unwrap();
            assert_eq!(fence.clean(Duration::from_secs(3600)).await.unwrap(), 3, "10, 11 and 14");
            for (branch, left) in [(10, false), (11, false), (12, true), (13, true), (14, false)] {
                assert_eq!(fence.status(ctx(branch).xid(), branch).await.unwrap().is_some(), left, "branch {branch}");
            }
        }

        /// Every scenario, each on a fresh database from `pool`, in turn (one
        /// server per test binary run, owned by the test that runs them).
        async fn all_scenarios<F: std::future::Future<Output = Pool<Db>>>(pool: impl Fn() -> F) {
            a_confirm_sent_twice_takes_the_money_once(pool().await).await;
            a_cancel_with_no_try_gives_nothing_back(pool().await).await;
            a_try_after_its_cancel_is_refused(pool().await).await;
            two_confirms_at_once_take_the_money_once_and_a_failed_work_leaves_no_trace(pool().await).await;
            the_cleaner_deletes_old_ended_rows_only(pool().await).await;
        }

        /// Every scenario on a database server, each in a fresh database (`t0`, `t1`...)
        /// created through a pool on `admin_url` and reached at `db_url(admin_url, name)`.
        #[allow(dead_code)] // SQLite makes its databases as files, not on a server.
        async fn all_scenarios_on_server(admin_url: &str, db_url: impl Fn(&str, &str) -> String) {
            let admin = Pool::<Db>::connect(admin_url).await.unwrap();
            let n = std::sync::atomic::AtomicU32::new(0);
            all_scenarios(|| {
                let name = format!("t{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let (admin, url) = (admin.clone(), db_url(admin_url, &name));
                async move {
                    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&admin).await.unwrap();
                    Pool::<Db>::connect(&url).await.unwrap()
                }
            })
            .await;
        }
    };
}

mod sqlite {
    use super::*;

    scenarios!(sqlx::Sqlite);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_three_faults_and_the_rest_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicU32::new(0);
        all_scenarios(|| {
            let path = dir.path().join(format!(
                "fence{}.db",
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            async move {
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect(&format!("sqlite://{}?mode=rwc", path.display()))
                    .await
                    .unwrap()
            }
        })
        .await;
    }
}

/// The cleaner task deletes an aged, ended row within a period or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_task_cleans_every_period() {
    let dir = tempfile::tempdir().unwrap();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(2)
        .connect(&format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("c.db").display()
        ))
        .await
        .unwrap();
    let fence = TccFence::new(pool.clone());
    fence.create_table().await.unwrap();
    let c = ctx(1);
    fence
        .prepare(&c, |_| Box::pin(async { Ok::<_, sqlx::Error>(()) }))
        .await
        .unwrap();
    fence
        .commit(&c, |_| Box::pin(async { Ok::<_, sqlx::Error>(()) }))
        .await
        .unwrap();
    sqlx::query("UPDATE tcc_fence_log SET gmt_modified = '2000-01-01 00:00:00.000'")
        .execute(&pool)
        .await
        .unwrap();
    let cleaner = fence.spawn_cleaner(Duration::from_secs(1));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fence.status(c.xid(), 1).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cleaner did not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cleaner.abort();
}

mod postgres {
    use super::*;

    scenarios!(sqlx::Postgres);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_three_faults_and_the_rest_on_postgresql() {
        let server = meshline_testkit::Postgres::start().unwrap_or_else(|e| panic!("{e}"));
        // The server stops when the test ends, after every scenario.
        all_scenarios_on_server(&server.url(), |url, name| {
            url.replace("/postgres", &format!("/{name}"))
        })
        .await;
    }
}

mod mariadb {
    use super::*;

    scenarios!(sqlx::MySql);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_three_faults_and_the_rest_on_mariadb() {
        let server = meshline_testkit::MariaDb::start().unwrap_or_else(|e| panic!("{e}"));
        // The server stops when the test ends, after every scenario.
        all_scenarios_on_server(&server.url(), |url, name| format!("{url}{name}")).await;
    }
}
