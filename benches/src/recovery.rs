//! Recovery: write a log of a given size, close it, then time what a
//! restart costs (`Wal::open`, which scans and verifies every segment, plus
//! one full `reader_from(0)` pass that hands back every record) against a
//! plain sequential read of the same files. The page cache is dropped
//! before each timed read when the harness runs as root.
//!
//! Fairness: the raw read gets the same readahead hint the engine's scan
//! gives itself (sequential), so the ratio measures what checking and
//! handing out records cost, not which of the two asked the kernel for a
//! larger readahead window. The two reads alternate which goes first from
//! one pass to the next, so neither always meets the machine just after
//! the cache drop and the writeback that precede the pass.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::measure::process_cpu;
use crate::progress;

fn rw_err(e: ringwal::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// What was written.
#[derive(Clone, Debug, Serialize)]
pub struct Filled {
    pub records: u64,
    pub payload_bytes: u64,
    /// Bytes the log wrote (frames, padding, segment headers).
    pub log_bytes: u64,
    pub segments: usize,
    pub fill_secs: f64,
}

/// Fill `dir` with at least `target` log bytes of `size`-byte records from
/// two producers. Written mode: the layout on disk is the same as in
/// durable mode (the same batches, frames and padding), and the fill is
/// not what is measured.
pub fn fill(dir: &Path, target: u64, size: usize) -> io::Result<Filled> {
    let cfg = ringwal::Config::builder()
        .durability(ringwal::Durability::Deferred {
            sync_interval: None,
        })
        .build();
    let (wal, _) = ringwal::Wal::open(dir, cfg).map_err(rw_err)?;
    let payload = {
        let mut p = vec![0u8; size];
        crate::floor::fill_random(&mut p);
        p
    };
    let t0 = Instant::now();
    let stop = AtomicBool::new(false);
    let records = AtomicU64::new(0);
    let result: io::Result<()> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| -> io::Result<()> {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // Wait for the write now and then so the staging
                        // buffers (not the harness) set the pace.
                        let t = wal.append(0, &payload).map_err(rw_err)?;
                        n += 1;
                        if n.is_multiple_of(256) {
                            t.wait(ringwal::Level::Written).map_err(rw_err)?;
                            progress::tick(256);
                            if wal.stats().write_bytes >= target {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    records.fetch_add(n, Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("fill thread panicked")))?;
        }
        Ok(())
    });
    result?;
    wal.sync().map_err(rw_err)?;
    let stats = wal.stats();
    wal.close().map_err(rw_err)?;
    let segments = segment_files(dir)?.len();
    let records = records.into_inner();
    Ok(Filled {
        records,
        payload_bytes: records * size as u64,
        log_bytes: stats.write_bytes + segments as u64 * ringwal::format::BLOCK as u64,
        segments,
        fill_secs: t0.elapsed().as_secs_f64(),
    })
}

/// The node-1 segment files in `dir`, oldest first.
pub fn segment_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v: Vec<(u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        if let Some((1, base)) = name
            .to_str()
            .and_then(ringwal::format::parse_segment_file_name)
        {
            v.push((base, e.path()));
        }
    }
    v.sort();
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// Flush dirty pages and drop the page cache. False when not permitted
/// (not root, or a container without /proc/sys write access).
pub fn drop_caches() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// One timed pass of each.
#[derive(Clone, Debug, Serialize)]
pub struct Pass {
    /// Sequential read of every segment file, whole, 1 MiB at a time.
    pub raw_bytes: u64,
    pub raw_secs: f64,
    /// `Wal::open` alone (recovery scan).
    pub open_secs: f64,
    /// `Wal::open` plus the full reader pass.
    pub replay_secs: f64,
    /// CPU time (user + system, every thread of the harness) of the raw
    /// read, of `Wal::open`, and of `Wal::open` plus the reader pass: what
    /// wall time exceeds them is waiting for the device (or for a CPU).
    pub raw_cpu_secs: f64,
    pub open_cpu_secs: f64,
    pub replay_cpu_secs: f64,
    pub replay_records: u64,
    pub replay_payload_bytes: u64,
    /// Whether the replay ran before the raw read in this pass.
    pub replay_first: bool,
}

/// Read every segment file start to end with plain buffered reads, each
/// file marked sequential as the engine's scan marks it.
pub fn raw_read(files: &[PathBuf]) -> io::Result<(u64, f64, f64)> {
    let mut buf = vec![0u8; 1 << 20];
    let c0 = process_cpu();
    let t0 = Instant::now();
    let mut total = 0u64;
    for p in files {
        let mut f = File::open(p)?;
        // A hint, as in the engine: a refusal only makes the read slower.
        let _ = ringwal_platform::file::advise(&f, 0, 0, ringwal_platform::Advice::Sequential);
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok((total, secs, (process_cpu() - c0).as_secs_f64()))
}

/// What one open + replay did and took.
pub struct Replayed {
    pub records: u64,
    pub payload_bytes: u64,
    pub open_secs: f64,
    pub total_secs: f64,
    pub open_cpu_secs: f64,
    pub total_cpu_secs: f64,
}

/// Open the log and read every record back; the close afterwards is not
/// timed.
pub fn replay(dir: &Path) -> io::Result<Replayed> {
    let c0 = process_cpu();
    let t0 = Instant::now();
    let (wal, report) = ringwal::Wal::open(dir, ringwal::Config::default()).map_err(rw_err)?;
    let opened = t0.elapsed().as_secs_f64();
    let open_cpu = process_cpu() - c0;
    let mut records = 0u64;
    let mut bytes = 0u64;
    for r in wal.reader_from(0).map_err(rw_err)? {
        let r = r.map_err(rw_err)?;
        records += 1;
        bytes += r.payload.len() as u64;
        if records.is_multiple_of(65536) {
            progress::tick(65536);
        }
    }
    let total = t0.elapsed().as_secs_f64();
    let total_cpu = process_cpu() - c0;
    if records != report.records {
        return Err(io::Error::other(format!(
            "reader returned {records} records, recovery counted {}",
            report.records
        )));
    }
    wal.close().map_err(rw_err)?;
    Ok(Replayed {
        records,
        payload_bytes: bytes,
        open_secs: opened,
        total_secs: total,
        open_cpu_secs: open_cpu.as_secs_f64(),
        total_cpu_secs: total_cpu.as_secs_f64(),
    })
}

/// One pass of each, each after dropping the page cache (when allowed)
/// and calling `before` (the harness waits for the machine to go quiet),
/// the replay first when `replay_first`. Returns the pass and whether the
/// cache was dropped both times.
pub fn pass(dir: &Path, replay_first: bool, before: impl Fn()) -> io::Result<(Pass, bool)> {
    let files = segment_files(dir)?;
    let mut dropped = true;
    let mut raw = None;
    let mut rep = None;
    for replay_now in [replay_first, !replay_first] {
        before();
        dropped &= drop_caches();
        if replay_now {
            rep = Some(replay(dir)?);
        } else {
            raw = Some(raw_read(&files)?);
        }
    }
    let (raw_bytes, raw_secs, raw_cpu_secs) = raw.expect("ran above");
    let r = rep.expect("ran above");
    Ok((
        Pass {
            raw_bytes,
            raw_secs,
            open_secs: r.open_secs,
            replay_secs: r.total_secs,
            raw_cpu_secs,
            open_cpu_secs: r.open_cpu_secs,
            replay_cpu_secs: r.total_cpu_secs,
            replay_records: r.records,
            replay_payload_bytes: r.payload_bytes,
            replay_first,
        },
        dropped,
    ))
}
