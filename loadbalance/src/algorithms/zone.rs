//! Zone preference with spill-over.
//!
//! Cross-zone traffic costs latency and money, so a caller that says which zone it is
//! in ([`PickRequest::with_zone`]) is served by endpoints of that zone while the zone
//! has at least `min_healthy` usable endpoints (weight above 0 and not excluded by the
//! request); below that the request spills over to the whole cluster. Within the
//! chosen set any algorithm decides ([`ZoneAwareLoadBalance::new`] wraps one).
//!
//! "Healthy" is "present": the rpc-client offers only connected endpoints, and a retry
//! excludes the ones that just failed, so a zone whose endpoints fail one by one spills
//! over as its retries exclude them. Per-zone pickers are prebuilt on membership
//! change; a pick compares the caller's zone with the (few) zone names and translates
//! index exclusions through a fixed-size buffer, allocating nothing.

use std::sync::Arc;

use crate::change::JOINED;
use crate::picker::EmptyPicker;
use crate::request::Exclusions;
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker, Snapshot};

/// Index exclusions translated per pick without allocating; longer lists skip the zone.
const MAX_TRANSLATED: usize = 32;

/// Prefers the caller's zone, spilling over to every endpoint when it runs short.
pub struct ZoneAwareLoadBalance {
    inner: Arc<dyn LoadBalance>,
    min_healthy: usize,
    name: String,
}

impl ZoneAwareLoadBalance {
    /// Wraps `inner`; the local zone is used while it has at least one usable endpoint.
    pub fn new(inner: Arc<dyn LoadBalance>) -> Self {
        let name = format!("zone:{}", inner.name());
        ZoneAwareLoadBalance {
            inner,
            min_healthy: 1,
            name,
        }
    }

    /// Spill over once the local zone has fewer than `n` usable endpoints (at least 1).
    pub fn with_min_healthy(mut self, n: usize) -> Self {
        self.min_healthy = n.max(1);
        self
    }
}

impl std::fmt::Debug for ZoneAwareLoadBalance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneAwareLoadBalance")
            .field("inner", &self.inner.name())
            .field("min_healthy", &self.min_healthy)
            .finish()
    }
}

impl LoadBalance for ZoneAwareLoadBalance {
    fn name(&self) -> &str {
        &self.name
    }

    fn routes_by_xid(&self) -> bool {
        self.inner.routes_by_xid()
    }

    fn reads_group_in_flight(&self) -> bool {
        self.inner.reads_group_in_flight()
    }

    fn reads_in_flight(&self) -> bool {
        self.inner.reads_in_flight()
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        let endpoints: Arc<[Endpoint]> = Arc::from(endpoints);
        let (mut zones, place) = group(&endpoints, |_| None);
        for g in &mut zones {
            g.picker = Some(self.inner.build(&g.endpoints));
        }
        Arc::new(ZonePicker {
            global: self.inner.build(&endpoints),
            zones: zones.into_boxed_slice(),
            place: place.into_boxed_slice(),
            endpoints,
            min_healthy: self.min_healthy,
        })
    }

    /// Rebuilds only what the change touches: the global picker and the pickers of
    /// the zones an endpoint joined or left go to the inner algorithm's own
    /// [`LoadBalance::rebuild`] (with the picker it built for them last); a zone whose
    /// members are the same keeps its picker.
    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        let Some(previous) = change
            .previous()
            .picker()
            .as_any()
            .and_then(|p| p.downcast_ref::<ZonePicker>())
            .filter(|p| p.place.len() == change.previous().len())
        else {
            return self.build(change.endpoints());
        };
        let endpoints = change.endpoints().clone();
        let global_previous = Snapshot::unindexed(
            change.previous().endpoints().clone(),
            previous.global.clone(),
        );
        let global = self.inner.rebuild(&change.wrapped(&global_previous));
        // Unchanged endpoints are placed by their previous zone, without comparing
        // names.
        let (mut zones, place) = group(&endpoints, |i| {
            let j = change.previous_index(i)?;
            let (g, _) = (*previous.place.get(j)?)?;
            Some(&*previous.zones[g as usize].name)
        });
        for g in &mut zones {
            let Some(old) = previous.zones.iter().find(|o| o.name == g.name) else {
                g.picker = Some(self.inner.build(&g.endpoints));
                continue;
            };
            // Per member: its position in the zone's previous members, if it was
            // there unchanged.
            let from: Vec<u32> = g
                .indices
                .iter()
                .map(|&i| {
                    change
                        .previous_index(i as usize)
                        .and_then(|j| previous.place[j])
                        .map_or(JOINED, |(_, pos)| pos)
                })
                .collect();
            let same = from.len() == old.indices.len()
                && from.iter().enumerate().all(|(k, &pos)| pos == k as u32);
            if same {
                g.picker = old.picker.clone();
                continue;
            }
            let joined: Vec<u32> = (0..from.len() as u32)
                .filter(|&k| from[k as usize] == JOINED)
                .collect();
            let mut stays = vec![false; old.indices.len()];
            for &pos in from.iter().filter(|&&pos| pos != JOINED) {
                stays[pos as usize] = true;
            }
            let left: Vec<u32> = (0..stays.len() as u32)
                .filter(|&pos| !stays[pos as usize])
                .collect();
            let old_snapshot = match &old.picker {
                Some(picker) => Snapshot::unindexed(old.endpoints.clone(), picker.clone()),
                None => Snapshot::unindexed(old.endpoints.clone(), Arc::new(EmptyPicker)),
            };
            let sub = MembershipChange::new(&g.endpoints, &old_snapshot, &from, &joined, &left);
            g.picker = Some(self.inner.rebuild(&sub));
        }
        Arc::new(ZonePicker {
            global,
            zones: zones.into_boxed_slice(),
            place: place.into_boxed_slice(),
            endpoints,
            min_healthy: self.min_healthy,
        })
    }
}

/// The zones of `endpoints` in order of first appearance, each with its members (in
/// list order), and each endpoint's (zone, position in it). `known(i)` may give
/// endpoint `i`'s zone name without reading the endpoint (a previous placement).
fn group<'p>(
    endpoints: &Arc<[Endpoint]>,
    known: impl Fn(usize) -> Option<&'p str>,
) -> (Vec<ZoneGroup>, Vec<Option<(u32, u32)>>) {
    let mut zones: Vec<ZoneGroup> = Vec::new();
    let mut members: Vec<Vec<Endpoint>> = Vec::new();
    let mut place: Vec<Option<(u32, u32)>> = vec![None; endpoints.len()];
    let mut last: Option<usize> = None;
    for (i, ep) in endpoints.iter().enumerate() {
        let Some(z) = known(i).or_else(|| ep.zone()) else {
            continue;
        };
        // Runs of one zone are common: try the last zone first.
        let g = match last.filter(|&g| &*zones[g].name == z) {
            Some(g) => g,
            None => match zones.iter().position(|g| &*g.name == z) {
                Some(g) => g,
                None => {
                    zones.push(ZoneGroup {
                        name: z.into(),
                        indices: Vec::new(),
                        endpoints: Arc::from(Vec::new()),
                        usable: 0,
                        picker: None,
                    });
                    members.push(Vec::new());
                    zones.len() - 1
                }
            },
        };
        last = Some(g);
        place[i] = Some((g as u32, zones[g].indices.len() as u32));
        zones[g].indices.push(i as u32);
        members[g].push(ep.clone());
        if ep.weight() > 0 {
            zones[g].usable += 1;
        }
    }
    for (g, list) in zones.iter_mut().zip(members) {
        g.endpoints = Arc::from(list);
    }
    (zones, place)
}

struct ZoneGroup {
    name: Box<str>,
    /// Members' indices in the whole list.
    indices: Vec<u32>,
    /// The members, as the zone's picker was built over them.
    endpoints: Arc<[Endpoint]>,
    usable: usize,
    picker: Option<Arc<dyn Picker>>,
}

struct ZonePicker {
    global: Arc<dyn Picker>,
    zones: Box<[ZoneGroup]>,
    place: Box<[Option<(u32, u32)>]>,
    endpoints: Arc<[Endpoint]>,
    min_healthy: usize,
}

impl ZonePicker {
    fn local(&self, g: usize, zone: &ZoneGroup, req: &PickRequest<'_>) -> Option<usize> {
        let picker = zone.picker.as_ref()?;
        let from_zone = |k: usize| zone.indices[k] as usize;
        match req.exclusions() {
            Exclusions::None => picker.pick(req).map(from_zone),
            Exclusions::Keys(keys) => {
                let excluded = zone
                    .indices
                    .iter()
                    .filter(|&&i| {
                        let ep = &self.endpoints[i as usize];
                        ep.weight() > 0 && keys.contains(ep.key())
                    })
                    .count();
                if zone.usable.saturating_sub(excluded) < self.min_healthy {
                    return None;
                }
                picker.pick(req).map(from_zone)
            }
            Exclusions::Indices(indices) => {
                if indices.len() > MAX_TRANSLATED {
                    return None;
                }
                let mut buf = [0usize; MAX_TRANSLATED];
                let mut len = 0;
                let mut excluded = 0;
                for &i in indices {
                    if let Some(Some((zg, pos))) = self.place.get(i)
                        && *zg as usize == g
                    {
                        buf[len] = *pos as usize;
                        len += 1;
                        if self.endpoints[i].weight() > 0 {
                            excluded += 1;
                        }
                    }
                }
                if zone.usable.saturating_sub(excluded) < self.min_healthy {
                    return None;
                }
                let local = req.excluding(&buf[..len]);
                picker.pick(&local).map(from_zone)
            }
        }
    }
}

impl Picker for ZonePicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        if let Some(z) = req.zone()
            && let Some(g) = self.zones.iter().position(|g| &*g.name == z)
        {
            let zone = &self.zones[g];
            if zone.usable >= self.min_healthy
                && let Some(i) = self.local(g, zone, req)
            {
                return Some(i);
            }
        }
        self.global.pick(req)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
