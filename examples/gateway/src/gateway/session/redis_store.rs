//! Sessions in Redis, shared by every gateway pointed at it (see the
//! [session module docs](super)).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use meshline::Instance;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use super::store::{Refreshed, Saved, SessionRecord, SessionStore, StoreError};

/// Redis key prefix of a session's hash: `meshline:gw:session:<id>`.
pub const KEY_PREFIX: &str = "meshline:gw:session:";

/// Writes a session's hash unless another gateway claimed it (ARGV[1] = `1` claims).
/// KEYS[1] = the key; ARGV = claim, gateway, TTL (ms), then field, value, ...
const SAVE_SCRIPT: &str = r"
local owner = redis.call('HGET', KEYS[1], 'gateway')
if ARGV[1] ~= '1' and owner and owner ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Per key: 1 = ours, TTL restarted; 0 = missing; 2 = another gateway's.
/// ARGV = gateway, TTL (ms).
const REFRESH_SCRIPT: &str = r"
local out = {}
for i, k in ipairs(KEYS) do
  local owner = redis.call('HGET', k, 'gateway')
  if not owner then out[i] = 0
  elseif owner == ARGV[1] then redis.call('PEXPIRE', k, ARGV[2]); out[i] = 1
  else out[i] = 2 end
end
return out
";

/// Deletes the key if ARGV[1] (this gateway) holds it.
const DELETE_SCRIPT: &str = r"
if redis.call('HGET', KEYS[1], 'gateway') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// After a failed connect, commands fail at once for this long instead of each trying
/// again (a resume storm against a Redis that is down costs nothing).
const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);

#[derive(Default)]
struct RedisConn {
    conn: Option<MultiplexedConnection>,
    failed_at: Option<Instant>,
}

/// Sessions in Redis, shared by every gateway pointed at it: a hash per session
/// (`meshline:gw:session:<id>`, see the [session module docs](super)), TTL = the resume window.
pub struct RedisStore {
    client: redis::Client,
    /// The URL without its password, for errors and logs.
    server: String,
    gateway: String,
    ttl: Duration,
    timeout: Duration,
    conn: tokio::sync::Mutex<RedisConn>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.server)
            .field("gateway", &self.gateway)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// `redis://user:pw@host:port/db` -> `redis://host:port/db`.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://{}", &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// True when the connection should be dropped and opened again.
fn connection_broken(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

impl RedisStore {
    /// A store at `url` (`redis://[:password@]host:port[/db]`) for gateway `gateway`,
    /// keeping records for `ttl` after their last write or refresh, each command
    /// bounded by `timeout`. Connects lazily: a Redis that is down does not stop the
    /// gateway from starting.
    pub fn new(
        url: &str,
        gateway: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let server = redact(url);
        let client = redis::Client::open(url).map_err(|e| StoreError::new(&server, e))?;
        Ok(RedisStore {
            client,
            server,
            gateway: gateway.to_string(),
            ttl: ttl.max(Duration::from_secs(1)),
            timeout: timeout.max(Duration::from_millis(50)),
            conn: tokio::sync::Mutex::new(RedisConn::default()),
        })
    }

    fn key(id: &str) -> String {
        format!("{KEY_PREFIX}{id}")
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::new(format!("redis {}", self.server), e)
    }

    async fn conn(&self) -> Result<MultiplexedConnection, StoreError> {
        let mut st = self.conn.lock().await;
        if let Some(c) = &st.conn {
            return Ok(c.clone());
        }
        if st
            .failed_at
            .is_some_and(|t| t.elapsed() < RECONNECT_BACKOFF)
        {
            return Err(self.err("not reachable (retrying shortly)"));
        }
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let opened = tokio::time::timeout(
            self.timeout,
            self.client
                .get_multiplexed_async_connection_with_config(&cfg),
        )
        .await;
        match opened {
            Ok(Ok(c)) => {
                if st.failed_at.take().is_some() {
                    tracing::info!(server = %self.server, "session store: connected to redis");
                }
                st.conn = Some(c.clone());
                Ok(c)
            }
            Ok(Err(e)) => {
                st.failed_at = Some(Instant::now());
                Err(self.err(format!("cannot connect: {e}")))
            }
            Err(_) => {
                st.failed_at = Some(Instant::now());
                Err(self.err(format!("no connection within {:?}", self.timeout)))
            }
        }
    }

    async fn drop_conn(&self) {
        self.conn.lock().await.conn = None;
    }

    /// Runs one command; a broken connection is dropped (the next command reconnects).
    async fn run<T: redis::FromRedisValue>(
        &self,
        op: &str,
        cmd: redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut c = self.conn().await?;
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut c)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if connection_broken(&e) {
                    self.drop_conn().await;
                }
                Err(self.err(format!("{op}: {e}")))
            }
            Err(_) => {
                self.drop_conn().await;
                Err(self.err(format!("{op}: no answer within {:?}", self.timeout)))
            }
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().try_into().unwrap_or(u64::MAX)
    }
}

/// Hash fields: `account`, `secret` (SHA-256 hex), `gateway`, `role`, `state`,
/// `b:<slot>` (a binding's backend, `host:port`), `g:<group>`.
fn record_fields(record: &SessionRecord, gateway: &str) -> Vec<String> {
    let mut f = vec![
        "account".to_string(),
        record.account.clone(),
        "secret".into(),
        record.secret_sha256.clone(),
        "gateway".into(),
        gateway.to_string(),
        "role".into(),
        record.role.clone(),
        "state".into(),
        record.user_state.clone(),
    ];
    for (slot, backend) in &record.bindings {
        f.push(format!("b:{slot}"));
        f.push(backend.to_string());
    }
    for g in &record.groups {
        f.push(format!("g:{g}"));
        f.push("1".into());
    }
    f
}

fn parse_record(id: &str, mut h: HashMap<String, String>) -> Result<SessionRecord, String> {
    let mut take = |k: &str| h.remove(k);
    let account = take("account").ok_or("no account")?;
    let secret_sha256 = take("secret").ok_or("no secret hash")?;
    let mut r = SessionRecord {
        id: id.to_string(),
        account,
        secret_sha256,
        role: take("role").unwrap_or_default(),
        user_state: take("state").unwrap_or_default(),
        ..SessionRecord::default()
    };
    for (k, v) in h {
        if let Some(slot) = k.strip_prefix("b:") {
            let backend = Instance::parse(&v)
                .map_err(|e| format!("binding {slot}: {e}"))?
                .key()
                .clone();
            r.bindings.insert(slot.to_string(), backend);
        } else if let Some(g) = k.strip_prefix("g:") {
            r.groups.insert(g.to_string());
        }
    }
    Ok(r)
}

#[async_trait]
impl SessionStore for RedisStore {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn load(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(Self::key(id));
        let h: HashMap<String, String> = self.run("HGETALL", cmd).await?;
        if h.is_empty() {
            return Ok(None);
        }
        parse_record(id, h)
            .map(Some)
            .map_err(|e| self.err(format!("session {id}: bad record: {e}")))
    }

    async fn save(&self, record: &SessionRecord, claim: bool) -> Result<Saved, StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SAVE_SCRIPT)
            .arg(1)
            .arg(Self::key(&record.id))
            .arg(if claim { "1" } else { "0" })
            .arg(&self.gateway)
            .arg(self.ttl_ms())
            .arg(record_fields(record, &self.gateway));
        let n: i64 = self.run("save", cmd).await?;
        Ok(if n == 1 { Saved::Written } else { Saved::Taken })
    }

    async fn refresh(&self, ids: &[String]) -> Result<Vec<Refreshed>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| Self::key(id)).collect();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(REFRESH_SCRIPT)
            .arg(keys.len())
            .arg(&keys)
            .arg(&self.gateway)
            .arg(self.ttl_ms());
        let v: Vec<i64> = self.run("refresh", cmd).await?;
        Ok(v.into_iter()
            .map(|n| match n {
                1 => Refreshed::Kept,
                0 => Refreshed::Missing,
                _ => Refreshed::Taken,
            })
            .collect())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DELETE_SCRIPT)
            .arg(1)
            .arg(Self::key(id))
            .arg(&self.gateway);
        self.run::<i64>("delete", cmd).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::secret_sha256;
    use super::*;

    #[test]
    fn records_round_trip_through_hash_fields() {
        let mut r = SessionRecord {
            id: "0123456789abcdef0123456789abcdef".into(),
            account: "alice".into(),
            secret_sha256: secret_sha256("s"),
            role: "knight".into(),
            user_state: "knight;lvl=3".into(),
            ..SessionRecord::default()
        };
        r.bindings.insert(
            "room".into(),
            Instance::parse("127.0.0.1:7101").unwrap().key().clone(),
        );
        r.bindings.insert(
            "m:4".into(),
            Instance::parse("[::1]:7102").unwrap().key().clone(),
        );
        r.groups.insert("room:r1".into());
        let fields = record_fields(&r, "gw-1");
        assert!(!fields.iter().any(|f| f == "s"), "the secret is not stored");
        let h: HashMap<String, String> = fields
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect();
        assert_eq!(h["gateway"], "gw-1");
        assert_eq!(parse_record(&r.id, h).unwrap(), r);
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("redis://:pw@127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
