//! Routers' heartbeats: which routers are alive, so each can size its share of the
//! cluster-wide rate limits (docs/API.md, "Rate limits").

use std::collections::BTreeMap;

use sextant_model::meta::{RouterSeen, ROUTER_LIVE_MS};

/// When each router was last heard from, by router id.
#[derive(Clone, Debug, Default)]
pub(super) struct Routers {
    pub(super) last_seen: BTreeMap<String, i64>,
}

impl Routers {
    pub(super) fn heartbeat(&mut self, router_id: String, at_ms: i64) {
        self.last_seen.insert(router_id, at_ms);
    }

    pub(super) fn left(&mut self, router_id: &str) {
        self.last_seen.remove(router_id);
    }

    pub(super) fn prune(&mut self, now_ms: i64) {
        self.last_seen.retain(|_, at| now_ms - *at < 4 * ROUTER_LIVE_MS);
    }

    pub(super) fn view(&self) -> Vec<RouterSeen> {
        self.last_seen.iter().map(|(id, at)| RouterSeen { id: id.clone(), at_ms: *at }).collect()
    }
}
