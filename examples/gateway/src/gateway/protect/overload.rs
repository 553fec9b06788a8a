//! The load each backend of a cluster reported (the `load` command, 0..=100), and the
//! question shedding asks: is every alive backend of the cluster above the threshold?
//!
//! A backend that never reported counts as not overloaded, so a fresh backend joining
//! an overloaded cluster stops the shedding until it reports too.

use std::collections::HashMap;
use std::sync::Mutex;

use meshline::InstanceKey;

/// The loads a cluster's backends reported, by backend.
#[derive(Debug, Default)]
pub struct Loads {
    reported: Mutex<HashMap<InstanceKey, u32>>,
}

impl Loads {
    /// Records `backend`'s latest report.
    pub fn report(&self, backend: InstanceKey, load: u32) {
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(backend, load);
    }

    /// `backend`'s latest report.
    pub fn get(&self, backend: &InstanceKey) -> Option<u32> {
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(backend)
            .copied()
    }

    /// True when there is at least one backend in `alive` and every one of them last
    /// reported a load above `threshold`.
    pub fn all_above<'a>(
        &self,
        mut alive: impl Iterator<Item = &'a InstanceKey>,
        threshold: u32,
    ) -> bool {
        let reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        let mut any = false;
        let all = alive.all(|k| {
            any = true;
            reported.get(k).is_some_and(|&l| l > threshold)
        });
        any && all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> InstanceKey {
        meshline::Instance::new("127.0.0.1", port)
            .unwrap()
            .key()
            .clone()
    }

    #[test]
    fn overloaded_only_when_every_alive_backend_reported_above_the_threshold() {
        let loads = Loads::default();
        let (a, b) = (key(1), key(2));
        assert!(
            !loads.all_above([].iter(), 80),
            "no backend is not overloaded"
        );
        loads.report(a.clone(), 95);
        assert!(loads.all_above([a.clone()].iter(), 80));
        // b never reported.
        assert!(!loads.all_above([a.clone(), b.clone()].iter(), 80));
        loads.report(b.clone(), 80);
        assert!(!loads.all_above([a.clone(), b.clone()].iter(), 80));
        loads.report(b.clone(), 81);
        assert!(loads.all_above([a.clone(), b.clone()].iter(), 80));
        loads.report(a.clone(), 10);
        assert!(!loads.all_above([a, b].iter(), 80));
    }
}
