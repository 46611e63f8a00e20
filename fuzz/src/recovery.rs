//! Target `recovery`: a whole log directory built from fuzz input, then
//! `verify::verify`, `Wal::open`, a full read, and a second open.
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
//!              bits 4-5: 1 = the log has a manifest (any other value: none;
//!              bits 2-3 and 6-7 are ignored)
//! start   u8 (+u8/u64)  first base LSN: 1, small, any u64, near u64::MAX
//! [manifest u8, log id u64]   only when the log has a manifest (see
//!              [`ManifestDeviation`]); otherwise the log id is [`LOG_ID`]
//! per file:
//!   kind  u8   bits 0-1: content  0 raw bytes | 1 header + raw frame area
//!                                 2 header + structured frames | 3 blank/short
//!              bits 2-3: file-name base  0 continue | 1 skip ahead
//!                                        2 any u64 | 3 step back
//!              bit 4: a deviation byte follows (see [`Deviation`])
//!              bit 5: a version-2 segment (header, its copy, frames from
//!                     8192, a vouch frame opening every write)
//!              bit 6: (version 2) a second deviation byte follows (see
//!                     [`V2Deviation`])
//!              bit 7: reserved; when set, bits 5 and 6 mean nothing (so
//!                     fuzzer inputs made before version 2 keep building
//!                     version-1 segments)
//!   ...content-specific fields...
//! ...extra files (flags bits 4-7)...
//! [manifest fields]   only when the log has a manifest
//! ```
//!
//! Structured frames are a count and that many ops (data frame, padding
//! to a block boundary, garbage, zero gap, jump to the next block, bit
//! flip, wrong-salt / flags / bad-kind / stale-LSN frame; in version-2
//! segments also vouch and skip frames, lagging vouches and a closing
//! vouch block); see [`ops`]. The flags frame is how atomic batches
//! (docs/format.md §4.1) are built: flags 1 is a batch record more follow,
//! 3 a batch's last, anything else (or any flags on the padding frame it
//! writes instead with bit 6) an invalid frame. Since atomic batches,
//! inputs that wrote flags frames build batches or invalid frames where
//! they wrote clean records. Every input made before version 2 still
//! builds the directory it did (bit 7 of a file's kind byte, and bits 4-5
//! of the config byte having to read exactly 1, see to that), except that
//! the bad-kind frame writes kind 135 or 136 where it wrote 7 or 8, which
//! version 2 made valid kinds.
//!
//! # Oracles
//!
//! For every input: nothing panics or hangs; `verify` leaves the
//! directory byte for byte as it was; in strict mode `verify` and
//! `Wal::open` agree (consistent exactly when open succeeds, the same
//! first problem, the same record count and torn tail); point-in-time open
//! never fails. When open succeeds: `reader_from(0)` yields exactly
//! `report.records` records with dense ascending LSNs, except where skip
//! frames say LSNs will never hold a record: there the reader stops with
//! one `Gap` naming them, and a reader from the gap's `found` reads on; an
//! optional append gets the next LSN; after close, a second (strict) open
//! succeeds, cuts nothing, and reads the same records and gaps; a final
//! `verify` is consistent with no torn tail.
//!
//! Against the model of the document ([`spec::judge`]), where it decides
//! the outcome: a strict open fails exactly when the document says the log
//! is damaged, with the problem it names (the same segment file for a
//! segment's problem; `Gap` or `Lost` for a manifest rule); an open that
//! succeeds yields the document's records byte for byte, cuts the torn
//! tail the document finds (and nothing else), and reports the headers it
//! read through their copy. The directory a closed log leaves is one the
//! document says opens, with the records that were read.
//!
//! Point-in-time: the next LSN is above every LSN any valid frame of the
//! log's segments carries (read at every 8-aligned offset, past any
//! damage) and above the manifest's `handed_out`; LSNs it skips end a
//! full read with one `Gap` naming exactly the skip the report lists.
//!
//! When the generator built a log a correct writer could have written (only
//! in-order frames within the record limit, padding, vouch frames opening
//! writes and vouching for no more than was written and never into an
//! open atomic batch, skip blocks outside batches, batches within one
//! segment, file names that match headers, a damaged or blank header block
//! with an intact copy, extra files recovery must ignore or discard, a
//! blank newest file, a manifest that agrees with the log), every record
//! written must come back, byte for byte, but for an atomic batch left
//! unfinished at the newest end (a crash while it was written), which
//! must not; the next LSN is the one after the last written (a strict
//! open: the unfinished batch's first).
//! When it then took away the newest segment the manifest names, or raised
//! the manifest's durable LSN above what the log holds, a strict open must
//! fail with `Gap` or `Lost` respectively.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ringwal::format::{self, Kind};
use ringwal::{Backend, Config, DirectIo, Error, Level, RecoveryMode, Wal};

use crate::cursor::Cursor;
use crate::spec::{self, kind};

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
/// The log id of version-2 segments when the input brings no manifest.
pub const LOG_ID: u64 = 0x0123_4567_89ab_cdef;

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

/// What a full read yields: records, and the LSNs skip frames say will
/// never hold one (a `Gap { expected, found }` from the reader).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Rec(Rec),
    Gap { expected: u64, found: u64 },
}

/// How a strict open of a log that was clean before the manifest was made
/// to disagree with it must fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MustFail {
    /// The newest segment the manifest names is gone: `Gap`.
    Gap,
    /// The manifest's durable LSN is above the last LSN: `Lost`.
    Lost,
    /// Both: either error.
    GapOrLost,
}

/// A directory to build and the configuration to recover it with.
#[derive(Debug)]
pub struct Scenario {
    /// File names and contents (a later file of the same name replaces an
    /// earlier one).
    pub files: Vec<(String, Vec<u8>)>,
    pub mode: RecoveryMode,
    /// Writes in flight and write size (they set the torn window).
    pub inflight: usize,
    pub write_bytes: usize,
    pub append: bool,
    /// Every record, when the directory is one a correct writer could
    /// have left; `None` once the generator damaged anything.
    pub expected: Option<Vec<Rec>>,
    /// The skips (first, count) written, in order, when `expected` is
    /// `Some`.
    pub expected_skips: Vec<(u64, u64)>,
    /// The LSN after the last one written (records and skips): what the
    /// next append of a strict open gets, when `expected` is `Some`.
    pub expected_next: u64,
    /// The manifest as written, when the input has one.
    pub manifest: Option<spec::ManifestFields>,
    /// Set when a clean log's manifest was made to disagree with it.
    pub must_fail: Option<MustFail>,
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

    /// The directory as it is written: the last file of a name wins.
    pub fn directory(&self) -> BTreeMap<String, Vec<u8>> {
        self.files.iter().cloned().collect()
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
    /// Garbage in the header block after its used bytes (64 in version 1,
    /// 80 in version 2): documented as not interpreted.
    pub const HEADER_TAIL: u8 = 128;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// Bits that make the log one no correct writer leaves.
    fn damaging(self) -> bool {
        self.0 & !(Self::FLAGS | Self::HEADER_TAIL) != 0
    }
}

/// Version-2 header variations, chosen by one byte.
#[derive(Clone, Copy, Debug, Default)]
pub struct V2Deviation(pub u8);

impl V2Deviation {
    /// A bit flipped in block 0's used bytes after the version field: the
    /// header is read through its copy, and the log is still clean.
    pub const BLOCK0_DAMAGED: u8 = 1;
    /// Block 0 all zeros, the copy intact: read through the copy, clean.
    pub const BLOCK0_BLANK: u8 = 2;
    /// A bit flipped in the copy: harmless while block 0 is good.
    pub const COPY_DAMAGED: u8 = 4;
    /// The header carries another log id.
    pub const FOREIGN_LOG: u8 = 8;
    /// Formerly a non-zero key id; encrypted segments (§3.5) are no
    /// damage and need a key to read, which this model does not hold
    /// (tests/records/encryption.rs covers them): now a second way to set
    /// [`RESERVED`](Self::RESERVED).
    pub const KEY_ID: u8 = 16;
    /// A non-zero key check with key id 0 (a header from a later writer).
    pub const RESERVED: u8 = 32;
    /// The writer's torn window recorded in the header: any u32.
    pub const TORN_WINDOW: u8 = 64;
    /// No copy: block 1 left zero.
    pub const NO_COPY: u8 = 128;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// Whether a correct writer (and a crash, and a bad sector in one of
    /// the two header blocks) could leave this.
    fn damaging(self) -> bool {
        let block0 = Self::BLOCK0_DAMAGED | Self::BLOCK0_BLANK;
        let copy = Self::COPY_DAMAGED | Self::NO_COPY;
        self.0 & (Self::FOREIGN_LOG | Self::KEY_ID | Self::RESERVED) != 0
            || (self.0 & block0 != 0 && self.0 & copy != 0)
    }
}

/// What the manifest byte asks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct ManifestDeviation(pub u8);

impl ManifestDeviation {
    /// Remove the newest segment the manifest names from the directory.
    pub const DROP_NEWEST: u8 = 1;
    /// Durable LSN above the last LSN written.
    pub const DURABLE_AHEAD: u8 = 2;
    /// More LSNs handed out than written (a crash with writes in flight):
    /// still a clean log.
    pub const HANDED_OUT: u8 = 4;
    /// Oldest LSN below the first segment's base.
    pub const OLDEST_BEHIND: u8 = 8;
    /// Another log id than the segments carry.
    pub const FOREIGN_LOG: u8 = 16;
    /// Names node 2.
    pub const NODE: u8 = 32;
    /// A bit flipped anywhere in it.
    pub const DAMAGED: u8 = 64;
    /// A leftover temporary manifest (ignored by readers): still clean.
    pub const TEMP_FILE: u8 = 128;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// The frame area of one segment being built.
struct Area {
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    salt: u64,
    /// Offset of the first frame: 4096 (version 1) or 8192.
    start: usize,
    /// Version 2: every write opens with a vouch frame.
    v2: bool,
    /// Version 2: how many LSNs the next writes' vouches lag behind the
    /// last one written (as with several writes in flight).
    lag: u64,
}

impl Area {
    fn fits(&self, len: usize) -> bool {
        self.pos + len <= self.end
    }

    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
    }

    /// Write a frame at `pos` if it fits (without moving `pos`).
    fn frame(&mut self, salt: u64, lsn: u64, stream: u16, kind: u8, payload: &[u8]) -> bool {
        let len = spec::frame_len(payload.len());
        if !self.fits(len) {
            return false;
        }
        let f = spec::encode_frame(salt, lsn, stream, kind, payload);
        self.put(&f);
        true
    }

    /// Version 2: a frame of `len` bytes about to start at a block boundary
    /// opens a write, so a vouch frame goes first (for the LSNs before
    /// `next`, less the lag; `next` is the first LSN of an atomic batch
    /// still open, since acknowledgements never stop inside one). True if
    /// the frame fits after it.
    fn open_write(&mut self, next: u64, len: usize) -> bool {
        if !self.v2 || !self.pos.is_multiple_of(spec::BLOCK) {
            return self.fits(len);
        }
        if !self.fits(spec::VOUCH_LEN_V2 + len) {
            return false;
        }
        let durable = next.saturating_sub(1).saturating_sub(self.lag);
        let v = spec::encode_vouch(self.salt, durable);
        self.put(&v);
        self.pos += spec::VOUCH_LEN_V2;
        true
    }

    /// Close the write at a block boundary with padding, if it fits.
    fn pad(&mut self) {
        let pad = spec::padding_len(self.pos as u64);
        if pad > 0 && self.fits(pad) {
            let p = spec::encode_padding(self.salt, pad);
            self.put(&p);
            self.pos += pad;
        }
    }

    /// One whole block at a block boundary: `first` (a vouch or skip
    /// frame) and padding to the block's end, as a clean close or a
    /// point-in-time recovery writes it. False if it does not fit.
    fn block_with(&mut self, first: &[u8]) -> bool {
        if !self.pos.is_multiple_of(spec::BLOCK) || !self.fits(spec::BLOCK) {
            return false;
        }
        self.put(first);
        self.pos += first.len();
        let p = spec::encode_padding(self.salt, spec::BLOCK - first.len());
        self.put(&p);
        self.pos += p.len();
        true
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// What `ops` builds up across the segments of one log.
struct Log {
    next: u64,
    clean: bool,
    recs: Vec<Rec>,
    skips: Vec<(u64, u64)>,
    /// The atomic batch whose last record is not written yet: its first
    /// LSN and its records so far (they join `recs` with the last one).
    batch: Option<(u64, Vec<Rec>)>,
}

impl Log {
    /// The LSN below which a vouch may vouch: acknowledgements never stop
    /// inside a batch, so an open batch's first LSN, else the next LSN.
    fn vouchable(&self) -> u64 {
        self.batch.as_ref().map_or(self.next, |b| b.0)
    }

    /// A record written in order with the flags byte `flags`: what §4.1
    /// makes of it for the records a reader must see.
    fn record(&mut self, rec: Rec, flags: u8) {
        self.next = rec.lsn.wrapping_add(1);
        match flags {
            // A record standing alone inside an open batch: no writer's.
            0 if self.batch.is_some() => self.clean = false,
            0 => self.recs.push(rec),
            spec::FLAG_BATCH => self.batch.get_or_insert((rec.lsn, Vec::new())).1.push(rec),
            spec::FLAGS_LAST => {
                let mut recs = self.batch.take().map_or_else(Vec::new, |b| b.1);
                recs.push(rec);
                self.recs.extend(recs);
            }
            // An invalid frame (§3.3 step 7).
            _ => self.clean = false,
        }
    }
}

/// Apply `n` structured ops to the frame area; push records a reader must
/// see to `log.recs` while `log.clean` holds, and advance `log.next`.
fn ops(c: &mut Cursor<'_>, a: &mut Area, log: &mut Log) {
    let n = c.u8();
    for _ in 0..n {
        if c.is_empty() || a.pos >= a.end {
            break;
        }
        let o = c.u8();
        let next = log.next;
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
                let len = spec::frame_len(plen);
                if a.open_write(log.vouchable(), len)
                    && a.frame(salt, lsn, stream, kind as u8, &payload)
                {
                    a.pos += len;
                    if lsn != next || plen > MAX_REC {
                        log.clean = false;
                    } else {
                        let rec = Rec {
                            lsn,
                            stream,
                            kind,
                            payload,
                        };
                        log.record(rec, 0);
                    }
                }
            }
            3 => {
                a.pad();
                if a.v2 && o & 0x40 != 0 {
                    a.lag = u64::from(c.u8());
                }
                if a.v2 && o & 0x80 != 0 {
                    // A clean close: a vouch for everything written. No
                    // writer closes in the middle of an atomic batch.
                    let v = spec::encode_vouch(a.salt, next.saturating_sub(1));
                    if a.block_with(&v) && log.batch.is_some() {
                        log.clean = false;
                    }
                }
            }
            4 => {
                let g = c.u8() as usize;
                let bytes = c.take(g);
                let end = (a.pos + bytes.len()).min(a.end);
                a.buf[a.pos..end].copy_from_slice(&bytes[..end - a.pos]);
                // Even all-zero bytes leave a gap that ends the data.
                if !bytes.is_empty() {
                    log.clean = false;
                }
                a.pos = (a.pos + bytes.len()).next_multiple_of(spec::FRAME_ALIGN);
            }
            5 => {
                let to = if o & 0x80 != 0 {
                    a.pos.next_multiple_of(spec::BLOCK)
                } else {
                    a.pos + spec::FRAME_ALIGN * (1 + c.u8() as usize)
                };
                if to != a.pos {
                    log.clean = false;
                }
                a.pos = to;
            }
            6 => {
                let back = c.u16() as usize;
                let bit = c.u8() % 8;
                let at = if a.pos > a.start && o & 0x80 == 0 {
                    a.pos - 1 - back % (a.pos - a.start)
                } else {
                    a.start + back % (a.end - a.start)
                };
                a.buf[at] ^= 1 << bit;
                log.clean = false;
            }
            _ if a.v2 && o & 0x20 != 0 => v2_frame(c, a, log, o),
            _ => {
                let plen = c.u8() as usize;
                let payload = pattern(o, plen);
                let len = spec::frame_len(plen);
                let stream = u16::from(o);
                let (salt, lsn) = match (o >> 3) & 3 {
                    0 => (a.salt ^ (1 + u64::from(c.u8())), next),
                    3 => (a.salt, next.wrapping_sub(1)),
                    _ => (a.salt, next),
                };
                if !a.open_write(log.vouchable(), len)
                    || !a.frame(salt, lsn, stream, kind::DATA, &payload)
                {
                    continue;
                }
                let f = &mut a.buf[a.pos..a.pos + len];
                match (o >> 3) & 3 {
                    1 => {
                        // Non-zero flags with a valid CRC (§3, §4.1): 1 a
                        // batch record more records follow, 3 a batch's
                        // last, anything else an invalid frame. With bit
                        // 6, on a padding frame in the record's place
                        // (invalid: only records carry batch flags).
                        let mut flags = 1 + c.u8() % 255;
                        // Valid codec bits (§3.4) on this random payload
                        // would make a packed payload that does not
                        // unpack: kept out here (the frame target checks
                        // the codec bits, tests/records/encryption.rs codecs).
                        if spec::flags_allowed(kind::DATA, flags) {
                            flags &= 0x03;
                        }
                        if o & 0x40 != 0 {
                            let p = spec::encode_flagged(
                                a.salt,
                                0,
                                0,
                                kind::PADDING,
                                flags,
                                &vec![0; plen],
                            );
                            f.copy_from_slice(&p);
                            log.clean = false;
                        } else {
                            f[19] = flags;
                            let crc = spec::frame_crc(a.salt, f, plen);
                            f[..4].copy_from_slice(&crc.to_le_bytes());
                            let rec = Rec {
                                lsn,
                                stream,
                                kind: Kind::Data,
                                payload,
                            };
                            log.record(rec, flags);
                        }
                    }
                    2 => {
                        // Bad kind or non-zero reserved word, valid CRC.
                        // Kinds 7 and 8 are valid since version 2: moved
                        // up by 128, which keeps them invalid.
                        let v = c.u8();
                        if v & 1 == 0 {
                            let k = 7 + v / 2;
                            f[18] = if k <= 8 { k + 128 } else { k };
                        } else {
                            f[20 + (v as usize >> 1) % 4] = v | 1;
                        }
                        let crc = spec::frame_crc(a.salt, f, plen);
                        f[..4].copy_from_slice(&crc.to_le_bytes());
                        log.clean = false;
                    }
                    _ => log.clean = false,
                }
                a.pos += len;
            }
        }
    }
}

/// Op 7 with bit 5 in a version-2 segment: a vouch or skip frame, or a
/// frame of those kinds (or padding) shaped as no writer shapes it.
fn v2_frame(c: &mut Cursor<'_>, a: &mut Area, log: &mut Log, o: u8) {
    let next = log.next;
    match (o >> 3) & 3 {
        0 => {
            // A vouch where the op stands, for next - 1 + delta: more than
            // was written, or not at a write's start, is no writer's.
            let delta = c.u8() as i8 as i64;
            let durable = next.wrapping_sub(1).wrapping_add(delta as u64);
            let at_start = a.pos.is_multiple_of(spec::BLOCK);
            let v = spec::encode_vouch(a.salt, durable);
            if a.fits(v.len()) {
                a.put(&v);
                a.pos += v.len();
                if durable >= log.vouchable() || delta > 0 || !at_start {
                    log.clean = false;
                }
            }
        }
        1 => {
            // A skip block, as point-in-time recovery writes it, after the
            // write is closed.
            let count = if o & 0x80 != 0 {
                c.u64()
            } else {
                u64::from(c.u8())
            };
            a.pad();
            let s = spec::encode_skip(a.salt, next, count);
            if a.block_with(&s) {
                let valid =
                    count >= 1 && u128::from(next) + u128::from(count) <= u128::from(spec::MAX_LSN);
                // A skip inside an open batch is no writer's (§6.1).
                if valid && log.batch.is_none() {
                    log.skips.push((next, count));
                    log.next = next + count;
                } else {
                    log.clean = false;
                }
            }
        }
        2 => {
            // A vouch whose payload is not one u64.
            let plen = c.u8() as usize;
            if a.frame(a.salt, 0, 0, kind::VOUCH, &pattern(o, plen)) {
                a.pos += spec::frame_len(plen);
                log.clean = false;
            }
        }
        _ => {
            // Padding (or a vouch) carrying an LSN and a stream, which the
            // document gives as 0.
            let plen = c.u8() as usize & !7;
            let (k, payload) = if o & 0x80 != 0 {
                (kind::VOUCH, next.saturating_sub(1).to_le_bytes().to_vec())
            } else {
                (kind::PADDING, vec![0u8; plen])
            };
            if a.frame(a.salt, next, u16::from(o) | 1, k, &payload) {
                a.pos += spec::frame_len(payload.len());
                log.clean = false;
            }
        }
    }
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
    let config = c.u8();
    // Small writes keep open cheap (its staging buffers are allocated and
    // zeroed every time); 8 in flight still give a torn window (160 KiB)
    // wider than a segment, as the default configuration does.
    let (inflight, write_bytes) = match config & 3 {
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
    let (mdev, log_id) = if (config >> 4) & 3 == 1 {
        (Some(ManifestDeviation(c.u8())), c.u64())
    } else {
        (None, LOG_ID)
    };
    let mut log = Log {
        // Keep the clean oracle away from LSNs that overflow: those inputs
        // are still run, just without an expected record list.
        clean: (1..1 << 40).contains(&start),
        next: start,
        recs: Vec::new(),
        skips: Vec::new(),
        batch: None,
    };
    let mut files = Vec::new();
    // Bases of the segment files a writer installed (not blank ones).
    let mut installed = Vec::new();
    let mut any_v2 = false;

    for i in 0..nfiles {
        // A batch never spans segments, and the log rolls only once a
        // segment's writes are complete: one still open is damage.
        if log.batch.take().is_some() {
            log.clean = false;
        }
        let k = c.u8();
        let content = k & 3;
        let next = log.next;
        let base = match (k >> 2) & 3 {
            0 => next,
            1 => next.wrapping_add(1 + u64::from(c.u8())),
            2 => c.u64(),
            _ => next.wrapping_sub(1 + u64::from(c.u8())),
        };
        if (k >> 2) & 3 != 0 {
            log.clean = false;
        }
        let dev = if k & 0x10 != 0 {
            Deviation(c.u8())
        } else {
            Deviation(0)
        };
        if dev.damaging() {
            log.clean = false;
        }
        // Bit 7 set keeps bits 5-6 ineffective: inputs made before version
        // 2 set them together only, and must build what they always did.
        let v2 = k & 0xa0 == 0x20 && (content == 1 || content == 2);
        let dev2 = if v2 && k & 0x40 != 0 {
            V2Deviation(c.u8())
        } else {
            V2Deviation(0)
        };
        if dev2.damaging() {
            log.clean = false;
        }
        let name = format::segment_file_name(1, base);
        let last = i + 1 == nfiles;

        let mut header = spec::HeaderFields {
            version: if v2 { 2 } else { 1 },
            node: 1,
            base_lsn: base,
            segment_bytes: SEG,
            salt: c.u64(),
            created_unix_ms: 1_700_000_000_000,
            log_id: if v2 { log_id } else { 0 },
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
        if dev2.has(V2Deviation::FOREIGN_LOG) {
            header.log_id = log_id ^ (c.u64() | 1);
        }
        if dev2.has(V2Deviation::KEY_ID) || dev2.has(V2Deviation::RESERVED) {
            header.key_check = 1 + u32::from(c.u8());
        }
        if dev2.has(V2Deviation::TORN_WINDOW) {
            header.torn_window = u64::from(c.u32());
        }

        let mut bytes = match content {
            0 => {
                // Raw bytes, any length: a file no writer produced.
                log.clean = false;
                let n = c.u16() as usize;
                c.take(n).to_vec()
            }
            1 | 2 => {
                installed.push(base);
                any_v2 |= v2;
                let start = if v2 {
                    spec::HEADER_BYTES
                } else {
                    spec::HEADER_BYTES_V1
                };
                let mut buf = vec![0u8; file_len.max(start)];
                buf[..start].copy_from_slice(&spec::encode_header_blocks(&header));
                if dev.has(Deviation::HEADER_TAIL) {
                    let junk = c.short_run();
                    let at = spec::header_used(header.version);
                    buf[at..at + junk.len()].copy_from_slice(junk);
                }
                if v2 {
                    header_blocks_v2(&mut c, &mut buf, dev2);
                }
                let end = (header.segment_bytes.min(buf.len() as u64) as usize).max(start);
                let mut area = Area {
                    buf,
                    pos: start,
                    end,
                    salt: header.salt,
                    start,
                    v2,
                    lag: 0,
                };
                if content == 1 {
                    let n = c.u16() as usize;
                    let raw = c.take(n);
                    let to = (start + raw.len()).min(area.buf.len());
                    area.buf[start..to].copy_from_slice(&raw[..to - start]);
                    if raw.iter().any(|&b| b != 0) {
                        log.clean = false;
                    }
                } else {
                    ops(&mut c, &mut area, &mut log);
                    // A batch left open where its last record can no
                    // longer fit: a writer rolls to a new segment first.
                    let p = area.pos;
                    let full = p >= area.end || p + spec::padding_len(p as u64) > area.end;
                    if log.batch.is_some() && full {
                        log.clean = false;
                    }
                    // Every write is closed with padding: a segment whose
                    // frames stop mid-block was being written at a crash,
                    // which only the newest can have been.
                    if !last && !full && !p.is_multiple_of(spec::BLOCK) {
                        log.clean = false;
                    }
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
                    log.clean = false;
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
        log.clean = false;
    }

    let mut manifest = None;
    let mut must_fail = None;
    if let Some(d) = mdev {
        let (m, fail) = add_manifest(&mut c, &mut files, &mut log, d, log_id, &installed, any_v2);
        manifest = m;
        must_fail = fail;
    }

    Scenario {
        files,
        mode,
        inflight,
        write_bytes,
        append: flags & 8 != 0,
        expected: log.clean.then_some(log.recs),
        expected_skips: log.skips,
        // A strict open cuts an atomic batch a crash left open and hands
        // its LSNs out again (§6.1); point-in-time recovery resumes above
        // every LSN on disk.
        expected_next: match &log.batch {
            Some((first, _)) if mode == RecoveryMode::Strict => *first,
            _ => log.next,
        },
        manifest,
        must_fail,
    }
}

/// Apply the version-2 header variations to the header blocks in `buf`.
fn header_blocks_v2(c: &mut Cursor<'_>, buf: &mut [u8], dev: V2Deviation) {
    let block = format::BLOCK;
    if dev.has(V2Deviation::NO_COPY) {
        buf[block..2 * block].fill(0);
    }
    if dev.has(V2Deviation::COPY_DAMAGED) {
        let at = block + 16 + c.u8() as usize % 64;
        buf[at] ^= 1 << (c.u8() % 8);
    }
    if dev.has(V2Deviation::BLOCK0_DAMAGED) {
        // Past the version field, so the damage is never read as a later
        // version (which has no copy to fall back to).
        let at = 16 + c.u8() as usize % 64;
        buf[at] ^= 1 << (c.u8() % 8);
    }
    if dev.has(V2Deviation::BLOCK0_BLANK) {
        buf[..block].fill(0);
    }
}

/// Write the node's manifest as the writer of this log last would have
/// (when it installed the newest segment), then apply the deviations.
#[allow(clippy::too_many_arguments)]
fn add_manifest(
    c: &mut Cursor<'_>,
    files: &mut Vec<(String, Vec<u8>)>,
    log: &mut Log,
    d: ManifestDeviation,
    log_id: u64,
    installed: &[u64],
    any_v2: bool,
) -> (Option<spec::ManifestFields>, Option<MustFail>) {
    // A manifest names an installed segment; with none installed it names
    // one that is not there, which no writer leaves.
    if installed.is_empty() {
        log.clean = false;
    }
    let clean_before = log.clean;
    let newest = installed.iter().copied().max().unwrap_or(1);
    let oldest = installed.iter().copied().min().unwrap_or(newest);
    let mut m = spec::ManifestFields {
        node: 1,
        log_id,
        newest_base: newest,
        durable_lsn: newest.saturating_sub(1),
        handed_out: newest.saturating_sub(1),
        oldest_lsn: oldest.max(1),
        ..spec::ManifestFields::default()
    };
    let mut gap = false;
    let mut lost = false;
    if d.has(ManifestDeviation::DROP_NEWEST) && !installed.is_empty() {
        let name = format::segment_file_name(1, newest);
        files.retain(|(n, _)| *n != name);
        log.clean = false;
        gap = true;
    }
    if d.has(ManifestDeviation::DURABLE_AHEAD) {
        m.durable_lsn = log
            .next
            .saturating_sub(1)
            .saturating_add(1 + u64::from(c.u8()));
        log.clean = false;
        lost = true;
    }
    if d.has(ManifestDeviation::HANDED_OUT) {
        m.handed_out = m
            .durable_lsn
            .max(log.next.saturating_sub(1))
            .saturating_add(u64::from(c.u16()));
    }
    if d.has(ManifestDeviation::OLDEST_BEHIND) {
        m.oldest_lsn = oldest.saturating_sub(1 + u64::from(c.u8())).max(1);
        if m.oldest_lsn < oldest {
            log.clean = false;
        }
    }
    if d.has(ManifestDeviation::FOREIGN_LOG) {
        m.log_id = log_id ^ (c.u64() | 1);
        if any_v2 {
            log.clean = false;
        }
    }
    if d.has(ManifestDeviation::NODE) {
        m.node = 2;
        log.clean = false;
    }
    let mut bytes = spec::encode_manifest(&m);
    if d.has(ManifestDeviation::DAMAGED) {
        let at = c.u8() as usize % spec::MANIFEST_BYTES;
        bytes[at] ^= 1 << (c.u8() % 8);
        log.clean = false;
    }
    files.push((format::manifest_file_name(1), bytes));
    if d.has(ManifestDeviation::TEMP_FILE) {
        let junk = c.short_run().to_vec();
        files.push((
            format::temp_file_name(&format::manifest_file_name(1), 1, 0, 0),
            junk,
        ));
    }
    // Only the two documented failures on an otherwise clean log.
    let others = ManifestDeviation::OLDEST_BEHIND
        | ManifestDeviation::FOREIGN_LOG
        | ManifestDeviation::NODE
        | ManifestDeviation::DAMAGED;
    let must_fail = match (gap, lost) {
        _ if !clean_before || d.0 & others != 0 => None,
        (true, true) => Some(MustFail::GapOrLost),
        (true, false) => Some(MustFail::Gap),
        (false, true) => Some(MustFail::Lost),
        (false, false) => None,
    };
    (Some(m), must_fail)
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

/// Readers step over the LSNs a skip frame gave up (docs/format.md §3.2):
/// when a record does not follow the last one read, every LSN between
/// must read back as given up (a point read of each end and a sample
/// between), and the jump is recorded as a gap, so the density checks
/// account for it.
fn given_up_before(wal: &Wal, items: &[Item], lsn: u64) -> Option<Item> {
    let prev = items.iter().rev().find_map(|i| match i {
        Item::Rec(r) => Some(r.lsn),
        Item::Gap { found, .. } => Some(found - 1),
    })?;
    if lsn == prev + 1 {
        return None;
    }
    assert!(lsn > prev + 1, "records out of order: {lsn} after {prev}");
    assert_given_up(wal, prev + 1, lsn - 1);
    Some(Item::Gap {
        expected: prev + 1,
        found: lsn,
    })
}

/// Every LSN of `first..=last` reads back as given up: the ends and a
/// sample between, a point read each.
fn assert_given_up(wal: &Wal, first: u64, last: u64) {
    let step = ((last - first) / 16).max(1);
    for l in (first..=last).step_by(step as usize).chain([last]) {
        match wal.read(l) {
            Err(Error::GivenUp { .. }) => {}
            other => panic!("LSN {l}, stepped over by a reader, reads as {other:?}"),
        }
    }
}

/// Every record of the log, and the gaps skip frames leave: read from 0
/// and, after each `Gap`, on from its `found`.
fn read_all(wal: &Wal) -> Vec<Item> {
    let mut items = Vec::new();
    let mut from = 0;
    for _ in 0..1000 {
        let mut gap = None;
        for r in wal
            .reader_from(from)
            .expect("reader_from after a successful open")
        {
            match r {
                Ok(r) => {
                    items.extend(given_up_before(wal, &items, r.lsn));
                    items.push(Item::Rec(Rec {
                        lsn: r.lsn,
                        stream: r.stream,
                        kind: r.kind,
                        payload: r.payload,
                    }));
                }
                Err(Error::Gap {
                    expected, found, ..
                }) => {
                    gap = Some((expected, found));
                    break;
                }
                Err(e) => panic!("reading back a recovered log: {e}"),
            }
        }
        let Some((expected, found)) = gap else {
            return items;
        };
        assert!(
            found > expected && found > from,
            "a gap that does not move the reader on: {expected}..{found} from {from}"
        );
        items.push(Item::Gap { expected, found });
        from = found;
    }
    panic!("more than 1000 gaps");
}

/// LSNs and gaps, for messages.
fn summary(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| match i {
            Item::Rec(r) => r.lsn.to_string(),
            Item::Gap { expected, found } => format!("gap {expected}..{found}"),
        })
        .collect()
}

fn records(items: &[Item]) -> impl Iterator<Item = &Rec> {
    items.iter().filter_map(|i| match i {
        Item::Rec(r) => Some(r),
        Item::Gap { .. } => None,
    })
}

/// What a full read must look like next to the recovery report.
fn check_read(wal: &Wal, items: &[Item], rep: &ringwal::RecoveryReport) {
    let recs: Vec<&Rec> = records(items).collect();
    assert_eq!(
        recs.len() as u64,
        rep.records,
        "records read vs report.records"
    );
    // Dense and ascending, a gap accounting for every jump.
    let mut due: Option<u64> = None;
    for item in items {
        match item {
            Item::Rec(r) => {
                if let Some(d) = due {
                    assert_eq!(r.lsn, d, "LSNs not dense and ascending");
                }
                due = Some(r.lsn.wrapping_add(1));
            }
            Item::Gap { expected, found } => {
                if let Some(d) = due {
                    assert_eq!(
                        *expected, d,
                        "a gap that does not start where the records end"
                    );
                }
                due = Some(*found);
            }
        }
    }
    // A skip at the end (this open's, or an earlier life's) counts as a
    // gap: the report's last LSN is the skip's, the last record read is
    // below it, and every LSN between reads back as given up.
    let mut skips_at_ends = false;
    if let (Some(first), Some(last)) = (recs.first(), recs.last()) {
        if first.lsn > rep.first_lsn {
            assert_given_up(wal, rep.first_lsn, first.lsn - 1);
            skips_at_ends = true;
        }
        if last.lsn < rep.last_lsn {
            assert_given_up(wal, last.lsn + 1, rep.last_lsn);
            skips_at_ends = true;
        }
    }
    let gaps = items.len() != recs.len() || skips_at_ends;
    if let (Some(first), Some(last)) = (recs.first(), recs.last()) {
        if gaps {
            assert!(
                first.lsn >= rep.first_lsn,
                "first LSN read below the report's"
            );
            assert!(last.lsn <= rep.last_lsn, "last LSN read above the report's");
        } else {
            assert_eq!(first.lsn, rep.first_lsn, "first LSN read vs report");
            assert_eq!(last.lsn, rep.last_lsn, "last LSN read vs report");
        }
    }
    // A point-in-time skip is where the log ends now; readers step over
    // the LSNs it gave up, so the read ends below it.
    if let Some((first, last)) = rep.skipped {
        assert!(
            recs.last().is_none_or(|r| r.lsn < first),
            "a record read inside or above the skip {first}..={last}: {:?}",
            summary(items)
        );
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
        /// Segments read through their header's copy.
        from_copy: usize,
        /// LSNs a point-in-time open skipped.
        skipped: Option<(u64, u64)>,
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

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Whether the engine's error is one the model names.
fn is_problem(p: &spec::Problem, e: &Error) -> bool {
    match (p, e) {
        (spec::Problem::Corrupt(f), Error::Corrupt { file, .. }) => file_name(file) == *f,
        (spec::Problem::Gap(f), Error::Gap { file, .. }) => file_name(file) == *f,
        (spec::Problem::ManifestGap, Error::Gap { .. }) => true,
        (spec::Problem::ManifestLost, Error::Lost { .. }) => true,
        _ => false,
    }
}

/// The records of the model's reading, as a reader returns them.
fn model_records(m: &spec::Opened) -> Vec<Rec> {
    m.records
        .iter()
        .map(|(lsn, stream, k, payload)| Rec {
            lsn: *lsn,
            stream: *stream,
            kind: Kind::from_u8(*k).expect("a record kind"),
            payload: payload.clone(),
        })
        .collect()
}

/// Point-in-time: the highest LSN any valid frame of the log's segments
/// carries (every 8-aligned offset, past damage included), counting only
/// files whose header the document accepts for this log.
fn highest_on_disk(
    dir: &BTreeMap<String, Vec<u8>>,
    manifest: Option<&spec::ManifestFields>,
) -> u64 {
    let mut high = 0;
    for (name, b) in dir {
        let Some((1, base)) = spec::parse_segment_name(name) else {
            continue;
        };
        let Some(h) = spec::segment_head(b).usable() else {
            continue;
        };
        let ok = (1..=spec::MAX_LSN).contains(&h.base_lsn)
            && h.node == 1
            && h.base_lsn == base
            && (!spec::v2_layout(h.version) || manifest.is_none_or(|m| m.log_id == h.log_id))
            && b.len() as u64 <= h.segment_bytes;
        if ok {
            // An LSN past MAX_LSN is none a writer hands out (§2.1; a skip
            // reaching past it is an invalid frame, §3.2): no reuse to
            // guard against, so it does not count (clamping it to MAX_LSN
            // would demand an exhausted log).
            let lsns = spec::every_valid_lsn(b, &h, b.len());
            high = lsns
                .into_iter()
                .filter(|&l| l <= spec::MAX_LSN)
                .fold(high, u64::max);
        }
    }
    high
}

/// The oracles, on a directory already holding `sc.files`.
pub fn run(dir: &Path, sc: &Scenario) -> Outcome {
    let cfg = sc.config(sc.mode);
    let strict = sc.mode == RecoveryMode::Strict;
    let input = sc.directory();
    let model = spec::judge(&input, 1, cfg.torn_window());
    let manifest = input
        .get(&format::manifest_file_name(1))
        .and_then(|b| spec::decode_manifest(b))
        .filter(|m| m.node == 1);

    let before = snapshot(dir);
    let verified = ringwal::verify::verify(dir, &cfg);
    assert!(snapshot(dir) == before, "verify modified the directory");

    let (wal, rep) = match Wal::open(dir, cfg.clone()) {
        Ok(x) => x,
        Err(e) => {
            assert!(
                sc.expected.is_none(),
                "a log a correct writer could have left failed to open: {e}"
            );
            // Point in time fails only where the log must resume past
            // MAX_LSN with no segment to record a skip in (docs/fuzzing.md,
            // V1): then with `LsnExhausted`.
            if !strict && matches!(e, Error::LsnExhausted { .. }) {
                let high = highest_on_disk(&input, manifest.as_ref());
                assert!(
                    high >= format::MAX_LSN
                        || manifest
                            .as_ref()
                            .is_some_and(|m| m.handed_out >= format::MAX_LSN),
                    "point-in-time open failed with nothing on disk at MAX_LSN: {e}"
                );
                return Outcome::Failed(e.to_string());
            }
            assert!(strict, "point-in-time open failed: {e}");
            assert!(
                matches!(
                    e,
                    Error::Corrupt { .. } | Error::Gap { .. } | Error::Lost { .. }
                ),
                "open failed with neither Corrupt, Gap nor Lost: {e:?}"
            );
            let v = verified.expect("verify failed where open reported damage");
            assert_eq!(
                v.consistent(),
                Some(false),
                "verify consistent but open failed: {e}"
            );
            assert_eq!(
                v.problems[0].to_string(),
                e.to_string(),
                "open's error is not verify's first problem"
            );
            match &model {
                spec::Judgment::Opens(_) => {
                    panic!("strict open failed where docs/format.md says the log opens: {e}")
                }
                spec::Judgment::Fails(ps) => assert!(
                    ps.iter().any(|p| is_problem(p, &e)),
                    "strict open failed with {e}, docs/format.md says {ps:?}"
                ),
                spec::Judgment::Unspecified(_) => {}
            }
            match sc.must_fail {
                Some(MustFail::Gap) => assert!(matches!(e, Error::Gap { .. }), "{e:?}"),
                Some(MustFail::Lost) => assert!(matches!(e, Error::Lost { .. }), "{e:?}"),
                Some(MustFail::GapOrLost) => {
                    assert!(matches!(e, Error::Gap { .. } | Error::Lost { .. }), "{e:?}")
                }
                None => {}
            }
            return Outcome::Failed(e.to_string());
        }
    };
    if strict {
        let v = verified.expect("verify failed where open succeeded");
        assert_eq!(
            v.consistent(),
            Some(true),
            "open succeeded but verify found {:?}",
            v.problems
        );
        assert_eq!(v.records, rep.records, "verify vs open record count");
        assert_eq!(
            v.torn_tail.as_ref().map(|t| (&t.file, t.offset)),
            rep.truncated.as_ref().map(|t| (&t.file, t.offset)),
            "verify's torn tail vs open's truncation"
        );
        assert_eq!(
            v.headers_from_copy, rep.headers_from_copy,
            "verify vs open: headers read through their copy"
        );
        if let spec::Judgment::Fails(ps) = &model {
            panic!("strict open succeeded where docs/format.md says {ps:?}");
        }
        if let Some(f) = sc.must_fail {
            panic!("strict open succeeded where the manifest says {f:?}");
        }
    }

    let mut items = read_all(&wal);
    check_read(&wal, &items, &rep);
    let recs: Vec<Rec> = records(&items).cloned().collect();
    if let spec::Judgment::Opens(m) = &model {
        let want = model_records(m);
        assert!(
            recs == want,
            "recovered records differ from docs/format.md's reading\n got:  {:?}\n want: {:?}",
            recs.iter().map(|r| r.lsn).collect::<Vec<_>>(),
            want.iter().map(|r| r.lsn).collect::<Vec<_>>()
        );
        assert_eq!(
            rep.truncated
                .as_ref()
                .map(|t| (file_name(&t.file), t.offset)),
            m.torn.as_ref().map(|(f, at)| (f.clone(), *at as u64)),
            "the cut differs from the torn tail docs/format.md finds"
        );
        let mut copies: Vec<String> = rep.headers_from_copy.iter().map(|p| file_name(p)).collect();
        copies.sort();
        assert_eq!(copies, m.from_copy, "headers read through their copy");
    }
    if let Some(want) = &sc.expected {
        assert!(
            &recs == want,
            "recovered records differ from the records written\n got:  {:?}\n want: {:?}",
            recs.iter().map(|r| r.lsn).collect::<Vec<_>>(),
            want.iter().map(|r| r.lsn).collect::<Vec<_>>()
        );
        let mut gaps: Vec<(u64, u64)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Gap { expected, found } => Some((*expected, found - expected)),
                Item::Rec(_) => None,
            })
            .collect();
        // This open's own skip, if a record already follows it.
        if let Some((first, _)) = rep.skipped {
            gaps.retain(|&(expected, _)| expected != first);
        }
        assert_eq!(gaps, sc.expected_skips, "skips written vs gaps read");
    }

    let next = wal.next_lsn();
    if let Some(last) = recs.last() {
        assert!(
            next > last.lsn,
            "next LSN {next} not past recovered {}",
            last.lsn
        );
    }
    if !strict {
        // Never an LSN handed out twice (§7, last paragraph).
        let high = highest_on_disk(&input, manifest.as_ref()).min(format::MAX_LSN);
        assert!(
            next > high,
            "point-in-time recovery resumes at {next}, but a valid frame on disk carries LSN {high}"
        );
        if let Some(m) = &manifest {
            assert!(
                next > m.handed_out.min(format::MAX_LSN),
                "point-in-time recovery resumes at {next}, but the manifest handed out {}",
                m.handed_out
            );
        }
        if let Some((_, last)) = rep.skipped {
            assert_eq!(next, last + 1, "next LSN after the skip the report lists");
        }
    }
    if sc.expected.is_some() {
        let mut want = sc.expected_next;
        if !strict {
            want = want.max(manifest.map_or(0, |m| m.handed_out) + 1);
        }
        assert_eq!(next, want, "next LSN of a clean log");
    }
    // A log resumed past the LSN limit (only damage gets there) must
    // refuse appends rather than wrap.
    let exhausted = next > format::MAX_LSN;
    if sc.append && exhausted {
        let e = wal
            .append(APPENDED_STREAM, APPENDED)
            .expect_err("append past the LSN limit succeeded");
        assert!(matches!(e, Error::LsnExhausted { .. }), "{e:?}");
    }
    if sc.append && !exhausted {
        let t = wal
            .append(APPENDED_STREAM, APPENDED)
            .expect("append after recovery");
        assert_eq!(t.lsn(), next, "append did not get next_lsn");
        t.wait(Level::Durable)
            .expect("durable append after recovery");
        items.extend(given_up_before(&wal, &items, next));
        items.push(Item::Rec(Rec {
            lsn: next,
            stream: APPENDED_STREAM,
            kind: Kind::Data,
            payload: APPENDED.to_vec(),
        }));
    }
    wal.close().expect("close after recovery");

    // What a closed log leaves is a log the document says opens, holding
    // what was read.
    let closed: BTreeMap<String, Vec<u8>> = snapshot(dir).into_iter().collect();
    match spec::judge(&closed, 1, sc.config(RecoveryMode::Strict).torn_window()) {
        spec::Judgment::Fails(ps) => {
            panic!("docs/format.md says the log a close left is damaged: {ps:?}")
        }
        spec::Judgment::Opens(m) => {
            let want: Vec<Rec> = records(&items).cloned().collect();
            assert!(
                model_records(&m) == want,
                "docs/format.md reads other records from the closed log\n doc:  {:?}\n read: {:?}",
                m.records.iter().map(|r| r.0).collect::<Vec<_>>(),
                want.iter().map(|r| r.lsn).collect::<Vec<_>>()
            );
            assert_eq!(
                m.torn, None,
                "docs/format.md finds a torn tail after a clean close"
            );
        }
        spec::Judgment::Unspecified(_) => {}
    }

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
    check_read(&wal, &again, &rep2);
    if again != items {
        panic!(
            "records changed across a close and reopen\n before: {:?}\n after:  {:?}",
            summary(&items),
            summary(&again)
        );
    }
    wal.close().expect("close after the second open");

    let v = ringwal::verify::verify(dir, &cfg2).expect("verify after a clean close");
    assert_eq!(
        v.consistent(),
        Some(true),
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
        from_copy: rep.headers_from_copy.len(),
        skipped: rep.skipped,
    }
}
