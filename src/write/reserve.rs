//! The reservation: the one short critical section every append goes
//! through. It validates and compresses before the lock, then decides
//! under it (`decide`): proceed, roll, wait for space or for the size
//! limit, or refuse; then hands out the LSNs and claims the frames, filled
//! after the lock is released (`claim.rs`).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::Instant;

use crate::at_rest::codec;
use crate::at_rest::format::{self, Batching, Codec, Kind, RecordHead};
use crate::at_rest::packing::{Cursor, Placed};
use crate::at_rest::payload;
use crate::config::{Config, WhenFull};
use crate::error::{Error, Lsn, Result};
use crate::segment::index;
use crate::segment::lifecycle;
use crate::sync::lock_order::RankedGuard;
#[cfg(doc)]
use crate::write::admission::Admission;
use crate::write::claim::Claim;
use crate::write::shared::Shared;
use crate::write::staging::Reservation;

/// Records as they are stored: each payload packed when that makes it
/// smaller, decided once, before the reservation lock.
struct Stored<'r> {
    records: &'r [(u16, &'r [u8])],
    /// Per record, the packed bytes when compression won.
    packed: Option<Vec<Option<Vec<u8>>>>,
    codec: Codec,
}

impl<'r> Stored<'r> {
    /// Validate `records` (at least one, none over the record limit) and
    /// pack them when compression applies. Cost: the codec, per record.
    fn of(cfg: &Config, records: &'r [(u16, &'r [u8])], kind: Kind) -> Result<Stored<'r>> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let max = cfg.max_record_bytes;
        if let Some((_, p)) = records.iter().find(|(_, p)| p.len() > max) {
            return Err(Error::TooLarge { len: p.len(), max });
        }
        let codec = cfg.compression.codec;
        let packed = (kind == Kind::Data && codec != Codec::None).then(|| {
            records
                .iter()
                .map(|(_, p)| codec::pack(&cfg.compression, p))
                .collect()
        });
        Ok(Stored {
            records,
            packed,
            codec,
        })
    }

    /// Record `i` as stored: its codec and its bytes.
    fn get(&self, i: usize) -> (Codec, &[u8]) {
        match self.packed.as_ref().and_then(|v| v[i].as_deref()) {
            Some(bytes) => (self.codec, bytes),
            None => (Codec::None, self.records[i].1),
        }
    }
}

/// The admission decision: what a reservation does next with the records
/// it holds ([`Shared::decide`]).
#[derive(Debug)]
enum Admit {
    /// Sequence them now: a buffer for the first frame is secured.
    Proceed,
    /// Fail the append (poisoned, closed, LSNs exhausted).
    Refuse(Error),
    /// No buffer for the first frame, or another atomic batch is being
    /// copied: wait for the ring to free space, handing it the full
    /// active buffer first when `hand_over`.
    WaitForSpace { hand_over: bool },
    /// They do not fit the segment: open the next one for them.
    Roll { after_roll: u64 },
    /// The next segment would pass the hard size limit `max` and the log
    /// blocks when full: wait for a checkpoint, up to `timeout`.
    WaitForLimit {
        max: u64,
        timeout: std::time::Duration,
    },
}

/// What a reservation does when every staging buffer is full.
#[derive(Debug)]
pub(crate) enum OnFull<'w> {
    /// Park until the ring frees one (backpressure on the caller).
    Wait,
    /// Return [`Error::Full`] at once: for a caller that must not block
    /// (an async executor's thread).
    Refuse,
    /// As `Refuse`, with `waker` registered with [`Admission::register`]
    /// (by the entry `key`) under the lock that decided the refusal, so
    /// the next freeing of space wakes it: no wake-up falls between.
    Register {
        key: &'w mut Option<u64>,
        waker: &'w Waker,
    },
}

impl OnFull<'_> {
    fn waits(&self) -> bool {
        matches!(self, OnFull::Wait)
    }
}

impl Shared {
    /// Refuse a record for lack of space: `Full`, with the caller's waker
    /// registered first when it asked for that (a wait for space, counted
    /// as a parked producer's is). The reservation is held, so the
    /// registration and the refusal are one decision.
    fn refuse(&self, _held: &Reservation, on_full: &mut OnFull<'_>) -> Error {
        if let OnFull::Register { key, waker } = on_full {
            self.admission().register(key, waker);
            self.counters()
                .backpressure_waits
                .fetch_add(1, Ordering::Relaxed);
        }
        Error::Full
    }

    /// Sequence `records` (all of kind `kind`) under one reservation: they
    /// get consecutive LSNs, land in one segment (a roll comes first if
    /// they do not fit the current one) and, when there are several, form
    /// one atomic batch that the ledger acknowledges only as a whole.
    /// Runs `then(first)` under the lock once every place is decided, and
    /// returns the first LSN.
    ///
    /// Cost: compression (if configured) before the lock; one pass over
    /// the lengths to plan under it. Every record is copied, checksummed
    /// and sealed after the lock is released ([`claim_one`], and
    /// [`reserve_batch`] for a batch); a batch larger than the free staging
    /// buffers fills what it claimed and waits (lock released, everyone
    /// else held back) for the ring to free more.
    ///
    /// [`claim_one`]: Self::claim_one
    /// [`reserve_batch`]: Self::reserve_batch
    pub fn reserve_all(
        &self,
        records: &[(u16, &[u8])],
        kind: Kind,
        mut on_full: OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Lsn> {
        let stored = Stored::of(self.cfg(), records, kind)?;
        if let [(stream, _)] = records {
            let (codec, bytes) = stored.get(0);
            let claim = self.claim_one(*stream, kind, codec, bytes.len(), on_full, then)?;
            return Ok(claim.fill(|p| p.copy_from_slice(bytes)));
        }
        self.reserve_batch(&stored, kind, &mut on_full, then)
    }

    /// [`reserve_all`](Self::reserve_all) for an atomic batch of two or
    /// more records: every member's frame claimed under the lock (none of
    /// another producer's frames may come between), then filled after it,
    /// as a lone record's is. The hook runs under the lock once every
    /// place is decided; a panic in it is resumed once the members are
    /// filled, since they are sequenced and are written all the same.
    fn reserve_batch(
        &self,
        stored: &Stored<'_>,
        kind: Kind,
        on_full: &mut OnFull<'_>,
        then: impl FnOnce(Lsn),
    ) -> Result<Lsn> {
        let n = stored.records.len();
        debug_assert!(n >= 2, "a lone record is claimed, not batched");
        // Frame lengths, in a segment whose payloads are sealed or not.
        let flen_of = |i: usize, sealed: bool| {
            format::frame_len(payload::stored_len(stored.get(i).1.len(), sealed))
        };
        let flens = move |sealed: bool| (0..n).map(move |i| flen_of(i, sealed));
        self.cfg()
            .fit_fresh((0..n).map(|i| stored.get(i).1.len()), kind)?;
        let mut r = self.admit(n as u64, kind, flens, on_full)?;
        let first = self.admission().hand_out(&r, n as u64);
        r.batch_open = true;
        // Declared after the guard, so dropped before it on an unwind:
        // claims abandoned under the lock poison without taking it.
        let mut claims = Vec::with_capacity(n);
        for i in 0..n {
            r = self.claim_member(r, stored, kind, first, i, &mut claims)?;
        }
        debug_assert!(
            r.active
                .as_ref()
                .is_some_and(|b| b.last_lsn == first + n as u64 - 1 && b.ack_lsn == b.last_lsn),
            "a batch's last member closes it and is what its write acknowledges"
        );
        let hook_panic = catch_unwind(AssertUnwindSafe(|| then(first))).err();
        // Read under the lock: the ring announces how it sleeps before it
        // takes the lock to look for work, so either it sees this record
        // or this producer sees the announcement (`staged`).
        let takeable = r.batch_staged(false);
        r.batch_open = false;
        drop(r);
        fill_members(stored, &mut claims);
        self.space_freed(true);
        self.staged(takeable);
        if let Some(panic) = hook_panic {
            resume_unwind(panic);
        }
        Ok(first)
    }

    /// Plan and claim member `i` of the batch that starts at `first`,
    /// pushing its claim to `claims`. When it needs a buffer and none is
    /// free, the members claimed so far are filled first (lock released,
    /// `batch_open` holding everyone else back): the ring writes, and so
    /// frees, only filled buffers. On the poison the batch is given up:
    /// nothing of it was acknowledged.
    fn claim_member<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
        stored: &Stored<'_>,
        kind: Kind,
        first: Lsn,
        i: usize,
        claims: &mut Vec<(usize, Claim<'a>)>,
    ) -> Result<RankedGuard<'a, Reservation>> {
        let last = i + 1 == stored.records.len();
        let lsn = first + i as u64;
        let (codec, bytes) = stored.get(i);
        let framed = self.place_frame(&mut r, lsn, kind, bytes.len(), i == 0);
        if r.active.is_none() && !r.open_active() {
            drop(r);
            fill_members(stored, claims);
            r = self.lock();
        }
        while r.active.is_none() && !r.open_active() {
            r = self.wait_for_space(r);
            if let Some(p) = self.acks().poison_cause() {
                r.batch_open = false;
                drop(r);
                self.space_freed(true);
                return Err(p.error());
            }
        }
        let batching = if last {
            Batching::Last
        } else {
            Batching::Member
        };
        let head = RecordHead {
            lsn,
            stream: stored.records[i].0,
            kind,
            flags: batching.flags() | codec.flags(),
        };
        let claim = self.member_claim(&mut r, &framed, head, bytes.len(), last);
        claims.push((i, claim));
        Ok(r)
    }

    /// Hold the reservation until records of `n` frames (`flens`: their
    /// lengths in a segment sealed or not) may be sequenced: roll, wait
    /// for space or for the size limit, or refuse, as [`decide`] says.
    /// Returns the guard with a buffer for the first frame secured.
    ///
    /// [`decide`]: Self::decide
    pub(super) fn admit<I: Iterator<Item = usize>>(
        &self,
        n: u64,
        kind: Kind,
        flens: impl Fn(bool) -> I,
        on_full: &mut OnFull<'_>,
    ) -> Result<RankedGuard<'_, Reservation>> {
        // When a roll waits for the size limit: until when.
        let mut limit_deadline = None;
        let mut r = self.lock();
        loop {
            match self.decide(&r, n, kind, &flens) {
                Admit::Proceed => return Ok(r),
                Admit::Refuse(e) => return Err(e),
                Admit::WaitForSpace { hand_over } => {
                    // Handing the full buffer to the ring frees one.
                    if hand_over {
                        r.close_active();
                    }
                    if !on_full.waits() {
                        // Registered before the kick: a kick that fails
                        // poisons the log, and the poison wakes what is
                        // registered by then.
                        let full = self.refuse(&r, on_full);
                        if hand_over {
                            self.kick(&r);
                        }
                        return Err(full);
                    }
                    r = self.wait_for_space(r);
                }
                Admit::Roll { after_roll } => self.roll_reservation(&mut r, after_roll)?,
                Admit::WaitForLimit { max, timeout } => {
                    let deadline = *limit_deadline.get_or_insert_with(|| Instant::now() + timeout);
                    r = self.wait_for_limit(r, max, timeout, deadline, on_full)?;
                }
            }
        }
    }

    /// What the reservation does next with records of `n` frames: the
    /// admission decision, from the reservation's state alone. Cost: one
    /// pass over the frame lengths.
    fn decide<I: Iterator<Item = usize>>(
        &self,
        r: &Reservation,
        n: u64,
        kind: Kind,
        flens: &impl Fn(bool) -> I,
    ) -> Admit {
        let cfg = self.cfg();
        if let Some(p) = self.acks().poison_cause() {
            return Admit::Refuse(p.error());
        }
        if self.is_closing() {
            return Admit::Refuse(Error::Closed);
        }
        let next = self.next_lsn();
        if next > format::MAX_LSN - (n - 1) {
            return Admit::Refuse(Error::LsnExhausted { next });
        }
        if r.batch_open {
            return Admit::WaitForSpace { hand_over: false };
        }
        let cap = cfg.buffer_bytes();
        let sealed = r.cipher.is_some() && payload::seals(kind);
        let mut lens = flens(sealed);
        let Some(first_len) = lens.next() else {
            return Admit::Refuse(Error::EmptyBatch);
        };
        let (first_at, first_how) = r.cursor().place(first_len, cap);
        if !Cursor::fits(first_at.place_all(lens, cap), r.seg_bytes) {
            // Roll: the records open the next segment, named by the first
            // one's LSN. They fit a fresh segment (the caller checked).
            assert!(
                r.cursor() != Cursor::at(format::HEADER_BYTES as u64)
                    || r.seg_bytes < cfg.segment_bytes,
                "records that fit a fresh segment never roll one away"
            );
            // The hard size limit: a new segment must fit under it.
            let after_roll = r.live_bytes_after_roll(next, cfg.segment_bytes);
            let over = cfg.max_log_bytes.filter(|&max| after_roll > max);
            return match (over, cfg.when_full) {
                (Some(max), WhenFull::Block { timeout }) => Admit::WaitForLimit { max, timeout },
                _ => Admit::Roll { after_roll },
            };
        }
        // The first frame's buffer is secured before any LSN is given: a
        // lone record then never waits holding an LSN (others would
        // overtake it), and a batch waits mid-way only while `batch_open`
        // holds everyone else back.
        let opens = r.active.is_none() || first_how == Placed::AfterClose;
        if opens && r.free.is_empty() {
            return Admit::WaitForSpace { hand_over: true };
        }
        Admit::Proceed
    }

    /// Start the next segment in the reservation: frames go there from
    /// now on, named by the next LSN. Keys rotate here: the new segment
    /// takes the provider's current key, asked before anything changes,
    /// so a missing key fails this append and nothing else.
    fn roll_reservation(&self, r: &mut Reservation, after_roll: u64) -> Result<()> {
        let cfg = self.cfg();
        let cipher = cfg.keys.current(self.dir().path())?;
        r.close_active();
        let old_base = r.seg_base;
        r.seg_base = self.next_lsn();
        assert!(
            r.seg_base >= old_base,
            "a new segment is named above the one it follows"
        );
        r.seg_id += 1;
        r.salt = lifecycle::new_salt();
        r.cipher = cipher;
        r.live_bytes = after_roll;
        r.seg_file_bytes = cfg.segment_bytes;
        r.batch_start = format::HEADER_BYTES as u64;
        r.seg_bytes = cfg.segment_bytes;
        r.index_due = index::due_after(None);
        Ok(())
    }

    /// The next segment would pass the hard size limit `max`: hand over
    /// what is staged (it needs no new segment) and wait, lock released,
    /// until `deadline` for a checkpoint to make room. `LogFull` once the
    /// deadline passes or for a caller that must not wait.
    fn wait_for_limit<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
        max: u64,
        timeout: std::time::Duration,
        deadline: Instant,
        on_full: &OnFull<'_>,
    ) -> Result<RankedGuard<'a, Reservation>> {
        r.close_active();
        self.kick(&r);
        if self.acks().is_poisoned() {
            // Decided again: the poison refuses.
            return Ok(r);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if !on_full.waits() || left.is_zero() {
            return Err(Error::LogFull {
                dir: self.dir().path().to_path_buf(),
                limit: max,
                waited: timeout.min(timeout - left),
            });
        }
        Ok(self.admission().park_for(r, left))
    }

    /// Park on `space` until a buffer is freed, a batch completes, or the
    /// log is poisoned or closed; the ring is kicked so it frees buffers.
    fn wait_for_space<'a>(
        &'a self,
        mut r: RankedGuard<'a, Reservation>,
    ) -> RankedGuard<'a, Reservation> {
        r.waiting_for_space += 1;
        self.counters()
            .backpressure_waits
            .fetch_add(1, Ordering::Relaxed);
        self.kick(&r);
        if self.acks().is_poisoned() {
            // The kick itself may have poisoned (and notified) already:
            // waiting now would miss that notification.
            r.waiting_for_space -= 1;
            return r;
        }
        let mut r = self.admission().park(r);
        r.waiting_for_space -= 1;
        r
    }
}

/// Fill the claims of an atomic batch's members (`i`: which record of
/// `stored`), in order, with the reservation lock released.
fn fill_members(stored: &Stored<'_>, claims: &mut Vec<(usize, Claim<'_>)>) {
    for (_, c) in claims.iter_mut() {
        c.lock_released();
    }
    for (i, c) in claims.drain(..) {
        c.fill_member(stored.get(i).1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Level;
    use crate::error::Poison;
    use crate::segment::lifecycle::LARGE_WRITE_BYTES;
    use crate::write::doorbell::RingSleep;
    use crate::write::shared::test_shared;

    fn poisoned(r: Result<Lsn>) -> bool {
        matches!(r, Err(Error::Poisoned { .. }))
    }

    /// Append one record of `len` bytes, as `Ticket::issue` would.
    fn append_bytes(sh: &Shared, len: usize) -> Lsn {
        sh.reserve_all(&[(0, &vec![7u8; len])], Kind::Data, OnFull::Wait, |_| {})
            .unwrap()
    }

    /// A partial batch waits for more records while the ring says so,
    /// unless it is as large as a bandwidth-bound write already.
    #[test]
    fn a_large_partial_batch_goes_out_without_waiting_for_more() {
        let sh = test_shared(4);
        let append = |len: usize| append_bytes(&sh, len);
        append(1000);
        let mut r = sh.lock();
        assert!(!r.has_batch(false) && r.take_batch(false).is_none());
        assert!(r.has_batch(true));
        drop(r);
        // The record that makes the batch large: its write is bound by
        // the transfer, and waiting would only hold a write back.
        append(LARGE_WRITE_BYTES as usize);
        let mut r = sh.lock();
        assert!(r.has_batch(false));
        let b = r.take_batch(false).expect("the large batch");
        assert_eq!((b.last_lsn, r.active.is_none()), (2, true));
        assert!(b.len as u64 >= LARGE_WRITE_BYTES);
    }

    /// A ring sleeping with a partial write in flight is woken only by a
    /// batch it may take; an idle one by any record.
    #[test]
    fn records_wake_the_ring_only_when_it_can_act_on_them() {
        let sh = test_shared(4);
        let append = |len: usize| append_bytes(&sh, len);
        sh.doorbell().announce(RingSleep::ForBatches);
        append(100);
        append(100);
        assert_eq!(
            sh.doorbell().sleep(),
            RingSleep::ForBatches,
            "partial: still asleep"
        );
        sh.want(2, Level::Durable);
        assert_eq!(
            sh.doorbell().sleep(),
            RingSleep::ForBatches,
            "a waiter adds no work"
        );
        append(LARGE_WRITE_BYTES as usize);
        assert_eq!(
            sh.doorbell().sleep(),
            RingSleep::Awake,
            "a takeable batch wakes it"
        );

        sh.doorbell().announce(RingSleep::ForRecords);
        append(100);
        assert_eq!(
            sh.doorbell().sleep(),
            RingSleep::Awake,
            "idle: any record wakes it"
        );
    }

    /// A wake-up the kernel refuses poisons the log with its cause, from
    /// a producer outside the lock (a staged record) and inside it (a
    /// full pool's kick), and nothing is left parked.
    #[test]
    fn a_failed_wake_up_poisons_with_its_cause() {
        let sh = test_shared(4);
        let lsn = append_bytes(&sh, 100);
        sh.doorbell().notifier().fail_from_now();
        sh.doorbell().announce(RingSleep::ForRecords);
        append_bytes(&sh, 100);
        let cause = sh
            .acks()
            .poison_cause()
            .expect("the failed wake-up poisoned");
        assert!(cause.to_string().contains("waking the ring"), "{cause}");
        assert!(cause.io_error().is_some(), "the OS error is kept");
        assert!(matches!(
            sh.acks().check(lsn, Level::Written),
            Some(Err(Error::Poisoned { .. }))
        ));

        let full = test_shared(0);
        full.doorbell().notifier().fail_from_now();
        full.doorbell().announce(RingSleep::ForBatches);
        let parked = {
            let full = full.clone();
            std::thread::spawn(move || {
                full.reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            })
        };
        assert!(poisoned(parked.join().unwrap()), "refused, never parked");
        assert!(full.acks().poison_cause().is_some());
    }

    #[test]
    fn after_the_poison_appends_are_refused_and_waiters_fail() {
        let sh = test_shared(1);
        let lsn = sh
            .reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            .unwrap();
        sh.poison(Poison::failed("test"));
        assert!(matches!(
            sh.acks().check(lsn, Level::Written),
            Some(Err(Error::Poisoned { .. }))
        ));
        assert!(poisoned(sh.reserve_all(
            &[(0, b"y")],
            Kind::Data,
            OnFull::Wait,
            |_| {}
        )));
    }

    /// Once poisoned, the log tries no manifest write (the poison may be
    /// a failed directory fsync, and the write would end in another).
    /// Had it tried, this one would fail with `Io`: the log's directory
    /// does not exist.
    #[test]
    fn after_the_poison_the_manifest_is_written_no_more() {
        let sh = test_shared(1);
        sh.poison(Poison::failed("test"));
        let before = sh.manifest().get();
        let raised = format::Manifest {
            newest_base: 5,
            ..before
        };
        match sh.manifest().raise(raised) {
            Err(Error::Poisoned { cause }) => assert!(cause.to_string().contains("manifest")),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(sh.manifest().get(), before);
    }

    #[test]
    fn a_producer_parked_for_space_is_woken_by_the_poison() {
        let sh = test_shared(0);
        let producer = {
            let sh = sh.clone();
            std::thread::spawn(move || {
                sh.reserve_all(&[(0, b"x")], Kind::Data, OnFull::Wait, |_| {})
            })
        };
        // Let it park if it will; refused either way, never left parked.
        for _ in 0..1000 {
            if sh.lock().waiting_for_space > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        sh.poison(Poison::failed("test"));
        assert!(poisoned(producer.join().unwrap()));
    }
}
