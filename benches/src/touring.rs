//! tokio-uring as a user would use it for a durable log: each record is one
//! `write_all_at` followed by one `sync_data`, on a preallocated,
//! zero-written file, offsets claimed in order from a shared counter.
//!
//! The runtime is single-threaded, so producers are tasks rather than
//! threads. Closed loop: one task per producer. Open loop: a plain thread
//! keeps the schedule (the same sleep-until-due as the thread pool the
//! other systems get, so harness lateness is alike) and hands each due slot
//! to the runtime, which spawns a task for it.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::load::{Part, Schedule};
use crate::measure::{histogram, record, sleep_until, Raw, Window};
use crate::progress;
use crate::systems::frame_into;

/// Claim `len` bytes of the circular file.
fn claim(next: &Cell<u64>, len: usize, file_bytes: u64) -> u64 {
    let mut at = next.get();
    if at + len as u64 > file_bytes {
        at = 0;
    }
    next.set(at + len as u64);
    at
}

async fn one_record(
    file: &tokio_uring::fs::File,
    next: &Cell<u64>,
    file_bytes: u64,
    payload: &[u8],
    mut buf: Vec<u8>,
) -> (io::Result<()>, Vec<u8>) {
    buf.clear();
    frame_into(&mut buf, payload);
    let at = claim(next, buf.len(), file_bytes);
    let (res, buf) = file.write_all_at(buf, at).await;
    if let Err(e) = res {
        return (Err(e), buf);
    }
    (file.sync_data().await, buf)
}

fn open_std(path: &Path) -> io::Result<File> {
    File::options().write(true).open(path)
}

/// `producers` tasks in a closed loop for the window `w`.
pub fn closed(
    path: &Path,
    file_bytes: u64,
    producers: usize,
    payload: &[u8],
    w: Window,
) -> io::Result<Raw> {
    let std_file = open_std(path)?;
    let run = move || -> io::Result<(Histogram<u64>, u64)> {
        tokio_uring::start(async move {
            let file = Rc::new(tokio_uring::fs::File::from_std(std_file));
            let next = Rc::new(Cell::new(0u64));
            let payload: Rc<[u8]> = payload.into();
            let tasks: Vec<_> = (0..producers)
                .map(|_| {
                    let (file, next, payload) = (file.clone(), next.clone(), payload.clone());
                    tokio_uring::spawn(async move {
                        let mut hist = histogram();
                        let mut ops = 0u64;
                        let mut buf = Vec::with_capacity(payload.len() + 8);
                        loop {
                            let t0 = Instant::now();
                            if t0 >= w.end {
                                return Ok::<_, io::Error>((hist, ops));
                            }
                            let (res, b) =
                                one_record(&file, &next, file_bytes, &payload, buf).await;
                            buf = b;
                            res?;
                            let t1 = Instant::now();
                            if w.counts(t0, t1) {
                                record(&mut hist, t1 - t0);
                                ops += 1;
                            }
                            progress::tick(1);
                        }
                    })
                })
                .collect();
            let mut all = histogram();
            let mut ops = 0;
            for t in tasks {
                let (h, n) = t.await.map_err(|e| io::Error::other(e.to_string()))??;
                all.add(&h).expect("same bounds");
                ops += n;
            }
            Ok((all, ops))
        })
    };
    let (res, cpu) = std::thread::scope(|s| {
        let h = s.spawn(run);
        let cpu = w.cpu_during();
        let res = h
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("tokio-uring thread panicked")));
        (res, cpu)
    });
    let (hist, ops) = res?;
    Ok(Raw {
        ops,
        bytes: ops * payload.len() as u64,
        elapsed: w.len(),
        cpu,
        hist,
        missed: 0,
        note: None,
        late: None,
    })
}

struct Tally {
    part: Part,
    error: Option<io::Error>,
}

/// Open loop at `rate` records/s.
pub fn open(
    path: &Path,
    file_bytes: u64,
    rate: f64,
    payload: &[u8],
    warmup: Duration,
    secs: Duration,
) -> io::Result<Raw> {
    let std_file = open_std(path)?;
    let sched = Schedule::new(rate, warmup, secs);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    type Out = (Histogram<u64>, Histogram<u64>, u64);
    let run = move || -> io::Result<Out> {
        tokio_uring::start(async move {
            let file = Rc::new(tokio_uring::fs::File::from_std(std_file));
            let next = Rc::new(Cell::new(0u64));
            let payload: Rc<[u8]> = payload.into();
            let tally = Rc::new(RefCell::new(Tally {
                part: Part::new(),
                error: None,
            }));
            let mut tasks = Vec::new();
            while let Some(i) = rx.recv().await {
                if sched.past_grace() || tally.borrow().error.is_some() {
                    break;
                }
                let (file, next, payload, tally) =
                    (file.clone(), next.clone(), payload.clone(), tally.clone());
                tasks.push(tokio_uring::spawn(async move {
                    let due = sched.due(i);
                    let sent = Instant::now();
                    let buf = Vec::with_capacity(payload.len() + 8);
                    let (res, _) = one_record(&file, &next, file_bytes, &payload, buf).await;
                    let mut t = tally.borrow_mut();
                    match res {
                        Ok(()) => t.part.durable(&sched, i, due, sent),
                        Err(e) => t.error = Some(e),
                    }
                }));
            }
            for t in tasks {
                t.await.map_err(|e| io::Error::other(e.to_string()))?;
            }
            let mut t = tally.borrow_mut();
            if let Some(e) = t.error.take() {
                return Err(e);
            }
            let p = std::mem::replace(&mut t.part, Part::new());
            Ok((p.hist, p.late, p.ops))
        })
    };
    let (res, cpu) = std::thread::scope(|s| {
        let h = s.spawn(run);
        s.spawn(move || {
            let mut i = 0u64;
            while !sched.stops_at(i) {
                sleep_until(sched.due(i));
                if tx.send(i).is_err() {
                    break;
                }
                i += 1;
            }
        });
        let cpu = sched.window.cpu_during();
        let res = h
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("tokio-uring thread panicked")));
        (res, cpu)
    });
    let (hist, late, ops) = res?;
    Ok(sched.raw(ops, payload.len(), cpu, hist, late))
}
