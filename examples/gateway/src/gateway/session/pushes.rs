//! The per-session push buffer: reliable pushes are numbered and kept for a while, so a
//! client that resumes gets what it missed, once, in order.
//!
//! Every **reliable** push to a session (a backend's `send` or `bcast` with `rel=1`)
//! gets the next number of the session, 1, 2, 3, ..., in the frame's sequence field,
//! and is kept in the buffer whether the client is connected or not (a push written to
//! a socket that is dying is lost as surely as one sent while detached). The buffer
//! keeps at most `push-buffer-bytes` bytes of frames (wire size) and none older than
//! `push-buffer-age`; older ones fall out first. Unreliable pushes carry sequence 0:
//! not numbered, not kept, never replayed (a newer one supersedes them).
//!
//! On a resume the client says the last number it received; the gateway answers
//! `AUTH_OK`, then a `GAP first last` if some of the pushes after that number fell out
//! of the buffer, then the kept ones after it, with their numbers, then live traffic.
//! Frames share their payload (`Bytes`), so a broadcast kept by a thousand sessions
//! costs a thousand small entries, not a thousand copies of its body.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::gateway::protocol::ClientFrame;

/// The bounds of a session's push buffer (`push-buffer-bytes`, `push-buffer-age`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushLimits {
    /// Bytes of frames kept, at most (0 = keep nothing: every resume after a push
    /// reports a gap).
    pub bytes: usize,
    /// Frames older than this are dropped.
    pub age: Duration,
}

impl Default for PushLimits {
    fn default() -> Self {
        PushLimits {
            bytes: 32 * 1024,
            age: Duration::from_secs(60),
        }
    }
}

/// What a resume must send after `AUTH_OK`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Numbered pushes lost: `(first, last)`, `last` `None` when unknown.
    pub gap: Option<(u32, Option<u32>)>,
    /// The kept pushes after the client's last, in order.
    pub frames: Vec<ClientFrame>,
}

/// One session's numbered pushes.
#[derive(Debug)]
pub(super) struct PushBuffer {
    /// The number the next reliable push gets.
    next: u32,
    kept: VecDeque<(Instant, ClientFrame)>,
    bytes: usize,
    /// The buffer was not carried over (the session came from another gateway's
    /// store): what happened before `next` is unknown here.
    unknown_before: bool,
}

impl Default for PushBuffer {
    fn default() -> Self {
        PushBuffer {
            next: 1,
            kept: VecDeque::new(),
            bytes: 0,
            unknown_before: false,
        }
    }
}

impl PushBuffer {
    /// A buffer for a session restored from a shared store: its pushes on the gateway
    /// that held it are unknown here.
    pub(super) fn restored() -> PushBuffer {
        PushBuffer {
            unknown_before: true,
            ..PushBuffer::default()
        }
    }

    /// Numbers `frame` if it is reliable and keeps it; returns the frame to send.
    pub(super) fn number(&mut self, mut frame: ClientFrame, limits: PushLimits) -> ClientFrame {
        if !frame.is_reliable() {
            frame.seq = 0;
            return frame;
        }
        frame.seq = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        let now = Instant::now();
        self.bytes += frame.wire_len();
        self.kept.push_back((now, frame.clone()));
        self.prune(limits, now);
        frame
    }

    /// Drops frames past the limits.
    pub(super) fn prune(&mut self, limits: PushLimits, now: Instant) {
        while let Some((at, f)) = self.kept.front() {
            if self.bytes <= limits.bytes && now.duration_since(*at) <= limits.age {
                break;
            }
            self.bytes -= f.wire_len();
            self.kept.pop_front();
        }
        if self.kept.is_empty() && self.kept.capacity() > 0 {
            // An idle session holds no buffer memory.
            self.kept = VecDeque::new();
        }
    }

    /// What a client that last received push `last` missed. On a restored buffer, the
    /// numbering continues after `last` (the client has seen no number above it).
    pub(super) fn replay_after(&mut self, last: u32, limits: PushLimits) -> Replay {
        self.prune(limits, Instant::now());
        if self.unknown_before {
            self.unknown_before = false;
            self.next = self.next.max(last.wrapping_add(1).max(1));
            return Replay {
                gap: Some((last.wrapping_add(1).max(1), None)),
                frames: Vec::new(),
            };
        }
        let newest = self.next.wrapping_sub(1);
        if last >= newest {
            return Replay::default();
        }
        let first_kept = self.kept.front().map_or(self.next, |(_, f)| f.seq);
        let gap = (first_kept > last + 1).then(|| (last + 1, Some(first_kept - 1)));
        let frames = self
            .kept
            .iter()
            .filter(|(_, f)| f.seq > last)
            .map(|(_, f)| f.clone())
            .collect();
        Replay { gap, frames }
    }

    /// Frames kept now.
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::protocol::RELIABLE;

    fn push() -> ClientFrame {
        // 100 bytes on the wire.
        ClientFrame::new(2, 2, 0, vec![b'x'; 87]).with_flags(RELIABLE)
    }

    const LIMITS: PushLimits = PushLimits {
        bytes: 300,
        age: Duration::from_secs(60),
    };

    #[test]
    fn reliable_pushes_are_numbered_unreliable_ones_are_not_kept() {
        let mut b = PushBuffer::default();
        assert_eq!(b.number(push(), LIMITS).seq, 1);
        let u = b.number(ClientFrame::new(3, 9, 77, &b"snap"[..]), LIMITS);
        assert_eq!(u.seq, 0);
        assert_eq!(b.number(push(), LIMITS).seq, 2);
        assert_eq!(b.len(), 2);
        let r = b.replay_after(1, LIMITS);
        assert_eq!(r.gap, None);
        assert_eq!(r.frames.iter().map(|f| f.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(b.replay_after(2, LIMITS), Replay::default());
        assert_eq!(b.replay_after(9, LIMITS), Replay::default());
    }

    #[test]
    fn what_fell_out_is_reported_as_a_gap() {
        let mut b = PushBuffer::default();
        for _ in 0..5 {
            b.number(push(), LIMITS);
        }
        // 300 bytes keep three: 3, 4, 5.
        let r = b.replay_after(0, LIMITS);
        assert_eq!(r.gap, Some((1, Some(2))));
        assert_eq!(
            r.frames.iter().map(|f| f.seq).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        let r = b.replay_after(3, LIMITS);
        assert_eq!(r.gap, None);
        assert_eq!(r.frames.len(), 2);
        // Too old: all gone.
        let aged = PushLimits {
            bytes: 300,
            age: Duration::ZERO,
        };
        std::thread::sleep(Duration::from_millis(2));
        let r = b.replay_after(2, aged);
        assert_eq!(r.gap, Some((3, Some(5))));
        assert!(r.frames.is_empty());
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn a_restored_buffer_cannot_know_and_numbers_on_after_the_client() {
        let mut b = PushBuffer::restored();
        let r = b.replay_after(41, LIMITS);
        assert_eq!(r.gap, Some((42, None)));
        assert_eq!(b.number(push(), LIMITS).seq, 42);
        assert_eq!(b.replay_after(42, LIMITS), Replay::default());
    }
}
