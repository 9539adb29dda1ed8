//! List pagination (docs/API.md, "Lists and cursors"): `limit` (default 100, at most 1000) and
//! an opaque `cursor`.

use base64::Engine;
use serde_json::{json, Value};

use crate::http::error::ApiError;
use crate::identity::auth::url_pairs;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

#[derive(Debug, PartialEq)]
pub struct Page {
    pub limit: usize,
    /// Items with a sort key after this one.
    pub after: Option<String>,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

impl Page {
    pub fn from_query(query: Option<&str>) -> Result<Self, ApiError> {
        let mut page = Page { limit: DEFAULT_LIMIT, after: None };
        for (k, v) in query.map(url_pairs).into_iter().flatten() {
            match k.as_str() {
                "limit" => {
                    page.limit = v.parse().ok().filter(|l| (1..=MAX_LIMIT).contains(l)).ok_or_else(|| {
                        ApiError::BadRequest("invalid_limit", "limit must be an integer from 1 to 1000".into())
                    })?
                }
                "cursor" if !v.is_empty() => {
                    let bad = || ApiError::BadRequest("invalid_cursor", "cursor is not one this API returned".into());
                    let raw = b64().decode(v.as_bytes()).map_err(|_| bad())?;
                    page.after = Some(String::from_utf8(raw).map_err(|_| bad())?);
                }
                _ => {}
            }
        }
        Ok(page)
    }

    /// `{"items", "next_cursor"}` of `items` (sort key, JSON), which must be sorted by key.
    pub fn apply(&self, items: Vec<(String, Value)>) -> Value {
        let mut rest = items.into_iter().filter(|(k, _)| self.after.as_ref().is_none_or(|a| k > a)).peekable();
        let mut out = Vec::new();
        let mut last = None;
        while out.len() < self.limit {
            let Some((k, v)) = rest.next() else { break };
            out.push(v);
            last = Some(k);
        }
        let next = match (rest.peek(), last) {
            (Some(_), Some(k)) => Value::String(b64().encode(k)),
            _ => Value::Null,
        };
        json!({ "items": out, "next_cursor": next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_walk_every_item_once() {
        let items: Vec<(String, Value)> = (0..5).map(|i| (format!("k{i}"), json!(i))).collect();
        let mut seen = Vec::new();
        let mut query = "limit=2".to_owned();
        loop {
            let page = Page::from_query(Some(&query)).unwrap().apply(items.clone());
            seen.extend(page["items"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()));
            match page["next_cursor"].as_str() {
                Some(c) => query = format!("limit=2&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(seen, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn bad_limits_and_cursors_are_400() {
        for q in ["limit=0", "limit=1001", "limit=x", "cursor=a", "cursor=!!"] {
            assert!(matches!(Page::from_query(Some(q)), Err(ApiError::BadRequest(_, _))), "{q}");
        }
        assert_eq!(Page::from_query(None).unwrap(), Page { limit: 100, after: None });
    }
}
