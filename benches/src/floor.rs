//! The device floor: what the disk itself does for durable writes, with no
//! log in the way. O_DIRECT + RWF_DSYNC writes of a fixed size at
//! sequential offsets (wrapping) in a preallocated, zero-written file; one
//! at a time through `pwritev2`, or several in flight through the same
//! io_uring queue ringwal uses. Each write's latency runs from its
//! submission to its completion.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use ringwal_platform::{new_queue, AlignedBuf, IoQueue, Notifier, Op, QueueKind, Wait, WriteSync};

use crate::measure::{histogram, record, Raw, Window};
use crate::progress;

/// One write at a time: `pwritev2(RWF_DSYNC)` and wait.
pub fn qd1(file: &File, file_bytes: u64, block: usize, w: Window) -> io::Result<Raw> {
    let mut buf = AlignedBuf::new(block);
    fill_random(buf.as_mut_slice());
    let (res, cpu) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut hist = histogram();
            let mut ops = 0u64;
            let mut off = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= w.end {
                    return Ok((hist, ops));
                }
                if off + block as u64 > file_bytes {
                    off = 0;
                }
                ringwal_platform::file::write_all_at(file, &buf.as_slice()[..block], off, true)?;
                off += block as u64;
                let t1 = Instant::now();
                if w.counts(t0, t1) {
                    record(&mut hist, t1 - t0);
                    ops += 1;
                }
                progress::tick(1);
            }
        });
        let cpu = w.cpu_during();
        let res: io::Result<_> = h
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("floor thread panicked")));
        (res, cpu)
    });
    let (hist, ops) = res?;
    Ok(Raw {
        ops,
        bytes: ops * block as u64,
        elapsed: w.len(),
        cpu,
        hist,
        missed: 0,
        note: None,
        late: None,
    })
}

/// `depth` writes always in flight through ringwal_platform's io_uring
/// queue, each with `WriteSync::Dsync`.
pub fn queued(
    file: File,
    file_bytes: u64,
    block: usize,
    depth: usize,
    w: Window,
) -> io::Result<Raw> {
    let (res, cpu) = std::thread::scope(|s| {
        let h = s.spawn(move || drive_queue(file, file_bytes, block, depth, w));
        let cpu = w.cpu_during();
        let res = h
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("floor thread panicked")));
        (res, cpu)
    });
    let (hist, ops) = res?;
    Ok(Raw {
        ops,
        bytes: ops * block as u64,
        elapsed: w.len(),
        cpu,
        hist,
        missed: 0,
        note: None,
        late: None,
    })
}

/// Sequential offsets (wrapping) and submission times of the writes in
/// flight.
struct Feeder {
    file: Arc<File>,
    file_bytes: u64,
    block: usize,
    started: HashMap<u64, Instant>,
    next_id: u64,
    off: u64,
}

impl Feeder {
    fn submit(&mut self, q: &mut dyn IoQueue, buf: AlignedBuf) {
        if self.off + self.block as u64 > self.file_bytes {
            self.off = 0;
        }
        q.push(
            self.next_id,
            Op::Write {
                file: self.file.clone(),
                buf,
                len: self.block,
                offset: self.off,
                sync: WriteSync::Dsync,
            },
        );
        self.started.insert(self.next_id, Instant::now());
        self.next_id += 1;
        self.off += self.block as u64;
    }
}

fn drive_queue(
    file: File,
    file_bytes: u64,
    block: usize,
    depth: usize,
    w: Window,
) -> io::Result<(hdrhistogram::Histogram<u64>, u64)> {
    // The queue is created on the thread that drives it (single issuer).
    let mut q = new_queue(QueueKind::Uring, depth, Arc::new(Notifier::new()?))?;
    let mut feed = Feeder {
        file: Arc::new(file),
        file_bytes,
        block,
        started: HashMap::with_capacity(depth * 2),
        next_id: 0,
        off: 0,
    };
    let mut hist = histogram();
    let mut ops = 0u64;
    for _ in 0..depth {
        let mut buf = AlignedBuf::new(block);
        fill_random(buf.as_mut_slice());
        feed.submit(q.as_mut(), buf);
    }
    let mut returned = Vec::with_capacity(depth);
    while !feed.started.is_empty() {
        q.run(Wait::Block)?;
        while let Some(c) = q.pop() {
            let t1 = Instant::now();
            let t0 = feed.started.remove(&c.id).expect("every id was started");
            c.result?;
            if w.counts(t0, t1) {
                record(&mut hist, t1 - t0);
                ops += 1;
            }
            progress::tick(1);
            if let Op::Write { buf, .. } = c.op {
                returned.push(buf);
            }
        }
        // Refill with the returned buffers while the window is open.
        for buf in returned.drain(..) {
            if Instant::now() < w.end {
                feed.submit(q.as_mut(), buf);
            }
        }
    }
    Ok((hist, ops))
}

/// Incompressible bytes from a fixed xorshift sequence (no device or
/// filesystem here compresses, but nothing should be able to).
pub fn fill_random(buf: &mut [u8]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}
