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

use crate::request::Exclusions;
use crate::{Endpoint, LoadBalance, PickRequest, Picker};

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

    fn reads_group_in_flight(&self) -> bool {
        self.inner.reads_group_in_flight()
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        let mut zones: Vec<ZoneGroup> = Vec::new();
        // (zone group, position in it) of every endpoint.
        let mut place: Vec<Option<(u32, u32)>> = vec![None; endpoints.len()];
        for (i, ep) in endpoints.iter().enumerate() {
            let Some(z) = ep.zone() else { continue };
            let g = match zones.iter().position(|g| &*g.name == z) {
                Some(g) => g,
                None => {
                    zones.push(ZoneGroup {
                        name: z.into(),
                        indices: Vec::new(),
                        usable: 0,
                        picker: None,
                    });
                    zones.len() - 1
                }
            };
            place[i] = Some((g as u32, zones[g].indices.len() as u32));
            zones[g].indices.push(i as u32);
            if ep.weight() > 0 {
                zones[g].usable += 1;
            }
        }
        for g in &mut zones {
            let subset: Vec<Endpoint> = g
                .indices
                .iter()
                .map(|&i| endpoints[i as usize].clone())
                .collect();
            g.picker = Some(self.inner.build(&subset));
        }
        Arc::new(ZonePicker {
            global: self.inner.build(endpoints),
            zones: zones.into_boxed_slice(),
            place: place.into_boxed_slice(),
            endpoints: endpoints.to_vec().into_boxed_slice(),
            min_healthy: self.min_healthy,
        })
    }
}

struct ZoneGroup {
    name: Box<str>,
    indices: Vec<u32>,
    usable: usize,
    picker: Option<Arc<dyn Picker>>,
}

struct ZonePicker {
    global: Arc<dyn Picker>,
    zones: Box<[ZoneGroup]>,
    place: Box<[Option<(u32, u32)>]>,
    endpoints: Box<[Endpoint]>,
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
}
