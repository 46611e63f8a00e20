//! Helpers shared by the integration tests (the CLI's include this module
//! by path): small-segment configurations for both backends, inspection of
//! segment files through the public `ringwal::format` module, seeded
//! randomness, a tiny executor, the SIGKILL crash loop, and a real S3
//! server (`garage`).
//!
//! Each test crate includes this module and uses a different subset of it.
#![allow(dead_code)]

pub mod crash_loop;
pub mod garage;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll, Wake, Waker};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringwal::format::{self, Decoded, Kind, SegmentHeader};
use ringwal::{Backend, Config, ConfigBuilder, Record, RecoveryMode, RecoveryReport, Wal};

/// Both I/O backends; every library-level test runs against each.
pub const BACKENDS: [Backend; 2] = [Backend::Uring, Backend::Threaded];

/// Small segments so that a few hundred records already roll several times.
pub const SEGMENT_BYTES: u64 = 64 << 10;

/// Record cap that fits comfortably in a small segment.
pub const MAX_RECORD: usize = 8 << 10;

/// The node the tests use unless they say otherwise (also the default).
pub const NODE: u32 = 1;

/// The test configuration for `backend`, as a builder to refine.
pub fn small(backend: Backend) -> ConfigBuilder {
    Config::builder()
        .backend(backend)
        .segment_bytes(SEGMENT_BYTES)
        .max_record_bytes(MAX_RECORD)
}

/// The test configuration for `backend`.
pub fn cfg(backend: Backend) -> Config {
    small(backend).build()
}

/// Writer locks are `flock`s, held by an open file description. A child
/// process forked by one test thread shares every descriptor of the test
/// process until it reaches `exec` (which closes them, all being
/// close-on-exec), so while another test thread spawns a process, a log
/// this thread just closed can still be locked for a moment and an
/// immediate reopen fails with `Locked`. Tests that hold logs open share
/// this lock; tests that spawn processes hold it exclusively.
static SPAWNING: RwLock<()> = RwLock::new(());

/// Held while a test opens logs in this process (see [`SPAWNING`]).
pub fn opening_logs() -> RwLockReadGuard<'static, ()> {
    SPAWNING.read().unwrap_or_else(|p| p.into_inner())
}

/// Held while a test spawns processes (see [`SPAWNING`]).
pub fn spawning_processes() -> RwLockWriteGuard<'static, ()> {
    SPAWNING.write().unwrap_or_else(|p| p.into_inner())
}

/// Run `f` once per backend, naming the backend first so a failure's
/// captured output says which one failed. Holds [`opening_logs`].
pub fn for_each_backend(mut f: impl FnMut(Backend)) {
    let _logs = opening_logs();
    for backend in BACKENDS {
        eprintln!("=== backend {backend:?}");
        f(backend);
    }
}

/// A seeded generator. The seed comes from `RINGWAL_TEST_SEED` when set (to
/// replay a failure), otherwise from the OS; it is printed either way.
pub fn seeded_rng(what: &str) -> StdRng {
    let seed = match std::env::var("RINGWAL_TEST_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("RINGWAL_TEST_SEED={s:?} is not a u64")),
        Err(_) => rand::random(),
    };
    eprintln!("{what}: seed {seed} (replay with RINGWAL_TEST_SEED={seed})");
    StdRng::seed_from_u64(seed)
}

/// A payload for record `tag`: printable, newline-free and without a single
/// zero byte, so that zeroing any part of a data frame always damages it.
/// Mostly small, sometimes large enough to span a block boundary.
pub fn payload(rng: &mut StdRng, tag: u64) -> Vec<u8> {
    let len = if rng.gen_bool(0.15) {
        rng.gen_range(1_000..=MAX_RECORD)
    } else {
        rng.gen_range(1..=300)
    };
    let mut p = format!("r{tag}:").into_bytes();
    p.truncate(len);
    while p.len() < len {
        p.push(rng.gen_range(b'a'..=b'z'));
    }
    p
}

/// `node`'s segment files in `dir`, ascending by base LSN.
pub fn segment_files(dir: &Path, node: u32) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.expect("directory entry");
            let name = e.file_name().into_string().ok()?;
            let (n, base) = format::parse_segment_file_name(&name)?;
            (n == node).then(|| (base, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// One frame found in a segment file.
#[derive(Clone, Debug)]
pub struct FrameInfo {
    /// Offset of its first byte.
    pub start: u64,
    /// Offset just past it (alignment included).
    pub end: u64,
    pub lsn: u64,
    pub kind: Kind,
    pub payload: Vec<u8>,
}

/// A segment file decoded independently of the engine.
#[derive(Debug)]
pub struct Scanned {
    pub header: SegmentHeader,
    /// The valid frames from offset 4096 on, up to the first zero or
    /// invalid frame header.
    pub frames: Vec<FrameInfo>,
    /// Offset just past the last valid frame.
    pub data_end: u64,
    /// The whole file.
    pub bytes: Vec<u8>,
}

impl Scanned {
    /// The frames that carry records (not padding, not vouches).
    pub fn records(&self) -> impl Iterator<Item = &FrameInfo> {
        self.frames
            .iter()
            .filter(|f| !matches!(f.kind, Kind::Padding | Kind::Vouch))
    }
}

/// Decode `path` with `format::SegmentHeader::decode` and
/// `format::decode_frame`, frame after frame from where its header says
/// frames start.
pub fn scan_segment(path: &Path) -> Scanned {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let header = SegmentHeader::decode(&bytes)
        .unwrap_or_else(|e| panic!("{}: bad segment header: {e}", path.display()));
    let mut frames = Vec::new();
    let mut off = header.frames_start() as usize;
    while off < bytes.len() {
        match format::decode_frame(&bytes[off..], header.salt, format::MAX_PAYLOAD) {
            Decoded::Frame(f) => {
                frames.push(FrameInfo {
                    start: off as u64,
                    end: (off + f.len) as u64,
                    lsn: f.lsn,
                    kind: f.kind,
                    payload: f.payload.to_vec(),
                });
                off += f.len;
            }
            Decoded::Zero | Decoded::Invalid(_) => break,
        }
    }
    Scanned {
        header,
        frames,
        data_end: off as u64,
        bytes,
    }
}

/// Copy every regular file of `from` into a new directory `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy directory");
    for e in std::fs::read_dir(from).expect("read source directory") {
        let e = e.expect("directory entry");
        if e.file_type().expect("file type").is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy file");
        }
    }
}

/// Every record from the oldest kept, failing the test on any read error.
pub fn read_all(wal: &Wal) -> Vec<Record> {
    wal.reader_from(0)
        .expect("reader_from(0)")
        .collect::<ringwal::Result<Vec<_>>>()
        .expect("reading the log back")
}

/// Assert that `records` are exactly LSNs `first..` with `expected` payloads.
pub fn assert_records(records: &[Record], first: u64, expected: &[Vec<u8>], what: &str) {
    assert_eq!(
        records.len(),
        expected.len(),
        "{what}: record count (first LSN read: {:?})",
        records.first().map(|r| r.lsn)
    );
    for (i, (r, want)) in records.iter().zip(expected).enumerate() {
        let lsn = first + i as u64;
        assert_eq!(r.lsn, lsn, "{what}: LSNs must be dense and ascending");
        assert_eq!(r.kind, Kind::Data, "{what}: LSN {lsn} kind");
        assert!(
            r.payload == *want,
            "{what}: LSN {lsn} payload differs: got {} bytes {:?}..., want {} bytes {:?}...",
            r.payload.len(),
            String::from_utf8_lossy(&r.payload[..r.payload.len().min(40)]),
            want.len(),
            String::from_utf8_lossy(&want[..want.len().min(40)]),
        );
    }
}

/// Wakes a parked thread: the whole "runtime" `block_on` needs.
struct Unparker(std::thread::Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drive `fut` to completion on the calling thread, parking between polls.
/// Spurious unparks only cause an extra poll.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(Unparker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// A loop-mounted filesystem image, unmounted on drop.
pub struct Mount {
    pub dir: PathBuf,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Mount a fresh `fs` (ext4, xfs, btrfs) image of `mib` MiB (sparse) under
/// `root`, or say why not: mounting needs root and the filesystem's mkfs.
pub fn mount_image(root: &Path, fs: &str, mib: u64) -> Result<Mount, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not running as root, cannot loop-mount".into());
    }
    let img = root.join("fs.img");
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(mib << 20).map_err(|e| e.to_string())?;
    let mkfs = format!("mkfs.{fs}");
    let force = if fs == "ext4" { "-F" } else { "-f" };
    run(&mkfs, &["-q", force, img.to_str().unwrap()])?;
    let dir = root.join("mnt");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    run(
        "mount",
        &["-o", "loop", img.to_str().unwrap(), dir.to_str().unwrap()],
    )?;
    Ok(Mount { dir })
}

/// Mount a fresh memory file system `fs` (tmpfs, ramfs: nothing survives a
/// power loss there; ramfs also refuses O_DIRECT) under `root`, or say why
/// not (not root, mount refused).
pub fn mount_memory(root: &Path, fs: &str) -> Result<Mount, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err(format!("not running as root, cannot mount {fs}"));
    }
    let dir = root.join("mnt");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    run("mount", &["-t", fs, fs, dir.to_str().unwrap()])?;
    Ok(Mount { dir })
}

/// How many spare segment files `dir` holds.
pub fn spare_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".spare")
        })
        .count()
}

/// `Wal::open`, after checking that `ringwal::verify` predicts what a
/// strict open does with the directory as it is: consistent exactly when
/// the open succeeds, the same first problem when it fails, the same
/// records and the same torn tail when it succeeds. Point-in-time opens
/// (verify always judges strictly) and new logs are opened unchecked.
pub fn open_checked(dir: &Path, cfg: Config) -> ringwal::Result<(Wal, RecoveryReport)> {
    if cfg.recovery_mode() != RecoveryMode::Strict || !dir.exists() {
        return Wal::open(dir, cfg);
    }
    let v = ringwal::verify::verify(dir, &cfg).expect("verify reads the directory");
    let opened = Wal::open(dir, cfg);
    match &opened {
        Ok((_, rep)) => {
            assert_eq!(
                v.consistent(),
                Some(true),
                "open succeeded, verify found {:?}",
                v.problems
            );
            assert_eq!(v.records, rep.records, "verify and open count records");
            assert_eq!(
                v.torn_tail.as_ref().map(|t| (&t.file, t.offset)),
                rep.truncated.as_ref().map(|t| (&t.file, t.offset)),
                "verify's torn tail is the one open cut"
            );
        }
        Err(e) => {
            assert_eq!(
                v.consistent(),
                Some(false),
                "verify consistent, open failed: {e}"
            );
            assert_eq!(e.to_string(), v.problems[0].to_string());
        }
    }
    opened
}

/// Make every write at or after `from` in a segment image vouch for no more
/// than `durable`, as if it had been submitted while the writes before it
/// were still in flight: what a crash leaves, where a cleanly written log
/// has every write vouch for the ones before it. Drops the closing vouch's
/// claim too. Returns how many vouch frames it rewrote.
pub fn unvouch_from(img: &mut [u8], from: u64, durable: u64) -> usize {
    let header = SegmentHeader::decode(img).expect("a segment header");
    let mut n = 0;
    let mut at = (from as usize).next_multiple_of(format::BLOCK);
    while at + format::VOUCH_LEN_V2 <= img.len() {
        if let Decoded::Frame(f) =
            format::decode_frame(&img[at..], header.salt, format::MAX_PAYLOAD)
            && let Some(v) = f.vouch().filter(|v| v.durable > durable)
        {
            // In the vouch's own shape: a version-3 vouch keeps its time.
            let lower = format::Vouch { durable, ..v };
            format::encode_vouch(&mut img[at..], header.salt, lower);
            n += 1;
        }
        at += format::BLOCK;
    }
    n
}

/// Rewrite `node`'s manifest in `dir` as a crash would have left it: a
/// cleanly closed log's manifest says every LSN was durable, one that
/// crashed says only what its last roll knew (everything before the
/// newest segment). Tests that damage a closed log's tail to stand for a
/// crash use this, or recovery would rightly call the damage a loss of
/// acknowledged records.
pub fn as_after_crash(dir: &Path, node: u32) {
    let path = dir.join(format::manifest_file_name(node));
    let mut m = format::Manifest::decode(&std::fs::read(&path).unwrap()).unwrap();
    let newest = segment_files(dir, node).last().unwrap().0;
    m.durable_lsn = m.durable_lsn.min(newest - 1);
    std::fs::write(&path, m.encode()).unwrap();
}

/// The log mode whose tickets wait for `level` by default: every write
/// durable for `Durable`, deferred durability for `Written`.
pub fn durability_for(level: ringwal::Level) -> ringwal::Durability {
    match level {
        ringwal::Level::Durable => ringwal::Durability::EveryWrite,
        _ => ringwal::Durability::Deferred {
            sync_interval: None,
        },
    }
}

/// An observer that holds the ring thread (in its first advance after
/// [`set`](RingGate::set)`(true)`) until set open again: a disk whose
/// writes complete but whose ring cannot go on, so staging buffers stay
/// full and a close stays waiting.
#[derive(Default)]
pub struct RingGate {
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    /// Set once the ring thread is held.
    holding: std::sync::atomic::AtomicBool,
}

impl ringwal::DurabilityObserver for RingGate {
    fn advanced(&self, _written: ringwal::Lsn, _durable: ringwal::Lsn) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            self.holding
                .store(true, std::sync::atomic::Ordering::SeqCst);
            closed = self.opened.wait(closed).unwrap();
        }
    }
}

impl RingGate {
    /// Close (hold the ring at its next advance) or open the gate.
    pub fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    /// Wait (up to 60 s, else fail the test) until the ring is held.
    pub fn wait_until_held(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.holding.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the ring never published"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
