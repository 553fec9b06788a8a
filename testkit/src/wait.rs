//! Waiting in a test for state that has no event to wait on.

use std::time::Duration;

/// Polls `f` every 5 ms until it holds, up to `limit`: the time it took, or `None` when
/// it never held. For state read through a getter (a counter, an alive set); where an
/// event exists, a test waits for the event instead. The clock is tokio's, so on paused
/// time the wait advances it rather than hanging.
pub async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f().then(|| start.elapsed())
}

/// Sleeps for the milliseconds a test request asks in its `delay_ms` head entry (none,
/// or not a number: no sleep): how the rpc-client's test servers hold a call for as long
/// as the test wants it in flight.
pub async fn delay_as_asked(delay_ms: Option<&str>) {
    if let Some(ms) = delay_ms.and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}
