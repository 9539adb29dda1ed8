//! The columnar storage of a data shard: an in-memory buffer of applied rows, flushed into
//! immutable, time-bucketed Parquet segments listed by an atomically replaced manifest.

pub mod attribute;
pub mod attribute_columns;
pub mod buffer;
pub mod compaction;
pub mod file;
pub mod hex_ids;
pub mod layout;
pub mod manifest;
pub mod scan;
pub mod summary;
pub mod table;
pub mod token_index;
pub mod uuids;

pub use buffer::Buffer;
pub use file::{Segment, SegmentMeta};
pub use manifest::{Dedup, Manifest};
pub use scan::{Filter, Scan, EVENT_DICTIONARIES};
pub use table::{Row, Table};
