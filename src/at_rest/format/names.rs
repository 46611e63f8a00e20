//! File names: segments, spares, manifests, lock files, and the
//! temporary files atomic replacement writes.

use super::SPARE_SUFFIX;

const SEGMENT_EXT: &str = ".wal";
const LOCK_EXT: &str = ".lock";
const MANIFEST_EXT: &str = ".manifest";
const ARCHIVED_EXT: &str = ".archived";
const TEMP_EXT: &str = ".tmp";
const SPARE_INFIX: &str = "-spare-";
const NODE_DIGITS: usize = 5;
const SEQ_DIGITS: usize = 20;

const _: () = assert!(
    super::MAX_NODE as u64 == 10u64.pow(NODE_DIGITS as u32) - 1,
    "MAX_NODE is the largest node the fixed-width node field holds"
);
const _: () = assert!(
    (u64::MAX as u128) < 10u128.pow(SEQ_DIGITS as u32),
    "the sequence field holds every u64 (every LSN) at its fixed width"
);

/// Parses a field of exactly `digits` ASCII decimal digits. Rejects signs,
/// spaces, other lengths and values that overflow `u64`.
fn parse_fixed_digits(b: &[u8], digits: usize) -> Option<u64> {
    if b.len() != digits {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &c| {
        if !c.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })
}

/// Parses `<5-digit node><mid><20-digit number><ext>`, the shape shared by
/// segment and spare names.
fn parse_node_seq(name: &str, mid: &str, ext: &str) -> Option<(u32, u64)> {
    let b = name.as_bytes();
    if b.len() != NODE_DIGITS + mid.len() + SEQ_DIGITS + ext.len() {
        return None;
    }
    let (node, rest) = b.split_at(NODE_DIGITS);
    let rest = rest.strip_prefix(mid.as_bytes())?;
    let (seq, rest) = rest.split_at(SEQ_DIGITS);
    if rest != ext.as_bytes() {
        return None;
    }
    let node = parse_fixed_digits(node, NODE_DIGITS)?;
    let seq = parse_fixed_digits(seq, SEQ_DIGITS)?;
    assert!(
        node <= u64::from(super::MAX_NODE),
        "five digits always fit in a node id"
    );
    Some((node as u32, seq))
}

/// Name of the segment whose first frame has LSN `base_lsn`, e.g.
/// `00001-00000000000000000001.wal`. Zero padding makes lexical order equal
/// LSN order within a node.
///
/// Round-trips through [`parse_segment_file_name`] only for
/// `node <= MAX_NODE`. Cost: one small allocation.
pub fn segment_file_name(node: u32, base_lsn: u64) -> String {
    let name = format!("{node:05}-{base_lsn:020}{SEGMENT_EXT}");
    debug_assert!(
        node > super::MAX_NODE || parse_segment_file_name(&name) == Some((node, base_lsn)),
        "a segment name parses back to its node and base LSN"
    );
    name
}

/// Inverse of [`segment_file_name`]: returns `(node, base_lsn)` for a name of
/// exactly 5 digits, `-`, 20 digits, `.wal`, and `None` for anything else
/// (other lengths, signs, extra characters, values overflowing `u64`).
///
/// Cost: linear in the name length; no allocation.
pub fn parse_segment_file_name(name: &str) -> Option<(u32, u64)> {
    parse_node_seq(name, "-", SEGMENT_EXT)
}

/// Name of spare (preallocated, not yet assigned) segment number `seq`, e.g.
/// `00001-spare-00000000000000000007.spare`.
///
/// Round-trips through [`parse_spare_file_name`] only for `node <= MAX_NODE`.
/// Cost: one small allocation.
pub fn spare_file_name(node: u32, seq: u64) -> String {
    let name = format!("{node:05}{SPARE_INFIX}{seq:020}{SPARE_SUFFIX}");
    debug_assert!(
        node > super::MAX_NODE || parse_spare_file_name(&name) == Some((node, seq)),
        "a spare name parses back to its node and number"
    );
    name
}

/// Inverse of [`spare_file_name`]: returns `(node, seq)` for a name of exactly
/// 5 digits, `-spare-`, 20 digits, `.spare`, and `None` for anything else.
///
/// Cost: linear in the name length; no allocation.
pub fn parse_spare_file_name(name: &str) -> Option<(u32, u64)> {
    parse_node_seq(name, SPARE_INFIX, SPARE_SUFFIX)
}

/// Name of a node's manifest, e.g. `00001.manifest`. Cost: one small
/// allocation.
pub fn manifest_file_name(node: u32) -> String {
    format!("{node:05}{MANIFEST_EXT}")
}

/// Name of a node's archive point, e.g. `00001.archived`: how far the
/// node's archive holds its sealed segments (docs/format.md §9). Cost:
/// one small allocation.
pub fn archived_file_name(node: u32) -> String {
    format!("{node:05}{ARCHIVED_EXT}")
}

/// Name of the lock file held by the one archiver of a node's log, e.g.
/// `00001.archive.lock` (docs/format.md §9). Cost: one small allocation.
pub fn archive_lock_file_name(node: u32) -> String {
    format!("{node:05}.archive{LOCK_EXT}")
}

/// Name of a temporary file that becomes `target` once whole (it is
/// renamed over it), e.g. `.00001.manifest.4242-7-00c0ffee00c0ffee.tmp`:
/// hidden, and made unique by the writing process's id `pid`, a count
/// `seq` that process never repeats, and a random `nonce` (against a dead
/// process's leftover under a reused id), so that no two writers of one
/// target ever share one. Round-trips through [`parse_temp_file_name`].
/// Cost: one small allocation.
pub fn temp_file_name(target: &str, pid: u32, seq: u64, nonce: u64) -> String {
    let name = format!(".{target}.{pid}-{seq}-{nonce:016x}{TEMP_EXT}");
    debug_assert!(
        target.is_empty() || parse_temp_file_name(&name) == Some(target),
        "a temporary name names the target it replaces"
    );
    name
}

/// Inverse of [`temp_file_name`]: the target a temporary file was to
/// replace, and `None` for any name not of that shape (the unique part
/// must be decimal digits, `-`, decimal digits, `-`, 16 hex digits).
///
/// Cost: linear in the name length; no allocation.
pub fn parse_temp_file_name(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?.strip_suffix(TEMP_EXT)?;
    let (target, unique) = rest.rsplit_once('.')?;
    let mut parts = unique.split('-');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
    let hex = |p: Option<&str>| {
        p.is_some_and(|p| p.len() == 16 && p.bytes().all(|c| c.is_ascii_hexdigit()))
    };
    let ok =
        digits(parts.next()) && digits(parts.next()) && hex(parts.next()) && parts.next().is_none();
    (ok && !target.is_empty()).then_some(target)
}

/// Name of the lock file that guards a node's log directory, e.g.
/// `00001.lock`. Cost: one small allocation.
pub fn lock_file_name(node: u32) -> String {
    format!("{node:05}{LOCK_EXT}")
}

/// Whether `name` is one of the files a log keeps in its directory, of
/// any node: a segment, a spare, a manifest, a lock, an archive point or
/// lock, a temporary file that is to become one of them, or a segment set
/// aside by a recovery (`NAME.corrupt`, `NAME.corrupt.N`). Anything else
/// there (a README, an editor's backup) is no part of the log, and the
/// log's tools neither read it nor speak of it. Cost: linear in the name
/// length; no allocation.
pub fn is_log_file_name(name: &str) -> bool {
    let set_aside = |n: &str| {
        let Some((seg, rest)) = n.split_once(".corrupt") else {
            return false;
        };
        let numbered = rest
            .strip_prefix('.')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()));
        parse_segment_file_name(seg).is_some() && (rest.is_empty() || numbered)
    };
    let digits = |d: &str| d.len() == NODE_DIGITS && d.bytes().all(|c| c.is_ascii_digit());
    let node_file = |n: &str| {
        let archive_lock = n
            .strip_suffix(LOCK_EXT)
            .and_then(|n| n.strip_suffix(".archive"));
        [MANIFEST_EXT, ARCHIVED_EXT, LOCK_EXT]
            .iter()
            .filter_map(|ext| n.strip_suffix(ext))
            .chain(archive_lock)
            .any(digits)
    };
    let own = |n: &str| {
        parse_segment_file_name(n).is_some()
            || parse_spare_file_name(n).is_some()
            || node_file(n)
            || set_aside(n)
    };
    own(name) || parse_temp_file_name(name).is_some_and(own)
}
