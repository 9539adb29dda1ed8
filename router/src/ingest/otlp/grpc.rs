//! OTLP/gRPC (docs/API.md, "OTLP"): the collector's trace, logs and metrics services on
//! `--otlp-grpc-listen`. Each call's API key (metadata `x-api-key` or `authorization: Bearer
//! sxk_…`) is checked before its message is read; the message is at most the JSON API's body
//! limit (larger: `RESOURCE_EXHAUSTED`), gzip is accepted, and its bytes are held against the
//! router's body budget while the call runs.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request as HttpRequest, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response as HttpResponse;
use bytes::Bytes;
use hyper::body::Frame;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;
use sextant_model::ingest::MAX_OBSERVABILITY_BODY;
use sextant_model::ProjectId;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::{export, LogRecords, Metrics, Signal, Traces, DECODE_EXPANSION};
use crate::http::body::Charge;
use crate::http::error::ApiError;
use crate::identity::auth::api_key_project;
use crate::AppState;

/// The OTLP/gRPC services behind their authentication, to serve on a listener of their own.
pub fn router(app: Arc<AppState>) -> axum::Router {
    let collector = Collector { app: app.clone() };
    let limit = MAX_OBSERVABILITY_BODY;
    let gzip = CompressionEncoding::Gzip;
    tonic::service::Routes::new(
        TraceServiceServer::new(collector.clone())
            .max_decoding_message_size(limit)
            .accept_compressed(gzip)
            .send_compressed(gzip),
    )
    .add_service(
        LogsServiceServer::new(collector.clone())
            .max_decoding_message_size(limit)
            .accept_compressed(gzip)
            .send_compressed(gzip),
    )
    .add_service(
        MetricsServiceServer::new(collector)
            .max_decoding_message_size(limit)
            .accept_compressed(gzip)
            .send_compressed(gzip),
    )
    .prepare()
    .into_axum_router()
    .layer(from_fn_with_state(app, authenticate))
}

/// Who called, and the body bytes the call holds (given back when the call ends).
#[derive(Clone)]
struct Caller {
    project: ProjectId,
    held: Arc<Mutex<Charge>>,
}

/// The API key, before anything of the message is read; then the message's bytes are charged
/// to the body budget as they arrive.
async fn authenticate(State(app): State<Arc<AppState>>, request: HttpRequest, next: Next) -> HttpResponse {
    let project = match api_key_project(&app, request.headers(), None) {
        Ok(project) => project,
        Err(e) => {
            app.metrics.rejected("otlp_grpc", &e);
            return status(&e).into_http::<Body>();
        }
    };
    let held = Arc::new(Mutex::new(app.bodies.charge()));
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(Caller { project, held: held.clone() });
    let body = Body::new(Charged { inner: body, held, prefix: Vec::with_capacity(5) });
    next.run(HttpRequest::from_parts(parts, body)).await
}

/// A request body whose bytes are charged to the budget before they are passed on; past the
/// budget it fails with `UNAVAILABLE` (retryable).
struct Charged {
    inner: Body,
    held: Arc<Mutex<Charge>>,
    /// The first message's gRPC prefix (compression flag, length), until it is complete.
    prefix: Vec<u8>,
}

impl Charged {
    /// Refuses a message whose length prefix is past the limit, before any of it is kept.
    fn check_prefix(&mut self, data: &[u8]) -> Result<(), Status> {
        if self.prefix.len() >= 5 {
            return Ok(());
        }
        let take = (5 - self.prefix.len()).min(data.len());
        self.prefix.extend_from_slice(&data[..take]);
        if let [_, a, b, c, d] = self.prefix[..] {
            let len = u32::from_be_bytes([a, b, c, d]) as usize;
            if len > MAX_OBSERVABILITY_BODY {
                return Err(status(&ApiError::PayloadTooLarge { limit: MAX_OBSERVABILITY_BODY }));
            }
        }
        Ok(())
    }
}

impl HttpBody for Charged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let data = data.clone();
                if let Err(refused) = this.check_prefix(&data) {
                    return Poll::Ready(Some(Err(axum::Error::new(refused))));
                }
                let mut held = this.held.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = held.add(data.len()) {
                    return Poll::Ready(Some(Err(axum::Error::new(status(&e)))));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The gRPC status of an error; retryable ones carry their retry delay (`RetryInfo`).
pub fn status(e: &ApiError) -> Status {
    let code = e.grpc_code();
    match e.retry_after_secs() {
        Some(secs) => Status::with_error_details(
            code,
            e.to_string(),
            ErrorDetails::with_retry_info(Some(Duration::from_secs(secs))),
        ),
        None => Status::new(code, e.to_string()),
    }
}

#[derive(Clone)]
struct Collector {
    app: Arc<AppState>,
}

/// Messages up to this size are mapped on the async worker.
const INLINE_MAP_BYTES: usize = 64 * 1024;

impl Collector {
    async fn handle<S: Signal>(&self, request: Request<S::Request>) -> Result<Response<S::Response>, Status> {
        let caller =
            request.extensions().get::<Caller>().cloned().ok_or_else(|| Status::unauthenticated("missing API key"))?;
        let message = request.into_inner();
        let result = async {
            let len = message.encoded_len();
            caller.held.lock().unwrap_or_else(|p| p.into_inner()).add(len.saturating_mul(DECODE_EXPANSION))?;
            let mapped = if len <= INLINE_MAP_BYTES {
                S::map(&message)
            } else {
                self.app.bodies.run(move || S::map(&message)).await?
            };
            export::<S>(&self.app, &caller.project, mapped, len).await
        }
        .await;
        drop(caller);
        result.map(Response::new).map_err(|e| status(&e))
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.handle::<Traces>(request).await
    }
}

#[tonic::async_trait]
impl LogsService for Collector {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.handle::<LogRecords>(request).await
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.handle::<Metrics>(request).await
    }
}
