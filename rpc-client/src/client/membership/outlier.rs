//! Outlier detection by rate: every [`OutlierDetection::interval`], the endpoints whose
//! share of failed calls stands out are ejected, as Envoy's outlier detection does
//! (`success_rate` and `failure_percentage`).
//!
//! Failures in a row (`ejection`) catch an endpoint that fails everything; they miss one
//! that fails half its calls, since every success ends the row. Here each endpoint's
//! calls and failures over the interval are read from its stats (the same counts the
//! balancers keep, so the calls pay nothing more), and two rules judge them:
//!
//! - **Success rate** (off by default; Envoy's is on): among the endpoints with at
//!   least `success_rate_request_volume` calls in the interval, when there are at least
//!   `success_rate_minimum_hosts` of them, an endpoint whose success rate is below
//!   `mean - success_rate_stdev_factor × stdev` is ejected. A statistical rule with a
//!   sharp edge, which is why it is not on by default here: when every other endpoint
//!   is perfect, one endpoint that deviates at all stands `sqrt(n - 1)` standard
//!   deviations below the mean, over Envoy's factor of 1.9 from five endpoints on, so
//!   one failed call in a hundred ejects it (the unit test shows it).
//! - **Failure percentage** (off by default, as Envoy's enforcement is): an endpoint
//!   with at least `failure_percentage_request_volume` calls and at least
//!   `failure_percentage_threshold` % of them failed is ejected, when at least
//!   `failure_percentage_minimum_hosts` endpoints had that many calls. A fixed line: it
//!   works in a cluster of three TCs, where the spread of three says little.
//!
//! What counts as failed is what the stats count: a timeout, a connection that failed
//! after the request was written, a request not written (retried elsewhere), and an
//! answer classified as the server's failure. An ejection here is the same as one for
//! failures in a row: the endpoint leaves the picks, the cap of
//! [`OutlierDetection::max_ejection_percent`] holds, and a PING (and the classifier's
//! probe) decides its return.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::InstanceKey;

use super::Membership;
use super::alive::alive_of;

/// How endpoints are ejected from the picks, and for how long: the rules and limits of
/// outlier detection (the `transport.*` keys each field names; the defaults are
/// Envoy's where an Envoy default exists).
#[derive(Debug, Clone, PartialEq)]
pub struct OutlierDetection {
    /// How often the rates are judged, over the calls since the last time
    /// (`transport.outlierInterval`, 10 s; zero: never judged by rate).
    pub interval: Duration,
    /// Judge by success rate, ejecting below `mean - factor × stdev`
    /// (`transport.successRateStdevFactor`; Envoy's is 1.9; `None`, the default, or 0:
    /// off).
    pub success_rate_stdev_factor: Option<f64>,
    /// Endpoints with enough calls needed before the success rate is judged
    /// (`transport.successRateMinimumHosts`, 5).
    pub success_rate_minimum_hosts: usize,
    /// Calls in the interval an endpoint needs to count for the success rate
    /// (`transport.successRateRequestVolume`, 100).
    pub success_rate_request_volume: u64,
    /// Failed calls, in percent, at which an endpoint is ejected
    /// (`transport.failurePercentageThreshold`; `None`, the default, or 0: off).
    pub failure_percentage_threshold: Option<u32>,
    /// Endpoints with enough calls needed before the failure percentage is judged
    /// (`transport.failurePercentageMinimumHosts`, 5).
    pub failure_percentage_minimum_hosts: usize,
    /// Calls in the interval an endpoint needs to be judged by failure percentage
    /// (`transport.failurePercentageRequestVolume`, 50).
    pub failure_percentage_request_volume: u64,
    /// At most this percentage of the endpoints (alive and ejected) is ejected at once
    /// (`transport.maxEjectionPercent`, 50: the panic threshold). One endpoint may
    /// always be ejected while another is alive, whatever the percentage; the last
    /// alive one never is: ejecting everything would only turn errors into "no
    /// endpoint".
    pub max_ejection_percent: u32,
    /// The longest ejection, which the ejection time doubles up to
    /// (`transport.maxEjectionTime`, 30 s).
    pub max_ejection_time: Duration,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        OutlierDetection {
            interval: Duration::from_secs(10),
            success_rate_stdev_factor: None,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            failure_percentage_threshold: None,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
            max_ejection_percent: 50,
            max_ejection_time: Duration::from_secs(30),
        }
    }
}

impl OutlierDetection {
    /// Whether any rate rule is on (else nothing runs every interval).
    pub fn judges_rates(&self) -> bool {
        !self.interval.is_zero()
            && (self.success_rate_stdev_factor.is_some_and(|f| f > 0.0)
                || self.failure_percentage_threshold.is_some_and(|t| t > 0))
    }

    /// Whether one more endpoint may be ejected when `ejected` are and `alive` are in
    /// the picks (see [`max_ejection_percent`](Self::max_ejection_percent)).
    pub fn may_eject(&self, ejected: usize, alive: usize) -> bool {
        if alive <= 1 {
            return false;
        }
        let total = (ejected + alive) as u64;
        ejected == 0 || (ejected as u64 + 1) * 100 <= total * u64::from(self.max_ejection_percent)
    }

    /// The endpoints the rate rules eject, given each one's calls and failures over the
    /// interval, with why.
    pub(crate) fn outliers(&self, tallies: &[Tally]) -> Vec<(InstanceKey, String)> {
        let mut out: Vec<(InstanceKey, String)> = Vec::new();
        if let Some(factor) = self.success_rate_stdev_factor.filter(|&f| f > 0.0) {
            let judged: Vec<&Tally> = tallies
                .iter()
                .filter(|t| t.calls >= self.success_rate_request_volume)
                .collect();
            if judged.len() >= self.success_rate_minimum_hosts.max(1) {
                let rates: Vec<f64> = judged.iter().map(|t| t.success_rate()).collect();
                let mean = rates.iter().sum::<f64>() / rates.len() as f64;
                let var =
                    rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64;
                let line = mean - factor * var.sqrt();
                for (t, r) in judged.iter().zip(&rates) {
                    if *r < line {
                        out.push((
                            t.key.clone(),
                            format!(
                                "success rate {:.1} % over {} calls, below the cluster's {:.1} % (mean {:.1} % less {} standard deviations)",
                                r * 100.0,
                                t.calls,
                                line * 100.0,
                                mean * 100.0,
                                factor
                            ),
                        ));
                    }
                }
            }
        }
        if let Some(threshold) = self.failure_percentage_threshold.filter(|&t| t > 0) {
            let judged: Vec<&Tally> = tallies
                .iter()
                .filter(|t| t.calls >= self.failure_percentage_request_volume.max(1))
                .collect();
            if judged.len() >= self.failure_percentage_minimum_hosts.max(1) {
                for t in judged {
                    let failed = t.failures * 100;
                    if failed >= u64::from(threshold) * t.calls
                        && !out.iter().any(|(k, _)| *k == t.key)
                    {
                        out.push((
                            t.key.clone(),
                            format!(
                                "{} of {} calls failed ({:.1} %, at least {threshold} %)",
                                t.failures,
                                t.calls,
                                failed as f64 / t.calls as f64
                            ),
                        ));
                    }
                }
            }
        }
        out
    }
}

/// One endpoint's calls and failures over an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    pub key: InstanceKey,
    pub calls: u64,
    pub failures: u64,
}

impl Tally {
    fn success_rate(&self) -> f64 {
        (self.calls - self.failures) as f64 / self.calls as f64
    }
}

impl Membership {
    /// Judges the alive endpoints' rates every interval and ejects the outliers, until
    /// the client shuts down. Spawned once, when a rate rule is on.
    pub(crate) async fn judge_rates(self: Arc<Self>) {
        let rules = self.options.outlier.clone();
        // Each endpoint's totals at the last judgement: the interval's counts are the
        // difference (stats outlive reconnections, keyed by identity).
        let mut last: HashMap<InstanceKey, (u64, u64)> = HashMap::new();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(rules.interval) => {}
                _ = self.shutdown.cancelled() => return,
            }
            let snapshot = self.balancer.snapshot();
            let mut now: HashMap<InstanceKey, (u64, u64)> = HashMap::new();
            let mut tallies = Vec::new();
            for endpoint in snapshot.endpoints().iter() {
                let stats = endpoint.stats();
                let (ok, failed) = (stats.successes(), stats.failures());
                let key = endpoint.key().clone();
                if let Some(&(ok0, failed0)) = last.get(&key) {
                    let (ok, failed) = (ok.saturating_sub(ok0), failed.saturating_sub(failed0));
                    if ok + failed > 0 {
                        tallies.push(Tally {
                            key: key.clone(),
                            calls: ok + failed,
                            failures: failed,
                        });
                    }
                }
                now.insert(key, (ok, failed));
            }
            last = now;
            for (key, why) in rules.outliers(&tallies) {
                if let Some(endpoint) = snapshot.endpoint(&key) {
                    let entry = alive_of(endpoint);
                    self.eject(&key, &entry.connection, &why);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(port: u16, calls: u64, failures: u64) -> Tally {
        Tally {
            key: meshline_registry_core::Instance::new("10.0.0.1", port)
                .unwrap()
                .key()
                .clone(),
            calls,
            failures,
        }
    }

    /// Envoy's success-rate rule with its factor, 1.9: five endpoints at 100 % and one
    /// at 50 % (100 calls each): mean 91.7 %, standard deviation 18.6 %, line 56.3 %:
    /// the one at 50 % goes. One at 80 %: line 82.5 %, it goes too; with a factor of 3
    /// (line 74.3 %) it stays. And the sharp edge: one at 99 % beside five perfect
    /// ones is 2.24 standard deviations down, ejected for one failed call.
    #[test]
    fn the_success_rate_rule_ejects_below_mean_less_stdevs() {
        let rules = OutlierDetection {
            success_rate_stdev_factor: Some(1.9),
            ..OutlierDetection::default()
        };
        let mut t: Vec<Tally> = (1..=5).map(|p| tally(p, 100, 0)).collect();
        t.push(tally(6, 100, 50));
        let out = rules.outliers(&t);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0.port, 6);
        assert!(out[0].1.contains("success rate 50.0 %"), "{}", out[0].1);
        assert!(
            out[0].1.contains("below the cluster's 56.3 %"),
            "{}",
            out[0].1
        );
        t[5] = tally(6, 100, 20);
        assert_eq!(rules.outliers(&t).len(), 1);
        let lenient = OutlierDetection {
            success_rate_stdev_factor: Some(3.0),
            ..OutlierDetection::default()
        };
        assert!(lenient.outliers(&t).is_empty());
        t[5] = tally(6, 100, 1);
        assert_eq!(rules.outliers(&t).len(), 1, "one failure in a hundred");
        // Four endpoints with enough calls, under the minimum of five: not judged.
        t[0] = tally(1, 99, 0);
        t[1] = tally(2, 99, 0);
        assert!(rules.outliers(&t).is_empty());
        // Off by default.
        t[0] = tally(1, 100, 0);
        t[1] = tally(2, 100, 0);
        t[5] = tally(6, 100, 50);
        assert!(OutlierDetection::default().outliers(&t).is_empty());
        assert!(!OutlierDetection::default().judges_rates());
    }

    /// The failure-percentage rule: a fixed line, judged once enough endpoints had
    /// enough calls; three TCs suffice when the minimum says so.
    #[test]
    fn the_failure_percentage_rule_ejects_at_its_threshold() {
        let rules = OutlierDetection {
            failure_percentage_threshold: Some(40),
            failure_percentage_minimum_hosts: 3,
            failure_percentage_request_volume: 50,
            ..OutlierDetection::default()
        };
        let t = vec![tally(1, 50, 0), tally(2, 50, 19), tally(3, 50, 20)];
        let out = rules.outliers(&t);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0.port, 3);
        assert!(out[0].1.contains("20 of 50 calls failed"), "{}", out[0].1);
        // One endpoint under the call volume: only two judged, under the minimum of 3.
        let t = vec![tally(1, 49, 0), tally(2, 50, 19), tally(3, 50, 50)];
        assert!(rules.outliers(&t).is_empty());
        // Off by default.
        let t = vec![tally(1, 50, 0), tally(2, 50, 50), tally(3, 50, 50)];
        assert!(OutlierDetection::default().outliers(&t).is_empty());
    }

    /// The cap: at most the percentage of all endpoints, but one may always go while
    /// another is alive, and the last alive never.
    #[test]
    fn the_ejection_cap_is_a_percentage_with_one_always_allowed() {
        let half = OutlierDetection::default();
        assert!(half.may_eject(0, 2));
        assert!(!half.may_eject(1, 1));
        assert!(!half.may_eject(0, 1));
        assert!(half.may_eject(1, 3)); // 2 of 4
        assert!(!half.may_eject(2, 2)); // 3 of 4
        let tenth = OutlierDetection {
            max_ejection_percent: 10,
            ..OutlierDetection::default()
        };
        assert!(tenth.may_eject(0, 5)); // one, whatever the percentage
        assert!(!tenth.may_eject(1, 8)); // 2 of 9 > 10 %
        assert!(tenth.may_eject(1, 19)); // 2 of 20
        let all = OutlierDetection {
            max_ejection_percent: 100,
            ..OutlierDetection::default()
        };
        assert!(all.may_eject(3, 2));
        assert!(!all.may_eject(4, 1));
    }
}
