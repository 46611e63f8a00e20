//! `ringwal append`: stdin lines in, LSNs out, in order, as each record
//! reaches the requested level.
//!
//! Two threads: the reader appends each line as soon as it is read and
//! passes the ticket on; the main thread waits for tickets in order and
//! prints each LSN. So records are never appended one at a time behind
//! each other's sync: group commit sees as many as stdin supplies.
//!
//! With `--batch N` the reader gathers N lines and appends them as one
//! atomic batch (a shorter last one at EOF too); the printer waits for the
//! batch's ticket and then prints each of its LSNs, one per line, exactly
//! as if they had been appended alone.

use std::io::{self, BufRead, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use ringwal::{Config, Durability, Level, Lsn, RecoveryReport, Ticket, Wal};

use super::{AppendArgs, CmdResult, Failure, OnFullArg};

/// Says on stderr which LSNs `--on-full drop-oldest` dropped.
struct ReportDrops;

impl ringwal::DurabilityObserver for ReportDrops {
    fn advanced(&self, _written: Lsn, _durable: Lsn) {}

    fn records_dropped(&self, first: Lsn, last: Lsn) {
        eprintln!("ringwal: log at its size limit: dropped LSNs {first}..={last}");
    }
}

/// Tickets the reader may run ahead of the printer; beyond this, stdin is
/// not read until acknowledgements catch up (the log's own staging
/// buffers give backpressure long before, in practice).
const AHEAD: usize = 64 * 1024;

/// What the reader hands the printer: the first LSN of an append (a
/// record alone, or a batch) and the ticket of its last.
type Appended = Result<(Lsn, Ticket), Failure>;

/// Run `ringwal append`.
///
/// Durable level: the default (durable) configuration. Written or
/// accepted: the log runs in written mode and is closed, which syncs it,
/// after the last LSN is printed and before exit 0. On any error the
/// acknowledged LSNs before it have been printed and the error is
/// returned (its status is in `exit.rs`); records read after it are not
/// appended.
pub(crate) fn run(args: AppendArgs) -> CmdResult {
    let level = args.level;
    let mut builder = args
        .key
        .config(args.node)?
        .create_if_missing(!args.no_create)
        .backend(args.backend)
        .compression(args.compress, 256);
    if let Some(bytes) = args.segment_bytes {
        builder = builder.segment_bytes(bytes);
    }
    // Without a limit, the library picks the largest the segment holds.
    if let Some(bytes) = args.max_record_bytes {
        builder = builder.max_record_bytes(bytes);
    }
    if let Some(mode) = args.file_mode {
        // Directories get the same readers, with the search bit.
        let dirs = mode | ((mode & 0o444) >> 2) | 0o700;
        builder = builder.file_mode(mode).dir_mode(dirs);
    }
    if let Some(max) = args.max_log_bytes {
        builder = builder.max_log_bytes(Some(max), args.when_full());
        if args.on_full == OnFullArg::DropOldest {
            builder = builder.observer(Arc::new(ReportDrops));
        }
    }
    if level != Level::Durable {
        builder = builder.durability(Durability::Deferred {
            sync_interval: None,
        });
    }
    let (wal, _) = open(&args.dir, builder.build())?;
    // Said only when it is news: a fallback from what was asked, or a
    // log that cannot be durable. A plain append stays quiet.
    let st = wal.stats();
    let cfg = wal.config();
    let fell_back = (cfg.direct_io() != ringwal::DirectIo::Off && !st.direct_io)
        || cfg.sync_method() != st.sync_method;
    if fell_back {
        eprintln!("ringwal: log: {}", crate::bench::in_force(&st));
    }
    if let Some(w) = crate::bench::memory_warning(&st) {
        eprintln!("ringwal: warning: {w}");
    }
    let wal = Arc::new(wal);
    let (tx, rx) = crossbeam_channel::bounded(AHEAD);
    let reader = {
        let wal = wal.clone();
        let stream = args.stream;
        let batch = args.batch as usize;
        let end = if args.null { b'\0' } else { b'\n' };
        std::thread::Builder::new()
            .name("ringwal-stdin".into())
            .spawn(move || read_and_append(&wal, stream, batch, end, &tx))
            .map_err(|e| Failure::io("spawning the stdin reader", e))?
    };
    // On failure, return at once: the reader may be blocked on stdin, and
    // the process exits with it when `main` returns.
    print_acks(&rx, level, args.json)?;
    // The channel closed cleanly, so the reader reached EOF and has ended.
    let _ = reader.join();
    let wal = Arc::into_inner(wal)
        .ok_or_else(|| Failure::other("internal error: log still shared at exit"))?;
    wal.close()?;
    Ok(ExitCode::SUCCESS)
}

/// Open the log in `dir` for writing, as every writing command does: a
/// path that is a regular file is refused by name (not as an `mkdir`
/// error), damage that keeps the log from opening is status 1, and what
/// recovery did is said on stderr.
pub(crate) fn open(dir: &Path, cfg: Config) -> Result<(Wal, RecoveryReport), Failure> {
    refuse_regular_file(dir, cfg.node())?;
    let (wal, report) = Wal::open(dir, cfg).map_err(Failure::from)?;
    print_recovery(&report);
    Ok((wal, report))
}

/// A log directory path that names something other than a directory is
/// refused as "no log" (status 2), not with whatever error opening a file
/// inside it gives.
pub(crate) fn refuse_regular_file(dir: &Path, node: u32) -> Result<(), Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(Failure::no_log(dir, Some(node)));
    }
    Ok(())
}

/// A cut recovery makes (or would make), as the CLI says it everywhere:
/// `FILE:OFFSET (reason): B bytes zeroed, R records dropped`.
pub(crate) fn describe_cut(t: &ringwal::Truncation) -> String {
    format!(
        "{}:{} ({}): {} bytes zeroed, {} record{} dropped",
        t.file.display(),
        t.offset,
        t.reason,
        t.zeroed,
        t.records_behind,
        if t.records_behind == 1 { "" } else { "s" }
    )
}

/// Say on stderr what recovery did, if it did anything: an operator
/// must be able to see a cut, a discarded file or skipped LSNs without
/// running `verify` first. Nothing is printed for a clean open.
fn print_recovery(r: &RecoveryReport) {
    if let Some(t) = &r.truncated {
        eprintln!("ringwal: recovery: cut a torn tail at {}", describe_cut(t));
    }
    for f in &r.discarded {
        eprintln!("ringwal: recovery: {}: discarded", f.display());
    }
    for f in &r.headers_from_copy {
        eprintln!(
            "ringwal: recovery: {}: header block damaged, read from its copy",
            f.display()
        );
    }
    if r.manifest_rebuilt {
        eprintln!("ringwal: recovery: the manifest did not decode; written anew");
    }
    if let Some((first, last)) = r.skipped {
        eprintln!("ringwal: recovery: LSNs {first}..={last} skipped: never to be handed out again");
    }
}

/// Append every record of stdin, each ended by `end` (`\n`, or NUL with
/// `-0`; the last one may lack it), without its end byte, and send the
/// tickets, in order: each record alone when `batch` is 1, else each
/// `batch` records (and the rest at EOF) as one atomic batch. An error is
/// sent as the last item.
fn read_and_append(wal: &Wal, stream: u16, batch: usize, end: u8, tx: &Sender<Appended>) {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    // Lines of the batch being gathered; `lines[..held]` are in use, the
    // rest are buffers kept for reuse.
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut held = 0;
    let append = |lines: &[Vec<u8>]| -> Appended {
        let t = if let [line] = lines {
            wal.append(stream, line)?
        } else {
            let records: Vec<(u16, &[u8])> = lines.iter().map(|l| (stream, &l[..])).collect();
            wal.append_batch(&records)?
        };
        Ok((t.lsn() + 1 - lines.len() as u64, t))
    };
    loop {
        if held == lines.len() {
            lines.push(Vec::new());
        }
        let line = &mut lines[held];
        line.clear();
        match input.read_until(end, line) {
            Ok(0) => {
                if held > 0 {
                    let _ = tx.send(append(&lines[..held]));
                }
                return;
            }
            Ok(_) => {
                if line.last() == Some(&end) {
                    line.pop();
                }
                held += 1;
                if held < batch {
                    continue;
                }
                let item = append(&lines[..held]);
                held = 0;
                let failed = item.is_err();
                if tx.send(item).is_err() || failed {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = tx.send(Err(Failure::io("stdin", e)));
                return;
            }
        }
    }
}

/// Wait for each ticket in order and print its LSNs (one, or each of a
/// batch's, once the whole batch reached the level), bare or with `json`
/// as `{"lsn":N}`. Output is flushed before every blocking wait, so an
/// LSN never sits in a buffer while its successors are awaited.
fn print_acks(rx: &Receiver<Appended>, level: Level, json: bool) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let flush =
        |out: &mut BufWriter<io::StdoutLock<'_>>| out.flush().map_err(|e| Failure::io("stdout", e));
    loop {
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(TryRecvError::Empty) => {
                flush(&mut out)?;
                match rx.recv() {
                    Ok(item) => item,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        let (first, ticket) = item?;
        if !ticket.is_done(level) {
            flush(&mut out)?;
            ticket.wait(level)?;
        }
        for lsn in first..=ticket.lsn() {
            if json {
                writeln!(out, "{{\"lsn\":{lsn}}}")
            } else {
                writeln!(out, "{lsn}")
            }
            .map_err(|e| Failure::io("stdout", e))?;
        }
    }
    flush(&mut out)
}
