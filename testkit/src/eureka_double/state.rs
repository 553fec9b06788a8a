//! The registry: instances by application with their leases, the queue of recent
//! changes the delta is made of, and the evictor that expires unrenewed leases.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::EurekaDoubleOptions;
use crate::http_double::lock;

/// A registered instance.
#[derive(Debug, Clone)]
pub(super) struct Rec {
    pub(super) app: String,
    pub(super) id: String,
    /// The instance object as registered (fields the server owns are overlaid on output).
    pub(super) body: Map<String, Value>,
    pub(super) status: String,
    pub(super) overridden: String,
    pub(super) lease: Duration,
    pub(super) renewal_secs: u64,
    pub(super) last_renewal: Instant,
    pub(super) registration_ms: u128,
    pub(super) last_renewal_ms: u128,
    pub(super) up_ms: u128,
    pub(super) last_updated_ms: u128,
    pub(super) last_dirty_ms: u128,
}

impl Rec {
    /// The status clients see: the override when one is set.
    pub(super) fn effective_status(&self) -> &str {
        if self.overridden != "UNKNOWN" && !self.overridden.is_empty() {
            &self.overridden
        } else {
            &self.status
        }
    }
}

/// A change, kept for the delta.
pub(super) struct Change {
    pub(super) at: Instant,
    pub(super) action: &'static str,
    pub(super) rec: Rec,
}

/// The registry.
pub(super) struct Db {
    /// Upper-cased application name -> instance ID -> instance.
    pub(super) apps: BTreeMap<String, BTreeMap<String, Rec>>,
    /// The changes still within the retention window, oldest first.
    pub(super) recent: VecDeque<Change>,
    /// Bumped on every change (`versions__delta`).
    pub(super) version: u64,
}

impl Db {
    /// Records a change for the delta.
    pub(super) fn record(&mut self, action: &'static str, rec: Rec) {
        self.version += 1;
        self.recent.push_back(Change {
            at: Instant::now(),
            action,
            rec,
        });
    }

    /// Removes instance `id` of `app` (and the application with its last instance),
    /// recording it as `DELETED`; false when there was no such instance.
    pub(super) fn remove(&mut self, app: &str, id: &str) -> bool {
        let rec = self.apps.get_mut(app).and_then(|m| m.remove(id));
        if self.apps.get(app).is_some_and(BTreeMap::is_empty) {
            self.apps.remove(app);
        }
        let removed = rec.is_some();
        if let Some(rec) = rec {
            self.record("DELETED", rec);
        }
        removed
    }

    /// The instance `id` of any application.
    pub(super) fn find(&self, id: &str) -> Option<&Rec> {
        self.apps.values().find_map(|m| m.get(id))
    }

    /// Instance `id` of application `app` (any case, as in the request's path).
    pub(super) fn instance_mut(&mut self, app: &str, id: &str) -> Option<&mut Rec> {
        self.apps
            .get_mut(&app.to_uppercase())
            .and_then(|m| m.get_mut(id))
    }

    /// `apps__hashcode`: the count of instances by status, statuses sorted
    /// (`DOWN_1_UP_2_`).
    pub(super) fn hashcode(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in self.apps.values().flat_map(|m| m.values()) {
            *counts.entry(r.effective_status()).or_default() += 1;
        }
        counts
            .iter()
            .map(|(s, n)| format!("{s}_{n}_"))
            .collect::<String>()
    }
}

/// What every handler and the evictor share: the settings and the registry.
pub(super) struct Shared {
    pub(super) opts: EurekaDoubleOptions,
    db: Mutex<Db>,
}

impl Shared {
    /// An empty registry.
    pub(super) fn new(opts: EurekaDoubleOptions) -> Self {
        Shared {
            opts,
            db: Mutex::new(Db {
                apps: BTreeMap::new(),
                recent: VecDeque::new(),
                version: 1,
            }),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Db> {
        lock(&self.db)
    }
}

/// Milliseconds since the Unix epoch, Eureka's timestamps.
pub(super) fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Evicts the instances whose lease ran out, and drops the changes older than the
/// retention, every `eviction_interval`.
pub(super) async fn evictor(shared: Arc<Shared>) {
    let mut tick =
        tokio::time::interval(shared.opts.eviction_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut db = shared.lock();
        let expired: Vec<(String, String)> = db
            .apps
            .iter()
            .flat_map(|(app, m)| {
                m.values()
                    .filter(|r| now.duration_since(r.last_renewal) > r.lease)
                    .map(|r| (app.clone(), r.id.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (app, id) in expired {
            db.remove(&app, &id);
        }
        let retention = shared.opts.retention;
        while db
            .recent
            .front()
            .is_some_and(|c| now.duration_since(c.at) > retention)
        {
            db.recent.pop_front();
        }
    }
}
