//! Traces (docs/API.md, "Traces"). `GET /api/v1/traces/{trace_id}`: a trace lives on one
//! shard, found through its partition. `GET /api/v1/traces`: every shard answers its newest
//! `limit + 1` whole-trace summaries after the cursor; the router merges them by (start,
//! trace id) descending. The cursor is the last returned key, so pages never skip or repeat a
//! trace: a trace not returned sorts after the cursor and is still among its shard's next
//! `limit + 1`.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sextant_model::attributes;
use sextant_model::ingest::status_name;
use sextant_model::partition::group_of;
use sextant_model::query::{TraceKey, TraceList, TraceListPlan};
use sextant_model::row::{Span, TraceSummary};
use sextant_model::time::format_nanos;
use sextant_model::TraceId;

use super::params::{
    self, bad_cursor, cursor_time, decode_cursor, encode_cursor, invalid, list_of, millis, ms, Params,
};
use super::scatter::{scatter, Answer};
use crate::http::error::ApiError;
use crate::http::listing::Listed;
use crate::identity::auth::Session;
use crate::AppState;

/// A span as `GET /api/v1/traces/{trace_id}` shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SpanJson {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub service_name: String,
    pub operation: String,
    pub timestamp: String,
    pub duration_ms: f64,
    /// `ok`, `error` or `unset`.
    pub status: &'static str,
    pub attributes: Value,
}

impl From<&Span> for SpanJson {
    fn from(s: &Span) -> Self {
        let status = status_name(s.status);
        SpanJson {
            trace_id: s.trace_id.clone(),
            span_id: s.span_id.clone(),
            parent_span_id: (!s.parent_span_id.is_empty()).then(|| s.parent_span_id.clone()),
            service_name: s.service_name.clone(),
            operation: s.operation.clone(),
            timestamp: format_nanos(s.start_unix_nanos),
            duration_ms: s.duration_nanos as f64 / 1e6,
            status,
            attributes: attributes::to_json(&s.attributes),
        }
    }
}

/// `GET /api/v1/traces/{trace_id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Trace {
    pub trace_id: String,
    pub start_time: String,
    pub duration_ms: f64,
    pub services: BTreeSet<String>,
    /// By start time, then span id.
    pub spans: Vec<SpanJson>,
}

#[utoipa::path(
    get, path = "/api/v1/traces/{trace_id}", tag = "observability", summary = "A trace and its spans",
    params(("trace_id" = String, Path, description = "The trace id.")),
    responses((status = 200, description = "A trace and its spans.", body = Trace), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn get_trace(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(trace_id): Path<String>,
) -> Result<Json<Trace>, ApiError> {
    let trace_id = TraceId::parse(&trace_id).map_err(|_| ApiError::NotFound("trace not found".into()))?;
    let cache = app.meta()?;
    let group = group_of(&cache.partition_groups, &session.project_id, trace_id.as_str().as_bytes())
        .ok_or_else(|| ApiError::Unavailable("no partition table".into()))?;
    let mut spans = app.cluster.get_trace(group, &session.project_id, trace_id.as_str()).await?;
    if spans.is_empty() {
        return Err(ApiError::NotFound("trace not found".into()));
    }
    spans.sort_by(|a, b| a.start_unix_nanos.cmp(&b.start_unix_nanos).then_with(|| a.span_id.cmp(&b.span_id)));
    let start = spans.iter().map(|s| s.start_unix_nanos).min().unwrap_or_default();
    let end =
        spans.iter().map(|s| s.start_unix_nanos.saturating_add_unsigned(s.duration_nanos)).max().unwrap_or_default();
    Ok(Json(Trace {
        trace_id: trace_id.as_str().to_owned(),
        start_time: format_nanos(start),
        duration_ms: (end - start) as f64 / 1e6,
        services: spans.iter().map(|s| s.service_name.clone()).collect(),
        spans: spans.iter().map(SpanJson::from).collect(),
    }))
}

fn cursor_of(t: &TraceSummary) -> String {
    encode_cursor(&format!("{}:{}", t.start_unix_nanos, t.trace_id))
}

fn parse_cursor(params: &Params) -> Result<Option<TraceKey>, ApiError> {
    decode_cursor(params)?
        .map(|c| {
            let (start, id) = c.split_once(':').ok_or_else(bad_cursor)?;
            Ok(TraceKey { start_unix_nanos: cursor_time(start)?, trace_id: id.to_owned() })
        })
        .transpose()
}

/// A trace in `GET /api/v1/traces`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TraceSummaryJson {
    pub trace_id: String,
    pub root_service: String,
    pub root_operation: String,
    pub start_time: String,
    pub duration_ms: f64,
    pub span_count: u32,
    pub error_count: u32,
    pub services: Vec<String>,
    /// `error` when any span failed, else `ok`.
    pub status: &'static str,
}

impl From<&TraceSummary> for TraceSummaryJson {
    fn from(t: &TraceSummary) -> Self {
        TraceSummaryJson {
            trace_id: t.trace_id.clone(),
            root_service: t.root_service.clone(),
            root_operation: t.root_operation.clone(),
            start_time: format_nanos(t.start_unix_nanos),
            duration_ms: ms(t.end_unix_nanos.saturating_sub(t.start_unix_nanos) as f64 / 1e6),
            span_count: t.span_count,
            error_count: t.error_count,
            services: t.services.clone(),
            status: if t.error_count > 0 { "error" } else { "ok" },
        }
    }
}

/// The parameters of `GET /api/v1/traces`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(ignore)]
    #[serde(flatten)]
    pub params: Params,
    pub service: Option<String>,
    pub operation: Option<String>,
    /// `error`: only traces with a failed span.
    pub status: Option<String>,
    pub min_duration_ms: Option<String>,
}

#[utoipa::path(
    get, path = "/api/v1/traces", tag = "observability", summary = "Traces, newest first",
    params(crate::query::params::Params, crate::http::listing::Paging, ListQuery),
    responses((status = 200, description = "Traces, newest first.", body = crate::query::scatter::Answer<crate::http::listing::Listed<TraceSummaryJson>>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Answer<Listed<TraceSummaryJson>>>, ApiError> {
    let q: ListQuery = params::parse(raw.as_deref())?;
    let range = q.params.range(app.clock.now_nanos())?;
    let limit = q.params.limit()?;
    let errors_only = match q.status.as_deref() {
        None => false,
        Some("error") => true,
        Some(_) => return Err(invalid("status", "must be `error`")),
    };
    let plan = TraceListPlan {
        services: list_of("service", q.service.as_deref())?,
        operation: q.operation.unwrap_or_default(),
        errors_only,
        min_duration_nanos: millis("min_duration_ms", q.min_duration_ms.as_deref())?.unwrap_or(0),
        limit: limit as u32 + 1,
        before: parse_cursor(&q.params)?,
    };
    let mut gathered = scatter(&app, &session.project_id, range, q.params.allow_partial()?, plan).await?;
    let (page, more) = gathered.fold::<TraceList>().page(limit);
    let next_cursor = if more { page.last().map(cursor_of) } else { None };
    Ok(gathered.answer(Listed { items: page.iter().map(TraceSummaryJson::from).collect(), next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::query::{merge_all, trace_key as key};

    /// The shards' lists merged as `list` merges them.
    fn merge(lists: Vec<Vec<TraceSummary>>, limit: usize) -> (Vec<TraceSummary>, bool) {
        merge_all(lists.into_iter().map(TraceList)).page(limit)
    }

    fn t(id: &str, start: i64) -> TraceSummary {
        TraceSummary { trace_id: id.into(), start_unix_nanos: start, end_unix_nanos: start + 1, ..Default::default() }
    }

    /// What a shard answers: its newest `limit` after the cursor.
    fn shard_page(shard: &[TraceSummary], before: Option<&TraceKey>, limit: usize) -> Vec<TraceSummary> {
        let mut v: Vec<TraceSummary> = shard
            .iter()
            .filter(|t| before.is_none_or(|b| key(t) < (b.start_unix_nanos, b.trace_id.as_str())))
            .cloned()
            .collect();
        v.sort_by(|a, b| key(b).cmp(&key(a)));
        v.truncate(limit);
        v
    }

    #[test]
    fn the_parameters_of_the_list_are_read_by_the_contract() {
        let q: ListQuery =
            params::parse(Some("from=1000&limit=5&service=a,b&service=c&status=&operation=GET+%2Fx&other=1")).unwrap();
        assert_eq!(q.params.from.as_deref(), Some("1000"));
        assert_eq!(q.params.limit().unwrap(), 5);
        assert_eq!(list_of("service", q.service.as_deref()).unwrap(), ["a", "b", "c"]);
        assert_eq!((q.status, q.operation.as_deref()), (None, Some("GET /x")));
        assert!(params::parse::<ListQuery>(Some(&"q=x".repeat(3000))).is_err());
    }

    #[test]
    fn pages_across_shards_never_skip_or_repeat() {
        // Four shards, uneven, with equal start times across and within shards.
        let shards: Vec<Vec<TraceSummary>> =
            (0..4).map(|s| (0..(5 + s * 7)).map(|i| t(&format!("s{s}-{i}"), (i as i64 % 6) * 10)).collect()).collect();
        let total: usize = shards.iter().map(Vec::len).sum();
        for limit in [1, 2, 3, 7, 100] {
            let mut seen = Vec::new();
            let mut cursor: Option<TraceKey> = None;
            loop {
                let lists = shards.iter().map(|s| shard_page(s, cursor.as_ref(), limit + 1)).collect();
                let (page, more) = merge(lists, limit);
                seen.extend(page.iter().map(|t| (t.start_unix_nanos, t.trace_id.clone())));
                if !more {
                    break;
                }
                let last = page.last().unwrap();
                // Through the opaque cursor, as a client would send it back.
                let params = Params::parse(Some(&format!("cursor={}", cursor_of(last)))).unwrap();
                cursor = parse_cursor(&params).unwrap();
            }
            assert_eq!(seen.len(), total, "limit {limit}");
            let mut sorted = seen.clone();
            sorted.sort_by(|a, b| b.cmp(a));
            sorted.dedup();
            assert_eq!(seen, sorted, "limit {limit}: newest first, no repeats");
        }
    }
}
