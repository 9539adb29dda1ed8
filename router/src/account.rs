//! Sign-in (DESIGN A2).

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use sextant_model::meta::{MetaQuery, User};

use crate::auth::{verify_password, ACCESS_TOKEN_SECONDS};
use crate::error::ApiError;
use crate::AppState;

pub const MAX_AUTH_BODY: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    email: String,
    password: String,
}

pub async fn login(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = crate::body::read(&headers, body, MAX_AUTH_BODY)?;
    let req: LoginRequest = crate::body::parse_json(&body)?;
    if req.email.len() > 320 || req.password.len() > 1024 {
        return Err(ApiError::Unauthorized("wrong email or password"));
    }
    let user: Option<User> =
        app.cluster.meta_read(&MetaQuery::UserByEmail { email: req.email.trim().to_lowercase() }).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    if !verify_password(req.password, hash).await? {
        return Err(ApiError::Unauthorized("wrong email or password"));
    }
    let user = user.ok_or(ApiError::Unauthorized("wrong email or password"))?;
    let token = app.jwt.issue(user.id, user.org_id, user.role)?;
    Ok(Json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": ACCESS_TOKEN_SECONDS,
    })))
}
