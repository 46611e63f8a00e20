//! The receiver, run as its users run it: its HTTP contract (`http`),
//! who may export (`access`), SIGKILL under the OpenTelemetry Python
//! SDK's own exporter (`exporter_crash`), and blocks in an object store,
//! a real S3 server among them (`store`). One binary, so that the
//! dependencies are linked once. Every log is written by a receiver
//! running as a child process; this process only reads them back.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod exporter_crash;
mod http;
mod store;
