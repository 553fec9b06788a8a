//! The fault behaviours every backend must show: an unreachable server is an error
//! that names it and the cause; a removal the registry refuses is retried until it
//! goes through, and `close` removes what is still pending; a secret (password, token)
//! never shows in a log line at `trace`, an error, a stale reason or a `Debug`.
//!
//! Each backend says how its registry refuses a removal or asks for a secret through
//! [`Unreachable`], [`RefuseRemoval`] and [`Secrets`]; the steps and the bounds are
//! written once here.

use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Instance, RegistryService};

use super::{DELIVERY, Harness};
use crate::watch::{LogBuf, addrs, eventually, inst, wait_for, wait_health};

/// A backend whose server address a behaviour can replace with a closed port.
pub trait Unreachable: Harness {
    /// The key naming the server (`registry.<type>.serverAddr`, Eureka's `serviceUrl`).
    fn address_key(&self) -> &'static str;

    /// The value for that key pointing at `port` on the loopback: the address the
    /// error must name.
    fn address_of(&self, port: u16) -> String {
        format!("127.0.0.1:{port}")
    }

    /// How long a refused connection may take to become an error (the backend's
    /// connect and operation timeouts at the harness's settings, with margin).
    fn refused_within(&self) -> Duration;
}

/// Nothing listens: connecting (or, for a backend that connects lazily, each of the
/// first lookup, watch and register) fails within the backend's bound, with an error
/// whose Display names the address as configured and the OS's "Connection refused".
pub async fn unreachable_is_named<H: Unreachable>(h: &mut H) {
    let port = crate::closed_port().expect("a closed port");
    let addr = h.address_of(port);
    let cfg = h.config(&[(h.address_key(), &addr)]);
    let t = Instant::now();
    let errors = match h.connect_config(&cfg).await {
        Err(e) => vec![e],
        // A lazy connect (etcd): the first operations fail instead.
        Ok(reg) => {
            let errors = vec![
                reg.lookup("default").await.unwrap_err(),
                reg.watch("default").await.unwrap_err(),
                reg.register("default", &inst("10.0.0.1:1"))
                    .await
                    .unwrap_err(),
            ];
            let _ = reg.close().await;
            errors
        }
    };
    let took = t.elapsed();
    for e in &errors {
        let text = e.to_string();
        tracing::info!(?took, "{text}");
        assert!(text.contains(&addr), "no address {addr} in: {text}");
        assert!(text.contains("Connection refused"), "no cause in: {text}");
    }
    assert!(
        took < h.refused_within(),
        "{} error(s) took {took:?}, more than {:?}",
        errors.len(),
        h.refused_within()
    );
}

/// A backend whose registry can be made to refuse our removals while it keeps the
/// entry, and take them again at once: a permission taken away (etcd's auth, a
/// ZooKeeper ACL, a Redis ACL) or an error status (the Consul and Eureka doubles).
/// Not a stopped server: while it restarts, the background retry may remove the entry
/// before `close` is called, and `close`'s own removal would go untested.
#[allow(async_fn_in_trait)]
pub trait RefuseRemoval: Harness {
    /// A client whose registrations outlive the behaviour by far unless removed (a
    /// long TTL, lease or session), with the renewal period `not_renewed` checks.
    async fn removal_client(&self) -> Self::Registry;

    /// From now on the registry refuses our removals.
    async fn refuse_removals(&mut self);

    /// From now on the registry takes removals again (a stopped server is back).
    async fn allow_removals(&mut self);

    /// Whether the registry holds `member` in `cluster`, read past our client.
    async fn holds(&self, cluster: &str, member: &Instance) -> bool;

    /// The backend's bound on one removal attempt (its request timeout).
    fn attempt_timeout(&self) -> Duration;

    /// What the refused unregister's error must say: the operation and the
    /// registry's refusal.
    fn refusal(&self) -> &'static str;

    /// What `close`'s error must say when it meets the refusal: the operation close
    /// removes with (the same delete, or another one, such as etcd's lease revoke) and
    /// the registry's refusal.
    fn close_refusal(&self) -> &'static str {
        self.refusal()
    }

    /// While removals are refused: the registry still holds `member`, and our client
    /// no longer renews it (its TTL runs down, its check turns critical, its lease is
    /// not renewed). A backend whose renewal is not per entry (one lease or session
    /// for every registration) or whose server is down has nothing to check.
    async fn not_renewed(&self, cluster: &str, member: &Instance) {
        let _ = (cluster, member);
    }
}

/// How long after a removal first failed the background retry is sure to have tried
/// again, once the registry takes removals again `failed_for` after the failure.
///
/// `Lifecycle::retry_removal` waits 200 ms, doubling up to 30 s, each delay jittered
/// into its upper half: every delay is at most 200 ms plus twice the time already
/// spent, so the first attempt after `failed_for` starts by `3 * failed_for + 200 ms`.
/// Add the attempt itself (`attempt`, the backend's request timeout) and 1 s of
/// scheduling slack on a loaded 2-core machine.
pub fn retry_bound(failed_for: Duration, attempt: Duration) -> Duration {
    (failed_for * 3 + Duration::from_millis(200)).min(Duration::from_secs(30))
        + attempt
        + Duration::from_secs(1)
}

/// The cluster the removal behaviours ([`RefuseRemoval`]) register in: a harness whose
/// refusal is set on the cluster (a ZooKeeper ACL on its node) sets it there.
pub const REMOVAL_CLUSTER: &str = "conformance-zombie";
const ZOMBIE: &str = REMOVAL_CLUSTER;

/// A removal client that has registered `addr` in the removal cluster, and the
/// registered instance.
async fn removal_client_holding<H: RefuseRemoval>(h: &H, addr: &str) -> (H::Registry, Instance) {
    let reg = h.removal_client().await;
    let me = inst(addr);
    reg.register(ZOMBIE, &me).await.unwrap();
    (reg, me)
}

/// With removals refused from now on, `reg` unregisters `me` from the removal
/// cluster: the call fails with the registry's refusal. Returns when the unregister
/// was sent.
async fn unregister_refused<H: RefuseRemoval>(
    h: &mut H,
    reg: &H::Registry,
    me: &Instance,
) -> Instant {
    h.refuse_removals().await;
    let sent = Instant::now();
    let err = reg.unregister(ZOMBIE, me).await.unwrap_err().to_string();
    assert!(
        err.contains(h.refusal()),
        "not the registry's refusal ({}): {err}",
        h.refusal()
    );
    sent
}

/// An unregister the registry refuses returns the refusal; the entry is no longer
/// renewed; once the registry takes removals again the entry is gone within the retry
/// bound (long before it could expire) and stays gone; the client still works.
pub async fn refused_removal_retried<H: RefuseRemoval>(h: &mut H) {
    let (reg, me) = removal_client_holding(h, "10.7.7.1:8091").await;
    assert!(h.holds(ZOMBIE, &me).await, "registered, but not held");

    let failed_at = unregister_refused(h, &reg, &me).await;
    h.not_renewed(ZOMBIE, &me).await;

    h.allow_removals().await;
    let within = retry_bound(failed_at.elapsed(), h.attempt_timeout());
    let t = Instant::now();
    eventually(within, "the retried removal", || async {
        !h.holds(ZOMBIE, &me).await
    })
    .await;
    tracing::info!(after = ?t.elapsed(), "removal retried once the registry took it");
    // It stays gone: nothing renews or writes it again (over several renewal periods
    // of every backend's removal client).
    let quiet = Instant::now() + Duration::from_secs(2);
    while Instant::now() < quiet {
        assert!(
            !h.holds(ZOMBIE, &me).await,
            "written again after its removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still a working client.
    let next = inst("10.7.7.2:8091");
    reg.register(ZOMBIE, &next).await.unwrap();
    assert!(h.holds(ZOMBIE, &next).await);
    reg.close().await.unwrap();
    assert!(!h.holds(ZOMBIE, &next).await, "close left a member");
}

/// An entry whose removal was refused is still ours, and `close` removes it: the
/// refusal holds until `close` is about to be called (the entry is still there then:
/// the background retry could not take it), is lifted at once (a permission given
/// back, not a server restarting while the retry runs), and `close` leaves nothing
/// behind.
pub async fn close_removes_a_refused_removal<H: RefuseRemoval>(h: &mut H) {
    let (reg, me) = removal_client_holding(h, "10.7.7.3:8091").await;
    unregister_refused(h, &reg, &me).await;
    assert!(h.holds(ZOMBIE, &me).await, "refused, yet gone before close");
    h.allow_removals().await;
    reg.close().await.unwrap();
    assert!(!h.holds(ZOMBIE, &me).await, "close left the refused member");
}

/// `close` meets the refusal itself: with removals still refused when it is called,
/// `close` tries the pending removal and returns the registry's refusal (naming its
/// operation) instead of a clean close, and the entry is still there. What the
/// registry refused is never reported as done.
pub async fn close_meets_a_held_refusal<H: RefuseRemoval>(h: &mut H) {
    let (reg, me) = removal_client_holding(h, "10.7.7.4:8091").await;
    unregister_refused(h, &reg, &me).await;
    let err = reg.close().await.unwrap_err().to_string();
    assert!(
        err.contains(h.close_refusal()),
        "close's error is not the registry's refusal ({}): {err}",
        h.close_refusal()
    );
    assert!(
        h.holds(ZOMBIE, &me).await,
        "close reported the refusal, yet the member is gone"
    );
    // Closed: the registry expires it with its lease, session or check.
}

/// A backend that logs in with a secret (password, ACL token), on a server that
/// requires it.
pub trait Secrets: Harness {
    /// The secret the server accepts, and a wrong one; neither may ever show.
    fn secrets(&self) -> [&'static str; 2];

    /// The keys that give a client `secret` (and whatever else the login needs).
    fn with_secret(&self, secret: &str) -> Config;

    /// What the wrong secret's error must say (the server's refusal).
    fn refusal(&self) -> &'static str;

    /// What a lookup's error must say while the server is down (the cause as the
    /// backend reports it).
    fn down(&self) -> &'static str {
        "Connection refused"
    }

    /// Lines the trace-level log must hold, proving the capture saw the backend's and
    /// its client library's own logging (the login, the reconnect). At least one: a
    /// capture that saw nothing would make "no secret in the log" prove nothing.
    fn logged(&self) -> &'static [&'static str];
}

/// At `trace`, dependencies included, a run that logs in, is refused with a wrong
/// secret, loses the server (the watch goes stale, a lookup fails with the backend's
/// [`down`](Secrets::down) error) and gets it back (connected again, our member
/// registered again, new registrations accepted) shows neither secret: not in the
/// log, not in an error's Display, not in a stale reason, not in a `Debug`. The log
/// must hold the harness's [`logged`](Secrets::logged) lines: a capture that saw
/// nothing proves nothing.
///
/// It needs a current-thread runtime (every task logs into the capture, which is the
/// test thread's default subscriber); [`conformance_tests!`](crate::conformance_tests)
/// makes it one. The server is restarted on that thread.
pub async fn secrets_never_shown<H>(h: &mut H)
where
    H: Secrets,
    H::Registry: std::fmt::Debug,
{
    let [secret, wrong] = h.secrets();
    let buf = LogBuf::default();
    let guard = buf.capture_at(tracing::Level::TRACE);
    let good_cfg = h.with_secret(secret);
    let wrong_cfg = h.with_secret(wrong);
    let mut shown = vec![format!("{good_cfg:?}"), format!("{wrong_cfg:?}")];
    let reg = h.connect_config(&good_cfg).await.unwrap();
    shown.push(format!("{reg:?}"));
    reg.register("secret", &inst("10.9.9.1:8091"))
        .await
        .unwrap();
    let mut w = reg.watch("secret").await.unwrap();
    wait_for(&mut w, DELIVERY, "registered", |s| addrs(s).len() == 1).await;

    // The wrong secret: refused at connect, or at the first write.
    let refused = match h.connect_config(&wrong_cfg).await {
        Err(e) => e.to_string(),
        Ok(bad) => {
            shown.push(format!("{bad:?}"));
            let e = bad
                .register("secret", &inst("10.9.9.3:8091"))
                .await
                .unwrap_err();
            let _ = bad.close().await;
            e.to_string()
        }
    };
    assert!(
        refused.contains(h.refusal()),
        "not the server's refusal ({}): {refused}",
        h.refusal()
    );
    shown.push(refused);

    // The server goes away: the watch goes stale, calls fail.
    h.server().go_down();
    shown.push(format!(
        "{:?}",
        wait_health(&mut w, Duration::from_secs(20), false).await
    ));
    let down = reg
        .lookup("secret")
        .await
        .expect_err("a lookup while the server is down")
        .to_string();
    assert!(
        down.contains(h.down()),
        "not the server being down ({}): {down}",
        h.down()
    );
    shown.push(down);
    // It comes back: connected again, logged in again, our member there (asked of the
    // server: the watch may still show the snapshot from before), new writes taken.
    h.server().come_back().expect("restart the server");
    wait_health(&mut w, Duration::from_secs(30), true).await;
    eventually(
        Duration::from_secs(30),
        "registered after the restart",
        || async {
            reg.lookup("secret")
                .await
                .is_ok_and(|l| l.iter().any(|i| i.to_string() == "10.9.9.1:8091"))
        },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(e) = reg.register("secret", &inst("10.9.9.2:8091")).await {
        shown.push(e.to_string());
        assert!(Instant::now() < deadline, "no reconnect: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shown.push(format!("{reg:?}"));
    reg.close().await.unwrap();
    assert!(
        tracing::enabled!(tracing::Level::TRACE),
        "the capture runs at trace"
    );
    drop(guard);
    let text = buf.text();
    assert!(
        !h.logged().is_empty(),
        "the harness names no line the capture must hold: it could be empty"
    );
    for line in h.logged() {
        assert!(text.contains(line), "`{line}` was not captured");
    }
    for s in [secret, wrong] {
        assert!(!text.contains(s), "a secret is in the log");
        for m in &shown {
            assert!(!m.contains(s), "a secret is in `{m}`");
        }
    }
}
