//! The staging buffers and the reservation lock over them: where
//! producers place frames and the ring takes closed batches.
//!
//! The ring meets the producers here once per loop turn, in one
//! [`Staging::exchange`]: it gives back the buffers its completed writes
//! freed and takes every batch it has room for, under one take of the
//! lock the producers wait on (before, a lone record cost the ring five
//! or six takes of it; `Counters::ring_lock_takes` counts them).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ringwal_platform::AlignedBuf;

use crate::at_rest::crypt::Cipher;
use crate::at_rest::format;
use crate::at_rest::packing::Cursor;
use crate::error::Lsn;
use crate::segment::lifecycle::LARGE_WRITE_BYTES;
use crate::segment::set as segments;
use crate::sync::lock_order::{Rank, Ranked, RankedGuard};

const _: () = assert!(format::BLOCK == ringwal_platform::BLOCK);

/// A batch of frames bound for one write: whole blocks once closed. Its
/// first [`format::VOUCH_LEN`] bytes are kept for the vouch frame the ring
/// writes there when it submits the batch (the durable LSN and the
/// submission time are known only then). Batches go only into segments of
/// the current format version, whose vouch is that long.
pub(crate) struct Batch {
    pub buf: AlignedBuf,
    pub len: usize,
    /// Segment (by base LSN) and offset the batch is written to.
    pub seg_base: Lsn,
    /// Which segment of this log's life: bumped at every roll. The base
    /// alone cannot tell segments apart when an empty one is replaced.
    pub seg_id: u64,
    pub salt: u64,
    /// The key the segment's data payloads are sealed with (its header
    /// names it); `None` for plaintext.
    pub cipher: Option<Arc<Cipher>>,
    pub offset: u64,
    /// LSN of the last record in the batch (0: padding only).
    pub last_lsn: Lsn,
    /// The highest LSN this write completes: its last record that is not
    /// followed, in a later write, by more of its atomic batch (0: none).
    /// The ledger's watermarks advance to this, so they never stop inside
    /// a batch.
    pub ack_lsn: Lsn,
}

/// State guarded by the reservation lock.
pub(crate) struct Reservation {
    /// The segment new frames go to, its salt, and where its next batch starts.
    pub seg_base: Lsn,
    pub seg_id: u64,
    pub salt: u64,
    /// The key the current segment's data payloads are sealed with,
    /// chosen (from the key provider's current one) when it was started.
    pub cipher: Option<Arc<Cipher>>,
    pub batch_start: u64,
    /// Size of the segment frames go to: its header's, which after a
    /// reopen with another configured size differs from the config's.
    pub seg_bytes: u64,
    pub active: Option<Batch>,
    pub ready: VecDeque<Batch>,
    pub free: Vec<AlignedBuf>,
    /// Staging buffers allocated at open: those in `free`, `active` and
    /// `ready` plus those the ring holds or has in flight, always.
    pub buffers: usize,
    pub waiting_for_space: usize,
    /// An atomic batch is being copied in and waits, with the lock
    /// released, for a free buffer: no other record may be sequenced
    /// until it is complete, or its LSNs would not be consecutive.
    pub batch_open: bool,
    /// The offset in the current segment from which the next record that
    /// may start a walk becomes a point of the sparse index.
    pub index_due: u64,
    /// Bytes of the log's segment files from the oldest kept to the one
    /// frames go to, as [`SegmentSet::bytes`](crate::segment::set::SegmentSet::bytes) measures them, with rolls
    /// counted when decided and checkpoints when done: what the hard size
    /// limit is held against.
    pub live_bytes: u64,
    /// Bytes of the file of the segment frames go to: what a roll that
    /// replaces it (it holds no record) takes off `live_bytes`.
    pub seg_file_bytes: u64,
}

impl Reservation {
    /// Where the next frame would go.
    pub fn cursor(&self) -> Cursor {
        match &self.active {
            Some(b) => Cursor {
                end: b.offset + b.len as u64,
                fill: Some(b.len),
            },
            None => Cursor::at(self.batch_start),
        }
    }

    /// Open a batch in a free staging buffer where the next frame goes;
    /// false when none is free. Cost: none (the buffers are allocated
    /// once, at open).
    pub fn open_active(&mut self) -> bool {
        debug_assert!(self.active.is_none(), "one batch is filled at a time");
        debug_assert!(
            self.batch_start.is_multiple_of(format::BLOCK as u64)
                && self.batch_start >= format::HEADER_BYTES as u64,
            "batches open on a block boundary after the header"
        );
        let Some(buf) = self.free.pop() else {
            return false;
        };
        debug_assert!(buf.settled(), "a free buffer has no claim being filled");
        self.active = Some(Batch {
            buf,
            len: format::VOUCH_LEN,
            seg_base: self.seg_base,
            seg_id: self.seg_id,
            salt: self.salt,
            cipher: self.cipher.clone(),
            offset: self.batch_start,
            last_lsn: 0,
            ack_lsn: 0,
        });
        true
    }

    /// Close the active batch with padding to a block boundary and queue it
    /// for the ring. An empty batch returns its buffer to the pool.
    pub fn close_active(&mut self) {
        let Some(mut b) = self.active.take() else {
            return;
        };
        if b.last_lsn == 0 {
            self.free.push(b.buf);
            return;
        }
        let end = b.offset + b.len as u64;
        let pad = format::padding_len(end);
        if pad > 0 {
            format::encode_padding(&mut b.buf.tail_mut(b.len)[..pad], b.salt, pad);
            b.len += pad;
        }
        self.batch_start = b.offset + b.len as u64;
        debug_assert!(
            self.batch_start.is_multiple_of(format::BLOCK as u64) && b.len <= b.buf.capacity(),
            "a closed batch is whole blocks inside its buffer"
        );
        debug_assert!(
            b.ack_lsn <= b.last_lsn,
            "a write acknowledges only what it holds"
        );
        self.ready.push_back(b);
    }

    /// The next batch for the ring: a closed one, else the active one if it
    /// holds anything and `take_partial` allows it or it is large already
    /// (group commit takes whatever has accumulated).
    pub fn take_batch(&mut self, take_partial: bool) -> Option<Batch> {
        // A batch waiting for buffers has closed its last one; the ring
        // never sees it open (it holds the lock while it copies).
        debug_assert!(!self.batch_open || self.active.is_none());
        if self.ready.is_empty() && self.active_takeable(take_partial) {
            self.close_active();
        }
        // A batch goes out whole: not before every claim in it is filled.
        if !self.ready.front()?.buf.settled() {
            return None;
        }
        let b = self.ready.pop_front()?;
        debug_assert!(
            b.offset.is_multiple_of(format::BLOCK as u64) && b.len.is_multiple_of(format::BLOCK),
            "the ring writes whole blocks at block offsets"
        );
        debug_assert!(b.last_lsn > 0, "a batch handed to the ring holds a record");
        Some(b)
    }

    /// Whether the batch [`take_batch`](Self::take_batch) would take next
    /// exists but still has a claim being filled outside the lock: the
    /// ring then asks the last filler to wake it
    /// ([`Doorbell::await_fills`](crate::write::doorbell::Doorbell::await_fills)).
    pub fn waits_for_fills(&self, take_partial: bool) -> bool {
        let next = match self.ready.front() {
            Some(b) => Some(b),
            None => self
                .active
                .as_ref()
                .filter(|_| self.active_takeable(take_partial)),
        };
        next.is_some_and(|b| !b.buf.settled())
    }

    /// Whether the active batch may go to the ring before it is full: it
    /// holds a record, and either the ring takes partial batches now or
    /// this one is as large as a bandwidth-bound write already
    /// ([`LARGE_WRITE_BYTES`]). Waiting for more records only pays while a
    /// write's flush costs more than its transfer: with 1 MiB records from
    /// 4 producers, the partial batch held behind the writes in flight
    /// left two or three writes in flight where the device takes four.
    fn active_takeable(&self, take_partial: bool) -> bool {
        self.active
            .as_ref()
            .is_some_and(|b| b.last_lsn > 0 && (take_partial || b.len as u64 >= LARGE_WRITE_BYTES))
    }

    /// Bytes of frames waiting for the ring: closed batches and the one
    /// being filled. Cost: a walk over the closed ones (a few at most).
    pub fn waiting_bytes(&self) -> usize {
        self.ready.iter().map(|b| b.len).sum::<usize>() + self.active.as_ref().map_or(0, |b| b.len)
    }

    /// What `live_bytes` becomes when the current segment rolls to a new
    /// one of `new_bytes`: one more segment, or, when the current one
    /// holds no record, the same count ([`segments::roll_replaces`]).
    pub fn live_bytes_after_roll(&self, next_lsn: Lsn, new_bytes: u64) -> u64 {
        let kept = if segments::roll_replaces(self.seg_base, next_lsn) {
            self.live_bytes
                .checked_sub(self.seg_file_bytes)
                .expect("the segment frames go to is counted in live_bytes")
        } else {
            self.live_bytes
        };
        kept.saturating_add(new_bytes)
    }

    /// Whether [`take_batch`](Self::take_batch) would return a batch.
    #[cfg(test)]
    pub fn has_batch(&self, take_partial: bool) -> bool {
        self.batch_staged(take_partial) && !self.waits_for_fills(take_partial)
    }

    /// Whether a batch the ring may take is staged, its claims filled or
    /// not: what a producer tells the ring once its own fill is done.
    pub fn batch_staged(&self, take_partial: bool) -> bool {
        !self.ready.is_empty() || self.active_takeable(take_partial)
    }

    /// Whether frames are staged that the ring has still to write (filled
    /// or not): what a closing ring drains before it finishes.
    pub fn holds_frames(&self) -> bool {
        !self.ready.is_empty() || self.active.as_ref().is_some_and(|b| b.last_lsn > 0)
    }
}

/// The reservation lock and the state under it: owned here, reached by
/// producers through [`lock`](Self::lock) and by the ring through
/// [`exchange`](Self::exchange).
pub(crate) struct Staging {
    res: Ranked<Reservation>,
    /// Times the ring thread took the lock: what the exchange keeps to
    /// about one per loop turn. A relaxed count on the ring's own path.
    ring_takes: AtomicU64,
    /// Bytes of frames filled since open, counted by their fillers
    /// outside the lock: what tells the ring, without the lock, how much
    /// was staged since its last exchange (see `Ring::big_batch_waiting`).
    /// One relaxed add per record.
    filled: AtomicU64,
}

/// What the ring brings to one exchange and takes from it.
#[derive(Default)]
pub(crate) struct Exchange {
    /// Staging buffers whose writes completed, for the free list.
    pub freed: Vec<AlignedBuf>,
    /// Batches taken and not yet written, oldest first.
    pub taken: VecDeque<Batch>,
}

/// What the ring asks of one exchange.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    /// How many more batches it may take: its room in flight.
    pub room: usize,
    /// How many of those may be partial batches (the first ones taken).
    pub partial: usize,
    /// The ring has announced that it will sleep: if the next batch
    /// waits for a fill, ask the filler for a wake-up (`on_await`) and
    /// look again, so a fill between the look and the ask is not missed.
    pub look: bool,
}

/// What one exchange found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// Batches taken.
    pub took: usize,
    /// Bytes still staged once it took (closed batches and the one being
    /// filled): a lower bound of what waits at the ring's next turn,
    /// since only the ring takes.
    pub waiting: usize,
    /// Producers are parked for space (the freed buffers are for them).
    pub parked: bool,
    /// Staging buffers under the lock (free, being filled, closed):
    /// with the ring's own, every buffer allocated at open.
    pub staged_buffers: usize,
    /// Every staging buffer the log allocated.
    pub buffers: usize,
}

impl Staging {
    pub fn new(r: Reservation) -> Staging {
        Staging {
            res: Ranked::new(Rank::Reservation, r),
            ring_takes: AtomicU64::new(0),
            filled: AtomicU64::new(0),
        }
    }

    /// The reservation lock, for producers (and the ring at open and
    /// close). Every critical section is a copy and counter updates that
    /// are complete before any call that could panic (an `append_then`
    /// hook runs last), so a poisoned mutex carries no information.
    pub fn lock(&self) -> RankedGuard<'_, Reservation> {
        self.res.lock()
    }

    /// The lock, taken by the ring thread: counted.
    pub fn ring_lock(&self) -> RankedGuard<'_, Reservation> {
        self.ring_takes.fetch_add(1, Ordering::Relaxed);
        self.res.lock()
    }

    /// A frame of `bytes` was filled. Cost: one relaxed atomic add.
    pub fn filled(&self, bytes: usize) {
        self.filled.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes of frames filled since open. Cost: one atomic load.
    pub fn filled_bytes(&self) -> u64 {
        self.filled.load(Ordering::Relaxed)
    }

    /// Times the ring thread took the lock. Cost: one atomic load.
    #[cfg(test)]
    pub fn ring_takes(&self) -> u64 {
        self.ring_takes.load(Ordering::Relaxed)
    }

    /// The ring's one meeting with the producers in a loop turn: the
    /// buffers in `ex.freed` go back to the free list, and up to
    /// `ask.room` batches go to `ex.taken`. `on_await` asks the last
    /// filler of a batch the ring waits for to wake it (only when
    /// `ask.look`). Cost: one take of the reservation lock.
    pub fn exchange(&self, ex: &mut Exchange, ask: Ask, on_await: impl FnOnce()) -> Found {
        debug_assert!(
            ask.partial <= ask.room,
            "partial batches are counted in the room"
        );
        let mut r = self.ring_lock();
        r.free.append(&mut ex.freed);
        let mut took = take_up_to(&mut r, &mut ex.taken, ask, 0);
        if ask.look && took == 0 && r.waits_for_fills(ask.partial > 0) {
            on_await();
            took = take_up_to(&mut r, &mut ex.taken, ask, took);
        }
        assert!(took <= ask.room, "an exchange takes at most the room asked");
        Found {
            took,
            waiting: r.waiting_bytes(),
            parked: r.waiting_for_space > 0,
            staged_buffers: r.free.len() + usize::from(r.active.is_some()) + r.ready.len(),
            buffers: r.buffers,
        }
    }
}

/// Take batches into `taken` until `ask.room` are taken in all (`took`
/// so far) or none is takeable; the first `ask.partial` may be partial.
fn take_up_to(
    r: &mut Reservation,
    taken: &mut VecDeque<Batch>,
    ask: Ask,
    mut took: usize,
) -> usize {
    while took < ask.room {
        match r.take_batch(took < ask.partial) {
            Some(b) => taken.push_back(b),
            None => break,
        }
        took += 1;
    }
    took
}
