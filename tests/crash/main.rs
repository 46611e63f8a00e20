//! Real processes and real kernels failing under the log: a library
//! writer and the example collector killed with SIGKILL again and again,
//! a kernel that refuses io_uring, a power cut on a FUSE mount, a full
//! ext4 image. All of them spawn processes (this binary re-executed,
//! `mkfs`, `mount`, `umount`): see `common::SPAWNING` for the lock the
//! tests here take while they do, or while they hold logs open.

#[path = "../common/mod.rs"]
mod common;

mod backend;
mod collector_crash;
mod disk_full;
mod fuse;
mod library;
