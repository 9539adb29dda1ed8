//! OTLP/gRPC (docs/API.md, "OTLP"): the collector's trace, logs and metrics services on
//! `--otlp-grpc-listen`. Each call's API key (metadata `x-api-key` or `authorization: Bearer
//! sxk_…`) is checked before its message is read; the message is at most the JSON API's body
//! limit (larger: `RESOURCE_EXHAUSTED`), gzip is accepted, and its bytes and what decoding it
//! takes are held against the router's body budget while the call runs.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request as HttpRequest, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response as HttpResponse;
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

use super::wire::{self, Root};
use super::{export, LogRecords, Metrics, Signal, Traces};
use crate::http::body::{self, Charge};
use crate::http::error::ApiError;
use crate::identity::auth::api_key_project;
use crate::ingest::admission::Share;
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

/// Who called, the body bytes the call holds and its project's share of ingest (given back
/// when the last clone is dropped, at the end of the call).
#[derive(Clone)]
struct Caller {
    project: ProjectId,
    share: Arc<Share>,
    _held: Arc<Charge>,
}

const TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const LOGS: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
const METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// The gRPC prefix of a message: compression flag and length.
const PREFIX: usize = 5;

/// The API key, before anything of the message is read. Then the message is received within
/// the size limit and the body budget, and what decoding it will take is charged before tonic
/// decodes it ([`wire::decoded_cost`]).
async fn authenticate(State(app): State<Arc<AppState>>, request: HttpRequest, next: Next) -> HttpResponse {
    let admitted = api_key_project(&app, request.headers(), None).await.and_then(|project| {
        crate::ingest::quota::check(&app, project, crate::ingest::quota::Meter::Bytes).map(|()| project)
    });
    let project = match admitted {
        Ok(project) => project,
        Err(e) => {
            app.metrics.rejected("otlp_grpc", &e);
            return status(&e).into_http::<Body>();
        }
    };
    let root = match request.uri().path() {
        TRACES => Root::Traces,
        LOGS => Root::Logs,
        METRICS => Root::Metrics,
        _ => return Status::unimplemented("not an OTLP collector service").into_http::<Body>(),
    };
    let (mut parts, body) = request.into_parts();
    let gzip = parts.headers.get("grpc-encoding").is_some_and(|e| e.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let timeout = app.config.server.body_read_timeout;
    let limit = PREFIX + MAX_OBSERVABILITY_BODY;
    let received = match body::receive(&app.bodies, &parts.headers, body, limit, timeout).await {
        Ok(received) => received,
        Err(ApiError::PayloadTooLarge { .. }) => return too_large().into_http::<Body>(),
        Err(e) => return status(&e).into_http::<Body>(),
    };
    let share = match app.ingest_shares.enter(&project, received.raw.len() as u64) {
        Ok(share) => share,
        Err(e) => {
            app.metrics.rejected("otlp_grpc", &e);
            return status(&e).into_http::<Body>();
        }
    };
    let (raw, mut charge) = (received.raw, received.charge);
    if let Err(refused) = charge_decoding(&raw, root, gzip, &mut charge) {
        return refused.into_http::<Body>();
    }
    parts.extensions.insert(Caller { project, share: Arc::new(share), _held: Arc::new(charge) });
    next.run(HttpRequest::from_parts(parts, Body::from(raw))).await
}

fn too_large() -> Status {
    status(&ApiError::PayloadTooLarge { limit: MAX_OBSERVABILITY_BODY })
}

/// One length-prefixed message, its size within the limit, its decoding cost charged.
fn charge_decoding(raw: &[u8], root: Root, gzip: bool, charge: &mut Charge) -> Result<(), Status> {
    let invalid = |why: &str| Status::invalid_argument(why.to_owned());
    let [flag, a, b, c, d, ..] = raw[..] else {
        return Err(invalid("the call carries no message"));
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > MAX_OBSERVABILITY_BODY {
        return Err(too_large());
    }
    if raw.len() != PREFIX + len {
        return Err(invalid("an export call carries exactly one message"));
    }
    let message = &raw[PREFIX..];
    let cost = match flag {
        0 => wire::decoded_cost(message, root),
        1 if gzip => {
            let decoded =
                body::gunzip(message, MAX_OBSERVABILITY_BODY, &mut |step| charge.add(step)).map_err(|e| match e {
                    ApiError::PayloadTooLarge { .. } => too_large(),
                    other => status(&other),
                })?;
            wire::decoded_cost(&decoded, root)
        }
        _ => return Err(invalid("unsupported message compression; gzip is accepted")),
    };
    let cost = cost.map_err(invalid)?;
    charge.add(cost).map_err(|e| status(&e))
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
            let mapped = if len <= INLINE_MAP_BYTES {
                S::map(&message)
            } else {
                self.app.bodies.run(move || S::map(&message)).await?
            };
            export::<S>(&self.app, &caller.project, &caller.share, mapped, len).await
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

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn retryable_refusals_carry_their_retry_delay() {
        let s = status(&ApiError::RateLimited { retry_after_secs: 4 });
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(s.get_details_retry_info().and_then(|r| r.retry_delay), Some(Duration::from_secs(4)));
        let s = status(&ApiError::Overloaded);
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.get_details_retry_info().and_then(|r| r.retry_delay), Some(Duration::from_secs(1)));
        // Too large is not retryable: no delay.
        let s = too_large();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.get_details_retry_info().is_none());
        assert_eq!(status(&ApiError::Unauthorized("missing API key")).code(), Code::Unauthenticated);
    }

    fn charge() -> Charge {
        crate::http::body::Budget::new(64 << 20, 1).charge()
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn a_call_is_one_message_within_the_limit_and_its_decoding_is_charged() {
        let message = ExportTraceServiceRequest::default().encode_to_vec();
        let mut held = charge();
        charge_decoding(&framed(0, &message), Root::Traces, false, &mut held).unwrap();
        assert!(held.held() > 0, "decoding is charged");

        let mut two = framed(0, &message);
        two.extend(framed(0, &message));
        let e = charge_decoding(&two, Root::Traces, false, &mut charge()).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);

        let mut oversized = vec![0u8];
        oversized.extend_from_slice(&((MAX_OBSERVABILITY_BODY + 1) as u32).to_be_bytes());
        let e = charge_decoding(&oversized, Root::Traces, false, &mut charge()).unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted);

        // Compressed without gzip negotiated, and not protobuf at all.
        assert_eq!(
            charge_decoding(&framed(1, &message), Root::Traces, false, &mut charge()).unwrap_err().code(),
            Code::InvalidArgument
        );
        assert_eq!(
            charge_decoding(&framed(0, &[0x0b]), Root::Traces, false, &mut charge()).unwrap_err().code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn a_gzip_bomb_is_refused_while_it_is_decompressed() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&vec![0u8; MAX_OBSERVABILITY_BODY + 1024]).unwrap();
        let bomb = enc.finish().unwrap();
        let e = charge_decoding(&framed(1, &bomb), Root::Traces, true, &mut charge()).unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted);
    }
}
