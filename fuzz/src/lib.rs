//! Fuzz targets of every parser of untrusted input (request bodies, query parameters, the
//! log search language, cohort definitions) and of every reader of files that may be
//! corrupted on disk (segments, manifests, token indexes, the Raft log). See
//! docs/RELIABILITY.md.

pub mod alloc;
pub mod short;
pub mod targets;
