//! [`MemoryCentre`]: a config centre held in memory, for tests of a program that
//! follows a centre (and of the centre machinery itself): what a real centre does,
//! entries by name and a push to every follower of a changed entry, without a server.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::ConfigCentre;
use crate::ConfigError;

/// A config centre in memory: [`put`](Self::put) an entry and every follower of its
/// name is told, as a centre's push would; [`set_failing`](Self::set_failing) makes
/// every read fail, as an unreachable centre's would.
#[derive(Debug)]
pub struct MemoryCentre {
    kind: &'static str,
    entries: Mutex<BTreeMap<String, String>>,
    followers: Mutex<Vec<(Vec<String>, mpsc::Sender<()>)>>,
    failing: AtomicBool,
}

impl MemoryCentre {
    /// An empty centre that calls itself `kind` (`nacos`, `etcd3`...: the kind decides
    /// which of Seata's defaults a `CentreSpec` reads it with).
    pub fn new(kind: &'static str) -> MemoryCentre {
        MemoryCentre {
            kind,
            entries: Mutex::default(),
            followers: Mutex::default(),
            failing: AtomicBool::new(false),
        }
    }

    /// Sets entry `name` to `value` and tells its followers.
    pub fn put(&self, name: &str, value: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), value.to_string());
        let followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        for (names, tx) in followers.iter() {
            if names.iter().any(|n| n == name) {
                // A follower already told of a change re-reads everything it follows.
                let _ = tx.try_send(());
            }
        }
    }

    /// While `failing`, every read fails (`centre down`), as an unreachable centre's.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
}

#[async_trait]
impl ConfigCentre for MemoryCentre {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn location(&self) -> String {
        "memory".into()
    }

    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(ConfigError::Invalid("centre down".into()));
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        Ok(entries.get(name).cloned())
    }

    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError> {
        let (tx, rx) = mpsc::channel(8);
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((names, tx));
        Ok(rx)
    }
}
