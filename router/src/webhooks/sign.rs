//! Standard Webhooks signing (docs/API.md, "Webhooks"): the secret is `whsec_` + base64 of the
//! key; each signature is `v1,` + base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}").

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sextant_model::webhook::SigningSecret;
use sha2::Sha256;

pub const PREFIX: &str = "whsec_";
/// Key lengths the spec allows for a symmetric secret.
pub const MIN_KEY_BYTES: usize = 24;
pub const MAX_KEY_BYTES: usize = 64;
/// Bytes of key a generated secret has.
const GENERATED_KEY_BYTES: usize = 32;

/// A new random secret.
pub fn generate_secret() -> String {
    let mut key = [0u8; GENERATED_KEY_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!("{PREFIX}{}", STANDARD.encode(key))
}

/// The key of a `whsec_` secret, if it is one the spec allows.
pub fn key_of(secret: &str) -> Option<Vec<u8>> {
    let key = STANDARD.decode(secret.strip_prefix(PREFIX)?).ok()?;
    (MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()).then_some(key)
}

/// One `v1,…` signature of `body` sent as message `id` at `timestamp` (Unix seconds).
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = key_of(secret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

/// The `webhook-signature` header: one signature per secret, space-separated (two during a
/// rotation's overlap, so a receiver that knows either verifies).
pub fn header(secrets: &[SigningSecret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().filter_map(|s| signature(&s.0, id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks reference libraries.
    #[test]
    fn signs_the_specifications_example() {
        let sig = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    }

    #[test]
    fn generated_secrets_are_valid_and_distinct() {
        let (a, b) = (generate_secret(), generate_secret());
        assert_ne!(a, b);
        assert_eq!(key_of(&a).map(|k| k.len()), Some(GENERATED_KEY_BYTES));
    }

    #[test]
    fn secrets_must_be_prefixed_base64_of_a_key_the_spec_allows() {
        assert!(key_of("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_none(), "no prefix");
        assert!(key_of("whsec_not base64!").is_none());
        assert!(key_of(&format!("whsec_{}", STANDARD.encode([0u8; 8]))).is_none(), "too short");
        assert!(key_of(&format!("whsec_{}", STANDARD.encode([0u8; 65]))).is_none(), "too long");
    }

    #[test]
    fn a_rotation_sends_one_signature_per_secret() {
        let (a, b) = (generate_secret(), generate_secret());
        let h = header(&[SigningSecret(a.clone()), SigningSecret(b.clone())], "msg_1", 5, b"{}");
        let parts: Vec<&str> = h.split(' ').collect();
        assert_eq!(parts, [signature(&a, "msg_1", 5, b"{}").unwrap(), signature(&b, "msg_1", 5, b"{}").unwrap()]);
    }
}
