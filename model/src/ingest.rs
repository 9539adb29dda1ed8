//! Observability ingest objects (docs/API.md, "Observability ingest"): the input of each kind,
//! as the JSON API parses it and as the OTLP mapping builds it, and the one validation function
//! per kind that both go through.

use serde::{Deserialize, Deserializer};

use crate::attributes::{self, AttributeSink, Attributes};
use crate::batch::Capped;
use crate::ids::validate_id;
use crate::row::{HostMetric, LogLevel, LogRecord, Span, SpanStatus};
use crate::time::TimeInput;

/// At most this many objects per ingest request.
pub const MAX_BATCH_OBJECTS: usize = 1000;
/// Observability ingest bodies are at most 10 MB (after decompression).
pub const MAX_OBSERVABILITY_BODY: usize = 10 * 1024 * 1024;
pub const MAX_NAME_LEN: usize = 256;
pub const MAX_OPERATION_LEN: usize = 1024;
pub const MAX_MESSAGE_LEN: usize = 256 * 1024;
/// Longer than any plausible span: thirty days.
pub const MAX_DURATION_MS: f64 = 30.0 * 24.0 * 3600.0 * 1000.0;
/// [`MAX_DURATION_MS`] in nanoseconds.
pub const MAX_DURATION_NS: u64 = 30 * 24 * 3600 * 1_000_000_000;

/// Why one object of a batch was refused: `details.errors[]` of the error body.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldError {
    pub index: usize,
    pub field: String,
    pub reason: String,
}

impl FieldError {
    fn new(index: usize, field: &str, reason: impl Into<String>) -> Self {
        Self { index, field: field.to_owned(), reason: reason.into() }
    }
}

/// A span as a client sends it: parsed from the JSON API, or mapped from OTLP.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct SpanInput<A = Attributes> {
    pub trace_id: String,
    pub span_id: String,
    #[serde(default)]
    pub parent_span_id: Option<String>,
    pub service_name: String,
    pub operation: String,
    pub timestamp: TimeInput,
    #[serde(rename = "duration_ms", deserialize_with = "duration_millis")]
    #[cfg_attr(feature = "openapi", schema(value_type = f64, minimum = 0))]
    pub duration: DurationInput,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub status: Option<Keyword<SpanStatus>>,
    #[serde(default, deserialize_with = "attributes::deserialize")]
    pub attributes: A,
}

/// How long a span took: milliseconds from the JSON API, nanoseconds from OTLP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DurationInput {
    Millis(f64),
    Nanos(u64),
}

/// A word of a fixed set as a client sends it (a span's status, a log's level), read as it is
/// parsed: what it names, or `None` for a word outside the set. No copy of the text is kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Keyword<T>(pub Option<T>);

/// The values a [`Keyword`] names.
pub trait Named: Sized {
    /// The value `word` names (any case), if any.
    fn named(word: &str) -> Option<Self>;
}

impl Named for SpanStatus {
    /// An empty status is unset.
    fn named(word: &str) -> Option<Self> {
        if word.is_empty() {
            return Some(SpanStatus::Unset);
        }
        [SpanStatus::Unset, SpanStatus::Ok, SpanStatus::Error]
            .into_iter()
            .find(|&s| word.eq_ignore_ascii_case(status_name(s)))
    }
}

/// A span status as the API writes it.
pub fn status_name(status: SpanStatus) -> &'static str {
    match status {
        SpanStatus::Unset => "unset",
        SpanStatus::Ok => "ok",
        SpanStatus::Error => "error",
    }
}

impl Named for LogLevel {
    fn named(word: &str) -> Option<Self> {
        parse_level(word)
    }
}

impl<T: Named> Keyword<T> {
    pub fn of(word: &str) -> Self {
        Keyword(T::named(word))
    }
}

impl<'de, T: Named> Deserialize<'de> for Keyword<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<T: Named> serde::de::Visitor<'_> for V<T> {
            type Value = Keyword<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Keyword<T>, E> {
                Ok(Keyword::of(word))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

fn duration_millis<'de, D: Deserializer<'de>>(d: D) -> Result<DurationInput, D::Error> {
    f64::deserialize(d).map(DurationInput::Millis)
}

/// A log line as a client sends it.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct LogInput<A = Attributes> {
    pub timestamp: TimeInput,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub level: Keyword<LogLevel>,
    pub service: String,
    pub message: String,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub span_id: Option<String>,
    #[serde(default, deserialize_with = "attributes::deserialize")]
    pub attributes: A,
}

/// One host's metrics at one instant, as a client sends them.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct HostMetricInput<A = Attributes> {
    pub timestamp: TimeInput,
    pub hostname: String,
    #[serde(default)]
    pub cpu_percent: Option<f64>,
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    #[serde(default)]
    pub disk_used_percent: Option<f64>,
    #[serde(default)]
    pub network_rx_bytes_per_sec: Option<f64>,
    #[serde(default)]
    pub network_tx_bytes_per_sec: Option<f64>,
    #[serde(default, deserialize_with = "attributes::deserialize")]
    pub attributes: A,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct SpansBody<A = Attributes> {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::capped::<SpanInput, MAX_BATCH_OBJECTS>))]
    pub spans: Capped<SpanInput<A>, MAX_BATCH_OBJECTS>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct LogsBody<A = Attributes> {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::capped::<LogInput, MAX_BATCH_OBJECTS>))]
    pub logs: Capped<LogInput<A>, MAX_BATCH_OBJECTS>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(bound(deserialize = "A: AttributeSink"))]
pub struct MetricsBody<A = Attributes> {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::capped::<HostMetricInput, MAX_BATCH_OBJECTS>))]
    pub metrics: Capped<HostMetricInput<A>, MAX_BATCH_OBJECTS>,
}

/// Collects every problem of one object instead of stopping at the first.
struct Check<'a> {
    index: usize,
    errors: &'a mut Vec<FieldError>,
}

impl Check<'_> {
    fn fail(&mut self, field: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(self.index, field, reason));
    }

    fn id(&mut self, field: &str, value: &str) {
        if let Err(reason) = validate_id(value) {
            self.fail(field, reason);
        }
    }

    fn name(&mut self, field: &str, value: &str, max: usize) {
        if value.trim().is_empty() {
            self.fail(field, "must not be empty");
        } else if value.len() > max {
            self.fail(field, format!("must be at most {max} bytes"));
        }
    }

    fn time(&mut self, field: &str, value: &TimeInput) -> i64 {
        value.to_unix_nanos().unwrap_or_else(|reason| {
            self.fail(field, reason);
            0
        })
    }

    fn percent(&mut self, field: &str, value: Option<f64>) {
        if let Some(v) = value {
            if !(0.0..=100.0).contains(&v) {
                self.fail(field, "must be between 0 and 100");
            }
        }
    }

    fn non_negative(&mut self, field: &str, value: Option<f64>) {
        if let Some(v) = value {
            if !v.is_finite() || v < 0.0 {
                self.fail(field, "must be a finite number ≥ 0");
            }
        }
    }

    fn attributes(&mut self, attrs: &impl AttributeSink) {
        if let Err(reason) = attrs.check() {
            self.fail("attributes", reason);
        }
    }
}

/// Validates one span; appends its problems to `errors` and returns the stored form.
pub fn validate_span<A: AttributeSink>(
    index: usize,
    s: SpanInput<A>,
    errors: &mut Vec<FieldError>,
) -> Option<Span<A::Stored>> {
    let before = errors.len();
    let mut c = Check { index, errors };
    c.id("trace_id", &s.trace_id);
    c.id("span_id", &s.span_id);
    let parent = s.parent_span_id.unwrap_or_default();
    if !parent.is_empty() {
        c.id("parent_span_id", &parent);
    }
    c.name("service_name", &s.service_name, MAX_NAME_LEN);
    c.name("operation", &s.operation, MAX_OPERATION_LEN);
    let start = c.time("timestamp", &s.timestamp);
    let duration_nanos = match s.duration {
        DurationInput::Millis(ms) if !ms.is_finite() || ms < 0.0 => {
            c.fail("duration_ms", "must be a number ≥ 0");
            0
        }
        DurationInput::Millis(ms) if ms > MAX_DURATION_MS => {
            c.fail("duration_ms", "must be at most 30 days");
            0
        }
        DurationInput::Millis(ms) => (ms * 1e6).round() as u64,
        DurationInput::Nanos(ns) if ns > MAX_DURATION_NS => {
            c.fail("duration_ms", "must be at most 30 days");
            0
        }
        DurationInput::Nanos(ns) => ns,
    };
    let status = s.status.map_or(Some(SpanStatus::Unset), |k| k.0).unwrap_or_else(|| {
        c.fail("status", "must be one of ok, error, unset");
        SpanStatus::Unset
    });
    c.attributes(&s.attributes);
    (errors.len() == before).then(|| Span {
        trace_id: s.trace_id,
        span_id: s.span_id,
        parent_span_id: parent,
        service_name: s.service_name,
        operation: s.operation,
        start_unix_nanos: start,
        duration_nanos,
        status,
        attributes: s.attributes.stored(),
    })
}

/// `level` is case-insensitive on input and stored upper-case.
pub fn parse_level(level: &str) -> Option<LogLevel> {
    [LogLevel::Trace, LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error, LogLevel::Fatal]
        .into_iter()
        .find(|&l| level.eq_ignore_ascii_case(level_name(l)))
}

pub fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Trace => "TRACE",
        LogLevel::Debug => "DEBUG",
        LogLevel::Info | LogLevel::Unspecified => "INFO",
        LogLevel::Warn => "WARN",
        LogLevel::Error => "ERROR",
        LogLevel::Fatal => "FATAL",
    }
}

pub fn validate_log<A: AttributeSink>(
    index: usize,
    l: LogInput<A>,
    errors: &mut Vec<FieldError>,
) -> Option<LogRecord<A::Stored>> {
    let before = errors.len();
    let mut c = Check { index, errors };
    let ts = c.time("timestamp", &l.timestamp);
    let level = l.level.0;
    if level.is_none() {
        c.fail("level", "must be one of TRACE, DEBUG, INFO, WARN, ERROR, FATAL");
    }
    c.name("service", &l.service, MAX_NAME_LEN);
    if l.message.len() > MAX_MESSAGE_LEN {
        c.fail("message", format!("must be at most {MAX_MESSAGE_LEN} bytes"));
    }
    let trace_id = l.trace_id.unwrap_or_default();
    if !trace_id.is_empty() {
        c.id("trace_id", &trace_id);
    }
    let span_id = l.span_id.unwrap_or_default();
    if !span_id.is_empty() {
        c.id("span_id", &span_id);
    }
    c.attributes(&l.attributes);
    (errors.len() == before).then(|| LogRecord {
        unix_nanos: ts,
        level: level.unwrap_or(LogLevel::Info),
        service: l.service,
        message: l.message,
        trace_id,
        span_id,
        attributes: l.attributes.stored(),
    })
}

pub fn validate_host_metric<A: AttributeSink>(
    index: usize,
    m: HostMetricInput<A>,
    errors: &mut Vec<FieldError>,
) -> Option<HostMetric<A::Stored>> {
    let before = errors.len();
    let mut c = Check { index, errors };
    let ts = c.time("timestamp", &m.timestamp);
    c.name("hostname", &m.hostname, MAX_NAME_LEN);
    c.percent("cpu_percent", m.cpu_percent);
    c.percent("disk_used_percent", m.disk_used_percent);
    c.non_negative("network_rx_bytes_per_sec", m.network_rx_bytes_per_sec);
    c.non_negative("network_tx_bytes_per_sec", m.network_tx_bytes_per_sec);
    if let (Some(used), Some(total)) = (m.memory_used_bytes, m.memory_total_bytes) {
        if used > total {
            c.fail("memory_used_bytes", "must not exceed memory_total_bytes");
        }
    }
    c.attributes(&m.attributes);
    (errors.len() == before).then(|| HostMetric {
        unix_nanos: ts,
        hostname: m.hostname,
        cpu_percent: m.cpu_percent,
        memory_used_bytes: m.memory_used_bytes,
        memory_total_bytes: m.memory_total_bytes,
        disk_used_percent: m.disk_used_percent,
        network_rx_bytes_per_sec: m.network_rx_bytes_per_sec,
        network_tx_bytes_per_sec: m.network_tx_bytes_per_sec,
        attributes: m.attributes.stored(),
    })
}

/// Validates a whole batch: either every object is valid, or the list of every problem.
pub fn validate_all<T, U>(
    items: Vec<T>,
    validate: impl Fn(usize, T, &mut Vec<FieldError>) -> Option<U>,
) -> Result<Vec<U>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        if let Some(v) = validate(i, item, &mut errors) {
            out.push(v);
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(json: &str) -> Result<Vec<Span>, Vec<FieldError>> {
        let body: SpansBody = serde_json::from_str(json).unwrap();
        validate_all(body.spans.into_items().unwrap(), validate_span)
    }

    #[test]
    fn valid_span_is_stored_with_nanos() {
        let s = span(
            r#"{"spans":[{"trace_id":"t1","span_id":"s1","service_name":"api","operation":"GET /",
            "timestamp":"2026-11-22T10:15:30.123Z","duration_ms":1.5,"status":"ERROR","attributes":{"k":"v"}}]}"#,
        )
        .unwrap();
        assert_eq!(s[0].duration_nanos, 1_500_000);
        assert_eq!(s[0].status, SpanStatus::Error);
        assert_eq!(s[0].start_unix_nanos, 1_795_342_530_123_000_000);
    }

    #[test]
    fn every_problem_is_reported_with_index_and_field() {
        let errs = span(
            r#"{"spans":[{"trace_id":"t1","span_id":"s1","service_name":"api","operation":"op","timestamp":1,"duration_ms":1},
            {"trace_id":"","span_id":"s 1","service_name":" ","operation":"op","timestamp":"nope","duration_ms":-1,"status":"weird"}]}"#,
        )
        .unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| (e.index, e.field.as_str())).collect();
        assert_eq!(
            fields,
            vec![
                (1, "trace_id"),
                (1, "span_id"),
                (1, "service_name"),
                (1, "timestamp"),
                (1, "duration_ms"),
                (1, "status")
            ]
        );
    }

    #[test]
    fn log_level_is_case_insensitive_and_checked() {
        let body: LogsBody = serde_json::from_str(
            r#"{"logs":[{"timestamp":1,"level":"warn","service":"a","message":"m"},{"timestamp":1,"level":"loud","service":"a","message":"m"}]}"#,
        )
        .unwrap();
        let errs = validate_all(body.logs.into_items().unwrap(), validate_log).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!((errs[0].index, errs[0].field.as_str()), (1, "level"));
        assert_eq!(parse_level("Warn"), Some(LogLevel::Warn));
    }

    #[test]
    fn host_metric_ranges() {
        let body: MetricsBody = serde_json::from_str(
            r#"{"metrics":[{"timestamp":1,"hostname":"h","cpu_percent":101,"disk_used_percent":-1}]}"#,
        )
        .unwrap();
        let errs = validate_all(body.metrics.into_items().unwrap(), validate_host_metric).unwrap_err();
        assert_eq!(errs.len(), 2);
    }
}
