//! The agent's background work, once a tick: TTL checks past their deadline turn
//! critical, TCP checks due are run, and services critical for longer than their
//! `DeregisterCriticalServiceAfter` are reaped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::{CheckKind, Shared, Status};

/// TTL expiry, TCP checks and the critical-service reaper.
pub(super) async fn ticker(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.opts.tick.max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut tcp_runs = Vec::new();
        {
            let mut db = shared.lock();
            let mut changed_names = Vec::new();
            let next_index = db.index + 1;
            let ids: Vec<String> = db.checks.keys().cloned().collect();
            for id in ids {
                let Some(c) = db.checks.get(&id).cloned() else {
                    continue;
                };
                match c.kind {
                    CheckKind::Ttl { ttl, deadline } => {
                        if now >= deadline && c.status != Status::Critical {
                            if let Some(n) = db.service_name_of_check(&c) {
                                changed_names.push(n);
                            }
                            if let Some(m) = db.checks.get_mut(&id) {
                                m.status = Status::Critical;
                                m.output =
                                    format!("TTL expired (last heart-beat over {ttl:?} ago)");
                                m.modify_index = next_index;
                                m.critical_since = Some(now);
                            }
                        }
                    }
                    CheckKind::Tcp {
                        ref target,
                        timeout,
                        next_run,
                        running,
                        ..
                    } => {
                        if now >= next_run && !running {
                            tcp_runs.push((id.clone(), target.clone(), timeout));
                            if let Some(m) = db.checks.get_mut(&id)
                                && let CheckKind::Tcp { running, .. } = &mut m.kind
                            {
                                *running = true;
                            }
                        }
                    }
                }
            }
            // The reaper: services critical for longer than DeregisterCriticalServiceAfter.
            let doomed: Vec<String> = db
                .checks
                .values()
                .filter(|c| {
                    c.status == Status::Critical
                        && matches!((c.deregister_after, c.critical_since), (Some(after), Some(since)) if now.duration_since(since) >= after)
                })
                .map(|c| c.service_id.clone())
                .collect();
            let mut table_changed = false;
            for sid in doomed {
                if let Some(svc) = db.services.remove(&sid) {
                    db.checks.retain(|_, c| c.service_id != sid);
                    changed_names.push(svc.name);
                    table_changed = true;
                }
            }
            if !changed_names.is_empty() {
                let names: Vec<&str> = changed_names.iter().map(String::as_str).collect();
                shared.bump(&mut db, &names, table_changed);
            }
        }
        for (id, target, timeout) in tcp_runs {
            let shared = shared.clone();
            tokio::spawn(async move {
                let result =
                    tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target)).await;
                let (status, output) = match result {
                    Ok(Ok(_)) => (Status::Passing, format!("TCP connect {target}: Success")),
                    Ok(Err(e)) => (Status::Critical, format!("dial tcp {target}: {e}")),
                    Err(_) => (Status::Critical, format!("dial tcp {target}: i/o timeout")),
                };
                let mut db = shared.lock();
                shared.record_result(&mut db, &id, status, output, |kind, now| {
                    if let CheckKind::Tcp {
                        interval,
                        next_run,
                        running,
                        ..
                    } = kind
                    {
                        *next_run = now + *interval;
                        *running = false;
                    }
                });
            });
        }
    }
}
