//! Admin API: tenants, projects and their credentials, plans, quotas, alert rules.

use std::sync::Arc;

use axum::Router;

use crate::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
}
