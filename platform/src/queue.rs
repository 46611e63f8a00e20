use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::vfs::VFile;
use crate::{AlignedBuf, Notifier};

/// One I/O operation handed to an [`IoQueue`].
///
/// The op owns everything the kernel touches (the buffer and a reference to
/// the file) until its [`Completion`] gives it back, which is what makes
/// asynchronous submission safe: the memory cannot be freed or reused while
/// the kernel may still read it.
#[derive(Debug)]
pub enum Op {
    /// Write `buf[..len]` at `offset`.
    Write {
        /// Target file; kept alive until completion.
        file: VFile,
        /// Source bytes; returned in the completion for reuse.
        buf: AlignedBuf,
        /// Bytes to write from the start of `buf`.
        len: usize,
        /// File offset.
        offset: u64,
        /// How the write is made durable, if at all.
        sync: WriteSync,
    },
    /// Flush a file's data (`data_only`: fdatasync) or data and metadata
    /// (fsync; use this for directories) to stable storage.
    Sync {
        /// File or directory to flush; kept alive until completion.
        file: VFile,
        /// fdatasync rather than fsync.
        data_only: bool,
    },
}

/// How a [`Op::Write`] reaches stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteSync {
    /// Plain write: survives a process crash once complete, not power loss.
    None,
    /// `RWF_DSYNC`: the completion means the data is on stable storage.
    Dsync,
    /// The write followed by an fdatasync of the same file, ordered by the
    /// queue (linked in io_uring); one completion for both.
    ThenSync,
}

/// The result of one [`Op`], in completion order (not submission order).
#[derive(Debug)]
pub struct Completion {
    /// The id given to [`IoQueue::push`].
    pub id: u64,
    /// `Ok` only if the whole operation succeeded (a short write is an error).
    pub result: io::Result<()>,
    /// The op, handed back so its buffer can be reused.
    pub op: Op,
    /// Whether it was performed in place, by blocking calls on the thread
    /// that runs the queue (the threaded queue always; io_uring when the
    /// caller said its load is lone), rather than by the kernel
    /// asynchronously: a caller comparing the two ways by their latency
    /// needs to know which each was.
    pub in_place: bool,
}

/// Assert what every queue needs of an op it is handed, at push: a
/// write reads only its own buffer (the kernel is given the pointer and
/// the length, and checks neither against the allocation), and a write
/// to a file that demands alignment (O_DIRECT) is aligned to
/// [`BLOCK`](crate::BLOCK) in address, length and offset. Cost: a few
/// compares; the file's flags are read (one `fcntl`) only for a
/// misaligned write, which the engine never makes.
pub(crate) fn check_push(id: u64, op: &Op) {
    if let Op::Write {
        file,
        buf,
        len,
        offset,
        ..
    } = op
    {
        assert!(
            *len <= buf.capacity(),
            "op {id}: a write of {len} bytes from a buffer of {}",
            buf.capacity()
        );
        assert!(
            crate::file::block_aligned(buf.addr(), *len, *offset) || !file.demands_alignment(),
            "op {id}: misaligned write to an O_DIRECT file: {len} bytes from {:#x} at offset {offset}",
            buf.addr()
        );
    }
}

/// The operations a queue was handed and gave back, for the assertion
/// each queue makes after every call: an op pushed is, until its
/// completion is popped, in exactly one of the queue's places (queued,
/// in the kernel, done), never lost and never in two. Cost: two
/// counters.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pushed: u64,
    popped: u64,
}

impl Tally {
    /// One op handed to the queue.
    pub fn push(&mut self) {
        self.pushed += 1;
    }

    /// One completion handed back: there must have been an op for it.
    pub fn pop(&mut self) {
        assert!(
            self.popped < self.pushed,
            "completion popped with no operation in flight ({} pushed)",
            self.pushed
        );
        self.popped += 1;
    }

    /// Assert that the queue holds, by its own count (`held`), exactly
    /// the ops pushed and not yet popped.
    pub fn check(&self, held: usize) {
        assert_eq!(
            self.pushed - self.popped,
            held as u64,
            "ops lost or duplicated: {} pushed, {} popped, {held} held by the queue",
            self.pushed,
            self.popped
        );
    }
}

/// Perform `op` with blocking calls on this thread: the threaded queue's
/// every operation, and the io_uring queue's lone ones
/// ([`IoQueue::set_lone`]). Cost: the write and, for
/// [`WriteSync::ThenSync`], the fdatasync, as syscalls that block.
pub(crate) fn execute_blocking(op: &Op) -> io::Result<()> {
    match op {
        Op::Write {
            file: f,
            buf,
            len,
            offset,
            sync,
        } => {
            let data = &buf.as_slice()[..*len];
            f.write_at(data, *offset, *sync == WriteSync::Dsync)?;
            if *sync == WriteSync::ThenSync {
                f.sync_data()?;
            }
            Ok(())
        }
        Op::Sync { file: f, data_only } => {
            if *data_only {
                f.sync_data()
            } else {
                f.sync_all()
            }
        }
    }
}

/// How long [`IoQueue::run`] may sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Submit and return at once.
    NoWait,
    /// Sleep until at least one completion is ready or the queue's
    /// [`Notifier`] fires.
    Block,
    /// As `Block`, but at most this long.
    Timeout(Duration),
}

/// A word one thread parks on and another wakes it through: the thread
/// clears it, checks its condition, and sleeps while it reads 0
/// ([`park`](Self::park)); the waker sets it to 1 and wakes the thread
/// ([`IoQueue::wake`], or [`wake`](Self::wake) alone). A wake that lands
/// between the clear and the sleep is not lost: the sleep returns at once.
#[derive(Debug, Default)]
pub struct WakeWord(AtomicU32);

impl WakeWord {
    /// Clear the word before checking the condition waited for.
    pub fn clear(&self) {
        self.0.store(0, Ordering::SeqCst);
    }

    /// Sleep until the word is set (or spuriously). Cost: one futex wait
    /// (no syscall if the word is already set).
    pub fn park(&self) {
        atomic_wait::wait(&self.0, 0);
    }

    /// Whether the word is set (a wake came since the last clear).
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst) != 0
    }

    /// Set the word without waking anyone: the first half of a wake whose
    /// second half ([`wake_set`](Self::wake_set) or a queue's) follows.
    pub fn set(&self) {
        self.0.store(1, Ordering::SeqCst);
    }

    /// Wake the thread parked on a word already [`set`](Self::set). Cost:
    /// one futex wake syscall.
    pub fn wake_set(&self) {
        atomic_wait::wake_one(&self.0);
    }

    /// Wake the threads parked on `words`, each already set: one futex
    /// wake syscall per word. The fallback of every batched wake.
    pub fn wake_each(words: &[Arc<WakeWord>]) {
        words.iter().for_each(|w| w.wake_set());
    }

    /// Set the word and wake its thread. Cost: one syscall.
    pub fn wake(&self) {
        self.set();
        self.wake_set();
    }

    /// The word's address, for a kernel that wakes it (io_uring).
    #[cfg(target_os = "linux")]
    pub(crate) fn as_ptr(&self) -> *const u32 {
        self.0.as_ptr().cast_const()
    }
}

/// Which [`IoQueue`] implementation to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// io_uring, several operations in flight (Linux only).
    Uring,
    /// Blocking syscalls on the calling thread, one operation at a time.
    Threaded,
}

/// The submission/completion interface the engine's I/O thread drives.
///
/// An implementation is owned by exactly one thread (it is `Send`, not
/// shared). Operations pushed are started at the next [`run`](Self::run);
/// their completions are collected with [`pop`](Self::pop). Dropping the
/// queue waits for every operation still in the kernel, so no buffer is
/// freed under a pending I/O.
pub trait IoQueue: Send {
    /// Queue `op` under the caller's `id`; it starts at the next `run`.
    /// Cost: no syscall, no allocation once warm.
    fn push(&mut self, id: u64, op: Op);
    /// Start everything queued, then sleep as `wait` allows. An error here
    /// is a failure of the queue itself (not of an operation, which is
    /// reported in its completion).
    fn run(&mut self, wait: Wait) -> io::Result<()>;
    /// The next finished operation, if any.
    fn pop(&mut self) -> Option<Completion>;
    /// Operations pushed whose completion has not been popped yet.
    fn in_flight(&self) -> usize;
    /// What this queue is.
    fn kind(&self) -> QueueKind;
    /// Say whether the caller's load is one operation at a time with
    /// nothing else to do meanwhile (a lone producer waiting for its
    /// record). A queue may then perform a lone operation inside the next
    /// [`run`](Self::run), blocking, instead of asynchronously: the
    /// result and its [`Completion`] are the same, only the cost differs.
    /// Default: ignored (the threaded queue always blocks).
    fn set_lone(&mut self, lone: bool) {
        let _ = lone;
    }
    /// Register `bufs` with the kernel for the queue's lifetime, so that
    /// writes from them skip pinning their pages on every submission. The
    /// queue keeps their memory allocated until it is dropped, even if a
    /// buffer is dropped first. Best effort: returns whether it happened
    /// (a queue without the feature, an old kernel or a locked-memory
    /// limit all mean plain writes, with the same results). Cost: one
    /// syscall; call once, before pushing writes.
    fn register_buffers(&mut self, bufs: &[&AlignedBuf]) -> bool {
        let _ = bufs;
        false
    }
    /// Wake the threads parked on `words`, each already
    /// [`set`](WakeWord::set), before this returns or with the queue's
    /// next submission (never later than the next [`run`](Self::run)).
    /// Cost here: one futex wake syscall per word; io_uring submits them
    /// all in one `io_uring_enter`.
    fn wake(&mut self, words: Vec<Arc<WakeWord>>) {
        WakeWord::wake_each(&words);
    }
}

/// Build a queue of `kind` with room for `depth` operations in flight,
/// woken by `notifier`.
///
/// Call this on the thread that will drive the queue: the io_uring is
/// created single-issuer, bound to its creating thread.
pub fn new_queue(
    kind: QueueKind,
    depth: usize,
    notifier: Arc<Notifier>,
) -> io::Result<Box<dyn IoQueue>> {
    match kind {
        #[cfg(target_os = "linux")]
        QueueKind::Uring => Ok(Box::new(crate::uring::UringQueue::new(depth, notifier)?)),
        #[cfg(not(target_os = "linux"))]
        QueueKind::Uring => {
            let _ = (depth, notifier);
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring is only available on Linux",
            ))
        }
        QueueKind::Threaded => Ok(Box::new(crate::threaded::ThreadedQueue::new(notifier))),
    }
}
