//! Crash loops with real processes and SIGKILL, for the library: this
//! test binary re-executed as a library-level writer, on both backends
//! with small segments so that kills also land in segment rolls, and in
//! one loop checkpointing behind itself so that rolls reuse recycled
//! segments. The loop itself is `common::crash_loop`; the `ringwal
//! append` loops live with the CLI (`cli/tests/cli/crash.rs`).

use std::cell::Cell;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;

use crate::common::crash_loop::{
    assert_whole_groups, crash_loop, crash_loop_checked, kills, temp_root, AckFormat,
};
use crate::common::*;
use rand::Rng;
use ringwal::{Backend, Level, Wal};

/// Kills per loop, for each backend.
const LIBRARY_KILLS: usize = 16;

/// Environment that turns [`crash_child_entry_point`] into a writer.
const CHILD_DIR: &str = "RINGWAL_CRASH_CHILD_DIR";
const CHILD_BACKEND: &str = "RINGWAL_CRASH_CHILD_BACKEND";
const CHILD_LEVEL: &str = "RINGWAL_CRASH_CHILD_LEVEL";
/// When set to N, the child checkpoints everything but its last N
/// acknowledged records as it goes, so rolls reuse recycled segments.
const CHILD_KEEP: &str = "RINGWAL_CRASH_CHILD_KEEP";
/// When set to N, the child commits each N consecutive lines as one
/// transaction instead of appending them one by one.
const CHILD_TX: &str = "RINGWAL_CRASH_CHILD_TX";
/// When set, the child encrypts (key [`sealing`]) and LZ4-compresses.
const CHILD_SEAL: &str = "RINGWAL_CRASH_CHILD_SEAL";

/// The configuration of an encrypting, compressing writer: what the
/// sealed child writes with and what the check reads with.
fn sealing(b: ringwal::ConfigBuilder) -> ringwal::ConfigBuilder {
    let keys = ringwal::StaticKeys::new();
    keys.insert(1, ringwal::Key::new([0x5e; 32]), true);
    b.encryption(std::sync::Arc::new(keys))
        .compression(ringwal::Codec::Lz4, 16)
}

#[test]
fn library_writer_survives_sigkill() {
    library_crash_loop(Level::Durable, kills(LIBRARY_KILLS), None, false);
}

/// The same with payloads compressed and encrypted: every open starts a
/// new segment (an encrypting writer never resumes in an old one), and
/// the check decrypts what it reads back.
#[test]
fn encrypting_writer_survives_sigkill() {
    library_crash_loop(Level::Durable, kills(LIBRARY_KILLS / 2), None, true);
}

/// The same with a writer that checkpoints all but its last 200 records
/// as it goes: segments are deleted and recycled under the kills, and
/// nothing acknowledged above the checkpoints may go missing.
#[test]
fn checkpointing_writer_survives_sigkill() {
    library_crash_loop(Level::Durable, kills(LIBRARY_KILLS), Some(200), false);
}

/// `Written` promises survival of a process crash (not of a power loss),
/// and a SIGKILL is exactly that: the page cache keeps what was written.
#[test]
fn library_writer_in_written_mode_survives_sigkill() {
    library_crash_loop(Level::Written, kills(LIBRARY_KILLS / 2), None, false);
}

/// Transactions of 2 to 8 records (the size drawn per life), committed
/// under the kills: after every kill each one is whole or absent, every
/// acknowledged one is there, and LSNs stay dense.
#[test]
fn transactional_writer_survives_sigkill() {
    let mut rng = seeded_rng("transaction sizes");
    for backend in BACKENDS {
        let sizes: Vec<u64> = (0..kills(LIBRARY_KILLS))
            .map(|_| rng.gen_range(2..=8))
            .collect();
        let life = Cell::new(0);
        let mut whole = 0;
        let root = temp_root();
        let dir = root.path().join("log");
        crash_loop_checked(
            &format!("transaction crash loop ({backend:?})"),
            &dir,
            &cfg(backend),
            AckFormat::Tagged,
            sizes.len(),
            None,
            || {
                let n = sizes[life.get()];
                life.set(life.get() + 1);
                let mut c = child(&dir, backend, Level::Durable);
                c.env(CHILD_TX, n.to_string());
                c
            },
            |iteration, before, after, life| {
                let n = sizes[iteration];
                whole += assert_whole_groups(&dir, iteration, before, after, n);
                // The child acknowledges a transaction only as a whole.
                let first = before.next();
                for &lsn in &life.acked {
                    let start = first + (lsn - first) / n * n;
                    assert!(
                        (start..start + n).all(|l| life.acked.contains(&l)),
                        "iteration {iteration}: LSN {lsn} acknowledged without all of its transaction"
                    );
                }
            },
        );
        assert!(whole > 0, "no transaction was ever recovered ({backend:?})");
    }
}

/// This test binary, to be re-executed as the library writer.
fn child(dir: &Path, backend: Backend, level: Level) -> Command {
    let exe = std::env::current_exe().expect("path of this test binary");
    let mut c = Command::new(exe);
    c.args([
        "library::crash_child_entry_point",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_DIR, dir)
    .env(CHILD_BACKEND, format!("{backend:?}"))
    .env(CHILD_LEVEL, format!("{level:?}"));
    c
}

/// Kill this binary re-executed as a library writer that acknowledges at
/// `level`, with both backends. (Not `for_each_backend`: the loop takes
/// the spawning lock exclusively.)
fn library_crash_loop(level: Level, kills: usize, keep: Option<u64>, sealed: bool) {
    for backend in BACKENDS {
        let root = temp_root();
        let dir = root.path().join("log");
        let check = if sealed {
            sealing(small(backend)).build()
        } else {
            cfg(backend)
        };
        crash_loop(
            &format!("library crash loop ({backend:?}, {level:?}, sealed: {sealed})"),
            &dir,
            &check,
            AckFormat::Tagged,
            kills,
            keep,
            || {
                let mut c = child(&dir, backend, level);
                if let Some(k) = keep {
                    c.env(CHILD_KEEP, k.to_string());
                }
                if sealed {
                    c.env(CHILD_SEAL, "1");
                }
                c
            },
        );
    }
}

/// Not a test on its own: the library-level writer that
/// [`library_writer_survives_sigkill`] runs in a child process by
/// re-executing this binary. Without its environment it returns at once.
///
/// Appends each stdin line (without its newline) as soon as it is read,
/// waits for the tickets in order on another thread, and prints `@ack:N;`
/// for each that reached the configured level (the log's default level);
/// prints `@start:N;` after recovery.
#[test]
fn crash_child_entry_point() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let backend = match std::env::var(CHILD_BACKEND).as_deref() {
        Ok("Uring") => Backend::Uring,
        Ok("Threaded") => Backend::Threaded,
        other => panic!("{CHILD_BACKEND}={other:?}"),
    };
    let level = match std::env::var(CHILD_LEVEL).as_deref() {
        Ok("Durable") => Level::Durable,
        Ok("Written") => Level::Written,
        other => panic!("{CHILD_LEVEL}={other:?}"),
    };
    let keep: Option<u64> = std::env::var(CHILD_KEEP)
        .ok()
        .map(|v| v.parse().expect("child: keep count"));
    let tx_size: usize = std::env::var(CHILD_TX)
        .ok()
        .map_or(1, |v| v.parse().expect("child: transaction size"));
    let mut config = small(backend).durability(durability_for(level));
    if std::env::var_os(CHILD_SEAL).is_some() {
        config = sealing(config);
    }
    let config = config.build();
    let (wal, _) = Wal::open(&dir, config).expect("child: open");
    let out = std::io::stdout();
    let emit = |s: String| {
        let mut o = out.lock();
        o.write_all(s.as_bytes()).expect("child: stdout");
        o.flush().expect("child: stdout");
    };
    emit(format!("@start:{};\n", wal.next_lsn()));
    let (tx, rx) = mpsc::sync_channel(1 << 16);
    std::thread::scope(|s| {
        let wal = &wal;
        s.spawn(move || {
            let mut input = std::io::stdin().lock();
            let mut line = Vec::new();
            // Lines staged in a transaction, committed every `tx_size`.
            let mut staged = wal.begin();
            loop {
                line.clear();
                if input.read_until(b'\n', &mut line).expect("child: stdin") == 0 {
                    return;
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                let ticket = if tx_size == 1 {
                    wal.append(0, &line).expect("child: append")
                } else {
                    staged.append(0, &line).expect("child: stage");
                    if staged.len() < tx_size {
                        continue;
                    }
                    std::mem::replace(&mut staged, wal.begin())
                        .commit()
                        .expect("child: commit")
                };
                let first = ticket.lsn() + 1 - tx_size as u64;
                if tx.send((first, ticket)).is_err() {
                    return;
                }
            }
        });
        for (first, ticket) in rx {
            ticket.wait(level).expect("child: wait");
            // One write for the whole transaction (a pipe write this
            // small is atomic): a kill never splits its acknowledgement.
            let acks: String = (first..=ticket.lsn())
                .map(|l| format!("@ack:{l};"))
                .collect();
            emit(acks + "\n");
            // Only behind an acknowledgement already printed, so the test
            // knows every LSN the log may drop.
            if let Some(k) = keep.filter(|&k| ticket.lsn() % 32 == 0 && ticket.lsn() > k) {
                wal.checkpoint(ticket.lsn() - k).expect("child: checkpoint");
            }
        }
    });
    wal.close().expect("child: close");
}
