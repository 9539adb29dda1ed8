//! `GET /api/v1/logs/search` (docs/API.md, "Log search" and "Log search syntax"): `q` is parsed
//! here (a malformed query is a 400 before any shard is asked) and evaluated by each shard with
//! the same parser, its token index pruning row groups. Shards answer their newest `limit + 1`
//! lines after the cursor; the router merges by the lines' total key (time, shard, content
//! hash, rank among identical lines), so pages never skip or repeat a line.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sextant_model::attributes;
use sextant_model::ingest::{level_name, parse_level};
use sextant_model::query::{KeyedLog, LogKey, LogList, LogSearchPlan};
use sextant_model::text::LogQuery;
use sextant_model::time::format_nanos;

use super::params::{self, bad_cursor, cursor_time, decode_cursor, encode_cursor, invalid, list_of, Params};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::http::listing::Listed;
use crate::identity::auth::Session;
use crate::AppState;

fn cursor_of(k: &LogKey) -> String {
    encode_cursor(&format!("{}:{}:{:x}:{}", k.unix_nanos, k.group, k.content_hash, k.duplicate))
}

fn parse_cursor(params: &Params) -> Result<Option<LogKey>, ApiError> {
    decode_cursor(params)?
        .map(|c| {
            let parts: Vec<&str> = c.split(':').collect();
            let [t, g, h, d] = parts.as_slice() else { return Err(bad_cursor()) };
            Ok(LogKey {
                unix_nanos: cursor_time(t)?,
                group: g.parse().map_err(|_| bad_cursor())?,
                content_hash: u64::from_str_radix(h, 16).map_err(|_| bad_cursor())?,
                duplicate: d.parse().map_err(|_| bad_cursor())?,
            })
        })
        .transpose()
}

/// A line in `GET /api/v1/logs/search`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogLine {
    pub timestamp: String,
    pub level: &'static str,
    pub service: String,
    pub message: String,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    pub attributes: Value,
}

fn log_line(l: KeyedLog) -> LogLine {
    let r = l.log;
    let opt = |s: String| (!s.is_empty()).then_some(s);
    LogLine {
        timestamp: format_nanos(r.unix_nanos),
        level: level_name(r.level),
        attributes: attributes::to_json(&r.attributes),
        service: r.service,
        message: r.message,
        trace_id: opt(r.trace_id),
        span_id: opt(r.span_id),
    }
}

/// The parameters of `GET /api/v1/logs/search`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    /// The search (docs/API.md, "Log search syntax").
    pub q: Option<String>,
    pub level: Option<String>,
    pub service: Option<String>,
}

#[utoipa::path(
    get, path = "/api/v1/logs/search", tag = "observability", summary = "Log lines matching a search, newest first",
    params(crate::query::params::Params, crate::http::listing::Paging, SearchQuery),
    responses((status = 200, description = "Log lines matching a search, newest first.", body = crate::query::scatter::Answer<crate::http::listing::Listed<LogLine>>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn search(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Listed<LogLine>>>, ApiError> {
    let query: SearchQuery = params::parse(raw.as_deref())?;
    let params = &query.params;
    let range = params.range(app.clock.now_nanos())?;
    let limit = params.limit()?;
    let q = query.q.unwrap_or_default();
    LogQuery::parse(&q).map_err(|e| ApiError::BadRequest("invalid_query", format!("q: {e}")))?;
    let mut levels = Vec::new();
    for l in list_of("level", query.level.as_deref())? {
        levels.push(
            parse_level(&l).ok_or_else(|| invalid("level", "must list TRACE, DEBUG, INFO, WARN, ERROR or FATAL"))?,
        );
    }
    let plan = LogSearchPlan {
        services: list_of("service", query.service.as_deref())?,
        levels,
        query: q,
        limit: limit as u32 + 1,
        before: parse_cursor(params)?,
    };
    let mut gathered = scatter(&app, &session.project_id, range, params.allow_partial()?, plan).await?;
    let (page, more) = gathered.fold::<LogList>().page(limit);
    let next_cursor = if more { page.last().map(|l| cursor_of(&l.key)) } else { None };
    Ok(gathered.answer(Listed { items: page.into_iter().map(log_line).collect(), next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::query::merge_all;

    fn order(k: &LogKey) -> (i64, u64, u64, std::cmp::Reverse<u32>) {
        k.order()
    }

    fn key_of(l: &KeyedLog) -> LogKey {
        l.key
    }

    /// The shards' lists merged as `search` merges them.
    fn merge(lists: Vec<Vec<KeyedLog>>, limit: usize) -> (Vec<KeyedLog>, bool) {
        merge_all(lists.into_iter().map(LogList)).page(limit)
    }

    fn keyed(t: i64, group: u64, hash: u64, duplicate: u32) -> KeyedLog {
        KeyedLog { key: LogKey { unix_nanos: t, group, content_hash: hash, duplicate }, log: Default::default() }
    }

    #[test]
    fn pages_across_shards_never_skip_or_repeat_identical_lines() {
        // Per shard, in the order a shard answers: identical lines share time and hash.
        let shards: Vec<Vec<KeyedLog>> = (1..=4u64)
            .map(|g| {
                let mut v: Vec<KeyedLog> = (0..4i64)
                    .flat_map(|t| (0..2u64).map(move |h| (t, h)))
                    .flat_map(|(t, h)| (0..((t as u32 + h as u32 + g as u32) % 3 + 1)).map(move |d| keyed(t, g, h, d)))
                    .collect();
                v.sort_by_key(|l| std::cmp::Reverse(order(&key_of(l))));
                v
            })
            .collect();
        let total: usize = shards.iter().map(Vec::len).sum();
        for limit in [1, 2, 5, 1000] {
            let mut seen = Vec::new();
            let mut cursor: Option<LogKey> = None;
            loop {
                let lists = shards
                    .iter()
                    .map(|s| {
                        s.iter()
                            .filter(|l| cursor.as_ref().is_none_or(|c| order(&key_of(l)) < order(c)))
                            .take(limit + 1)
                            .cloned()
                            .collect()
                    })
                    .collect();
                let (page, more) = merge(lists, limit);
                seen.extend(page.iter().map(key_of));
                if !more {
                    break;
                }
                let params =
                    Params::parse(Some(&format!("cursor={}", cursor_of(&key_of(page.last().unwrap()))))).unwrap();
                cursor = parse_cursor(&params).unwrap();
            }
            assert_eq!(seen.len(), total, "limit {limit}");
            let mut unique = seen.clone();
            unique.dedup();
            assert_eq!(unique.len(), total, "limit {limit}: no repeats");
        }
    }
}
