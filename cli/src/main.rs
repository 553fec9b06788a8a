//! `meshline`: look up, watch and register cluster members in any registry meshline
//! supports, with the same configuration files a Seata client uses.
//!
//! Exit codes: 0 success, 2 usage error, 1 registry or configuration error (the message
//! goes to standard error).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};

mod doctor;
mod manual;
mod types;
use meshline::core::centre::LiveConfig;
use meshline::{Config, ConfigLoader, Discovery, Health, Instance, RegistryError, Snapshot};

#[derive(Parser, Debug)]
#[command(
    name = "meshline",
    version,
    about = "Find a cluster through a service registry",
    after_help = manual::MESHLINE
)]
struct Cli {
    /// Configuration file (.yaml, .yml, .toml, .json, Seata's .properties or HOCON .conf).
    #[arg(long, global = true, env = "MESHLINE_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, global = true, help = types::registry_help())]
    registry: Option<String>,
    /// Registry server address(es), overriding `registry.<type>.server-addr`; for the
    /// file registry, the grouplist of the cluster (`ip:port;ip:port`).
    #[arg(long, global = true)]
    server: Option<String>,
    /// CA certificate(s) (PEM) the registry server's certificate must chain to: sets
    /// `registry.<type>.tls.caFile` and turns TLS on (needs the backend's `-tls` feature).
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for servers that ask for one: `registry.<type>.tls.certFile`
    /// (with --tls-key).
    #[arg(long, global = true, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert: `registry.<type>.tls.keyFile`.
    #[arg(long, global = true, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the members of a tx-service-group's cluster (or of --cluster).
    #[command(after_help = manual::LOOKUP)]
    Lookup(Target),
    /// Print every membership snapshot with a timestamp until Ctrl-C.
    #[command(after_help = manual::WATCH)]
    Watch(Target),
    /// Walk the whole chain a Seata client follows (config, mapping, registry, each TC's
    /// connect, PING and RegisterTM) and say why a group finds no TC, with the fix.
    /// Exit code 0 only when at least one TC accepted the registration.
    #[command(after_help = manual::DOCTOR)]
    Doctor {
        /// tx-service-group (default: the config's `txServiceGroup`).
        group: Option<String>,
    },
    /// Register ADDR in CLUSTER and keep it alive until Ctrl-C, then remove it.
    #[command(after_help = manual::REGISTER)]
    Register {
        /// Cluster name.
        cluster: String,
        /// Address to register (`ip:port`, `[v6]:port`).
        addr: String,
        /// Registration TTL / lease for registries that have one (etcd3 lease, Redis
        /// key expiry, Consul check TTL, Eureka lease, ZooKeeper session timeout), with
        /// its unit (`10s`, `1500ms`, `1m 30s`): a bare number is refused, as for every
        /// key only meshline has.
        #[arg(long, value_parser = meshline::core::config::parse_duration_with_unit)]
        ttl: Option<Duration>,
        /// Weight metadata.
        #[arg(long)]
        weight: Option<u32>,
    },
    /// List the registry types meshline knows: names and aliases, the cargo feature of
    /// each and whether this build has it, whether it is also a config centre
    /// (`config.type`) and whether it takes registrations.
    #[command(after_help = manual::TYPES)]
    Types {
        /// Tab-separated `type feature compiled-in(yes|no)`, one line per type, for
        /// scripts.
        #[arg(long)]
        porcelain: bool,
    },
    /// Print the shell completion script for SHELL (subcommands, flags, registry types).
    #[command(after_help = manual::COMPLETIONS)]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page, meshline(1), in roff; with --out-dir, write one page per
    /// command there (meshline.1, meshline-lookup.1, ...).
    #[command(after_help = manual::MAN)]
    Man {
        /// Folder to write the pages into (it must exist).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct Target {
    /// tx-service-group (default: the config's `txServiceGroup`).
    #[arg(conflicts_with = "cluster")]
    group: Option<String>,
    /// Look up a cluster directly, skipping the vgroupMapping.
    #[arg(long)]
    cluster: Option<String>,
}

/// `filter` plus the directives that keep credentials out of the log whatever
/// `MESHLINE_LOG` says (nacos-sdk logs its login password; see
/// `meshline::core::redact::LOG_DIRECTIVES`).
fn quiet_secrets(mut filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    for d in meshline::core::redact::LOG_DIRECTIVES {
        filter = filter.add_directive(d.parse().expect("a valid directive"));
    }
    filter
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a redirected log stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(quiet_secrets(
            tracing_subscriber::EnvFilter::try_from_env("MESHLINE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        ))
        .init();
    if let Command::Doctor { group } = &cli.command {
        return doctor::run(&cli, group.clone()).await;
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Which cluster a command is about, resolved through the mapping when given a group.
fn resolve_cluster(config: &Config, target: &Target) -> Result<String, RegistryError> {
    if let Some(c) = &target.cluster {
        return Ok(c.clone());
    }
    let group = target
        .group
        .clone()
        .unwrap_or_else(|| config.tx_service_group.clone());
    match config.service.vgroup_mapping.get(&group) {
        Some(c) if !c.trim().is_empty() => Ok(c.clone()),
        _ => Err(RegistryError::MissingMapping { group }),
    }
}

/// `doctor` is dispatched before `run` (it has its own exit code).
fn unreachable_doctor() -> Result<(), RegistryError> {
    Err(RegistryError::Config(
        "internal: doctor is run by doctor::run".into(),
    ))
}

/// The sources a command reads: --config, the environment, --registry.
fn base_loader(cli: &Cli) -> ConfigLoader {
    let mut loader = ConfigLoader::new();
    if let Some(p) = &cli.config {
        loader = loader.file(p);
    }
    loader = loader.process_env();
    if let Some(r) = &cli.registry {
        loader = loader.set("registry.type", r.as_str());
    }
    loader
}

/// Loads the config files, the configuration centre `config.type` names (Seata's
/// `service.vgroupMapping.*` may live there) and the environment once (so each config
/// warning is printed once), with --registry applied, and follows them: keep the
/// result for as long as something built from its configuration runs (the file
/// registry follows it).
async fn load_live(cli: &Cli) -> Result<LiveConfig, RegistryError> {
    meshline::centre::live_config(base_loader(cli)).await
}

/// Applies --server and --ttl to a loaded config.
fn with_overrides(
    cli: &Cli,
    base: Config,
    cluster_for_file: Option<&str>,
    ttl: Option<Duration>,
) -> Result<Config, RegistryError> {
    let ty = meshline::registry::resolve_type(&base.registry.kind)?;
    let mut config = base;
    if let Some(server) = &cli.server {
        match ty.seata_name {
            "file" => {
                // Set as a key, so the file registry applies it again each time it
                // rebuilds the configuration from its sources.
                let cluster = cluster_for_file.unwrap_or("default");
                config.set(&format!("service.{cluster}.grouplist"), server)?;
            }
            _ => config
                .registry
                .section_mut(ty.seata_name)
                .set(ty.address_key, server.clone()),
        }
    }
    let tls_flags = [
        ("tls.caFile", &cli.tls_ca),
        ("tls.certFile", &cli.tls_cert),
        ("tls.keyFile", &cli.tls_key),
    ];
    if tls_flags.iter().any(|(_, v)| v.is_some()) && ty.tls_feature.is_none() {
        return Err(RegistryError::Config(format!(
            "--tls-ca/--tls-cert/--tls-key: a {} registry has no server to connect to",
            ty.seata_name
        )));
    }
    for (key, value) in tls_flags {
        if let Some(path) = value {
            config
                .registry
                .section_mut(ty.seata_name)
                .set(key, path.display().to_string());
        }
    }
    if let Some(ttl) = ttl {
        match ty.ttl_key {
            Some(key) => config
                .registry
                .section_mut(ty.seata_name)
                .set(key, format!("{}ms", ttl.as_millis())),
            None => eprintln!(
                "warning: a {} registry has no TTL setting (its registrations live as long as \
                 the session); --ttl is ignored",
                ty.seata_name
            ),
        }
    }
    Ok(config)
}

async fn run(cli: Cli) -> Result<(), RegistryError> {
    match &cli.command {
        Command::Doctor { .. } => unreachable_doctor(),
        Command::Types { porcelain } => {
            types::print(cli.json, *porcelain);
            Ok(())
        }
        Command::Completions { shell } => manual::completions(*shell),
        Command::Man { out_dir } => manual::man(out_dir.as_deref()),
        Command::Lookup(target) | Command::Watch(target) => {
            let live = load_live(&cli).await?;
            // A group other than the file's is read from the centre as Seata would,
            // and followed.
            let group = target
                .group
                .clone()
                .unwrap_or_else(|| live.current().tx_service_group.clone());
            if target.cluster.is_none() {
                live.ask_group(&group).await;
            }
            let base = (*live.current()).clone();
            let mapped = resolve_cluster(&base, target);
            let mut config = with_overrides(&cli, base, mapped.as_deref().ok(), None)?;
            // Show the registry as it is: empty protection (clients keep the last
            // members when the registry lists none) would hide a removal.
            let protected = config.registry.empty_protection;
            config.registry.empty_protection = false;
            if protected && !cli.json && matches!(cli.command, Command::Watch(_)) {
                eprintln!(
                    "note: registry.emptyProtection is on in this configuration: clients keep \
                     the last members when the registry lists none; this shows the registry as it is"
                );
            }
            let registry = meshline::registry::from_config(&config).await?;
            // By group through a discovery that follows the live mapping (a registry
            // that maps groups itself, Seata's namingserver, is asked by group); by
            // --cluster directly.
            let discovery = Discovery::with_live_config(registry.clone(), &live);
            let asked = match &target.cluster {
                Some(c) => Asked::Cluster(c.clone()),
                None => Asked::Group(group),
            };
            let result = if matches!(cli.command, Command::Lookup(_)) {
                lookup(&discovery, &asked, cli.json).await
            } else {
                watch(&discovery, &asked, cli.json).await
            };
            let _ = registry.close().await;
            result
        }
        Command::Register {
            cluster,
            addr,
            ttl,
            weight,
        } => {
            let live = load_live(&cli).await?;
            let config = with_overrides(&cli, (*live.current()).clone(), Some(cluster), *ttl)?;
            let mut instance = Instance::parse(addr)?;
            if let Some(w) = weight {
                instance = instance.with_weight(*w);
                let ty = meshline::registry::resolve_type(&config.registry.kind)?;
                if !ty.stores_weight {
                    eprintln!(
                        "warning: a {} registry cannot store a weight (Seata's layout keeps only \
                         ip:port); --weight {w} is not registered",
                        ty.seata_name
                    );
                }
            }
            let registry = meshline::registry::from_config(&config).await?;
            let stop = shutdown_signal();
            registry.register(cluster, &instance).await?;
            eprintln!(
                "registered {instance} in {cluster} ({}); Ctrl-C to remove",
                registry.kind()
            );
            stop.await;
            let result = registry.unregister(cluster, &instance).await;
            let _ = registry.close().await;
            result?;
            eprintln!("unregistered {instance}");
            Ok(())
        }
    }
}

/// What `lookup` and `watch` were asked about.
enum Asked {
    /// A tx-service-group, through its (live) mapping.
    Group(String),
    /// A cluster named with --cluster.
    Cluster(String),
}

impl Asked {
    /// The cluster shown: the group's cluster now (it follows the mapping).
    fn label(&self, discovery: &Discovery) -> String {
        match self {
            Asked::Group(g) => discovery.cluster_for(g).unwrap_or_else(|_| g.clone()),
            Asked::Cluster(c) => c.clone(),
        }
    }
}

async fn lookup(discovery: &Discovery, asked: &Asked, json: bool) -> Result<(), RegistryError> {
    let list = match asked {
        Asked::Group(g) => discovery.lookup(g).await?,
        Asked::Cluster(c) => discovery.registry().lookup(c).await?,
    };
    let cluster = asked.label(discovery);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else if list.is_empty() {
        eprintln!(
            "no members in cluster `{cluster}` ({})",
            discovery.registry().kind()
        );
    } else {
        for i in &list {
            println!("{i}");
        }
    }
    Ok(())
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn print_snapshot(s: &Snapshot, cluster: &str, json: bool) {
    if json {
        let v = serde_json::json!({
            "time": now(),
            "cluster": cluster,
            "revision": s.revision(),
            "instances": &s.instances()[..],
        });
        println!("{v}");
    } else if s.is_empty() {
        println!("{} {cluster} rev={} no members", now(), s.revision());
    } else {
        let list: Vec<String> = s.instances().iter().map(|i| i.to_string()).collect();
        println!(
            "{} {cluster} rev={} [{}]",
            now(),
            s.revision(),
            list.join(", ")
        );
    }
}

fn print_health(h: &Health, cluster: &str, json: bool) {
    let (state, reason) = match h {
        Health::Connected => ("connected", String::new()),
        Health::Stale { reason, .. } => ("stale", reason.clone()),
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "time": now(), "cluster": cluster, "health": state, "reason": reason })
        );
    } else if reason.is_empty() {
        println!("{} {cluster} registry {state}", now());
    } else {
        println!("{} {cluster} registry {state}: {reason}", now());
    }
}

async fn watch(discovery: &Discovery, asked: &Asked, json: bool) -> Result<(), RegistryError> {
    let mut w = match asked {
        Asked::Group(g) => discovery.watch(g).await?,
        Asked::Cluster(c) => discovery.registry().watch(c).await?,
    };
    let mut health = w.clone();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            s = w.next() => print_snapshot(&s?, &asked.label(discovery), json),
            h = health.health_changed() => print_health(&h?, &asked.label(discovery), json),
            _ = &mut stop => return Ok(()),
        }
    }
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM. The listeners are installed when this is
/// called, not when it is first awaited: `register` calls it before registering, so a
/// signal that comes as soon as the registration shows (a supervisor stopping the
/// process at once) is caught and the registration removed, instead of ending the
/// process with the registration left behind.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listeners = signal(SignalKind::interrupt()).and_then(|int| {
            let term = signal(SignalKind::terminate())?;
            Ok((int, term))
        });
        async move {
            match listeners {
                Ok((mut int, mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod log_filter_tests {
    /// At `trace`, nacos-sdk's login lines (their target) are
    /// dropped; everything else is kept.
    #[test]
    fn nacos_login_lines_are_dropped_even_at_trace() {
        let buf = meshline_testkit::watch::LogBuf::default();
        let me = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter(super::quiet_secrets(tracing_subscriber::EnvFilter::new(
                "trace",
            )))
            .with_writer(move || me.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::debug!(
                target: "nacos_sdk::api::plugin::auth::auth_by_http",
                "Http login with username=u,password=Nacos-Secret-1"
            );
            tracing::error!(
                target: "nacos_sdk::api::plugin::auth::auth_by_http",
                "Http login error, err=...password=Nacos-Secret-1"
            );
            tracing::trace!(target: "nacos_sdk::naming", "kept");
        });
        let text = buf.text();
        assert!(!text.contains("Nacos-Secret-1"), "{text}");
        assert!(text.contains("kept"), "{text}");
    }
}
