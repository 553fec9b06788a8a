//! Our own instances, and which Nacos call registers them.
//!
//! A Nacos 2 connection keeps one registration per service (Java Nacos replaces it on
//! every register call; rnacos adds). One instance per service, the usual case (a
//! Seata TC registers itself once), goes with the single-instance call
//! (`InstanceRequest`), which every Nacos 2.x server has. Several instances of one
//! service from one client can only go together as one batch (`BatchInstanceRequest`),
//! which Nacos servers before 2.1.1 lack: that case needs Nacos 2.1.1 or later.
//!
//! - with one instance and no batch sent yet: register and deregister it with the
//!   single calls;
//! - when a second instance comes: deregister the first with the single call (the
//!   batch then holds it), then send both as a batch;
//! - from then on this client sends every change as the whole batch, also when one
//!   instance is left (the server has shown it takes batches); a removed instance is
//!   first deregistered explicitly, because rnacos adds a batch to what is there
//!   instead of replacing it.
//!
//! After a reconnect the client ([`crate::grpc::client`]) redoes what these calls
//! asked for: the single registration and the batch, each as last sent, without any
//! instance deregistered since.
//!
//! A deregistration that fails (the server is down or refuses) is not forgotten: the
//! instance is kept as *to remove*, and the registry retries its deregistration in the
//! background ([`Lifecycle::retry_removal`](meshline_registry_core::Lifecycle::retry_removal))
//! until the server takes it, it is registered again, or the client closes, whose
//! deregistration of everything includes it. (When the connection itself is gone,
//! Nacos dropped the instance with it, and the redo no longer holds it.)

use std::collections::BTreeMap;

use meshline_registry_core::{InstanceKey, RegistryError};

use crate::grpc::ServiceInstance;
use crate::naming::{Call, Naming};

use crate::timed;

/// Where our registrations go.
pub(crate) struct Target<'a> {
    pub(crate) naming: &'a Naming,
    /// The server address for errors.
    pub(crate) server: &'a str,
    pub(crate) service: &'a str,
    pub(crate) group: &'a str,
}

/// Our instances and whether a batch was sent.
#[derive(Default)]
struct Own {
    instances: BTreeMap<InstanceKey, ServiceInstance>,
    /// A batch was sent on this client (the server takes batches).
    batched: bool,
    /// Instances whose deregistration failed: still to be deregistered.
    removing: BTreeMap<InstanceKey, ServiceInstance>,
}

impl Own {
    /// Adds (or replaces) `key` and says which calls bring the server up to date.
    fn add(&mut self, key: InstanceKey, si: ServiceInstance) -> Vec<Call> {
        let before: Vec<ServiceInstance> = self
            .instances
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(_, v)| v.clone())
            .collect();
        // A registration again cancels a pending deregistration.
        self.removing.remove(&key);
        self.instances.insert(key, si.clone());
        if self.batched {
            return vec![Call::Batch(self.all())];
        }
        match before.as_slice() {
            [] => vec![Call::Register(si)],
            others => {
                self.batched = true;
                let mut calls: Vec<Call> = others.iter().cloned().map(Call::Deregister).collect();
                calls.push(Call::Batch(self.all()));
                calls
            }
        }
    }

    /// Removes `key` and says which calls bring the server up to date.
    fn remove(&mut self, key: &InstanceKey) -> Vec<Call> {
        let Some(removed) = self.instances.remove(key) else {
            return Vec::new();
        };
        let mut calls = vec![Call::Deregister(removed)];
        if self.batched && !self.instances.is_empty() {
            calls.push(Call::Batch(self.all()));
        }
        calls
    }

    fn all(&self) -> Vec<ServiceInstance> {
        self.instances.values().cloned().collect()
    }
}

/// Our instances of one service, changed one at a time.
#[derive(Default)]
pub(crate) struct Registrations {
    /// Held across the calls, so that concurrent changes reach the server in order.
    own: tokio::sync::Mutex<Own>,
}

impl Registrations {
    /// Registers `si` (or updates the instance with its `key`).
    pub(crate) async fn add(
        &self,
        to: &Target<'_>,
        key: InstanceKey,
        si: ServiceInstance,
    ) -> Result<(), RegistryError> {
        let mut own = self.own.lock().await;
        let calls = own.add(key, si);
        run(to, calls).await
    }

    /// Deregisters the instance with `key`, if it is ours.
    ///
    /// When the deregistration itself fails, the instance is kept as *to remove*
    /// ([`is_removing`](Self::is_removing)) for [`retry_removal`](Self::retry_removal)
    /// and [`remove_all`](Self::remove_all); the error is returned.
    pub(crate) async fn remove(
        &self,
        to: &Target<'_>,
        key: &InstanceKey,
    ) -> Result<(), RegistryError> {
        let mut own = self.own.lock().await;
        let mut calls = own.remove(key);
        if calls.is_empty() {
            return Ok(());
        }
        // The first call is the deregistration of `key`; the rest bring the batch
        // replay up to date.
        let dereg = calls.remove(0);
        if let Err(e) = run(to, vec![dereg.clone()]).await {
            if let Call::Deregister(si) = dereg {
                own.removing.insert(key.clone(), si);
            }
            return Err(e);
        }
        run(to, calls).await
    }

    /// True while the deregistration of `key` failed and was not done since.
    pub(crate) async fn is_removing(&self, key: &InstanceKey) -> bool {
        self.own.lock().await.removing.contains_key(key)
    }

    /// One more try at deregistering `key` after [`remove`](Self::remove) failed:
    /// `Ok(true)` when it is done, or no longer wanted (registered again, or removed
    /// by [`remove_all`](Self::remove_all)); an error to try again later. A client with
    /// a batch replay sends the remaining batch after it, so the replay no longer holds
    /// the instance.
    pub(crate) async fn retry_removal(
        &self,
        to: &Target<'_>,
        key: &InstanceKey,
    ) -> Result<bool, RegistryError> {
        let mut own = self.own.lock().await;
        let Some(si) = own.removing.get(key).cloned() else {
            return Ok(true);
        };
        run(to, vec![Call::Deregister(si)]).await?;
        own.removing.remove(key);
        if own.batched && !own.instances.is_empty() {
            let rest = own.all();
            if let Err(e) = run(to, vec![Call::Batch(rest)]).await {
                tracing::warn!(registry = "nacos", error = %e, "re-sending the batch after a retried deregistration failed");
            }
        }
        Ok(true)
    }

    /// Deregisters every instance we registered, and every one whose deregistration
    /// failed before; every one is tried, the first error is returned.
    ///
    /// Also returns what was deregistered, for the check after close
    /// ([`crate::after_close`]).
    pub(crate) async fn remove_all(
        &self,
        to: &Target<'_>,
    ) -> (Result<(), RegistryError>, Vec<ServiceInstance>) {
        let mut own = self.own.lock().await;
        let mut all = std::mem::take(&mut own.instances);
        all.extend(std::mem::take(&mut own.removing));
        let mut result = Ok(());
        let mut removed = Vec::with_capacity(all.len());
        for si in all.into_values() {
            match run(to, vec![Call::Deregister(si.clone())]).await {
                Ok(()) => removed.push(si),
                Err(e) => {
                    tracing::warn!(registry = "nacos", error = %e, "deregistering failed");
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        (result, removed)
    }
}

/// Makes `calls` in order, stopping at the first error.
async fn run(to: &Target<'_>, calls: Vec<Call>) -> Result<(), RegistryError> {
    for call in calls {
        let op = call.op();
        timed(to.server, op, to.naming.write(to.group, to.service, call)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::Instance;

    fn si(addr: &str) -> (InstanceKey, ServiceInstance) {
        let i = Instance::parse(addr).unwrap();
        let s = ServiceInstance {
            ip: i.java_host(),
            port: i32::from(i.port()),
            ..Default::default()
        };
        (i.key().clone(), s)
    }

    fn ips(calls: &[Call]) -> Vec<String> {
        calls
            .iter()
            .map(|c| match c {
                Call::Register(s) => format!("register {}", s.ip),
                Call::Deregister(s) => format!("deregister {}", s.ip),
                Call::Batch(all) => format!(
                    "batch {}",
                    all.iter()
                        .map(|s| s.ip.as_str())
                        .collect::<Vec<_>>()
                        .join("+")
                ),
            })
            .collect()
    }

    #[test]
    fn one_instance_uses_the_single_calls() {
        let mut own = Own::default();
        let (a, sa) = si("10.0.0.1:8091");
        assert_eq!(ips(&own.add(a.clone(), sa.clone())), ["register 10.0.0.1"]);
        // Re-registering the same instance (new weight, metadata) stays single.
        assert_eq!(ips(&own.add(a.clone(), sa)), ["register 10.0.0.1"]);
        assert_eq!(ips(&own.remove(&a)), ["deregister 10.0.0.1"]);
        assert!(own.remove(&a).is_empty(), "not ours any more: no call");
        assert!(!own.batched);
    }

    #[test]
    fn two_then_one_then_two_keeps_the_batch_replay_exact() {
        let mut own = Own::default();
        let (a, sa) = si("10.0.0.1:8091");
        let (b, sb) = si("10.0.0.2:8091");
        let (c, sc) = si("10.0.0.3:8091");
        assert_eq!(ips(&own.add(a.clone(), sa)), ["register 10.0.0.1"]);
        assert_eq!(
            ips(&own.add(b.clone(), sb)),
            ["deregister 10.0.0.1", "batch 10.0.0.1+10.0.0.2"]
        );
        assert_eq!(
            ips(&own.remove(&b)),
            ["deregister 10.0.0.2", "batch 10.0.0.1"]
        );
        assert_eq!(ips(&own.add(c.clone(), sc)), ["batch 10.0.0.1+10.0.0.3"]);
        assert_eq!(
            ips(&own.remove(&a)),
            ["deregister 10.0.0.1", "batch 10.0.0.3"]
        );
        assert_eq!(ips(&own.remove(&c)), ["deregister 10.0.0.3"]);
        // The next registration replaces the stale batch replay.
        let (d, sd) = si("10.0.0.4:8091");
        assert_eq!(ips(&own.add(d, sd)), ["batch 10.0.0.4"]);
    }
}
