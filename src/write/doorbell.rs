//! The ring's doorbell: how the ring thread says it sleeps, and how
//! producers and waiters wake it only when it can act.
//!
//! Every wake-up here is one notification through the platform's
//! `Notifier`, sent only when the ring announced a sleep. A refused
//! notification is returned to [`Shared`](super::shared::Shared), which
//! poisons the log with it: the doorbell knows no poison.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use ringwal_platform::Notifier;

use crate::error::Lsn;

/// How the ring thread sleeps, so that producers wake it only when it can
/// act: what a staged record has to be for the wake-up to be worth a
/// context switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RingSleep {
    /// Running, or about to look for work: nobody needs to wake it.
    Awake = 0,
    /// Idle with nothing in flight: any staged record is work.
    ForRecords = 1,
    /// A partial write is in flight, so only a closed batch (or one large
    /// enough to go at once) is work; its completion wakes the ring for
    /// the rest.
    ForBatches = 2,
}

impl RingSleep {
    fn from_u8(v: u8) -> RingSleep {
        match v {
            0 => RingSleep::Awake,
            1 => RingSleep::ForRecords,
            2 => RingSleep::ForBatches,
            other => unreachable!("ring sleep state {other}"),
        }
    }
}

/// The ring's sleep state and the requests that wake it. Owned by
/// `Shared`; its fields are this file's.
pub(crate) struct Doorbell {
    notifier: Arc<Notifier>,
    /// How the ring thread sleeps ([`RingSleep`] as a `u8`).
    ring_sleep: AtomicU8,
    /// Set by the ring when the batch it would take next still has a
    /// claim being filled; the filler that settles a buffer clears it and
    /// wakes the ring ([`settled`](Self::settled)).
    fills_awaited: AtomicBool,
    /// The highest LSN a waiter wants durable in written mode: the ring
    /// syncs up to it.
    sync_wanted: AtomicU64,
}

impl Doorbell {
    pub fn new(notifier: Arc<Notifier>) -> Doorbell {
        Doorbell {
            notifier,
            ring_sleep: AtomicU8::new(RingSleep::Awake as u8),
            fills_awaited: AtomicBool::new(false),
            sync_wanted: AtomicU64::new(0),
        }
    }

    /// The notifier the ring's queue waits on.
    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.notifier
    }

    /// Announce how the ring thread is about to sleep (or that it is
    /// awake). Only the ring thread calls this with a sleeping state.
    pub fn announce(&self, how: RingSleep) {
        self.ring_sleep.store(how as u8, Ordering::SeqCst);
    }

    /// How the ring sleeps now. Cost: one atomic load.
    pub fn sleep(&self) -> RingSleep {
        RingSleep::from_u8(self.ring_sleep.load(Ordering::SeqCst))
    }

    /// Mark the ring awake and, if it slept, send the one wake-up.
    pub fn wake(&self) -> io::Result<()> {
        if self
            .ring_sleep
            .swap(RingSleep::Awake as u8, Ordering::SeqCst)
            != RingSleep::Awake as u8
        {
            return self.notifier.notify();
        }
        Ok(())
    }

    /// Wake the ring whether or not it announced a sleep: it may be
    /// waiting on a timer or a completion with a decision to revisit (a
    /// sync request, the close). Cost: one syscall.
    pub fn alert(&self) -> io::Result<()> {
        self.announce(RingSleep::Awake);
        self.notifier.notify()
    }

    /// A record was staged: wake the ring if it sleeps waiting for one,
    /// or for a batch it may take now and `takeable` says there is one.
    /// A ring with a partial write in flight cannot take another partial
    /// batch; waking it for each record only to sleep again cost the
    /// io_uring backend one context switch per record. Cost: an atomic
    /// load, plus one syscall when the ring is woken.
    pub fn staged(&self, takeable: bool) -> io::Result<()> {
        match self.sleep() {
            RingSleep::Awake => Ok(()),
            RingSleep::ForRecords => self.wake(),
            RingSleep::ForBatches if takeable => self.wake(),
            RingSleep::ForBatches => Ok(()),
        }
    }

    /// A claim was filled, settling its buffer when `last`: wake the ring
    /// if it waits for that. Cost: an atomic load, plus a swap and one
    /// syscall when the ring waits.
    pub fn settled(&self, last: bool) -> io::Result<()> {
        if last
            && self.fills_awaited.load(Ordering::SeqCst)
            && self.fills_awaited.swap(false, Ordering::SeqCst)
        {
            return self.wake();
        }
        Ok(())
    }

    /// The ring, about to sleep, waits for a fill: the filler that
    /// settles the buffer wakes it. Sequentially consistent, as the
    /// filler's release is (a Dekker pair).
    pub fn await_fills(&self) {
        self.fills_awaited.store(true, Ordering::SeqCst);
    }

    /// Ask for a sync up to `lsn`: whether that is a new request (the
    /// ring must be alerted). Cost: one atomic update.
    pub fn want_sync(&self, lsn: Lsn) -> bool {
        self.sync_wanted.fetch_max(lsn, Ordering::AcqRel) < lsn
    }

    /// The highest LSN a sync was asked for.
    pub fn sync_wanted(&self) -> Lsn {
        self.sync_wanted.load(Ordering::Acquire)
    }
}
