//! Claims: a record's place in a staging buffer, handed out under the
//! reservation lock and filled outside it.
//!
//! The reservation decides everything that orders records (the LSN, the
//! segment, the offset, the `append_then` hook) and hands the producer a
//! [`Claim`] on the frame's bytes; the copy, the CRC and the cipher run
//! after the lock is released, on the producer's core, while the next
//! producer reserves. The ring takes a buffer only once every claim in it
//! is filled ([`AlignedBuf::settled`]); the filler that settles a buffer
//! the ring is waiting for wakes it ([`Shared::filled`]).
//!
//! Architecture invariant: a claim is filled right after it is granted,
//! with nothing in between that blocks, so what the ring can wait for is
//! one copy. A claim dropped unfilled (a panic in the producer) poisons
//! the log before it lets go of its bytes: the ring, which checks the
//! poison before every write, never writes a frame that was not filled.
//!
//! [`AlignedBuf::settled`]: ringwal_platform::AlignedBuf::settled

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use ringwal_platform::Slot;

use crate::at_rest::crypt::Cipher;
use crate::at_rest::format::{self, Batching, Codec, Kind, RecordHead};
use crate::at_rest::packing::Placed;
use crate::at_rest::payload;
use crate::error::{Lsn, Poison, Result};
use crate::segment::index::{self, Point};
use crate::write::reserve::OnFull;
use crate::write::shared::Shared;
use crate::write::staging::Reservation;

/// One record's frame in a staging buffer, sequenced and not yet filled.
/// [`fill`](Self::fill) writes it; dropping it unfilled poisons the log.
pub(crate) struct Claim<'s> {
    shared: &'s Shared,
    slot: Option<Slot>,
    head: RecordHead,
    salt: u64,
    /// The segment's key when this record's payload is sealed.
    cipher: Option<Arc<Cipher>>,
    /// Payload bytes as the caller gives them, and as stored (with the
    /// cipher's tag when sealed).
    plain_len: usize,
    stored_len: usize,
    /// What the reservation saw staged, for the wake-up after the fill.
    takeable: bool,
    /// Whether the reservation lock is still held (only while the
    /// `append_then` hook runs): an abandonment then poisons without it.
    under_lock: bool,
    /// A panic of the `append_then` hook, resumed once the record is
    /// filled: the record is sequenced, so it is written all the same.
    hook_panic: Option<Box<dyn std::any::Any + Send>>,
}

impl Shared {
    /// Sequence one record of `plain_len` payload bytes, stored as
    /// `codec`: its LSN, its place (a roll first if it does not fit the
    /// segment) and its index point, then `then(lsn)`, all under the
    /// reservation lock; returns the claim to fill after it.
    ///
    /// Cost: the admission decision and a few stores under the lock; no
    /// copy, no CRC, no cipher there. Blocks as `on_full` says when every
    /// staging buffer is full or the size limit holds the roll back.
    pub(crate) fn claim_one(
        &self,
        stream: u16,
        kind: Kind,
        codec: Codec,
        plain_len: usize,
        mut on_full: OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Claim<'_>> {
        debug_assert!(
            codec == Codec::None || kind == Kind::Data,
            "only data records are compressed (docs/format.md §3.4)"
        );
        self.cfg().fit_fresh(std::iter::once(plain_len), kind)?;
        let flen = |sealed| format::frame_len(payload::stored_len(plain_len, sealed));
        let mut r = self.admit(
            1,
            kind,
            |sealed| std::iter::once(flen(sealed)),
            &mut on_full,
        )?;
        let lsn = self.admission().hand_out(&r, 1);
        debug_assert!(
            (1..=format::MAX_LSN).contains(&lsn),
            "records take LSNs in 1..=MAX_LSN"
        );
        let place = self.place_lone(&mut r, lsn, kind, plain_len);
        let head = RecordHead {
            lsn,
            stream,
            kind,
            flags: Batching::Alone.flags() | codec.flags(),
        };
        let mut claim = Claim::granted(self, place, head, plain_len);
        // The hook runs under the lock (that is its promise); a panic in
        // it must neither leave the claim unfilled nor poison the mutex.
        claim.hook_panic = catch_unwind(AssertUnwindSafe(|| then(lsn))).err();
        // Read under the lock: the ring announces how it sleeps before it
        // takes the lock to look for work, so either it sees this record
        // or this producer sees the announcement (`filled`).
        claim.takeable = r.batch_staged(false);
        drop(r);
        claim.under_lock = false;
        Ok(claim)
    }
}

impl Shared {
    /// Give the record at `lsn` its frame in the active batch (opening
    /// one, or closing a full one first) and its index point when due.
    /// With the reservation lock held; admission secured the buffer.
    fn place_lone(&self, r: &mut Reservation, lsn: Lsn, kind: Kind, plain_len: usize) -> Place {
        let framed = self.place_frame(r, lsn, kind, plain_len, true);
        let opened = r.active.is_some() || r.open_active();
        assert!(opened, "admission secured a buffer for a lone record");
        claim_frame(r, &framed, lsn, true)
    }

    /// The claim of an atomic batch's member `head`, on the frame
    /// `framed` planned for it in the active batch (which the caller
    /// opened); `last` when it closes the batch. With the reservation
    /// lock held.
    pub(super) fn member_claim(
        &self,
        r: &mut Reservation,
        framed: &Framed,
        head: RecordHead,
        plain_len: usize,
        last: bool,
    ) -> Claim<'_> {
        let place = claim_frame(r, framed, head.lsn, last);
        Claim::granted(self, place, head, plain_len)
    }
}

impl<'s> Claim<'s> {
    /// The claim on `place` for the record `head`, granted under the
    /// reservation lock (still held).
    fn granted(shared: &'s Shared, place: Place, head: RecordHead, plain_len: usize) -> Claim<'s> {
        Claim {
            shared,
            slot: Some(place.slot),
            head,
            salt: place.salt,
            cipher: place.cipher,
            plain_len,
            stored_len: place.stored_len,
            takeable: false,
            under_lock: true,
            hook_panic: None,
        }
    }
}

/// Take the bytes `framed` planned in the active batch for the record at
/// `lsn`; `acks` when its write acknowledges up to it (a lone record, or
/// the last member of an atomic batch).
fn claim_frame(r: &mut Reservation, framed: &Framed, lsn: Lsn, acks: bool) -> Place {
    let b = r
        .active
        .as_mut()
        .expect("the caller opened the active batch");
    let slot = b.buf.claim(b.len, framed.flen);
    b.len += framed.flen;
    assert_eq!(
        b.offset + b.len as u64,
        framed.end,
        "frames land where the plan put them"
    );
    b.last_lsn = lsn;
    if acks {
        b.ack_lsn = lsn;
    }
    Place {
        slot,
        salt: b.salt,
        cipher: b.cipher.as_ref().filter(|_| framed.sealed).cloned(),
        stored_len: framed.stored_len,
    }
}

impl Shared {
    /// Plan the frame of the record at `lsn` (`plain_len` payload bytes):
    /// seal it when the segment's payloads are sealed, close the active
    /// batch first when the frame does not fit it, and give the log an
    /// index point here when one is due and `may_index` (a walk may start
    /// at a record that stands alone or opens its batch, never inside
    /// one). With the reservation lock held; the frame itself is written
    /// by the caller, where the plan says it ends.
    pub(super) fn place_frame(
        &self,
        r: &mut Reservation,
        lsn: Lsn,
        kind: Kind,
        plain_len: usize,
        may_index: bool,
    ) -> Framed {
        let sealed = r.cipher.is_some() && payload::seals(kind);
        let stored_len = payload::stored_len(plain_len, sealed);
        let flen = format::frame_len(stored_len);
        let (next, how) = r.cursor().place(flen, self.cfg().buffer_bytes());
        if how == Placed::AfterClose {
            r.close_active();
            self.kick(r);
        }
        let at = next.end - flen as u64;
        debug_assert!(
            at.is_multiple_of(format::FRAME_ALIGN as u64),
            "every frame starts frame-aligned"
        );
        if may_index && at >= r.index_due {
            // The buffer's start, where its write's vouch goes.
            let write_at = next.fill.map_or(at, |fill| next.end - fill as u64);
            self.index().add(Point {
                lsn,
                offset: at,
                write_at,
            });
            r.index_due = index::due_after(Some(at));
        }
        Framed {
            sealed,
            stored_len,
            flen,
            end: next.end,
        }
    }
}

/// A frame's plan ([`Shared::place_frame`]).
pub(super) struct Framed {
    /// Whether its payload is sealed.
    pub sealed: bool,
    /// Its payload's stored length.
    pub stored_len: usize,
    /// Its whole length.
    pub flen: usize,
    /// The segment offset it ends at.
    pub end: u64,
}

/// Where a lone record's frame went: its claimed bytes and how to seal it.
struct Place {
    slot: Slot,
    salt: u64,
    cipher: Option<Arc<Cipher>>,
    stored_len: usize,
}

impl Claim<'_> {
    /// Write the frame: `write` fills the payload's `plain_len` bytes,
    /// then the cipher seals them and the CRC closes the frame; the ring
    /// is woken if it waits for this buffer or sleeps for what was
    /// staged. Returns the LSN; a panic of the `append_then` hook is
    /// resumed here, after the fill.
    ///
    /// Cost: what `write` does, one CRC pass over the frame, the cipher
    /// when sealed; no lock, and one syscall only when the ring is woken.
    pub(crate) fn fill(mut self, write: impl FnOnce(&mut [u8])) -> Lsn {
        let last = self.write_frame(write);
        self.shared.filled(last, self.takeable);
        if let Some(panic) = self.hook_panic.take() {
            resume_unwind(panic);
        }
        self.head.lsn
    }

    /// [`fill`](Self::fill) for a member of an atomic batch: the ring is
    /// woken only if it waits for this buffer, since the batch's producer
    /// says what it staged once every member is filled.
    pub(super) fn fill_member(mut self, payload: &[u8]) {
        debug_assert!(self.hook_panic.is_none(), "a batch's hook runs apart");
        let last = self.write_frame(|p| p.copy_from_slice(payload));
        self.shared.settled(last);
    }

    /// The lock this claim was granted under is released: an abandonment
    /// from now on poisons through the lock.
    pub(super) fn lock_released(&mut self) {
        self.under_lock = false;
    }

    /// Encode the frame into the claimed bytes and let go of them;
    /// returns whether that settled the buffer.
    fn write_frame(&mut self, write: impl FnOnce(&mut [u8])) -> bool {
        let (head, salt, plain_len) = (self.head, self.salt, self.plain_len);
        let cipher = self.cipher.as_deref();
        let (log_id, nonce_salt) = (self.shared.log_id(), self.shared.nonce_salt());
        debug_assert_eq!(
            self.stored_len,
            payload::stored_len(plain_len, cipher.is_some()),
            "a sealed claim has room for its tag behind the plaintext"
        );
        self.shared
            .staging()
            .filled(format::frame_len(self.stored_len));
        let slot = self.slot.as_mut().expect("a claim is filled once");
        let written = format::encode_record_with(slot.bytes(), salt, head, self.stored_len, |p| {
            write(&mut p[..plain_len]);
            if let Some(c) = cipher {
                // The writer's nonce salt, which the vouch opening this
                // write carries (a version-4 segment: the ring asserts it).
                c.seal(log_id, nonce_salt, &head.bound_bytes(), head.lsn, p);
            }
        });
        assert_eq!(
            written,
            slot.bytes().len(),
            "the frame fills its claim exactly"
        );
        self.slot.take().is_some_and(Slot::release)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        // Poisoned before the bytes are let go: the ring sees the poison
        // whenever it sees the buffer settled, and never writes it.
        let cause = Poison::failed(format!(
            "the record at LSN {} was abandoned before it was filled (its producer panicked)",
            self.head.lsn
        ));
        if self.under_lock {
            self.shared.poison_held(cause);
        } else {
            self.shared.poison(cause);
        }
        let last = slot.release();
        self.shared.filled(last, true);
    }
}
