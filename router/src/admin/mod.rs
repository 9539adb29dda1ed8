//! The cluster's admin API (`/admin/v1/...`): what the operator uses to push tenancy, plans,
//! quotas and alert rules into meta and to change the storage membership. Authenticated by
//! one admin token (`SEXTANT_ADMIN_TOKEN`), never by user sessions or project keys; disabled
//! (404) when the router has no admin token.

pub mod cluster;
pub mod tenancy;
pub mod usage;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::Router;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::http::error::ApiError;
use crate::AppState;

/// Largest admin request body: specs of single resources.
pub const MAX_ADMIN_BODY: usize = 64 * 1024;

/// Routes under `/admin/v1`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new().merge(tenancy::routes()).merge(usage::routes()).merge(cluster::routes())
}

/// The admin token as the router keeps it: only its SHA-256, so a memory dump or a debug print
/// does not reveal it.
#[derive(Clone)]
pub struct AdminToken {
    sha256: [u8; 32],
}

impl AdminToken {
    /// Refuses tokens too short to resist guessing.
    pub fn new(token: &str) -> Result<Self, &'static str> {
        if token.len() < 32 {
            return Err("the admin token must have at least 32 characters");
        }
        Ok(Self { sha256: Sha256::digest(token.as_bytes()).into() })
    }

    fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest.ct_eq(&self.sha256).into()
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// Proof that the request carried the admin token (`Authorization: Bearer <token>`).
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        let Some(expected) = &app.config.admin_token else {
            return Err(ApiError::NotFound("no such endpoint".into()));
        };
        let presented = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthorized("the admin API needs the admin token as a bearer token"))?;
        if expected.matches(presented.trim()) {
            Ok(Admin)
        } else {
            Err(ApiError::Unauthorized("the admin token is not valid"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        let t = AdminToken::new("0123456789abcdef0123456789abcdef").unwrap();
        assert!(t.matches("0123456789abcdef0123456789abcdef"));
        assert!(!t.matches("0123456789abcdef0123456789abcdeF"));
        assert!(!t.matches(""));
        assert!(AdminToken::new("short").is_err());
        assert_eq!(format!("{t:?}"), "AdminToken(..)");
    }
}
