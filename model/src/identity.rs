//! Rules for what people type when they sign up, invite, and name things (docs/API.md,
//! "Sign-up, sign-in and sign-out"). Pure, so every router applies the same rules and they are
//! unit tested here.

use crate::ingest::FieldError;

pub const MIN_PASSWORD_CHARS: usize = 8;
/// Argon2 hashes any length, but a megabyte password is only a way to burn CPU.
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// RFC 5321 path limit.
pub const MAX_EMAIL_BYTES: usize = 254;
pub const MAX_NAME_CHARS: usize = 100;

/// Lower-cased, trimmed email, or why it is not one. ASCII only: internationalized addresses
/// need SMTPUTF8, which the invitation mailer does not promise.
pub fn normalize_email(raw: &str) -> Result<String, &'static str> {
    let email = raw.trim().to_ascii_lowercase();
    if email.is_empty() {
        return Err("must not be empty");
    }
    if email.len() > MAX_EMAIL_BYTES {
        return Err("must be at most 254 characters");
    }
    if !email.is_ascii() {
        return Err("must contain only ASCII characters");
    }
    let (local, domain) = email.rsplit_once('@').ok_or("must contain @")?;
    if local.is_empty() || local.len() > 64 {
        return Err("the part before @ must have 1 to 64 characters");
    }
    const SPECIAL: &[u8] = b"!#$%&'*+/=?^_`{|}~-";
    if !local.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || SPECIAL.contains(&b))
        || local.starts_with('.')
        || local.ends_with('.')
        || local.contains("..")
    {
        return Err("the part before @ is not a valid mailbox name");
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 || domain.len() > 253 {
        return Err("the domain must have at least two labels, like example.com");
    }
    for label in &labels {
        if label.is_empty()
            || label.len() > 63
            || label.starts_with('-')
            || label.ends_with('-')
            || !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err("the domain is not a valid host name");
        }
    }
    let tld = labels[labels.len() - 1];
    if tld.len() < 2 || !tld.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err("the domain is not a valid host name");
    }
    Ok(email)
}

pub fn check_password(password: &str) -> Result<(), &'static str> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err("must be at most 1024 bytes");
    }
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err("must have at least 8 characters");
    }
    Ok(())
}

/// Characters that change how surrounding text is displayed without being visible: bidi
/// overrides and isolates (used to disguise names), zero-width and other format characters.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFFB}' | '\u{E0000}'..='\u{E007F}')
}

/// A display name (person, organization, project, API key): trimmed, 1 to 100 characters, no
/// control or invisible formatting characters. Any script and emoji are fine.
pub fn normalize_name(raw: &str) -> Result<String, &'static str> {
    let name = raw.trim();
    if name.is_empty() {
        return Err("must not be empty");
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err("must be at most 100 characters");
    }
    if name.chars().any(|c| c.is_control()) {
        return Err("must not contain control characters");
    }
    if name.chars().any(invisible) {
        return Err("must not contain invisible or text-direction formatting characters");
    }
    Ok(name.to_owned())
}

/// Collects field problems of one request so the client learns all of them at once.
#[derive(Default)]
pub struct Problems(pub Vec<FieldError>);

impl Problems {
    pub fn check<T>(&mut self, field: &str, result: Result<T, &'static str>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(reason) => {
                self.0.push(FieldError { index: 0, field: field.to_owned(), reason: reason.to_owned() });
                None
            }
        }
    }

    pub fn into_result(self) -> Result<(), Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(normalize_email("  Ada.Lovelace+x@Example.COM ").unwrap(), "ada.lovelace+x@example.com");
        assert!(normalize_email("a@b.co").is_ok());
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a@localhost",
            "a@exa mple.com",
            "a b@example.com",
            ".a@example.com",
            "a..b@example.com",
            "a@-example.com",
            "a@example.c0m",
            "a@example..com",
            "é@example.com",
            "a@exämple.com",
            "a@b@example.com",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(normalize_email(&long).is_err());
        let huge = format!("a@{}.com", "b".repeat(300));
        assert!(normalize_email(&huge).is_err());
    }

    #[test]
    fn passwords() {
        assert!(check_password("1234567").is_err());
        assert!(check_password("12345678").is_ok());
        // Characters, not bytes: 8 emoji are 8 characters.
        assert!(check_password("🔒🔒🔒🔒🔒🔒🔒🔒").is_ok());
        assert!(check_password("ééé").is_err());
        assert!(check_password(&"x".repeat(1025)).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(normalize_name("  Acme GmbH ").unwrap(), "Acme GmbH");
        assert_eq!(normalize_name("Société 株式会社 🚀").unwrap(), "Société 株式会社 🚀");
        assert!(normalize_name("   ").is_err());
        assert!(normalize_name("a\u{0000}b").is_err());
        assert!(normalize_name("line\nbreak").is_err());
        assert!(normalize_name("evil\u{202E}gnp.exe").is_err());
        assert!(normalize_name("\u{200B}").is_err());
        assert!(normalize_name(&"名".repeat(100)).is_ok());
        assert!(normalize_name(&"名".repeat(101)).is_err());
    }

    #[test]
    fn problems_collect_every_field() {
        let mut p = Problems::default();
        assert!(p.check("email", normalize_email("nope")).is_none());
        assert!(p.check("password", check_password("short")).is_none());
        assert_eq!(p.check("name", normalize_name("Ada")), Some("Ada".to_owned()));
        let errors = p.into_result().unwrap_err();
        assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["email", "password"]);
    }
}
