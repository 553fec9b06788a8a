//! Our one lease per client: granting it, putting our keys on it, re-granting and
//! re-putting when it is lost, the keep-alive loop, and revocation on close. Separate
//! from the registry itself because it is the self-healing half of registration and
//! runs as its own background task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::PutOptions;
use meshline_registry_core::{Backoff, RegistryError};

use crate::timed::timed;
use crate::{Inner, KIND};

#[derive(Default)]
pub(crate) struct LeaseState {
    /// The lease our keys are attached to, once granted.
    pub(crate) id: Option<i64>,
    /// Every key we registered, with its value.
    pub(crate) keys: BTreeMap<String, String>,
    /// Keys we unregistered whose delete has not succeeded yet: still on our lease,
    /// which the keeper keeps alive, so they are deleted again in the background
    /// ([`retry_delete`]) until etcd confirms. Never re-put.
    pub(crate) removing: BTreeSet<String>,
}

impl Inner {
    fn ttl_secs(&self) -> i64 {
        self.ttl.as_secs().max(1) as i64
    }

    pub(crate) async fn grant(&self) -> Result<i64, RegistryError> {
        let ttl = self.ttl_secs();
        let resp = timed(&self.servers, "lease grant", self.op_timeout, || {
            let mut lease = self.client.lease_client();
            async move { lease.grant(ttl, None).await }
        })
        .await?;
        tracing::info!(
            registry = KIND,
            lease = resp.id(),
            ttl = resp.ttl(),
            "lease granted"
        );
        Ok(resp.id())
    }

    pub(crate) async fn put(
        &self,
        key: &str,
        value: &str,
        lease: i64,
    ) -> Result<(), RegistryError> {
        timed(&self.servers, "put", self.op_timeout, || {
            let mut kv = self.client.kv_client();
            async move {
                kv.put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// Grants a new lease and puts every registered key on it. Caller holds the lock.
    pub(crate) async fn regrant_locked(&self, st: &mut LeaseState) -> Result<i64, RegistryError> {
        let id = self.grant().await?;
        st.id = Some(id);
        self.lease_granted.notify_one();
        self.reput_locked(st, id).await?;
        Ok(id)
    }

    async fn reput_locked(&self, st: &LeaseState, id: i64) -> Result<(), RegistryError> {
        for (k, v) in &st.keys {
            self.put(k, v, id).await?;
        }
        if !st.keys.is_empty() {
            tracing::info!(
                registry = KIND,
                lease = id,
                keys = st.keys.len(),
                "registrations written"
            );
        }
        Ok(())
    }

    /// Sleeps for the backoff delay; false when the client closed meanwhile.
    async fn pause(&self, backoff: &mut Backoff) -> bool {
        self.life.sleep(backoff.next_delay()).await
    }
}

/// Keeps our lease alive; re-grants it (and re-puts our keys) when it is lost.
///
/// A keep-alive goes out every TTL/3 or every heartbeat (half of `keepaliveTime`),
/// whichever is shorter: its answer is data from the server, which keeps etcd from
/// counting the HTTP/2 PINGs that find a silent member as abuse (see `lib.rs`). When
/// the member carrying the stream goes silent, the keep-alive closes its connection
/// within `keepaliveTime + keepaliveTimeout`, the stream fails, and the next one opens
/// on another member, long before the TTL runs out.
pub(crate) async fn keeper_loop(inner: Arc<Inner>) {
    let interval = (inner.ttl / 3)
        .min(inner.heartbeat)
        .max(Duration::from_millis(100));
    let mut backoff = Backoff::new(Duration::from_millis(100), interval);
    // After a broken stream, our keys are written again once the lease answers.
    let mut reput = false;
    loop {
        if inner.life.is_closed() {
            return;
        }
        let id = inner.lease.lock().await.id;
        let Some(id) = id else {
            tokio::select! {
                _ = inner.life.closed() => return,
                _ = inner.lease_granted.notified() => continue,
            }
        };
        // `None`: the lease is gone already (see `lease_gone`).
        let opened = timed(&inner.servers, "lease keep-alive", inner.op_timeout, || {
            let mut lease = inner.client.lease_client();
            async move {
                match lease.keep_alive(id).await {
                    Ok(pair) => Ok(Some(pair)),
                    Err(e) if lease_gone(&e) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
        let (mut keeper, mut stream) = match opened {
            Ok(Some(pair)) => pair,
            Ok(None) => {
                if !regrant(&inner, id, &mut reput, &mut backoff).await {
                    return;
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(registry = KIND, lease = id, error = %e, "cannot open the lease keep-alive stream; retrying");
                reput = true;
                if !inner.pause(&mut backoff).await {
                    return;
                }
                continue;
            }
        };
        loop {
            let answer = tokio::time::timeout(inner.op_timeout, async {
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    backoff.reset();
                    if reput {
                        let st = inner.lease.lock().await;
                        if st.id == Some(id) {
                            match inner.reput_locked(&st, id).await {
                                Ok(()) => reput = false,
                                Err(e) => {
                                    tracing::warn!(registry = KIND, error = %e, "re-putting our keys failed; will retry")
                                }
                            }
                        }
                    }
                }
                Ok(Ok(Some(_))) => {
                    if !regrant(&inner, id, &mut reput, &mut backoff).await {
                        return;
                    }
                    break;
                }
                other => {
                    let why = match other {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(None)) => "stream closed by the server".into(),
                        _ => format!("no answer within {:?}", inner.op_timeout),
                    };
                    tracing::warn!(registry = KIND, lease = id, reason = %why, "lease keep-alive broken; reconnecting");
                    reput = true;
                    if !inner.pause(&mut backoff).await {
                        return;
                    }
                    break;
                }
            }
            tokio::select! {
                _ = inner.life.closed() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}

/// Whether opening a keep-alive stream failed because the lease no longer exists.
///
/// etcd answers a keep-alive for an unknown lease with TTL 0. On an open stream the
/// keeper sees that answer; but when it is the stream's *first* answer (the lease was
/// revoked or expired while no stream was open, for example between the grant and the
/// keeper's first open), etcd-client 0.21 turns it into this error instead. Taken for a
/// stream that failed to open, it was retried for ever and our keys were never put
/// back (seen in a full test run: `a_revoked_lease_is_re_granted`, the revoke landing
/// as the keeper opened its stream).
fn lease_gone(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::LeaseKeepAliveError(m) if m == "lease not found")
}

/// Our lease `id` is gone (expired or revoked): grants a new one and puts our keys on
/// it, unless it was re-granted already. False when the client closed meanwhile.
async fn regrant(inner: &Inner, id: i64, reput: &mut bool, backoff: &mut Backoff) -> bool {
    tracing::warn!(
        registry = KIND,
        lease = id,
        "our lease expired or was revoked; granting a new one and re-registering"
    );
    let mut st = inner.lease.lock().await;
    if st.id == Some(id) {
        match inner.regrant_locked(&mut st).await {
            Ok(_) => *reput = false,
            Err(e) => {
                tracing::warn!(registry = KIND, error = %e, "re-granting the lease failed; retrying");
                *reput = true;
                drop(st);
                return inner.pause(backoff).await;
            }
        }
    }
    true
}

/// Revokes our lease, which deletes every key attached to it in one step.
pub(crate) async fn revoke_lease(inner: &Inner) -> Result<(), RegistryError> {
    let mut st = inner.lease.lock().await;
    st.keys.clear();
    // Keys still waiting for their delete are on this lease too.
    st.removing.clear();
    match st.id.take() {
        Some(id) => revoke(inner, id).await,
        None => Ok(()),
    }
}

async fn revoke(inner: &Inner, id: i64) -> Result<(), RegistryError> {
    timed(&inner.servers, "lease revoke", inner.op_timeout, || {
        let mut lease = inner.client.lease_client();
        async move { lease.revoke(id).await }
    })
    .await
    .map(|_| ())
}

/// Deletes `key`.
pub(crate) async fn delete(inner: &Inner, key: &str) -> Result<(), RegistryError> {
    timed(&inner.servers, "delete", inner.op_timeout, || {
        let mut kv = inner.client.kv_client();
        let key = key.to_string();
        async move { kv.delete(key, None).await }
    })
    .await
    .map(|_| ())
}

/// Deletes `key` in the background until etcd confirms, unless it was registered
/// again meanwhile or the client closed (close revokes the lease, which deletes it).
pub(crate) fn retry_delete(inner: &Arc<Inner>, key: String) {
    let weak = Arc::downgrade(inner);
    let k = key.clone();
    inner.life.retry_removal(key, move || {
        let (weak, key) = (weak.clone(), k.clone());
        async move {
            let Some(inner) = weak.upgrade() else {
                return Ok(true);
            };
            let mut st = inner.lease.lock().await;
            if !st.removing.contains(&key) {
                return Ok(true);
            }
            delete(&inner, &key).await?;
            st.removing.remove(&key);
            Ok(true)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::lease_gone;
    use std::time::Duration;

    use meshline_registry_core::RegistryService;

    /// The keeper starts on a lease that is already gone, so the first answer of the
    /// stream it opens is TTL 0 ("lease not found" from etcd-client), every time: it
    /// must grant a new lease and put our key on it. Before `lease_gone` it retried the
    /// open for ever and the key never came back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keeper_that_opens_on_a_gone_lease_grants_a_new_one() {
        let etcd = meshline_testkit::Etcd::start().expect("etcd");
        let cfg = meshline_testkit::config_of(
            &[
                ("registry.type", "etcd3"),
                ("registry.etcd3.serverAddr", &etcd.endpoint()),
                ("registry.etcd3.ttl", "2s"),
            ],
            &[],
        );
        let reg = crate::EtcdRegistry::connect(&cfg).await.expect("connect");
        let mut raw = etcd_client::Client::connect([etcd.endpoint()], None)
            .await
            .expect("raw client");
        let gone = raw.lease_grant(60, None).await.expect("grant").id();
        raw.lease_revoke(gone).await.expect("revoke");
        let key = "registry-seata-default-10.3.3.3:8091".to_string();
        {
            // Our state as if `gone` had been our lease when it was lost; the keeper,
            // waiting for a lease, is told there is one.
            let mut st = reg.inner.lease.lock().await;
            assert_eq!(st.id, None, "nothing registered yet");
            st.id = Some(gone);
            st.keys.insert(key.clone(), "10.3.3.3:8091".into());
            reg.inner.lease_granted.notify_one();
        }
        let kv = raw.kv_client();
        meshline_testkit::watch::eventually(
            Duration::from_secs(6),
            "a new lease with our key on it",
            || {
                let (inner, mut kv, key) = (reg.inner.clone(), kv.clone(), key.clone());
                async move {
                    let id = inner.lease.lock().await.id;
                    let put = kv.get(key, None).await.expect("get");
                    matches!((id, put.kvs().first()),
                        (Some(id), Some(kv)) if id != gone && kv.lease() == id)
                }
            },
        )
        .await;
        let new = reg.inner.lease.lock().await.id;
        assert_ne!(new, Some(gone));
        reg.close().await.expect("close");
    }

    /// etcd-client's error for a first keep-alive answer of TTL 0 is recognised, and
    /// nothing else is: other failures to open a stream are retried as before.
    #[test]
    fn an_unknown_lease_at_open_is_recognised_as_gone() {
        let gone = etcd_client::Error::LeaseKeepAliveError("lease not found".into());
        assert!(lease_gone(&gone));
        let broken = etcd_client::Error::LeaseKeepAliveError("channel closed".into());
        assert!(!lease_gone(&broken));
        let other = etcd_client::Error::WatchError("failed to create lease keeper".into());
        assert!(!lease_gone(&other));
    }
}
