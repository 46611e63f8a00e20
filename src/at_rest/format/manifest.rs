//! The manifest: one small file per node that says what the log must
//! contain, so a lost newest segment or a truncated tail is noticed.
//!
//! 64 bytes, replaced atomically (temporary file, fsync, rename,
//! directory fsync) whenever the directory is synced anyway: when a
//! segment is installed, at a checkpoint, at open and at close.

use super::*;

/// First eight bytes of a manifest file.
pub const MANIFEST_MAGIC: [u8; 8] = *b"RWMANIF1";

/// Size of a manifest file.
pub const MANIFEST_BYTES: usize = 64;

const M_MAGIC: usize = 0;
const M_VERSION: usize = 8;
const M_CRC: usize = 12;
const M_NODE: usize = 16;
const M_FLAGS: usize = 20;
const M_LOG_ID: usize = 24;
const M_NEWEST_BASE: usize = 32;
const M_DURABLE: usize = 40;
const M_HANDED_OUT: usize = 48;
const M_OLDEST: usize = 56;

const _: () = assert!(
    M_MAGIC + MANIFEST_MAGIC.len() == M_VERSION
        && M_VERSION + 4 == M_CRC
        && M_CRC + 4 == M_NODE
        && M_NODE + 4 == M_FLAGS
        && M_FLAGS + 4 == M_LOG_ID
        && M_LOG_ID + 8 == M_NEWEST_BASE
        && M_NEWEST_BASE + 8 == M_DURABLE
        && M_DURABLE + 8 == M_HANDED_OUT
        && M_HANDED_OUT + 8 == M_OLDEST
        && M_OLDEST + 8 == MANIFEST_BYTES,
    "the manifest fields tile its 64 bytes (docs/format.md §7)"
);

/// What a log promises about itself. Every field only ever grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The node whose log this is.
    pub node: u32,
    /// Random id of the log, drawn when it was created; every version-2
    /// segment header carries it.
    pub log_id: u64,
    /// Base LSN of the newest segment installed: a segment the log holds
    /// (its header and name were durable before this was written).
    pub newest_base: u64,
    /// Every LSN up to this one was acknowledged durable.
    pub durable_lsn: u64,
    /// The highest LSN ever handed out, as far as the writer knew when it
    /// wrote this; no LSN up to it may be handed out again.
    pub handed_out: u64,
    /// The oldest LSN the log keeps (checkpoints move it).
    pub oldest_lsn: u64,
}

/// Why manifest bytes were rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Not [`MANIFEST_BYTES`] long.
    #[error("manifest is {0} bytes, not {MANIFEST_BYTES}")]
    Length(usize),
    /// Not a ringwal manifest.
    #[error("bad manifest magic")]
    BadMagic,
    /// A manifest version this code does not understand.
    #[error("unsupported manifest version {0}")]
    Version(u32),
    /// The bytes do not match their checksum.
    #[error("manifest checksum mismatch")]
    Checksum,
}

fn manifest_crc(b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&b[..M_CRC]);
    h.update(&b[M_CRC + 4..MANIFEST_BYTES]);
    h.finalize()
}

impl Manifest {
    /// The file's bytes: fields and their checksum.
    ///
    /// Cost: a CRC over 60 bytes; no allocation.
    pub fn encode(&self) -> [u8; MANIFEST_BYTES] {
        let mut b = [0u8; MANIFEST_BYTES];
        put(&mut b, M_MAGIC, &MANIFEST_MAGIC);
        put(&mut b, M_VERSION, &1u32.to_le_bytes());
        put(&mut b, M_NODE, &self.node.to_le_bytes());
        put(&mut b, M_FLAGS, &0u32.to_le_bytes());
        put(&mut b, M_LOG_ID, &self.log_id.to_le_bytes());
        put(&mut b, M_NEWEST_BASE, &self.newest_base.to_le_bytes());
        put(&mut b, M_DURABLE, &self.durable_lsn.to_le_bytes());
        put(&mut b, M_HANDED_OUT, &self.handed_out.to_le_bytes());
        put(&mut b, M_OLDEST, &self.oldest_lsn.to_le_bytes());
        let crc = manifest_crc(&b);
        put(&mut b, M_CRC, &crc.to_le_bytes());
        debug_assert_eq!(
            Manifest::decode(&b),
            Ok(*self),
            "an encoded manifest decodes as itself"
        );
        b
    }

    /// Parses and verifies a manifest file's bytes, in the order Length,
    /// BadMagic, Version, Checksum. Never panics.
    ///
    /// Cost: a CRC over 60 bytes.
    pub fn decode(b: &[u8]) -> Result<Manifest, ManifestError> {
        if b.len() != MANIFEST_BYTES {
            return Err(ManifestError::Length(b.len()));
        }
        if b[M_MAGIC..M_MAGIC + 8] != MANIFEST_MAGIC {
            return Err(ManifestError::BadMagic);
        }
        let version = get_u32(b, M_VERSION);
        if version != 1 {
            return Err(ManifestError::Version(version));
        }
        if get_u32(b, M_CRC) != manifest_crc(b) {
            return Err(ManifestError::Checksum);
        }
        Ok(Manifest {
            node: get_u32(b, M_NODE),
            log_id: get_u64(b, M_LOG_ID),
            newest_base: get_u64(b, M_NEWEST_BASE),
            durable_lsn: get_u64(b, M_DURABLE),
            handed_out: get_u64(b, M_HANDED_OUT),
            oldest_lsn: get_u64(b, M_OLDEST),
        })
    }
}
