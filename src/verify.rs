//! Read-only inspection of a log directory, for `ringwal verify`, `stat`,
//! `cat` and `dump`. Nothing here takes the writer lock or modifies a file,
//! so it runs beside a live writer (stopping at the last valid frame).
