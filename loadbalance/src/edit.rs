//! Membership edits a caller already knows: "this endpoint joined (with this payload)",
//! "that one left". A [`crate::Balancer::apply`] takes them as they are, so whoever
//! diffed the registry's snapshot (the rpc-client, against the endpoints it follows)
//! does not have the balancer diff the whole list a second time.

use std::any::{Any, TypeId};
use std::sync::Arc;

use meshline_instance::{Instance, InstanceKey};

use crate::change::JOINED;
use crate::{Endpoint, Snapshot, StatsRegistry};

/// One change of a [`crate::Balancer`]'s membership.
///
/// Keyed by identity ([`InstanceKey`]), as tower's `Change::Insert` / `Change::Remove`
/// are keyed: the last edit of an identity in one [`apply`](crate::Balancer::apply)
/// wins.
#[derive(Debug, Clone)]
pub enum Edit<T = ()> {
    /// The endpoint joins with this payload, or replaces the member with its identity
    /// (new instance data and payload; its stats, the in-flight count included, are
    /// kept).
    Insert(Instance, T),
    /// The member with this identity leaves (nothing happens when there is none).
    Remove(InstanceKey),
}

impl<T> Edit<T> {
    /// The identity the edit is about.
    pub fn key(&self) -> &InstanceKey {
        match self {
            Edit::Insert(instance, _) => instance.key(),
            Edit::Remove(key) => key,
        }
    }
}

/// `payload` as an endpoint carries it: nothing for `()` (a plain balancer allocates
/// nothing per endpoint), else shared.
pub(crate) fn boxed<T: Any + Send + Sync>(payload: T) -> Option<Arc<dyn Any + Send + Sync>> {
    if TypeId::of::<T>() == TypeId::of::<()>() {
        None
    } else {
        Some(Arc::new(payload))
    }
}

/// The membership `previous` becomes with `edits`, and where each new endpoint was in
/// `previous` ([`JOINED`] for inserted ones); `None` when no edit changes anything.
///
/// Identity order is kept when `previous` has it (what every update of a balancer fed
/// only edits and registry snapshots has): removals are found through the snapshot's
/// key index, and the inserted endpoints, sorted among themselves, are merged in, so
/// the cost is one pass of reference-count increments over the members plus
/// O(e log e) for `e` edits: no key of an unchanged member is compared.
pub(crate) fn resolve<T: Any + Send + Sync>(
    previous: &Snapshot,
    registry: &StatsRegistry,
    edits: Vec<Edit<T>>,
) -> Option<(Vec<Endpoint>, Vec<u32>)> {
    let old = &previous.endpoints()[..];
    // The last edit of each identity wins: in identity order (a stable sort keeps the
    // edits of one identity in their order), each run of one identity is reduced to
    // its last. Positions are sorted, and each edit moved once, when it is used.
    let order = meshline_instance::identity_order(edits.len(), |i| edits[i].key());
    let mut runs_last: Vec<usize> = Vec::with_capacity(order.len());
    for (k, &i) in order.iter().enumerate() {
        if order
            .get(k + 1)
            .is_none_or(|&next| edits[next].key() != edits[i].key())
        {
            runs_last.push(i);
        }
    }
    let inserts = runs_last
        .iter()
        .filter(|&&i| matches!(edits[i], Edit::Insert(..)))
        .count();
    let mut slots: Vec<Option<Edit<T>>> = edits.into_iter().map(Some).collect();
    let last = runs_last.iter().filter_map(|&i| slots[i].take());
    let mut gone = vec![false; old.len()];
    let mut any_gone = false;
    let mut inserted: Vec<Endpoint> = Vec::new();
    let mut reg = None;
    for e in last {
        let at = if previous.sorted() {
            previous.position(e.key())
        } else {
            // Ready-made endpoints may repeat an identity: every occurrence goes.
            let mut at = None;
            for (j, _) in old.iter().enumerate().filter(|(_, o)| o.key() == e.key()) {
                gone[j] = true;
                at = Some(j);
            }
            at
        };
        if let Some(j) = at {
            gone[j] = true;
            any_gone = true;
        }
        if let Edit::Insert(instance, payload) = e {
            let stats = match at {
                Some(j) => old[j].stats_arc().clone(),
                None => reg
                    .get_or_insert_with(|| {
                        let mut reg = registry.updating(old.len());
                        reg.reserve(inserts);
                        reg
                    })
                    .stats(instance.key()),
            };
            inserted.push(Endpoint::carrying(instance, stats, boxed(payload)));
        }
    }
    if reg.is_none() {
        // Nothing new: still prune what earlier updates left behind, as every update
        // does (a lock and a length check when there is nothing to prune).
        drop(registry.updating(old.len()));
    }
    if !any_gone && inserted.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(old.len() + inserted.len());
    let mut from = Vec::with_capacity(old.len() + inserted.len());
    let mut joining = inserted.into_iter().peekable();
    for (j, e) in old.iter().enumerate() {
        if previous.sorted() {
            // Inserted identities before this member take their place in order (an
            // identity replacing this member is equal to it: it goes in just after,
            // where the member was).
            while let Some(x) = joining.next_if(|x| x.key() < e.key()) {
                out.push(x);
                from.push(JOINED);
            }
        }
        if !gone[j] {
            out.push(e.clone());
            from.push(j as u32);
        }
    }
    for x in joining {
        out.push(x);
        from.push(JOINED);
    }
    Some((out, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of several edits of one identity, in any order among other identities' edits,
    /// the last wins; the result is in identity order.
    #[test]
    fn the_last_edit_of_each_identity_wins() {
        let registry = StatsRegistry::new();
        let empty = Snapshot::empty();
        let inst = |h: &str, w: u32| Instance::parse(h).unwrap().with_weight(w);
        let edits = vec![
            Edit::Insert(inst("10.0.0.2:8091", 1), ()),
            Edit::Insert(inst("10.0.0.10:8091", 1), ()),
            Edit::Insert(inst("10.0.0.2:8091", 2), ()),
            Edit::Remove(inst("10.0.0.10:8091", 1).key().clone()),
            Edit::Insert(inst("10.0.0.1:8091", 1), ()),
            Edit::Insert(inst("10.0.0.2:8091", 3), ()),
            Edit::Remove(inst("10.0.0.1:8091", 1).key().clone()),
            Edit::Insert(inst("10.0.0.1:8091", 5), ()),
        ];
        let (endpoints, from) = resolve(&empty, &registry, edits).unwrap();
        let got: Vec<(String, u32)> = endpoints
            .iter()
            .map(|e| (e.key().to_string(), e.weight()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1:8091".to_string(), 5),
                ("10.0.0.2:8091".to_string(), 3)
            ]
        );
        assert_eq!(from, [JOINED, JOINED]);
    }
}
