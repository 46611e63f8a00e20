//! Reading records back: the reader over sealed and live segments, the
//! followers that wait for new records, and the sparse LSN index.

pub(crate) mod follow;
pub(crate) mod index;
pub(crate) mod reader;
