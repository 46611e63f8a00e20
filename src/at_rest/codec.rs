//! Compression of data payloads: the configuration (which codec, from
//! which size) and the one pair of functions that packs a payload for a
//! frame and unpacks it again.
//!
//! A packed payload is the original length as a little-endian `u32`
//! followed by the codec's output (docs/format.md §3.4); it is stored only
//! when it is smaller than the payload, so incompressible data costs one
//! compression attempt and is stored as is.
//!
//! Architecture invariant: no I/O and no knowledge of frames here; the
//! frame's flags byte says which codec a payload was packed with
//! ([`Codec`]).

use crate::at_rest::format::{Codec, MAX_PAYLOAD};
use crate::error::{Error, Result};

/// Payloads shorter than this are not compressed by default: below it
/// LZ4 rarely gains the 4-byte length word plus its own block overhead
/// on telemetry records, and each attempt costs a pass.
pub const DEFAULT_MIN_BYTES: usize = 256;

/// zstd level: 1, its fastest. On JSON telemetry it packs about as well
/// as level 3 for a third of the time per byte (docs/benchmarks.md).
#[cfg(feature = "zstd")]
const ZSTD_LEVEL: i32 = 1;

/// Which codec a writer compresses data payloads with, and from which
/// size. `Copy`; part of [`Config`](crate::Config).
///
/// `Serialize` and `Deserialize` with the `serde` feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Compression {
    /// The codec ([`Codec::None`]: nothing is compressed).
    pub codec: Codec,
    /// Payloads shorter than this many bytes are stored as given.
    pub min_bytes: usize,
}

impl Default for Compression {
    fn default() -> Compression {
        Compression {
            codec: Codec::None,
            min_bytes: DEFAULT_MIN_BYTES,
        }
    }
}

/// Whether this build can pack and unpack `codec` (zstd needs the
/// `zstd` feature). Cost: none.
pub fn supported(codec: Codec) -> bool {
    match codec {
        Codec::None | Codec::Lz4 => true,
        Codec::Zstd => cfg!(feature = "zstd"),
    }
}

/// `payload` packed with `c.codec`, or `None` when it is to be stored as
/// given: no codec, shorter than `c.min_bytes`, or not made smaller.
/// Cost: one compression pass and one allocation of the codec's bound.
pub(crate) fn pack(c: &Compression, payload: &[u8]) -> Option<Vec<u8>> {
    if c.codec == Codec::None || payload.len() < c.min_bytes {
        return None;
    }
    debug_assert!(
        payload.len() <= MAX_PAYLOAD,
        "a packed payload states at most MAX_PAYLOAD bytes, or readers refuse it"
    );
    let len = u32::try_from(payload.len()).ok()?;
    let mut out = vec![0u8; 4 + bound(c.codec, payload.len())];
    out[..4].copy_from_slice(&len.to_le_bytes());
    let n = match c.codec {
        Codec::None => return None,
        Codec::Lz4 => lz4_flex::block::compress_into(payload, &mut out[4..]).ok()?,
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::bulk::compress_to_buffer(payload, &mut out[4..], ZSTD_LEVEL).ok()?,
        #[cfg(not(feature = "zstd"))]
        Codec::Zstd => return None,
    };
    out.truncate(4 + n);
    (out.len() < payload.len()).then_some(out)
}

fn bound(codec: Codec, len: usize) -> usize {
    match codec {
        Codec::None => 0,
        Codec::Lz4 => lz4_flex::block::get_maximum_output_size(len),
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::zstd_safe::compress_bound(len),
        #[cfg(not(feature = "zstd"))]
        Codec::Zstd => 0,
    }
}

/// Why a packed payload does not unpack: what the corruption report says.
pub(crate) enum Unpack {
    /// The bytes are not a packed payload that yields its stated length.
    Damaged(String),
    /// A zstd payload in a build without the `zstd` feature.
    #[cfg_attr(feature = "zstd", allow(dead_code))]
    Unsupported,
}

/// The payload `packed` (with `codec`) was made from. Cost: one
/// allocation of the stated length (at most [`MAX_PAYLOAD`]) and one
/// decompression pass.
pub(crate) fn unpack(codec: Codec, packed: &[u8]) -> std::result::Result<Vec<u8>, Unpack> {
    let Some((len, block)) = packed.split_first_chunk::<4>() else {
        return Err(Unpack::Damaged("shorter than its length word".into()));
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_PAYLOAD {
        return Err(Unpack::Damaged(format!(
            "states {len} bytes, more than the format's {MAX_PAYLOAD}"
        )));
    }
    let mut out = vec![0u8; len];
    let got = match codec {
        Codec::None => return Ok(packed.to_vec()),
        Codec::Lz4 => lz4_flex::block::decompress_into(block, &mut out).map_err(|e| e.to_string()),
        #[cfg(feature = "zstd")]
        Codec::Zstd => zstd::bulk::decompress_to_buffer(block, &mut out).map_err(|e| e.to_string()),
        #[cfg(not(feature = "zstd"))]
        Codec::Zstd => return Err(Unpack::Unsupported),
    };
    match got {
        Ok(n) if n == len => Ok(out),
        Ok(n) => Err(Unpack::Damaged(format!(
            "unpacks to {n} bytes, not the {len} it states"
        ))),
        Err(e) => Err(Unpack::Damaged(format!("{} block: {e}", codec.name()))),
    }
}

/// `InvalidConfig` unless this build supports `codec`.
pub(crate) fn check_supported(codec: Codec) -> Result<()> {
    if supported(codec) {
        return Ok(());
    }
    Err(Error::InvalidConfig(format!(
        "codec {codec} needs ringwal built with the `{codec}` feature"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn telemetry(n: usize) -> Vec<u8> {
        let mut s = String::new();
        for i in 0..n {
            s.push_str(&format!(
                r#"{{"host":"node-{}","metric":"cpu.user","value":{}.{},"ts":{}}}"#,
                i % 7,
                i % 100,
                i % 10,
                1_700_000_000 + i
            ));
        }
        s.into_bytes()
    }

    fn codecs() -> Vec<Codec> {
        [Codec::Lz4, Codec::Zstd]
            .into_iter()
            .filter(|&c| supported(c))
            .collect()
    }

    #[test]
    fn packed_payloads_unpack_to_themselves_and_are_smaller() {
        for codec in codecs() {
            let c = Compression {
                codec,
                min_bytes: 64,
            };
            let p = telemetry(40);
            let packed = pack(&c, &p).expect("telemetry compresses");
            assert!(
                packed.len() < p.len() / 2,
                "{codec}: {} of {}",
                packed.len(),
                p.len()
            );
            assert_eq!(unpack(codec, &packed).ok(), Some(p));
        }
    }

    #[test]
    fn short_and_incompressible_payloads_are_stored_as_given() {
        let mut noise = vec![0u8; 4096];
        getrandom::fill(&mut noise).unwrap();
        for codec in codecs() {
            let c = Compression {
                codec,
                min_bytes: 512,
            };
            assert_eq!(pack(&c, &telemetry(10)[..300]), None, "{codec}: short");
            assert_eq!(pack(&c, &noise), None, "{codec}: noise");
        }
        assert_eq!(pack(&Compression::default(), &telemetry(40)), None);
    }

    #[test]
    fn damaged_packed_payloads_are_refused_not_misread() {
        for codec in codecs() {
            let c = Compression {
                codec,
                min_bytes: 64,
            };
            let packed = pack(&c, &telemetry(40)).unwrap();
            let mut longer = packed.clone();
            longer[..4].copy_from_slice(
                &(u32::from_le_bytes(packed[..4].try_into().unwrap()) + 1).to_le_bytes(),
            );
            let huge = [&((MAX_PAYLOAD + 1) as u32).to_le_bytes()[..], &packed[4..]].concat();
            for bad in [
                &packed[..3],
                &longer[..],
                &huge[..],
                &packed[..packed.len() / 2],
            ] {
                assert!(
                    matches!(unpack(codec, bad), Err(Unpack::Damaged(_))),
                    "{codec}"
                );
            }
        }
    }
}
