//! The one place where errors become HTTP responses (docs/API.md, "Error responses").

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use sextant_model::ingest::FieldError;
use sextant_model::meta::{MetaCommandResult, Refusal};

use crate::cluster::ClusterError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A code and the sentence saying what is wrong.
    #[error("{1}")]
    BadRequest(&'static str, String),
    #[error("{message}")]
    Validation { message: String, errors: Vec<FieldError> },
    #[error("a request may carry at most {max} objects, this one has {got}")]
    BatchTooLarge { max: usize, got: usize },
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("a request may carry at most {max} events, this one has {got}")]
    TooManyEvents { max: usize, got: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{1}")]
    Forbidden(&'static str, &'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    #[error("{1}")]
    Conflict(&'static str, &'static str),
    #[error("too many requests; retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// A hard monthly quota is used up (docs/API.md, "Usage"); `resets_at` is RFC 3339.
    #[error("the monthly {what} quota is used up ({used} of {limit}); it resets at {resets_at}")]
    QuotaExceeded { what: &'static str, limit: u64, used: u64, resets_at: String },
    #[error("{0}")]
    Unavailable(String),
    /// No payment provider is configured (docs/API.md, "Billing").
    #[error("billing is not configured on this server: no payment provider is set up")]
    BillingNotConfigured,
    /// Storage did not answer; the detail (node addresses, gRPC errors) is logged, not sent.
    #[error("storage is temporarily unavailable; retry (request id in X-Request-Id)")]
    StorageUnavailable(String),
    /// The router holds as many request bytes as its budget allows.
    #[error("the server is busy receiving other requests; retry shortly")]
    Overloaded,
    /// The router runs and queues as many reads as it may (docs/API.md, "Overload").
    #[error("the server is running as many reads as it can; retry shortly")]
    ReadsOverloaded,
    /// A shard leader's write queue is full (docs/API.md, "Overload"); the detail is logged.
    #[error("storage is busy with other writes; retry shortly")]
    StorageOverloaded(String),
    /// A storage node's disk is above its high-water mark: writes are refused, reads go on.
    #[error("storage is out of disk space for new writes; retry later")]
    DiskFull(String),
    /// The client stopped sending its body.
    #[error("the request body was not received in time")]
    BodyTimeout,
    /// A read did not finish within the request timeout.
    #[error("the query did not finish in {secs} s; narrow the time range or add filters")]
    ReadTimeout { secs: u64 },
    /// A read whose cost, estimated before the scan (or counted while a shard scanned), is
    /// over the per-query budget.
    #[error("{}", too_large(estimate.as_ref(), budget))]
    QueryTooLarge { estimate: Option<sextant_model::query::Cost>, budget: crate::query::scatter::QueryBudget },
    /// A shard's tables for a read needed more memory than its node gives the queries running
    /// at once.
    #[error(
        "the query needs more than the {budget_bytes} bytes of memory a node gives the queries running at once; \
         narrow the time range or add filters, or retry when fewer queries run"
    )]
    QueryOutOfMemory { budget_bytes: u64 },
    /// Some shards did not answer a query and the client did not accept a partial answer.
    #[error("shards {missing:?} did not answer; retry, or pass allow_partial=true for an answer without them")]
    ShardsUnavailable { missing: Vec<u64> },
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// A request whose fields failed validation, each problem listed.
    pub fn invalid_fields(errors: Vec<FieldError>) -> Self {
        ApiError::Validation { message: "the request has invalid fields".into(), errors }
    }

    /// A batch some of whose objects (of `kind`) failed validation, each problem listed.
    pub fn invalid_objects(kind: &str, errors: Vec<FieldError>) -> Self {
        ApiError::Validation { message: format!("{} invalid {kind}", errors.len()), errors }
    }

    /// The gRPC code of this error, for OTLP (docs/API.md, "OTLP"): retryable ones
    /// (`UNAVAILABLE`, and `RESOURCE_EXHAUSTED` with a retry delay) where the HTTP answer is
    /// 429 or 503.
    pub fn grpc_code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            ApiError::BadRequest(..)
            | ApiError::Validation { .. }
            | ApiError::BatchTooLarge { .. }
            | ApiError::UnsupportedMediaType(_) => Code::InvalidArgument,
            ApiError::PayloadTooLarge { .. } | ApiError::TooManyEvents { .. } => Code::ResourceExhausted,
            ApiError::RateLimited { .. } => Code::ResourceExhausted,
            ApiError::Unauthorized(_) => Code::Unauthenticated,
            ApiError::Forbidden(..) => Code::PermissionDenied,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::MethodNotAllowed => Code::Unimplemented,
            // Not `RESOURCE_EXHAUSTED`: OTLP SDKs (Python, Java) retry it whatever the status
            // says, and a used-up quota does not come back by retrying within the month.
            ApiError::Conflict(..) | ApiError::QuotaExceeded { .. } => Code::FailedPrecondition,
            ApiError::Unavailable(_)
            | ApiError::StorageUnavailable(_)
            | ApiError::Overloaded
            | ApiError::StorageOverloaded(_)
            | ApiError::ReadsOverloaded
            | ApiError::DiskFull(_)
            | ApiError::ShardsUnavailable { .. } => Code::Unavailable,
            ApiError::BillingNotConfigured => Code::Unimplemented,
            ApiError::BodyTimeout | ApiError::ReadTimeout { .. } => Code::DeadlineExceeded,
            ApiError::QueryTooLarge { .. } | ApiError::QueryOutOfMemory { .. } => Code::OutOfRange,
            ApiError::Internal(_) => Code::Internal,
        }
    }

    /// Seconds after which the request may be retried: the `Retry-After` of the HTTP answer.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after_secs } => Some(*retry_after_secs),
            ApiError::Unavailable(_)
            | ApiError::StorageUnavailable(_)
            | ApiError::ShardsUnavailable { .. }
            | ApiError::Overloaded
            | ApiError::StorageOverloaded(_)
            | ApiError::ReadsOverloaded => Some(1),
            // The node probes its disk every second; space comes back with flushes and expiry.
            ApiError::DiskFull(_) => Some(DISK_FULL_RETRY_SECS),
            // Until an operator configures a provider: not soon.
            ApiError::BillingNotConfigured => Some(3600),
            _ => None,
        }
    }

    fn parts(&self) -> (StatusCode, &'static str, Option<Details<'_>>) {
        match self {
            ApiError::BadRequest(code, _) => (StatusCode::BAD_REQUEST, code, None),
            ApiError::Validation { errors, .. } => {
                (StatusCode::BAD_REQUEST, "validation_failed", Some(Details::Fields { errors }))
            }
            ApiError::BatchTooLarge { max, got } => {
                (StatusCode::BAD_REQUEST, "batch_too_large", Some(Details::Count { max: *max, got: *got }))
            }
            ApiError::TooManyEvents { max, got } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "too_many_events", Some(Details::Count { max: *max, got: *got }))
            }
            ApiError::PayloadTooLarge { limit } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", Some(Details::Limit { limit_bytes: *limit }))
            }
            ApiError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", None),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", None),
            ApiError::Forbidden(code, _) => (StatusCode::FORBIDDEN, code, None),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", None),
            ApiError::Conflict(code, _) => (StatusCode::CONFLICT, code, None),
            ApiError::RateLimited { retry_after_secs } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                Some(Details::RetryAfter { retry_after_seconds: *retry_after_secs }),
            ),
            ApiError::QuotaExceeded { limit, used, resets_at, .. } => (
                StatusCode::PAYMENT_REQUIRED,
                "quota_exceeded",
                Some(Details::Quota { limit: *limit, used: *used, resets_at }),
            ),
            ApiError::Unavailable(_) | ApiError::StorageUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable", None)
            }
            ApiError::Overloaded | ApiError::StorageOverloaded(_) | ApiError::ReadsOverloaded => {
                (StatusCode::SERVICE_UNAVAILABLE, "overloaded", None)
            }
            ApiError::DiskFull(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "disk_full",
                Some(Details::RetryAfter { retry_after_seconds: DISK_FULL_RETRY_SECS }),
            ),
            ApiError::BillingNotConfigured => (StatusCode::SERVICE_UNAVAILABLE, "billing_not_configured", None),
            ApiError::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout", None),
            ApiError::ReadTimeout { secs } => {
                (StatusCode::GATEWAY_TIMEOUT, "query_timeout", Some(Details::Timeout { timeout_seconds: *secs }))
            }
            ApiError::QueryTooLarge { estimate, budget } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "query_too_large",
                Some(Details::QueryCost {
                    estimated_rows: estimate.map(|e| e.rows),
                    estimated_bytes: estimate.map(|e| e.bytes),
                    max_rows: budget.rows,
                    max_bytes: budget.bytes,
                }),
            ),
            ApiError::QueryOutOfMemory { budget_bytes } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "query_too_large",
                Some(Details::Memory { memory_budget_bytes: *budget_bytes }),
            ),
            ApiError::ShardsUnavailable { missing } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "shards_unavailable",
                Some(Details::Shards { missing_shards: missing }),
            ),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", None),
        }
    }
}

/// `{"error": {"code", "message", "details"?}}`: every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    pub error: ErrorJson<'a>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorJson<'a> {
    /// Stable and machine-readable (docs/API.md, "Error responses").
    pub code: &'static str,
    /// For people; may change.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Details<'a>>,
}

/// What some errors say besides their message.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Details<'a> {
    /// Every field that failed validation.
    Fields {
        errors: &'a [FieldError],
    },
    /// A count over its limit.
    Count {
        max: usize,
        got: usize,
    },
    Limit {
        limit_bytes: usize,
    },
    RetryAfter {
        retry_after_seconds: u64,
    },
    Timeout {
        timeout_seconds: u64,
    },
    /// A read's estimated cost (absent when a shard counted its rows past the budget while
    /// scanning) and the per-query budget.
    QueryCost {
        #[serde(skip_serializing_if = "Option::is_none")]
        estimated_rows: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        estimated_bytes: Option<u64>,
        max_rows: u64,
        max_bytes: u64,
    },
    Memory {
        memory_budget_bytes: u64,
    },
    Shards {
        missing_shards: &'a [u64],
    },
    Quota {
        limit: u64,
        used: u64,
        resets_at: &'a str,
    },
}

fn too_large(estimate: Option<&sextant_model::query::Cost>, budget: &crate::query::scatter::QueryBudget) -> String {
    let over = match estimate {
        Some(e) => format!("would read about {} rows ({} bytes)", e.rows, e.bytes),
        None => format!("read more than {} rows on a shard", budget.rows),
    };
    format!(
        "the query {over}, over the budget of {} rows and {} bytes per query; narrow the time range or add filters",
        budget.rows, budget.bytes
    )
}

/// `Retry-After` of a write refused for disk space.
const DISK_FULL_RETRY_SECS: u64 = 5;

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Unavailable(m) => ApiError::StorageUnavailable(m),
            ClusterError::Internal(m) => ApiError::Internal(m),
            ClusterError::DiskFull(m) => ApiError::DiskFull(m),
            ClusterError::Overloaded(m) => ApiError::StorageOverloaded(m),
        }
    }
}

/// The outcome of a meta change whose success is `Done`: a refusal becomes its API error, any
/// other answer is a bug, reported as internal (`what` names the change).
pub fn expect_done(result: MetaCommandResult, what: &str) -> Result<(), ApiError> {
    match result {
        MetaCommandResult::Done => Ok(()),
        MetaCommandResult::Refused(r) => Err(r.into()),
        other => Err(ApiError::Internal(format!("unexpected meta answer to {what}: {other:?}"))),
    }
}

/// What a refused meta command means to the client.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::EmailTaken => ApiError::Conflict("email_taken", "an account with this email already exists"),
            Refusal::NameTaken => ApiError::Conflict("name_taken", "a project with this name already exists"),
            Refusal::NotFound => ApiError::NotFound("not found".into()),
            Refusal::LimitReached => {
                ApiError::Conflict("limit_reached", "the maximum number of these objects is reached")
            }
            Refusal::OwnerProtected => ApiError::Forbidden("forbidden", "an owner cannot be removed"),
            Refusal::InvalidSession | Refusal::SessionReused => {
                ApiError::Unauthorized("the session is invalid or expired; sign in again")
            }
            Refusal::InvalidInvite => ApiError::Unauthorized("the invitation is invalid, used or expired"),
            Refusal::Managed => ApiError::Conflict(
                "managed_by_resource",
                "this object is managed by a Kubernetes resource; change or delete that resource instead",
            ),
            Refusal::ProjectsRemain => ApiError::Conflict(
                "projects_remain",
                "the tenant still has projects managed by Project resources; delete those first",
            ),
            Refusal::Deleted => ApiError::Conflict("deleted", "this key belongs to an object that was deleted"),
            Refusal::PlanInUse => ApiError::Conflict("plan_in_use", "organizations are still on this plan"),
            Refusal::TooFewNodes => {
                ApiError::Conflict("too_few_nodes", "fewer storage nodes than the replication factor would remain")
            }
            Refusal::UnknownNode => {
                ApiError::Conflict("unknown_node", "no storage node with this address has registered with the cluster")
            }
            Refusal::LeaseHeld => ApiError::Conflict("lease_held", "another router holds this lease"),
            Refusal::NotReplaceable => ApiError::Conflict(
                "not_replaceable",
                "the node has not restarted on an empty data directory under its id; nothing to replace",
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, details) = self.parts();
        // Logged with the request id by the request span; never sent to the client.
        match &self {
            ApiError::Internal(detail) => tracing::error!(error = %detail, "internal error"),
            ApiError::StorageUnavailable(detail) => tracing::warn!(error = %detail, "storage unavailable"),
            ApiError::DiskFull(detail) => tracing::warn!(error = %detail, "write refused for disk space"),
            ApiError::StorageOverloaded(detail) => tracing::debug!(error = %detail, "write shed by storage"),
            _ => {}
        }
        let body = ErrorBody { error: ErrorJson { code, message: self.to_string(), details } };
        let mut resp = (status, Json(body)).into_response();
        if let Some(secs) = self.retry_after_secs() {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    async fn body_text(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn storage_unavailable_answers_a_generic_503_without_the_internal_detail() {
        let detail = "status: Unavailable, message: \"tcp connect error 10.1.2.3:7001\", node 2 no leader";
        let resp = ApiError::from(ClusterError::Unavailable(detail.into())).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "1");
        let body = body_text(resp).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "unavailable");
        assert_eq!(v["error"]["message"], "storage is temporarily unavailable; retry (request id in X-Request-Id)");
        for leaked in ["10.1.2.3", "tcp connect", "node 2", "leader"] {
            assert!(!body.contains(leaked), "the body {body} carries {leaked:?}");
        }
    }

    #[tokio::test]
    async fn a_node_out_of_disk_answers_503_disk_full_with_retry_after() {
        let detail = "group 3: disk_full: the node's disk is above its high-water mark (12 bytes free); retry later";
        let resp = ApiError::from(ClusterError::DiskFull(detail.into())).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "5");
        let body = body_text(resp).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "disk_full");
        assert_eq!(v["error"]["details"], serde_json::json!({"retry_after_seconds": 5}));
        assert!(!body.contains("group 3"), "{body}");
        assert_eq!(ApiError::DiskFull(detail.into()).grpc_code(), tonic::Code::Unavailable);
    }

    #[tokio::test]
    async fn a_full_shard_write_queue_answers_503_overloaded_with_retry_after_not_disk_full() {
        let detail = "group 3: overloaded: shard 3 has 512 writes in flight (limit 512); retry shortly";
        let e = ApiError::from(ClusterError::Overloaded(detail.into()));
        assert_eq!(e.grpc_code(), tonic::Code::Unavailable);
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "1");
        let body = body_text(resp).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "overloaded");
        assert!(!body.contains("group 3"), "{body}");
        let resp = ApiError::ReadsOverloaded.into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).unwrap(), "1");
        assert_eq!(serde_json::from_str::<Value>(&body_text(resp).await).unwrap()["error"]["code"], "overloaded");
    }

    #[tokio::test]
    async fn details_are_in_the_contract_shape() {
        let resp = ApiError::BatchTooLarge { max: 1000, got: 1001 }.into_response();
        let v: Value = serde_json::from_str(&body_text(resp).await).unwrap();
        assert_eq!(v["error"]["code"], "batch_too_large");
        assert_eq!(v["error"]["details"], serde_json::json!({"max": 1000, "got": 1001}));
        let resp = ApiError::NotFound("no such endpoint".into()).into_response();
        let v: Value = serde_json::from_str(&body_text(resp).await).unwrap();
        assert_eq!(v, serde_json::json!({"error": {"code": "not_found", "message": "no such endpoint"}}));
    }

    #[tokio::test]
    async fn an_exceeded_quota_answers_402_with_the_limit_the_usage_and_when_it_resets() {
        let e =
            ApiError::QuotaExceeded { what: "events", limit: 5, used: 6, resets_at: "2026-12-01T00:00:00.000Z".into() };
        assert_eq!(e.grpc_code(), tonic::Code::FailedPrecondition);
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(resp.headers().get(header::RETRY_AFTER).is_none());
        let v: Value = serde_json::from_str(&body_text(resp).await).unwrap();
        assert_eq!(v["error"]["code"], "quota_exceeded");
        assert_eq!(
            v["error"]["details"],
            serde_json::json!({"limit": 5, "used": 6, "resets_at": "2026-12-01T00:00:00.000Z"})
        );
    }

    #[tokio::test]
    async fn internal_errors_answer_without_their_detail() {
        let resp = ApiError::from(ClusterError::Internal("decoding reply from 10.1.2.3".into())).into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body_text(resp).await.contains("10.1.2.3"));
    }
}
