//! The Linux [`IoQueue`]: one io_uring, several operations in flight.
//!
//! The ring is created `SINGLE_ISSUER | DEFER_TASKRUN` when the kernel
//! allows it (completion work then runs only when the owning thread enters
//! the kernel, with no cross-CPU task-work interrupts), falling back to a
//! plain ring. The queue's [`Notifier`] eventfd is polled inside the ring,
//! so the I/O thread sleeps in a single `io_uring_enter` for both producer
//! wake-ups and completions.
//!
//! While the caller says its load is lone ([`IoQueue::set_lone`]) and
//! nothing is in the kernel, the one queued operation is done in place
//! with blocking calls, as the threaded queue does: a durable direct write
//! through the ring completes asynchronously, its flush run by a kernel
//! worker, which adds two hand-offs between threads to a lone record's
//! path.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::buf::Allocation;
use crate::queue::{
    check_push, execute_blocking, Completion, IoQueue, Op, QueueKind, Tally, Wait, WakeWord,
    WriteSync,
};
use crate::{AlignedBuf, Notifier};

const POLL_TAG: u64 = u64::MAX;
/// The completions of `IORING_OP_FUTEX_WAKE` entries ([`UringQueue::wake`]).
const WAKE_TAG: u64 = u64::MAX - 1;
/// futex2 flags of a wake: a 32-bit word (`FUTEX2_SIZE_U32`), private to
/// the process (`FUTEX2_PRIVATE`, the same key `FUTEX_WAIT_PRIVATE`
/// waits on).
const FUTEX2_U32_PRIVATE: u32 = 0x02 | 128;
/// Submission entries at least: a publish may wake one waiter per
/// producer thread in one go, and fewer entries would split it into
/// several `io_uring_enter`s.
const MIN_ENTRIES: u32 = 128;

/// `Slot::pending` bit of the op's own entry (user data `slot << 1`).
const MAIN: u8 = 1;
/// `Slot::pending` bit of the fdatasync linked to a write (user data
/// `slot << 1 | 1`).
const LINKED: u8 = 2;

/// An operation the kernel may still be touching. `pending` holds a bit
/// for each completion entry still expected ([`MAIN`], and [`LINKED`]
/// for a write linked to a sync), so that each is seen exactly once.
#[derive(Debug)]
struct Slot {
    id: u64,
    op: Op,
    pending: u8,
    error: Option<io::Error>,
}

/// io_uring-backed [`IoQueue`]. See the module docs.
pub struct UringQueue {
    ring: IoUring,
    notifier: Arc<Notifier>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    queued: VecDeque<(u64, Op)>,
    done: VecDeque<Completion>,
    poll_armed: bool,
    /// Whether the kernel runs `IORING_OP_FUTEX_WAKE` (6.7 and later).
    futex_wake: bool,
    /// Wake entries submitted whose completions are not reaped yet, and
    /// the words they point at, kept alive until then.
    wakes_in_flight: usize,
    wake_words: Vec<Arc<WakeWord>>,
    /// The caller's load is one operation at a time ([`IoQueue::set_lone`]).
    lone: bool,
    /// Buffers registered with the ring, by index. Declared after `ring`
    /// so they are freed only after the ring (and its registration) is gone.
    registered: Vec<Arc<Allocation>>,
    tally: Tally,
}

impl std::fmt::Debug for UringQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringQueue")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl UringQueue {
    /// Create a ring sized for `depth` operations in flight (each may take
    /// two submission entries), plus the notifier poll.
    ///
    /// Cost: one `io_uring_setup` and the ring's memory mappings.
    pub fn new(depth: usize, notifier: Arc<Notifier>) -> io::Result<UringQueue> {
        let entries = ((depth.max(1) * 2 + 2) as u32)
            .next_power_of_two()
            .max(MIN_ENTRIES);
        // TASKRUN_FLAG makes the kernel flag pending deferred completions in
        // the SQ ring, so even a non-blocking submit enters with GETEVENTS
        // and reaps them; without it a polling caller would never see one.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(entries)
            .or_else(|_| IoUring::new(entries))?;
        let mut probe = io_uring::Probe::new();
        let futex_wake = ring.submitter().register_probe(&mut probe).is_ok()
            && probe.is_supported(opcode::FutexWake::CODE);
        Ok(UringQueue {
            ring,
            notifier,
            slots: Vec::new(),
            free: Vec::new(),
            queued: VecDeque::new(),
            done: VecDeque::new(),
            poll_armed: false,
            futex_wake,
            wakes_in_flight: 0,
            wake_words: Vec::new(),
            lone: false,
            registered: Vec::new(),
            tally: Tally::default(),
        })
    }

    fn entries_for(op: &Op) -> usize {
        match op {
            Op::Write {
                sync: WriteSync::ThenSync,
                ..
            } => 2,
            _ => 1,
        }
    }

    /// The descriptor an op targets; ops on files without one (simulated)
    /// are refused at push time.
    fn fd(op: &Op) -> Option<types::Fd> {
        match op {
            Op::Write { file, .. } | Op::Sync { file, .. } => file.raw_fd().map(types::Fd),
        }
    }

    /// The registration index of `buf`'s memory, if it is registered.
    fn fixed_index(&self, buf: &AlignedBuf) -> Option<u16> {
        let i = self
            .registered
            .iter()
            .position(|a| Arc::ptr_eq(a, buf.allocation()))?;
        // The kernel reads `buf.capacity()` bytes at most from the index
        // (`check_push`), which is what was registered there.
        Some(u16::try_from(i).expect("at most u16::MAX buffers are registered"))
    }

    fn build(&self, op: &Op, slot: usize) -> [Option<squeue::Entry>; 2] {
        let main = (slot as u64) << 1;
        assert!(
            main | 1 < WAKE_TAG,
            "slot {slot}'s user data would collide with the queue's tags"
        );
        let fd = Self::fd(op).expect("ops without a descriptor are refused in push");
        match op {
            Op::Write {
                buf,
                len,
                offset,
                sync,
                ..
            } => {
                let flags = if *sync == WriteSync::Dsync {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                let len = u32::try_from(*len).expect("a write of at most 4 GiB");
                let w = match self.fixed_index(buf) {
                    Some(index) => {
                        assert!(
                            usize::from(index) < self.registered.len(),
                            "fixed buffer index {index} past the {} registered",
                            self.registered.len()
                        );
                        opcode::WriteFixed::new(fd, buf.as_ptr(), len, index)
                            .offset(*offset)
                            .rw_flags(flags)
                            .build()
                    }
                    None => opcode::Write::new(fd, buf.as_ptr(), len)
                        .offset(*offset)
                        .rw_flags(flags)
                        .build(),
                }
                .user_data(main);
                if *sync == WriteSync::ThenSync {
                    let s = opcode::Fsync::new(fd)
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(main | 1);
                    [Some(w.flags(squeue::Flags::IO_LINK)), Some(s)]
                } else {
                    [Some(w), None]
                }
            }
            Op::Sync { data_only, .. } => {
                let flags = if *data_only {
                    types::FsyncFlags::DATASYNC
                } else {
                    types::FsyncFlags::empty()
                };
                [
                    Some(opcode::Fsync::new(fd).flags(flags).build().user_data(main)),
                    None,
                ]
            }
        }
    }

    /// Move queued ops into the submission queue while there is room.
    fn fill_sq(&mut self) -> io::Result<()> {
        while let Some((_, op)) = self.queued.front() {
            let need = Self::entries_for(op);
            if self.sq_room() < need {
                self.ring.submit()?;
                if self.sq_room() < need {
                    return Ok(());
                }
            }
            let (id, op) = self.queued.pop_front().expect("front checked above");
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            // A slot on the free list was released by its last completion:
            // the kernel holds no entry of it, so its user data is unused.
            assert!(
                self.slots[slot].is_none(),
                "slot {slot}, taken for op {id}, still holds an operation in flight"
            );
            let entries = self.build(&op, slot);
            self.slots[slot] = Some(Slot {
                id,
                op,
                pending: if need == 2 { MAIN | LINKED } else { MAIN },
                error: None,
            });
            let mut sq = self.ring.submission();
            for e in entries.into_iter().flatten() {
                // SAFETY: every pointer in the entry (buffer, fd) belongs to
                // the op now stored in `slots[slot]`, which keeps the buffer
                // and the file alive and unmoved until all of this slot's
                // completions are reaped; Drop waits for them.
                unsafe { sq.push(&e).expect("room checked above") };
            }
        }
        Ok(())
    }

    fn sq_room(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }

    fn arm_poll(&mut self) -> io::Result<()> {
        if self.poll_armed {
            return Ok(());
        }
        if self.ring.submission().is_full() {
            self.ring.submit()?;
        }
        let e = opcode::PollAdd::new(types::Fd(self.notifier.raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(POLL_TAG);
        // SAFETY: a poll entry references no memory, only the eventfd, which
        // the Arc<Notifier> held by this queue keeps open for the ring's life.
        unsafe { self.ring.submission().push(&e).expect("room made above") };
        self.poll_armed = true;
        Ok(())
    }

    fn reap(&mut self) {
        let cqes: Vec<cqueue::Entry> = self.ring.completion().collect();
        for cqe in cqes {
            self.complete(cqe.user_data(), cqe.result());
        }
    }

    fn complete(&mut self, user_data: u64, res: i32) {
        if user_data == WAKE_TAG {
            return self.wake_completed(res);
        }
        if user_data == POLL_TAG {
            // One-shot: armed once, completes once.
            assert!(self.poll_armed, "a notifier poll completed with none armed");
            self.poll_armed = false;
            self.notifier.drain();
            return;
        }
        let idx = (user_data >> 1) as usize;
        let bit = if user_data & 1 == 0 { MAIN } else { LINKED };
        assert!(
            idx < self.slots.len(),
            "completion (user data {user_data:#x}) for slot {idx}, past the {} ever used: never submitted",
            self.slots.len()
        );
        let Some(slot) = self.slots[idx].as_mut() else {
            panic!(
                "completion (user data {user_data:#x}) for slot {idx}, which holds no operation: seen twice, or never submitted"
            );
        };
        assert!(
            slot.pending & bit != 0,
            "completion (user data {user_data:#x}) of op {} seen twice, or of an entry never submitted",
            slot.id
        );
        if slot.error.is_none() {
            if res < 0 {
                slot.error = Some(io::Error::from_raw_os_error(-res));
            } else if bit == MAIN
                && let Op::Write { len, .. } = &slot.op
                && res as usize != *len
            {
                assert!(
                    (res as usize) < *len,
                    "the kernel wrote {res} bytes of op {}'s {len}",
                    slot.id
                );
                slot.error = Some(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write: {res} of {len} bytes"),
                ));
            }
        }
        slot.pending &= !bit;
        if slot.pending == 0 {
            // Released exactly once: the slot is emptied here, and a
            // later completion for it fails the check above.
            let slot = self.slots[idx].take().expect("slot checked above");
            self.free.push(idx);
            assert!(
                self.free.len() <= self.slots.len(),
                "{} free slots of {}",
                self.free.len(),
                self.slots.len()
            );
            let result = match slot.error {
                Some(e) => Err(e),
                None => Ok(()),
            };
            self.done.push_back(Completion {
                id: slot.id,
                result,
                op: slot.op,
                in_place: false,
            });
        }
    }

    /// One wake entry is done. A failed one cannot say whose word it was:
    /// every word still held is woken by syscall (a wake of a thread not
    /// parked costs it one spurious return).
    fn wake_completed(&mut self, res: i32) {
        assert!(
            self.wakes_in_flight > 0,
            "a futex wake completed with none in flight"
        );
        self.wakes_in_flight -= 1;
        if res < 0 {
            WakeWord::wake_each(&self.wake_words);
        }
        if self.wakes_in_flight == 0 {
            self.wake_words.clear();
        }
    }

    /// Queue one futex wake of `w`; false when the submission queue has no
    /// room even after a submit.
    fn push_wake(&mut self, w: &Arc<WakeWord>) -> bool {
        if self.ring.submission().is_full()
            && (self.ring.submit().is_err() || self.ring.submission().is_full())
        {
            return false;
        }
        let e = opcode::FutexWake::new(w.as_ptr(), 1, u64::from(u32::MAX), FUTEX2_U32_PRIVATE)
            .build()
            .user_data(WAKE_TAG);
        // SAFETY: the entry points only at the word, whose Arc goes into
        // `wake_words` below and stays there until every wake completion
        // is reaped; Drop waits for them.
        unsafe { self.ring.submission().push(&e).expect("room checked above") };
        true
    }

    /// Perform the one queued operation on this thread, blocking, when
    /// the caller said its load is lone and nothing is in the kernel: a
    /// durable direct write submitted through the ring completes
    /// asynchronously, its flush run by a kernel worker whose wake-up, and
    /// then this thread's, are two more hand-offs on the record's path
    /// than a `pwritev2` that flushes in place. Returns whether it did.
    ///
    /// With several queued, only the first is done, and the others wait
    /// for the next `run`: the caller then publishes this one's completion
    /// before the next write blocks it again, one operation at a time, as
    /// the threaded queue goes.
    fn run_lone(&mut self) -> bool {
        if !self.lone || self.live() > 0 || !self.done.is_empty() {
            return false;
        }
        let Some((id, op)) = self.queued.pop_front() else {
            return false;
        };
        let result = execute_blocking(&op);
        self.done.push_back(Completion {
            id,
            result,
            op,
            in_place: true,
        });
        true
    }

    fn live(&self) -> usize {
        self.slots
            .len()
            .checked_sub(self.free.len())
            .expect("more slots free than slots")
    }

    fn enter(&mut self, wait: Wait) -> io::Result<()> {
        let res = match wait {
            Wait::NoWait => self.ring.submit(),
            Wait::Block => self.ring.submit_and_wait(1),
            Wait::Timeout(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match res {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::ETIME | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl IoQueue for UringQueue {
    fn push(&mut self, id: u64, op: Op) {
        check_push(id, &op);
        self.tally.push();
        if Self::fd(&op).is_none() {
            let result = Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring needs a real file",
            ));
            self.done.push_back(Completion {
                id,
                result,
                op,
                in_place: false,
            });
        } else {
            self.queued.push_back((id, op));
        }
        self.tally.check(self.in_flight());
    }

    fn run(&mut self, wait: Wait) -> io::Result<()> {
        if self.run_lone() {
            // Completions of earlier wake-ups and the notifier's poll, if
            // any are pending: without SQPOLL an enter is a syscall even
            // with nothing to submit, and this path runs once per record.
            let pending = {
                let sq = self.ring.submission();
                !sq.is_empty() || sq.taskrun()
            };
            if pending {
                self.enter(Wait::NoWait)?;
            }
            self.reap();
            self.tally.check(self.in_flight());
            return Ok(());
        }
        self.fill_sq()?;
        let wait = if self.done.is_empty() {
            wait
        } else {
            Wait::NoWait
        };
        if wait != Wait::NoWait {
            self.arm_poll()?;
        }
        self.enter(wait)?;
        self.reap();
        // Ops left queued for lack of SQ room go in now that reaping freed some.
        if !self.queued.is_empty() {
            self.fill_sq()?;
            self.enter(Wait::NoWait)?;
        }
        self.tally.check(self.in_flight());
        Ok(())
    }

    fn pop(&mut self) -> Option<Completion> {
        let c = self.done.pop_front()?;
        self.tally.pop();
        self.tally.check(self.in_flight());
        Some(c)
    }

    fn in_flight(&self) -> usize {
        self.queued.len() + self.live() + self.done.len()
    }

    fn kind(&self) -> QueueKind {
        QueueKind::Uring
    }

    fn set_lone(&mut self, lone: bool) {
        self.lone = lone;
    }

    /// All the wakes in one `io_uring_enter` (more only past the
    /// submission queue's size), where the kernel runs them inline; with a
    /// kernel before 6.7, or a submission that fails, one syscall each.
    fn wake(&mut self, words: Vec<Arc<WakeWord>>) {
        if !self.futex_wake {
            return WakeWord::wake_each(&words);
        }
        for w in words {
            if self.push_wake(&w) {
                self.wakes_in_flight += 1;
                self.wake_words.push(w);
            } else {
                w.wake_set();
            }
        }
        if self.ring.submit().is_err() {
            // The entries stay queued for the next enter; wake now anyway.
            WakeWord::wake_each(&self.wake_words);
        }
    }

    fn register_buffers(&mut self, bufs: &[&AlignedBuf]) -> bool {
        if !self.registered.is_empty() || bufs.is_empty() || bufs.len() > usize::from(u16::MAX) {
            return false;
        }
        let iovecs: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.capacity(),
            })
            .collect();
        // SAFETY: each iovec covers exactly one live buffer's allocation,
        // and `registered` holds a reference to every one of those
        // allocations until the ring itself is dropped (field order), so
        // the memory stays valid for as long as it is registered.
        let ok = unsafe { self.ring.submitter().register_buffers(&iovecs) }.is_ok();
        if ok {
            self.registered = bufs.iter().map(|b| b.allocation().clone()).collect();
        }
        ok
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The kernel may still read buffers owned by live slots: wait for
        // every one of them before the slots (and buffers) are freed. The
        // notifier poll references no memory and is torn down with the ring.
        while self.live() > 0 || self.wakes_in_flight > 0 {
            if self.ring.submit_and_wait(1).is_err() {
                // Cannot wait: leak the buffers rather than free memory the
                // kernel may still read.
                std::mem::forget(std::mem::take(&mut self.slots));
                std::mem::forget(std::mem::take(&mut self.wake_words));
                return;
            }
            self.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{file, AlignedBuf};
    use std::time::{Duration, Instant};

    /// A write of one zeroed block at offset 0 of `file`.
    fn one_block_write(file: crate::vfs::VFile, sync: WriteSync) -> Op {
        Op::Write {
            file,
            buf: AlignedBuf::new(4096),
            len: 4096,
            offset: 0,
            sync,
        }
    }

    /// Run the queue until a completion is there, and take it.
    fn next_completion(q: &mut UringQueue) -> Completion {
        loop {
            q.run(Wait::Block).unwrap();
            if let Some(c) = q.pop() {
                return c;
            }
        }
    }

    fn open(dir: &std::path::Path) -> crate::vfs::VFile {
        let p = dir.join("f");
        let f = file::open_segment(&p, true, false, 0o600).unwrap();
        file::preallocate(&f, 1 << 20).unwrap();
        Arc::new(f)
    }

    #[test]
    fn writes_complete_with_buffers_returned() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(dir.path());
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(8, n).unwrap();
        for i in 0..6u64 {
            let mut buf = AlignedBuf::new(4096);
            buf.as_mut_slice()[0] = i as u8 + 1;
            let sync = [WriteSync::None, WriteSync::Dsync, WriteSync::ThenSync][i as usize % 3];
            q.push(
                i,
                Op::Write {
                    file: f.clone(),
                    buf,
                    len: 4096,
                    offset: i * 4096,
                    sync,
                },
            );
        }
        q.push(
            99,
            Op::Sync {
                file: f.clone(),
                data_only: true,
            },
        );
        let mut seen = Vec::new();
        while seen.len() < 7 {
            q.run(Wait::Block).unwrap();
            while let Some(c) = q.pop() {
                c.result.unwrap();
                seen.push(c.id);
            }
        }
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5, 99]);
        assert_eq!(q.in_flight(), 0);
        let data = std::fs::read(dir.path().join("f")).unwrap();
        for i in 0..6 {
            assert_eq!(data[i * 4096], i as u8 + 1);
        }
    }

    /// Writes from registered buffers carry the buffers' current bytes
    /// (each reused with new contents), a registered buffer may be dropped
    /// before the queue, and an unregistered one still writes normally.
    #[test]
    fn registered_buffers_write_their_current_contents() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(dir.path());
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(8, n).unwrap();
        let mut pool: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(8192)).collect();
        let refs: Vec<&AlignedBuf> = pool.iter().collect();
        if !q.register_buffers(&refs) {
            return; // no registration here (old kernel or memlock limit)
        }
        let mut outsider = Some(AlignedBuf::new(8192));
        for round in 0..4u64 {
            let mut buf = if round == 3 {
                outsider.take().unwrap()
            } else {
                pool.pop().unwrap()
            };
            buf.as_mut_slice().fill(round as u8 + 10);
            q.push(
                round,
                Op::Write {
                    file: f.clone(),
                    buf,
                    len: 8192,
                    offset: round * 8192,
                    sync: WriteSync::Dsync,
                },
            );
            let mut got = None;
            while got.is_none() {
                q.run(Wait::Block).unwrap();
                got = q.pop();
            }
            let c = got.unwrap();
            c.result.unwrap();
            if let Op::Write { buf, .. } = c.op {
                // Drop one registered buffer while the queue still lives.
                if round != 1 {
                    pool.insert(0, buf);
                }
            }
        }
        drop(pool);
        drop(q);
        let data = std::fs::read(dir.path().join("f")).unwrap();
        for round in 0..4usize {
            let block = &data[round * 8192..(round + 1) * 8192];
            assert!(
                block.iter().all(|&b| b == round as u8 + 10),
                "round {round}"
            );
        }
    }

    #[test]
    fn failed_write_reports_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro");
        std::fs::write(&p, b"x").unwrap();
        let ro: crate::vfs::VFile = Arc::new(std::fs::File::open(&p).unwrap());
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(4, n).unwrap();
        q.push(
            1,
            Op::Write {
                file: ro,
                buf: AlignedBuf::new(4096),
                len: 4096,
                offset: 0,
                sync: WriteSync::ThenSync,
            },
        );
        q.run(Wait::Block).unwrap();
        let c = q.pop().expect("one completion");
        assert_eq!(c.id, 1);
        assert_eq!(c.result.unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    /// A lone operation, when the caller says its load is lone, is done in
    /// place: its completion is there when `run` returns, even without a
    /// wait, and a failure is reported the same way. Of several queued,
    /// one is done per `run`, in order. The caller not saying so, they go
    /// through the ring. Each completion says which way it went.
    #[test]
    fn a_lone_write_is_done_in_place_and_others_through_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(dir.path());
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(4, n).unwrap();
        let write = |file: &crate::vfs::VFile, fill: u8, offset: u64| {
            let mut buf = AlignedBuf::new(4096);
            buf.as_mut_slice().fill(fill);
            Op::Write {
                file: file.clone(),
                buf,
                len: 4096,
                offset,
                sync: WriteSync::Dsync,
            }
        };
        q.push(1, write(&f, 7, 0));
        assert!(!q.run_lone(), "not lone unless the caller says so");
        let mut seen = Vec::new();
        while seen.is_empty() {
            q.run(Wait::Block).unwrap();
            while let Some(c) = q.pop() {
                c.result.unwrap();
                assert!(!c.in_place, "through the ring");
                seen.push(c.id);
            }
        }
        q.set_lone(true);
        q.push(2, write(&f, 8, 4096));
        q.push(3, write(&f, 9, 8192));
        for id in [2, 3] {
            q.run(Wait::NoWait).unwrap();
            let c = q
                .pop()
                .expect("the first queued write completed inside run");
            assert_eq!(c.id, id);
            assert!(c.in_place);
            c.result.unwrap();
            assert!(q.pop().is_none(), "one operation per run");
        }
        assert_eq!(q.in_flight(), 0);
        let data = std::fs::read(dir.path().join("f")).unwrap();
        assert!(data[..4096].iter().all(|&b| b == 7));
        assert!(data[4096..8192].iter().all(|&b| b == 8));
        assert!(data[8192..12288].iter().all(|&b| b == 9));

        let p = dir.path().join("ro");
        std::fs::write(&p, b"x").unwrap();
        let ro: crate::vfs::VFile = Arc::new(std::fs::File::open(&p).unwrap());
        q.push(4, write(&ro, 1, 0));
        q.run(Wait::NoWait).unwrap();
        let c = q.pop().expect("the failed lone write completed inside run");
        assert_eq!(c.result.unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    /// Threads parked on their words are woken through the ring (or by
    /// syscall where the kernel has no futex wake op), and the ring keeps
    /// no word once the wakes complete.
    #[test]
    fn parked_threads_are_woken_through_the_ring() {
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(4, n).unwrap();
        // More threads than submission entries, to cross a full queue.
        let words: Vec<Arc<WakeWord>> = (0..MIN_ENTRIES as usize + 10)
            .map(|_| Arc::new(WakeWord::default()))
            .collect();
        let parked: Vec<_> = words
            .iter()
            .map(|w| {
                let w = w.clone();
                std::thread::spawn(move || {
                    // Spurious returns happen; the word says when it is real.
                    while !w.is_set() {
                        w.park();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        words.iter().for_each(|w| w.set());
        q.wake(words.clone());
        assert_eq!(
            q.wakes_in_flight > 0,
            q.futex_wake,
            "the ring carries the wakes exactly when the kernel has the op"
        );
        for t in parked {
            t.join().unwrap();
        }
        while q.wakes_in_flight > 0 {
            q.run(Wait::Timeout(Duration::from_millis(10))).unwrap();
        }
        assert!(q.wake_words.is_empty(), "the ring let go of every word");
        assert_eq!(q.in_flight(), 0, "wakes are not operations of the engine");
    }

    /// A completion whose user data names a slot never handed out is a
    /// corrupted entry or a stray submission: the queue stops there.
    #[test]
    #[should_panic(expected = "never submitted")]
    fn a_completion_for_a_slot_never_used_panics() {
        let mut q = UringQueue::new(4, Arc::new(Notifier::new().unwrap())).unwrap();
        q.complete(5 << 1, 0);
    }

    /// A slot released by its completion takes no second one.
    #[test]
    #[should_panic(expected = "seen twice")]
    fn a_completion_after_the_slot_was_released_panics() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(dir.path());
        let mut q = UringQueue::new(4, Arc::new(Notifier::new().unwrap())).unwrap();
        q.push(1, one_block_write(f, WriteSync::None));
        let c = next_completion(&mut q);
        c.result.unwrap();
        q.complete(0, 4096);
    }

    /// A write linked to its fdatasync expects one completion of each:
    /// the write's twice is refused, and the pair then completes as usual.
    #[test]
    fn each_entry_of_a_linked_pair_completes_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = open(dir.path());
        let mut q = UringQueue::new(4, Arc::new(Notifier::new().unwrap())).unwrap();
        q.push(1, one_block_write(f, WriteSync::ThenSync));
        // In the slot, not yet submitted: the kernel has seen nothing.
        q.fill_sq().unwrap();
        q.complete(0, 4096);
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.complete(0, 4096)));
        let msg = again.expect_err("a second completion of the write");
        let msg = msg.downcast_ref::<String>().expect("a formatted message");
        assert!(msg.contains("seen twice"), "{msg}");
        // Undo the simulated completion; the kernel's own come now.
        q.slots[0].as_mut().unwrap().pending = MAIN | LINKED;
        let c = next_completion(&mut q);
        assert_eq!(c.id, 1);
        c.result.unwrap();
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn notifier_wakes_a_blocked_run() {
        let n = Arc::new(Notifier::new().unwrap());
        let mut q = UringQueue::new(4, n.clone()).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            n.notify().unwrap();
        });
        let start = Instant::now();
        q.run(Wait::Block).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        t.join().unwrap();
        q.run(Wait::Timeout(Duration::from_millis(5))).unwrap();
    }
}
