//! OTLP in (docs/API.md, "OTLP") against a real `sextant dev`: the OpenTelemetry Python SDK's
//! own exporters over gRPC and HTTP (tests/otlp_sdk.py, installed by scripts/test.sh;
//! `SEXTANT_PYTHON` may name a python that has them), read back through the JSON API; and the
//! edges a client meets: credentials before the body, size limits, partial success, encodings.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `sextant dev` with OTLP/gRPC on a port of the test's own.
async fn start(dir: &Path) -> (Dev, String) {
    let grpc = format!("127.0.0.1:{}", free_port());
    let dev = Dev::start_with(dir, &["--otlp-grpc-listen", &grpc], &[]).await;
    (dev, grpc)
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn span(trace_id: Vec<u8>, name: &str, start: u64) -> Span {
    Span {
        trace_id,
        span_id: vec![7; 8],
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 2_000_000,
        ..Default::default()
    }
}

fn traces_request(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    let service = KeyValue {
        key: "service.name".into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(service.into())) }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource { attributes: vec![service], ..Default::default() }),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn run_sdk(transport: &str, dev: &Dev, grpc: &str, run: &str) -> Value {
    let args = [transport, &dev.url, grpc, dev.api_key(), run];
    let out = python("tests/otlp_sdk.py", &args, &format!("the OpenTelemetry SDK over {transport}"));
    serde_json::from_slice(&out).unwrap()
}

#[tokio::test]
async fn the_python_sdk_exports_traces_logs_and_host_metrics_over_grpc_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let (dev, grpc) = start(dir.path()).await;
    let token = dev.token().await;
    for transport in ["grpc", "http"] {
        let ids = run_sdk(transport, &dev, &grpc, "r1");
        let trace_id = ids["trace_id"].as_str().unwrap();
        let service = format!("otlp-{transport}-r1");

        // The trace: both spans, the failing one with its status, kind and exception.
        let trace = wait_for("the SDK's trace", Duration::from_secs(20), || async {
            get_trace(&dev.url, &token, trace_id).await.filter(|t| t["spans"].as_array().is_some_and(|s| s.len() == 2))
        })
        .await;
        let child = trace["spans"].as_array().unwrap().iter().find(|s| s["operation"] == "charge card").unwrap();
        assert_eq!(child["span_id"], ids["span_id"]);
        assert_eq!(child["service_name"], service.as_str());
        assert_eq!(child["status"], "error");
        assert_eq!(child["attributes"]["span.kind"], "client");
        assert_eq!(child["attributes"]["exception.type"], "ValueError");
        assert_eq!(child["attributes"]["otel.status_description"], "declined");
        assert_eq!(child["attributes"]["host.name"], format!("host-{transport}-r1").as_str());

        // Its exception as an error group, and the ERROR log line as another.
        let errors = wait_for("the error groups", Duration::from_secs(20), || async {
            let (status, body) = get_json(&dev.url, &token, "/api/v1/errors").await;
            assert_eq!(status, 200, "{body}");
            let mine: Vec<Value> = body["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|g| g["service"] == service.as_str())
                .cloned()
                .collect();
            (mine.len() == 2).then_some(mine)
        })
        .await;
        let span_group = errors.iter().find(|g| g["source"] == "span").expect("a span error group");
        assert_eq!(span_group["type"], "ValueError");
        assert_eq!(span_group["message"], "card declined for order r1");
        assert_eq!(span_group["sample_trace_id"], trace_id);
        assert!(errors.iter().any(|g| g["source"] == "log"), "{errors:?}");

        // The log line, found by search, tied to the span it was emitted in.
        let path = format!("/api/v1/logs/search?q=marker{transport}");
        let lines = wait_for("the log line", Duration::from_secs(20), || async {
            let (status, body) = get_json(&dev.url, &token, &path).await;
            assert_eq!(status, 200, "{body}");
            body["items"].as_array().filter(|i| !i.is_empty()).cloned()
        })
        .await;
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["level"], "ERROR");
        assert_eq!(lines[0]["service"], service.as_str());
        assert_eq!(lines[0]["message"], format!("payment failed for order r1 marker{transport}").as_str());
        assert_eq!(lines[0]["trace_id"], trace_id);
        assert_eq!(lines[0]["span_id"], ids["span_id"]);

        // The host, with its CPU (busy: 75 % and 25 % of two CPUs), memory and disk.
        let hostname = format!("host-{transport}-r1");
        let host = wait_for("the host", Duration::from_secs(20), || async {
            let (status, body) = get_json(&dev.url, &token, "/api/v1/infrastructure/hosts").await;
            assert_eq!(status, 200, "{body}");
            body["items"].as_array().unwrap().iter().find(|h| h["hostname"] == hostname.as_str()).cloned()
        })
        .await;
        assert_eq!(host["cpu_percent"], 50.0, "{host}");
        assert_eq!(host["memory_used_bytes"], 2_000_000_000u64, "{host}");
        assert_eq!(host["memory_total_bytes"], 8_000_000_000u64, "{host}");
        assert_eq!(host["disk_used_percent"], 50.0, "{host}");
    }
}

#[tokio::test]
async fn otlp_http_answers_partial_success_in_the_request_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let (dev, _) = start(dir.path()).await;
    let token = dev.token().await;
    let start = now_nanos();

    // Binary protobuf, gzip: one span stored, one with a short trace id rejected.
    let request =
        traces_request("proto-svc", vec![span(vec![0xab; 16], "GET /a", start), span(vec![1; 8], "GET /b", start)]);
    let resp = http()
        .post(format!("{}/v1/traces", dev.url))
        .header("x-api-key", dev.api_key())
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "gzip")
        .body(gzip(&request.encode_to_vec()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    let answer = ExportTraceServiceResponse::decode(resp.bytes().await.unwrap()).unwrap();
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_spans, 1);
    assert!(partial.error_message.contains("trace_id must be 16 bytes"), "{}", partial.error_message);
    let trace = get_trace(&dev.url, &token, &"ab".repeat(16)).await.expect("the accepted span");
    assert_eq!(trace["spans"][0]["service_name"], "proto-svc");

    // OTLP/JSON: hex ids, lowerCamelCase, nanoseconds as strings, enums as integers.
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
        "scopeSpans": [{"spans": [
            {"traceId": "cd".repeat(16), "spanId": "0102030405060708", "name": "POST /pay", "kind": 2,
             "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 1_000).to_string(),
             "status": {"code": 2, "message": "nope"}},
            {"traceId": "ef".repeat(16), "spanId": "0102030405060708", "name": "",
             "startTimeUnixNano": start.to_string(), "endTimeUnixNano": start.to_string()}
        ]}]
    }]});
    let resp = http()
        .post(format!("{}/v1/traces", dev.url))
        .header("authorization", format!("Bearer {}", dev.api_key()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedSpans"].to_string().trim_matches('"'), "1", "{answer}");
    assert!(answer["partialSuccess"]["errorMessage"].as_str().unwrap().contains("operation: must not be empty"));
    let trace = get_trace(&dev.url, &token, &"cd".repeat(16)).await.expect("the JSON span");
    assert_eq!(trace["spans"][0]["status"], "error");
    assert_eq!(trace["spans"][0]["attributes"]["span.kind"], "server");
    assert_eq!(trace["spans"][0]["duration_ms"], 0.001);

    // A metric that is not a host metric is rejected, and says why.
    let metrics = json!({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "h1"}}]},
        "scopeMetrics": [{"metrics": [{"name": "http.server.requests", "gauge": {"dataPoints": [
            {"timeUnixNano": start.to_string(), "asDouble": 3.0}]}}]}]
    }]});
    let resp = http()
        .post(format!("{}/v1/metrics", dev.url))
        .header("x-api-key", dev.api_key())
        .json(&metrics)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedDataPoints"].to_string().trim_matches('"'), "1", "{answer}");
    assert!(answer["partialSuccess"]["errorMessage"].as_str().unwrap().contains("only the host metrics"), "{answer}");

    // Undecodable bodies are 400 with a google.rpc.Status in the request's encoding.
    let resp = http()
        .post(format!("{}/v1/logs", dev.url))
        .header("x-api-key", dev.api_key())
        .header("content-type", "application/json")
        .body("{\"resourceLogs\": 5}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["code"], 3, "{status}");
    let resp = http()
        .post(format!("{}/v1/logs", dev.url))
        .header("x-api-key", dev.api_key())
        .header("content-type", "application/x-protobuf")
        .body(vec![0xff, 0xff, 0xff])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
}

#[tokio::test]
async fn otlp_http_without_a_key_is_refused_before_the_body_arrives_and_oversized_is_413() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let (dev, _) = start(dir.path()).await;
    let addr = dev.url.trim_start_matches("http://").to_owned();

    // The body is announced and never sent: the refusal comes anyway.
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
                Content-Length: 5000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("an answer without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 401"), "{answer}");
    assert!(answer.contains("content-type: application/x-protobuf"), "{answer}");

    let resp = http()
        .post(format!("{}/v1/logs", dev.url))
        .header("content-type", "application/json")
        .header("x-api-key", "sxk_nope_nope")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["code"], 16, "{status}");

    // Past the body limit (10 MiB): 413.
    let resp = http()
        .post(format!("{}/v1/traces", dev.url))
        .header("x-api-key", dev.api_key())
        .header("content-type", "application/x-protobuf")
        .body(vec![0u8; 11 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
}

/// A message of `n` bytes and more: one span with a large attribute.
fn large_request(n: usize) -> ExportTraceServiceRequest {
    let mut s = span(vec![0x42; 16], "big", now_nanos());
    s.attributes = vec![KeyValue {
        key: "blob".into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue("x".repeat(n))) }),
        ..Default::default()
    }];
    traces_request("big", vec![s])
}

fn with_key(message: ExportTraceServiceRequest, key: Option<&str>) -> tonic::Request<ExportTraceServiceRequest> {
    let mut request = tonic::Request::new(message);
    if let Some(key) = key {
        request.metadata_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    request
}

#[tokio::test]
async fn otlp_grpc_checks_the_key_before_the_message_and_limits_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let _logs = LogsOnPanic::new(dir.path());
    let (dev, grpc) = start(dir.path()).await;
    let token = dev.token().await;
    let mut client = TraceServiceClient::connect(format!("http://{grpc}")).await.unwrap();

    // No key, a message past the size limit: the key is what is refused.
    let err = client.export(with_key(large_request(11 << 20), None)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let err = client.export(with_key(traces_request("x", vec![]), Some("sxk_nope_nope"))).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // With the key, past the limit: RESOURCE_EXHAUSTED, not retried.
    let err = client.export(with_key(large_request(11 << 20), Some(dev.api_key()))).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");

    // gzip, and a partial success: one span stored, one rejected.
    let mut gzipped = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let start = now_nanos();
    let request =
        traces_request("grpc-svc", vec![span(vec![0x5a; 16], "GET /ok", start), span(vec![0; 16], "zero", start)]);
    let answer = gzipped.export(with_key(request, Some(dev.api_key()))).await.unwrap().into_inner();
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_spans, 1);
    assert!(partial.error_message.contains("not all zero"), "{}", partial.error_message);
    let trace = get_trace(&dev.url, &token, &"5a".repeat(16)).await.expect("the span sent over gRPC");
    assert_eq!(trace["spans"][0]["service_name"], "grpc-svc");

    // Everything valid: no partial success at all.
    let request = traces_request("grpc-svc", vec![span(vec![0x5b; 16], "GET /ok", start)]);
    let answer = client.export(with_key(request, Some(dev.api_key()))).await.unwrap().into_inner();
    assert_eq!(answer.partial_success, None);
}
