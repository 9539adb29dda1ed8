//! Sextant's data model: identifiers, validated ingest objects, partitioning and time.
//!
//! Everything that both the router and the storage nodes must agree on lives here, so that
//! one concept has exactly one definition.

pub mod admin;
pub mod alert;
pub mod analytics;
pub mod attributes;
pub mod batch;
pub mod calendar;
pub mod capture;
pub mod clock;
pub mod codes;
pub mod cohort;
pub mod funnel;
pub mod idempotency;
pub mod identity;
pub mod ids;
pub mod ingest;
pub mod meta;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod partition;
pub mod peer;
pub mod properties;
pub mod query;
pub mod row;
pub mod sketch;
pub mod subscription;
pub mod text;
pub mod time;
pub mod usage;
pub mod webhook;
pub mod zone;

pub use clock::{Clock, ManualClock};
pub use ids::{OrgId, ProjectId, TraceId, UserId};
