//! Query strings (docs/API.md, "Query strings"): `application/x-www-form-urlencoded`, decoded
//! by serde_urlencoded and read under the contract's rules. An empty value is no value; when
//! a parameter is repeated, its last non-empty value counts, except for list parameters
//! (`service`, `level`, `event`), whose values are joined with commas; unknown parameters
//! are ignored. Endpoints declare their parameters as a `Deserialize` struct of optional
//! strings and validate them in their own order, so each 400 names the parameter at fault.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::http::error::ApiError;

/// Parameters that take comma-separated values and repeated keys alike.
pub const LIST_PARAMS: [&str; 3] = ["service", "level", "event"];

/// Every `(key, value)` pair in order: `+` is a space, `%XX` an escape; a malformed escape is
/// kept as written and bytes that are not UTF-8 become U+FFFD (as browsers decode forms).
fn pairs(raw: &str) -> Vec<(String, String)> {
    // Pairs of strings cannot fail to deserialize: every key and value is text.
    serde_urlencoded::from_str(raw).unwrap_or_default()
}

/// One value per parameter, by the rules above.
fn values(raw: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in pairs(raw) {
        if v.is_empty() {
            continue;
        }
        match out.get_mut(&k) {
            Some(joined) if LIST_PARAMS.contains(&k.as_str()) => {
                joined.push(',');
                joined.push_str(&v);
            }
            _ => {
                out.insert(k, v);
            }
        }
    }
    out
}

/// The parameters of `raw` that `T` declares, one value each by the rules above. `T`'s fields
/// are meant to be text (`Option<String>`), validated by the endpoint in its order; a field
/// that does not deserialize is a 400 naming it.
pub fn parse<T: DeserializeOwned>(raw: Option<&str>) -> Result<T, ApiError> {
    let values = values(raw.unwrap_or_default());
    // Encoded again, so that serde_urlencoded's deserializer reads the values as it reads any
    // form (options, numbers and enums from text).
    let normalized = serde_urlencoded::to_string(&values).map_err(|e| ApiError::Internal(e.to_string()))?;
    let Named(parsed) = serde_urlencoded::from_str(&normalized)
        .map_err(|e| ApiError::BadRequest("invalid_parameter", e.to_string()))?;
    Ok(parsed)
}

/// `T`, whose deserialization errors name the parameter.
struct Named<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_path_to_error::deserialize(deserializer)
            .map(Named)
            .map_err(|e| D::Error::custom(format!("query parameter `{}` {}", e.path(), e.inner())))
    }
}

/// The value of the first of `keys` that has one (a credential sent as a parameter).
pub fn find(raw: Option<&str>, keys: &[&str]) -> Option<String> {
    let mut values = values(raw?);
    keys.iter().find_map(|k| values.remove(*k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Q {
        q: Option<String>,
        service: Option<String>,
        to: Option<String>,
    }

    #[test]
    fn values_follow_the_contract() {
        let q: Q = parse(Some("q=a%2Bb+c&to=1&to=&to=2&unknown=x&service=a,b&service=c&service=")).unwrap();
        assert_eq!(q, Q { q: Some("a+b c".into()), service: Some("a,b,c".into()), to: Some("2".into()) });
        assert_eq!(parse::<Q>(None).unwrap(), Q::default());
        assert_eq!(parse::<Q>(Some("q=&to")).unwrap(), Q::default(), "an empty value is no value");
        // Escapes that are not ones are kept as written.
        assert_eq!(
            parse::<Q>(Some("q=100%&to=%zz")).unwrap(),
            Q { q: Some("100%".into()), to: Some("%zz".into()), ..Q::default() }
        );
        assert_eq!(find(Some("token=&api_key=k1&api_key=k2"), &["token", "api_key"]).as_deref(), Some("k2"));
        assert_eq!(find(Some("token=t&api_key=k"), &["token", "api_key"]).as_deref(), Some("t"));
        assert_eq!(find(Some("x=1"), &["token"]), None);
    }

    #[test]
    fn a_field_that_does_not_parse_is_a_400_naming_it() {
        #[derive(Debug, Deserialize)]
        struct Typed {
            n: Option<u32>,
        }
        assert_eq!(parse::<Typed>(Some("n=7")).unwrap().n, Some(7));
        let err = parse::<Typed>(Some("n=x")).unwrap_err();
        assert!(matches!(&err, ApiError::BadRequest("invalid_parameter", m) if m.contains("`n`")), "{err:?}");
    }
}
