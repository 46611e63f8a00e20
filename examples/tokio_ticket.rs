//! Awaiting a ticket on tokio.
//!
//! `Ticket::reached(level)` is an executor-agnostic future: it registers
//! the task's waker with the log, and the ring thread wakes it when the
//! record reaches the level. So a single-threaded runtime can have
//! thousands of appends in flight without a thread per wait.
//!
//! Opening and closing the log read and sync files, so they go through
//! `spawn_blocking` (with `--features tokio`, `Wal::open_async` and
//! `Wal::close_async` do that). `append_async` only copies the record into
//! a staging buffer; when every buffer is full (device backpressure) it
//! awaits a free one, woken by the ring thread, so no runtime thread is
//! ever parked. docs/async.md lists what blocks and what not.
//!
//! ```sh
//! cargo run --example tokio_ticket
//! ```

use std::sync::Arc;
use std::time::Instant;

use ringwal::{Config, Durability, Level, Wal};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_path_buf();
    // Acknowledge at Written on the hot path; sync in the background.
    let cfg = Config::builder()
        .durability(Durability::Deferred {
            sync_interval: Some(std::time::Duration::from_millis(50)),
        })
        .build();
    let (wal, report) = tokio::task::spawn_blocking(move || Wal::open(path, cfg)).await??;
    println!(
        "opened {} (recovered {} records)",
        dir.path().display(),
        report.records
    );
    let wal = Arc::new(wal);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..64u16 {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100u32 {
                let body = format!("task {task} record {i}");
                let ticket = wal.append_async(task % 4, body.as_bytes()).await?;
                ticket.reached(Level::Written).await?;
            }
            // One durable point per task: the first waiter asks the ring for
            // a sync and every concurrent waiter shares it.
            let last = wal.append_async(task % 4, b"checkpoint").await?;
            last.reached(Level::Durable).await?;
            Ok::<u64, ringwal::Error>(last.lsn())
        }));
    }
    let mut highest = 0;
    for t in tasks {
        highest = highest.max(t.await??);
    }
    println!(
        "64 tasks on one thread: {} records written, durable up to LSN {} in {:?} ({} syncs)",
        wal.stats().next_lsn - 1,
        highest,
        started.elapsed(),
        wal.stats().syncs
    );
    assert!(wal.durable_lsn() >= highest);

    let wal = Arc::into_inner(wal).expect("every task is done");
    tokio::task::spawn_blocking(move || wal.close()).await??;
    Ok(())
}
