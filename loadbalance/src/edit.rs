//! Membership edits a caller already knows: "this endpoint joined (with this payload)",
//! "that one left". A [`crate::Balancer::apply`] takes them as they are, so whoever
//! diffed the registry's snapshot (the rpc-client, against the endpoints it follows)
//! does not have the balancer diff the whole list a second time.

use std::any::{Any, TypeId};
use std::sync::Arc;

use meshline_registry_core::{Instance, InstanceKey};

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
    // The last edit of each identity wins: a stable sort keeps their order, then
    // each run of one identity is reduced to its last.
    let edits = in_identity_order(edits);
    let mut last: Vec<Edit<T>> = Vec::with_capacity(edits.len());
    for e in edits {
        match last.last_mut() {
            Some(prev) if prev.key() == e.key() => *prev = e,
            _ => last.push(e),
        }
    }
    let inserts = last
        .iter()
        .filter(|e| matches!(e, Edit::Insert(..)))
        .count();
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

/// `edits` in identity order, the edits of one identity in their given order: what a
/// stable sort by key gives, mostly by integer compares. Each host's first 16 bytes,
/// zero-padded, order hosts as their strings do wherever they differ (a host is
/// never a string with a NUL); only equal prefixes (the same host, or long names)
/// compare whole keys. A string comparison per step made sorting 10 000 edits a
/// quarter of their whole apply.
fn in_identity_order<T>(edits: Vec<Edit<T>>) -> Vec<Edit<T>> {
    fn prefix(host: &str) -> u128 {
        let mut bytes = [0u8; 16];
        let n = host.len().min(16);
        bytes[..n].copy_from_slice(&host.as_bytes()[..n]);
        u128::from_be_bytes(bytes)
    }
    let mut order: Vec<(u128, u32)> = edits
        .iter()
        .enumerate()
        .map(|(i, e)| (prefix(&e.key().host), i as u32))
        .collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| edits[a.1 as usize].key().cmp(edits[b.1 as usize].key()))
            .then(a.1.cmp(&b.1))
    });
    let mut slots: Vec<Option<Edit<T>>> = edits.into_iter().map(Some).collect();
    order
        .iter()
        .filter_map(|&(_, i)| slots[i as usize].take())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_order_is_a_stable_sort_by_key() {
        let hosts = [
            "10.0.0.2",
            "10.0.0.10",
            "10.0.0.1",
            "a-very-long-host-name.example",
            "a-very-long-host-name.example.org",
            "a-very-long-host-name.exampla",
            "a",
            "[::1]",
            "[2001:db8::1]",
            "10.0.0.1",
        ];
        // Each identity edited several times (the tags are positions): their order
        // must stay.
        let mut edits = Vec::new();
        for round in 0..3 {
            for h in hosts {
                for port in [8092u16, 8091] {
                    let tag = edits.len();
                    let inst = Instance::parse(&format!("{h}:{port}")).unwrap();
                    edits.push(Edit::Insert(inst, (round, tag)));
                }
            }
        }
        let key_and_tag = |e: &Edit<(i32, usize)>| match e {
            Edit::Insert(inst, tag) => (inst.key().clone(), *tag),
            Edit::Remove(_) => unreachable!("only inserts here"),
        };
        let mut want: Vec<_> = edits.iter().map(key_and_tag).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let got: Vec<_> = in_identity_order(edits).iter().map(key_and_tag).collect();
        assert_eq!(got, want);
    }
}
