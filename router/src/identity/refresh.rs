//! Refresh tokens (docs/API.md, "Refresh-token rotation and its 10 s grace") and the cookie
//! that carries them. A token is `<family id>.<256-bit secret>`: the family id finds the
//! sign-in in meta, which keeps only the SHA-256 of the secret.

use axum::http::{header, HeaderMap, HeaderValue};
use base64::Engine;
use rand::RngCore;
use sextant_model::meta::REFRESH_TTL_MS;
use sha2::{Digest, Sha256};

pub const COOKIE: &str = "sextant_refresh";

/// A refresh token as handed to the client, and what meta stores of it.
pub struct RefreshToken {
    pub family: String,
    pub value: String,
    pub sha256: String,
}

fn secret_sha256(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl RefreshToken {
    /// A token of a new family.
    pub fn new_family() -> Self {
        let mut id = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut id);
        Self::next(&hex::encode(id))
    }

    /// The next token of `family`.
    pub fn next(family: &str) -> Self {
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut secret);
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        Self { family: family.to_owned(), value: format!("{family}.{secret}"), sha256: secret_sha256(&secret) }
    }
}

/// A presented token: its family and the hash of its secret. `None` when it is not shaped
/// like one of ours.
pub fn parse(value: &str) -> Option<(String, String)> {
    let (family, secret) = value.split_once('.')?;
    let well_formed = family.len() == 32
        && family.bytes().all(|b| b.is_ascii_hexdigit())
        && secret.len() == 43
        && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then(|| (family.to_owned(), secret_sha256(secret)))
}

/// The value of cookie `name`, if the request has it.
pub fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// `Set-Cookie` for a new refresh token. `Secure` is left out only when the router serves plain
/// HTTP to a browser on the same machine (dev mode), where a browser would drop the cookie.
pub fn set_cookie(value: &str, secure: bool) -> HeaderValue {
    let max_age = REFRESH_TTL_MS / 1000;
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Max-Age={max_age}; Path=/auth; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("token characters are cookie-safe")
}

pub fn clear_cookie(secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}=; Max-Age=0; Path=/auth; HttpOnly; SameSite=Strict{secure}"))
        .expect("static cookie")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_back_to_their_family_and_hash() {
        let t = RefreshToken::new_family();
        assert_eq!(parse(&t.value), Some((t.family.clone(), t.sha256.clone())));
        let n = RefreshToken::next(&t.family);
        assert_eq!(n.family, t.family);
        assert_ne!(n.sha256, t.sha256);
        // The stored hash is not the secret.
        assert!(!t.value.contains(&t.sha256));
        for bad in ["", "abc", "x.y", &format!("{}.{}", t.family, "short"), &t.value.replace('.', "")] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cookie_attributes_and_reading() {
        let c = set_cookie("fam.secret", true);
        let c = c.to_str().unwrap();
        for attr in ["sextant_refresh=fam.secret", "Path=/auth", "HttpOnly", "SameSite=Strict", "Secure"] {
            assert!(c.contains(attr), "{c} lacks {attr}");
        }
        assert!(!set_cookie("v", false).to_str().unwrap().contains("Secure"));
        assert!(clear_cookie(false).to_str().unwrap().contains("Max-Age=0"));
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; sextant_refresh=tok.en; b=2"));
        assert_eq!(read_cookie(&headers, COOKIE), Some("tok.en"));
        assert_eq!(read_cookie(&headers, "missing"), None);
    }
}
