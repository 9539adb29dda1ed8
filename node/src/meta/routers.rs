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

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    #[test]
    fn heartbeats_prune_expired_state() {
        let (mut s, _) = state_with_user();
        s.execute(MetaCommand::EndSession { family: "fam".into(), presented_sha256: "h0".into(), now_ms: T0 });
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r1".into(), at_ms: T0 });
        assert!(s.sessions.families.contains_key("fam"), "tombstone kept while access tokens may live");
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r2".into(), at_ms: T0 + TOMBSTONE_MS });
        assert!(!s.sessions.families.contains_key("fam"));
        assert!(!s.routers.last_seen.contains_key("r1"));
        assert!(s.routers.last_seen.contains_key("r2"));
        s.execute(MetaCommand::RouterLeft { router_id: "r2".into() });
        assert!(s.routers.last_seen.is_empty());
    }
}
