//! Transactions: records staged in the caller's handle and written, at
//! commit, as one atomic batch.
//!
//! Architecture invariant: an open transaction touches neither the log's
//! lock nor its buffers nor its LSNs; only `commit` does, through the one
//! reservation every append goes through. Begin, commit and abort markers
//! are therefore never written: an aborted or unfinished transaction
//! leaves nothing on disk for replay to drop.

use std::ops::Range;
use std::sync::Arc;

use crate::at_rest::format::Kind;
use crate::error::{Error, Result};
use crate::write::reserve::OnFull;
use crate::write::shared::Shared;
use crate::write::ticket::Ticket;

/// A set of records that reach the log all together or not at all.
///
/// Records are copied into the transaction as they are added and written
/// at [`commit`](Self::commit) as one atomic batch: consecutive LSNs in one
/// segment, acknowledged only as a whole, and after any crash recovered
/// whole or not at all. [`abort`](Self::abort), or dropping the
/// transaction, discards them without any I/O; an open transaction costs
/// no log space and holds no lock, so it may stay open as long as the
/// caller likes, across threads and awaits.
///
/// The whole transaction must fit one segment (`TooLarge` at commit
/// otherwise): it is staged in memory, so a transaction is meant for what
/// a storage engine commits at once, not for bulk loads.
///
/// ```
/// # use ringwal::{Config, Level, Wal};
/// # let dir = tempfile::tempdir()?;
/// # let (wal, _) = Wal::open(dir.path(), Config::default())?;
/// let mut tx = wal.begin();
/// tx.append(1, b"debit 10")?;
/// tx.append(2, b"credit 10")?;
/// assert_eq!(tx.len(), 2);
/// let last = tx.commit()?;
/// last.wait(Level::Durable)?;
/// let lsns: Vec<_> = wal.reader_from(0)?.map(|r| r.map(|r| r.lsn)).collect::<Result<_, _>>()?;
/// assert_eq!(lsns, [1, 2]); // consecutive, in one segment
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a transaction writes nothing until it is committed"]
pub struct Transaction {
    shared: Arc<Shared>,
    /// Every staged payload, back to back: one growing allocation rather
    /// than one per record.
    bytes: Vec<u8>,
    records: Vec<(u16, Range<usize>)>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("records", &self.records.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Transaction {
    pub(crate) fn new(shared: Arc<Shared>) -> Transaction {
        Transaction {
            shared,
            bytes: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Stage one record for `stream`. Nothing is written and no LSN is
    /// given until [`commit`](Self::commit).
    ///
    /// Cost: one copy of the payload into the transaction's buffer (which
    /// grows by doubling); no lock, no syscall. Refuses a payload larger
    /// than `Config::max_record_bytes` at once, with `TooLarge`, leaving
    /// the transaction as it was.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] if `payload` exceeds the configured maximum
    /// record size; the transaction is left as it was. That a transaction
    /// fits one segment is checked only at [`commit`](Self::commit).
    pub fn append(&mut self, stream: u16, payload: &[u8]) -> Result<()> {
        let max = self.shared.cfg().max_record_bytes;
        if payload.len() > max {
            return Err(Error::TooLarge {
                len: payload.len(),
                max,
            });
        }
        let start = self.bytes.len();
        debug_assert_eq!(
            self.records.last().map_or(0, |(_, r)| r.end),
            start,
            "each staged record starts where the one before it ends"
        );
        self.bytes.extend_from_slice(payload);
        self.records.push((stream, start..self.bytes.len()));
        Ok(())
    }

    /// Records staged so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True if nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Write every staged record as one atomic batch. The ticket is the
    /// last record's LSN; the first is `ticket.lsn() + 1 - len`.
    ///
    /// Returns at level `Accepted`, like an append; wait on the ticket for
    /// more. `EmptyBatch` if nothing was staged, `TooLarge` if the records
    /// do not fit one segment: in both cases nothing is written. Cost: as
    /// [`Wal::append_batch`](crate::Wal::append_batch), plus one
    /// allocation for the list of records.
    ///
    /// # Errors
    ///
    /// Nothing is written on error; the staged records are dropped with
    /// the transaction.
    ///
    /// - [`Error::EmptyBatch`]: nothing was staged.
    /// - [`Error::TooLarge`]: the records do not fit one segment.
    /// - [`Error::Poisoned`] or [`Error::NoSpace`]: an earlier write or sync
    ///   failed.
    /// - [`Error::Closed`]: the log is shutting down.
    /// - [`Error::LsnExhausted`]: the LSN space is used up.
    pub fn commit(self) -> Result<Ticket> {
        assert_eq!(
            self.records.last().map_or(0, |(_, r)| r.end),
            self.bytes.len(),
            "the staged records cover the staged bytes"
        );
        let records: Vec<(u16, &[u8])> = self
            .records
            .iter()
            .map(|(s, r)| (*s, &self.bytes[r.clone()]))
            .collect();
        Ticket::issue(&self.shared, &records, Kind::Data, OnFull::Wait, |_| {})
    }

    /// Discard every staged record. Nothing was written, so nothing is
    /// undone; dropping the transaction does the same.
    pub fn abort(self) {}
}
