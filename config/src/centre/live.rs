//! See [`LiveConfig`].

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{CentreSpec, ConfigCentre, Wanted, read_centre};
use crate::{Backoff, Config, ConfigError};
use crate::{ConfigLoader, ConfigSource, log_warnings};

/// How often a followed centre is re-read even without a change notification: the net
/// under a lost notification (a watch that broke between two events).
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);

/// How often the files of a live configuration are read and compared.
pub const FILE_POLL: Duration = Duration::from_millis(250);

/// What every clone of a [`LiveConfig`] shares. Configurations it publishes point back
/// here weakly ([`ConfigSource`]).
pub(crate) struct LiveShared {
    rx: watch::Receiver<Arc<Config>>,
    problems: watch::Receiver<Option<String>>,
    centre: Option<Arc<dyn ConfigCentre>>,
    /// To the follow task; `None` when nothing is followed.
    asks: Option<mpsc::UnboundedSender<Ask>>,
    /// What the follow task has read so far beyond the configuration's own group.
    read: Arc<Mutex<Wanted>>,
}

/// Groups and clusters to read, and who waits for the read.
struct Ask {
    wanted: Wanted,
    done: oneshot::Sender<()>,
}

/// [`LiveConfig`]: a configuration that follows every one of its sources, the files
/// and the configuration centre, and reads from the centre what is asked of it.
///
/// One task per live configuration rebuilds the whole [`Config`] from the same sources
/// as the first load (the files, the centre's entries, the environment read then, the
/// overrides) whenever one of them changes, and publishes it when it differs:
/// - a file: polled every [`FILE_POLL`] and compared byte for byte (in-place writes,
///   replacement by rename, file systems that lose notifications). A broken edit keeps
///   the last good configuration and is reported ([`LiveConfig::problem`]);
/// - the centre: its own push (etcd watches, ZooKeeper watchers, Consul blocking
///   queries, Nacos listeners), and a re-read every [`REFRESH_EVERY`] in case a
///   notification was lost;
/// - an ask ([`LiveConfig::ask_group`], [`LiveConfig::ask_cluster`]): a group or a
///   cluster the configuration's own `txServiceGroup` does not lead to. Its keys are
///   read from the centre as Seata's `getConfig` would read them, and followed from
///   then on.
///
/// Cheap to clone (all clones share one follow task, which ends when the last clone and
/// the last [`LiveConfig::subscribe`] receiver are dropped).
#[derive(Clone)]
pub struct LiveConfig {
    shared: Arc<LiveShared>,
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig")
            .field("centre", &self.shared.centre.as_ref().map(|c| c.kind()))
            .field("followed", &self.is_followed())
            .field("config", &*self.shared.rx.borrow())
            .finish()
    }
}

/// The shared state of a new live configuration starting at `config`, and the
/// senders its follow task publishes with. Its configurations point back at it.
///
/// `files`: the loader of a live configuration without a centre, kept in its
/// configurations' source so a re-reader can follow the files if this is dropped.
fn shared(
    config: Config,
    centre: Option<Arc<dyn ConfigCentre>>,
    asks: Option<mpsc::UnboundedSender<Ask>>,
    files: Option<ConfigLoader>,
) -> (
    Arc<LiveShared>,
    watch::Sender<Arc<Config>>,
    watch::Sender<Option<String>>,
) {
    let (tx, rx) = watch::channel(Arc::new(Config::default()));
    let (problems_tx, problems) = watch::channel(None);
    let shared = Arc::new_cyclic(|weak: &Weak<LiveShared>| {
        let mut config = config;
        config.source = ConfigSource::live(weak.clone(), files);
        tx.send_replace(Arc::new(config));
        LiveShared {
            rx,
            problems,
            centre,
            asks,
            read: Arc::default(),
        }
    });
    (shared, tx, problems_tx)
}

impl LiveConfig {
    pub(crate) fn from_shared(shared: Arc<LiveShared>) -> LiveConfig {
        LiveConfig { shared }
    }

    /// A configuration that never changes: nothing is followed, nothing is asked.
    pub fn fixed(config: Config) -> LiveConfig {
        let (shared, _tx, _problems) = shared(config, None, None, None);
        // The senders are dropped: receivers keep the value and never see a change.
        LiveConfig { shared }
    }

    /// The configuration `loader` describes, following its files: each is read again
    /// every [`FILE_POLL`], and a change rebuilds the configuration from all of the
    /// loader's sources (the environment as read now, the overrides). A loader with no
    /// file gives a configuration that never changes.
    ///
    /// Fails when a file cannot be read or parsed now. Must be called within a Tokio
    /// runtime (it starts the follow task).
    pub fn files(loader: ConfigLoader) -> Result<LiveConfig, ConfigError> {
        let loader = loader.read_now()?;
        let config = loader.clone().load()?;
        let files = loader.files();
        if files.is_empty() {
            return Ok(LiveConfig::fixed(config));
        }
        let (asks_tx, asks) = mpsc::unbounded_channel();
        let (shared, tx, problems) = shared(config, None, Some(asks_tx), Some(loader.clone()));
        let follower = Follower::new(loader, None, files, &shared, tx, problems, Vec::new());
        tokio::spawn(follower.run(asks, None));
        Ok(LiveConfig { shared })
    }

    /// Reads `centre` as `spec` says, on top of what `loader` reads, and follows both
    /// the centre and the loader's files.
    ///
    /// Fails when the first read fails (the centre is unreachable, the blob does not
    /// parse, a file cannot be read): the error names the centre, its address and the
    /// cause.
    pub async fn start(
        loader: ConfigLoader,
        centre: Arc<dyn ConfigCentre>,
        spec: CentreSpec,
    ) -> Result<LiveConfig, ConfigError> {
        // Files are read once here; every rebuild uses what was read, until one changes.
        let loader = loader.read_now()?;
        let (cfg, read) = read_centre(&*centre, &spec, &loader, &Wanted::default()).await?;
        log_warnings(&cfg, None);
        tracing::info!(
            centre = centre.kind(),
            at = %centre.location(),
            blob = %spec.blob,
            keys = read.entries.len(),
            "configuration read from the config centre"
        );
        // Following starts before this returns, so a change made right after `start`
        // is seen; the task's first step is one more read, which covers a change made
        // between the read above and the follow.
        let mut names = vec![spec.blob.clone()];
        names.extend(read.followed.iter().cloned());
        let notes = match centre.follow(names).await {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(
                    centre = centre.kind(),
                    error = %e,
                    "config centre: cannot follow changes; re-reading periodically"
                );
                None
            }
        };
        let files = loader.files();
        let (asks_tx, asks) = mpsc::unbounded_channel();
        let (shared, tx, problems) = shared(cfg, Some(centre.clone()), Some(asks_tx), None);
        let follower = Follower::new(
            loader,
            Some((centre, spec)),
            files,
            &shared,
            tx,
            problems,
            read.followed,
        );
        tokio::spawn(follower.run(asks, notes));
        Ok(LiveConfig { shared })
    }

    /// The configuration now.
    pub fn current(&self) -> Arc<Config> {
        self.shared.rx.borrow().clone()
    }

    /// A receiver of every new configuration (the current one is marked seen).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Config>> {
        let mut rx = self.shared.rx.clone();
        rx.mark_unchanged();
        rx
    }

    /// Why the last re-read of a file failed (a broken edit, a file that went away),
    /// while the last good configuration is kept; `None` when every file read well.
    pub fn problem(&self) -> Option<String> {
        self.shared.problems.borrow().clone()
    }

    /// A receiver of every change of [`problem`](Self::problem).
    pub fn subscribe_problems(&self) -> watch::Receiver<Option<String>> {
        let mut rx = self.shared.problems.clone();
        rx.mark_unchanged();
        rx
    }

    /// The centre followed, if any.
    pub fn centre(&self) -> Option<&Arc<dyn ConfigCentre>> {
        self.shared.centre.as_ref()
    }

    /// True when something is followed (a file or a centre): the configuration can
    /// change.
    pub fn is_followed(&self) -> bool {
        self.shared.asks.is_some()
    }

    /// Reads `service.vgroupMapping.<group>` and the grouplist of the cluster it maps
    /// to from the centre, as Seata's `getConfig` would, and follows them from now on;
    /// returns when [`current`](Self::current) has them. Nothing to do without a centre
    /// (the files and the environment are read whole), for the configuration's own
    /// `txServiceGroup`, or for a group asked before.
    pub async fn ask_group(&self, group: &str) {
        if self.current().tx_service_group == group {
            return;
        }
        let mut w = Wanted::default();
        w.groups.insert(group.to_string());
        self.ask(w).await
    }

    /// Reads `service.<cluster>.grouplist` from the centre and follows it (see
    /// [`ask_group`](Self::ask_group)): for a cluster looked up by name.
    pub async fn ask_cluster(&self, cluster: &str) {
        let mut w = Wanted::default();
        w.clusters.insert(cluster.to_string());
        self.ask(w).await
    }

    async fn ask(&self, wanted: Wanted) {
        let (Some(asks), Some(_)) = (&self.shared.asks, &self.shared.centre) else {
            return;
        };
        {
            let read = self.shared.read.lock().unwrap_or_else(|p| p.into_inner());
            if wanted.groups.is_subset(&read.groups) && wanted.clusters.is_subset(&read.clusters) {
                return;
            }
        }
        let (done, wait) = oneshot::channel();
        if asks.send(Ask { wanted, done }).is_ok() {
            // The task answers after its read, whether the read worked or not.
            let _ = wait.await;
        }
    }
}

/// A file of the configuration, as last read.
struct FileState {
    path: PathBuf,
    /// The bytes last read (`None`: not read yet, or unreadable).
    last: Option<Vec<u8>>,
    /// Why the last read failed, if it did.
    problem: Option<String>,
}

/// The follow task's state.
struct Follower {
    loader: ConfigLoader,
    centre: Option<(Arc<dyn ConfigCentre>, CentreSpec)>,
    files: Vec<FileState>,
    wanted: Wanted,
    read: Arc<Mutex<Wanted>>,
    /// The centre's single keys followed.
    followed: Vec<String>,
    /// The source every published configuration carries.
    source: ConfigSource,
    tx: watch::Sender<Arc<Config>>,
    problems: watch::Sender<Option<String>>,
}

impl Follower {
    fn new(
        loader: ConfigLoader,
        centre: Option<(Arc<dyn ConfigCentre>, CentreSpec)>,
        files: Vec<PathBuf>,
        shared: &Arc<LiveShared>,
        tx: watch::Sender<Arc<Config>>,
        problems: watch::Sender<Option<String>>,
        followed: Vec<String>,
    ) -> Follower {
        let source = tx.borrow().source.clone();
        Follower {
            loader,
            centre,
            // Not read yet: the first poll compares against nothing, so an edit made
            // between the first load and the first poll is not missed.
            files: files
                .into_iter()
                .map(|path| FileState {
                    path,
                    last: None,
                    problem: None,
                })
                .collect(),
            wanted: Wanted::default(),
            read: shared.read.clone(),
            followed,
            source,
            tx,
            problems,
        }
    }

    fn kind(&self) -> &'static str {
        self.centre.as_ref().map_or("file", |(c, _)| c.kind())
    }

    /// The names followed in the centre: the blob and the single keys read.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.centre.iter().map(|(_, s)| s.blob.clone()).collect();
        names.extend(self.followed.iter().cloned());
        names
    }

    /// Ends when nobody holds a receiver of the configuration.
    async fn run(
        mut self,
        mut asks: mpsc::UnboundedReceiver<Ask>,
        mut notes: Option<mpsc::Receiver<()>>,
    ) {
        let has_centre = self.centre.is_some();
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        // With a centre, read at once: a change made while no watch was in place sent
        // no notification.
        let mut read_at = Instant::now();
        let mut poll = tokio::time::interval(FILE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asks_open = true;
        loop {
            if has_centre
                && notes.is_none()
                && let Some((centre, _)) = &self.centre
            {
                match centre.follow(self.names()).await {
                    Ok(rx) => {
                        notes = Some(rx);
                        read_at = Instant::now();
                    }
                    Err(e) => tracing::warn!(
                        centre = centre.kind(),
                        error = %e,
                        "config centre: cannot follow changes; re-reading periodically"
                    ),
                }
            }
            let note = async {
                match notes.as_mut() {
                    Some(rx) => rx.recv().await.is_some(),
                    None => std::future::pending().await,
                }
            };
            let mut reread = false;
            let mut answer = None;
            tokio::select! {
                _ = self.tx.closed() => return,
                ask = asks.recv(), if asks_open => match ask {
                    Some(ask) => {
                        let before = self.wanted.clone();
                        self.wanted.groups.extend(ask.wanted.groups);
                        self.wanted.clusters.extend(ask.wanted.clusters);
                        reread = self.wanted != before;
                        answer = Some(ask.done);
                    }
                    None => asks_open = false,
                },
                _ = poll.tick(), if !self.files.is_empty() => {
                    reread = self.poll_files().await;
                }
                alive = note, if has_centre => {
                    if !alive {
                        // The follower ended (a broken watch): follow again after the read.
                        notes = None;
                    }
                    reread = true;
                }
                _ = tokio::time::sleep_until(read_at), if has_centre => reread = true,
            }
            if reread {
                // Several notifications for one change (blob and key, or a burst).
                if let Some(rx) = notes.as_mut() {
                    while rx.try_recv().is_ok() {}
                }
                self.reread(&mut backoff, &mut read_at, &mut notes).await;
            }
            // The asker waits for the read, whether it worked or not.
            if let Some(done) = answer {
                let _ = done.send(());
            }
        }
    }

    /// Rebuilds the configuration from every source and publishes it if it changed. A
    /// centre that cannot be read keeps the last configuration and is read again after
    /// a backoff.
    async fn reread(
        &mut self,
        backoff: &mut Backoff,
        read_at: &mut Instant,
        notes: &mut Option<mpsc::Receiver<()>>,
    ) {
        let built = match &self.centre {
            Some((centre, spec)) => {
                match read_centre(&**centre, spec, &self.loader, &self.wanted).await {
                    Ok((cfg, read)) => {
                        if read.followed != self.followed {
                            self.followed = read.followed;
                            *notes = None;
                        }
                        Ok(cfg)
                    }
                    Err(e) => Err(e),
                }
            }
            None => self.loader.clone().load_quietly(),
        };
        match built {
            Ok(cfg) => {
                backoff.reset();
                *read_at = Instant::now() + REFRESH_EVERY;
                *self.read.lock().unwrap_or_else(|p| p.into_inner()) = self.wanted.clone();
                self.publish(cfg);
            }
            Err(e) => {
                tracing::warn!(
                    centre = self.kind(),
                    error = %e,
                    "configuration re-read failed; keeping the last configuration"
                );
                *read_at = Instant::now() + backoff.next_delay();
            }
        }
    }

    fn publish(&self, mut cfg: Config) {
        cfg.source = self.source.clone();
        log_warnings(&cfg, Some(&self.tx.borrow()));
        if **self.tx.borrow() != cfg {
            tracing::info!(source = self.kind(), "configuration changed");
            self.tx.send_replace(Arc::new(cfg));
        }
    }

    /// Reads every file; re-parses the ones whose bytes changed. True when one changed
    /// and parsed (the configuration is to be rebuilt). A file that cannot be read or
    /// parsed keeps the last good configuration and is reported as the problem.
    async fn poll_files(&mut self) -> bool {
        let mut changed = false;
        for f in &mut self.files {
            match tokio::fs::read(&f.path).await {
                Err(e) => {
                    f.last = None;
                    f.problem = Some(format!("cannot read {}: {e}", f.path.display()));
                }
                Ok(bytes) if f.last.as_deref() == Some(&bytes[..]) => {}
                Ok(bytes) => {
                    f.last = Some(bytes);
                    match self.loader.reread(&f.path) {
                        Ok(()) => {
                            f.problem = None;
                            changed = true;
                        }
                        Err(e) => f.problem = Some(e.to_string()),
                    }
                }
            }
        }
        let problem = self.files.iter().find_map(|f| f.problem.clone());
        self.problems.send_if_modified(|p| {
            if *p == problem {
                return false;
            }
            match &problem {
                Some(why) => tracing::warn!(
                    error = %why,
                    "configuration file cannot be read; keeping the last good configuration"
                ),
                None => tracing::info!("configuration files readable again"),
            }
            *p = problem.clone();
            true
        });
        changed
    }
}
