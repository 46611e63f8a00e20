//! How one waiter is woken: a blocked thread through its own
//! [`WakeWord`], a task through its waker. The acknowledgement lists and
//! the waker sets keep these; both wake them with [`wake_all`].

use std::sync::Arc;
use std::task::Waker;

use ringwal_platform::WakeWord;

/// How to wake one waiter, as kept in the lists: a blocked thread's word
/// (see [`WakeWord`]), or a task's waker.
pub(crate) enum Wake {
    Thread(Arc<WakeWord>),
    Task(Waker),
}

impl Wake {
    pub fn wake(self) {
        match self {
            Wake::Thread(w) => w.wake(),
            Wake::Task(w) => w.wake(),
        }
    }

    /// Whether waking `self` wakes what `by` would: the same thread's word,
    /// or a waker that `Waker::will_wake` says is equivalent.
    pub fn will_wake(&self, by: &WakeBy<'_>) -> bool {
        match (self, by) {
            (Wake::Thread(w), WakeBy::Thread(u)) => Arc::ptr_eq(w, u),
            (Wake::Task(w), WakeBy::Task(v)) => w.will_wake(v),
            _ => false,
        }
    }
}

/// How to wake one waiter, as a poll offers it: borrowed, and cloned into
/// the lists only when the waiter's entry does not already wake the same.
pub(crate) enum WakeBy<'a> {
    Thread(&'a Arc<WakeWord>),
    Task(&'a Waker),
}

impl WakeBy<'_> {
    pub fn to_owned(&self) -> Wake {
        match self {
            WakeBy::Thread(w) => Wake::Thread(Arc::clone(w)),
            WakeBy::Task(w) => Wake::Task((*w).clone()),
        }
    }
}

/// Wake every one of `wakes`, even if a waker panics (a task polled
/// inline by a waker may panic on the ring thread): the others were
/// already taken off the lists and would never be woken again. Returns
/// the first panic, for the caller to resume once all are woken.
pub(crate) fn wake_all(
    wakes: impl IntoIterator<Item = Wake>,
) -> Result<(), crate::sync::wakers::WakePanic> {
    let mut first = None;
    for w in wakes {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake())) {
            first.get_or_insert(p);
        }
    }
    first.map_or(Ok(()), Err)
}
