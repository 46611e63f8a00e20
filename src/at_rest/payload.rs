//! What a record's stored payload means: the one place that turns the
//! payload bytes of a frame back into what the application appended
//! (decrypt, then decompress), for every reader: [`Reader`] (and so
//! `Wal::read`, followers, `ringwal cat`/`dump`), collector replay and
//! `verify`.
//!
//! Architecture invariant: no reader copies a data payload out of a frame
//! any other way; a second path would read ciphertext as data.
//!
//! [`Reader`]: crate::Reader

use std::path::Path;

use crate::at_rest::codec::{self, Unpack};
use crate::at_rest::crypt::{KeyProblem, Keys, TAG_BYTES};
use crate::at_rest::format::{Codec, FrameRef, Kind, SegmentHeader, MAX_PAYLOAD};
use crate::error::{Corruption, Error};

/// Whether frames of `kind` are encrypted in an encrypted segment: data
/// records only. (Checkpoint markers carry an LSN the engine itself
/// reads, never application bytes; padding, vouches and skips carry
/// nothing of the application's.)
pub(crate) fn seals(kind: Kind) -> bool {
    kind == Kind::Data
}

/// Whether a frame of `kind` in a segment with `header` has an encrypted
/// payload: see [`seals`].
pub(crate) fn sealed(header: &SegmentHeader, kind: Kind) -> bool {
    header.key_id != 0 && seals(kind)
}

/// The stored length of a payload of `len` bytes: with a tag if sealed.
pub(crate) fn stored_len(len: usize, sealed: bool) -> usize {
    let stored = len + if sealed { TAG_BYTES } else { 0 };
    debug_assert!(
        stored <= MAX_PAYLOAD,
        "a record of at most max_record_bytes stores within MAX_PAYLOAD, its tag included"
    );
    stored
}

/// Why a payload could not be opened, before the caller names the file.
#[derive(Debug)]
pub(crate) enum Unopened {
    /// The segment's key is missing or not the one it was sealed with.
    Key(KeyProblem),
    /// The payload is damaged in a way its frame checksum did not catch.
    Corrupt(Corruption),
    /// A zstd payload in a build without the `zstd` feature.
    Unsupported,
}

impl Unopened {
    /// The error a caller reports: the segment `path`, and the frame's
    /// offset `at` for damage.
    pub fn error(self, path: &Path, header: &SegmentHeader, at: u64) -> Error {
        match self {
            Unopened::Key(problem) => Error::Key {
                file: path.to_path_buf(),
                key_id: header.key_id,
                problem,
            },
            Unopened::Corrupt(reason) => Error::corrupt(path, at, reason),
            Unopened::Unsupported => Error::InvalidConfig(format!(
                "{}:{at}: zstd-compressed record, and ringwal was built without the `zstd` feature",
                path.display()
            )),
        }
    }
}

/// The application's payload of `frame`, read from a segment with
/// `header` in a write whose nonce salt is `nonce_salt` (the walk's
/// `Walker::nonce_salt`): decrypted with `keys` if the segment is
/// encrypted (the tag checked against the frame's LSN, stream, kind and
/// flags), then decompressed if the frame says so.
///
/// A payload that fails authentication is `Key(Wrong)` when the header's
/// key check shows the key is not the segment's, and `Corrupt` otherwise:
/// the key check is computed only then, so a read that succeeds costs
/// nothing for it.
///
/// Cost: a plaintext, uncompressed payload is one copy (one allocation);
/// decryption adds a pass over it, decompression an allocation of the
/// original length and a pass.
pub(crate) fn open(
    keys: &Keys,
    header: &SegmentHeader,
    nonce_salt: u64,
    frame: &FrameRef<'_>,
) -> std::result::Result<Vec<u8>, Unopened> {
    let codec = frame.codec();
    let mut buf = frame.payload.to_vec();
    if sealed(header, frame.kind) {
        let cipher = keys
            .cipher(header.key_id)
            .ok_or(Unopened::Key(KeyProblem::Missing))?;
        let bound = frame.head().bound_bytes();
        match cipher.open(header.log_id, nonce_salt, &bound, frame.lsn, &mut buf) {
            Some(n) => {
                debug_assert_eq!(
                    n + TAG_BYTES,
                    frame.payload.len(),
                    "the tag ends the payload"
                );
                buf.truncate(n)
            }
            None if cipher.key_check(header.log_id, header.salt) != header.key_check => {
                return Err(Unopened::Key(KeyProblem::Wrong))
            }
            None => return Err(Unopened::Corrupt(Corruption::Unauthentic)),
        }
    }
    if codec == Codec::None {
        return Ok(buf);
    }
    codec::unpack(codec, &buf).map_err(|e| match e {
        Unpack::Damaged(d) => Unopened::Corrupt(Corruption::Compressed(d)),
        Unpack::Unsupported => Unopened::Unsupported,
    })
}

/// Whether `keys` holds the key `header` was sealed with: `Ok` for a
/// plaintext segment, else what is wrong. For `verify`, which checks a
/// segment's key once instead of per record. Cost: one AEAD call.
pub(crate) fn check_key(
    keys: &Keys,
    header: &SegmentHeader,
) -> std::result::Result<(), KeyProblem> {
    if header.key_id == 0 {
        return Ok(());
    }
    let cipher = keys.cipher(header.key_id).ok_or(KeyProblem::Missing)?;
    if cipher.key_check(header.log_id, header.salt) != header.key_check {
        return Err(KeyProblem::Wrong);
    }
    Ok(())
}
