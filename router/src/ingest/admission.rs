//! Per-tenant fairness of ingest: the bytes one project has being parsed and committed through
//! this router are bounded, so a project that floods cannot take every place in the queues
//! behind it (the parsers, the shards' write queues); past its share it is 429 `rate_limited`
//! with `Retry-After: 1` while other projects' writes go on. A request takes its share once
//! its project is known and its body received, before it waits for a parser.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sextant_model::ProjectId;

use crate::http::error::ApiError;

pub struct TenantShares {
    max_bytes: u64,
    held: Arc<Mutex<HashMap<ProjectId, u64>>>,
}

/// A project's bytes in flight, given back when dropped.
#[must_use]
pub struct Share {
    project: ProjectId,
    bytes: u64,
    held: Arc<Mutex<HashMap<ProjectId, u64>>>,
}

impl TenantShares {
    /// `max_bytes`: body bytes (as received) one project may have being parsed or committed at
    /// once.
    pub fn new(max_bytes: u64) -> Self {
        Self { max_bytes: max_bytes.max(1), held: Default::default() }
    }

    /// Takes `bytes` of `project`'s share. A request alone is always admitted (whatever its
    /// size, the body limits bound it), so a project is never refused while idle.
    pub fn enter(&self, project: &ProjectId, bytes: u64) -> Result<Share, ApiError> {
        let mut held = self.held.lock().unwrap();
        let now = held.get(project).copied().unwrap_or(0);
        if now > 0 && now.saturating_add(bytes) > self.max_bytes {
            return Err(ApiError::RateLimited { retry_after_secs: 1 });
        }
        held.insert(*project, now.saturating_add(bytes));
        Ok(Share { project: *project, bytes, held: self.held.clone() })
    }

    /// Bytes `project` has in flight now.
    pub fn held(&self, project: &ProjectId) -> u64 {
        self.held.lock().unwrap().get(project).copied().unwrap_or(0)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap();
        if let Some(n) = held.get_mut(&self.project) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.remove(&self.project);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_past_its_share_is_rate_limited_while_others_go_on() {
        let (a, b) = (ProjectId::random(), ProjectId::random());
        let shares = TenantShares::new(1000);
        let a1 = shares.enter(&a, 600).unwrap();
        let _a2 = shares.enter(&a, 400).expect("exactly the share");
        match shares.enter(&a, 1) {
            Err(ApiError::RateLimited { retry_after_secs }) => assert_eq!(retry_after_secs, 1),
            other => panic!("expected 429, got {:?}", other.err()),
        }
        let _b = shares.enter(&b, 1000).expect("another project has its own share");
        drop(a1);
        assert_eq!(shares.held(&a), 400);
        let _a3 = shares.enter(&a, 600).expect("room again once a request is committed");
    }

    #[test]
    fn a_lone_request_larger_than_the_share_is_admitted() {
        let a = ProjectId::random();
        let shares = TenantShares::new(10);
        let big = shares.enter(&a, 5000).unwrap();
        assert!(shares.enter(&a, 1).is_err());
        drop(big);
        assert_eq!(shares.held(&a), 0, "nothing is left held");
    }
}
