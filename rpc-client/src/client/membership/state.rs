//! What the membership keeps under its lock: a slot per endpoint it follows, the
//! endpoints ejected from the picks, and the tasks of removed endpoints still draining.

use std::collections::BTreeMap;
use std::sync::Arc;

use meshline_registry_core::{Instance, InstanceKey};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::alive::{AliveEndpoint, EndpointState};

#[derive(Default)]
pub(crate) struct State {
    pub endpoints: BTreeMap<InstanceKey, Slot>,
    /// Connected endpoints out of the picks after failures (see `ejection`).
    pub ejected: BTreeMap<InstanceKey, Ejected>,
    /// Tasks of endpoints the registry removed, still draining; `shutdown` waits for
    /// them.
    pub draining: Vec<JoinHandle<()>>,
    /// The member count last warned about for being over the subset cap (`None` while
    /// the registry lists no more than the cap): one warning per change, not per
    /// snapshot.
    pub over_cap_warned: Option<usize>,
    /// Since when the alive set has not been empty (`None` while it is): a connection
    /// joining a set warm for a slow-start window ramps.
    pub warm_since: Option<tokio::time::Instant>,
    /// When an answer said another server serves and left the alive set empty (`None`
    /// once the set has an endpoint again): new calls wait for the registry to name
    /// one instead of failing at once (see [`Membership::awaits_redirect`](super::Membership::awaits_redirect)).
    pub redirected_at: Option<Instant>,
}

/// One endpoint the registry lists (and the subset keeps): its task and what the task
/// last reported.
pub(crate) struct Slot {
    pub instance: Arc<Instance>,
    pub state: EndpointState,
    pub connects: u64,
    /// Which task owns the slot: an endpoint removed and listed again gets a new task
    /// and a new generation, and the old task's reports (it may still be draining) are
    /// dropped.
    pub generation: u64,
    /// `false` tells the task to drain and stop.
    pub cmd: watch::Sender<bool>,
    pub task: Option<JoinHandle<()>>,
    /// Ejections in a row, and when it last came back (see `ejection`).
    pub ejections: u32,
    pub returned_at: Option<Instant>,
}

/// An endpoint out of the picks.
pub(crate) struct Ejected {
    pub entry: AliveEndpoint,
    pub generation: u64,
}

impl State {
    /// The slot for `key` if it is still generation `generation`.
    pub fn slot_mut(&mut self, key: &InstanceKey, generation: u64) -> Option<&mut Slot> {
        self.endpoints
            .get_mut(key)
            .filter(|s| s.generation == generation)
    }
}
