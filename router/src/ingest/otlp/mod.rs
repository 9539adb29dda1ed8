//! OTLP in (docs/API.md, "OTLP"): traces, logs and metrics from OpenTelemetry SDKs and
//! Collectors, over gRPC ([`grpc`]) and HTTP ([`http`]), with the project API key. Both decode
//! the collector's export request, map it ([`mapping`]) onto the inputs the JSON API validates,
//! and store what passes exactly as the JSON API does; what does not is rejected item by item
//! and reported as a partial success.

pub mod grpc;
pub mod http;
pub mod mapping;
pub mod wire;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use sextant_model::ProjectId;
use sextant_proto::convert::persist_row::Packed;

use super::admission::Share;
use super::commit::commit;
use super::observability::{HostMetrics, Logs, Spans};
use super::partition::{partition, Partitioned};
use crate::http::error::ApiError;
use crate::AppState;
use mapping::Mapped;

/// One OTLP signal: its export request and response, and the rows it maps to.
pub(crate) trait Signal: Send + 'static {
    /// The metric label of its objects, as the JSON API counts them.
    const NAME: &'static str;
    /// Its export request, for [`wire::decoded_cost`].
    const ROOT: wire::Root;
    type Kind: Partitioned<Row = Self::Row>;
    type Row: Send + 'static;
    type Request: prost::Message + Default + serde::de::DeserializeOwned + Send + 'static;
    type Response: prost::Message + serde::Serialize + Send + 'static;
    fn map(request: &Self::Request) -> Mapped<Self::Row>;
    fn response(rejected: i64, message: String) -> Self::Response;
}

pub(crate) struct Traces;
impl Signal for Traces {
    const NAME: &'static str = "spans";
    const ROOT: wire::Root = wire::Root::Traces;
    type Kind = Spans;
    type Row = sextant_model::row::Span<Packed>;
    type Request = ExportTraceServiceRequest;
    type Response = ExportTraceServiceResponse;
    fn map(request: &Self::Request) -> Mapped<Self::Row> {
        mapping::spans::<Packed>(&request.resource_spans)
    }
    fn response(rejected_spans: i64, error_message: String) -> Self::Response {
        ExportTraceServiceResponse {
            partial_success: (rejected_spans > 0 || !error_message.is_empty())
                .then_some(ExportTracePartialSuccess { rejected_spans, error_message }),
        }
    }
}

pub(crate) struct LogRecords;
impl Signal for LogRecords {
    const NAME: &'static str = "logs";
    const ROOT: wire::Root = wire::Root::Logs;
    type Kind = Logs;
    type Row = sextant_model::row::LogRecord<Packed>;
    type Request = ExportLogsServiceRequest;
    type Response = ExportLogsServiceResponse;
    fn map(request: &Self::Request) -> Mapped<Self::Row> {
        mapping::logs::<Packed>(&request.resource_logs)
    }
    fn response(rejected_log_records: i64, error_message: String) -> Self::Response {
        ExportLogsServiceResponse {
            partial_success: (rejected_log_records > 0 || !error_message.is_empty())
                .then_some(ExportLogsPartialSuccess { rejected_log_records, error_message }),
        }
    }
}

pub(crate) struct Metrics;
impl Signal for Metrics {
    const NAME: &'static str = "host_metrics";
    const ROOT: wire::Root = wire::Root::Metrics;
    type Kind = HostMetrics;
    type Row = sextant_model::row::HostMetric<Packed>;
    type Request = ExportMetricsServiceRequest;
    type Response = ExportMetricsServiceResponse;
    fn map(request: &Self::Request) -> Mapped<Self::Row> {
        mapping::host_metrics::<Packed>(&request.resource_metrics)
    }
    fn response(rejected_data_points: i64, error_message: String) -> Self::Response {
        ExportMetricsServiceResponse {
            partial_success: (rejected_data_points > 0 || !error_message.is_empty())
                .then_some(ExportMetricsPartialSuccess { rejected_data_points, error_message }),
        }
    }
}

/// Stores what passed (all of it or none, as the JSON API does) and answers with what did not.
pub(crate) async fn export<S: Signal>(
    app: &AppState,
    project: &ProjectId,
    share: &Share,
    mapped: Mapped<S::Row>,
    body_bytes: usize,
) -> Result<S::Response, ApiError> {
    let message = mapped.message();
    let rejected = i64::try_from(mapped.rejected).unwrap_or(i64::MAX);
    let accepted = mapped.rows.len();
    let stored = async {
        if accepted > 0 {
            let batches = partition::<S::Kind>(app, project, mapped.rows, body_bytes)?;
            commit(app, share, batches).await?;
        }
        Ok(())
    }
    .await;
    match stored {
        Ok(()) => {
            app.metrics.accepted(S::NAME, accepted as u64);
            Ok(S::response(rejected, message))
        }
        Err(e) => {
            app.metrics.rejected(S::NAME, &e);
            Err(e)
        }
    }
}
