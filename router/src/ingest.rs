//! Observability ingest (DESIGN A3): authenticate -> read body -> validate -> partition ->
//! replicate every shard's sub-batch -> answer only when all of them are committed.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use bytes::Bytes;
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sextant_model::batch::Capped;
use sextant_model::ingest::{self, FieldError, MAX_BATCH_OBJECTS, MAX_OBSERVABILITY_BODY};
use sextant_model::partition::partition_of;
use sextant_model::ProjectId;
use sextant_proto::{write_request, HostMetric, LogRecord, ShardBatch, Span};

use crate::auth::api_key_project;
use crate::cluster::{Cluster, GroupId};
use crate::error::ApiError;
use crate::AppState;

#[derive(Serialize)]
pub struct Accepted {
    pub status: &'static str,
    pub accepted: usize,
}

/// Where rows of a kind go (DESIGN B2) and how they join a shard's sub-batch.
pub(crate) trait Placement {
    type Row;
    /// The partition key; `None` spreads the row randomly.
    fn key(row: &Self::Row) -> Option<&[u8]>;
    fn push(batch: &mut ShardBatch, row: Self::Row);
}

/// One kind of observability object: its request body and validation.
trait Kind: Placement<Row: Send + 'static> {
    const NAME: &'static str;
    type Body: DeserializeOwned;
    type Json;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS>;
    fn validate(index: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<Self::Row>;
}

struct Spans;
impl Placement for Spans {
    type Row = Span;
    fn key(row: &Span) -> Option<&[u8]> {
        Some(row.trace_id.as_bytes())
    }
    fn push(batch: &mut ShardBatch, row: Span) {
        batch.spans.push(row)
    }
}
impl Kind for Spans {
    const NAME: &'static str = "spans";
    type Body = ingest::SpansBody;
    type Json = ingest::SpanJson;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.spans
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<Span> {
        ingest::validate_span(i, item, errors)
    }
}

struct Logs;
impl Placement for Logs {
    type Row = LogRecord;
    fn key(row: &LogRecord) -> Option<&[u8]> {
        (!row.trace_id.is_empty()).then_some(row.trace_id.as_bytes())
    }
    fn push(batch: &mut ShardBatch, row: LogRecord) {
        batch.logs.push(row)
    }
}
impl Kind for Logs {
    const NAME: &'static str = "logs";
    type Body = ingest::LogsBody;
    type Json = ingest::LogJson;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.logs
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<LogRecord> {
        ingest::validate_log(i, item, errors)
    }
}

struct HostMetrics;
impl Placement for HostMetrics {
    type Row = HostMetric;
    fn key(row: &HostMetric) -> Option<&[u8]> {
        Some(row.hostname.as_bytes())
    }
    fn push(batch: &mut ShardBatch, row: HostMetric) {
        batch.host_metrics.push(row)
    }
}
impl Kind for HostMetrics {
    const NAME: &'static str = "host_metrics";
    type Body = ingest::MetricsBody;
    type Json = ingest::HostMetricJson;
    fn items(body: Self::Body) -> Capped<Self::Json, MAX_BATCH_OBJECTS> {
        body.metrics
    }
    fn validate(i: usize, item: Self::Json, errors: &mut Vec<FieldError>) -> Option<HostMetric> {
        ingest::validate_host_metric(i, item, errors)
    }
}

pub async fn spans(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<Spans>(state, headers, query, body).await
}

pub async fn logs(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<Logs>(state, headers, query, body).await
}

pub async fn infrastructure(
    state: State<Arc<AppState>>,
    headers: HeaderMap,
    query: RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    handle::<HostMetrics>(state, headers, query, body).await
}

async fn handle<K: Kind + 'static>(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Json<Accepted>, ApiError> {
    let result = async {
        // The credential first: an unauthenticated body is never read.
        let project = api_key_project(&app, &headers, query.as_deref())?;
        crate::body::require_json(&headers)?;
        let encoding = crate::body::encoding(&headers)?;
        let timeout = app.config.server.body_read_timeout;
        let received = crate::body::receive(&app.bodies, &headers, body, MAX_OBSERVABILITY_BODY, timeout).await?;
        let (rows, json_len, _held) = app
            .bodies
            .parse(received, encoding, move |mut received| {
                let json = received.decode(encoding, MAX_OBSERVABILITY_BODY)?;
                let items = K::items(received.parse::<K::Body>(&json)?)
                    .into_items()
                    .map_err(|got| ApiError::BatchTooLarge { max: MAX_BATCH_OBJECTS, got })?;
                let rows = ingest::validate_all(items, K::validate)
                    .map_err(|errors| ApiError::invalid_objects(K::NAME, errors))?;
                Ok((rows, json.len(), received.charge))
            })
            .await?;
        let accepted = rows.len();
        let batches = partition::<K>(&app, &project, rows, json_len)?;
        commit(&app, batches).await?;
        Ok(accepted)
    }
    .await;
    answer(&app, K::NAME, result, |accepted| Accepted { status: "ok", accepted })
}

/// Counts an ingest request's outcome (objects accepted, or the refusal's reason) and answers.
pub(crate) fn answer<T>(
    app: &AppState,
    kind: &'static str,
    result: Result<usize, ApiError>,
    ok: impl FnOnce(usize) -> T,
) -> Result<Json<T>, ApiError> {
    match result {
        Ok(n) => {
            app.metrics.accepted(kind, n as u64);
            Ok(Json(ok(n)))
        }
        Err(e) => {
            app.metrics.rejected(kind, &e);
            Err(e)
        }
    }
}

/// Splits rows into one sub-batch per shard through the partition table.
pub(crate) fn partition<K: Placement>(
    app: &AppState,
    project: &ProjectId,
    rows: Vec<K::Row>,
    body_bytes: usize,
) -> Result<HashMap<GroupId, ShardBatch>, ApiError> {
    let cache = app.cluster.meta_cache().ok_or_else(|| ApiError::Unavailable("metadata is not loaded yet".into()))?;
    if cache.partitions.is_empty() {
        return Err(ApiError::Unavailable("the cluster is not bootstrapped yet".into()));
    }
    let total = rows.len().max(1);
    let mut batches: HashMap<GroupId, ShardBatch> = HashMap::new();
    for row in rows {
        let p = match K::key(&row) {
            Some(key) => partition_of(project, key),
            None => rand::random::<u32>(),
        };
        let group = cache.partitions[p as usize % cache.partitions.len()];
        let batch = batches
            .entry(group)
            .or_insert_with(|| ShardBatch { project_id: project.to_string(), ..Default::default() });
        K::push(batch, row);
    }
    for batch in batches.values_mut() {
        let rows = batch.spans.len()
            + batch.logs.len()
            + batch.host_metrics.len()
            + batch.events.len()
            + batch.replay_events.len();
        batch.json_bytes = (body_bytes * rows / total) as u64;
    }
    Ok(batches)
}

/// Replicates every sub-batch under one batch id. If any shard cannot commit, the others are
/// told to drop theirs, so a failed request stores nothing. The replication runs as a task of
/// its own: a client that disconnects does not stop it halfway, with some shards holding the
/// batch and no abort sent.
pub(crate) async fn commit(app: &AppState, batches: HashMap<GroupId, ShardBatch>) -> Result<(), ApiError> {
    let cluster = app.cluster.clone();
    tokio::spawn(replicate(cluster, batches))
        .await
        .map_err(|e| ApiError::Internal(format!("batch replication failed: {e}")))?
}

async fn replicate(cluster: Arc<Cluster>, batches: HashMap<GroupId, ShardBatch>) -> Result<(), ApiError> {
    let batch_id: u128 = rand::random();
    let groups: Vec<GroupId> = batches.keys().copied().collect();
    let writes = batches.into_iter().map(|(group, batch)| {
        let payload = Bytes::from(batch.encode_to_vec());
        cluster.write(group, batch_id, write_request::Op::Batch(payload))
    });
    let results = futures::future::join_all(writes).await;
    let Some(err) = results.into_iter().find_map(Result::err) else {
        return Ok(());
    };
    let aborts = groups.iter().map(|g| cluster.write(*g, batch_id, write_request::Op::Abort(true)));
    for (group, r) in groups.iter().zip(futures::future::join_all(aborts).await) {
        if let Err(e) = r {
            tracing::error!(group, error = %e, "could not abort a partially committed batch");
        }
    }
    Err(err.into())
}
