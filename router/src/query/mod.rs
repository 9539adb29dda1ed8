//! Reads: every endpoint parses its parameters (`params`), builds a plan, sends it to every
//! shard (`scatter`), folds the shards' partials into one answer (`sextant_model::query::Merge`)
//! and shapes the response. One module per endpoint family; a trace lookup goes to the one
//! shard holding the trace.

pub mod activity;
pub mod apm;
pub mod cohorts;
pub mod errors;
pub mod funnel;
pub mod hosts;
pub mod logs;
pub mod params;
pub mod replays;
pub mod retention;
pub mod scatter;
pub mod service_map;
pub mod traces;

pub use params::{decode_cursor, Params, HOUR_NS};
