//! File names: segments, spares, lock files.

use super::SPARE_SUFFIX;

const SEGMENT_EXT: &str = ".wal";
const LOCK_EXT: &str = ".lock";
const MANIFEST_EXT: &str = ".manifest";
const SPARE_INFIX: &str = "-spare-";
const NODE_DIGITS: usize = 5;
const SEQ_DIGITS: usize = 20;

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
    // Five digits always fit in u32.
    Some((node as u32, seq))
}

/// Name of the segment whose first frame has LSN `base_lsn`, e.g.
/// `00001-00000000000000000001.wal`. Zero padding makes lexical order equal
/// LSN order within a node.
///
/// Round-trips through [`parse_segment_file_name`] only for
/// `node <= MAX_NODE`. Cost: one small allocation.
pub fn segment_file_name(node: u32, base_lsn: u64) -> String {
    format!("{node:05}-{base_lsn:020}{SEGMENT_EXT}")
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
    format!("{node:05}{SPARE_INFIX}{seq:020}{SPARE_SUFFIX}")
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

/// Name under which a node's next manifest is written before it is renamed
/// over the current one, e.g. `00001.manifest.tmp`; left behind only by a
/// crash, and removed by the next writer. Cost: one small allocation.
pub fn manifest_temp_name(node: u32) -> String {
    format!("{node:05}{MANIFEST_EXT}.tmp")
}

/// Name of the lock file that guards a node's log directory, e.g.
/// `00001.lock`. Cost: one small allocation.
pub fn lock_file_name(node: u32) -> String {
    format!("{node:05}{LOCK_EXT}")
}
