//! One membership with the picker built for it: what a [`crate::Balancer`] swaps in
//! whole on every change, and what a pick reads.

use std::sync::Arc;

use meshline_instance::InstanceKey;

use crate::index::KeyIndex;
use crate::picker::EmptyPicker;
use crate::{Endpoint, Picker};

/// One membership snapshot with the picker built for it.
///
/// The endpoints carry their payloads (see [`crate::Balancer<T>`]), so a snapshot is
/// also the set a caller sends to: looking an identity up here ([`endpoint`]) gives
/// what to send through, its stats and its registry data at once.
///
/// [`endpoint`]: Snapshot::endpoint
pub struct Snapshot {
    endpoints: Arc<[Endpoint]>,
    picker: Arc<dyn Picker>,
    /// Position of each identity in `endpoints`.
    index: KeyIndex,
    /// `endpoints` are in strictly ascending identity order and their stats are this
    /// balancer's registry's: the next update can be merged against them.
    sorted: bool,
}

impl Snapshot {
    /// No endpoints.
    pub(crate) fn empty() -> Snapshot {
        Snapshot::new(Arc::from(Vec::new()), Arc::new(EmptyPicker), true)
    }

    pub(crate) fn new(
        endpoints: Arc<[Endpoint]>,
        picker: Arc<dyn Picker>,
        sorted: bool,
    ) -> Snapshot {
        let index = KeyIndex::build(&endpoints);
        Snapshot::with_index(endpoints, picker, index, sorted)
    }

    pub(crate) fn with_index(
        endpoints: Arc<[Endpoint]>,
        picker: Arc<dyn Picker>,
        index: KeyIndex,
        sorted: bool,
    ) -> Snapshot {
        Snapshot {
            endpoints,
            picker,
            index,
            sorted,
        }
    }

    /// `endpoints` with `picker` and no key index ([`position`](Self::position) finds
    /// nothing): the previous membership as an algorithm wrapped in another one sees
    /// it (the wrapper's previous endpoints, or one zone of them, with the picker the
    /// wrapped algorithm built for them), for [`crate::MembershipChange::wrapped`].
    pub(crate) fn unindexed(endpoints: Arc<[Endpoint]>, picker: Arc<dyn Picker>) -> Snapshot {
        Snapshot::with_index(endpoints, picker, KeyIndex::none(), false)
    }

    /// The endpoint with identity `key`, if it is a member: for requests bound to one
    /// server (a broadcast, a call to a named endpoint) that still want its in-flight
    /// count and latency recorded ([`Endpoint::begin`]). O(1).
    pub fn endpoint(&self, key: &InstanceKey) -> Option<&Endpoint> {
        self.position(key).map(|i| &self.endpoints[i])
    }

    /// The position of identity `key` in [`endpoints`](Self::endpoints), if it is a
    /// member. O(1).
    pub fn position(&self, key: &InstanceKey) -> Option<usize> {
        self.index.get(&self.endpoints, key)
    }

    /// The endpoints, in the order the picker's indices refer to (identity order,
    /// unless ready-made endpoints were installed in another order).
    pub fn endpoints(&self) -> &Arc<[Endpoint]> {
        &self.endpoints
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether there is no endpoint.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The picker.
    pub fn picker(&self) -> &Arc<dyn Picker> {
        &self.picker
    }

    /// The key index (carried over to the next snapshot of a merged update).
    pub(crate) fn index(&self) -> &KeyIndex {
        &self.index
    }

    /// Whether the endpoints are in strictly ascending identity order (see the field).
    pub(crate) fn sorted(&self) -> bool {
        self.sorted
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("endpoints", &self.endpoints.len())
            .finish()
    }
}
