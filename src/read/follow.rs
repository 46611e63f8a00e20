//! Tailing: a reader that, at the end of the written data, waits for more.
//!
//! Architecture invariant: no second walk. Both followers are a `Reader`
//! extended in place (the walker reads on from where it stopped, rolls
//! included) through one `Tail`; they differ only in how they wait. A
//! `Follower` of this process's log waits on the same waiter registry
//! tickets use; a `DirFollower` of a log another process writes polls
//! the directory, the only signal it has.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use ringwal_platform::Vfs;

use crate::config::Level;
use crate::error::{Error, Lsn, Result};
use crate::read::reader::{Reader, Record};
use crate::scan;
use crate::segment::set::{LogDir, SegmentFile};
use crate::write::shared::Shared;
use crate::write::ticket::{Ticket, TicketFuture};

/// A reader that is read on after each wait, and ends after its first
/// error.
struct Tail {
    reader: Reader,
    ended: bool,
}

impl Tail {
    /// A record already there (`Some(Some(..))`), nothing yet
    /// (`Some(None)`), or the end (`None`).
    fn ready(&mut self) -> Option<Option<Result<Record>>> {
        if self.ended {
            return None;
        }
        let before = self.reader.next_lsn();
        match self.reader.next() {
            Some(Ok(r)) => {
                debug_assert!(
                    r.lsn >= before && self.reader.next_lsn() > r.lsn,
                    "a follower never yields an LSN twice"
                );
                Some(Some(Ok(r)))
            }
            Some(Err(e)) => {
                self.ended = true;
                Some(Some(Err(e)))
            }
            None => Some(None),
        }
    }

    /// The next record, calling `wait(next_lsn)` whenever there is none
    /// yet; `wait` returns the watermark to read on to and the log's
    /// segments, or the error that ends the tail.
    fn next_blocking(
        &mut self,
        mut wait: impl FnMut(Lsn) -> Result<(Lsn, Vec<SegmentFile>)>,
    ) -> Option<Result<Record>> {
        loop {
            match self.ready()? {
                Some(r) => return Some(r),
                None => {
                    let waited = wait(self.reader.next_lsn());
                    if let Some(end) = self.read_on(waited) {
                        return end;
                    }
                }
            }
        }
    }

    /// After a wait: read on up to `upto` through `segments` (the log's
    /// list now), or yield the end the wait brought.
    fn read_on(
        &mut self,
        waited: Result<(Lsn, Vec<SegmentFile>)>,
    ) -> Option<Option<Result<Record>>> {
        let extended = waited.and_then(|(upto, segments)| self.reader.extend(upto, &segments));
        match extended {
            Ok(()) => None,
            Err(Error::Closed) => {
                self.ended = true;
                Some(None)
            }
            Err(e) => {
                self.ended = true;
                Some(Some(Err(e)))
            }
        }
    }
}

/// Every record from a starting LSN on, in order, for as long as the log
/// is open: at the end of the written data it waits for the next record
/// to be written, then reads on, across segment rolls. Replication and
/// raft followers read the log this way.
///
/// As an `Iterator`, `next` blocks. As a [`Stream`] (and through
/// [`next_async`](Self::next_async)) it waits without blocking a thread:
/// at the end of the written data it registers the task's waker with the
/// log, which the ring thread wakes when the next record is written. The
/// read itself still runs on the polling thread, through the page cache
/// (records just written are there). Both ways yield the same records, in
/// LSN order, once they are written (level `Written`, which in durable
/// mode means durable), and end the same way; they may be mixed.
///
/// Ends with one `Err` if records it would read were checkpointed away
/// before it got to them (`Released`), on damage (`Corrupt`), or if the log is
/// poisoned; then `None`. Ends with `None` once the log is closed.
///
/// Cost: as a [`Reader`] while records are there; at the end, one wait on
/// the watermark (no polling), then one read of the block it stopped in
/// and one copy of the segment list. A pending wait holds one waker in
/// the log, and only while it is pending.
///
/// ```
/// use std::future::poll_fn;
/// use std::pin::Pin;
/// use futures_core::Stream;
/// # use ringwal::{Config, Wal};
/// # let dir = tempfile::tempdir()?;
/// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
/// let mut follower = wal.follow(1)?;
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let first = rt.block_on(async {
///     let waiting = poll_fn(|cx| Pin::new(&mut follower).poll_next(cx));
///     drop(wal.append(0, b"late")?); // written while the stream waits
///     waiting.await.transpose()
/// })?;
/// assert_eq!(first.map(|r| r.payload), Some(b"late".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Follower {
    tail: Tail,
    shared: Arc<Shared>,
    /// The wait for the next record, while a poll found none yet.
    waiting: Option<TicketFuture>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("next_lsn", &self.tail.reader.next_lsn())
            .field("ended", &self.tail.ended)
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl Follower {
    pub(crate) fn new(reader: Reader, shared: Arc<Shared>) -> Follower {
        Follower {
            tail: Tail {
                reader,
                ended: false,
            },
            shared,
            waiting: None,
        }
    }

    /// The LSN of the next record it yields.
    pub fn next_lsn(&self) -> u64 {
        self.tail.reader.next_lsn()
    }

    /// The next record, waiting without blocking a thread while there is
    /// none yet. `None` once the log is closed or after an error. The
    /// [`Stream`] implementation, as a future.
    ///
    /// Cancel-safe: dropping the future loses no record (the wait it was
    /// in stays with the follower, for the next call).
    pub async fn next_async(&mut self) -> Option<Result<Record>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Follower {
    type Item = Result<Record>;

    /// The next record, or `Pending` with the task's waker registered for
    /// the next written watermark while there is none yet.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Record>>> {
        let this = self.get_mut();
        loop {
            if let Some(wait) = &mut this.waiting {
                let waited = std::task::ready!(Pin::new(wait).poll(cx));
                this.waiting = None;
                if let Some(end) = this.tail.read_on(waited.map(|()| written(&this.shared))) {
                    return Poll::Ready(end);
                }
            }
            match this.tail.ready() {
                None => return Poll::Ready(None),
                Some(Some(r)) => return Poll::Ready(Some(r)),
                Some(None) => {
                    let lsn = this.next_lsn();
                    this.waiting =
                        Some(TicketFuture::new(this.shared.clone(), lsn, Level::Written));
                }
            }
        }
    }
}

/// The written watermark and the segments holding everything up to it.
fn written(shared: &Shared) -> (Lsn, Vec<SegmentFile>) {
    // The watermark first: a segment is listed before anything in it is
    // written (as `Wal::reader_from` relies on too).
    let upto = shared.acks().written();
    (upto, shared.segment_list())
}

impl Iterator for Follower {
    type Item = Result<Record>;

    /// The next record, blocking while there is none yet.
    fn next(&mut self) -> Option<Result<Record>> {
        // A wait a stream poll left is this same wait; the thread's own
        // replaces it (its waker is removed).
        self.waiting = None;
        let shared = &self.shared;
        self.tail.next_blocking(|lsn| {
            let ticket = Ticket {
                lsn,
                shared: shared.clone(),
            };
            ticket.wait(Level::Written).map(|()| written(shared))
        })
    }
}

/// Every record of a log directory from a starting LSN on, in order, while
/// another process (or none) writes it: at the end of the valid data it
/// sleeps for its poll interval, lists the directory again and reads on,
/// across rolls. `ringwal cat --follow` is this. Takes no lock and
/// changes nothing, like [`verify::records`](crate::recovery::verify::records).
///
/// A record is yielded once it is on disk in full and every record before
/// it is too (a reader never sees past a write still in flight); in a
/// writer's durable mode that means durable, in written mode it survives
/// a process crash but may not a power loss.
///
/// Never ends on its own while the log is quiet. Ends with one `Err` on
/// damage, or with `Released` when a checkpoint removed records before it read
/// them; then `None`. Before reading on into what its segment grew by,
/// it checks the segment is still listed, so records a checkpoint
/// released are not read through the file it holds open.
///
/// Cost: as a [`Reader`] while records are there; at the end, per poll
/// interval, one read of the block it stopped in and one directory
/// listing (plus one header read when a new segment shows up).
pub struct DirFollower {
    tail: Tail,
    vfs: Arc<dyn Vfs>,
    dir: LogDir,
    every: Duration,
}

impl std::fmt::Debug for DirFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirFollower")
            .field("dir", &self.dir)
            .field("next_lsn", &self.tail.reader.next_lsn())
            .field("every", &self.every)
            .finish()
    }
}

impl DirFollower {
    pub(crate) fn new(
        cfg: &crate::config::Config,
        dir: LogDir,
        from: Lsn,
        every: Duration,
    ) -> Result<DirFollower> {
        let reader = Reader::open_dir(cfg, dir.clone(), from)?.recheck_on_growth();
        Ok(DirFollower {
            tail: Tail {
                reader,
                ended: false,
            },
            vfs: cfg.vfs.clone(),
            dir,
            every,
        })
    }

    /// The LSN of the next record it yields.
    pub fn next_lsn(&self) -> Lsn {
        self.tail.reader.next_lsn()
    }
}

impl Iterator for DirFollower {
    type Item = Result<Record>;

    /// The next record, sleeping and polling while there is none yet.
    fn next(&mut self) -> Option<Result<Record>> {
        let (vfs, dir, every) = (&self.vfs, &self.dir, self.every);
        self.tail.next_blocking(|_| {
            std::thread::sleep(every);
            loop {
                let mut files = dir.list(&**vfs)?.segments;
                match scan::pop_never_written(&**vfs, &mut files, dir.node(), None) {
                    // The newest file listed is gone already: a checkpoint
                    // removed it after the listing (the writer rolled on
                    // meanwhile). The listing is stale; take a new one.
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                    // No watermark to read on to from outside the writer:
                    // the walk itself finds where the written data ends.
                    Ok(_) => return Ok((Lsn::MAX, files)),
                }
            }
        })
    }
}
