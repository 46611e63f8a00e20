//! What a log's archive is made of (`docs/format.md` §9): the archive
//! point a node's directory keeps, and the archive manifest, the one
//! object that says what the archive of a node holds.

use std::fmt::Write as _;

use super::{decode_checkpoint, encode_checkpoint, parse_segment_file_name, segment_file_name};

/// Bytes of an archive point's payload: the log id and the archived LSN.
const ARCHIVED_PAYLOAD: usize = 16;

/// How far a node's archive holds its sealed segments, kept in
/// `NNNNN.archived` (a checkpoint file, §8, of 16 bytes of payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchivedPoint {
    /// The log the archive is of (the manifest's and every v2 header's).
    pub log_id: u64,
    /// Every segment whose records all lie at or below this LSN is in the
    /// archive as an object of its own; 0 when none is.
    pub archived_lsn: u64,
}

/// The archive point file's bytes. Cost: one allocation, one CRC pass.
pub fn encode_archived(p: ArchivedPoint) -> Vec<u8> {
    let mut payload = [0u8; ARCHIVED_PAYLOAD];
    payload[..8].copy_from_slice(&p.log_id.to_le_bytes());
    payload[8..].copy_from_slice(&p.archived_lsn.to_le_bytes());
    encode_checkpoint(&payload)
}

/// An archive point file read back, checked whole. No allocation.
pub fn decode_archived(bytes: &[u8]) -> Result<ArchivedPoint, String> {
    let payload = decode_checkpoint(bytes).map_err(|e| e.to_string())?;
    if payload.len() != ARCHIVED_PAYLOAD {
        return Err(format!(
            "archive point holds {} bytes, not {ARCHIVED_PAYLOAD}",
            payload.len()
        ));
    }
    Ok(ArchivedPoint {
        log_id: super::get_u64(payload, 0),
        archived_lsn: super::get_u64(payload, 8),
    })
}

/// First line of an archive manifest.
pub const ARCHIVE_MANIFEST_TAG: &str = "ringwal archive 1";

/// One segment object of an archive: its bytes are the segment file's
/// from offset 0 up to `bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedSegment {
    /// The segment's base LSN (its file name's).
    pub base: u64,
    /// Its last LSN (records and skips); `base - 1` for a segment with
    /// none.
    pub last: u64,
    /// Length of the object: where the segment's archived frames end,
    /// a multiple of the block.
    pub bytes: u64,
    /// CRC-32 (§3.1) of the object's bytes.
    pub crc: u32,
    /// Write time (ns since the Unix epoch) of its first and last
    /// archived write, 0 where the segment records none.
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
}

/// What the archive of one node holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveManifest {
    /// The node.
    pub node: u32,
    /// The log's id.
    pub log_id: u64,
    /// The highest LSN the writer had handed out when this was written,
    /// as its manifest said: a log restored from the archive resumes
    /// above it.
    pub handed_out: u64,
    /// Sealed segments, oldest first, their LSNs following on.
    pub segments: Vec<ArchivedSegment>,
    /// The newest segment's archived prefix, if it holds anything
    /// archived yet; follows on from the last sealed one.
    pub tail: Option<ArchivedSegment>,
}

impl ArchiveManifest {
    /// An empty archive of `node`'s log `log_id`.
    pub fn new(node: u32, log_id: u64) -> ArchiveManifest {
        ArchiveManifest {
            node,
            log_id,
            handed_out: 0,
            segments: Vec::new(),
            tail: None,
        }
    }

    /// The last LSN the archive holds, sealed segments and tail; 0 if
    /// none.
    pub fn last_lsn(&self) -> u64 {
        self.tail
            .as_ref()
            .or(self.segments.last())
            .map_or(0, |s| s.last)
    }

    /// The last LSN of the sealed segments alone: the archive point.
    pub fn sealed_lsn(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.last)
    }

    /// The manifest's bytes: text, one line a field or segment, ending
    /// with the CRC of every byte before that line. Cost: one allocation
    /// per call, linear in the segments.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        // Infallible: writing to a String.
        let _ = writeln!(s, "{ARCHIVE_MANIFEST_TAG}");
        let _ = writeln!(s, "node {}", self.node);
        let _ = writeln!(s, "log_id {:016x}", self.log_id);
        let _ = writeln!(s, "handed_out {}", self.handed_out);
        let line = |s: &mut String, what: &str, g: &ArchivedSegment| {
            let _ = writeln!(
                s,
                "{what} {} {} {} {} {:08x} {} {}",
                segment_file_name(self.node, g.base),
                g.base,
                g.last,
                g.bytes,
                g.crc,
                g.first_ns,
                g.last_ns
            );
        };
        for g in &self.segments {
            line(&mut s, "segment", g);
        }
        if let Some(t) = &self.tail {
            line(&mut s, "tail", t);
        }
        let crc = crc32fast::hash(s.as_bytes());
        let _ = writeln!(s, "crc {crc:08x}");
        debug_assert_eq!(
            ArchiveManifest::decode(s.as_bytes()).as_ref(),
            Ok(self),
            "an encoded archive manifest decodes to itself"
        );
        s.into_bytes()
    }

    /// An archive manifest read back: its CRC checked, then every line,
    /// and the segments' LSNs held to follow on from each other. The
    /// error says what is wrong. Cost: allocation linear in the size.
    pub fn decode(bytes: &[u8]) -> Result<ArchiveManifest, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
        // Exactly as written: every line ends with one `\n`, the last is
        // the CRC line, nothing follows it.
        let lines = text
            .strip_suffix('\n')
            .ok_or("does not end with a newline")?;
        let body_end = lines.rfind('\n').map(|i| i + 1).ok_or("no CRC line")?;
        let (body, crc_line) = (&text[..body_end], &lines[body_end..]);
        let want = crc_line
            .strip_prefix("crc ")
            .filter(|h| h.len() == 8 && h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or("the last line is not `crc XXXXXXXX`")?;
        if crc32fast::hash(body.as_bytes()) != want {
            return Err("CRC mismatch".into());
        }
        let mut lines = body.lines();
        if lines.next() != Some(ARCHIVE_MANIFEST_TAG) {
            return Err(format!("first line is not `{ARCHIVE_MANIFEST_TAG}`"));
        }
        let mut field = |name: &str| -> Result<String, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| format!("missing `{name}` line"))
        };
        let node: u32 = field("node")?.parse().map_err(|_| "bad node")?;
        let log_id = u64::from_str_radix(&field("log_id")?, 16).map_err(|_| "bad log_id")?;
        let handed_out: u64 = field("handed_out")?.parse().map_err(|_| "bad handed_out")?;
        let mut m = ArchiveManifest::new(node, log_id);
        m.handed_out = handed_out;
        for l in lines {
            let (what, g) = parse_segment_line(node, l)?;
            let follows = m.last_lsn();
            if m.tail.is_some() {
                return Err("a line after the tail".into());
            }
            if follows != 0 && g.base != follows + 1 {
                return Err(format!(
                    "segment {} does not follow on from LSN {follows}",
                    segment_file_name(node, g.base)
                ));
            }
            match what {
                "segment" => m.segments.push(g),
                _ => m.tail = Some(g),
            }
        }
        Ok(m)
    }
}

/// One `segment` or `tail` line.
fn parse_segment_line(node: u32, l: &str) -> Result<(&str, ArchivedSegment), String> {
    let bad = || format!("bad line `{l}`");
    let f: Vec<&str> = l.split(' ').collect();
    let [what, name, base, last, bytes, crc, first_ns, last_ns] = f[..] else {
        return Err(bad());
    };
    if what != "segment" && what != "tail" {
        return Err(bad());
    }
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let g = ArchivedSegment {
        base: num(base)?,
        last: num(last)?,
        bytes: num(bytes)?,
        crc: u32::from_str_radix(crc, 16).map_err(|_| bad())?,
        first_ns: num(first_ns)?,
        last_ns: num(last_ns)?,
    };
    if parse_segment_file_name(name) != Some((node, g.base))
        || g.base == 0
        || g.last < g.base - 1
        || !g.bytes.is_multiple_of(super::BLOCK as u64)
    {
        return Err(bad());
    }
    Ok((what, g))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: u64, last: u64) -> ArchivedSegment {
        ArchivedSegment {
            base,
            last,
            bytes: 3 * 4096,
            crc: 0xdead_beef,
            first_ns: 5,
            last_ns: 9,
        }
    }

    #[test]
    fn manifest_round_trips_and_refuses_damage() {
        let mut m = ArchiveManifest::new(7, 0x0123_4567_89ab_cdef);
        m.handed_out = 40;
        m.segments = vec![seg(1, 10), seg(11, 10), seg(11, 30)];
        m.tail = Some(seg(31, 35));
        let bytes = m.encode();
        assert_eq!(ArchiveManifest::decode(&bytes), Ok(m.clone()));
        assert_eq!((m.last_lsn(), m.sealed_lsn()), (35, 30));
        // Any flipped byte is caught, by the CRC or the CRC line's shape.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(ArchiveManifest::decode(&b).is_err(), "flip at {i}");
        }
        assert!(ArchiveManifest::decode(&bytes[..bytes.len() - 3]).is_err());
    }

    #[test]
    fn manifest_refuses_segments_that_do_not_follow_on() {
        let mut m = ArchiveManifest::new(1, 1);
        m.segments = vec![seg(1, 10), seg(12, 20)];
        // Encoding asserts in debug builds; build the bytes by hand.
        let mut s =
            String::from("ringwal archive 1\nnode 1\nlog_id 0000000000000001\nhanded_out 0\n");
        for g in &m.segments {
            s += &format!(
                "segment {} {} {} {} {:08x} 0 0\n",
                segment_file_name(1, g.base),
                g.base,
                g.last,
                g.bytes,
                g.crc
            );
        }
        s += &format!("crc {:08x}\n", crc32fast::hash(s.as_bytes()));
        let e = ArchiveManifest::decode(s.as_bytes()).unwrap_err();
        assert!(e.contains("does not follow on from LSN 10"), "{e}");
    }

    #[test]
    fn archive_point_round_trips() {
        let p = ArchivedPoint {
            log_id: 3,
            archived_lsn: 99,
        };
        assert_eq!(decode_archived(&encode_archived(p)), Ok(p));
        assert!(decode_archived(&encode_checkpoint(&[0u8; 8])).is_err());
    }
}
