//! The two write lanes of a connection, both bounded in bytes.
//!
//! - The **request lane** carries our requests and one-way sends. Room is a byte budget
//!   held in a [`Semaphore`] (one permit per byte, fair, FIFO): a caller waits for room
//!   ([`Lanes::reserve`]) or asks without waiting ([`Lanes::try_reserve`]). Permits are
//!   given back when the writer has written the frame, so the budget covers queued
//!   bytes *and* the batch being written.
//! - The **response lane** carries answers to the peer's requests and PONGs. It is
//!   filled by the reader and by handler tasks, which must never wait on the writer
//!   (that is how two peers pushing at each other deadlock), so a push never waits: it
//!   either fits the budget or fails, and the caller closes the connection with the
//!   reason.
//!
//! The writer takes responses first: they unblock the peer, and they are what the
//! response budget measures.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore, TryAcquireError, oneshot};

use crate::codec::Frame;
use crate::transport::CloseReason;

/// What the writer reports back to a caller. `Ok(Some)` is a response, `Ok(None)` a
/// completed one-way write, `Err` means handed to a write and then the connection
/// failed. A dropped sender means the request was never handed to a write.
pub(crate) type Outcome = Result<Option<Frame>, CloseReason>;

/// Who waits for a queued frame.
pub(crate) enum Reply {
    /// A request: its sender moves to the pending table when written.
    Response(oneshot::Sender<Outcome>),
    /// A one-way send: told when its bytes were handed to the socket.
    Written(oneshot::Sender<Outcome>),
}

/// A request or one-way send waiting in the request lane.
pub(crate) struct Queued {
    pub frame: Frame,
    pub reply: Reply,
    /// Encoded length.
    pub len: usize,
    /// Budget permits it holds (its length, capped at the whole budget).
    pub charge: u32,
}

#[derive(Default)]
pub(crate) struct LaneState {
    pub responses: VecDeque<(Frame, usize)>,
    pub response_bytes: usize,
    pub requests: VecDeque<Queued>,
    pub closed: bool,
}

/// Why a response could not be queued.
pub(crate) enum PushError {
    /// The connection is closed.
    Closed,
    /// The response lane would exceed its budget.
    OverBudget { queued: usize, budget: usize },
}

/// Why a request could not get room.
pub(crate) enum ReserveError {
    /// The connection is closed.
    Closed,
    /// No room right now (only from `try_reserve`).
    Full,
}

pub(crate) struct Lanes {
    state: Mutex<LaneState>,
    /// Wakes the writer; `notify_one` keeps a permit, so a push between the writer's
    /// check and its wait is never lost.
    pub wake: Notify,
    budget: Semaphore,
    request_budget: u32,
    response_budget: usize,
}

impl Lanes {
    pub fn new(request_budget: usize, response_budget: usize) -> Self {
        let request_budget = request_budget.clamp(1, u32::MAX as usize) as u32;
        Lanes {
            state: Mutex::new(LaneState::default()),
            wake: Notify::new(),
            budget: Semaphore::new(request_budget as usize),
            request_budget,
            response_budget: response_budget.max(1),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn charge_for(&self, len: usize) -> u32 {
        len.min(self.request_budget as usize) as u32
    }

    /// Waits for room for `len` bytes. Cancel-safe: dropping the future takes nothing.
    pub async fn reserve(&self, len: usize) -> Result<u32, ReserveError> {
        let charge = self.charge_for(len);
        match self.budget.acquire_many(charge).await {
            Ok(p) => {
                p.forget();
                Ok(charge)
            }
            Err(_) => Err(ReserveError::Closed),
        }
    }

    /// Takes room for `len` bytes if there is some now.
    pub fn try_reserve(&self, len: usize) -> Result<u32, ReserveError> {
        let charge = self.charge_for(len);
        match self.budget.try_acquire_many(charge) {
            Ok(p) => {
                p.forget();
                Ok(charge)
            }
            Err(TryAcquireError::NoPermits) => Err(ReserveError::Full),
            Err(TryAcquireError::Closed) => Err(ReserveError::Closed),
        }
    }

    /// Gives back room (after a write, or for a request that was dropped unsent).
    pub fn release(&self, charge: usize) {
        if charge > 0 {
            self.budget.add_permits(charge);
        }
    }

    /// Bytes of request budget in use (queued or being written).
    pub fn request_bytes_in_use(&self) -> usize {
        self.request_budget as usize - self.budget.available_permits()
    }

    /// Queues a request that holds `q.charge` permits. On a closed connection the request
    /// is handed back (its permits are moot: the budget is closed).
    pub fn push_request(&self, q: Queued) -> Result<(), Queued> {
        {
            let mut st = self.lock();
            if st.closed {
                return Err(q);
            }
            st.requests.push_back(q);
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Queues a response or PONG without waiting. One frame larger than the whole budget
    /// is accepted when the lane is empty (it is within the frame limit).
    pub fn push_response(&self, frame: Frame, len: usize) -> Result<(), PushError> {
        {
            let mut st = self.lock();
            if st.closed {
                return Err(PushError::Closed);
            }
            if st.response_bytes > 0 && st.response_bytes + len > self.response_budget {
                return Err(PushError::OverBudget {
                    queued: st.response_bytes,
                    budget: self.response_budget,
                });
            }
            st.response_bytes += len;
            st.responses.push_back((frame, len));
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Marks the lanes closed: waiting callers wake with `Closed`, pushes fail, and the
    /// queued requests are returned (dropping them tells their callers "not written").
    pub fn close(&self) -> VecDeque<Queued> {
        self.budget.close();
        let mut st = self.lock();
        st.closed = true;
        st.responses.clear();
        st.response_bytes = 0;
        std::mem::take(&mut st.requests)
    }

    /// Requests queued and not yet taken by the writer.
    pub fn queued_requests(&self) -> usize {
        self.lock().requests.len()
    }
}
