//! Running a log: opening it again and again (locks, LSNs, configuration
//! changes, modes, limits), by a relative path, watching it (the
//! durability observer, `Stats` and, with the `metrics` feature, their
//! export), configuration files (feature `serde`), and the files toolkit
//! for snapshots beside it.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "archive")]
mod archive;
#[cfg(feature = "serde")]
mod config_serde;
mod file_systems;
mod files;
mod layering;
#[cfg(feature = "metrics")]
mod metrics_export;
mod observe;
mod open;
mod paths;
