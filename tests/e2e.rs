//! The workspace's end-to-end tests: real `sextant` processes on loopback ports. One test
//! binary with a module per area (`cargo nextest run --test e2e cluster::`): each separate
//! binary linked the whole dependency tree again (docs/BENCHMARKS.md, "Test build time").

mod common;

mod admin;
mod alerts;
mod analytics;
mod analytics_idempotency;
mod analytics_oracle;
mod billing;
mod boundary;
mod cluster;
mod cohorts;
mod crash;
mod dashboard;
mod disk;
mod failover;
mod hostile_clients;
mod identity;
mod internal_tls;
mod long_ranges;
mod monitoring;
mod nemesis;
mod openapi;
mod otlp;
mod overload;
mod partial;
mod posthog_js;
mod quota;
mod reads;
mod scaling;
mod standalone;
mod startup_hardening;
mod times;
mod tls;
mod usage;
mod webhooks;
mod zones;
