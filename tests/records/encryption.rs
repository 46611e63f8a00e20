//! Data at rest: encrypted and compressed payloads, read back through
//! every reader, with keys rotated, missing, wrong, and with ciphertext
//! altered on disk; mixed logs of plaintext, encrypted and compressed
//! segments. Real files on both backends.

use std::path::Path;
use std::sync::Arc;

use crate::common::*;
use ringwal::verify::{self, Payloads};
use ringwal::{
    Codec, Config, ConfigBuilder, Corruption, Error, Key, KeyProblem, Kind, Level, Lsn, StaticKeys,
    Wal,
};

/// A record payload with a marker no encrypted log may show on disk.
fn secret(i: u64) -> Vec<u8> {
    format!(
        r#"{{"marker":"PLAINTEXT-MARKER","host":"node-{}","cpu":{}.{},"seq":{i}}}"#,
        i % 5,
        i % 97,
        i % 10
    )
    .into_bytes()
}

fn keys(ids: &[u32], current: Option<u32>) -> Arc<StaticKeys> {
    let k = StaticKeys::new();
    for &id in ids {
        k.insert(id, Key::new([id as u8; 32]), false);
    }
    k.set_current(current);
    Arc::new(k)
}

fn with_keys(b: ConfigBuilder, k: &Arc<StaticKeys>) -> Config {
    b.encryption(k.clone()).build()
}

/// Append `n` secret records from `from` on, one by one and as a batch,
/// and return what was appended.
fn write(wal: &Wal, from: u64, n: u64) -> Vec<Vec<u8>> {
    let payloads: Vec<Vec<u8>> = (from..from + n).map(secret).collect();
    // The last ten as one atomic batch, the rest one by one.
    let split = payloads.len().saturating_sub(10);
    for p in &payloads[..split] {
        let _ = wal.append(3, p).unwrap();
    }
    let batch: Vec<(u16, &[u8])> = payloads[split..].iter().map(|p| (3, &p[..])).collect();
    wal.append_batch(&batch)
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    payloads
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether any file in `dir` holds `needle`.
fn dir_holds(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let e = e.unwrap();
        e.file_type().unwrap().is_file() && contains(&std::fs::read(e.path()).unwrap(), needle)
    })
}

fn read_payloads(dir: &Path, cfg: &Config) -> ringwal::Result<Vec<Vec<u8>>> {
    verify::records(dir, cfg, 0)?
        .filter(|r| r.as_ref().map_or(true, |r| r.kind == Kind::Data))
        .map(|r| r.map(|r| r.payload))
        .collect()
}

#[test]
fn encrypted_records_read_back_and_no_plaintext_reaches_the_directory() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let k = keys(&[1], Some(1));
        let cfg = with_keys(small(backend), &k);
        let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
        let sent = write(&wal, 0, 300);
        let marker = wal.checkpoint_marker(40).unwrap();
        marker.wait(Level::Durable).unwrap();
        for (i, p) in sent.iter().enumerate() {
            let r = wal.read(i as Lsn + 1).unwrap();
            assert_eq!(&r.payload, p, "read({}) through the index", i + 1);
        }
        wal.close().unwrap();
        assert!(!dir_holds(&dir, b"PLAINTEXT-MARKER"), "plaintext on disk");
        assert!(!dir_holds(&dir, b"node-"), "plaintext on disk");

        let (wal, report) = Wal::open(&dir, cfg.clone()).unwrap();
        assert!(report.truncated.is_none());
        assert_eq!(
            wal.last_checkpoint_marker().map(|m| m.snapshot_lsn),
            Some(40),
            "markers stay readable to recovery"
        );
        let got: Vec<Vec<u8>> = read_all(&wal)
            .into_iter()
            .filter(|r| r.kind == Kind::Data)
            .map(|r| r.payload)
            .collect();
        assert_eq!(got, sent);
        wal.close().unwrap();

        let checked = verify::verify(&dir, &cfg).unwrap();
        assert_eq!(checked.consistent(), Some(true), "{:?}", checked.problems);
        assert!(checked
            .segments
            .iter()
            .all(|s| s.key_id == 1 && s.payloads == Payloads::KeyFits));
        let keyless = verify::verify(&dir, &small(backend).build()).unwrap();
        assert_eq!(keyless.consistent(), Some(true), "{:?}", keyless.problems);
        assert_eq!(keyless.records, checked.records);
        assert!(keyless
            .segments
            .iter()
            .all(|s| s.payloads == Payloads::Sealed(KeyProblem::Missing)));
    });
}

#[test]
fn a_missing_or_wrong_key_is_a_key_error_naming_the_segment_never_a_cut() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let k = keys(&[1], Some(1));
    let (wal, _) = Wal::open(&dir, with_keys(small(ringwal::Backend::Threaded), &k)).unwrap();
    write(&wal, 0, 20);
    wal.close().unwrap();
    let first_segment = segment_files(&dir, NODE)[0].1.clone();

    let key_error = |cfg: &Config| match read_payloads(&dir, cfg) {
        Err(Error::Key {
            file,
            key_id,
            problem,
        }) => {
            assert_eq!((file.as_path(), key_id), (first_segment.as_path(), 1));
            let msg = Error::Key {
                file,
                key_id,
                problem,
            }
            .to_string();
            assert!(
                msg.contains("key") && msg.contains(&*first_segment.to_string_lossy()),
                "{msg}"
            );
            problem
        }
        other => panic!("expected a key error, got {other:?}"),
    };
    assert_eq!(
        key_error(&cfg(ringwal::Backend::Threaded)),
        KeyProblem::Missing
    );
    let other = Arc::new(StaticKeys::new());
    other.insert(1, Key::new([9; 32]), true);
    assert_eq!(
        key_error(&with_keys(small(ringwal::Backend::Threaded), &other)),
        KeyProblem::Wrong
    );

    // A writer with another key under the log's key id, or with no key
    // provider at all, is refused before it changes anything: the one
    // would leave no single key that reads the log, the other would
    // append plaintext to an encrypted log.
    let files = segment_files(&dir, NODE);
    let key_error = |r: ringwal::Result<_>, problem| match r {
        Err(Error::Key {
            file,
            key_id: 1,
            problem: p,
        }) => {
            assert_eq!(p, problem);
            assert!(files.iter().any(|(_, f)| *f == file), "{file:?}");
        }
        Err(e) => panic!("a writer with a {problem:?} key: {e:?}"),
        Ok(_) => panic!("a writer with a {problem:?} key: accepted"),
    };
    let wrong = with_keys(small(ringwal::Backend::Threaded), &other);
    key_error(Wal::open(&dir, wrong).map(|_| ()), KeyProblem::Wrong);
    assert_eq!(segment_files(&dir, NODE), files, "a wrong key changed it");
    let keyless = Wal::open(&dir, cfg(ringwal::Backend::Threaded));
    key_error(keyless.map(|_| ()), KeyProblem::Missing);
    assert_eq!(
        segment_files(&dir, NODE),
        files,
        "a keyless writer changed it"
    );
    // verify with the wrong key says so, as a problem: not a success.
    let report =
        verify::verify(&dir, &with_keys(small(ringwal::Backend::Threaded), &other)).unwrap();
    assert!(
        matches!(
            report.problems.first(),
            Some(Error::Key {
                key_id: 1,
                problem: KeyProblem::Wrong,
                ..
            })
        ),
        "{:?}",
        report.problems
    );
    assert_ne!(report.consistent(), Some(true));

    // A writer whose provider names no current key appends plaintext on
    // purpose; it recovers the log (framing needs no key) and cuts
    // nothing, and the old records stay sealed.
    let plain = with_keys(small(ringwal::Backend::Threaded), &keys(&[], None));
    let (wal, report) = Wal::open(&dir, plain.clone()).unwrap();
    assert!(report.truncated.is_none() && report.discarded.is_empty());
    wal.append(3, b"later")
        .unwrap()
        .wait(Level::Durable)
        .unwrap();
    assert!(matches!(
        wal.reader_from(0).unwrap().next(),
        Some(Err(Error::Key { .. }))
    ));
    assert_eq!(wal.read(21).unwrap().payload, b"later");
    wal.close().unwrap();
    let all = read_payloads(&dir, &with_keys(small(ringwal::Backend::Threaded), &k)).unwrap();
    assert_eq!(all.len(), 21);
    assert_eq!(all[20], b"later");
}

#[test]
fn keys_rotate_at_a_roll_and_old_segments_stay_readable_while_their_key_is() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let k = keys(&[1, 2], Some(1));
        let cfg = with_keys(small(backend), &k);
        let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
        let mut sent = Vec::new();
        // Enough for several segments under each key.
        sent.extend(write(&wal, 0, 2000));
        k.set_current(Some(2));
        sent.extend(write(&wal, 2000, 2000));
        wal.close().unwrap();

        let report = verify::verify(&dir, &cfg).unwrap();
        assert_eq!(report.consistent(), Some(true), "{:?}", report.problems);
        let ids: Vec<u32> = report.segments.iter().map(|s| s.key_id).collect();
        assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{ids:?}");
        assert!(ids.contains(&1) && ids.contains(&2), "{ids:?}");
        assert_eq!(read_payloads(&dir, &cfg).unwrap(), sent);

        // Key 1 retired from the provider: its segments no longer read.
        let only2 = keys(&[2], Some(2));
        match read_payloads(&dir, &with_keys(small(backend), &only2)) {
            Err(Error::Key {
                key_id: 1,
                problem: KeyProblem::Missing,
                ..
            }) => {}
            other => panic!("expected key 1 missing, got {other:?}"),
        }
    });
}

#[test]
fn mixed_logs_of_plaintext_encrypted_and_compressed_segments_read_back() {
    for_each_backend(|backend| {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let k = keys(&[1], None);
        // Plaintext; encrypted; compressed with LZ4 and encrypted; zstd in
        // plaintext; plain again: one writer per run, each reopening.
        let runs: [(Option<u32>, Codec); 5] = [
            (None, Codec::None),
            (Some(1), Codec::None),
            (Some(1), Codec::Lz4),
            (None, Codec::Zstd),
            (None, Codec::None),
        ];
        let mut sent = Vec::new();
        for (i, &(key, codec)) in runs.iter().enumerate() {
            k.set_current(key);
            let cfg = small(backend)
                .encryption(k.clone())
                .compression(codec, 64)
                .build();
            let (wal, _) = Wal::open(&dir, cfg).unwrap();
            sent.extend(write(&wal, 100 * i as u64, 100));
            wal.close().unwrap();
        }
        let cfg = with_keys(small(backend), &k);
        assert_eq!(read_payloads(&dir, &cfg).unwrap(), sent);
        let report = verify::verify(&dir, &cfg).unwrap();
        assert_eq!(report.consistent(), Some(true), "{:?}", report.problems);
        let keyed = report.segments.iter().filter(|s| s.key_id == 1).count();
        // The two encrypted runs share one segment: the second resumes it.
        assert!(keyed >= 1 && keyed < report.segments.len(), "{keyed}");
    });
}

#[test]
fn compression_stores_telemetry_smaller_and_reads_it_back() {
    for codec in [Codec::Lz4, Codec::Zstd] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let _open = opening_logs();
        let cfg = small(ringwal::Backend::Threaded)
            .compression(codec, 256)
            .build();
        let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
        // 1 KiB records of telemetry lines.
        let records: Vec<Vec<u8>> = (0..500u64)
            .map(|i| {
                (0..14)
                    .flat_map(|j| secret(i * 14 + j))
                    .take(1024)
                    .collect()
            })
            .collect();
        // In atomic batches of 50, so that what reaches the disk does not
        // depend on how the ring happened to group single appends into
        // writes (each write ends padded to a block): each batch costs at
        // most one block of padding, whatever the timing.
        for chunk in records.chunks(50) {
            let batch: Vec<(u16, &[u8])> = chunk.iter().map(|r| (1, r.as_slice())).collect();
            let _ = wal.append_batch(&batch).unwrap();
        }
        wal.sync().unwrap();
        wal.close().unwrap();
        assert_eq!(read_payloads(&dir, &cfg).unwrap(), records);
        let stored: u64 = verify::verify(&dir, &cfg)
            .unwrap()
            .segments
            .iter()
            .map(|s| s.valid_bytes)
            .sum();
        let raw = (records.len() * 1024) as u64;
        assert!(
            stored * 2 < raw,
            "{codec}: {stored} bytes on disk for {raw}"
        );
    }
}

/// The offset and LSN of the first data record in `path` whose payload
/// is at least 40 bytes.
fn first_record(path: &Path) -> (usize, u64, usize) {
    let s = scan_segment(path);
    let f = s
        .records()
        .find(|f| f.kind == Kind::Data && f.payload.len() >= 40)
        .expect("a data record");
    (f.start as usize, f.lsn, f.payload.len())
}

#[test]
fn an_altered_ciphertext_is_damage_never_a_cut_and_never_garbage() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let k = keys(&[1], Some(1));
    let cfg = with_keys(small(ringwal::Backend::Threaded), &k);
    let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
    write(&wal, 0, 50);
    wal.close().unwrap();
    let seg = segment_files(&dir, NODE)[0].1.clone();
    let (at, lsn, len) = first_record(&seg);
    let original = std::fs::read(&seg).unwrap();

    // A bit flipped in the ciphertext: the frame checksum catches it, and
    // later writes vouch for the record, so strict recovery refuses.
    let mut bytes = original.clone();
    bytes[at + 24 + 5] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    match Wal::open(&dir, cfg.clone()) {
        Err(Error::Corrupt { file, offset, .. }) => {
            assert_eq!((file, offset), (seg.clone(), at as u64));
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }

    // The same flip with the checksum made to match: only the tag can
    // tell, and it does: Corrupt at the record, never its bytes.
    let salt = scan_segment(&seg).header.salt;
    let mut h = crc32fast::Hasher::new();
    h.update(&salt.to_le_bytes());
    h.update(&bytes[at + 4..at + 24 + len]);
    bytes[at..at + 4].copy_from_slice(&h.finalize().to_le_bytes());
    std::fs::write(&seg, &bytes).unwrap();
    let (wal, report) = Wal::open(&dir, cfg.clone()).unwrap();
    assert!(report.truncated.is_none(), "nothing may be cut");
    match wal.read(lsn) {
        Err(Error::Corrupt {
            file,
            offset,
            reason: Corruption::Unauthentic,
        }) => assert_eq!((file, offset), (seg.clone(), at as u64)),
        other => panic!("expected Corrupt(Unauthentic), got {other:?}"),
    }
    wal.close().unwrap();
    let report = verify::verify(&dir, &cfg).unwrap();
    assert!(
        matches!(
            report.problems.first(),
            Some(Error::Corrupt {
                reason: Corruption::Unauthentic,
                ..
            })
        ),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_key_file_holds_raw_or_hex_bytes_and_anything_else_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let raw = root.path().join("raw.key");
    let hex = root.path().join("hex.key");
    let bad = root.path().join("bad.key");
    std::fs::write(&raw, [7u8; 32]).unwrap();
    std::fs::write(&hex, format!("{}\n", "07".repeat(32))).unwrap();
    std::fs::write(&bad, "not a key").unwrap();
    for f in [&raw, &hex, &bad] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let dir = root.path().join("log");
    let _open = opening_logs();
    let write_with = |p: &Path| {
        let k = Arc::new(StaticKeys::from_key_file(p, 1).unwrap());
        let (wal, _) = Wal::open(&dir, with_keys(small(ringwal::Backend::Threaded), &k)).unwrap();
        wal.append(0, b"x").unwrap().wait(Level::Durable).unwrap();
        wal.close().unwrap();
        k
    };
    write_with(&raw);
    // The same key in hex reads what the raw one wrote.
    let k = write_with(&hex);
    let got = read_payloads(&dir, &with_keys(small(ringwal::Backend::Threaded), &k)).unwrap();
    assert_eq!(got, [b"x".to_vec(), b"x".to_vec()]);
    match StaticKeys::from_key_file(&bad, 1) {
        Err(Error::Key {
            file,
            problem: KeyProblem::Unusable,
            ..
        }) => assert_eq!(file, bad),
        other => panic!("expected an unusable key file, got {other:?}"),
    }
}

#[test]
fn a_key_file_others_can_read_is_refused_unless_allowed_and_never_shown() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let key = root.path().join("shared.key");
    std::fs::write(&key, format!("{}\n", "5a".repeat(32))).unwrap();
    for mode in [0o644, 0o640, 0o604, 0o620] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        match StaticKeys::from_key_file(&key, 1) {
            Err(
                e @ Error::Key {
                    problem: KeyProblem::Exposed { mode: m },
                    ..
                },
            ) => {
                assert_eq!(m, mode);
                let msg = e.to_string();
                assert!(msg.contains(&format!("{mode:04o}")), "{msg}");
                assert!(msg.contains("shared.key"), "{msg}");
                assert!(!msg.contains("5a5a"), "key bytes in {msg}");
            }
            other => panic!("{mode:o}: expected an exposed key file, got {other:?}"),
        }
        // Allowed explicitly, for a secrets mount.
        let k = StaticKeys::from_exposed_key_file(&key, 1).unwrap();
        assert!(!format!("{k:?}").contains("5a5a"), "key bytes in Debug");
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    StaticKeys::from_key_file(&key, 1).unwrap();
}

/// Bytes `dir`'s files take on disk (allocated blocks).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// The nonce salts the vouches of segment `path` carry, in order.
fn vouch_nonce_salts(path: &Path) -> Vec<u64> {
    use ringwal::format::{self, Decoded};
    let bytes = std::fs::read(path).unwrap();
    let salt = format::SegmentHeader::decode(&bytes[..format::BLOCK])
        .unwrap()
        .salt;
    let (mut at, mut salts) = (format::HEADER_BYTES, Vec::new());
    while at < bytes.len() {
        match format::decode_frame(&bytes[at..], salt, format::MAX_PAYLOAD) {
            Decoded::Frame(f) => {
                salts.extend(f.vouch().and_then(|v| v.nonce_salt));
                at += f.len;
            }
            _ => break,
        }
    }
    salts
}

/// A cron job's life: 100 opens, each appending one record and closing.
/// An encrypted log takes no more disk than a plain one (each writer
/// resumes the segment the last one wrote), every record reads back, and
/// each writer's vouches carry a nonce salt of its own, so no two
/// writers of the segment share a nonce.
#[test]
fn reopening_an_encrypted_log_resumes_its_segment_with_a_nonce_salt_of_its_own() {
    let _open = opening_logs();
    let root = tempfile::tempdir().unwrap();
    let k = keys(&[1], Some(1));
    let base = || small(ringwal::Backend::Threaded).segment_bytes(1 << 20);
    let cycles = 100;
    let mut bytes = Vec::new();
    for encrypted in [false, true] {
        let dir = root.path().join(format!("log-{encrypted}"));
        let cfg = if encrypted {
            with_keys(base(), &k)
        } else {
            base().build()
        };
        for i in 0..cycles {
            let (wal, _) = Wal::open(&dir, cfg.clone()).unwrap();
            let t = wal.append(3, &secret(i)).unwrap();
            t.wait(Level::Durable).unwrap();
            wal.close().unwrap();
        }
        let sent: Vec<Vec<u8>> = (0..cycles).map(secret).collect();
        assert_eq!(read_payloads(&dir, &cfg).unwrap(), sent, "{encrypted}");
        let segments = segment_files(&dir, NODE);
        assert_eq!(segments.len(), 1, "{encrypted}: {segments:?}");
        if encrypted {
            assert!(!dir_holds(&dir, b"PLAINTEXT-MARKER"), "plaintext on disk");
            let mut salts = vouch_nonce_salts(&segments[0].1);
            salts.dedup();
            let distinct: std::collections::HashSet<u64> = salts.iter().copied().collect();
            assert_eq!(
                (salts.len(), distinct.len()),
                (cycles as usize, cycles as usize),
                "one nonce salt per writer, never another writer's"
            );
        }
        bytes.push(disk_bytes(&dir));
    }
    assert!(
        bytes[1] <= bytes[0],
        "encrypted {} bytes on disk against plain {}",
        bytes[1],
        bytes[0]
    );
    eprintln!(
        "{cycles} cycles: plain {} bytes, encrypted {}",
        bytes[0], bytes[1]
    );
}
