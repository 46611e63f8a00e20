//! Reading segment files into the page cache ahead of the recovery scan.
//!
//! Recovery reads every segment once and checks every frame; done on one
//! thread, the disk sits idle while frames are checked and the CPU sits
//! idle while the disk reads, so the two costs add up. A second thread
//! reading the next files front to back (plain reads, which also let the
//! kernel's readahead build large page-cache folios) overlaps them: the
//! scan then copies from the cache instead of waiting for the disk.
//!
//! The prefetcher stays at most [`AHEAD`] files past the one the scan
//! announced last, so it never fills the cache with more than a few
//! segments the scan has not reached. It only ever reads; any error just
//! stops it (the scan meets the same error itself and reports it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use ringwal_platform::{OpenHow, Vfs};

/// Files the prefetcher may run ahead of the scan.
const AHEAD: usize = 2;

/// Bytes per read.
const CHUNK: usize = 1 << 20;

// A window of no files would wait for the scan before every read and
// overlap nothing.
const _: () = assert!(AHEAD > 0, "the prefetcher may run ahead");

/// A background reader of `paths`, in order. Dropping it stops and joins
/// the thread (within one read of at most [`CHUNK`] bytes).
pub(crate) struct Prefetcher {
    at: Sender<usize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// Start reading `paths`. Costs one thread, a 1 MiB buffer, and one
    /// copy of every byte read on that thread; returns `None` if the
    /// thread cannot be started (recovery then simply reads alone).
    pub fn start(vfs: Arc<dyn Vfs>, paths: Vec<PathBuf>) -> Option<Prefetcher> {
        let (at, rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ringwal-prefetch".into())
            .spawn(move || run(&*vfs, &paths, &rx, &flag))
            .ok()?;
        Some(Prefetcher {
            at,
            stop,
            thread: Some(thread),
        })
    }

    /// The scan has reached file `index` of the list.
    pub fn at(&self, index: usize) {
        let _ = self.at.send(index);
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the thread if it waits for the scan to move on.
        let _ = self.at.send(usize::MAX);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(vfs: &dyn Vfs, paths: &[PathBuf], at: &Receiver<usize>, stop: &AtomicBool) {
    let mut scanning = 0usize;
    let mut buf = vec![0u8; CHUNK];
    for (i, path) in paths.iter().enumerate() {
        while i > scanning.saturating_add(AHEAD) {
            match at.recv() {
                Ok(n) => scanning = scanning.max(n),
                Err(_) => return,
            }
        }
        let Ok(file) = vfs.open(path, OpenHow::default()) else {
            return;
        };
        let mut off = 0u64;
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match file.read_at(&mut buf, off) {
                Ok(n) if n > 0 => {
                    debug_assert!(n <= buf.len(), "a read fills at most its buffer");
                    off += n as u64;
                }
                _ => break,
            }
            while let Ok(n) = at.try_recv() {
                scanning = scanning.max(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringwal_platform::RealFs;

    /// It reads every file, stops when dropped mid-way, and never runs more
    /// than `AHEAD` files past the scan (it would block, not finish).
    #[test]
    fn reads_ahead_within_bounds_and_stops_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..6)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, vec![i as u8; 3 * CHUNK / 2]).unwrap();
                p
            })
            .collect();
        let p = Prefetcher::start(RealFs::shared(), paths.clone()).unwrap();
        for i in 0..paths.len() {
            p.at(i);
        }
        drop(p); // joins: the thread finished or stopped

        // Never told to move on: the thread waits after file AHEAD, and a
        // drop still ends it.
        let p = Prefetcher::start(RealFs::shared(), paths).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!p.thread.as_ref().unwrap().is_finished());
        drop(p);
    }
}
