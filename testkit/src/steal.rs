//! CPU time the hypervisor took from this machine: the `steal` column of `/proc/stat`.
//!
//! A test that bounds a throughput ratio between two windows of one run measures the
//! machine as much as the code when the host of a virtual machine takes a share of its
//! CPU in one window and not in the other: a third of the CPU stolen in one window
//! lowers that window's rate by as much as the faults such tests name. [`StealSampler`]
//! records the ticks through a run so the test can tell a measurement the host spoiled
//! from one the code failed, and take the spoiled one again. The bound itself is never
//! eased: a run that misses it with the CPU to itself fails.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The machine's CPU ticks so far, all CPUs together (`/proc/stat`'s `cpu` line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// Every tick counted, stolen ones included.
    pub total: u64,
    /// Ticks a runnable virtual CPU waited while the host ran something else.
    pub steal: u64,
}

impl CpuTicks {
    /// The ticks now.
    pub fn now() -> io::Result<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        CpuTicks::parse(&stat).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "/proc/stat has no `cpu` line with a steal column",
            )
        })
    }

    /// Reads the aggregate `cpu` line of a `/proc/stat` text: user, nice, system, idle,
    /// iowait, irq, softirq, steal (and guest time, already inside user and nice, so
    /// left out of the total).
    pub fn parse(stat: &str) -> Option<CpuTicks> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        (fields.len() == 8).then(|| CpuTicks {
            total: fields.iter().sum(),
            steal: fields[7],
        })
    }

    /// The share of the ticks from `earlier` to `self` that were stolen (0 when no tick
    /// passed).
    pub fn stolen_since(&self, earlier: &CpuTicks) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        self.steal.saturating_sub(earlier.steal) as f64 / total as f64
    }
}

/// Samples [`CpuTicks`] on a thread of its own every `period` until dropped, so a test
/// can ask afterwards how much was stolen in any window of its run.
pub struct StealSampler {
    samples: Arc<Mutex<Vec<(Instant, CpuTicks)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StealSampler {
    /// Starts sampling. Fails when `/proc/stat` cannot be read or has no steal column.
    pub fn start(period: Duration) -> io::Result<StealSampler> {
        let first = CpuTicks::now()?;
        let samples = Arc::new(Mutex::new(vec![(Instant::now(), first)]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::Builder::new()
                .name("steal-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(period);
                        match CpuTicks::now() {
                            Ok(t) => samples.lock().unwrap().push((Instant::now(), t)),
                            Err(e) => {
                                tracing::warn!(error = %e, "steal sampler stops: /proc/stat unreadable");
                                return;
                            }
                        }
                    }
                })?
        };
        Ok(StealSampler {
            samples,
            stop,
            thread: Some(thread),
        })
    }

    /// The share of CPU ticks stolen from `from` to `to`, measured from the last sample
    /// at or before `from` to the first at or after `to` (so the window measured covers
    /// the one asked, by up to a period each side). `None` when the samples do not
    /// cover the window (it ends after the last sample).
    pub fn stolen(&self, from: Instant, to: Instant) -> Option<f64> {
        let samples = self.samples.lock().unwrap();
        let start = samples.iter().rev().find(|(at, _)| *at <= from)?.1;
        let end = samples.iter().find(|(at, _)| *at >= to)?.1;
        Some(end.stolen_since(&start))
    }
}

impl Drop for StealSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 10 1 4 30 0 0\n\
                        cpu0 50 2 25 400 5 0 2 15 0 0\n\
                        intr 12345\n";

    #[test]
    fn the_aggregate_line_gives_the_total_and_the_steal() {
        assert_eq!(
            CpuTicks::parse(STAT),
            Some(CpuTicks {
                total: 1000,
                steal: 30
            })
        );
    }

    #[test]
    fn a_line_without_a_steal_column_or_with_garbage_is_refused() {
        assert_eq!(CpuTicks::parse("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(CpuTicks::parse("cpu  1 2 3 x 5 6 7 8\n"), None);
        assert_eq!(CpuTicks::parse("intr 1\n"), None);
    }

    #[test]
    fn the_stolen_share_is_of_the_ticks_between_two_readings() {
        let a = CpuTicks {
            total: 1000,
            steal: 30,
        };
        let b = CpuTicks {
            total: 1200,
            steal: 80,
        };
        assert_eq!(b.stolen_since(&a), 0.25);
        assert_eq!(a.stolen_since(&a), 0.0);
    }

    #[test]
    fn the_sampler_answers_for_windows_its_samples_cover() {
        let before = Instant::now();
        let sampler = StealSampler::start(Duration::from_millis(5)).unwrap();
        let from = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        let to = Instant::now();
        // Wait for a sample at or after `to`: an observable event, not a fixed sleep.
        let deadline = Instant::now() + Duration::from_secs(5);
        let share = loop {
            if let Some(s) = sampler.stolen(from, to) {
                break s;
            }
            assert!(Instant::now() < deadline, "no sample after the window");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!((0.0..=1.0).contains(&share), "{share}");
        // Before the first sample: not covered.
        assert_eq!(sampler.stolen(before, to), None);
    }
}
