//! Target `recovery`: a whole log directory built from fuzz input, then
//! `verify::verify_with`, `Wal::open`, a full read, and a second open.
//!
//! # Input layout
//!
//! Read with a [`Cursor`], so every prefix of an input is itself a valid
//! (smaller) scenario:
//!
//! ```text
//! flags   u8   bits 0-1: segment files - 1 (1..=3; 3 reads as 3)
//!              bit 2: point-in-time recovery (else strict)
//!              bit 3: append one record after the first open
//!              bit 4: add a spare file          bit 5: add a node-2 segment
//!              bit 6: add unrelated files       bit 7: add a stale lock file
//! config  u8   bits 0-1: writes in flight x write size {8 x 4 KiB, 1 x 4 KiB,
//!              2 x 4 KiB, 8 x 1 MiB (the default)}; the torn window is then
//!              160 KiB, 20 KiB, 40 KiB, 8 MiB (a record of 8 KiB makes every
//!              staging buffer 20 KiB)
//! start   u8 (+u8/u64)  first base LSN: 1, small, any u64, near u64::MAX
//! per file:
//!   kind  u8   bits 0-1: content  0 raw bytes | 1 header + raw frame area
//!                                 2 header + structured frames | 3 blank/short
//!              bits 2-3: file-name base  0 continue | 1 skip ahead
//!                                        2 any u64 | 3 step back
//!              bit 4: a deviation byte follows (see [`Deviation`])
//!   ...content-specific fields...
//! ```
//!
//! Structured frames are a count and that many ops (data frame, padding
//! to a block boundary, garbage, zero gap, jump to the next block, bit
//! flip, wrong-salt / flags / bad-kind / stale-LSN frame); see [`ops`].
//!
//! # Oracles
//!
//! For every input: nothing panics or hangs; `verify_with` leaves the
//! directory byte for byte as it was; in strict mode `verify_with` and
//! `Wal::open` agree (consistent exactly when open succeeds, the same
//! first problem, the same record count and torn tail); point-in-time open
//! never fails. When open succeeds: `reader_from(0)` yields exactly
//! `report.records` records with dense ascending LSNs from
//! `report.first_lsn` to `report.last_lsn`; an optional append gets the
//! next LSN; after close, a second (strict) open succeeds, cuts nothing,
//! and reads the same records; a final `verify_with` is consistent with no
//! torn tail.
//!
//! When the generator built a log a correct writer could have written (only
//! in-order frames within the record limit, padding, file names that match
//! headers, extra files recovery must ignore or discard, a blank newest
//! file), every record written must come back, byte for byte.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ringwal::format::{self, Kind};
use ringwal::{Backend, Config, DirectIo, Error, Level, RecoveryMode, Wal};

use crate::cursor::Cursor;
use crate::spec;

/// Segment size the configuration asks for (the smallest allowed).
pub const SEG: u64 = 64 << 10;
/// Record size limit of the configuration.
pub const MAX_REC: usize = 8 << 10;
/// Largest file the generator writes.
pub const MAX_FILE: usize = 128 << 10;
/// Payload of the record appended after the first open.
pub const APPENDED: &[u8] = b"appended after recovery";
/// Stream of the appended record.
pub const APPENDED_STREAM: u16 = 7;

const DATA_KINDS: [Kind; 5] = [
    Kind::Data,
    Kind::TxBegin,
    Kind::TxCommit,
    Kind::TxAbort,
    Kind::Checkpoint,
];

/// A record as the test expects to read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub lsn: u64,
    pub stream: u16,
    pub kind: Kind,
    pub payload: Vec<u8>,
}

/// A directory to build and the configuration to recover it with.
#[derive(Debug)]
pub struct Scenario {
    /// File names and contents.
    pub files: Vec<(String, Vec<u8>)>,
    pub mode: RecoveryMode,
    /// Writes in flight and write size (they set the torn window).
    pub inflight: usize,
    pub write_bytes: usize,
    pub append: bool,
    /// Every record, when the directory is one a correct writer could
    /// have left; `None` once the generator damaged anything.
    pub expected: Option<Vec<Rec>>,
    /// The LSN the next append must get, when `expected` is `Some`.
    pub expected_next: u64,
}

impl Scenario {
    /// The configuration both opens use (the second one always strict).
    pub fn config(&self, mode: RecoveryMode) -> Config {
        Config::builder()
            .node(1)
            .segment_bytes(SEG)
            .max_record_bytes(MAX_REC)
            .max_inflight(self.inflight)
            .write_bytes(self.write_bytes)
            .backend(Backend::Threaded)
            .direct_io(DirectIo::Off)
            .recovery(mode)
            .build()
    }
}

/// Header fields that contradict the file name or the writer's habits,
/// chosen by one byte.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deviation(pub u8);

impl Deviation {
    /// Header names node 2.
    pub const NODE: u8 = 1;
    /// Header base LSN differs from the file name.
    pub const BASE: u8 = 2;
    /// Header declares a small segment size (a multiple of 4 KiB).
    pub const SMALL_SEGMENT: u8 = 4;
    /// Header declares an arbitrary segment size.
    pub const ANY_SEGMENT: u8 = 8;
    /// File cut to an arbitrary length.
    pub const SHORT_FILE: u8 = 16;
    /// File extended to 128 KiB.
    pub const LONG_FILE: u8 = 32;
    /// Non-zero header flags (not interpreted, covered by the CRC) and any
    /// torn window (bytes 56..64), with a valid CRC: still a clean log.
    pub const FLAGS: u8 = 64;
    /// Garbage in header bytes 64..4096: documented as not interpreted.
    pub const HEADER_TAIL: u8 = 128;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// Bits that make the log one no correct writer leaves.
    fn damaging(self) -> bool {
        self.0 & !(Self::FLAGS | Self::HEADER_TAIL) != 0
    }
}

/// The frame area of one segment being built.
struct Area {
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    salt: u64,
}

impl Area {
    fn fits(&self, len: usize) -> bool {
        self.pos + len <= self.end
    }

    fn frame(&mut self, salt: u64, lsn: u64, stream: u16, kind: Kind, payload: &[u8]) -> bool {
        let len = format::frame_len(payload.len());
        if !self.fits(len) {
            return false;
        }
        format::encode_frame(&mut self.buf[self.pos..], salt, lsn, stream, kind, payload);
        true
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Apply `n` structured ops to the frame area; push records a reader must
/// see to `recs` while `clean` holds; returns the next expected LSN.
fn ops(
    c: &mut Cursor<'_>,
    a: &mut Area,
    mut next: u64,
    clean: &mut bool,
    recs: &mut Vec<Rec>,
) -> u64 {
    let n = c.u8();
    for _ in 0..n {
        if c.is_empty() || a.pos >= a.end {
            break;
        }
        let o = c.u8();
        match o % 8 {
            0..=2 => {
                let base = c.u8() as usize;
                let plen = if o & 0x80 != 0 {
                    base * 37 + c.u8() as usize
                } else {
                    base
                };
                let kind = DATA_KINDS[(o as usize >> 3) % DATA_KINDS.len()];
                let lsn = if o & 0x40 != 0 {
                    next.wrapping_add(c.u8() as i8 as i64 as u64)
                } else {
                    next
                };
                let stream = u16::from(o) * 3;
                let payload = pattern(o, plen);
                let salt = a.salt;
                if a.frame(salt, lsn, stream, kind, &payload) {
                    a.pos += format::frame_len(plen);
                    if lsn != next || plen > MAX_REC {
                        *clean = false;
                    } else {
                        recs.push(Rec {
                            lsn,
                            stream,
                            kind,
                            payload,
                        });
                        next = next.wrapping_add(1);
                    }
                }
            }
            3 => {
                let pad = format::padding_len(a.pos as u64);
                if pad > 0 && a.fits(pad) {
                    format::encode_padding(&mut a.buf[a.pos..], a.salt, pad);
                    a.pos += pad;
                }
            }
            4 => {
                let g = c.u8() as usize;
                let bytes = c.take(g);
                let end = (a.pos + bytes.len()).min(a.end);
                a.buf[a.pos..end].copy_from_slice(&bytes[..end - a.pos]);
                // Even all-zero bytes leave a gap that ends the data.
                if !bytes.is_empty() {
                    *clean = false;
                }
                a.pos = (a.pos + bytes.len()).next_multiple_of(format::FRAME_ALIGN);
            }
            5 => {
                let to = if o & 0x80 != 0 {
                    a.pos.next_multiple_of(format::BLOCK)
                } else {
                    a.pos + format::FRAME_ALIGN * (1 + c.u8() as usize)
                };
                if to != a.pos {
                    *clean = false;
                }
                a.pos = to;
            }
            6 => {
                let back = c.u16() as usize;
                let bit = c.u8() % 8;
                let at = if a.pos > format::BLOCK && o & 0x80 == 0 {
                    a.pos - 1 - back % (a.pos - format::BLOCK)
                } else {
                    format::BLOCK + back % (a.end - format::BLOCK)
                };
                a.buf[at] ^= 1 << bit;
                *clean = false;
            }
            _ => {
                let plen = c.u8() as usize;
                let payload = pattern(o, plen);
                let len = format::frame_len(plen);
                let stream = u16::from(o);
                let (salt, lsn) = match (o >> 3) & 3 {
                    0 => (a.salt ^ (1 + u64::from(c.u8())), next),
                    3 => (a.salt, next.wrapping_sub(1)),
                    _ => (a.salt, next),
                };
                if !a.frame(salt, lsn, stream, Kind::Data, &payload) {
                    continue;
                }
                let f = &mut a.buf[a.pos..a.pos + len];
                match (o >> 3) & 3 {
                    1 => {
                        // Non-zero flags with a valid CRC: readers pass
                        // flags through (§3), so this is a clean record.
                        f[19] = 1 + c.u8() % 255;
                        let crc = spec::frame_crc(a.salt, f, plen);
                        f[..4].copy_from_slice(&crc.to_le_bytes());
                        recs.push(Rec {
                            lsn,
                            stream,
                            kind: Kind::Data,
                            payload,
                        });
                        next = next.wrapping_add(1);
                    }
                    2 => {
                        // Bad kind or non-zero reserved word, valid CRC.
                        let v = c.u8();
                        if v & 1 == 0 {
                            f[18] = 7 + v / 2;
                        } else {
                            f[20 + (v as usize >> 1) % 4] = v | 1;
                        }
                        let crc = spec::frame_crc(a.salt, f, plen);
                        f[..4].copy_from_slice(&crc.to_le_bytes());
                        *clean = false;
                    }
                    _ => *clean = false,
                }
                a.pos += len;
            }
        }
    }
    next
}

/// Interpret a fuzz input as a directory and a configuration.
pub fn build(data: &[u8]) -> Scenario {
    let mut c = Cursor::new(data);
    let flags = c.u8();
    let nfiles = 1 + ((flags & 3) as usize).min(2);
    let mode = if flags & 4 != 0 {
        RecoveryMode::PointInTime
    } else {
        RecoveryMode::Strict
    };
    // Small writes keep open cheap (its staging buffers are allocated and
    // zeroed every time); 8 in flight still give a torn window (160 KiB)
    // wider than a segment, as the default configuration does.
    let (inflight, write_bytes) = match c.u8() & 3 {
        0 => (8, format::BLOCK),
        1 => (1, format::BLOCK),
        2 => (2, format::BLOCK),
        _ => (8, 1 << 20),
    };
    let start = match c.u8() % 4 {
        0 => 1,
        1 => u64::from(c.u8()),
        2 => c.u64(),
        _ => u64::MAX - u64::from(c.u8()),
    };
    // Keep the clean oracle away from LSNs that overflow: those inputs are
    // still run, just without an expected record list.
    let mut clean = (1..1 << 40).contains(&start);
    let mut next = start;
    let mut recs = Vec::new();
    let mut files = Vec::new();

    for i in 0..nfiles {
        let k = c.u8();
        let content = k & 3;
        let base = match (k >> 2) & 3 {
            0 => next,
            1 => next.wrapping_add(1 + u64::from(c.u8())),
            2 => c.u64(),
            _ => next.wrapping_sub(1 + u64::from(c.u8())),
        };
        if (k >> 2) & 3 != 0 {
            clean = false;
        }
        let dev = if k & 0x10 != 0 {
            Deviation(c.u8())
        } else {
            Deviation(0)
        };
        if dev.damaging() {
            clean = false;
        }
        let name = format::segment_file_name(1, base);
        let last = i + 1 == nfiles;

        let mut header = spec::HeaderFields {
            version: 1,
            node: 1,
            base_lsn: base,
            segment_bytes: SEG,
            salt: c.u64(),
            created_unix_ms: 1_700_000_000_000,
            ..spec::HeaderFields::default()
        };
        if dev.has(Deviation::NODE) {
            header.node = 2;
        }
        if dev.has(Deviation::BASE) {
            header.base_lsn = base ^ (1 + u64::from(c.u8()));
        }
        if dev.has(Deviation::SMALL_SEGMENT) {
            header.segment_bytes = format::BLOCK as u64 * u64::from(c.u8() % 40);
        }
        if dev.has(Deviation::ANY_SEGMENT) {
            header.segment_bytes = c.u64();
        }
        let mut file_len = SEG as usize;
        if dev.has(Deviation::LONG_FILE) {
            file_len = MAX_FILE;
        }
        if dev.has(Deviation::SHORT_FILE) {
            file_len = c.u16() as usize % (SEG as usize + 1);
        }
        if dev.has(Deviation::FLAGS) {
            header.flags = c.u32() | 1;
            header.torn_window = c.u64();
        }

        let mut bytes = match content {
            0 => {
                // Raw bytes, any length: a file no writer produced.
                clean = false;
                let n = c.u16() as usize;
                c.take(n).to_vec()
            }
            1 | 2 => {
                let mut buf = vec![0u8; file_len.max(format::BLOCK)];
                buf[..format::BLOCK].copy_from_slice(&spec::encode_header(&header));
                if dev.has(Deviation::HEADER_TAIL) {
                    let junk = c.short_run();
                    buf[64..64 + junk.len()].copy_from_slice(junk);
                }
                let end = (header.segment_bytes.min(buf.len() as u64) as usize).max(format::BLOCK);
                let mut area = Area {
                    buf,
                    pos: format::BLOCK,
                    end,
                    salt: header.salt,
                };
                if content == 1 {
                    let n = c.u16() as usize;
                    let raw = c.take(n);
                    let to = (format::BLOCK + raw.len()).min(area.buf.len());
                    area.buf[format::BLOCK..to].copy_from_slice(&raw[..to - format::BLOCK]);
                    if raw.iter().any(|&b| b != 0) {
                        clean = false;
                    }
                } else {
                    next = ops(&mut c, &mut area, next, &mut clean, &mut recs);
                }
                let mut buf = area.buf;
                buf.truncate(file_len);
                buf
            }
            _ => {
                // A header that never reached the disk: the crash between
                // creating a segment and writing its header. Only the
                // newest file may look like that in a log a writer left,
                // and only with a segment's shape (whole blocks, at least
                // the smallest segment): spares are preallocated before
                // they are named. Anything shorter is a foreign file.
                let shaped = file_len.is_multiple_of(format::BLOCK)
                    && file_len as u64 >= format::MIN_SEGMENT_BYTES;
                if !last || !shaped {
                    clean = false;
                }
                let mut buf = vec![0u8; file_len];
                let junk = c.short_run();
                if buf.len() >= 64 + junk.len() {
                    buf[64..64 + junk.len()].copy_from_slice(junk);
                }
                buf
            }
        };
        if content != 0 && dev.has(Deviation::SHORT_FILE) {
            bytes.truncate(file_len);
        }
        files.push((name, bytes));
    }

    // Files recovery must ignore or discard without losing anything.
    if flags & 0x10 != 0 {
        let seq = u64::from(c.u8());
        let junk = c.short_run().to_vec();
        files.push((format::spare_file_name(1, seq), junk));
    }
    if flags & 0x20 != 0 {
        let mut other = vec![0u8; format::BLOCK * 2];
        let h = spec::HeaderFields {
            version: 1,
            node: 2,
            base_lsn: 1,
            segment_bytes: SEG,
            salt: 9,
            ..spec::HeaderFields::default()
        };
        other[..format::BLOCK].copy_from_slice(&spec::encode_header(&h));
        let junk = c.short_run();
        other[format::BLOCK..format::BLOCK + junk.len()].copy_from_slice(junk);
        files.push((format::segment_file_name(2, 1), other));
    }
    if flags & 0x40 != 0 {
        files.push(("notes.txt".into(), b"not a segment".to_vec()));
        files.push((
            format!("{}.corrupt", format::segment_file_name(1, 1)),
            vec![0xEE; 64],
        ));
        files.push(("00001-1.wal".into(), vec![1; 8]));
    }
    if flags & 0x80 != 0 {
        files.push((format::lock_file_name(1), b"stale".to_vec()));
    }

    // The same name twice: the later file wins, and the earlier one's
    // records are gone. Not a log a writer leaves.
    let mut names: Vec<&String> = files.iter().map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    if names.len() != files.len() {
        clean = false;
    }

    Scenario {
        files,
        mode,
        inflight,
        write_bytes,
        append: flags & 8 != 0,
        expected: clean.then_some(recs),
        expected_next: next,
    }
}

fn tmp_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(p) = std::env::var_os("RINGWAL_FUZZ_TMPDIR") {
            return PathBuf::from(p);
        }
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
}

/// Every file in `dir`, name and bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("list test directory")
        .map(|e| {
            let e = e.expect("directory entry");
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).expect("read test file");
            (name, bytes)
        })
        .collect();
    v.sort();
    v
}

fn read_all(wal: &Wal) -> Vec<Rec> {
    wal.reader_from(0)
        .expect("reader_from(0) after a successful open")
        .map(|r| {
            let r = r.expect("reading back a recovered log");
            Rec {
                lsn: r.lsn,
                stream: r.stream,
                kind: r.kind,
                payload: r.payload,
            }
        })
        .collect()
}

fn check_read(recs: &[Rec], rep: &ringwal::RecoveryReport) {
    assert_eq!(
        recs.len() as u64,
        rep.records,
        "records read vs report.records"
    );
    for w in recs.windows(2) {
        assert_eq!(
            w[1].lsn,
            w[0].lsn.wrapping_add(1),
            "LSNs not dense and ascending"
        );
    }
    if let (Some(first), Some(last)) = (recs.first(), recs.last()) {
        assert_eq!(first.lsn, rep.first_lsn, "first LSN read vs report");
        assert_eq!(last.lsn, rep.last_lsn, "last LSN read vs report");
    }
}

/// What the first open did, for tests that pin what a seed exercises.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Open failed with this error (strict mode, damaged log).
    Failed(String),
    /// Open succeeded.
    Opened {
        records: u64,
        truncated: bool,
        discarded: usize,
    },
}

/// Build the scenario in a fresh temporary directory and run every oracle.
pub fn check(data: &[u8]) -> Outcome {
    let sc = build(data);
    let dir = tempfile::Builder::new()
        .prefix("ringwal-fuzz-")
        .tempdir_in(tmp_root())
        .expect("create temporary directory");
    for (name, bytes) in &sc.files {
        std::fs::write(dir.path().join(name), bytes).expect("write test file");
    }
    run(dir.path(), &sc)
}

/// The oracles, on a directory already holding `sc.files`.
pub fn run(dir: &Path, sc: &Scenario) -> Outcome {
    let cfg = sc.config(sc.mode);
    let strict = sc.mode == RecoveryMode::Strict;

    let before = snapshot(dir);
    let verified = ringwal::verify::verify_with(dir, &cfg);
    assert!(
        snapshot(dir) == before,
        "verify_with modified the directory"
    );

    let (wal, rep) = match Wal::open(dir, cfg.clone()) {
        Ok(x) => x,
        Err(e) => {
            assert!(
                sc.expected.is_none(),
                "a log a correct writer could have left failed to open: {e}"
            );
            assert!(strict, "point-in-time open failed: {e}");
            assert!(
                matches!(e, Error::Corrupt { .. } | Error::Gap { .. }),
                "open failed with neither Corrupt nor Gap: {e:?}"
            );
            let v = verified.expect("verify_with failed where open reported damage");
            assert!(
                !v.is_consistent(),
                "verify_with consistent but open failed: {e}"
            );
            assert_eq!(
                v.problems[0].to_string(),
                e.to_string(),
                "open's error is not verify's first problem"
            );
            return Outcome::Failed(e.to_string());
        }
    };
    if strict {
        let v = verified.expect("verify_with failed where open succeeded");
        assert!(
            v.is_consistent(),
            "open succeeded but verify_with found {:?}",
            v.problems
        );
        assert_eq!(v.records(), rep.records, "verify vs open record count");
        assert_eq!(
            v.torn_tail.as_ref().map(|t| (&t.file, t.offset)),
            rep.truncated.as_ref().map(|t| (&t.file, t.offset)),
            "verify's torn tail vs open's truncation"
        );
    }

    let mut recs = read_all(&wal);
    check_read(&recs, &rep);
    if let Some(want) = &sc.expected {
        assert!(
            &recs == want,
            "recovered records differ from the records written\n got:  {:?}\n want: {:?}",
            recs.iter().map(|r| r.lsn).collect::<Vec<_>>(),
            want.iter().map(|r| r.lsn).collect::<Vec<_>>()
        );
    }
    // A log resumed past the LSN limit (only damage gets there) must
    // refuse appends rather than wrap.
    let exhausted = wal.next_lsn() > format::MAX_LSN;
    if sc.append && exhausted {
        let e = wal
            .append(APPENDED_STREAM, APPENDED)
            .expect_err("append past the LSN limit succeeded");
        assert!(matches!(e, Error::LsnExhausted { .. }), "{e:?}");
    }
    if sc.append && !exhausted {
        let next = wal.next_lsn();
        if let Some(last) = recs.last() {
            assert!(
                next > last.lsn,
                "next LSN {next} not past recovered {}",
                last.lsn
            );
        }
        if sc.expected.is_some() {
            assert_eq!(next, sc.expected_next, "next LSN of a clean log");
        }
        let t = wal
            .append(APPENDED_STREAM, APPENDED)
            .expect("append after recovery");
        assert_eq!(t.lsn(), next, "append did not get next_lsn");
        t.wait(Level::Durable)
            .expect("durable append after recovery");
        recs.push(Rec {
            lsn: next,
            stream: APPENDED_STREAM,
            kind: Kind::Data,
            payload: APPENDED.to_vec(),
        });
    }
    wal.close().expect("close after recovery");

    // Recovery is idempotent, and what it leaves is a log strict recovery
    // accepts as is.
    let cfg2 = sc.config(RecoveryMode::Strict);
    let (wal, rep2) = match Wal::open(dir, cfg2.clone()) {
        Ok(x) => x,
        Err(e) => panic!("second open failed: {e}"),
    };
    if let Some(t) = &rep2.truncated {
        panic!("second recovery cut again: {t:?}");
    }
    let again = read_all(&wal);
    check_read(&again, &rep2);
    if again != recs {
        panic!(
            "records changed across a close and reopen\n before: {:?}\n after:  {:?}",
            recs.iter().map(|r| r.lsn).collect::<Vec<_>>(),
            again.iter().map(|r| r.lsn).collect::<Vec<_>>()
        );
    }
    wal.close().expect("close after the second open");

    let v = ringwal::verify::verify_with(dir, &cfg2).expect("verify after a clean close");
    assert!(
        v.is_consistent(),
        "verify after a clean close: {:?}",
        v.problems
    );
    if let Some(t) = &v.torn_tail {
        panic!("torn tail after a clean close: {t:?}");
    }
    Outcome::Opened {
        records: rep.records,
        truncated: rep.truncated.is_some(),
        discarded: rep.discarded.len(),
    }
}
