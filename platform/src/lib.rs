//! `ringwal-platform`: the only crate of ringwal that talks to the kernel.
//!
//! Every syscall and every `unsafe` block of the project lives here, behind
//! small safe types, so the engine crate reads as the algorithm:
//!
//! * [`AlignedBuf`]: block-aligned heap buffers that O_DIRECT and registered
//!   io_uring writes require.
//! * [`file`](mod@file): opening segments (O_DIRECT when the filesystem allows it),
//!   preallocation, durable positional writes, data and directory syncs,
//!   exclusive advisory locks, and whether a file system honours
//!   `RWF_DSYNC`.
//! * [`cpu`]: pinning a thread to a CPU the process may run on.
//! * [`Notifier`]: the wake-up a producer sends to a sleeping I/O thread
//!   (eventfd on Linux, kqueue `EVFILT_USER` on macOS).
//! * [`IoQueue`]: the submission/completion interface the engine's I/O thread
//!   drives, with two implementations: [`uring`] (Linux, io_uring) and
//!   [`threaded`] (portable, blocking syscalls on the calling thread).
//! * [`Vfs`] and [`FileIo`]: the file-system interface the engine uses,
//!   implemented by [`RealFs`] and, with the `sim` feature, by
//!   `sim::SimFs`, a deterministic in-memory disk with crash and fault
//!   injection for tests.

#![warn(missing_docs)]
// The crate's `unsafe` blocks each say why they are sound.
#![deny(clippy::undocumented_unsafe_blocks)]

mod buf;
pub mod cpu;
pub mod file;
pub mod neighbour;
mod notify;
mod queue;
#[cfg(feature = "sim")]
pub mod sandbox;
#[cfg(feature = "sim")]
pub mod sim;
pub mod threaded;
#[cfg(target_os = "linux")]
pub mod uring;
pub mod vfs;

pub use buf::{AlignedBuf, Slot};
pub use notify::Notifier;
pub use queue::{new_queue, Completion, IoQueue, Op, QueueKind, Wait, WakeWord, WriteSync};
pub use vfs::{Advice, FileIo, OpenHow, RealFs, VFile, Vfs, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE};

/// The I/O block size every write is aligned to, in bytes.
///
/// O_DIRECT needs offsets, lengths and buffer addresses aligned to the
/// device's logical block size; 4 KiB covers every device we target and is
/// also the page size, so one constant serves both.
pub const BLOCK: usize = 4096;
