//! Members of an organization and invitations to join it (docs/API.md, "Members and
//! invitations").

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sextant_model::identity::{normalize_email, Problems};
use sextant_model::meta::{Invite, MetaCommand, MetaQuery, OrgMembers, Role, INVITE_TTL_MS};
use sextant_model::UserId;
use sha2::{Digest, Sha256};

use crate::http::error::ApiError;
use crate::http::listing::{Listed, Page};
use crate::identity::account::{time_json, MemberJson, MAX_AUTH_BODY};
use crate::identity::auth::Session;
use crate::AppState;

const INVITE_PREFIX: &str = "sxi_";

/// A new invitation token: `sxi_<id>_<secret>`, and the id and secret hash meta keeps.
pub fn new_invite_token() -> (String, String, String) {
    let mut id = [0u8; 8];
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut id);
    rand::thread_rng().fill_bytes(&mut secret);
    let id = hex::encode(id);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let sha = hex::encode(Sha256::digest(secret.as_bytes()));
    (format!("{INVITE_PREFIX}{id}_{secret}"), id, sha)
}

/// The invitation id and secret hash of a presented token.
pub fn parse_invite_token(token: &str) -> Option<(String, String)> {
    let (id, secret) = token.trim().strip_prefix(INVITE_PREFIX)?.split_once('_')?;
    let ok = id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) && secret.len() == 43;
    ok.then(|| (id.to_owned(), hex::encode(Sha256::digest(secret.as_bytes()))))
}

/// A pending invitation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InviteJson {
    pub id: String,
    pub email: String,
    pub role: Role,
    /// Always `invited`.
    pub status: &'static str,
    pub created_at: String,
    pub expires_at: String,
}

impl From<&Invite> for InviteJson {
    fn from(i: &Invite) -> Self {
        InviteJson {
            id: i.id.clone(),
            email: i.email.clone(),
            role: i.role,
            status: "invited",
            created_at: time_json(i.created_at_ms),
            expires_at: time_json(i.expires_at_ms),
        }
    }
}

/// A new invitation, with its token: shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NewInvite {
    #[serde(flatten)]
    pub invite: InviteJson,
    pub invite_token: String,
}

/// A user of the org (`status: active`), or a pending invitation (`status: invited`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum OrgMember {
    Active {
        #[serde(flatten)]
        member: MemberJson,
        /// Always `active`.
        status: &'static str,
    },
    Invited(InviteJson),
}

/// Members first, then pending invitations; each page sorted by id.
#[utoipa::path(
    get, path = "/api/org/members", tag = "accounts", summary = "Members and pending invitations",
    responses((status = 200, description = "The organization's members and pending invitations.", body = Listed<OrgMember>), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(query): RawQuery,
) -> Result<Json<Listed<OrgMember>>, ApiError> {
    session.require_org_manager()?;
    let page = Page::from_query(query.as_deref())?;
    let all: OrgMembers = app.cluster.meta_read(&MetaQuery::OrgMembers { org_id: session.user.org_id }).await?;
    let now = app.clock.now_millis();
    let mut items: Vec<(String, OrgMember)> = all
        .members
        .iter()
        .map(|m| (m.id.to_string(), OrgMember::Active { member: m.into(), status: "active" }))
        .chain(
            all.invites.iter().filter(|i| i.expires_at_ms > now).map(|i| (i.id.clone(), OrgMember::Invited(i.into()))),
        )
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Json(page.apply(items)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct InviteRequest {
    email: String,
    role: Role,
}

#[utoipa::path(
    post, path = "/api/org/members", tag = "accounts", summary = "Invite a member (owner or admin)",
    request_body(content = InviteRequest, example = json!({"email": "grace@example.com", "role": "member"})),
    responses(
        (status = 201, description = "Invited; `invite_token` is shown once.", body = NewInvite),
        (status = 409, description = "Already a member, or the limit is reached.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn invite(
    State(app): State<Arc<AppState>>,
    session: Session,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    session.require_org_manager()?;
    let req: InviteRequest = crate::http::body::json(&headers, body, MAX_AUTH_BODY)?;
    let mut problems = Problems::default();
    let email = problems.check("email", normalize_email(&req.email));
    let role = problems.check(
        "role",
        match (req.role, session.user.role) {
            (Role::Owner, _) => Err("an organization has one owner; invite as admin or member"),
            (Role::Admin, Role::Admin | Role::Owner) | (Role::Member, _) => Ok(req.role),
            (Role::Admin, Role::Member) => Err("only owners and admins can invite admins"),
        },
    );
    problems.into_result().map_err(ApiError::invalid_fields)?;
    let (token, id, token_sha256) = new_invite_token();
    let now = app.clock.now_millis();
    let invite = Invite {
        id,
        org_id: session.user.org_id,
        email: email.unwrap_or_default(),
        role: role.unwrap_or(Role::Member),
        token_sha256,
        invited_by: session.user.id,
        created_at_ms: now,
        expires_at_ms: now + INVITE_TTL_MS,
    };
    // Shown once; sending it by e-mail needs SMTP, which is not configured here.
    let body = NewInvite { invite: InviteJson::from(&invite), invite_token: token };
    crate::http::error::expect_done(app.cluster.meta_change(&MetaCommand::Invite { invite }).await?, "an invitation")?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Removes a member (by user id) or withdraws a pending invitation (by invitation id).
#[utoipa::path(
    delete, path = "/api/org/members/{user_id}", tag = "accounts", summary = "Remove a member and end their sessions",
    params(("user_id" = String, Path, description = "The member's id (or a pending invitation's).")),
    responses((status = 204, description = "Removed."), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn remove(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    session.require_org_manager()?;
    let org_id = session.user.org_id;
    // Owners are protected by meta, which also makes a foreign or unknown id a 404.
    let command = if let Ok(user_id) = id.parse::<UserId>() {
        MetaCommand::RemoveMember { org_id, user_id, now_ms: app.clock.now_millis() }
    } else if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        MetaCommand::RevokeInvite { org_id, invite_id: id }
    } else {
        return Err(ApiError::NotFound("member not found".into()));
    };
    crate::http::error::expect_done(app.cluster.meta_change(&command).await?, "a removal")?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_invitations_list_with_their_status() {
        let member = sextant_model::meta::Member {
            id: UserId::random(),
            org_id: sextant_model::OrgId::random(),
            email: "a@example.com".into(),
            name: "A".into(),
            role: Role::Admin,
            created_at_ms: 0,
        };
        let v = serde_json::to_value(OrgMember::Active { member: (&member).into(), status: "active" }).unwrap();
        assert_eq!(
            (v["email"].as_str(), v["status"].as_str(), v["role"].as_str()),
            (Some("a@example.com"), Some("active"), Some("admin"))
        );
        assert_eq!(v["created_at"], "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn invite_tokens_round_trip() {
        let (token, id, sha) = new_invite_token();
        assert!(token.starts_with("sxi_"));
        assert_eq!(parse_invite_token(&token), Some((id, sha)));
        assert_eq!(parse_invite_token("sxi_nothing"), None);
        assert_eq!(parse_invite_token(&token.replace("sxi_", "sxk_")), None);
    }
}
