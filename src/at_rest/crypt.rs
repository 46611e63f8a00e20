//! Encryption at rest: the keys a log is sealed with, where they come
//! from, and the one AEAD every encrypted payload goes through.
//!
//! A segment's header names the key its data payloads are sealed with
//! (`key_id`, 0 for none). A writer asks its [`KeyProvider`] which key is
//! current whenever it starts a segment, so keys rotate at a roll and old
//! segments stay readable for as long as the provider still has their
//! key. The cipher is XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`): its 24-byte nonce holds the log id, the
//! segment's salt and the record's LSN whole, so no nonce is drawn,
//! stored or counted (the argument that none repeats is in
//! ARCHITECTURE.md, "Encryption").
//!
//! Architecture invariant: nothing here does I/O except
//! [`StaticKeys::from_key_file`], and nothing here knows frames or
//! segments beyond the three numbers a nonce is made of.

pub use crate::error::KeyProblem;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// Bytes the authentication tag adds to every encrypted payload.
pub const TAG_BYTES: usize = 16;

const _: () = assert!(
    TAG_BYTES == std::mem::size_of::<chacha20poly1305::Tag>(),
    "TAG_BYTES is the cipher's tag (docs/format.md §3.5)"
);
const _: () = assert!(
    std::mem::size_of::<XNonce>() == 3 * 8,
    "the nonce holds the log id, the salt and the LSN whole"
);
const _: () = assert!(
    TAG_BYTES < crate::at_rest::format::MAX_PAYLOAD,
    "a sealed record has room for a payload within the format's limit"
);

/// A 32-byte key. Its bytes are wiped from memory when it is dropped, and
/// its `Debug` output never shows them.
#[derive(Clone)]
pub struct Key(Zeroizing<[u8; 32]>);

impl Key {
    /// The key made of these 32 bytes. Cost: a copy.
    pub fn new(bytes: [u8; 32]) -> Key {
        Key(Zeroizing::new(bytes))
    }

    /// Parses a key file's contents: exactly 32 bytes taken as the key,
    /// or 64 hexadecimal digits (surrounding whitespace ignored). `None`
    /// for anything else. Cost: no allocation.
    pub fn parse(contents: &[u8]) -> Option<Key> {
        if let Ok(raw) = <[u8; 32]>::try_from(contents) {
            return Some(Key::new(raw));
        }
        let hex = contents.trim_ascii();
        if hex.len() != 64 {
            return None;
        }
        let mut out = Zeroizing::new([0u8; 32]);
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let digit = |c: u8| (c as char).to_digit(16);
            *o = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Some(Key(out))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Where a log's keys come from: a key id (1 or more; 0 means "not
/// encrypted") to 32 bytes. Implement it over a key management service,
/// a keyring file or a secrets mount; [`StaticKeys`] is a simple one.
///
/// The engine calls [`key`](KeyProvider::key) once per key id and keeps
/// the cipher it makes (so a rotated-out key stays usable for reading
/// until the log is reopened), and [`current`](KeyProvider::current)
/// each time a segment is started: at open and at each roll, under the
/// lock that hands out LSNs. Both should therefore answer from memory;
/// fetch keys before opening the log.
pub trait KeyProvider: Send + Sync + fmt::Debug {
    /// The key id new segments are encrypted with; `None` (or 0): new
    /// segments are written in plaintext.
    fn current(&self) -> Option<u32>;

    /// The key with id `id`, or `None` if this provider does not have it
    /// (reading a segment sealed with it then fails with
    /// [`Error::Key`]).
    fn key(&self, id: u32) -> Option<Key>;
}

/// A [`KeyProvider`] holding its keys in memory, with a current key id
/// that can be switched while the log runs (the next segment started
/// uses it: a key rotation).
#[derive(Default)]
pub struct StaticKeys {
    keys: Mutex<HashMap<u32, Key>>,
    current: Mutex<Option<u32>>,
}

impl fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<u32> = lock(&self.keys).keys().copied().collect();
        ids.sort_unstable();
        f.debug_struct("StaticKeys")
            .field("ids", &ids)
            .field("current", &*lock(&self.current))
            .finish()
    }
}

impl StaticKeys {
    /// No keys; nothing is encrypted until a key is added and made
    /// current.
    pub fn new() -> StaticKeys {
        StaticKeys::default()
    }

    /// Add (or replace) key `id`; it becomes current if `current`.
    /// Replacing the key of an id that segments were already sealed with
    /// makes those unreadable: give every new key a new id.
    ///
    /// # Panics
    ///
    /// If `id` is 0, which means "not encrypted".
    pub fn insert(&self, id: u32, key: Key, current: bool) {
        assert!(id != 0, "key id 0 means \"not encrypted\"");
        lock(&self.keys).insert(id, key);
        if current {
            *lock(&self.current) = Some(id);
        }
    }

    /// Make `id` current (`None`: new segments are plaintext). Takes
    /// effect at the next segment the writer starts.
    pub fn set_current(&self, id: Option<u32>) {
        *lock(&self.current) = id.filter(|&i| i != 0);
    }

    /// One key read from `path` as key `id`, current: the file holds the
    /// 32 key bytes raw, or as 64 hexadecimal digits. A file that group or
    /// others may read or write is refused, as OpenSSH refuses such a
    /// private key: whoever can read the key can read the log. Cost: one
    /// `stat` and one file read.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be read; [`Error::Key`] with
    /// [`KeyProblem::Exposed`] (naming its mode) if others may access it,
    /// [`KeyProblem::Unusable`] if it holds anything but a key.
    pub fn from_key_file(path: &Path, id: u32) -> Result<StaticKeys> {
        let io = |e| Error::io(path, e);
        // Checked on the file that is read: no window between the two.
        let file = std::fs::File::open(path).map_err(io)?;
        if let Some(mode) = exposed_mode(&file).map_err(io)? {
            return Err(Error::Key {
                file: path.to_path_buf(),
                key_id: id,
                problem: KeyProblem::Exposed { mode },
            });
        }
        StaticKeys::from_key_reader(file, path, id)
    }

    /// [`from_key_file`](Self::from_key_file) without the check of who
    /// else may read the file: for a secrets mount whose modes cannot be
    /// made private. Cost: one file read.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be read; [`Error::Key`] with
    /// [`KeyProblem::Unusable`] if it holds anything but a key.
    pub fn from_exposed_key_file(path: &Path, id: u32) -> Result<StaticKeys> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        StaticKeys::from_key_reader(file, path, id)
    }

    /// The one key in `file` (read from `path`) as key `id`, current.
    fn from_key_reader(mut file: std::fs::File, path: &Path, id: u32) -> Result<StaticKeys> {
        use std::io::Read;
        let mut bytes = Zeroizing::new(Vec::new());
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        let key = Key::parse(&bytes).ok_or_else(|| Error::Key {
            file: path.to_path_buf(),
            key_id: id,
            problem: KeyProblem::Unusable,
        })?;
        let keys = StaticKeys::new();
        keys.insert(id, key, true);
        Ok(keys)
    }
}

impl KeyProvider for StaticKeys {
    fn current(&self) -> Option<u32> {
        *lock(&self.current)
    }

    fn key(&self, id: u32) -> Option<Key> {
        lock(&self.keys).get(&id).cloned()
    }
}

/// The mode of `file` (its permission bits) when its group or others may
/// read, write or run it, `None` when only its owner may: the one rule for
/// a file that holds a secret, as OpenSSH applies it to a private key.
/// Checked on an open file, so that what is checked is what is read.
/// Cost: one `fstat`.
///
/// # Errors
///
/// The `fstat`'s, as an `io::Error`.
pub fn exposed_mode(file: &std::fs::File) -> std::io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = file.metadata()?.permissions().mode() & 0o7777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One key's cipher: seals and opens payloads, and makes the key check a
/// segment header carries.
pub(crate) struct Cipher {
    id: u32,
    aead: XChaCha20Poly1305,
}

/// The associated data the key check is made over, so that it can never
/// equal a record's tag (records bind 12 header bytes, this 20).
const KEY_CHECK_AAD: &[u8] = b"ringwal key check v2";

impl Cipher {
    fn new(id: u32, key: &Key) -> Cipher {
        Cipher {
            id,
            aead: XChaCha20Poly1305::new((&*key.0).into()),
        }
    }

    /// The key id this cipher is for.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The nonce of the record with `lsn` in the segment with `salt` of
    /// log `log_id`. LSN 0 (no record has it) is the key check's.
    fn nonce(log_id: u64, salt: u64, lsn: u64) -> XNonce {
        let mut n = [0u8; 24];
        n[..8].copy_from_slice(&log_id.to_le_bytes());
        n[8..16].copy_from_slice(&salt.to_le_bytes());
        n[16..].copy_from_slice(&lsn.to_le_bytes());
        n.into()
    }

    /// Encrypt `buf` in place, its last [`TAG_BYTES`] receiving the tag;
    /// `bound` (the record's header fields) is authenticated too. Cost:
    /// one pass over the payload (about 1 GB/s per core, measured in
    /// docs/benchmarks.md); no allocation.
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than a tag.
    pub fn seal(&self, log_id: u64, salt: u64, bound: &[u8; 12], lsn: u64, buf: &mut [u8]) {
        assert!(lsn != 0, "LSN 0 is the key check's nonce");
        debug_assert!(
            buf.len() >= TAG_BYTES,
            "a sealed payload has room for its tag"
        );
        let (text, tag) = buf.split_at_mut(buf.len() - TAG_BYTES);
        let t = self
            .aead
            .encrypt_in_place_detached(&Cipher::nonce(log_id, salt, lsn), bound, text)
            .expect("a payload under MAX_PAYLOAD is within the cipher's limit");
        tag.copy_from_slice(&t);
    }

    /// Decrypt a sealed payload (`buf` = ciphertext ++ tag) in place and
    /// return the plaintext's length, or `None` if it fails
    /// authentication (tampered, or sealed under other header fields).
    /// Cost: one pass over the payload; no allocation.
    pub fn open(
        &self,
        log_id: u64,
        salt: u64,
        bound: &[u8; 12],
        lsn: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = buf.len().checked_sub(TAG_BYTES)?;
        let (text, tag) = buf.split_at_mut(n);
        let tag = chacha20poly1305::Tag::from_slice(tag);
        self.aead
            .decrypt_in_place_detached(&Cipher::nonce(log_id, salt, lsn), bound, text, tag)
            .ok()?;
        Some(n)
    }

    /// The key check a segment of log `log_id` with `salt` sealed under
    /// this key carries in its header: four bytes of the tag of an empty
    /// message under the nonce no record uses. Cost: one AEAD call.
    pub fn key_check(&self, log_id: u64, salt: u64) -> u32 {
        let tag = self
            .aead
            .encrypt_in_place_detached(&Cipher::nonce(log_id, salt, 0), KEY_CHECK_AAD, &mut [])
            .expect("an empty message is within the cipher's limit");
        u32::from_le_bytes([tag[0], tag[1], tag[2], tag[3]])
    }
}

/// A configuration's keys: its provider, and the ciphers made so far,
/// one per key id. Cloning shares the ciphers.
#[derive(Clone, Default)]
pub(crate) struct Keys {
    provider: Option<Arc<dyn KeyProvider>>,
    ciphers: Arc<Mutex<HashMap<u32, Arc<Cipher>>>>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.provider {
            Some(p) => p.fmt(f),
            None => f.write_str("none"),
        }
    }
}

impl Keys {
    pub fn new(provider: Arc<dyn KeyProvider>) -> Keys {
        Keys {
            provider: Some(provider),
            ciphers: Arc::default(),
        }
    }

    /// Whether a provider is set (new segments may be encrypted).
    pub fn provided(&self) -> bool {
        self.provider.is_some()
    }

    /// The cipher of key `id`, made on first use; `None` if no provider
    /// has it. Cost: a map lookup under a lock; the first time per id,
    /// one provider call.
    pub fn cipher(&self, id: u32) -> Option<Arc<Cipher>> {
        debug_assert!(id != 0, "key id 0 means \"not encrypted\" and names no key");
        let mut ciphers = lock(&self.ciphers);
        if let Some(c) = ciphers.get(&id) {
            return Some(c.clone());
        }
        let key = self.provider.as_ref()?.key(id)?;
        let c = Arc::new(Cipher::new(id, &key));
        ciphers.insert(id, c.clone());
        Some(c)
    }

    /// The cipher new segments are sealed with now; `Ok(None)` for
    /// plaintext. `Err` (naming `dir`) if the provider names a current
    /// key it does not have. Cost: one provider call and [`cipher`].
    ///
    /// [`cipher`]: Keys::cipher
    pub fn current(&self, dir: &Path) -> Result<Option<Arc<Cipher>>> {
        let Some(id) = self
            .provider
            .as_ref()
            .and_then(|p| p.current())
            .filter(|&id| id != 0)
        else {
            return Ok(None);
        };
        self.cipher(id).map(Some).ok_or_else(|| Error::Key {
            file: dir.to_path_buf(),
            key_id: id,
            problem: KeyProblem::Missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cipher(byte: u8) -> Cipher {
        Cipher::new(1, &Key::new([byte; 32]))
    }

    #[test]
    fn sealed_payloads_open_only_with_their_key_nonce_and_header() {
        let c = cipher(7);
        let bound = [3u8; 12];
        let mut buf = b"telemetry".to_vec();
        buf.resize(9 + TAG_BYTES, 0);
        c.seal(11, 22, &bound, 5, &mut buf);
        assert_ne!(&buf[..9], b"telemetry");
        let opened = |c: &Cipher, salt, bound: &[u8; 12], lsn| {
            let mut b = buf.clone();
            c.open(11, salt, bound, lsn, &mut b)
                .map(|n| b[..n].to_vec())
        };
        assert_eq!(
            opened(&c, 22, &bound, 5).as_deref(),
            Some(&b"telemetry"[..])
        );
        assert_eq!(opened(&cipher(8), 22, &bound, 5), None, "another key");
        assert_eq!(opened(&c, 23, &bound, 5), None, "another segment");
        assert_eq!(opened(&c, 22, &bound, 6), None, "another LSN");
        assert_eq!(opened(&c, 22, &[4; 12], 5), None, "another header");
        let mut flipped = buf.clone();
        flipped[2] ^= 1;
        assert_eq!(
            c.open(11, 22, &bound, 5, &mut flipped),
            None,
            "a flipped bit"
        );
    }

    #[test]
    fn key_checks_tell_keys_and_segments_apart() {
        let (a, b) = (cipher(1), cipher(2));
        assert_eq!(a.key_check(1, 2), a.key_check(1, 2));
        assert_ne!(a.key_check(1, 2), b.key_check(1, 2));
        assert_ne!(a.key_check(1, 2), a.key_check(1, 3));
    }

    #[test]
    fn key_files_hold_raw_or_hex_keys_and_nothing_else() {
        let raw = [0xabu8; 32];
        let hex = format!("{}\n", "ab".repeat(32));
        for contents in [&raw[..], hex.as_bytes()] {
            let k = Key::parse(contents).expect("a key");
            assert_eq!(*k.0, raw);
        }
        for bad in [&b"short"[..], &[0u8; 33][..], "zz".repeat(32).as_bytes()] {
            assert!(Key::parse(bad).is_none());
        }
        assert_eq!(format!("{:?}", Key::new(raw)), "Key(..)");
    }
}
