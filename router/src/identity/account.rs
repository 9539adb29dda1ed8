//! Accounts and sessions (docs/API.md, "Sign-up, sign-in and sign-out"): sign-up, sign-in,
//! refresh-token rotation, sign-out and joining an org by invitation.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sextant_model::identity::{check_password, normalize_email, normalize_name, Problems};
use sextant_model::meta::{
    CredentialKind, Member, MetaCommand, MetaCommandResult, MetaQuery, Org, Project, RefreshFamily, Refusal, Role,
    User, TRIAL_MS,
};
use sextant_model::time::format_nanos;
use sextant_model::{OrgId, ProjectId, UserId};

use crate::http::error::ApiError;
use crate::identity::auth::{hash_password, new_credential, verify_password, ACCESS_TOKEN_SECONDS};
use crate::identity::members::parse_invite_token;
use crate::identity::projects::ProjectJson;
use crate::identity::refresh::{self, RefreshToken};
use crate::AppState;

pub const MAX_AUTH_BODY: usize = 64 * 1024;
/// The plan every sign-up starts on, as a trial (docs/API.md, "Sign-up, sign-in and sign-out").
const SIGNUP_PLAN: &str = "pro";

pub fn time_json(ms: i64) -> String {
    format_nanos(ms.saturating_mul(1_000_000))
}

/// A user as the API shows them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemberJson {
    pub id: UserId,
    pub email: String,
    pub name: String,
    pub role: Role,
    pub org_id: OrgId,
    pub created_at: String,
}

impl From<&Member> for MemberJson {
    fn from(m: &Member) -> Self {
        MemberJson {
            id: m.id,
            email: m.email.clone(),
            name: m.name.clone(),
            role: m.role,
            org_id: m.org_id,
            created_at: time_json(m.created_at_ms),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct OrgJson {
    id: OrgId,
    name: String,
    plan: String,
    default_project_id: ProjectId,
    trial_ends_at: Option<String>,
    created_at: String,
}

fn org_json(o: &Org, trial_ends_at_ms: Option<i64>) -> OrgJson {
    OrgJson {
        id: o.id,
        name: o.name.clone(),
        plan: o.plan.clone(),
        default_project_id: o.default_project,
        trial_ends_at: trial_ends_at_ms.map(time_json),
        created_at: time_json(o.created_at_ms),
    }
}

/// What a sign-up answers besides the session.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct SignedUp {
    user: MemberJson,
    org: OrgJson,
    project: ProjectJson,
}

/// What joining by invitation answers besides the session.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Joined {
    user: MemberJson,
}

/// Nothing besides the session (sign-in, refresh).
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Nothing {}

/// An answer that starts a session: `body`, and the access token (the refresh token is in
/// the cookie).
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct SessionAnswer<T> {
    #[serde(flatten)]
    body: T,
    access_token: String,
    token_type: &'static str,
    expires_in: i64,
}

/// An access token for `user` in sign-in `family`, with the new refresh cookie.
fn session_response<T: Serialize>(
    app: &AppState,
    status: StatusCode,
    user: &Member,
    refresh: &RefreshToken,
    body: T,
) -> Result<Response, ApiError> {
    let access_token = app.jwt.issue(user.id, user.org_id, user.role, &refresh.family)?;
    let body = SessionAnswer { body, access_token, token_type: "Bearer", expires_in: ACCESS_TOKEN_SECONDS };
    let mut resp = (status, Json(body)).into_response();
    resp.headers_mut().insert(header::SET_COOKIE, refresh::set_cookie(&refresh.value, app.config.secure_cookies));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SignupRequest {
    email: String,
    password: String,
    name: String,
    org_name: String,
}

#[utoipa::path(
    post,
    path = "/auth/signup",
    tag = "accounts",
    summary = "Sign up: a user, their organization and its default project",
    request_body(content = SignupRequest, example = json!({"email": "ada@example.com", "password": "correct horse battery", "name": "Ada", "org_name": "Example"})),
    responses(
        (status = 201, description = "Signed up and signed in. The access token; the refresh token is in the `sextant_refresh` cookie (`HttpOnly`, `Path=/auth`).", body = SessionAnswer<SignedUp>, headers(("set-cookie" = String, description = "The refresh token."))),
        (status = 409, description = "An account with this email exists (`email_taken`).", body = crate::http::error::ErrorBody),
        crate::http::openapi::AuthErrors
    )
)]
pub async fn signup(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: SignupRequest = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    let email = problems.check("email", normalize_email(&req.email));
    problems.check("password", check_password(&req.password));
    let name = problems.check("name", normalize_name(&req.name));
    let org_name = problems.check("org_name", normalize_name(&req.org_name));
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let (email, name, org_name) = (email.unwrap_or_default(), name.unwrap_or_default(), org_name.unwrap_or_default());
    // Cheap early answer for the common case; meta decides for real below.
    let existing: Option<User> = app.cluster.meta_read(&MetaQuery::UserByEmail { email: email.clone() }).await?;
    if existing.is_some() {
        return Err(Refusal::EmailTaken.into());
    }
    let password_hash = hash_password(req.password).await?;
    let now = app.clock.now_millis();
    let (org_id, user_id, project_id) = (OrgId::random(), UserId::random(), ProjectId::random());
    let (ingest_token, token_record) = new_credential(CredentialKind::IngestToken, project_id, "default", now);
    let refresh = RefreshToken::new_family();
    let org = Org {
        id: org_id,
        name: org_name,
        plan: SIGNUP_PLAN.into(),
        default_project: project_id,
        created_at_ms: now,
        managed_by: None,
        key: None,
        owner_email: None,
        suspended: false,
    };
    let trial_ends_at_ms = Some(now + TRIAL_MS);
    let user = User { id: user_id, org_id, email, name, role: Role::Owner, password_hash, created_at_ms: now };
    let project =
        Project { id: project_id, org_id, name: "default".into(), created_at_ms: now, managed_by: None, key: None };
    let body = SignedUp {
        user: MemberJson::from(&user.member()),
        org: org_json(&org, trial_ends_at_ms),
        project: ProjectJson::new(&project, Some(ingest_token), true),
    };
    let member = user.member();
    let command = MetaCommand::Signup {
        org,
        user,
        project,
        credentials: vec![token_record],
        session: RefreshFamily::new(refresh.family.clone(), user_id, org_id, refresh.sha256.clone(), now),
        trial_ends_at_ms,
    };
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "a sign-up")?;
    session_response(&app, StatusCode::CREATED, &member, &refresh, body)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    email: String,
    password: String,
}

#[utoipa::path(
    post,
    path = "/auth/login",
    tag = "accounts",
    summary = "Sign in",
    request_body(content = LoginRequest, example = json!({"email": "ada@example.com", "password": "correct horse battery"})),
    responses(
        (status = 200, description = "Signed in. The access token; the refresh token is in the `sextant_refresh` cookie (`HttpOnly`, `Path=/auth`).", body = SessionAnswer<Nothing>, headers(("set-cookie" = String, description = "The refresh token."))),
        crate::http::openapi::AuthErrors
    )
)]
pub async fn login(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    const WRONG: ApiError = ApiError::Unauthorized("wrong email or password");
    let req: LoginRequest = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    if req.email.len() > 320 || req.password.len() > 1024 {
        return Err(WRONG);
    }
    let user: Option<User> =
        app.cluster.meta_read(&MetaQuery::UserByEmail { email: req.email.trim().to_lowercase() }).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    if !verify_password(req.password, hash).await? {
        return Err(WRONG);
    }
    let user = user.ok_or(WRONG)?.member();
    let refresh = RefreshToken::new_family();
    let session = RefreshFamily::new(
        refresh.family.clone(),
        user.id,
        user.org_id,
        refresh.sha256.clone(),
        app.clock.now_millis(),
    );
    // Plain write: a new session changes nothing the router caches.
    match app.cluster.meta_write(&MetaCommand::StartSession { session }).await? {
        MetaCommandResult::Done => session_response(&app, StatusCode::OK, &user, &refresh, Nothing {}),
        // Removed between the read and the write.
        MetaCommandResult::Refused(_) => Err(WRONG),
        other => Err(ApiError::Internal(format!("unexpected meta answer to a sign-in: {other:?}"))),
    }
}

/// A 401 that also deletes the cookie, so the browser stops presenting a dead token.
fn end_of_session(app: &AppState, error: ApiError) -> Response {
    let mut resp = error.into_response();
    resp.headers_mut().insert(header::SET_COOKIE, refresh::clear_cookie(app.config.secure_cookies));
    resp
}

#[utoipa::path(
    post,
    path = "/auth/refresh",
    tag = "accounts",
    summary = "A new access token for the refresh cookie (which rotates)",
    params(("cookie" = String, Header, description = "`sextant_refresh=…`")),
    responses(
        (status = 200, description = "A new session. The access token; the refresh token is in the `sextant_refresh` cookie (`HttpOnly`, `Path=/auth`).", body = SessionAnswer<Nothing>, headers(("set-cookie" = String, description = "The rotated refresh token."))),
        crate::http::openapi::AuthErrors
    )
)]
pub async fn refresh(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let Some((family, presented)) = refresh::read_cookie(&headers, refresh::COOKIE).and_then(refresh::parse) else {
        return Ok(end_of_session(&app, ApiError::Unauthorized("missing or malformed refresh token")));
    };
    let next = RefreshToken::next(&family);
    let command = MetaCommand::RotateSession {
        family,
        presented_sha256: presented,
        new_sha256: next.sha256.clone(),
        now_ms: app.clock.now_millis(),
    };
    // Plain write: a rotation changes nothing the router caches.
    match app.cluster.meta_write(&command).await? {
        MetaCommandResult::Session { user } => session_response(&app, StatusCode::OK, &user, &next, Nothing {}),
        MetaCommandResult::Refused(r) => {
            if r == Refusal::SessionReused {
                tracing::warn!("a rotated refresh token was presented again; its sign-in is revoked");
                // Revoked sessions must reach this router's cache before the next request.
                let _ = app.cluster.refresh_meta().await;
            }
            Ok(end_of_session(&app, r.into()))
        }
        other => Err(ApiError::Internal(format!("unexpected meta answer to a refresh: {other:?}"))),
    }
}

#[utoipa::path(
    post,
    path = "/auth/logout",
    tag = "accounts",
    summary = "Sign out: revoke the refresh cookie's session",
    responses(
        (status = 204, description = "Signed out; the cookie is cleared.", headers(("set-cookie" = String, description = "Clears the refresh cookie."))),
        crate::http::openapi::AuthErrors
    )
)]
pub async fn logout(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some((family, presented_sha256)) = refresh::read_cookie(&headers, refresh::COOKIE).and_then(refresh::parse) {
        // Refused when the cookie is not a live token of the family: nothing to end then.
        app.cluster
            .meta_change(&MetaCommand::EndSession { family, presented_sha256, now_ms: app.clock.now_millis() })
            .await?;
    }
    // Signing out twice, or without a valid cookie, is not an error: the outcome is the same.
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::SET_COOKIE, refresh::clear_cookie(app.config.secure_cookies));
    Ok(resp)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct AcceptInviteRequest {
    invite_token: String,
    password: String,
    name: String,
}

#[utoipa::path(
    post,
    path = "/auth/invite/accept",
    tag = "accounts",
    summary = "Join an organization by invitation",
    request_body(content = AcceptInviteRequest, example = json!({"invite_token": "…", "password": "correct horse battery", "name": "Grace"})),
    responses(
        (status = 200, description = "Joined and signed in. The access token; the refresh token is in the `sextant_refresh` cookie (`HttpOnly`, `Path=/auth`).", body = SessionAnswer<Joined>, headers(("set-cookie" = String, description = "The refresh token."))),
        (status = 409, description = "An account with the invited email exists (`email_taken`).", body = crate::http::error::ErrorBody),
        crate::http::openapi::AuthErrors
    )
)]
pub async fn accept_invite(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: AcceptInviteRequest = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    problems.check("password", check_password(&req.password));
    let name = problems.check("name", normalize_name(&req.name));
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let (invite_id, token_sha256) =
        parse_invite_token(&req.invite_token).ok_or(ApiError::from(Refusal::InvalidInvite))?;
    let password_hash = hash_password(req.password).await?;
    let now = app.clock.now_millis();
    let user_id = UserId::random();
    let refresh = RefreshToken::new_family();
    // Meta fills in the org from the invitation.
    let session =
        RefreshFamily::new(refresh.family.clone(), user_id, OrgId(uuid::Uuid::nil()), refresh.sha256.clone(), now);
    let command = MetaCommand::AcceptInvite {
        invite_id,
        token_sha256,
        user_id,
        name: name.unwrap_or_default(),
        password_hash,
        session,
        now_ms: now,
    };
    match app.cluster.meta_change(&command).await? {
        MetaCommandResult::Session { user } => {
            session_response(&app, StatusCode::OK, &user, &refresh, Joined { user: MemberJson::from(&user) })
        }
        MetaCommandResult::Refused(r) => Err(r.into()),
        other => Err(ApiError::Internal(format!("unexpected meta answer to an invitation: {other:?}"))),
    }
}
