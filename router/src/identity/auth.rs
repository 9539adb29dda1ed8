//! Credentials: project API keys and ingest tokens (hashed, constant-time compared), user
//! passwords (Argon2id) and access tokens (JWT).

use std::sync::{Arc, OnceLock};

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use base64::Engine;
use jsonwebtoken::{Algorithm as JwtAlg, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sextant_model::meta::{Credential, CredentialKind, Member, Role};
use sextant_model::{Clock, OrgId, ProjectId, UserId};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

use crate::cluster::MetaCache;
use crate::http::error::ApiError;
use crate::http::query_string;
use crate::identity::rate_limit::Class;
use crate::AppState;

pub const ISSUER: &str = "sextant";
pub const AUDIENCE: &str = "sextant-api";
pub const ACCESS_TOKEN_SECONDS: i64 = 15 * 60;
/// Seconds past `exp` a token is still accepted, for clocks that disagree a little.
pub const EXPIRY_LEEWAY_SECONDS: i64 = 5;

fn prefix(kind: CredentialKind) -> &'static str {
    match kind {
        CredentialKind::ApiKey => "sxk_",
        CredentialKind::IngestToken => "sxp_",
    }
}

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A new credential: the full secret (shown once) and the record stored in meta.
pub fn new_credential(kind: CredentialKind, project_id: ProjectId, name: &str, now_ms: i64) -> (String, Credential) {
    let mut id = [0u8; 8];
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut id);
    rand::thread_rng().fill_bytes(&mut secret);
    let id = hex::encode(id);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let token = format!("{}{id}_{secret}", prefix(kind));
    let record = Credential {
        id,
        kind,
        project_id,
        name: name.to_owned(),
        secret_sha256: sha256_hex(&secret),
        created_at_ms: now_ms,
        revoked: false,
        managed_by: None,
    };
    (token, record)
}

/// The credential presented, if valid, and the meta view it was found in. An id this router
/// does not know reloads the meta view first (rate-limited): the credential may have been made
/// through another router moments ago. Unknown ids and wrong secrets then take the same
/// comparison.
async fn verify_credential(
    app: &AppState,
    kind: CredentialKind,
    presented: &str,
) -> Result<(Credential, Arc<MetaCache>), ApiError> {
    const INVALID: ApiError = ApiError::Unauthorized("invalid credential");
    let rest = presented.strip_prefix(prefix(kind)).ok_or(INVALID)?;
    let (id, secret) = rest.split_once('_').ok_or(INVALID)?;
    let mut cache = app.meta()?;
    if !cache.credentials.contains_key(id) {
        app.cluster.reload_meta_for_unknown(cache.version).await?;
        cache = app.meta()?;
    }
    let record = cache.credentials.get(id).filter(|c| c.kind == kind && !c.revoked);
    let expected = record.map(|c| c.secret_sha256.as_bytes()).unwrap_or(&[0u8; 64]);
    let matches: bool = sha256_hex(secret).as_bytes().ct_eq(expected).into();
    match record {
        Some(c) if matches => Ok((c.clone(), cache.clone())),
        _ => Err(INVALID),
    }
}

/// What every request of a suspended org (Tenant resource with `suspended: true`) gets.
pub const SUSPENDED: ApiError = ApiError::Forbidden("org_suspended", "the organization is suspended");

/// A credential's bearer, admitted by its rate limit: the project it writes to.
pub async fn admit_credential(app: &AppState, kind: CredentialKind, presented: &str) -> Result<ProjectId, ApiError> {
    let (credential, cache) = verify_credential(app, kind, presented).await?;
    let class = match kind {
        CredentialKind::ApiKey => Class::Ingest,
        CredentialKind::IngestToken => Class::Analytics,
    };
    let project = cache.projects.get(&credential.project_id).ok_or(ApiError::Unauthorized("invalid credential"))?;
    if cache.suspended(&project.org_id) {
        return Err(SUSPENDED);
    }
    let now = app.clock.now_millis();
    let overrides = cache.project_rate_overrides(&credential.project_id, now);
    app.limits.check(class, &credential.id, &overrides, cache.live_routers(now))?;
    Ok(credential.project_id)
}

/// API key of an observability ingest request: `X-API-Key`, `Authorization: Bearer` or `api_key`.
pub async fn api_key_project(app: &AppState, headers: &HeaderMap, query: Option<&str>) -> Result<ProjectId, ApiError> {
    let from_header = headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let from_bearer = || {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|v| v.starts_with("sxk_"))
            .map(str::to_owned)
    };
    let from_query = || query_string::find(query, &["api_key"]);
    let key = from_header.or_else(from_bearer).or_else(from_query).ok_or(ApiError::Unauthorized("missing API key"))?;
    admit_credential(app, CredentialKind::ApiKey, key.trim()).await
}

// ------------------------------------------------------------------------------ passwords

/// OWASP's Argon2id recommendation: 19 MiB, 2 iterations, 1 lane.
fn argon2() -> Argon2<'static> {
    Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::new(19 * 1024, 2, 1, None).expect("valid params"))
}

/// At most this many hashes run at once, so a login flood cannot exhaust memory.
fn hashing_slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()) * 2))
}

pub async fn hash_password(password: String) -> Result<String, ApiError> {
    let _slot = hashing_slots().acquire().await.map_err(|e| ApiError::Internal(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        argon2()
            .hash_password(password.as_bytes(), &SaltString::generate(&mut OsRng))
            .map(|h| h.to_string())
            .map_err(|e| ApiError::Internal(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// Verifies against `hash`, or against a fixed dummy hash when there is no user, so both
/// cases cost the same.
pub async fn verify_password(password: String, hash: Option<String>) -> Result<bool, ApiError> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let _slot = hashing_slots().acquire().await.map_err(|e| ApiError::Internal(e.to_string()))?;
    let known = hash.is_some();
    tokio::task::spawn_blocking(move || {
        let dummy = DUMMY.get_or_init(|| {
            argon2().hash_password(b"not a password", &SaltString::generate(&mut OsRng)).unwrap().to_string()
        });
        let hash = hash.unwrap_or_else(|| dummy.clone());
        let ok = PasswordHash::new(&hash)
            .map(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
            .unwrap_or(false);
        ok && known
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))
}

// ------------------------------------------------------------------------------ access tokens

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: UserId,
    pub org: OrgId,
    pub role: Role,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub iss: String,
    pub aud: String,
    /// The sign-in (refresh token family) this token came from; signing out revokes it.
    pub sid: String,
}

pub struct Jwt {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    clock: Clock,
}

impl Jwt {
    pub fn new(secret: &[u8], clock: Clock) -> Self {
        let mut validation = Validation::new(JwtAlg::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        // Expiry is checked in `verify`, against our clock rather than the library's.
        validation.validate_exp = false;
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            clock,
        }
    }

    pub fn issue(&self, user: UserId, org: OrgId, role: Role, sid: &str) -> Result<String, ApiError> {
        let now = self.clock.now_secs();
        let claims = Claims {
            sub: user,
            org,
            role,
            iat: now,
            exp: now + ACCESS_TOKEN_SECONDS,
            jti: uuid::Uuid::new_v4().to_string(),
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
            sid: sid.to_owned(),
        };
        jsonwebtoken::encode(&Header::new(JwtAlg::HS256), &claims, &self.encoding)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    pub fn verify(&self, token: &str) -> Result<Claims, ApiError> {
        const INVALID: ApiError = ApiError::Unauthorized("invalid or expired access token");
        let claims =
            jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation).map_err(|_| INVALID)?.claims;
        if claims.exp < self.clock.now_secs().saturating_sub(EXPIRY_LEEWAY_SECONDS) {
            return Err(INVALID);
        }
        Ok(claims)
    }
}

/// A signed-in user and the project the request is about.
#[derive(Debug, Clone)]
pub struct Session {
    pub claims: Claims,
    /// The user as meta knows them now: role changes and removals apply to existing tokens.
    pub user: Member,
    pub project_id: ProjectId,
}

impl Session {
    pub fn require_org_manager(&self) -> Result<(), ApiError> {
        if self.user.role.manages_org() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("forbidden", "only owners and admins can do this"))
        }
    }

    pub fn require_owner(&self) -> Result<(), ApiError> {
        if self.user.role == Role::Owner {
            Ok(())
        } else {
            Err(ApiError::Forbidden("owner_only", "only the organization's owner can do this"))
        }
    }
}

/// Endpoints about the org rather than one project: they serve an org without projects.
fn org_scoped(path: &str) -> bool {
    path == "/projects" || path.starts_with("/api/org/")
}

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

impl FromRequestParts<Arc<AppState>> for Session {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        let token = bearer(&parts.headers).ok_or(ApiError::Unauthorized("missing bearer token"))?;
        let claims = app.jwt.verify(token)?;
        const REVOKED: ApiError = ApiError::Unauthorized("the session has ended; sign in again");
        let mut cache = app.meta()?;
        if cache.revoked_sessions.contains(&claims.sid) || cache.removed_users.contains(&claims.sub) {
            return Err(REVOKED);
        }
        if !cache.members.contains_key(&claims.sub) {
            // Signed up or joined through another router less than a refresh period ago: only
            // a token we signed gets here, so this cannot be used to make us reload at will.
            app.cluster.refresh_meta().await?;
            cache = app.meta()?;
        }
        let user = cache.members.get(&claims.sub).cloned().ok_or(REVOKED)?;
        if user.org_id != claims.org {
            return Err(REVOKED);
        }
        let now = app.clock.now_millis();
        let overrides = cache.rate_overrides(&user.org_id, None, now);
        app.limits.check(Class::Api, &user.id.to_string(), &overrides, cache.live_routers(now))?;
        let org = cache.orgs.get(&claims.org).ok_or(REVOKED)?;
        if cache.suspended(&org.id) {
            return Err(SUSPENDED);
        }
        let requested = parts
            .headers
            .get("x-project-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| query_string::find(parts.uri.query(), &["project_id"]));
        let project_id = match requested {
            // An org made by a Tenant has no project before its first Project resource, and
            // its default may have been deleted.
            // its default may have been deleted. Org-level endpoints do not need one.
            None if !cache.projects.contains_key(&org.default_project) && !org_scoped(parts.uri.path()) => {
                return Err(ApiError::NotFound("project not found: the organization has no project".into()))
            }
            None => org.default_project,
            Some(p) => {
                // A foreign or unknown project is indistinguishable from a missing one.
                let id: ProjectId = p.trim().parse().map_err(|_| ApiError::NotFound("project not found".into()))?;
                match cache.projects.get(&id) {
                    Some(project) if project.org_id == claims.org => id,
                    _ => return Err(ApiError::NotFound("project not found".into())),
                }
            }
        };
        Ok(Session { claims, user, project_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwt_round_trip_and_rejections() {
        let jwt = Jwt::new(b"0123456789abcdef0123456789abcdef", Clock::system());
        let token = jwt.issue(UserId::random(), OrgId::random(), Role::Owner, "sid").unwrap();
        assert!(jwt.verify(&token).is_ok());
        let other = Jwt::new(b"another secret another secret!!!", Clock::system());
        assert!(other.verify(&token).is_err(), "foreign signature accepted");
        // alg: none with the same claims.
        let payload = token.split('.').nth(1).unwrap();
        let none = format!(
            "{}.{payload}.",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#)
        );
        assert!(jwt.verify(&none).is_err(), "alg none accepted");
    }

    #[test]
    fn an_access_token_expires_at_its_exp_without_waiting() {
        // 2030: under the system clock the token would still be valid.
        let manual = sextant_model::ManualClock::at_millis(1_900_000_000_000);
        let jwt = Jwt::new(b"0123456789abcdef0123456789abcdef", manual.clock());
        let token = jwt.issue(UserId::random(), OrgId::random(), Role::Member, "sid").unwrap();
        let claims = jwt.verify(&token).unwrap();
        assert_eq!((claims.iat, claims.exp), (1_900_000_000, 1_900_000_000 + ACCESS_TOKEN_SECONDS));
        manual.advance(std::time::Duration::from_secs((ACCESS_TOKEN_SECONDS + EXPIRY_LEEWAY_SECONDS) as u64));
        assert!(jwt.verify(&token).is_ok(), "still within the leeway");
        manual.advance(std::time::Duration::from_secs(1));
        assert!(matches!(jwt.verify(&token), Err(ApiError::Unauthorized(_))), "expired token accepted");
    }

    #[tokio::test]
    async fn password_hash_and_verify() {
        let h = hash_password("correct horse".into()).await.unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse".into(), Some(h.clone())).await.unwrap());
        assert!(!verify_password("wrong".into(), Some(h)).await.unwrap());
        assert!(!verify_password("anything".into(), None).await.unwrap());
    }
}
