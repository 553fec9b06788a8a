//! Fan-out groups: named sets of sessions (`room:<id>`, `*` for every session) a
//! backend's `bcast` reaches.

use std::sync::Arc;

use super::state::Session;
use super::table::Sessions;

impl Sessions {
    /// Adds session `id` to `group`.
    pub fn join(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id) {
            let added = s.m().groups.insert(group.to_string());
            self.groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(group.to_string())
                .or_default()
                .insert(id.to_string());
            if added {
                s.changed();
            }
        }
    }

    /// Removes session `id` from `group`.
    pub fn leave(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id)
            && s.m().groups.remove(group)
        {
            s.changed();
        }
        let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(members) = g.get_mut(group) {
            members.remove(id);
            if members.is_empty() {
                g.remove(group);
            }
        }
    }

    /// The members of `group` (`*`: every session).
    pub fn members(&self, group: &str) -> Vec<Arc<Session>> {
        if group == "*" {
            return self
                .by_id
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
        }
        let ids: Vec<String> = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        ids.iter().filter_map(|id| self.get(id)).collect()
    }
}
