//! The columnar storage of a data shard: an in-memory buffer of applied rows, flushed into
//! immutable, time-bucketed Parquet segments listed by an atomically replaced manifest.

pub mod attribute;
pub mod attribute_columns;
pub mod buffer;
pub mod compaction;
mod event_columns;
pub mod file;
#[cfg(test)]
mod golden;
pub mod hex_ids;
pub mod layout;
pub mod manifest;
pub mod prefetch;
pub mod rollup;
pub mod scan;
pub mod summary;
pub mod table;
pub mod token_index;
pub mod user_number;
pub mod uuids;

pub use buffer::Buffer;
pub use file::{Segment, SegmentMeta};
pub use manifest::{Dedup, Manifest};
pub use scan::{Filter, Scan, EVENT_DICTIONARIES};
pub use table::{Row, Table};

/// A hasher for keys that already are well-mixed hashes (xxh3 of names or span ids).
#[derive(Default)]
pub struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
