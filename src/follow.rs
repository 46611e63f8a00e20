//! Tailing: a reader that, at the end of the written data, waits for more.
//!
//! Architecture invariant: no second walk. A `Follower` is a `Reader`
//! extended in place to each new written watermark (the walker reads on
//! from where it stopped, rolls included), waiting in between on the same
//! waiter registry tickets use.

use std::sync::Arc;

use crate::config::Level;
use crate::error::{Error, Result};
use crate::reader::{Reader, Record};
use crate::state::Shared;
use crate::ticket::{Ticket, TicketFuture};

/// Every record from a starting LSN on, in order, for as long as the log
/// is open: at the end of the written data it waits for the next record
/// to be written, then reads on, across segment rolls. Replication and
/// raft followers read the log this way.
///
/// As an `Iterator`, `next` blocks; [`next_async`](Self::next_async) waits
/// without blocking a thread (the read itself still goes through the page
/// cache on the calling thread). Records are yielded once they are
/// written (level `Written`), which in durable mode means durable.
///
/// Ends with one `Err` if records it would read were checkpointed away
/// before it got to them (`Gap`), on damage (`Corrupt`), or if the log is
/// poisoned; then `None`. Ends with `None` once the log is closed.
///
/// Cost: as a [`Reader`] while records are there; at the end, one wait on
/// the watermark (no polling), then one read of the block it stopped in
/// and one copy of the segment list.
pub struct Follower {
    reader: Reader,
    shared: Arc<Shared>,
    ended: bool,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("next_lsn", &self.reader.next_lsn())
            .field("ended", &self.ended)
            .finish()
    }
}

impl Follower {
    pub(crate) fn new(reader: Reader, shared: Arc<Shared>) -> Follower {
        Follower {
            reader,
            shared,
            ended: false,
        }
    }

    /// The LSN of the next record it yields.
    pub fn next_lsn(&self) -> u64 {
        self.reader.next_lsn()
    }

    /// The next record, waiting without blocking a thread while there is
    /// none yet. `None` once the log is closed or after an error.
    pub async fn next_async(&mut self) -> Option<Result<Record>> {
        loop {
            match self.ready()? {
                Some(r) => return Some(r),
                None => {
                    let wait = TicketFuture::new(
                        self.shared.clone(),
                        self.reader.next_lsn(),
                        Level::Written,
                    );
                    let waited = wait.await;
                    if let Some(end) = self.waited(waited) {
                        return end;
                    }
                }
            }
        }
    }

    /// A record already written (`Some(Some(..))`), nothing yet
    /// (`Some(None)`), or the end (`None`).
    fn ready(&mut self) -> Option<Option<Result<Record>>> {
        if self.ended {
            return None;
        }
        match self.reader.next() {
            Some(Ok(r)) => Some(Some(Ok(r))),
            Some(Err(e)) => {
                self.ended = true;
                Some(Some(Err(e)))
            }
            None => Some(None),
        }
    }

    /// After a wait: read on, or the end it brought.
    fn waited(&mut self, waited: Result<()>) -> Option<Option<Result<Record>>> {
        match waited {
            Ok(()) => {}
            Err(Error::Closed) => {
                self.ended = true;
                return Some(None);
            }
            Err(e) => {
                self.ended = true;
                return Some(Some(Err(e)));
            }
        }
        // The watermark first: a segment is listed before anything in it
        // is written (as `Wal::reader_from` relies on too).
        let upto = self.shared.acks.written();
        let segments = self
            .shared
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Err(e) = self.reader.extend(upto, &segments) {
            self.ended = true;
            return Some(Some(Err(e)));
        }
        None
    }
}

impl Iterator for Follower {
    type Item = Result<Record>;

    /// The next record, blocking while there is none yet.
    fn next(&mut self) -> Option<Result<Record>> {
        loop {
            match self.ready()? {
                Some(r) => return Some(r),
                None => {
                    let ticket = Ticket {
                        lsn: self.reader.next_lsn(),
                        shared: self.shared.clone(),
                    };
                    if let Some(end) = self.waited(ticket.wait(Level::Written)) {
                        return end;
                    }
                }
            }
        }
    }
}
