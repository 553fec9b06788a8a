//! Two halves of a large build on two threads.
//!
//! Building the consistent-hash ring of a 10 000-endpoint cluster writes and sorts 1.6
//! million points, about 10 ms of one core, while the membership change that asked for
//! it waits. Its passes split cleanly in two (two halves of the endpoints, then two
//! halves of the page groups), so on a machine with a second core each pass runs one
//! half on a scoped helper thread. A thread of our own, started per pass, rather than a
//! pool: large builds are rare (a full membership of thousands), the start costs tens
//! of microseconds against milliseconds of work, and nothing stays running between
//! builds. Small builds, and machines with one core, run both halves in turn here.
//!
//! A pool kept between builds (rayon, two threads of our own) was measured too: a
//! 10 000-endpoint ring build alone ran steadier in a loop, but a full apply, where
//! the build follows a few milliseconds of single-threaded work, took 10.5-11.1 ms
//! against 9.2-9.7 ms here: with a pool the calling thread sleeps and both halves wait
//! for woken threads, where here the caller runs one half itself.

use std::sync::{Mutex, OnceLock};

/// Whether the machine offers a second core to build on.
pub(crate) fn available() -> bool {
    static TWO: OnceLock<bool> = OnceLock::new();
    *TWO.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2))
}

/// Runs `a` here and `b` on a helper thread when `split`, else both here in turn; the
/// results in order. A helper that cannot be started leaves `b` to run here after
/// `a`; a panic in `b` is raised here.
pub(crate) fn join<A, B, RA, RB>(split: bool, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA,
    B: FnOnce() -> RB + Send,
    RB: Send,
{
    if !split {
        return (a(), b());
    }
    // `b` waits here until somebody takes it: the helper, or this thread when no helper
    // could be started (the spawn consumes its closure even when it fails).
    let task = Mutex::new(Some(b));
    let take = || task.lock().unwrap_or_else(|e| e.into_inner()).take();
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("meshline-build".into())
            .spawn_scoped(s, || take().map(|b| b()));
        let ra = a();
        let rb = match helper {
            Ok(h) => match h.join() {
                Ok(Some(rb)) => rb,
                Ok(None) => unreachable_task(),
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(e) => {
                tracing::debug!(error = %e, "no helper thread for the build; building in turn");
                match take() {
                    Some(b) => b(),
                    None => unreachable_task(),
                }
            }
        };
        (ra, rb)
    })
}

/// Only one of the helper and this thread takes the task, and the one that does runs
/// it: a started helper always finds it, a helper that never started never took it.
#[cold]
fn unreachable_task() -> ! {
    unreachable!("the second half of a build was taken by nobody")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_run_and_come_back_in_order() {
        for split in [false, true] {
            let here = std::thread::current().id();
            let (a, b) = join(
                split,
                || (1, std::thread::current().id()),
                || (2, std::thread::current().id()),
            );
            assert_eq!((a.0, b.0), (1, 2));
            assert_eq!(a.1, here);
            assert_eq!(b.1 != here, split, "split {split}");
        }
    }

    #[test]
    fn a_panic_in_the_helper_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| join(true, || 1, || -> i32 { panic!("half") }));
        let msg = caught.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"half"));
    }
}
