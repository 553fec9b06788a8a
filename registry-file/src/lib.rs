//! # meshline-registry-file
//!
//! Seata's `file` registry: the members of a cluster are the `;`-separated
//! `service.<cluster>.grouplist` in the configuration (YAML/TOML/JSON:
//! `service.grouplist.<cluster>`). Nothing registers here: like Seata's, this registry
//! is read-only and [`register`](RegistryService::register) returns
//! [`RegistryError::ReadOnly`].
//!
//! Unlike Seata's, it follows the file: when the configuration was loaded from a file
//! (or `registry.file.name` names one), every [`watch`](RegistryService::watch) sees an
//! edit within about a second. A broken edit (a syntax error, a bad address) keeps the
//! last good list and logs why; the rest of the file keeps working.
//!
//! Why polling and not inotify: the file is re-read every 250 ms and compared byte for
//! byte. That catches in-place writes, editors that replace the file by rename, and
//! network or container file systems where change notifications are lost, at the cost
//! of one small read per period. It needs no extra dependency.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::config::{ConfigLoader, split_grouplist};
use meshline_registry_core::{
    Config, EmptyProtection, Instance, Lifecycle, Nearby, RegistryError, RegistryService, Watch,
};

mod nearby;
mod settings;
pub use settings::FileSettings;

const KIND: &str = "file";

/// How often the followed file is re-read.
pub const POLL_PERIOD: Duration = Duration::from_millis(250);

/// The file registry. See the [crate docs](crate).
pub struct FileRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    life: Lifecycle,
    /// cluster -> grouplist text, from the last good load.
    grouplists: Mutex<BTreeMap<String, String>>,
    /// The file followed for changes, if any.
    path: Option<PathBuf>,
    follower_started: Mutex<bool>,
}

impl std::fmt::Debug for FileRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRegistry")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl FileRegistry {
    /// A file registry over `config.service.grouplist`, following `config.path` (or
    /// `registry.file.name`, relative to the config file's folder) when there is one.
    ///
    /// A `registry.file.name` that cannot be read or parsed is an error naming the path
    /// and the cause: falling back to the main config's grouplists (often only the
    /// built-in `default -> 127.0.0.1:8091`) would send a misconfigured client to the
    /// wrong servers without a word.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let settings = FileSettings::from_config(config);
        let path = match (&settings.name, &config.path) {
            (Some(name), Some(main)) => {
                Some(main.parent().unwrap_or_else(|| Path::new(".")).join(name))
            }
            (Some(name), None) => Some(PathBuf::from(name)),
            (None, main) => main.clone(),
        };
        let policy = config.registry.empty_policy();
        let mut grouplists = config.service.grouplist.clone();
        // `registry.file.name` pointing elsewhere: that file's grouplists win.
        if let (Some(p), true) = (&path, settings.name.is_some()) {
            grouplists = load_grouplists(p).map_err(|e| {
                let cause = match e {
                    RegistryError::Config(m) => m,
                    other => other.to_string(),
                };
                RegistryError::Config(format!("registry.file.name `{}`: {cause}", p.display()))
            })?;
        }
        Ok(FileRegistry {
            inner: Arc::new(Inner {
                life: Lifecycle::new(KIND, policy),
                grouplists: Mutex::new(grouplists),
                path,
                follower_started: Mutex::new(false),
            }),
        })
    }

    /// A registry over fixed grouplists (cluster -> `ip:port;ip:port`), following no file.
    pub fn from_grouplists(grouplists: BTreeMap<String, String>) -> Self {
        FileRegistry {
            inner: Arc::new(Inner {
                life: Lifecycle::new(KIND, EmptyProtection::Protect),
                grouplists: Mutex::new(grouplists),
                path: None,
                follower_started: Mutex::new(false),
            }),
        }
    }

    /// The file this registry follows, if any.
    pub fn followed_path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }
}

/// Reads a config file and returns its grouplists (with the built-in default).
fn load_grouplists(path: &Path) -> Result<BTreeMap<String, String>, RegistryError> {
    ConfigLoader::new()
        .file(path)
        .load()
        .map(|c| c.service.grouplist)
}

/// Parses a grouplist into instances, skipping (and logging) entries that are not
/// addresses so one typo does not hide the other members.
fn parse_list(cluster: &str, text: &str) -> Vec<Instance> {
    split_grouplist(text)
        .into_iter()
        .filter_map(|a| match Instance::parse(a) {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(cluster, error = %e, "skipping bad grouplist entry");
                None
            }
        })
        .collect()
}

impl Inner {
    fn lock_lists(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.grouplists.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn members(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let lists = self.lock_lists();
        let text = lists
            .get(cluster)
            .ok_or_else(|| RegistryError::MissingGrouplist {
                cluster: cluster.to_string(),
            })?;
        Ok(parse_list(cluster, text))
    }

    /// Applies a freshly loaded set of grouplists and publishes every watched cluster.
    fn apply(&self, lists: BTreeMap<String, String>) {
        *self.lock_lists() = lists.clone();
        let hub = self.life.hub();
        for cluster in hub.clusters() {
            let members = lists
                .get(&cluster)
                .map(|t| parse_list(&cluster, t))
                .unwrap_or_default();
            if members.is_empty() && !lists.contains_key(&cluster) {
                tracing::warn!(cluster, "grouplist removed from the file");
            }
            hub.publish(&cluster, members);
        }
    }
}

/// Follows the file until the registry is closed or dropped.
async fn follow(weak: Weak<Inner>, path: PathBuf) {
    // `None`: the first pass always loads and applies (publishing is de-duplicated), so
    // an edit made between loading the config and starting to follow is not missed.
    let mut last: Option<Vec<u8>> = None;
    let mut last_error: Option<String> = None;
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(POLL_PERIOD).await;
        }
        first = false;
        let Some(inner) = weak.upgrade() else { return };
        if inner.life.is_closed() {
            return;
        }
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) => {
                let msg = format!("cannot read {}: {e}", path.display());
                if last_error.as_deref() != Some(&msg) {
                    tracing::warn!(error = %msg, "file registry keeps the last good list");
                    inner.life.hub().mark_all_stale(&msg);
                    last_error = Some(msg);
                }
                continue;
            }
        };
        if last.as_deref() == Some(&bytes[..]) && last_error.is_none() {
            continue;
        }
        if last.as_deref() == Some(&bytes[..]) {
            // Readable again with the same content as the last good version.
            inner.life.hub().mark_all_connected();
            last_error = None;
            continue;
        }
        last = Some(bytes);
        match load_grouplists(&path) {
            Ok(lists) => {
                tracing::info!(path = %path.display(), "file registry reloaded");
                inner.apply(lists);
                inner.life.hub().mark_all_connected();
                last_error = None;
            }
            Err(e) => {
                let msg = e.to_string();
                tracing::warn!(error = %msg, "broken edit of the registry file; keeping the last good list");
                inner.life.hub().mark_all_stale(&msg);
                last_error = Some(msg);
            }
        }
    }
}

#[async_trait]
impl RegistryService for FileRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, _cluster: &str, _instance: &Instance) -> Result<(), RegistryError> {
        Err(RegistryError::ReadOnly {
            kind: KIND,
            op: "register",
        })
    }

    async fn unregister(&self, _cluster: &str, _instance: &Instance) -> Result<(), RegistryError> {
        Err(RegistryError::ReadOnly {
            kind: KIND,
            op: "unregister",
        })
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner.members(cluster)
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        // One follower reads the file for every watched cluster; a cluster's own task
        // only waits to be stopped, so the hub forgets the name with its last watch.
        let watch = inner
            .life
            .watch(
                cluster,
                || async { Ok((inner.members(cluster)?, ())) },
                |(), scope| async move { scope.stopped().await },
            )
            .await?;
        if let Some(path) = &inner.path {
            let mut started = inner
                .follower_started
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if !*started {
                *started = true;
                tokio::spawn(follow(Arc::downgrade(inner), path.clone()));
            }
        }
        Ok(watch)
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(async { Ok(()) }).await
    }

    /// The other clusters that have a grouplist with at least one valid address: each
    /// is selected by `service.vgroupMapping.<group>=<that cluster>`.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        Ok(nearby::nearby(&self.inner.lock_lists(), cluster))
    }
}

impl Drop for FileRegistry {
    /// Ends the watches (nothing was registered, so there is nothing to remove).
    fn drop(&mut self) {
        self.inner.life.close_on_drop(|| async { Ok(()) });
    }
}
