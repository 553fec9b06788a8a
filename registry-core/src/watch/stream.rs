//! [`Watch`] as a `futures::Stream`: the snapshots [`Watch::next`] returns, as a stream
//! (the current one at once, then every change), ending when the registry is closed.
//!
//! Why: stream combinators (`select`, `map`, `take_until`) and adapters built on
//! streams (tower's `Discover` is any `TryStream` of changes) take a watch as it is,
//! without a task that forwards `next()` into a channel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use tokio_util::sync::ReusableBoxFuture;

use super::{Snapshot, Watch};

/// The pending wait for the next change of a polled [`Watch`]: a boxed future on a
/// clone of its receiver (a `tokio::sync::watch::Receiver` has no poll method of its
/// own), allocated once and reused for every later change.
#[derive(Default)]
pub(super) struct Changed {
    future: Option<ReusableBoxFuture<'static, bool>>,
    /// `future` is a wait not yet finished (else it is spent and must be set anew).
    pending: bool,
}

impl Stream for Watch {
    type Item = Snapshot;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Snapshot>> {
        let this = self.get_mut();
        if !this.delivered_first {
            this.delivered_first = true;
            return Poll::Ready(Some(this.snapshot.borrow_and_update().clone()));
        }
        loop {
            if !this.changed.pending {
                // The clone has seen what this watch has seen: it wakes on the next
                // change after the last snapshot delivered.
                let mut rx = this.snapshot.clone();
                let wait = async move { rx.changed().await.is_ok() };
                match &mut this.changed.future {
                    Some(f) => f.set(wait),
                    None => this.changed.future = Some(ReusableBoxFuture::new(wait)),
                }
                this.changed.pending = true;
            }
            let future = this
                .changed
                .future
                .as_mut()
                .expect("a pending wait has its future");
            let open = ready!(Pin::new(future).poll(cx));
            this.changed.pending = false;
            if !open {
                // The hub's sender is gone with nothing unseen: the registry closed.
                return Poll::Ready(None);
            }
            let latest = this.snapshot.borrow_and_update();
            // A change already taken by the inherent `next` (the two were mixed) is not
            // delivered twice: wait for the one after it.
            if latest.has_changed() {
                return Poll::Ready(Some(latest.clone()));
            }
        }
    }
}

impl Changed {
    /// Whether a wait is pending (for tests).
    #[cfg(test)]
    pub(super) fn is_pending(&self) -> bool {
        self.pending
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use crate::{EmptyProtection, Instance, WatchHub};

    fn inst(s: &str) -> Instance {
        Instance::parse(s).unwrap()
    }

    fn ports(s: &crate::Snapshot) -> Vec<u16> {
        s.instances().iter().map(Instance::port).collect()
    }

    /// The stream yields what `Watch::next` would: the current snapshot at once, then
    /// each change (identical publishes are not changes), then ends when the hub closes.
    #[tokio::test]
    async fn a_watch_is_a_stream_of_its_snapshots() {
        let hub = WatchHub::new("test", EmptyProtection::Apply);
        hub.publish("c", vec![inst("10.0.0.1:1")]);
        let mut w = hub.subscribe("c");
        let first = StreamExt::next(&mut w).await.unwrap();
        assert_eq!((first.revision(), ports(&first)), (1, vec![1]));

        // Nothing changed: the stream is pending, with its wait armed.
        assert!(futures_util::poll!(StreamExt::next(&mut w)).is_pending());
        assert!(w.changed.is_pending());

        hub.publish("c", vec![inst("10.0.0.1:1")]);
        hub.publish("c", vec![inst("10.0.0.1:1"), inst("10.0.0.2:2")]);
        let second = StreamExt::next(&mut w).await.unwrap();
        assert_eq!((second.revision(), ports(&second)), (2, vec![1, 2]));

        // Mixed with the inherent `next`: a change is delivered once.
        hub.publish("c", vec![inst("10.0.0.3:3")]);
        let third = w.next().await.unwrap();
        assert_eq!((third.revision(), ports(&third)), (3, vec![3]));
        hub.publish("c", vec![inst("10.0.0.4:4")]);
        let fourth = StreamExt::next(&mut w).await.unwrap();
        assert_eq!((fourth.revision(), ports(&fourth)), (4, vec![4]));

        // A clone starts where the original is.
        let mut clone = w.clone();
        hub.publish("c", vec![inst("10.0.0.5:5")]);
        let a = StreamExt::next(&mut clone).await.unwrap();
        let b = StreamExt::next(&mut w).await.unwrap();
        assert_eq!((a.revision(), b.revision()), (5, 5));

        hub.close();
        drop(hub);
        assert!(StreamExt::next(&mut w).await.is_none());
    }

    /// A stream combinator over a watch: the first snapshot with two members.
    #[tokio::test]
    async fn stream_combinators_take_a_watch() {
        let hub = WatchHub::new("test", EmptyProtection::Apply);
        hub.publish("c", vec![inst("10.0.0.1:1")]);
        let w = hub.subscribe("c");
        let waiter = tokio::spawn(async move {
            let mut two = Box::pin(w.filter(|s| std::future::ready(s.len() == 2)));
            two.next().await.map(|s| ports(&s))
        });
        hub.publish("c", vec![inst("10.0.0.1:1"), inst("10.0.0.9:9")]);
        assert_eq!(waiter.await.unwrap(), Some(vec![1, 9]));
    }
}
