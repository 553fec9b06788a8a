//! The eight scenarios: the TCs each starts with, the fault it does, and which TCs the
//! XIDs name (those it leaves alone: an XID owned by the faulty TC has nowhere else to
//! go in Seata's file mode, so its calls measure that TC, not the balancer).

use std::time::{Duration, Instant};

use meshline::{Instance, WatchHub};
use meshline_testkit::net::{FaultProxy, Faults};

use crate::common::TcProcess;
use crate::support::hosted_tc::HostedTc;

/// The slow TC's delay each way.
const SLOW: Duration = Duration::from_millis(50);
/// How long a restarted TC is down.
const DOWN: Duration = Duration::from_millis(300);
/// After a TC is back, how long its XID calls are still left out of the affinity
/// (the clients reconnect and register again).
const SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    SlowTc,
    FastFailingTc,
    HalfOpenTc,
    FrozenTc,
    ColdTcJoining,
    HalfFailing,
    RollingRestart,
    ReconnectStorm,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::SlowTc => "slow TC (+50 ms each way)",
            Scenario::FastFailingTc => "fast-failing TC (FailedStore)",
            Scenario::HalfOpenTc => "half-open TC (host blackholed)",
            Scenario::FrozenTc => "frozen TC (SIGSTOP)",
            Scenario::ColdTcJoining => "cold TC joining",
            Scenario::HalfFailing => "half the TCs failing at once",
            Scenario::RollingRestart => "rolling restart of every TC",
            Scenario::ReconnectStorm => "reconnect storm (16 clients, TC restart)",
        }
    }

    /// How many clients, and callers on each.
    pub fn clients(self) -> (usize, usize) {
        match self {
            Scenario::ReconnectStorm => (16, 1),
            _ => (1, 8),
        }
    }
}

/// The TCs of one run.
pub struct Cluster {
    scenario: Scenario,
    tcs: Vec<HostedTc>,
    frozen: Option<TcProcess>,
    proxy: Option<FaultProxy>,
    /// Every TC's address as the clients reach it, in order.
    listed: Vec<Instance>,
    /// The indices (in `listed`) the XIDs name.
    stable: Vec<usize>,
    /// XID calls naming a TC in one of these windows are left out of the affinity:
    /// (index in the stable list, from, to).
    pub outages: Vec<(usize, Instant, Instant)>,
}

impl Cluster {
    pub fn start(scenario: Scenario) -> Cluster {
        let n = if scenario == Scenario::HalfFailing {
            4
        } else {
            3
        };
        let tcs = HostedTc::start_many(if scenario == Scenario::FrozenTc {
            n - 1
        } else {
            n
        });
        let mut listed: Vec<Instance> = tcs.iter().map(HostedTc::instance).collect();
        let (mut frozen, mut proxy) = (None, None);
        match scenario {
            Scenario::SlowTc => {
                let p = FaultProxy::start(tcs[0].addr()).expect("fault proxy");
                listed[0] = Instance::new("127.0.0.1", p.addr().port()).unwrap();
                proxy = Some(p);
            }
            Scenario::FrozenTc => {
                let p = TcProcess::start("frozen", 0, None);
                listed.insert(0, p.instance());
                frozen = Some(p);
            }
            _ => {}
        }
        let stable = match scenario {
            Scenario::HalfFailing => vec![2, 3],
            Scenario::RollingRestart => vec![0, 1, 2],
            _ => vec![1, 2],
        };
        Cluster {
            scenario,
            tcs,
            frozen,
            proxy,
            listed,
            stable,
            outages: Vec::new(),
        }
    }

    /// The TCs listed in the registry before the fault.
    pub fn initial(&self) -> Vec<Instance> {
        match self.scenario {
            Scenario::ColdTcJoining => self.listed[1..].to_vec(),
            _ => self.listed.clone(),
        }
    }

    /// The TCs the XIDs name.
    pub fn stable(&self) -> Vec<Instance> {
        self.stable
            .iter()
            .map(|i| self.listed[*i].clone())
            .collect()
    }

    /// Does the scenario's fault (returns when it is done; a restart takes its time).
    pub async fn fault(&mut self, hub: &WatchHub) {
        match self.scenario {
            Scenario::SlowTc => self.proxy.as_ref().expect("proxy").set(Faults {
                delay: SLOW,
                ..Faults::default()
            }),
            Scenario::FastFailingTc => self.tcs[0].tc.fail_store(true),
            Scenario::HalfOpenTc => self.tcs[0].host.cut().expect("cut"),
            Scenario::FrozenTc => self.frozen.as_ref().expect("frozen").signal("-STOP"),
            Scenario::ColdTcJoining => {
                hub.publish("c", self.listed.clone());
            }
            Scenario::HalfFailing => {
                self.tcs[0].tc.fail_store(true);
                self.tcs[1].tc.fail_store(true);
            }
            Scenario::RollingRestart => {
                for i in 0..self.tcs.len() {
                    self.restart(i).await;
                    tokio::time::sleep(SETTLE).await;
                }
            }
            Scenario::ReconnectStorm => self.restart(0).await,
        }
    }

    /// Restarts TC `i`, recording its outage for the XIDs that name it.
    async fn restart(&mut self, i: usize) {
        let from = Instant::now();
        let tc = self.tcs.remove(i);
        self.tcs.insert(i, tc.restart(DOWN).await);
        if let Some(s) = self.stable.iter().position(|x| *x == i) {
            self.outages.push((s, from, Instant::now() + SETTLE));
        }
    }

    /// Undoes what would keep a TC from being stopped (a stopped process, a cut host).
    pub fn heal(&mut self) {
        if let Some(p) = &self.frozen {
            p.signal("-CONT");
        }
        if self.scenario == Scenario::HalfOpenTc {
            let _ = self.tcs[0].host.restore();
        }
    }
}
