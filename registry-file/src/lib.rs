//! # meshline-registry-file
//!
//! Seata's `file` registry: the members of a cluster are the `;`-separated
//! `service.<cluster>.grouplist` in the configuration (YAML/TOML/JSON:
//! `service.grouplist.<cluster>`). Nothing registers here: like Seata's, this registry
//! is read-only and [`register`](RegistryService::register) returns
//! [`RegistryError::ReadOnly`].
//!
//! Unlike Seata's, it follows its sources: the same ones the configuration was built
//! from (files, Seata's configuration centre, the environment, overrides; see
//! [`source`](crate#where-the-grouplists-come-from)). Every
//! [`watch`](RegistryService::watch) sees an edit of a file within about a second and a
//! change in the centre as soon as the centre pushes it. A broken edit (a syntax error,
//! a bad address) keeps the last good list, marks the watches stale and logs why; the
//! rest of the file keeps working.
//!
//! # Where the grouplists come from
//!
//! - A configuration from `meshline::centre::live_config` (a live configuration): the
//!   registry follows it, and a cluster it does not know is read from the centre when
//!   looked up, as Seata's `FileRegistryServiceImpl` reads `service.<cluster>.grouplist`
//!   through its configuration (the centre when `config.type` names one).
//! - A configuration from a loader (`Config::load`, `ConfigLoader::load`): its files
//!   are followed and every change rebuilds from all of the loader's sources, so a
//!   grouplist given by `MESHLINE_SERVICE__<cluster>__GROUPLIST` survives every poll.
//! - `registry.file.name`: that file, after the configuration's own files and before
//!   its environment. With a configuration centre (`config.type`), the centre comes
//!   first, as Seata's `FileRegistryServiceImpl` reads through the centre, and the
//!   file's grouplists are behind it for the clusters the centre does not have.
//!   [`RegistryService::source_of`] says which source gave each cluster.
//! - A configuration assembled in code: its grouplists, fixed. Keys set with
//!   `Config::set` are applied again on top of every rebuild.
//!
//! Why polling and not inotify: files are re-read every 250 ms and compared byte for
//! byte ([`LiveConfig`]). That catches in-place writes, editors that replace the file by
//! rename, and network or container file systems where change notifications are lost,
//! at the cost of one small read per period. It needs no extra dependency.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use meshline_registry_core::centre::{FILE_POLL, LiveConfig};
use meshline_registry_core::config::{ConfigSource, split_grouplist};
use meshline_registry_core::{
    Config, EmptyProtection, Instance, Lifecycle, Nearby, RegistryError, RegistryService, Watch,
};
use tokio::sync::oneshot;

mod follow;
mod nearby;
mod settings;
mod source;
pub use settings::FileSettings;
use source::Follow;

const KIND: &str = "file";

/// How often followed files are re-read.
pub const POLL_PERIOD: std::time::Duration = FILE_POLL;

/// The file registry. See the [crate docs](crate).
pub struct FileRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    life: Lifecycle,
    /// cluster -> grouplist text, from the last good configuration.
    grouplists: Mutex<BTreeMap<String, String>>,
    /// cluster -> where its grouplist came from (for `meshline doctor`).
    origins: Mutex<BTreeMap<String, source::Origin>>,
    /// `registry.file.name`'s grouplists behind a configuration centre's.
    fallback: Option<source::Fallback>,
    /// The file shown as followed, if any.
    path: Option<std::path::PathBuf>,
    /// The configuration's source: its keys set in code are applied to every rebuild.
    source: ConfigSource,
    follow: Mutex<Following>,
}

/// What is followed, and whether following has started.
struct Following {
    what: Follow,
    /// The live configuration followed, once following started (for asks).
    live: Option<LiveConfig>,
    /// Dropped on close or drop: ends the follow task.
    stop: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for FileRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRegistry")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl FileRegistry {
    /// A file registry over the grouplists of `config`, following the sources it was
    /// built from (see the [crate docs](crate#where-the-grouplists-come-from)).
    ///
    /// A `registry.file.name` that cannot be read or parsed is an error naming the path
    /// and the cause: falling back to the main config's grouplists (often only the
    /// built-in `default -> 127.0.0.1:8091`) would send a misconfigured client to the
    /// wrong servers without a word.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let start = source::start(config)?;
        let policy = meshline_registry_core::EmptyProtection::of(&config.registry);
        let (grouplists, origins) = source::layered(&start.config, start.fallback.as_ref());
        Ok(FileRegistry {
            inner: Arc::new(Inner {
                life: Lifecycle::new(KIND, policy),
                grouplists: Mutex::new(grouplists),
                origins: Mutex::new(origins),
                fallback: start.fallback,
                path: start.path,
                source: start.source,
                follow: Mutex::new(Following {
                    what: start.follow,
                    live: None,
                    stop: None,
                }),
            }),
        })
    }

    /// A registry over fixed grouplists (cluster -> `ip:port;ip:port`), following nothing.
    pub fn from_grouplists(grouplists: BTreeMap<String, String>) -> Self {
        FileRegistry {
            inner: Arc::new(Inner {
                life: Lifecycle::new(KIND, EmptyProtection::Protect),
                origins: Mutex::new(
                    grouplists
                        .keys()
                        .map(|c| (c.clone(), source::Origin::Code))
                        .collect(),
                ),
                grouplists: Mutex::new(grouplists),
                fallback: None,
                path: None,
                source: ConfigSource::default(),
                follow: Mutex::new(Following {
                    what: Follow::Nothing,
                    live: None,
                    stop: None,
                }),
            }),
        }
    }

    /// The file this registry shows as followed: `registry.file.name`, else the last
    /// file the configuration was read from.
    pub fn followed_path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }
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

    fn lock_follow(&self) -> std::sync::MutexGuard<'_, Following> {
        self.follow.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Applies a freshly read set of grouplists and publishes every watched cluster.
    fn apply(&self, lists: BTreeMap<String, String>) {
        {
            let mut held = self.lock_lists();
            if *held == lists {
                return;
            }
            *held = lists.clone();
        }
        tracing::info!("file registry: grouplists changed");
        let hub = self.life.hub();
        for cluster in hub.clusters() {
            let members = lists
                .get(&cluster)
                .map(|t| parse_list(&cluster, t))
                .unwrap_or_default();
            if members.is_empty() && !lists.contains_key(&cluster) {
                tracing::warn!(cluster, "grouplist removed from the configuration");
            }
            hub.publish(&cluster, members);
        }
    }

    /// The live configuration followed (started if it was not): `None` when nothing is
    /// followed or the files cannot be followed.
    fn start_following(self: &Arc<Self>) -> Option<LiveConfig> {
        let mut f = self.lock_follow();
        if f.live.is_some() {
            return f.live.clone();
        }
        let live = match std::mem::replace(&mut f.what, Follow::Nothing) {
            Follow::Nothing => return None,
            Follow::Live(live) => live,
            Follow::Files(loader) => match LiveConfig::files(loader) {
                Ok(live) => live,
                Err(e) => {
                    tracing::warn!(error = %e, "file registry cannot follow its files");
                    self.life.hub().mark_all_stale(&e.to_string());
                    return None;
                }
            },
        };
        f.stop = Some(follow::spawn(self, live.clone()));
        f.live = Some(live.clone());
        Some(live)
    }

    /// Asks `live`'s centre for `cluster`'s grouplist and applies what it has then.
    async fn ask_cluster(&self, live: &LiveConfig, cluster: &str) {
        live.ask_cluster(cluster).await;
        self.apply_config(&live.current());
    }

    /// Whether `cluster`'s grouplist should be asked of the centre (when there is one):
    /// the configuration's own sources do not give it (it is missing, the built-in
    /// default, or only the named file's, which the centre comes before).
    fn wants_the_centre(&self, cluster: &str) -> bool {
        if !self.lock_lists().contains_key(cluster) {
            return true;
        }
        let origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        origins
            .get(cluster)
            .is_none_or(source::Origin::yields_to_the_centre)
    }

    /// Applies the grouplists of `config` (a configuration the registry follows), with
    /// the keys set in code on top and the named file behind a centre
    /// ([`source::layered`]).
    fn apply_config(&self, config: &Config) {
        let cfg = self.source.reapply(config);
        let (lists, origins) = source::layered(&cfg, self.fallback.as_ref());
        *self.origins.lock().unwrap_or_else(|p| p.into_inner()) = origins;
        self.apply(lists);
    }

    /// Stops following (on close and drop).
    fn stop_following(&self) {
        let mut f = self.lock_follow();
        f.stop = None;
        f.live = None;
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

    /// The members of `cluster`. A cluster without a grouplist is first asked of the
    /// configuration centre, when the configuration follows one.
    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        if inner.wants_the_centre(cluster) {
            let live = {
                let f = inner.lock_follow();
                match &f.what {
                    Follow::Live(live) => Some(live.clone()),
                    _ => f.live.clone(),
                }
            };
            if let Some(live) = live {
                inner.ask_cluster(&live, cluster).await;
            }
        }
        inner.members(cluster)
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        // A cluster the configuration lacks is asked of the centre first.
        if inner.wants_the_centre(cluster)
            && let Some(live) = inner.start_following()
        {
            inner.ask_cluster(&live, cluster).await;
        }
        // One follower applies the configuration for every watched cluster; a cluster's
        // own task only waits to be stopped, so the hub forgets the name with its last
        // watch.
        let watch = inner
            .life
            .watch(
                cluster,
                || async { Ok((inner.members(cluster)?, ())) },
                |(), scope| async move { scope.stopped().await },
            )
            .await?;
        inner.start_following();
        Ok(watch)
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.stop_following();
        self.inner.life.close(async { Ok(()) }).await
    }

    /// The other clusters that have a grouplist with at least one valid address: each
    /// is selected by `service.vgroupMapping.<group>=<that cluster>`.
    fn source_of(&self, cluster: &str) -> Option<String> {
        self.inner
            .origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .map(ToString::to_string)
    }

    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        Ok(nearby::nearby(&self.inner.lock_lists(), cluster))
    }
}

impl Drop for FileRegistry {
    /// Ends the watches (nothing was registered, so there is nothing to remove).
    fn drop(&mut self) {
        self.inner.stop_following();
        self.inner.life.close_on_drop(|| async { Ok(()) });
    }
}
