//! `xid:<name>`: Seata's XID routing first, another algorithm for everything else.
//!
//! A request whose XID names an endpoint of the list goes there, as with
//! [`crate::XidLoadBalance`], whatever that endpoint's load or latency (the TC that began
//! a transaction must finish it when TCs do not share their sessions). Every other
//! request (no XID, a malformed one, one naming no endpoint or an excluded one) is
//! picked by the inner algorithm instead of at random: `xid:P2C` keeps transactions
//! on their TC and moves the rest away from a slow one.

use std::sync::Arc;

use crate::algorithms::xid::{xid_fallback, xid_picker, xid_repicker};
use crate::{Endpoint, LoadBalance, MembershipChange, Picker, Snapshot};

/// XID routing, falling back to `inner` (names `xid:<inner>`).
pub struct XidFirstLoadBalance {
    inner: Arc<dyn LoadBalance>,
    name: String,
}

impl XidFirstLoadBalance {
    /// Routes by XID, and by `inner` when the XID does not decide.
    pub fn new(inner: Arc<dyn LoadBalance>) -> Self {
        let name = format!("xid:{}", inner.name());
        XidFirstLoadBalance { inner, name }
    }
}

impl std::fmt::Debug for XidFirstLoadBalance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XidFirstLoadBalance")
            .field("inner", &self.inner.name())
            .finish()
    }
}

impl LoadBalance for XidFirstLoadBalance {
    fn name(&self) -> &str {
        &self.name
    }

    fn routes_by_xid(&self) -> bool {
        true
    }

    fn reads_group_in_flight(&self) -> bool {
        self.inner.reads_group_in_flight()
    }

    fn reads_in_flight(&self) -> bool {
        self.inner.reads_in_flight()
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        xid_picker(endpoints, self.inner.build(endpoints))
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        // The inner algorithm updates the picker it built last (the fallback inside
        // the previous XID picker), as if it ran alone.
        let previous = change.previous();
        let inner_previous = xid_fallback(previous.picker().as_ref())
            .map(|fallback| Snapshot::unindexed(previous.endpoints().clone(), fallback.clone()));
        let fallback = match &inner_previous {
            Some(snapshot) => self.inner.rebuild(&change.wrapped(snapshot)),
            None => self.inner.rebuild(change),
        };
        xid_repicker(change, fallback)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Balancer, PickRequest, by_name};
    use meshline_instance::Instance;

    fn cluster() -> Vec<Instance> {
        (1..=3)
            .map(|i| Instance::new(&format!("10.0.0.{i}"), 8091).unwrap())
            .collect()
    }

    #[test]
    fn an_xid_goes_to_its_tc_and_the_rest_to_the_inner_algorithm() {
        let b = Balancer::new(by_name("xid:RoundRobinLoadBalance").unwrap());
        assert_eq!(b.load_balance().name(), "xid:RoundRobinLoadBalance");
        b.update(&cluster());
        for _ in 0..10 {
            let p = b.pick(&PickRequest::xid("10.0.0.2:8091:7")).unwrap();
            assert_eq!(p.endpoint().instance().host(), "10.0.0.2");
        }
        // Without an XID (or with one naming no endpoint): round robin, each in turn.
        let mut hosts: Vec<String> = (0..3)
            .map(|i| {
                let req = if i == 1 {
                    PickRequest::xid("10.9.9.9:8091:1")
                } else {
                    PickRequest::default()
                };
                b.pick(&req)
                    .unwrap()
                    .endpoint()
                    .instance()
                    .host()
                    .to_string()
            })
            .collect();
        hosts.sort();
        assert_eq!(hosts, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    }
}
