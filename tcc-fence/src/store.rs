//! The fence log's SQL, per database: Seata's DDL and statements
//! (`CommonFenceStoreSqls`), with the time taken by the database (`NOW(3)`,
//! `LOCALTIMESTAMP(3)`, SQLite's `strftime`) so no date type crosses the driver.

use std::future::Future;
use std::pin::Pin;

use sqlx::Transaction;

/// A boxed, sendable future (the fence's statements, per database).
#[doc(hidden)]
pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

/// The statements for one table (public only as the sealed trait's plumbing).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Statements {
    pub create: Vec<String>,
    pub insert: String,
    pub update: String,
    pub status: String,
    pub clean: String,
}

/// A database the fence runs on: SQLite, PostgreSQL, MySQL / MariaDB (each behind
/// its feature). Sealed: the statements are written for these three.
pub trait FenceDb: sqlx::Database + sealed::Sealed {
    #[doc(hidden)]
    fn statements(table: &str) -> Statements;
    #[doc(hidden)]
    fn insert<'a>(
        tx: &'a mut Transaction<'static, Self>,
        sql: &'a str,
        xid: &'a str,
        branch_id: i64,
        action: &'a str,
        status: i32,
    ) -> Boxed<'a, u64>;
    #[doc(hidden)]
    fn update<'a>(
        tx: &'a mut Transaction<'static, Self>,
        sql: &'a str,
        to: i32,
        xid: &'a str,
        branch_id: i64,
        from: i32,
    ) -> Boxed<'a, u64>;
    #[doc(hidden)]
    fn status<'a>(
        tx: &'a mut Transaction<'static, Self>,
        sql: &'a str,
        xid: &'a str,
        branch_id: i64,
    ) -> Boxed<'a, Option<i64>>;
    #[doc(hidden)]
    fn execute<'a>(
        pool: &'a sqlx::Pool<Self>,
        sql: &'a str,
        seconds: Option<i64>,
    ) -> Boxed<'a, u64>;
}

mod sealed {
    pub trait Sealed {}
}

/// The four operations, the same code for each database (their drivers differ only
/// in types the compiler must see concretely).
macro_rules! fence_db {
    ($db:ty, $statements:expr) => {
        // A scope of its own per database, so each can have its `rows_changed`.
        const _: () = {
            /// Runs `query` (its values bound) in `tx`: the rows it changed (`INSERT` and
            /// `UPDATE` differ only in the values they bind).
            fn rows_changed<'a>(
                tx: &'a mut Transaction<'static, $db>,
                query: sqlx::query::Query<'a, $db, <$db as sqlx::Database>::Arguments<'a>>,
            ) -> Boxed<'a, u64> {
                Box::pin(async move { Ok(query.execute(&mut **tx).await?.rows_affected()) })
            }

            impl sealed::Sealed for $db {}

            impl FenceDb for $db {
                fn statements(table: &str) -> Statements {
                    $statements(table)
                }

                fn insert<'a>(
                    tx: &'a mut Transaction<'static, Self>,
                    sql: &'a str,
                    xid: &'a str,
                    branch_id: i64,
                    action: &'a str,
                    status: i32,
                ) -> Boxed<'a, u64> {
                    let query = sqlx::query(sql).bind(xid).bind(branch_id).bind(action);
                    rows_changed(tx, query.bind(status))
                }

                fn update<'a>(
                    tx: &'a mut Transaction<'static, Self>,
                    sql: &'a str,
                    to: i32,
                    xid: &'a str,
                    branch_id: i64,
                    from: i32,
                ) -> Boxed<'a, u64> {
                    let query = sqlx::query(sql)
                        .bind(to)
                        .bind(xid)
                        .bind(branch_id)
                        .bind(from);
                    rows_changed(tx, query)
                }

                fn status<'a>(
                    tx: &'a mut Transaction<'static, Self>,
                    sql: &'a str,
                    xid: &'a str,
                    branch_id: i64,
                ) -> Boxed<'a, Option<i64>> {
                    Box::pin(async move {
                        let row: Option<(i64,)> = sqlx::query_as(sql)
                            .bind(xid)
                            .bind(branch_id)
                            .fetch_optional(&mut **tx)
                            .await?;
                        Ok(row.map(|r| r.0))
                    })
                }

                fn execute<'a>(
                    pool: &'a sqlx::Pool<Self>,
                    sql: &'a str,
                    seconds: Option<i64>,
                ) -> Boxed<'a, u64> {
                    Box::pin(async move {
                        let q = sqlx::query(sql);
                        let q = match seconds {
                            Some(s) => q.bind(s),
                            None => q,
                        };
                        Ok(q.execute(pool).await?.rows_affected())
                    })
                }
            }
        };
    };
}

/// The statements for `table`: `create` (its DDL), then `INSERT`, `UPDATE`, `SELECT`
/// and the cleaner's `DELETE`, with `now` the database's current time and `p(i)` the
/// i-th placeholder.
fn common(
    table: &str,
    create: Vec<String>,
    now: &str,
    p: impl Fn(usize) -> String,
    int: impl Fn(String) -> String,
    long: impl Fn(String) -> String,
    older_than: impl Fn(String) -> String,
) -> Statements {
    let insert = format!(
        "INSERT INTO {table} (xid, branch_id, action_name, status, gmt_create, gmt_modified) \
         VALUES ({}, {}, {}, {}, {now}, {now})",
        p(1),
        p(2),
        p(3),
        int(p(4))
    );
    let update = format!(
        "UPDATE {table} SET status = {}, gmt_modified = {now} \
         WHERE xid = {} AND branch_id = {} AND status = {}",
        int(p(1)),
        p(2),
        p(3),
        int(p(4))
    );
    let status = format!(
        "SELECT {} FROM {table} WHERE xid = {} AND branch_id = {}",
        long("status".into()),
        p(1),
        p(2)
    );
    let clean = format!(
        "DELETE FROM {table} WHERE gmt_modified < {} AND status IN (2, 3, 4)",
        older_than(p(1))
    );
    Statements {
        create,
        insert,
        update,
        status,
        clean,
    }
}

/// `create_table`, then the two indexes of Seata's scripts (`gmt_modified`,
/// `status`), named per table (a schema-qualified name loses its dot) and created
/// only if missing.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn with_indexes(create_table: String, table: &str) -> Vec<String> {
    let indexes = ["gmt_modified", "status"].map(|column| {
        format!(
            "CREATE INDEX IF NOT EXISTS idx_{}_{column} ON {table} ({column})",
            table.replace('.', "_")
        )
    });
    std::iter::once(create_table).chain(indexes).collect()
}

#[cfg(feature = "sqlite")]
fn sqlite(table: &str) -> Statements {
    // Seata ships no SQLite script: its columns, in SQLite's types (times as ISO
    // text, which sorts as time).
    let create = with_indexes(
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (xid VARCHAR(128) NOT NULL, \
                 branch_id BIGINT NOT NULL, action_name VARCHAR(64) NOT NULL, \
                 status TINYINT NOT NULL, gmt_create TEXT NOT NULL, gmt_modified TEXT NOT NULL, \
                 PRIMARY KEY (xid, branch_id))"
        ),
        table,
    );
    common(
        table,
        create,
        "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        |_| "?".into(),
        |p| p,
        |c| c,
        |p| format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || {p} || ' seconds')"),
    )
}

#[cfg(feature = "postgres")]
fn postgres(table: &str) -> Statements {
    const NOW: &str = "LOCALTIMESTAMP(3)";
    // Seata's script/client/tcc/db/postgresql.sql (indexes named per table, and
    // created only if missing, so the DDL can run at every start).
    let create = with_indexes(
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (xid VARCHAR(128) NOT NULL, \
                 branch_id BIGINT NOT NULL, action_name VARCHAR(64) NOT NULL, \
                 status SMALLINT NOT NULL, gmt_create TIMESTAMP(3) NOT NULL, \
                 gmt_modified TIMESTAMP(3) NOT NULL, \
                 CONSTRAINT pk_{} PRIMARY KEY (xid, branch_id))",
            table.replace('.', "_")
        ),
        table,
    );
    common(
        table,
        create,
        NOW,
        |i| format!("${i}"),
        |p| format!("CAST({p} AS INTEGER)"),
        |c| format!("CAST({c} AS BIGINT)"),
        |p| format!("{NOW} - CAST({p} AS BIGINT) * INTERVAL '1 second'"),
    )
}

#[cfg(feature = "mysql")]
fn mysql(table: &str) -> Statements {
    const NOW: &str = "NOW(3)";
    // Seata's script/client/tcc/db/mysql.sql.
    let create = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
         `xid` VARCHAR(128) NOT NULL COMMENT 'global id', \
         `branch_id` BIGINT NOT NULL COMMENT 'branch id', \
         `action_name` VARCHAR(64) NOT NULL COMMENT 'action name', \
         `status` TINYINT NOT NULL COMMENT 'status(tried:1;committed:2;rollbacked:3;suspended:4)', \
         `gmt_create` DATETIME(3) NOT NULL COMMENT 'create time', \
         `gmt_modified` DATETIME(3) NOT NULL COMMENT 'update time', \
         PRIMARY KEY (`xid`, `branch_id`), \
         KEY `idx_gmt_modified` (`gmt_modified`), \
         KEY `idx_status` (`status`)\
         ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
    )];
    common(
        table,
        create,
        NOW,
        |_| "?".into(),
        |p| p,
        |c| format!("CAST({c} AS SIGNED)"),
        |p| format!("{NOW} - INTERVAL {p} SECOND"),
    )
}

#[cfg(feature = "sqlite")]
fence_db!(sqlx::Sqlite, sqlite);
#[cfg(feature = "postgres")]
fence_db!(sqlx::Postgres, postgres);
#[cfg(feature = "mysql")]
fence_db!(sqlx::MySql, mysql);
