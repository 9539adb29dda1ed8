//! Conversions between the wire messages and the domain types of `sextant_model`, one module
//! per family of messages. Nothing outside this crate sees both sides at once.

mod cohort;
pub mod persist_row;
mod query;
mod row;
