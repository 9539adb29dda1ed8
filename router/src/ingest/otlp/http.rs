//! OTLP/HTTP (docs/API.md, "OTLP"): `POST /v1/traces`, `/v1/logs`, `/v1/metrics` on the public
//! port, binary protobuf or JSON, optionally gzip. The API key is checked before the body is
//! read; the body is received within the same limits and byte budget as the JSON API's.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use prost::Message;
use sextant_model::ingest::MAX_OBSERVABILITY_BODY;

use super::{export, wire, LogRecords, Metrics, Signal, Traces};
use crate::http::body;
use crate::http::error::ApiError;
use crate::identity::auth::api_key_project;
use crate::AppState;

/// The two OTLP/HTTP encodings; answers use the request's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Protobuf,
    Json,
}

impl Format {
    fn of(headers: &HeaderMap) -> Result<Self, ApiError> {
        let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let mime = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match mime.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Format::Protobuf),
            "application/json" => Ok(Format::Json),
            _ => Err(ApiError::UnsupportedMediaType(format!(
                "expected application/x-protobuf or application/json, got `{mime}`"
            ))),
        }
    }

    fn content_type(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Format::Protobuf => "application/x-protobuf",
            Format::Json => "application/json",
        })
    }
}

#[utoipa::path(
    post,
    path = "/v1/traces",
    tag = "observability ingest",
    summary = "OTLP/HTTP: ExportTraceServiceRequest",
    description = "An OTLP `ExportTraceServiceRequest` as binary protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`), optionally gzip. Answers an OTLP export response in the request's encoding; rejected objects are counted in its partial success.",
    request_body(
        description = "An OTLP `ExportTraceServiceRequest` (opentelemetry-proto).",
        content(
            (Object = "application/json"),
            (Vec<u8> = "application/x-protobuf")
        )
    ),
    responses(
        (status = 200, description = "Stored; `partialSuccess` counts what was rejected.", content(
            (Object = "application/json", example = json!({})),
            (Vec<u8> = "application/x-protobuf")
        )),
        crate::http::openapi::OtlpErrors
    ),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn traces(state: State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    handle::<Traces>(state, headers, body).await
}

#[utoipa::path(
    post,
    path = "/v1/logs",
    tag = "observability ingest",
    summary = "OTLP/HTTP: ExportLogsServiceRequest",
    description = "An OTLP `ExportLogsServiceRequest` as binary protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`), optionally gzip. Answers an OTLP export response in the request's encoding; rejected objects are counted in its partial success.",
    request_body(
        description = "An OTLP `ExportLogsServiceRequest` (opentelemetry-proto).",
        content(
            (Object = "application/json"),
            (Vec<u8> = "application/x-protobuf")
        )
    ),
    responses(
        (status = 200, description = "Stored; `partialSuccess` counts what was rejected.", content(
            (Object = "application/json", example = json!({})),
            (Vec<u8> = "application/x-protobuf")
        )),
        crate::http::openapi::OtlpErrors
    ),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn logs(state: State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    handle::<LogRecords>(state, headers, body).await
}

#[utoipa::path(
    post,
    path = "/v1/metrics",
    tag = "observability ingest",
    summary = "OTLP/HTTP: ExportMetricsServiceRequest",
    description = "An OTLP `ExportMetricsServiceRequest` as binary protobuf (`application/x-protobuf`) or OTLP/JSON (`application/json`), optionally gzip. Answers an OTLP export response in the request's encoding; rejected objects are counted in its partial success.",
    request_body(
        description = "An OTLP `ExportMetricsServiceRequest` (opentelemetry-proto).",
        content(
            (Object = "application/json"),
            (Vec<u8> = "application/x-protobuf")
        )
    ),
    responses(
        (status = 200, description = "Stored; `partialSuccess` counts what was rejected.", content(
            (Object = "application/json", example = json!({})),
            (Vec<u8> = "application/x-protobuf")
        )),
        crate::http::openapi::OtlpErrors
    ),
    security(("api_key" = []), ("api_key_bearer" = []))
)]
pub async fn metrics(state: State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    handle::<Metrics>(state, headers, body).await
}

async fn handle<S: Signal>(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let requested = Format::of(&headers);
    // An unsupported content type is answered in JSON.
    let format = requested.as_ref().copied().unwrap_or(Format::Json);
    let unsupported = requested.err();
    let result = async {
        // The credential first: an unauthenticated body is never read.
        let project = api_key_project(&app, &headers, None).await?;
        crate::ingest::quota::check(&app, project, crate::ingest::quota::Meter::Bytes)?;
        if let Some(e) = unsupported {
            return Err(e);
        }
        let encoding = body::encoding(&headers)?;
        let timeout = app.config.server.body_read_timeout;
        let received = body::receive(&app.bodies, &headers, body, MAX_OBSERVABILITY_BODY, timeout).await?;
        let share = app.ingest_shares.enter(&project, received.raw.len() as u64)?;
        let (mapped, len, _held) = app
            .bodies
            .parse(received, encoding, move |mut received| {
                let bytes = received.decode(encoding, MAX_OBSERVABILITY_BODY)?;
                // What decoding and mapping will hold, before they run.
                let cost = match format {
                    Format::Protobuf => wire::decoded_cost(&bytes, S::ROOT)
                        .map_err(|why| ApiError::BadRequest("invalid_body", why.into()))?,
                    Format::Json => wire::json_cost(&bytes, S::ROOT)
                        .map_err(|why| ApiError::BadRequest("invalid_json", format!("malformed JSON: {why}")))?,
                };
                received.charge.add(cost)?;
                let request = decode::<S::Request>(format, &bytes)?;
                Ok((S::map(&request), bytes.len(), received.charge))
            })
            .await?;
        export::<S>(&app, &project, &share, mapped, len).await
    }
    .await;
    match result {
        Ok(response) => success(format, &response),
        Err(e) => {
            if !matches!(e, ApiError::Unauthorized(_) | ApiError::RateLimited { .. }) {
                tracing::debug!(error = %e, kind = S::NAME, "OTLP/HTTP export refused");
            }
            failure(format, e)
        }
    }
}

/// An export request in `format`; undecodable bodies are 400.
pub fn decode<T: Message + Default + serde::de::DeserializeOwned>(format: Format, bytes: &[u8]) -> Result<T, ApiError> {
    match format {
        Format::Protobuf => T::decode(bytes)
            .map_err(|e| ApiError::BadRequest("invalid_body", format!("the body is not a valid OTLP message: {e}"))),
        Format::Json => serde_json::from_slice(bytes)
            .map_err(|e| ApiError::BadRequest("invalid_json", format!("the body is not valid OTLP/JSON: {e}"))),
    }
}

fn success<R: Message + serde::Serialize>(format: Format, response: &R) -> Response {
    let body = match format {
        Format::Protobuf => response.encode_to_vec(),
        Format::Json => match serde_json::to_vec(response) {
            Ok(body) => body,
            Err(e) => return failure(format, ApiError::Internal(format!("encoding an OTLP response: {e}"))),
        },
    };
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

/// The status and headers (`Retry-After`) the JSON API gives `e`, with a `google.rpc.Status`
/// body in the request's encoding, as the OTLP/HTTP specification asks.
fn failure(format: Format, e: ApiError) -> Response {
    let code = e.grpc_code() as i32;
    let message = e.to_string();
    let (mut parts, _) = e.into_response().into_parts();
    let body = match format {
        Format::Protobuf => tonic_types::Status { code, message, details: Vec::new() }.encode_to_vec(),
        Format::Json => serde_json::json!({"code": code, "message": message}).to_string().into_bytes(),
    };
    parts.headers.insert(header::CONTENT_TYPE, format.content_type());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    async fn body(resp: Response) -> Vec<u8> {
        axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap().to_vec()
    }

    #[tokio::test]
    async fn throttling_answers_429_with_retry_after_and_a_status_in_the_request_encoding() {
        let resp = failure(Format::Protobuf, ApiError::RateLimited { retry_after_secs: 7 });
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/x-protobuf");
        let status = tonic_types::Status::decode(&body(resp).await[..]).unwrap();
        assert_eq!(status.code, tonic::Code::ResourceExhausted as i32);
        assert!(status.message.contains("retry in 7 s"), "{}", status.message);
    }

    #[tokio::test]
    async fn a_busy_router_answers_503_with_retry_after() {
        let resp = failure(Format::Json, ApiError::Overloaded);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        let status: serde_json::Value = serde_json::from_slice(&body(resp).await).unwrap();
        assert_eq!(status["code"], tonic::Code::Unavailable as i32);
    }

    #[tokio::test]
    async fn refusals_that_must_not_be_retried_carry_no_retry_after() {
        for e in [ApiError::PayloadTooLarge { limit: 1 }, ApiError::Unauthorized("missing API key")] {
            let resp = failure(Format::Protobuf, e);
            assert!(resp.headers().get(header::RETRY_AFTER).is_none());
            assert!(matches!(resp.status().as_u16(), 401 | 413));
        }
    }

    /// A used-up quota does not come back by retrying: OTLP/HTTP retries only 429, 502, 503
    /// and 504, so the JSON API's 402 stands; the gRPC code is one no SDK retries.
    #[tokio::test]
    async fn an_exceeded_quota_is_a_402_without_retry_after_and_a_non_retryable_grpc_code() {
        let e = ApiError::QuotaExceeded {
            what: "bytes",
            limit: 10,
            used: 12,
            resets_at: "2026-12-01T00:00:00.000Z".into(),
        };
        let resp = failure(Format::Json, e);
        assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(resp.headers().get(header::RETRY_AFTER).is_none());
        let status: serde_json::Value = serde_json::from_slice(&body(resp).await).unwrap();
        assert_eq!(status["code"], tonic::Code::FailedPrecondition as i32);
        assert!(status["message"].as_str().unwrap().contains("2026-12-01T00:00:00.000Z"), "{status}");
    }

    #[test]
    fn content_types_choose_the_encoding() {
        let headers = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            h
        };
        assert_eq!(Format::of(&headers("application/x-protobuf")).unwrap(), Format::Protobuf);
        assert_eq!(Format::of(&headers("application/json; charset=utf-8")).unwrap(), Format::Json);
        assert!(matches!(Format::of(&headers("text/plain")), Err(ApiError::UnsupportedMediaType(_))));
        assert!(Format::of(&HeaderMap::new()).is_err());
    }
}
