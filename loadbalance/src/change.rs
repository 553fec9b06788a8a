//! What changed between two memberships, for algorithms that update their picker in
//! place of building it again ([`crate::LoadBalance::rebuild`]).

use std::sync::Arc;

use crate::{Endpoint, Snapshot};

/// Marks a new endpoint with no unchanged counterpart in the previous membership.
pub(crate) const JOINED: u32 = u32::MAX;

/// A membership change as a [`crate::Balancer`] sees it: the new endpoints, the previous
/// snapshot (endpoints and the picker built for them), and which new endpoints are
/// previous ones unchanged.
///
/// An endpoint is *unchanged* when the previous membership had the same identity with
/// the same weight, zone and metadata; everything an algorithm derives from an endpoint
/// is derived from those, so its share of a picker (ring points, a weight class) can be
/// kept. A changed endpoint counts as one that left and one that joined.
pub struct MembershipChange<'a> {
    endpoints: &'a Arc<[Endpoint]>,
    previous: &'a Snapshot,
    /// Per new endpoint: its index in the previous snapshot, or [`JOINED`].
    from: &'a [u32],
    /// New endpoints that are not previous ones unchanged, ascending.
    joined: &'a [u32],
    /// Previous endpoints that are not in the new membership unchanged, ascending.
    left: &'a [u32],
}

impl<'a> MembershipChange<'a> {
    pub(crate) fn new(
        endpoints: &'a Arc<[Endpoint]>,
        previous: &'a Snapshot,
        from: &'a [u32],
        joined: &'a [u32],
        left: &'a [u32],
    ) -> Self {
        debug_assert_eq!(from.len(), endpoints.len());
        MembershipChange {
            endpoints,
            previous,
            from,
            joined,
            left,
        }
    }

    /// The same change as an algorithm wrapped in another one sees it: the same
    /// endpoints, but `previous` pairs the previous endpoints with the picker the
    /// wrapped algorithm built for them (found in the wrapper's previous picker), so
    /// that its own [`crate::LoadBalance::rebuild`] can reuse it. `previous` must
    /// hold the same endpoints as [`previous`](Self::previous).
    pub(crate) fn wrapped<'b>(&'b self, previous: &'b Snapshot) -> MembershipChange<'b> {
        // `from` and `left` index the previous endpoints: they must be the same.
        debug_assert_eq!(previous.len(), self.previous.len());
        MembershipChange {
            endpoints: self.endpoints,
            previous,
            from: self.from,
            joined: self.joined,
            left: self.left,
        }
    }

    /// The new endpoints, in the order picks refer to.
    pub fn endpoints(&self) -> &Arc<[Endpoint]> {
        self.endpoints
    }

    /// The previous snapshot: its endpoints and the picker built for them.
    pub fn previous(&self) -> &Snapshot {
        self.previous
    }

    /// Where new endpoint `i` was in the previous snapshot, if it was there unchanged.
    pub fn previous_index(&self, i: usize) -> Option<usize> {
        match self.from.get(i) {
            Some(&j) if j != JOINED => Some(j as usize),
            _ => None,
        }
    }

    /// New endpoints (indices) that were not in the previous snapshot unchanged.
    pub fn joined(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.joined.iter().map(|&i| i as usize)
    }

    /// Previous endpoints (indices into the previous snapshot) that are not in the new
    /// one unchanged.
    pub fn left(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.left.iter().map(|&i| i as usize)
    }
}
