//! `meshline doctor [<tx-group>]`: why a group finds no TC, and how to fix it.
//!
//! It walks the chain a Seata client follows, with the library's own code at every
//! link (so what it sees is what a client sees), and prints one `✓`/`✗` line per step
//! with the evidence and, on `✗`, the fix:
//!
//! 1. **config** ([`config_step`]): the files, variables and configuration centre read,
//!    in order; where the keys that matter came from; unknown keys with "did you mean".
//! 2. **mapping** ([`mapping`]): `service.vgroupMapping.<group>`, or its near misses and
//!    a configured centre that `config.type=file` leaves unread.
//! 3. **registry** ([`registry_step`]): type, address, connection and cause, the
//!    cluster's members, or what the registry holds nearby.
//! 4. **servers** ([`servers`]): each member's connect, PING/PONG and RegisterTM.
//!
//! A summary line follows; the exit code is 0 only when at least one TC accepted the
//! registration. `--json` prints the same findings as one JSON document (shape in
//! [`report`]).

mod config_step;
mod mapping;
mod registry_step;
mod report;
mod servers;

use std::process::ExitCode;

use report::Report;

use crate::Cli;

/// Runs the doctor for `group` (default: the configuration's `txServiceGroup`) and
/// prints the report.
pub async fn run(cli: &Cli, group: Option<String>) -> ExitCode {
    let report = diagnose(cli, group).await;
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        );
    } else {
        print!("{}", report.to_text());
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn diagnose(cli: &Cli, group: Option<String>) -> Report {
    let loader = crate::base_loader(cli);
    let mut report = Report {
        group: group.clone().unwrap_or_default(),
        steps: Vec::new(),
        servers: Vec::new(),
    };
    let loaded = match config_step::load(&loader).await {
        Ok(l) => l,
        Err(step) => {
            report.steps.push(step);
            return report;
        }
    };
    report.steps.push(loaded.step);
    let group = group.unwrap_or_else(|| loaded.config.tx_service_group.clone());
    report.group = group.clone();

    // The registry decides whether the mapping is needed (the namingserver maps groups
    // itself); --server/--tls-* apply as for `lookup`.
    // A group other than the configuration's own is read from the centre (and its
    // mapped cluster's grouplist), as a client asking for it would.
    let now = match &loaded.live {
        Some(live) => {
            live.ask_group(&group).await;
            live.current()
        }
        None => loaded.config.clone(),
    };
    let base = (*now).clone();
    let maps_groups = resolves_groups(&base);
    let (cluster, step) = mapping::check(&base, &loader, &group, maps_groups).await;
    report.steps.push(step);
    let config = match crate::with_overrides(cli, base, cluster.as_deref(), None) {
        Ok(c) => c,
        Err(e) => {
            report.steps.push(
                report::Step::failed(
                    report::StepKind::Registry,
                    "the command-line overrides do not apply",
                )
                .evidence(e.to_string()),
            );
            return report;
        }
    };
    let found = registry_step::check(&config, &group, cluster.as_deref()).await;
    report.steps.push(found.step);
    if !found.members.is_empty() {
        let (results, step) = servers::check(&config, &group, &found.members).await;
        report.servers = results;
        report.steps.push(step);
    }
    if let Some(r) = found.registry {
        let _ = r.close().await;
    }
    drop(loaded.live);
    report
}

/// Whether the configured registry type maps groups itself (the table says so without
/// connecting: Seata's namingserver).
fn resolves_groups(config: &meshline::Config) -> bool {
    meshline::registry::resolve_type(&config.registry.kind)
        .map(|t| t.resolves_groups)
        .unwrap_or(false)
}
