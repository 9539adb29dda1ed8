//! OTLP bodies are charged to the body budget by `wire::decoded_cost` (protobuf) and
//! `wire::json_cost` (JSON) before they are decoded. This measures what decoding and mapping
//! really take (peak bytes allocated) for typical and adversarial bodies of every signal, and
//! fails if the charge is short.

mod measure;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, ExponentialHistogram, ExponentialHistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use sextant_proto::convert::persist_row::Packed;
use sextant_router::ingest::otlp::mapping;
use sextant_router::ingest::otlp::wire::{decoded_cost, json_cost, Root};

use measure::{one_at_a_time, peak};

/// Decoding `body` (protobuf, then the same request as OTLP/JSON) and mapping it into rows as
/// ingest stores them stays within what is charged for it.
fn assert_charged(what: &str, body: &[u8], root: Root) {
    let _one = one_at_a_time();
    let charged = decoded_cost(body, root).unwrap();
    let used = peak(|| match root {
        Root::Traces => {
            drop(mapping::spans::<Packed>(&ExportTraceServiceRequest::decode(body).unwrap().resource_spans))
        }
        Root::Logs => drop(mapping::logs::<Packed>(&ExportLogsServiceRequest::decode(body).unwrap().resource_logs)),
        Root::Metrics => {
            drop(mapping::host_metrics::<Packed>(&ExportMetricsServiceRequest::decode(body).unwrap().resource_metrics))
        }
    });
    eprintln!("{what}: {} bytes, protobuf: used {used}, charged {charged}", body.len());
    assert!(used <= charged, "{what}: decoding used {used} bytes, {charged} were charged");

    let json = match root {
        Root::Traces => serde_json::to_vec(&ExportTraceServiceRequest::decode(body).unwrap()),
        Root::Logs => serde_json::to_vec(&ExportLogsServiceRequest::decode(body).unwrap()),
        Root::Metrics => serde_json::to_vec(&ExportMetricsServiceRequest::decode(body).unwrap()),
    }
    .unwrap();
    let charged = json_cost(&json, root).unwrap();
    let used = peak(|| match root {
        Root::Traces => drop(mapping::spans::<Packed>(
            &serde_json::from_slice::<ExportTraceServiceRequest>(&json).unwrap().resource_spans,
        )),
        Root::Logs => drop(mapping::logs::<Packed>(
            &serde_json::from_slice::<ExportLogsServiceRequest>(&json).unwrap().resource_logs,
        )),
        Root::Metrics => drop(mapping::host_metrics::<Packed>(
            &serde_json::from_slice::<ExportMetricsServiceRequest>(&json).unwrap().resource_metrics,
        )),
    });
    eprintln!("{what}: {} bytes, JSON: used {used}, charged {charged}", json.len());
    assert!(used <= charged, "{what} as JSON: decoding used {used} bytes, {charged} were charged");
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }),
        ..Default::default()
    }
}

fn resource() -> Option<Resource> {
    let mut attrs: Vec<KeyValue> = (0..100).map(|i| kv(&format!("k8s.label.{i}"), &"v".repeat(200))).collect();
    attrs.push(kv("service.name", "checkout"));
    attrs.push(kv("host.name", "web-1"));
    Some(Resource { attributes: attrs, ..Default::default() })
}

fn traces(spans: Vec<Span>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource(),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn valid_span(i: u64, attributes: usize) -> Span {
    let mut trace_id = vec![1u8; 16];
    trace_id[..8].copy_from_slice(&i.to_be_bytes());
    Span {
        trace_id,
        span_id: (i + 1).to_be_bytes().to_vec(),
        name: "GET /api/cart".into(),
        start_time_unix_nano: 1_795_342_530_000_000_000,
        end_time_unix_nano: 1_795_342_530_012_000_000,
        attributes: (0..attributes).map(|a| kv(&format!("a{a}"), "value")).collect(),
        ..Default::default()
    }
}

/// A message field of `field` holding `inner`, `n` times.
fn repeated(field: u32, inner: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..n {
        encode_key(field, WireType::LengthDelimited, &mut out);
        encode_varint(inner.len() as u64, &mut out);
        out.extend_from_slice(inner);
    }
    out
}

#[test]
fn typical_spans_are_charged_what_they_take() {
    assert_charged("1000 spans, 10 attributes", &traces((0..1000).map(|i| valid_span(i, 10)).collect()), Root::Traces);
}

#[test]
fn empty_spans_are_charged_what_they_take() {
    // ExportTraceServiceRequest { resource_spans: [{ scope_spans: [{ spans: [{}; 200_000] }] }] }
    let scope = repeated(2, &[], 200_000);
    let body = repeated(1, &repeated(2, &scope, 1), 1);
    assert_charged("200000 empty spans", &body, Root::Traces);
}

#[test]
fn empty_attributes_and_nested_values_are_charged_what_they_take() {
    // One span with 300,000 empty attributes.
    let span = repeated(9, &[], 300_000);
    let body = repeated(1, &repeated(2, &repeated(2, &span, 1), 1), 1);
    assert_charged("300000 empty attributes", &body, Root::Traces);
    // An attribute nested 30 arrays deep (within the decoders' limits), 1000 times.
    let mut value = AnyValue { value: Some(any_value::Value::IntValue(1)) };
    for _ in 0..30 {
        value = AnyValue { value: Some(any_value::Value::ArrayValue(ArrayValue { values: vec![value] })) };
    }
    let mut span = valid_span(1, 0);
    span.attributes = (0..1000)
        .map(|i| KeyValue { key: format!("n{i}"), value: Some(value.clone()), ..Default::default() })
        .collect();
    assert_charged("nested arrays", &traces(vec![span]), Root::Traces);
}

#[test]
fn logs_inheriting_a_large_resource_are_charged_what_they_take() {
    let records: Vec<LogRecord> = (0..10_000)
        .map(|i| LogRecord {
            time_unix_nano: 1_795_342_530_000_000_000 + i,
            severity_number: 9,
            body: Some(AnyValue { value: Some(any_value::Value::StringValue("hi".into())) }),
            ..Default::default()
        })
        .collect();
    let body = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(),
            scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    assert_charged("10000 small logs, a 20 KB resource", &body, Root::Logs);
}

#[test]
fn packed_bucket_counts_are_charged_what_they_take() {
    let point = ExponentialHistogramDataPoint {
        positive: Some(Buckets { offset: 0, bucket_counts: vec![1; 500_000] }),
        ..Default::default()
    };
    let metric = Metric {
        name: "latency".into(),
        data: Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![point],
            ..Default::default()
        })),
        ..Default::default()
    };
    let body = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource(),
            scope_metrics: vec![ScopeMetrics { metrics: vec![metric], ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    assert_charged("500000 packed bucket counts", &body, Root::Metrics);
}

#[test]
fn malformed_or_too_deep_messages_are_refused_before_decoding() {
    assert!(decoded_cost(&[0x0a, 0x05, 0x01], Root::Traces).is_err(), "a length past the end");
    assert!(decoded_cost(&[0x0b], Root::Traces).is_err(), "a group");
    assert!(decoded_cost(&[0x00, 0x00], Root::Traces).is_err(), "field 0");
    assert!(
        decoded_cost(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], Root::Traces).is_err()
    );
    // AnyValue arrays nested past the decoder's recursion limit.
    let mut value: Vec<u8> = Vec::new();
    for _ in 0..120 {
        // AnyValue { array_value (5): ArrayValue { values (1): value } }
        let array = repeated(1, &value, 1);
        value = repeated(5, &array, 1);
    }
    let kv = repeated(2, &value, 1);
    let body = repeated(1, &repeated(2, &repeated(2, &repeated(9, &kv, 1), 1), 1), 1);
    assert!(decoded_cost(&body, Root::Traces).is_err());
    assert!(ExportTraceServiceRequest::decode(&body[..]).is_err(), "prost refuses it too");
}
