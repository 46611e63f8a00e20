//! Checkpoint files (`docs/format.md` §8): a snapshot or any other blob a
//! layer above the log keeps beside it, framed so that a torn, truncated
//! or foreign file is never taken for a good one.

/// First eight bytes of a checkpoint file.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"RWCHKPT1";

/// The checkpoint file version writers produce.
pub const CHECKPOINT_VERSION: u32 = 1;

/// Bytes before the payload.
pub const CHECKPOINT_HEADER: usize = 24;

const _: () = assert!(
    CHECKPOINT_HEADER == CHECKPOINT_MAGIC.len() + 4 + 4 + 8,
    "the checkpoint header is magic, version, CRC and length (docs/format.md §8)"
);

pub use crate::error::CheckpointError;

fn crc(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&head[0..12]);
    h.update(&head[16..24]);
    h.update(payload);
    h.finalize()
}

/// The file holding `payload`. Cost: one allocation and one CRC pass.
pub fn encode_checkpoint(payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; CHECKPOINT_HEADER + payload.len()];
    out[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
    out[8..12].copy_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out[CHECKPOINT_HEADER..].copy_from_slice(payload);
    let c = crc(&out[..CHECKPOINT_HEADER], payload);
    out[12..16].copy_from_slice(&c.to_le_bytes());
    debug_assert!(
        decode_checkpoint(&out) == Ok(payload),
        "an encoded checkpoint file decodes to its payload"
    );
    out
}

/// The payload of a checkpoint file, checked whole. No allocation.
pub fn decode_checkpoint(bytes: &[u8]) -> Result<&[u8], CheckpointError> {
    let have = bytes.len() as u64;
    if bytes.len() < CHECKPOINT_HEADER {
        // Too short to say how long it should be: if it starts like one,
        // it was cut short; otherwise it is some other file.
        let n = bytes.len().min(8);
        return Err(if bytes[..n] == CHECKPOINT_MAGIC[..n] {
            CheckpointError::Torn {
                have,
                want: CHECKPOINT_HEADER as u64,
            }
        } else {
            CheckpointError::Magic
        });
    }
    if bytes[0..8] != CHECKPOINT_MAGIC {
        return Err(CheckpointError::Magic);
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != CHECKPOINT_VERSION {
        return Err(CheckpointError::Version(version));
    }
    let stored = u32_at(12);
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let want = (CHECKPOINT_HEADER as u64).saturating_add(len);
    if have < want {
        return Err(CheckpointError::Torn { have, want });
    }
    if have > want {
        return Err(CheckpointError::Trailing { have, want });
    }
    let payload = &bytes[CHECKPOINT_HEADER..];
    assert_eq!(
        payload.len() as u64,
        len,
        "a whole checkpoint file holds exactly the payload it declares"
    );
    if crc(&bytes[..CHECKPOINT_HEADER], payload) != stored {
        return Err(CheckpointError::Crc);
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_and_every_cut_or_flip_is_refused() {
        let file = encode_checkpoint(b"snapshot at LSN 42");
        assert_eq!(decode_checkpoint(&file).unwrap(), b"snapshot at LSN 42");
        assert_eq!(decode_checkpoint(&encode_checkpoint(b"")).unwrap(), b"");
        for cut in 0..file.len() {
            let e = decode_checkpoint(&file[..cut]).unwrap_err();
            assert!(
                matches!(e, CheckpointError::Torn { .. }),
                "cut at {cut}: {e}"
            );
        }
        for i in 0..file.len() {
            for bit in 0..8 {
                let mut bad = file.clone();
                bad[i] ^= 1 << bit;
                assert!(decode_checkpoint(&bad).is_err(), "flip at {i}.{bit}");
            }
        }
        let mut long = file.clone();
        long.push(0);
        assert!(matches!(
            decode_checkpoint(&long),
            Err(CheckpointError::Trailing { .. })
        ));
        assert_eq!(
            decode_checkpoint(b"some notes\n"),
            Err(CheckpointError::Magic)
        );
    }
}
