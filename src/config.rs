//! Configuration: what the log does, with limits checked at open.

use std::sync::Arc;
use std::time::Duration;

use ringwal_platform::{RealFs, Vfs};

use crate::at_rest::codec::Compression;
use crate::at_rest::crypt::{KeyProvider, Keys, TAG_BYTES};
use crate::at_rest::format::{self, Codec, Kind};
use crate::at_rest::packing::{Cursor, CLOSE_ROOM};
use crate::at_rest::payload;
use crate::error::{Error, Result};
use crate::obs::observer::{DurabilityObserver, ObserverSlot};

/// Which I/O queue the ring thread drives.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Backend {
    /// io_uring where the kernel allows it, else the threaded backend:
    /// the default. Containers' default seccomp profiles, the
    /// `kernel.io_uring_disabled` sysctl and old kernels refuse
    /// `io_uring_setup`; then the log runs on the threaded backend, and
    /// [`Stats::backend`](crate::Stats::backend) and
    /// [`RecoveryReport::backend`](crate::RecoveryReport::backend) say
    /// which one runs. Cost: one `io_uring_setup` attempt at open.
    #[default]
    Auto,
    /// io_uring with several writes in flight (Linux only); an open where
    /// the kernel refuses it fails with
    /// [`Error::BackendUnavailable`](crate::Error::BackendUnavailable).
    Uring,
    /// One blocking I/O thread; the portable backend (the default
    /// elsewhere). `F_FULLFSYNC` on macOS.
    Threaded,
}

/// How far a record has travelled; what a [`Ticket`](crate::Ticket) waits for.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Level {
    /// Sequenced and copied into the log's memory: lost by a process crash.
    Accepted,
    /// Written to the file: survives a process crash, not a power loss.
    Written,
    /// On stable storage: survives a power loss.
    Durable,
}

/// How writes are made durable when the log is in durable mode.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum SyncMethod {
    /// One write with `RWF_DSYNC` (O_DSYNC semantics for that write only).
    Dsync,
    /// A plain write linked to an `fdatasync` of the segment.
    WriteThenFdatasync,
    /// Plain writes, and one `fdatasync` covering every write completed
    /// since the last one, issued as soon as a write completes while no
    /// sync is in flight: group commit at the flush as well as at the
    /// write. A record is acknowledged `Durable` only once a sync issued
    /// after its write completed returns. Costs one more submission per
    /// acknowledgement than `Dsync` when writes come one at a time (about
    /// 0.7x the records/s of `Dsync` for one producer on the virtio disk
    /// measured in docs/benchmarks-history.md), and wins where each `RWF_DSYNC`
    /// write is expensive by itself: with io_uring on a device without
    /// FUA such a write is handed to a kernel worker thread, and with the
    /// CPUs busy every such hop waits for a time slice (1.6x the
    /// records/s of `Dsync` and half its p99 there). Headers, seals and
    /// the closing vouch are written as with `WriteThenFdatasync`.
    Grouped,
}

impl SyncMethod {
    /// Whether each write is durable by itself when it completes (the
    /// durable watermark moves with write completions), rather than by
    /// a later sync (`Grouped`).
    pub(crate) fn per_write(self) -> bool {
        match self {
            SyncMethod::Dsync | SyncMethod::WriteThenFdatasync => true,
            SyncMethod::Grouped => false,
        }
    }
}

/// Whether segments are opened with O_DIRECT (F_NOCACHE on macOS).
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum DirectIo {
    /// Use it where the filesystem supports it, else buffered I/O.
    Auto,
    /// Require it: open fails where the filesystem refuses it.
    On,
    /// Never: buffered I/O through the page cache.
    Off,
}

/// `Display`, `FromStr` and the list of names for a public enum, so a
/// command line or a config file names its values one way, the way the
/// library prints them.
macro_rules! named {
    ($ty:ident, $what:literal, $($variant:ident => $name:literal),+ $(,)?) => {
        impl $ty {
            /// Every value's name, as `Display` prints and `FromStr` reads it.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// This value's name.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = Error;

            /// The value named `s` (see `NAMES`); `InvalidConfig` naming the
            /// choices otherwise.
            fn from_str(s: &str) -> Result<$ty> {
                match s {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(Error::InvalidConfig(format!(
                        "unknown {} {s:?}: expected one of {}",
                        $what,
                        Self::NAMES.join(", ")
                    ))),
                }
            }
        }
    };
}

named!(Backend, "backend", Auto => "auto", Uring => "uring", Threaded => "threaded");
named!(Level, "level", Accepted => "accepted", Written => "written", Durable => "durable");
named!(SyncMethod, "sync method", Dsync => "dsync", WriteThenFdatasync => "write-then-fdatasync", Grouped => "grouped");
named!(DirectIo, "O_DIRECT policy", Auto => "auto", On => "on", Off => "off");
named!(RecoveryMode, "recovery mode", Strict => "strict", PointInTime => "point-in-time");
named!(Codec, "codec", None => "none", Lz4 => "lz4", Zstd => "zstd");

/// When appended records become durable: the log's mode.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Durability {
    /// Every write is durable before it is acknowledged (`RWF_DSYNC`, or
    /// a write and an `fdatasync`, see [`SyncMethod`]); tickets wait for
    /// [`Level::Durable`] by default. The default.
    EveryWrite,
    /// Writes are plain and acknowledged at [`Level::Written`] (they
    /// survive a process crash); durability comes from `Wal::sync`, a
    /// wait for `Level::Durable` (one fdatasync shared by every waiter),
    /// and, with `sync_interval`, a background sync at that interval
    /// whenever something was written since the last one. For
    /// collectors: the interval bounds what a power loss can take.
    Deferred {
        /// How often to sync in the background; `None`: only on demand.
        /// In a configuration file, a duration such as `"50ms"` or `"2s"`.
        #[cfg_attr(feature = "serde", serde(default, with = "humantime_serde"))]
        sync_interval: Option<Duration>,
    },
}

/// What recovery does with a damaged log.
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum RecoveryMode {
    /// Truncate only a provably torn tail; anything else fails `open`
    /// with `Corrupt` or `Gap`. The default.
    Strict,
    /// Point-in-time: recover up to the first bad frame wherever it is,
    /// as if the log ended there. Later segments are renamed aside with a
    /// `.corrupt` suffix (kept as evidence, never read again) and the
    /// report lists them. For operators who prefer availability over the
    /// records after the damage; never the default.
    PointInTime,
}

/// What an append does when starting a new segment would take the log
/// over [`ConfigBuilder::max_log_bytes`].
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum WhenFull {
    /// The append waits, up to `timeout`, for a checkpoint to free a
    /// segment, then fails with [`Error::LogFull`] (taking no LSN, the log
    /// unharmed): the disk never fills, so the log is never poisoned by
    /// ENOSPC. Appends that fit the current segment go on meanwhile.
    Block {
        /// The longest an append waits: at most a year (a longer one is
        /// refused at open). In a configuration file, a duration such as
        /// `"250ms"` or `"10s"`.
        #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
        timeout: Duration,
    },
    /// The oldest segments are deleted (never the one being written) until
    /// the new one fits; each dropped LSN range is reported to
    /// [`DurabilityObserver::records_dropped`] and in `Stats`, so a
    /// collector knows exactly what it lost.
    DropOldest,
}

/// Largest segment (1 TiB): any count of segments a disk can hold times
/// this stays far inside `u64`.
const MAX_SEGMENT_BYTES: u64 = 1 << 40;

/// Most writes in flight at once.
const MAX_INFLIGHT: usize = 256;

/// Largest target size of one write.
const MAX_WRITE_BYTES: usize = 64 << 20;

/// Longest an append may wait for room under the size limit (a year): a
/// deadline this far ahead is one every clock can represent.
const MAX_BLOCK_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How long a blocking wait spins before it parks, while no other thread
/// waits ([`ConfigBuilder::wait_spin`]). On the virtio disk of
/// docs/benchmarks.md a durable 1 KiB write takes 100-150 µs (p99 250-350
/// µs), and a parked thread's CPU halts at once (the guest does not poll),
/// so waking it costs the hypervisor's round trip: one producer appending
/// and waiting gave 1.28x the records/s with 300 µs of spinning, and 1 ms
/// cut its p99 to 0.51x and 0.67x of 300 µs's (595 to 302 µs, 532 to 358
/// µs, two runs) by covering the slow writes too; alternating rounds of
/// one build. 4, 16 and 64 producers, 64 KiB x 8 and 1 MiB x 4 stayed
/// within the noise (0.94-1.18x), since a second waiter stops the spin.
/// Cost: up to this much CPU per wait of a lone waiter.
pub const DEFAULT_WAIT_SPIN: Duration = Duration::from_millis(1);

/// Longest [`ConfigBuilder::wait_spin`] allowed: past a few device writes'
/// time a spin only burns the CPU a parked waiter would have given back.
const MAX_WAIT_SPIN: Duration = Duration::from_millis(10);
const _: () = assert!(DEFAULT_WAIT_SPIN.as_nanos() <= MAX_WAIT_SPIN.as_nanos());

/// Most bytes [`Config::buffer_bytes`] can come to, whatever the settings.
const MAX_BUFFER_BYTES: usize = 128 << 20;

const _: () = assert!(
    MAX_SEGMENT_BYTES.is_multiple_of(format::BLOCK as u64)
        && MAX_SEGMENT_BYTES >= format::MIN_SEGMENT_BYTES
        && MAX_SEGMENT_BYTES <= u64::MAX / 2,
    "the segment size range is whole blocks, not empty, and two segments fit u64"
);
const _: () = assert!(
    MAX_WRITE_BYTES.is_multiple_of(format::BLOCK) && MAX_WRITE_BYTES >= format::BLOCK,
    "the write size range is whole blocks and not empty"
);
const _: () = assert!(
    format::VOUCH_LEN + CLOSE_ROOM <= 2 * format::BLOCK,
    "the two blocks a buffer has beyond its largest frame hold the vouch and the closing padding"
);
const _: () = assert!(
    MAX_WRITE_BYTES <= MAX_BUFFER_BYTES
        && (format::frame_len(format::MAX_PAYLOAD) + 2 * format::BLOCK)
            .next_multiple_of(format::BLOCK)
            <= MAX_BUFFER_BYTES,
    "a staging buffer is at most 128 MiB"
);
const _: () = assert!(
    (MAX_INFLIGHT as u128) * (MAX_BUFFER_BYTES as u128) <= u64::MAX as u128,
    "the torn window never overflows u64"
);

/// Configuration for [`Wal::open`](crate::Wal::open). Build with
/// [`Config::builder`] or start from [`Config::default`].
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) node: u32,
    pub(crate) segment_bytes: u64,
    pub(crate) backend: Backend,
    pub(crate) durable: bool,
    pub(crate) sync_method: SyncMethod,
    pub(crate) max_record_bytes: usize,
    pub(crate) max_inflight: usize,
    pub(crate) write_bytes: usize,
    pub(crate) ring_cpu: Option<usize>,
    pub(crate) wait_spin: Duration,
    pub(crate) direct_io: DirectIo,
    pub(crate) recovery: RecoveryMode,
    pub(crate) sync_interval: Option<Duration>,
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) observer: ObserverSlot,
    pub(crate) create_if_missing: bool,
    pub(crate) release_unarchived: bool,
    pub(crate) file_mode: u32,
    pub(crate) dir_mode: u32,
    pub(crate) soft_log_bytes: Option<u64>,
    pub(crate) keys: Keys,
    pub(crate) compression: Compression,
    pub(crate) max_log_bytes: Option<u64>,
    pub(crate) when_full: WhenFull,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            node: 1,
            segment_bytes: 64 << 20,
            backend: Backend::Auto,
            durable: true,
            sync_method: SyncMethod::Dsync,
            max_record_bytes: 1 << 20,
            max_inflight: 8,
            write_bytes: 1 << 20,
            ring_cpu: None,
            wait_spin: DEFAULT_WAIT_SPIN,
            direct_io: DirectIo::Auto,
            recovery: RecoveryMode::Strict,
            sync_interval: None,
            vfs: RealFs::shared(),
            observer: ObserverSlot::default(),
            create_if_missing: true,
            release_unarchived: false,
            file_mode: ringwal_platform::PRIVATE_FILE_MODE,
            dir_mode: ringwal_platform::PRIVATE_DIR_MODE,
            soft_log_bytes: None,
            keys: Keys::default(),
            compression: Compression::default(),
            max_log_bytes: None,
            when_full: WhenFull::Block {
                timeout: Duration::from_secs(10),
            },
        }
    }
}

impl Config {
    /// Start a builder from the defaults: node 1, 64 MiB segments, the
    /// `Auto` backend (io_uring where allowed), durable writes with `RWF_DSYNC`,
    /// records up to 1 MiB, 8 writes in flight of up to 1 MiB each,
    /// O_DIRECT where supported, strict recovery.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            cfg: Config::default(),
            record_limit_set: false,
        }
    }

    /// The node id; segment names carry it, and each node's files are
    /// independent even in a shared directory.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// When appended records become durable (see [`Durability`]).
    pub fn durability(&self) -> Durability {
        if self.durable {
            Durability::EveryWrite
        } else {
            Durability::Deferred {
                sync_interval: self.sync_interval,
            }
        }
    }

    /// Segment file size in bytes.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// The I/O backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How durable writes are made durable (as configured; `Stats` says
    /// what a file system that does not honour `RWF_DSYNC` got instead).
    pub fn sync_method(&self) -> SyncMethod {
        self.sync_method
    }

    /// Largest payload accepted, in bytes.
    pub fn max_record_bytes(&self) -> usize {
        self.max_record_bytes
    }

    /// Writes the ring keeps in flight at once.
    pub fn max_inflight(&self) -> usize {
        self.max_inflight
    }

    /// Target size of one write.
    pub fn write_bytes(&self) -> usize {
        self.write_bytes
    }

    /// The CPU the ring thread (and the segment preparer it starts) is
    /// pinned to, if any.
    pub fn ring_cpu(&self) -> Option<usize> {
        self.ring_cpu
    }

    /// How long a lone blocking wait spins before it parks.
    pub fn wait_spin(&self) -> Duration {
        self.wait_spin
    }

    /// The O_DIRECT policy (`Stats::direct_io` says what it gave).
    pub fn direct_io(&self) -> DirectIo {
        self.direct_io
    }

    /// Whether `Wal::open` creates a log that is not there.
    pub fn create_if_missing(&self) -> bool {
        self.create_if_missing
    }

    /// Whether checkpoints and size limits may remove segments the log's
    /// archive does not hold yet (default false: they may not).
    pub fn release_unarchived(&self) -> bool {
        self.release_unarchived
    }

    /// The permission bits of every file the log creates (default 0600).
    pub fn file_mode(&self) -> u32 {
        self.file_mode
    }

    /// The permission bits of every directory the log creates (default
    /// 0700).
    pub fn dir_mode(&self) -> u32 {
        self.dir_mode
    }

    /// The soft limit on the log's size on disk, if any.
    pub fn soft_log_bytes(&self) -> Option<u64> {
        self.soft_log_bytes
    }

    /// The hard limit on the log's segments, if any, and what happens at it.
    pub fn max_log_bytes(&self) -> Option<(u64, WhenFull)> {
        self.max_log_bytes.map(|m| (m, self.when_full))
    }

    /// How data payloads are compressed (default: not at all).
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Whether a key provider is set: segments are then encrypted while
    /// it names a current key, and readable while it has theirs.
    pub fn has_keys(&self) -> bool {
        self.keys.provided()
    }

    /// The default acknowledgement level: `Durable` when every write is
    /// made durable, `Written` when durability is deferred.
    pub fn default_level(&self) -> Level {
        if self.durable {
            Level::Durable
        } else {
            Level::Written
        }
    }

    /// How [`Wal::open`](crate::Wal::open) treats damage that is not a
    /// torn tail (see [`RecoveryMode`]).
    pub fn recovery_mode(&self) -> RecoveryMode {
        self.recovery
    }

    /// The widest region a crash can leave partly written at the tail of
    /// the newest segment: every write that may have been in flight.
    /// Settings past their limits (a configuration `Wal::open` refuses,
    /// handed to a reader) count at the limit, so this never overflows.
    pub fn torn_window(&self) -> u64 {
        (self.max_inflight.min(MAX_INFLIGHT) as u64) * (self.buffer_bytes() as u64)
    }

    /// Whether a batch write is durable by itself when it completes (the
    /// durable watermark moves with writes), with `method` the sync method
    /// in use; otherwise a later sync makes it durable (written mode,
    /// `SyncMethod::Grouped`). The one place this is decided. Cost: none.
    pub(crate) fn write_is_durable_alone(&self, method: SyncMethod) -> bool {
        self.durable && method.per_write()
    }

    /// Bytes in one staging buffer: a full write plus room for the largest
    /// record and its padding, so any record fits in an empty buffer.
    /// Settings past their limits count at the limit, as in
    /// [`torn_window`](Self::torn_window): at most 128 MiB and 8 KiB.
    pub(crate) fn buffer_bytes(&self) -> usize {
        let need = format::frame_len(self.max_stored_bytes()) + 2 * format::BLOCK;
        let write = self.write_bytes.min(MAX_WRITE_BYTES);
        let bytes = write.max(need).next_multiple_of(format::BLOCK);
        debug_assert!(
            format::VOUCH_LEN + format::frame_len(self.max_stored_bytes()) + CLOSE_ROOM <= bytes
                && bytes <= MAX_BUFFER_BYTES,
            "an empty staging buffer holds the largest record (packing's precondition)"
        );
        bytes
    }

    /// Whether records whose payloads are `lens` bytes as stored before
    /// any sealing (after compression, if it paid), placed in order as
    /// one record or one atomic batch, fit a fresh segment of this
    /// configuration: behind its header, in staging buffers of
    /// [`buffer_bytes`](Self::buffer_bytes), each opened by its vouch and
    /// closed by padding. A segment seals frames of `kind` only while the
    /// key provider names a current key, decided at each roll, so with a
    /// provider they must fit both sealed and plain. The one place this
    /// is decided: validation asks it of the largest records, the
    /// reservation of every append before it takes its lock.
    ///
    /// `Err(TooLarge)` with the bytes the records would take in a fresh
    /// segment and the room one has. Cost: one pass over `lens` per way
    /// of sealing; no allocation.
    pub(crate) fn fit_fresh<I>(&self, lens: I, kind: Kind) -> Result<()>
    where
        I: Iterator<Item = usize> + Clone,
    {
        let fresh = Cursor::at(format::HEADER_BYTES as u64);
        let cap = self.buffer_bytes();
        let ways: &[bool] = if self.keys.provided() && payload::seals(kind) {
            &[false, true]
        } else {
            &[false]
        };
        for &sealed in ways {
            let flens = lens
                .clone()
                .map(|n| format::frame_len(payload::stored_len(n, sealed)));
            let after = fresh.place_all(flens, cap);
            if !Cursor::fits(after, self.segment_bytes) {
                assert!(
                    self.segment_bytes >= fresh.end,
                    "a validated segment holds its header blocks"
                );
                return Err(Error::TooLarge {
                    len: (after.closed_end() - fresh.end) as usize,
                    max: (self.segment_bytes - fresh.end) as usize,
                });
            }
        }
        Ok(())
    }

    /// Whether a record of every length up to `len` fits a fresh segment
    /// alone ([`fit_fresh`](Self::fit_fresh)). Where a frame's buffer
    /// closes does not grow with the frame: one ending on a block
    /// boundary needs no padding, while one 8 or 16 bytes shorter leaves
    /// too little room for a padding frame's header, and its padding runs
    /// through the next block. So the worst lengths up to `len` are `len`
    /// and the two one and two frame alignments below it (compression
    /// only ever stores fewer bytes). Cost: at most six placements.
    fn fits_every_record_up_to(&self, len: usize) -> bool {
        (0..3).all(|k| {
            let n = len.saturating_sub(k * format::FRAME_ALIGN);
            self.fit_fresh(std::iter::once(n), Kind::Data).is_ok()
        })
    }

    /// The largest record limit up to `cap` such that a record of every
    /// length up to it fits an empty segment (each limit tried with the
    /// staging buffers it would size); `cap` itself when it fits, or when
    /// the segment size is out of range (validation then names that
    /// setting instead). 1 when nothing fits, which validation refuses.
    fn record_limit_fitting(&self, cap: usize) -> usize {
        let segment_ok = self.segment_bytes.is_multiple_of(format::BLOCK as u64)
            && (format::MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_bytes);
        let cap = cap.min(format::MAX_PAYLOAD - TAG_BYTES);
        if !segment_ok || cap == 0 {
            return cap;
        }
        let fits = |limit: usize| {
            let mut trial = self.clone();
            trial.max_record_bytes = limit;
            trial.fits_every_record_up_to(limit)
        };
        if fits(cap) {
            return cap;
        }
        // What fits is every limit up to some largest one.
        let (mut yes, mut no) = (1, cap);
        while no - yes > 1 {
            let mid = yes + (no - yes) / 2;
            *(if fits(mid) { &mut yes } else { &mut no }) = mid;
        }
        debug_assert!(yes == 1 || fits(yes), "the limit picked fits");
        yes
    }

    /// The largest payload a frame of this writer stores: the largest
    /// record with an authentication tag (compression only ever stores
    /// fewer bytes than it was given). A record size past the format's
    /// limit counts at the limit.
    pub(crate) fn max_stored_bytes(&self) -> usize {
        let stored = self.max_record_bytes.min(format::MAX_PAYLOAD - TAG_BYTES) + TAG_BYTES;
        debug_assert!(
            stored <= format::MAX_PAYLOAD,
            "no frame of this writer exceeds the format's limit"
        );
        stored
    }

    /// Refuse every setting out of range, naming it, before anything is
    /// derived from the settings: each range is checked in arithmetic
    /// that cannot overflow, so no value panics or wraps here.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        for (what, mode, owner) in [
            ("file_mode", self.file_mode, 0o600),
            ("dir_mode", self.dir_mode, 0o700),
        ] {
            if mode & !0o777 != 0 || mode & owner != owner {
                return bad(format!(
                    "{what} {mode:#o} must be permission bits (at most 0o777) keeping the owner's {owner:#o}"
                ));
            }
        }
        if self.node > format::MAX_NODE {
            return bad(format!("node {} exceeds {}", self.node, format::MAX_NODE));
        }
        if !self.segment_bytes.is_multiple_of(format::BLOCK as u64)
            || !(format::MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_bytes)
        {
            return bad(format!(
                "segment_bytes {} must be a multiple of {} in 64 KiB..=1 TiB",
                self.segment_bytes,
                format::BLOCK
            ));
        }
        // Room for an authentication tag within the format's limit.
        let max_record = format::MAX_PAYLOAD - TAG_BYTES;
        if !(1..=max_record).contains(&self.max_record_bytes) {
            return bad(format!(
                "max_record_bytes {} must be in 1..={max_record}",
                self.max_record_bytes
            ));
        }
        if !(1..=MAX_INFLIGHT).contains(&self.max_inflight) {
            return bad(format!(
                "max_inflight {} must be in 1..={MAX_INFLIGHT}",
                self.max_inflight
            ));
        }
        if self.wait_spin > MAX_WAIT_SPIN {
            return bad(format!(
                "wait_spin {:?} exceeds {MAX_WAIT_SPIN:?}",
                self.wait_spin
            ));
        }
        if !(format::BLOCK..=MAX_WRITE_BYTES).contains(&self.write_bytes) {
            return bad(format!(
                "write_bytes {} must be in 4 KiB..=64 MiB",
                self.write_bytes
            ));
        }
        self.validate_limits()?;
        crate::at_rest::codec::check_supported(self.compression.codec)?;
        // Every size is in range now, so what is derived from them below
        // is small.
        if !self.fits_every_record_up_to(self.max_record_bytes) {
            let fits = self.record_limit_fitting(self.max_record_bytes);
            return bad(format!(
                "max_record_bytes {} does not fit in a segment of {} bytes: at most {fits} does",
                self.max_record_bytes, self.segment_bytes
            ));
        }
        assert!(
            self.torn_window() >= self.buffer_bytes() as u64,
            "the torn window holds at least one whole write"
        );
        self.validate_placement()
    }

    /// The size limit and what happens at it: the segment being written
    /// is never dropped nor waited away, so the limit must leave room for
    /// it and one more; a wait must end at an instant the clock can name.
    fn validate_limits(&self) -> Result<()> {
        if let Some(max) = self.max_log_bytes {
            // Two segments of at most 1 TiB never overflow.
            let two = 2 * self.segment_bytes;
            if max < two {
                return Err(Error::InvalidConfig(format!(
                    "max_log_bytes {max} must be at least two segments ({two} bytes)"
                )));
            }
        }
        if let WhenFull::Block { timeout } = self.when_full
            && timeout > MAX_BLOCK_TIMEOUT
        {
            return Err(Error::InvalidConfig(format!(
                "max_log_bytes: the Block timeout {timeout:?} exceeds a year"
            )));
        }
        Ok(())
    }

    /// Where the ring thread runs and which queue it drives.
    fn validate_placement(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if let Some(cpu) = self.ring_cpu {
            let allowed = ringwal_platform::cpu::allowed();
            if !allowed.contains(&cpu) {
                return bad(format!(
                    "ring_cpu {cpu} is not one this process may run on (allowed: {allowed:?})"
                ));
            }
        }
        if self.backend == Backend::Uring && !self.vfs.is_real() {
            return bad("backend: io_uring needs the real file system".into());
        }
        if self.backend == Backend::Uring && !cfg!(target_os = "linux") {
            return bad("backend: io_uring needs Linux".into());
        }
        Ok(())
    }
}

/// Builder for [`Config`]; every setter is checked when the log opens.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    cfg: Config,
    /// Whether `max_record_bytes` was given: if not, [`build`](Self::build)
    /// picks the largest limit up to the default that the segment holds.
    record_limit_set: bool,
}

impl ConfigBuilder {
    /// Whether `Wal::open` creates the log (and its directory) when the
    /// node has none there. Default true. With false, a missing directory
    /// or a directory without a segment of the node is [`Error::NoLog`],
    /// and nothing is created: an operator's typo in a path then fails
    /// instead of starting an empty log.
    ///
    /// [`Error::NoLog`]: crate::Error::NoLog
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.cfg.create_if_missing = create;
        self
    }

    /// Whether checkpoints and size limits may remove segments that the
    /// log's archive does not hold yet. Default false: once a node's
    /// directory has an archive point (`NNNNN.archived`, written by an
    /// archiver, in this process or another), `checkpoint`, a
    /// collector's truncation and [`WhenFull::DropOldest`] remove only
    /// segments the archive holds as objects, so no record leaves the disk
    /// before it is archived; the log grows meanwhile, and
    /// [`Stats::archive_held_bytes`](crate::Stats::archive_held_bytes) and
    /// the observer say by how much. True restores the behaviour of a log
    /// without an archive, for an operator who gives up on one.
    ///
    /// Cost: with an archive point, each checkpoint and drop reads that
    /// small file once (an open and a read).
    pub fn release_unarchived(mut self, release: bool) -> Self {
        self.cfg.release_unarchived = release;
        self
    }

    /// The permission bits every file the log creates gets, exactly,
    /// whatever the process's umask: segments, spares, the manifest, the
    /// lock file and temporary files. Default 0600: a log holds whatever
    /// its users append, so no other local user reads it. Widen it (0640)
    /// for a deployment whose readers share a group. Files that exist
    /// keep their own mode: opening a log never changes it. Must keep the
    /// owner's read and write (0600) and hold nothing but permission bits.
    /// Cost: one `fchmod` per file created.
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.cfg.file_mode = mode;
        self
    }

    /// The permission bits a directory the log creates gets (the log's
    /// own and any missing parent), exactly, whatever the umask. Default
    /// 0700. Must keep the owner's (0700). Cost: one `chmod` per directory
    /// created.
    pub fn dir_mode(mut self, mode: u32) -> Self {
        self.cfg.dir_mode = mode;
        self
    }
    /// A soft limit on the log's size on disk: past it, the observer's
    /// [`log_over_soft_limit`](crate::DurabilityObserver::log_over_soft_limit)
    /// is told at every roll and `Stats::over_soft_limit` is set, so the
    /// application snapshots and checkpoints before the disk fills. Nothing
    /// is refused or deleted. Default: none.
    pub fn soft_log_bytes(mut self, bytes: Option<u64>) -> Self {
        self.cfg.soft_log_bytes = bytes;
        self
    }
    /// Encrypt data payloads at rest with the keys `provider` gives
    /// (XChaCha20-Poly1305; see [`KeyProvider`] for when it is asked).
    /// Every segment started while the provider names a current key is
    /// sealed with it, the segment's header naming the key id; segments
    /// sealed with other ids stay readable while the provider has their
    /// keys. Also what readers ([`verify::records`]) decrypt with.
    /// An encrypting writer starts a new segment at every open (see
    /// ARCHITECTURE.md, "Encryption"). Default: none, which costs nothing.
    ///
    /// Cost when on: one pass over each payload under the reservation
    /// lock, 16 bytes per record, and a provider call per segment.
    ///
    /// [`verify::records`]: crate::verify::records
    pub fn encryption(mut self, provider: Arc<dyn KeyProvider>) -> Self {
        self.cfg.keys = Keys::new(provider);
        self
    }
    /// Compress data payloads of at least `min_bytes` with `codec`
    /// ([`Codec::Zstd`] needs the `zstd` feature), storing a payload
    /// compressed only when that makes it smaller; readers decompress
    /// whatever each frame says, so logs of mixed codecs read back.
    /// Default: no compression. Cost: one compression pass and one
    /// allocation per payload of at least `min_bytes`, before the
    /// reservation lock is taken.
    pub fn compression(mut self, codec: Codec, min_bytes: usize) -> Self {
        self.cfg.compression = Compression { codec, min_bytes };
        self
    }
    /// A hard limit on the bytes the log's segments take (counted at the
    /// segment size, from the oldest kept to the one being written; the
    /// preparer's spare and recycled spares come on top, at most one
    /// segment plus four kept for reuse), and what an append that needs a
    /// new segment beyond it does ([`WhenFull`]). At least two segments.
    /// Default: none. Cost: one multiplication per roll; `Block` waits on
    /// the producers' condition variable, `DropOldest` costs the ring a
    /// checkpoint of one segment (a manifest write, an unlink, a directory
    /// fsync) per segment dropped, at the roll.
    pub fn max_log_bytes(mut self, max: Option<u64>, when_full: WhenFull) -> Self {
        self.cfg.max_log_bytes = max;
        self.cfg.when_full = when_full;
        self
    }
    /// Node id (0..=99999). Default 1.
    pub fn node(mut self, node: u32) -> Self {
        self.cfg.node = node;
        self
    }
    /// Segment file size in bytes, a multiple of 4 KiB in 64 KiB..=1 TiB.
    /// Default 64 MiB.
    /// Each segment is preallocated off the write path, and zero-written
    /// once too unless the log's writes are large (then writing every byte
    /// twice would cost more than the unwritten extents do).
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.cfg.segment_bytes = bytes;
        self
    }
    /// I/O backend. Default: `Auto` (io_uring where the kernel allows it,
    /// the threaded backend otherwise).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.cfg.backend = backend;
        self
    }
    /// When records become durable: every write (the default), or
    /// deferred to syncs, on demand and optionally at an interval (see
    /// [`Durability`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        (self.cfg.durable, self.cfg.sync_interval) = match durability {
            Durability::EveryWrite => (true, None),
            Durability::Deferred { sync_interval } => (false, sync_interval),
        };
        self
    }
    /// How durable writes are made durable. Default `Dsync`, the faster of
    /// the two on the devices measured (see docs/benchmarks.md).
    pub fn sync_method(mut self, method: SyncMethod) -> Self {
        self.cfg.sync_method = method;
        self
    }
    /// Largest payload accepted, in bytes: at least 1, at most
    /// `format::MAX_PAYLOAD` less the 16-byte authentication tag, and
    /// small enough that a record of every length up to it fits an empty
    /// segment (with a key provider, sealed and plain); `Wal::open`
    /// refuses a larger one, naming the largest that does. Default: 1 MiB,
    /// or where the [`segment_bytes`](Self::segment_bytes) chosen cannot
    /// hold that, the largest limit it can (picked by [`build`](Self::build)),
    /// so that a segment size alone always opens. Staging buffers are
    /// sized to hold one such record, and the torn window recovery allows
    /// at the tail grows with it.
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.cfg.max_record_bytes = bytes;
        self.record_limit_set = true;
        self
    }
    /// Writes the ring keeps in flight at once (1..=256). Default 8.
    pub fn max_inflight(mut self, n: usize) -> Self {
        self.cfg.max_inflight = n;
        self
    }
    /// Target size of one write (group commit batch), 4 KiB..=64 MiB.
    /// Default 1 MiB.
    pub fn write_bytes(mut self, bytes: usize) -> Self {
        self.cfg.write_bytes = bytes;
        self
    }
    /// Pin the ring thread to this CPU. Default: unpinned. A CPU outside
    /// the process's affinity mask is refused at open (`InvalidConfig`).
    /// The segment preparer thread, which the ring thread starts once
    /// pinned, inherits the pin (on Linux, where threads inherit their
    /// creator's affinity): preallocating and zeroing the next segment
    /// then takes that CPU's time from the ring.
    ///
    /// When to: on a disk whose completions all interrupt one CPU (a
    /// virtio disk with one queue: see its line in `/proc/interrupts`),
    /// the ring thread on that CPU is woken by the interrupt itself, where
    /// on another it is woken through an inter-processor interrupt (on a
    /// virtual machine, a round trip through the hypervisor). One producer
    /// on the machine of docs/benchmarks.md: durable writes of p50 80-83 us
    /// pinned there, 104-112 us pinned to the other CPU, either one run to
    /// run unpinned. A disk with a queue per CPU (NVMe) completes on the
    /// CPU that submitted, and gains nothing from it.
    pub fn ring_cpu(mut self, cpu: Option<usize>) -> Self {
        self.cfg.ring_cpu = cpu;
        self
    }
    /// How long [`Ticket::wait`](crate::Ticket::wait) spins, checking the
    /// watermark, before it parks the thread, while it is the only thread
    /// of this log blocked in a wait (a second waiter ends the spin: with
    /// many producers the CPUs are better spent appending). Zero never
    /// spins; so does a process allowed only one CPU, where the spin
    /// would hold back the very thread it waits for. At most 10 ms.
    /// Default [`DEFAULT_WAIT_SPIN`] (1 ms, past the slowest of most
    /// durable writes on a virtio disk). Async waits never spin.
    ///
    /// Cost: up to this much CPU per wait of a lone waiter, yielded every
    /// 16 polls (a `sched_yield`) to any thread waiting for that CPU, such
    /// as the ring thread on a machine whose other CPUs are busy; in
    /// exchange its wake-up needs no futex and, on a virtual machine, no
    /// halted CPU to be restarted.
    pub fn wait_spin(mut self, spin: Duration) -> Self {
        self.cfg.wait_spin = spin;
        self
    }
    /// O_DIRECT policy. Default `Auto`.
    pub fn direct_io(mut self, mode: DirectIo) -> Self {
        self.cfg.direct_io = mode;
        self
    }
    /// Recovery policy. Default `Strict`.
    pub fn recovery(mut self, mode: RecoveryMode) -> Self {
        self.cfg.recovery = mode;
        self
    }
    /// Call `observer` on the ring thread each time the written or durable
    /// watermark advances (see [`DurabilityObserver`] for the guarantees
    /// and what it must not do). Default: none, which costs nothing but a
    /// branch per advance. A later call replaces an earlier observer.
    pub fn observer(mut self, observer: Arc<dyn DurabilityObserver>) -> Self {
        self.cfg.observer = ObserverSlot(Some(observer));
        self
    }
    /// Run on the simulated disk `disk` instead of the real file system
    /// (the sim backend: the threaded queue over an in-memory disk that
    /// can crash, tear writes and inject EIO or ENOSPC). For tests; needs
    /// the `sim` feature.
    #[cfg(feature = "sim")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
    pub fn sim(mut self, disk: &ringwal_platform::sim::SimFs) -> Self {
        self.cfg.vfs = disk.vfs();
        self.cfg.backend = Backend::Threaded;
        self
    }
    /// The finished configuration (validated when the log opens). Without
    /// a [`max_record_bytes`](Self::max_record_bytes), the record limit is
    /// the default, 1 MiB, or the largest below it that a record of every
    /// length up to fits an empty segment of the size chosen (a segment of
    /// 1 MiB holds records of up to 1,040,288 bytes). Cost: nothing with
    /// the default segment size; otherwise up to about 25 trial placements
    /// of the largest records, no I/O.
    pub fn build(mut self) -> Config {
        if !self.record_limit_set {
            self.cfg.max_record_bytes = self.cfg.record_limit_fitting(self.cfg.max_record_bytes);
        }
        self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_value_and_others_are_refused() {
        for name in Level::NAMES {
            assert_eq!(name.parse::<Level>().unwrap().to_string(), *name);
        }
        for name in Backend::NAMES {
            assert_eq!(name.parse::<Backend>().unwrap().to_string(), *name);
        }
        for name in SyncMethod::NAMES {
            assert_eq!(name.parse::<SyncMethod>().unwrap().to_string(), *name);
        }
        for name in DirectIo::NAMES {
            assert_eq!(name.parse::<DirectIo>().unwrap().to_string(), *name);
        }
        for name in RecoveryMode::NAMES {
            assert_eq!(name.parse::<RecoveryMode>().unwrap().to_string(), *name);
        }
        let e = "fast".parse::<Level>().unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown level \"fast\": expected one of accepted, written, durable"),
            "{e}"
        );
    }

    /// A reader may be handed a configuration no writer could open; the
    /// sizes derived from it count its settings at their limits.
    #[test]
    fn derived_sizes_of_settings_past_their_limits_never_overflow() {
        let at_limits = Config::builder()
            .max_record_bytes(format::MAX_PAYLOAD - TAG_BYTES)
            .write_bytes(MAX_WRITE_BYTES)
            .max_inflight(MAX_INFLIGHT)
            .build();
        let past = Config::builder()
            .max_record_bytes(usize::MAX)
            .write_bytes(usize::MAX)
            .max_inflight(usize::MAX)
            .build();
        assert_eq!(past.buffer_bytes(), at_limits.buffer_bytes());
        assert_eq!(past.torn_window(), at_limits.torn_window());
        assert!(past.validate().is_err());
    }

    #[test]
    fn durability_is_read_back_as_set() {
        let deferred = Durability::Deferred {
            sync_interval: Some(Duration::from_millis(5)),
        };
        let cfg = Config::builder().durability(deferred).build();
        assert_eq!(cfg.durability(), deferred);
        assert_eq!(cfg.default_level(), Level::Written);
        let cfg = Config::builder()
            .durability(deferred)
            .durability(Durability::EveryWrite)
            .build();
        assert_eq!(cfg.durability(), Durability::EveryWrite);
        assert_eq!(cfg.default_level(), Level::Durable);
    }
}

/// `Config` as a configuration file holds it: every plain setting, by the
/// names the enums print; what cannot be written down (the observer, the
/// simulated disk, the key provider) is left out and takes its default when read back.
/// Missing fields take their defaults; unknown ones are refused.
#[cfg(feature = "serde")]
mod serde_impl {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{
        Backend, Compression, Config, DirectIo, Durability, RecoveryMode, SyncMethod, WhenFull,
    };

    /// The plain settings, borrowed from or built into a `Config`.
    #[derive(Serialize, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Settings {
        node: u32,
        segment_bytes: u64,
        backend: Backend,
        durability: Durability,
        sync_method: SyncMethod,
        max_record_bytes: usize,
        max_inflight: usize,
        write_bytes: usize,
        ring_cpu: Option<usize>,
        #[serde(with = "humantime_serde")]
        wait_spin: std::time::Duration,
        direct_io: DirectIo,
        recovery: RecoveryMode,
        create_if_missing: bool,
        #[serde(default)]
        release_unarchived: bool,
        soft_log_bytes: Option<u64>,
        compression: Compression,
        max_log_bytes: Option<u64>,
        when_full: WhenFull,
    }

    impl Default for Settings {
        fn default() -> Settings {
            Settings::of(&Config::default())
        }
    }

    impl Settings {
        fn of(c: &Config) -> Settings {
            Settings {
                node: c.node,
                segment_bytes: c.segment_bytes,
                backend: c.backend,
                durability: c.durability(),
                sync_method: c.sync_method,
                max_record_bytes: c.max_record_bytes,
                max_inflight: c.max_inflight,
                write_bytes: c.write_bytes,
                ring_cpu: c.ring_cpu,
                wait_spin: c.wait_spin,
                direct_io: c.direct_io,
                recovery: c.recovery,
                create_if_missing: c.create_if_missing,
                release_unarchived: c.release_unarchived,
                soft_log_bytes: c.soft_log_bytes,
                compression: c.compression,
                max_log_bytes: c.max_log_bytes,
                when_full: c.when_full,
            }
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    impl Serialize for Config {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            Settings::of(self).serialize(s)
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    impl<'de> Deserialize<'de> for Config {
        /// Limits are checked when the log opens, as for the builder.
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
            let s = Settings::deserialize(d)?;
            Ok(Config::builder()
                .node(s.node)
                .segment_bytes(s.segment_bytes)
                .backend(s.backend)
                .durability(s.durability)
                .sync_method(s.sync_method)
                .max_record_bytes(s.max_record_bytes)
                .max_inflight(s.max_inflight)
                .write_bytes(s.write_bytes)
                .ring_cpu(s.ring_cpu)
                .wait_spin(s.wait_spin)
                .direct_io(s.direct_io)
                .recovery(s.recovery)
                .create_if_missing(s.create_if_missing)
                .release_unarchived(s.release_unarchived)
                .soft_log_bytes(s.soft_log_bytes)
                .compression(s.compression.codec, s.compression.min_bytes)
                .max_log_bytes(s.max_log_bytes, s.when_full)
                .build())
        }
    }
}
