//! Lists (docs/API.md, "Lists and cursors"): `limit` (default 100, at most 1000) and an opaque
//! `cursor`, which is URL-safe base64 of the last returned item's sort key.

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::http::error::ApiError;
use crate::http::query_string;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// A cursor for the item whose sort key is `key`.
pub fn encode_cursor(key: &str) -> String {
    b64().encode(key)
}

pub fn bad_cursor() -> ApiError {
    ApiError::BadRequest("invalid_cursor", "cursor is not one this API returned".into())
}

/// `limit` and `cursor` as sent, checked when asked for.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Paging {
    /// How many items (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl Paging {
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.limit.as_deref() {
            None => Ok(DEFAULT_LIMIT),
            Some(v) => v.parse().ok().filter(|l| (1..=MAX_LIMIT).contains(l)).ok_or_else(|| {
                ApiError::BadRequest("invalid_limit", format!("limit must be an integer from 1 to {MAX_LIMIT}"))
            }),
        }
    }

    /// The sort key the cursor holds: the next page starts after it.
    pub fn after(&self) -> Result<Option<String>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| b64().decode(c.as_bytes()).ok().and_then(|raw| String::from_utf8(raw).ok()).ok_or_else(bad_cursor))
            .transpose()
    }
}

/// `{"items", "next_cursor"}`: a page of a list; `next_cursor` is null on the last page.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Listed<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// A page of a list the router holds whole (metadata: projects, members, keys, cohorts).
#[derive(Debug, PartialEq)]
pub struct Page {
    pub limit: usize,
    /// Items with a sort key after this one.
    pub after: Option<String>,
}

impl Page {
    pub fn from_query(query: Option<&str>) -> Result<Self, ApiError> {
        Self::of(&query_string::parse(query)?)
    }

    pub fn of(paging: &Paging) -> Result<Self, ApiError> {
        Ok(Page { limit: paging.limit()?, after: paging.after()? })
    }

    /// The page of `items` (sort key, item), which must be sorted by key.
    pub fn apply<T>(&self, items: Vec<(String, T)>) -> Listed<T> {
        let mut rest = items.into_iter().filter(|(k, _)| self.after.as_ref().is_none_or(|a| k > a)).peekable();
        let mut out = Vec::new();
        let mut last = None;
        while out.len() < self.limit {
            let Some((k, v)) = rest.next() else { break };
            out.push(v);
            last = Some(k);
        }
        let next_cursor = match (rest.peek(), last) {
            (Some(_), Some(k)) => Some(encode_cursor(&k)),
            _ => None,
        };
        Listed { items: out, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_walk_every_item_once() {
        let items: Vec<(String, i64)> = (0..5).map(|i| (format!("k{i}"), i)).collect();
        let mut seen = Vec::new();
        let mut query = "limit=2".to_owned();
        loop {
            let page = Page::from_query(Some(&query)).unwrap().apply(items.clone());
            seen.extend(page.items);
            match page.next_cursor {
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
