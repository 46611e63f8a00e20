//! The log's blocking calls for async callers (feature `tokio`): open,
//! close, point reads and checkpoints, each run on tokio's blocking pool
//! (`tokio::task::spawn_blocking`), so that the executor's threads never
//! wait for a disk.
//!
//! Everything else async callers need works on any executor and lives
//! beside its blocking twin: `Wal::append_async`, `Ticket::reached`,
//! `Wal::wait_for`, `Wal::sync_async`, `Follower` as a `Stream`, the
//! channel API's `send_async` and `AckStream`. Architecture invariant:
//! this is the only module that knows tokio, and it adds no engine logic:
//! each function here is its blocking twin moved to the pool.

use std::future::Future;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::{Error, Lsn, Result};
use crate::layers::collector::Collector;
use crate::read::reader::Record;
use crate::recovery::RecoveryReport;
use crate::wal::{self, Wal};
use crate::write::retention::{self, Recycle};

/// Run `f` on tokio's blocking pool and hand back what it returns. A
/// panic in `f` unwinds out of the await, as it would out of the blocking
/// call; a pool that shut down before `f` ran is an [`Error::Io`] naming
/// `dir`.
///
/// # Panics
///
/// When first polled outside a tokio runtime (as `spawn_blocking` does).
async fn on_pool<T: Send + 'static>(
    dir: PathBuf,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::io(
            dir,
            std::io::Error::other("the runtime shut down before the blocking call ran"),
        )),
    }
}

impl Wal {
    /// [`open`](Self::open) on tokio's blocking pool: recovery reads every
    /// segment and may write and sync files, which must not hold up an
    /// executor's thread. Same guarantees and errors as `open`.
    ///
    /// Needs the `tokio` feature.
    ///
    /// Cost: as `open`, on one blocking-pool thread (tokio starts one if
    /// none is idle), plus one task hand-off each way. The call runs when
    /// the future is first polled; dropping the future after that does not
    /// stop it (a log it opened is then closed on the pool).
    ///
    /// ```
    /// use ringwal::{Config, Level, Wal};
    ///
    /// # let tmp = tempfile::tempdir()?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// rt.block_on(async {
    ///     let (wal, _report) = Wal::open_async(tmp.path().join("wal"), Config::default()).await?;
    ///     wal.append_async(0, b"kept").await?.reached(Level::Durable).await?;
    ///     wal.close_async().await
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn open_async(
        dir: impl AsRef<Path>,
        cfg: Config,
    ) -> impl Future<Output = Result<(Wal, RecoveryReport)>> + Send + 'static {
        let dir = dir.as_ref().to_path_buf();
        on_pool(dir.clone(), move || Wal::open(dir, cfg))
    }

    /// [`close`](Self::close) on tokio's blocking pool: the drain, the
    /// last sync and the join of the ring thread wait for the disk. Same
    /// guarantees and errors as `close`.
    ///
    /// Needs the `tokio` feature.
    ///
    /// Dropping a `Wal` closes it too, blocking the dropping thread: in
    /// async code, close it with this instead. Cost: as `close`, on one
    /// blocking-pool thread. Dropping the future does not stop the close.
    ///
    /// # Errors
    ///
    /// As [`close`](Self::close).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn close_async(self) -> impl Future<Output = Result<()>> + Send + 'static {
        on_pool(self.dir().to_path_buf(), move || self.close())
    }

    /// [`read`](Self::read) on tokio's blocking pool: the read may miss
    /// the page cache and wait for the disk. Same errors as `read`.
    ///
    /// Needs the `tokio` feature.
    ///
    /// Cost: as `read` (one read of up to 1 MiB, one allocation), on one
    /// blocking-pool thread, plus one `Arc` clone. For many records in
    /// order, stream a [`follow`](Self::follow)er or use one
    /// [`reader_from`](Self::reader_from) on the pool instead.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn read_async(
        &self,
        lsn: Lsn,
    ) -> impl Future<Output = Result<Record>> + Send + 'static + use<> {
        let shared = self.shared().clone();
        on_pool(self.dir().to_path_buf(), move || {
            let rec = wal::read(&shared, lsn)?;
            assert_eq!(rec.lsn, lsn, "a read answers the LSN asked for");
            Ok(rec)
        })
    }

    /// [`checkpoint`](Self::checkpoint) on tokio's blocking pool: its
    /// unlinks, renames and directory fsync wait for the disk. Same
    /// guarantees and errors as `checkpoint`.
    ///
    /// Needs the `tokio` feature.
    ///
    /// Cost: as `checkpoint`, on one blocking-pool thread, plus one `Arc`
    /// clone. Dropping the future does not stop the checkpoint.
    ///
    /// # Errors
    ///
    /// As [`checkpoint`](Self::checkpoint).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn checkpoint_async(
        &self,
        up_to: Lsn,
    ) -> impl Future<Output = Result<usize>> + Send + 'static + use<> {
        let shared = self.shared().clone();
        on_pool(self.dir().to_path_buf(), move || {
            retention::checkpoint(&shared, up_to, Recycle::Yes)
        })
    }
}

impl Collector {
    /// [`truncate`](Self::truncate) on tokio's blocking pool, as
    /// [`Wal::checkpoint_async`]. The clamp to what the collector covers
    /// is taken when this is called.
    ///
    /// Needs the `tokio` feature.
    ///
    /// # Errors
    ///
    /// As [`truncate`](Self::truncate).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn truncate_async(
        &self,
        covered: Lsn,
    ) -> impl Future<Output = Result<usize>> + Send + 'static + use<> {
        let up_to = self.truncation_point(covered);
        let checkpoint = up_to.map(|lsn| self.wal().checkpoint_async(lsn));
        async move {
            match checkpoint {
                Some(c) => c.await,
                None => Ok(0),
            }
        }
    }

    /// [`close`](Self::close) on tokio's blocking pool, as
    /// [`Wal::close_async`].
    ///
    /// Needs the `tokio` feature.
    ///
    /// # Errors
    ///
    /// As [`close`](Self::close).
    ///
    /// # Panics
    ///
    /// When first polled outside a tokio runtime.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn close_async(self) -> impl Future<Output = Result<()>> + Send + 'static {
        on_pool(self.wal().dir().to_path_buf(), move || self.close())
    }
}
