//! The one place where errors become HTTP responses (DESIGN A1 error shape).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use sextant_model::ingest::FieldError;

use crate::cluster::ClusterError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(&'static str, String),
    #[error("{message}")]
    Validation { message: String, errors: Vec<FieldError> },
    #[error("a request may carry at most {max} objects, this one has {got}")]
    BatchTooLarge { max: usize, got: usize },
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{1}")]
    Forbidden(&'static str, &'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, Option<Value>) {
        match self {
            ApiError::BadRequest(code, _) => (StatusCode::BAD_REQUEST, code, None),
            ApiError::Validation { errors, .. } => {
                (StatusCode::BAD_REQUEST, "validation_failed", Some(json!({ "errors": errors })))
            }
            ApiError::BatchTooLarge { max, got } => {
                (StatusCode::BAD_REQUEST, "batch_too_large", Some(json!({ "max": max, "got": got })))
            }
            ApiError::PayloadTooLarge { limit } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", Some(json!({ "limit_bytes": limit })))
            }
            ApiError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", None),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", None),
            ApiError::Forbidden(code, _) => (StatusCode::FORBIDDEN, code, None),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", None),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", None),
        }
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Unavailable(m) => ApiError::Unavailable(format!("storage is temporarily unavailable: {m}")),
            ClusterError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, details) = self.parts();
        if let ApiError::Internal(detail) = &self {
            // Logged with the request id by the request span; never sent to the client.
            tracing::error!(error = %detail, "internal error");
        }
        let mut error = json!({ "code": code, "message": self.to_string() });
        if let Some(d) = details {
            error["details"] = d;
        }
        let mut resp = (status, Json(json!({ "error": error }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}
