//! Shared code of ringwal's fuzz targets.
//!
//! Each target in `fuzz_targets/` is a one-line wrapper around a `check`
//! function here, so the same checks can be run by hand on a reproducer
//! (`cargo +nightly fuzz run <target> <file>`) and the seed inputs are
//! built by the same code that interprets them (`src/seeds.rs`).
//!
//! The oracles do not trust `ringwal::format` to describe itself: [`spec`]
//! is a second, independent reading of `docs/format.md` (its own constants,
//! its own CRC calls), and every target compares the engine against it.

pub mod cursor;
pub mod frame;
pub mod header;
pub mod recovery;
pub mod seeds;
pub mod spec;
