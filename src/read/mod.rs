//! Reading records back: the reader over sealed and live segments, the
//! followers that wait for new records.

pub(crate) mod follow;
pub(crate) mod reader;
