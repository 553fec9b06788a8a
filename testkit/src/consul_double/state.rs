//! The agent's catalog: services, their checks, and the Raft-like indexes that blocking
//! queries wait on (one a service name, one for the services table).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::watch;

use super::ConsulDoubleOptions;
use crate::http_double::lock;

/// A check's (and so its service's) health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Passing,
    Warning,
    Critical,
}

impl Status {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Status::Passing => "passing",
            Status::Warning => "warning",
            Status::Critical => "critical",
        }
    }
    pub(super) fn parse(s: &str) -> Option<Status> {
        match s {
            "passing" => Some(Status::Passing),
            "warning" => Some(Status::Warning),
            "critical" => Some(Status::Critical),
            _ => None,
        }
    }
}

/// What a check watches, with its clock.
#[derive(Debug, Clone)]
pub(super) enum CheckKind {
    Ttl {
        ttl: Duration,
        deadline: Instant,
    },
    Tcp {
        target: String,
        interval: Duration,
        timeout: Duration,
        next_run: Instant,
        running: bool,
    },
}

/// A check as the agent keeps it.
#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) service_id: String,
    pub(super) status: Status,
    pub(super) output: String,
    pub(super) notes: String,
    pub(super) kind: CheckKind,
    pub(super) deregister_after: Option<Duration>,
    pub(super) critical_since: Option<Instant>,
    pub(super) create_index: u64,
    pub(super) modify_index: u64,
}

/// A registered service.
#[derive(Debug, Clone)]
pub(super) struct Svc {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) tags: Vec<String>,
    pub(super) address: String,
    pub(super) port: i64,
    pub(super) meta: Map<String, Value>,
    pub(super) weights: (i64, i64),
    pub(super) enable_tag_override: bool,
    pub(super) create_index: u64,
    pub(super) modify_index: u64,
}

/// The catalog.
pub(super) struct Db {
    pub(super) index: u64,
    pub(super) services_index: u64,
    /// Lower-cased service name -> index of its last change.
    pub(super) name_index: HashMap<String, u64>,
    pub(super) services: BTreeMap<String, Svc>,
    pub(super) checks: BTreeMap<String, Check>,
    /// The KV store (`/v1/kv/*`).
    pub(super) kv: super::kv::store::KvStore,
}

/// What every handler and the ticker share: the settings, the catalog and the
/// change signal blocking queries wait on.
pub(super) struct Shared {
    pub(super) opts: ConsulDoubleOptions,
    db: Mutex<Db>,
    pub(super) changed: watch::Sender<u64>,
}

impl Shared {
    /// A fresh catalog: no services, every index at 1.
    pub(super) fn new(opts: ConsulDoubleOptions) -> Self {
        Shared {
            opts,
            db: Mutex::new(Db {
                index: 1,
                services_index: 1,
                name_index: HashMap::new(),
                services: BTreeMap::new(),
                checks: BTreeMap::new(),
                kv: Default::default(),
            }),
            changed: watch::Sender::new(1),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Db> {
        lock(&self.db)
    }

    /// Bumps the index for the given service names and wakes blocking queries.
    pub(super) fn bump(&self, db: &mut Db, names: &[&str], services_table: bool) -> u64 {
        db.index += 1;
        let i = db.index;
        for n in names {
            db.name_index.insert(n.to_ascii_lowercase(), i);
        }
        if services_table {
            db.services_index = i;
        }
        self.changed.send_replace(i);
        i
    }

    /// Records a result of check `id`: its output always, its status (with a new modify
    /// index, the critical clock and a wake-up of blocking queries) only when it
    /// changed, as Consul does. `rearm` resets the check's clock (TTL deadline, next
    /// TCP run). An unknown check is ignored.
    pub(super) fn record_result(
        &self,
        db: &mut Db,
        id: &str,
        status: Status,
        output: String,
        rearm: impl FnOnce(&mut CheckKind, Instant),
    ) {
        let Some(check) = db.checks.get(id) else {
            return;
        };
        let name = db.service_name_of_check(check);
        let changed = check.status != status;
        let next_index = db.index + 1;
        let now = Instant::now();
        if let Some(c) = db.checks.get_mut(id) {
            rearm(&mut c.kind, now);
            c.output = output;
            if changed {
                c.status = status;
                c.modify_index = next_index;
                c.critical_since = (status == Status::Critical).then_some(now);
            }
        }
        if changed {
            let names: Vec<&str> = name.as_deref().into_iter().collect();
            self.bump(db, &names, false);
        }
    }
}

impl Db {
    /// The index of the service `name` (the services table's when it has none yet).
    pub(super) fn index_of(&self, name: &str) -> u64 {
        self.name_index
            .get(&name.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.services_index)
            .max(1)
    }

    /// The name of the service check `c` belongs to.
    pub(super) fn service_name_of_check(&self, c: &Check) -> Option<String> {
        self.services.get(&c.service_id).map(|s| s.name.clone())
    }
}
