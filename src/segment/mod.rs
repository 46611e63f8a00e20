//! The segment files of a live log: the writer's set of segments and the
//! size limits over it, the preparer of spares and recycled files, the
//! manifest keeper, and retention (checkpoints and drops).

pub(crate) mod archived;
pub(crate) mod durable;
pub(crate) mod index;
pub(crate) mod lifecycle;
pub(crate) mod manifest;
pub(crate) mod set;
