//! OTLP messages to the inputs the JSON API validates (docs/API.md, "OTLP"): each span, log
//! record and host's metrics becomes one `*Input`, then goes through the same validation. An
//! item that cannot be mapped or fails validation is rejected alone, counted and described.

use std::collections::{BTreeMap, HashMap};

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::ResourceLogs;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, AggregationTemporality, ResourceMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans};
use sextant_model::attributes::{AttributeSink, MAX_ATTRIBUTES};
use sextant_model::ingest::{
    self, DurationInput, FieldError, HostMetricInput, Keyword, LogInput, SpanInput, MAX_BATCH_OBJECTS,
};
use sextant_model::row::{Attribute, HostMetric, LogLevel, LogRecord, Span, SpanStatus, Value};
use sextant_model::time::TimeInput;

/// At most this many spans, log records or host samples are stored from one request; the rest
/// are rejected (partial success).
pub const MAX_OTLP_ITEMS: usize = 10 * MAX_BATCH_OBJECTS;

/// The service of a resource without `service.name`, as the OpenTelemetry SDKs name it.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// Resource and scope attributes copied into one span or log record: at most this many bytes
/// (each attribute counted with its key, value and fixed size); the rest are dropped.
pub const MAX_INHERITED_BYTES: usize = 4096;

/// At most this many rejection reasons are quoted in a partial-success message.
const MAX_REASONS: usize = 5;

/// The rows of one request that passed, and what was rejected and why.
#[derive(Debug)]
pub struct Mapped<T> {
    pub rows: Vec<T>,
    pub rejected: u64,
    reasons: Vec<String>,
}

impl<T> Default for Mapped<T> {
    fn default() -> Self {
        Self { rows: Vec::new(), rejected: 0, reasons: Vec::new() }
    }
}

impl<T> Mapped<T> {
    fn reject(&mut self, count: u64, reason: impl FnOnce() -> String) {
        self.rejected = self.rejected.saturating_add(count);
        if self.reasons.len() < MAX_REASONS {
            self.reasons.push(reason());
        }
    }

    /// One validated item, or its problems as a rejection. The input is built only while the
    /// request has room for more rows.
    fn validated<I>(
        &mut self,
        what: &str,
        input: impl FnOnce() -> Result<I, String>,
        validate: fn(usize, I, &mut Vec<FieldError>) -> Option<T>,
    ) {
        if self.rows.len() >= MAX_OTLP_ITEMS {
            return self.reject(1, || format!("at most {MAX_OTLP_ITEMS} {what}s are stored per request"));
        }
        let input = match input() {
            Ok(input) => input,
            Err(reason) => return self.reject(1, || format!("{what}: {reason}")),
        };
        let mut errors = Vec::new();
        match validate(0, input, &mut errors) {
            Some(row) => self.rows.push(row),
            None => self.reject(1, || {
                let problems: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.reason)).collect();
                format!("{what}: {}", problems.join("; "))
            }),
        }
    }

    /// The partial-success message: empty when nothing was rejected.
    pub fn message(&self) -> String {
        if self.rejected == 0 {
            return String::new();
        }
        let mut m = format!("{} rejected: {}", self.rejected, self.reasons.join(" | "));
        if self.rejected > self.reasons.len() as u64 {
            m.push_str(" | …");
        }
        m
    }
}

// ------------------------------------------------------------------------------ attributes

/// An OTLP value as an attribute value: scalars as they are, arrays of scalars as arrays,
/// bytes as lower-case hex, key-value lists and nested arrays as JSON text.
fn value(v: &AnyValue) -> Option<Value> {
    Some(match v.value.as_ref()? {
        any_value::Value::StringValue(s) => Value::String(s.clone()),
        any_value::Value::BoolValue(b) => Value::Bool(*b),
        any_value::Value::IntValue(i) => Value::Int(*i),
        any_value::Value::DoubleValue(d) => Value::Double(*d),
        any_value::Value::BytesValue(b) => Value::String(hex::encode(b)),
        any_value::Value::ArrayValue(a) => {
            let scalars: Option<Vec<Value>> = a.values.iter().map(scalar).collect();
            match scalars {
                Some(values) => Value::Array(values),
                None => Value::String(text(v)),
            }
        }
        any_value::Value::KvlistValue(_) => Value::String(text(v)),
        // Indexes into a profiles dictionary; meaningless outside profiles.
        any_value::Value::StringValueStrindex(_) => return None,
    })
}

fn scalar(v: &AnyValue) -> Option<Value> {
    match value(v)? {
        Value::Array(_) => None,
        other => Some(other),
    }
}

/// Any OTLP value as text: a string as it is, anything else as JSON.
pub fn text(v: &AnyValue) -> String {
    match v.value.as_ref() {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        _ => {
            let mut out = String::new();
            write_json(v, &mut out);
            out
        }
    }
}

/// Appends `v` as JSON, without building a tree first.
fn write_json(v: &AnyValue, out: &mut String) {
    use std::fmt::Write;
    fn string(s: &str, out: &mut String) {
        out.push_str(&serde_json::Value::String(s.to_owned()).to_string());
    }
    match v.value.as_ref() {
        None | Some(any_value::Value::StringValueStrindex(_)) => out.push_str("null"),
        Some(any_value::Value::StringValue(s)) => string(s, out),
        Some(any_value::Value::BoolValue(b)) => out.push_str(if *b { "true" } else { "false" }),
        Some(any_value::Value::IntValue(i)) => {
            let _ = write!(out, "{i}");
        }
        Some(any_value::Value::DoubleValue(d)) => match serde_json::Number::from_f64(*d) {
            Some(n) => out.push_str(&n.to_string()),
            None => out.push_str("null"),
        },
        Some(any_value::Value::BytesValue(b)) => string(&hex::encode(b), out),
        Some(any_value::Value::ArrayValue(a)) => {
            out.push('[');
            for (i, item) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Some(any_value::Value::KvlistValue(kv)) => {
            out.push('{');
            for (i, item) in kv.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(&item.key, out);
                out.push(':');
                match &item.value {
                    Some(v) => write_json(v, out),
                    None => out.push_str("null"),
                }
            }
            out.push('}');
        }
    }
}

/// Bytes a value holds beyond its fixed size.
fn value_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(|v| 16 + value_len(v)).sum(),
        Value::Int(_) | Value::Double(_) | Value::Bool(_) => 8,
    }
}

fn attribute(kv: &KeyValue) -> Attribute {
    Attribute { key: kv.key.clone(), value: kv.value.as_ref().and_then(value) }
}

fn string(key: &str, v: impl Into<String>) -> Attribute {
    Attribute { key: key.to_owned(), value: Some(Value::String(v.into())) }
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref())
}

fn find_str<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match find(attrs, key)?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// The attributes of a resource and a scope, added to an item's after its own.
struct Context {
    service: String,
    inherited: Vec<Attribute>,
}

impl Context {
    fn new(resource: Option<&Resource>, scope: Option<&InstrumentationScope>) -> Self {
        let resource = resource.map_or(&[][..], |r| &r.attributes);
        let service =
            find_str(resource, "service.name").filter(|s| !s.trim().is_empty()).unwrap_or(UNKNOWN_SERVICE).to_owned();
        let mut inherited = Vec::new();
        if let Some(scope) = scope {
            if !scope.name.is_empty() {
                inherited.push(string("otel.scope.name", scope.name.clone()));
            }
            if !scope.version.is_empty() {
                inherited.push(string("otel.scope.version", scope.version.clone()));
            }
            inherited.extend(scope.attributes.iter().map(attribute));
        }
        inherited.extend(resource.iter().filter(|kv| kv.key != "service.name").map(attribute));
        // Copied into every item: bounded, so a large resource does not multiply by the items.
        let mut bytes = 0usize;
        inherited.retain(|a| {
            let size = std::mem::size_of::<Attribute>() + a.key.len() + a.value.as_ref().map_or(0, value_len);
            bytes = bytes.saturating_add(size);
            bytes <= MAX_INHERITED_BYTES
        });
        Self { service, inherited }
    }

    /// `own` (the item's attributes and what the mapping adds), then the scope's and the
    /// resource's whose keys are not taken, while fewer than the attribute limit, in the sink
    /// `A` (which validation checks); an item whose own attributes pass the limit is left for
    /// validation to refuse.
    fn merge<A: Sink>(&self, mut own: Vec<Attribute>) -> A {
        for a in &self.inherited {
            if own.len() >= MAX_ATTRIBUTES {
                break;
            }
            if !own.iter().any(|o| o.key == a.key) {
                own.push(a.clone());
            }
        }
        A::from(own)
    }
}

/// Where mapped attributes go: values in tests, the stored encoding when ingesting, so that
/// each attribute is checked once, as it is written.
pub trait Sink: AttributeSink + From<Vec<Attribute>> {}

impl<A: AttributeSink + From<Vec<Attribute>>> Sink for A {}

/// An id as lower-case hex; `len` bytes, or none at all when `optional`.
fn id(bytes: &[u8], len: usize, field: &str, optional: bool) -> Result<Option<String>, String> {
    if bytes.is_empty() && optional {
        return Ok(None);
    }
    if bytes.len() != len || bytes.iter().all(|b| *b == 0) {
        return Err(format!("{field} must be {len} bytes, not all zero"));
    }
    Ok(Some(hex::encode(bytes)))
}

/// OTLP times are unsigned nanoseconds; past `i64` they are out of range like any other.
fn nanos(ns: u64) -> TimeInput {
    TimeInput::EpochNanos(i64::try_from(ns).unwrap_or(i64::MAX))
}

// ------------------------------------------------------------------------------ spans

pub fn spans<A: Sink>(resource_spans: &[ResourceSpans]) -> Mapped<Span<A::Stored>> {
    let mut out = Mapped::default();
    for rs in resource_spans {
        for ss in &rs.scope_spans {
            let ctx = Context::new(rs.resource.as_ref(), ss.scope.as_ref());
            for s in &ss.spans {
                out.validated("span", || span_input::<A>(&ctx, s), ingest::validate_span);
            }
        }
    }
    out
}

fn span_input<A: Sink>(ctx: &Context, s: &opentelemetry_proto::tonic::trace::v1::Span) -> Result<SpanInput<A>, String> {
    let trace_id = id(&s.trace_id, 16, "trace_id", false)?.unwrap_or_default();
    let span_id = id(&s.span_id, 8, "span_id", false)?.unwrap_or_default();
    let parent_span_id = id(&s.parent_span_id, 8, "parent_span_id", true)?;
    let duration = s
        .end_time_unix_nano
        .checked_sub(s.start_time_unix_nano)
        .ok_or("end_time_unix_nano is before start_time_unix_nano")?;
    let mut own: Vec<Attribute> = s.attributes.iter().map(attribute).collect();
    let kind = match span::SpanKind::try_from(s.kind).unwrap_or(span::SpanKind::Unspecified) {
        span::SpanKind::Unspecified => None,
        span::SpanKind::Internal => Some("internal"),
        span::SpanKind::Server => Some("server"),
        span::SpanKind::Client => Some("client"),
        span::SpanKind::Producer => Some("producer"),
        span::SpanKind::Consumer => Some("consumer"),
    };
    if let Some(kind) = kind {
        own.push(string("span.kind", kind));
    }
    let status = s.status.as_ref();
    let code = status.map_or(status::StatusCode::Unset, |st| {
        status::StatusCode::try_from(st.code).unwrap_or(status::StatusCode::Unset)
    });
    if let Some(message) = status.map(|st| &st.message).filter(|m| !m.is_empty()) {
        own.push(string("otel.status_description", message.clone()));
    }
    // The first exception event gives the span its exception.* attributes ("Error groups").
    if let Some(event) = s.events.iter().find(|e| e.name == "exception") {
        for key in ["exception.type", "exception.message", "exception.stacktrace", "exception.escaped"] {
            if let Some(kv) = event.attributes.iter().find(|kv| kv.key == key) {
                if !own.iter().any(|a| a.key == key) {
                    own.push(attribute(kv));
                }
            }
        }
    }
    let events: Vec<Value> = s.events.iter().take(MAX_LIST).map(|e| Value::String(e.name.clone())).collect();
    if !events.is_empty() {
        own.push(Attribute { key: "otel.events".into(), value: Some(Value::Array(events)) });
    }
    let links: Vec<Value> = s
        .links
        .iter()
        .take(MAX_LIST)
        .map(|l| Value::String(format!("{}-{}", hex::encode(&l.trace_id), hex::encode(&l.span_id))))
        .collect();
    if !links.is_empty() {
        own.push(Attribute { key: "otel.links".into(), value: Some(Value::Array(links)) });
    }
    Ok(SpanInput {
        trace_id,
        span_id,
        parent_span_id,
        service_name: ctx.service.clone(),
        operation: s.name.clone(),
        timestamp: nanos(s.start_time_unix_nano),
        duration: DurationInput::Nanos(duration),
        status: Some(Keyword(Some(match code {
            status::StatusCode::Unset => SpanStatus::Unset,
            status::StatusCode::Ok => SpanStatus::Ok,
            status::StatusCode::Error => SpanStatus::Error,
        }))),
        attributes: ctx.merge(own),
    })
}

/// Event names and links kept per span: an attribute array holds at most this many.
const MAX_LIST: usize = sextant_model::attributes::MAX_ARRAY_LEN;

// ------------------------------------------------------------------------------ logs

pub fn logs<A: Sink>(resource_logs: &[ResourceLogs]) -> Mapped<LogRecord<A::Stored>> {
    let mut out = Mapped::default();
    for rl in resource_logs {
        for sl in &rl.scope_logs {
            let ctx = Context::new(rl.resource.as_ref(), sl.scope.as_ref());
            for l in &sl.log_records {
                out.validated("log record", || log_input::<A>(&ctx, l), ingest::validate_log);
            }
        }
    }
    out
}

/// OTLP severity numbers 1–24 in six ranges of four; else the severity text (a level's name,
/// `WARNING` or `CRITICAL`, any case); else INFO.
pub fn level(severity_number: i32, severity_text: &str) -> LogLevel {
    match severity_number {
        1..=4 => LogLevel::Trace,
        5..=8 => LogLevel::Debug,
        9..=12 => LogLevel::Info,
        13..=16 => LogLevel::Warn,
        17..=20 => LogLevel::Error,
        21..=24 => LogLevel::Fatal,
        _ => match severity_text.trim() {
            t if t.eq_ignore_ascii_case("WARNING") => LogLevel::Warn,
            t if t.eq_ignore_ascii_case("CRITICAL") => LogLevel::Fatal,
            t => ingest::parse_level(t).unwrap_or(LogLevel::Info),
        },
    }
}

fn log_input<A: Sink>(
    ctx: &Context,
    l: &opentelemetry_proto::tonic::logs::v1::LogRecord,
) -> Result<LogInput<A>, String> {
    let time = match (l.time_unix_nano, l.observed_time_unix_nano) {
        (0, 0) => return Err("neither time_unix_nano nor observed_time_unix_nano is set".into()),
        (0, observed) => observed,
        (t, _) => t,
    };
    let mut own: Vec<Attribute> = l.attributes.iter().map(attribute).collect();
    if !l.event_name.is_empty() {
        own.push(string("event.name", l.event_name.clone()));
    }
    Ok(LogInput {
        timestamp: nanos(time),
        level: Keyword(Some(level(l.severity_number, &l.severity_text))),
        service: ctx.service.clone(),
        message: l.body.as_ref().map(text).unwrap_or_default(),
        trace_id: id(&l.trace_id, 16, "trace_id", true)?,
        span_id: id(&l.span_id, 8, "span_id", true)?,
        attributes: ctx.merge(own),
    })
}

// ------------------------------------------------------------------------------ host metrics

/// Points of one host within this many nanoseconds of the first are one sample: the metrics of
/// one collection arrive with slightly different times.
const SAMPLE_WINDOW_NS: u64 = 5_000_000_000;

/// What the data points of one host and collection say.
#[derive(Default)]
struct Sample {
    /// Data points that make this sample; rejected together if it is invalid.
    points: u64,
    time: u64,
    /// Per CPU (attribute `cpu`, `""` without): utilization by state.
    cpu: BTreeMap<String, Vec<(Option<String>, f64)>>,
    memory_by_state: Vec<(Option<String>, f64)>,
    memory_utilization: Option<f64>,
    memory_limit: Option<f64>,
    /// Per filesystem: utilization in percent.
    filesystem: Vec<f64>,
    /// Per filesystem (device and mount point): usage by state.
    filesystem_usage: BTreeMap<String, Vec<(Option<String>, f64)>>,
    rx_per_sec: Option<f64>,
    tx_per_sec: Option<f64>,
}

pub fn host_metrics<A: Sink>(resource_metrics: &[ResourceMetrics]) -> Mapped<HostMetric<A::Stored>> {
    let mut out = Mapped::default();
    // Host -> collection start -> sample.
    let mut hosts: HashMap<String, BTreeMap<u64, Sample>> = HashMap::new();
    for rm in resource_metrics {
        let resource = rm.resource.as_ref().map_or(&[][..], |r| &r.attributes);
        let hostname = find_str(resource, "host.name").filter(|h| !h.trim().is_empty());
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let points = points(m.data.as_ref());
                if points.is_empty() {
                    continue;
                }
                let count = points.len() as u64;
                let Some(kind) = HostMetricKind::of(&m.name) else {
                    out.reject(count, || {
                        format!(
                            "metric `{}`: only the host metrics listed in docs/API.md, \"OTLP\", are stored",
                            m.name
                        )
                    });
                    continue;
                };
                let Some(hostname) = hostname else {
                    out.reject(count, || {
                        format!("metric `{}`: host metrics need the host.name resource attribute", m.name)
                    });
                    continue;
                };
                let samples = hosts.entry(hostname.to_owned()).or_default();
                for p in points {
                    let Some(v) = p.value.filter(|v| v.is_finite()) else {
                        out.reject(1, || format!("metric `{}`: a data point without a finite value", m.name));
                        continue;
                    };
                    if kind == HostMetricKind::NetworkIo && p.temporality != AggregationTemporality::Delta {
                        out.reject(1, || {
                            format!(
                                "metric `{}`: a cumulative counter cannot become a rate here; send delta temporality",
                                m.name
                            )
                        });
                        continue;
                    }
                    let start = samples.range(..=p.time).next_back().map(|(t, _)| *t);
                    let key = match start {
                        Some(t) if p.time - t <= SAMPLE_WINDOW_NS => t,
                        _ => p.time,
                    };
                    let sample = samples.entry(key).or_default();
                    sample.points += 1;
                    sample.time = sample.time.max(p.time);
                    kind.record(sample, &p, v);
                }
            }
        }
    }
    for (hostname, samples) in hosts {
        for sample in samples.into_values() {
            let points = sample.points;
            let before = out.rejected;
            out.validated("host sample", || host_input::<A>(&hostname, sample), ingest::validate_host_metric);
            // A refused sample rejects every point it was made of.
            if out.rejected > before {
                out.rejected = out.rejected.saturating_add(points.saturating_sub(1));
            }
        }
    }
    out
}

/// One data point, as far as host metrics need it.
struct Point<'a> {
    time: u64,
    start: u64,
    value: Option<f64>,
    temporality: AggregationTemporality,
    attributes: &'a [KeyValue],
}

impl Point<'_> {
    fn attr(&self, key: &str) -> Option<String> {
        find(self.attributes, key).map(text)
    }
}

fn points(data: Option<&metric::Data>) -> Vec<Point<'_>> {
    let number = |p: &number_data_point::Value| match p {
        number_data_point::Value::AsDouble(d) => *d,
        number_data_point::Value::AsInt(i) => *i as f64,
    };
    match data {
        Some(metric::Data::Gauge(g)) => g
            .data_points
            .iter()
            .map(|p| Point {
                time: p.time_unix_nano,
                start: p.start_time_unix_nano,
                value: p.value.as_ref().map(number),
                temporality: AggregationTemporality::Unspecified,
                attributes: &p.attributes,
            })
            .collect(),
        Some(metric::Data::Sum(s)) => s
            .data_points
            .iter()
            .map(|p| Point {
                time: p.time_unix_nano,
                start: p.start_time_unix_nano,
                value: p.value.as_ref().map(number),
                temporality: AggregationTemporality::try_from(s.aggregation_temporality)
                    .unwrap_or(AggregationTemporality::Unspecified),
                attributes: &p.attributes,
            })
            .collect(),
        // Histograms and summaries are never host metrics; each point is rejected.
        Some(metric::Data::Histogram(h)) => {
            h.data_points.iter().map(|p| opaque(p.time_unix_nano, &p.attributes)).collect()
        }
        Some(metric::Data::ExponentialHistogram(h)) => {
            h.data_points.iter().map(|p| opaque(p.time_unix_nano, &p.attributes)).collect()
        }
        Some(metric::Data::Summary(s)) => {
            s.data_points.iter().map(|p| opaque(p.time_unix_nano, &p.attributes)).collect()
        }
        None => Vec::new(),
    }
}

fn opaque(time: u64, attributes: &[KeyValue]) -> Point<'_> {
    Point { time, start: 0, value: None, temporality: AggregationTemporality::Unspecified, attributes }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostMetricKind {
    CpuUtilization,
    MemoryUsage,
    MemoryUtilization,
    MemoryLimit,
    FilesystemUtilization,
    FilesystemUsage,
    NetworkIo,
}

impl HostMetricKind {
    fn of(name: &str) -> Option<Self> {
        Some(match name {
            "system.cpu.utilization" => Self::CpuUtilization,
            "system.memory.usage" => Self::MemoryUsage,
            "system.memory.utilization" => Self::MemoryUtilization,
            "system.memory.limit" => Self::MemoryLimit,
            "system.filesystem.utilization" => Self::FilesystemUtilization,
            "system.filesystem.usage" => Self::FilesystemUsage,
            "system.network.io" => Self::NetworkIo,
            _ => return None,
        })
    }

    fn record(self, s: &mut Sample, p: &Point<'_>, v: f64) {
        let state = p.attr("state").or_else(|| p.attr("system.memory.state")).or_else(|| p.attr("system.cpu.state"));
        match self {
            Self::CpuUtilization => {
                let cpu = p.attr("cpu").or_else(|| p.attr("system.cpu.logical_number")).unwrap_or_default();
                s.cpu.entry(cpu).or_default().push((state, v));
            }
            Self::MemoryUsage => s.memory_by_state.push((state, v)),
            Self::MemoryUtilization => {
                if state.as_deref().is_none_or(|st| st == "used") {
                    s.memory_utilization = Some(v);
                }
            }
            Self::MemoryLimit => s.memory_limit = Some(v),
            Self::FilesystemUtilization => s.filesystem.push(v * 100.0),
            Self::FilesystemUsage => {
                let device = p.attr("device").or_else(|| p.attr("system.device")).unwrap_or_default();
                let mount = p.attr("mountpoint").or_else(|| p.attr("system.filesystem.mountpoint")).unwrap_or_default();
                s.filesystem_usage.entry(format!("{device}\u{0}{mount}")).or_default().push((state, v));
            }
            Self::NetworkIo => {
                let seconds = p.time.saturating_sub(p.start) as f64 / 1e9;
                if seconds <= 0.0 {
                    return;
                }
                let direction = p.attr("direction").or_else(|| p.attr("network.io.direction"));
                let slot = match direction.as_deref() {
                    Some("receive") => &mut s.rx_per_sec,
                    Some("transmit") => &mut s.tx_per_sec,
                    _ => return,
                };
                // Interfaces add up.
                *slot = Some(slot.unwrap_or(0.0) + v / seconds);
            }
        }
    }
}

/// Busy share of one CPU's states: 1 − idle when idle is reported, else the sum.
fn busy(states: &[(Option<String>, f64)]) -> f64 {
    match states.iter().find(|(s, _)| s.as_deref() == Some("idle")) {
        Some((_, idle)) => 1.0 - idle,
        None => states.iter().map(|(_, v)| v).sum(),
    }
}

/// Percentages a float's rounding put just outside 0–100 are brought back in.
fn percent(p: f64) -> f64 {
    if (-1e-6..0.0).contains(&p) {
        0.0
    } else if (100.0..100.0 + 1e-6).contains(&p) {
        100.0
    } else {
        p
    }
}

/// Bytes as a client sent them, as an integer, if they are a whole non-negative number that fits.
fn bytes(v: f64) -> Result<u64, String> {
    if v.is_finite() && v >= 0.0 && v < u64::MAX as f64 {
        Ok(v.round() as u64)
    } else {
        Err(format!("memory bytes must be a finite number ≥ 0, got {v}"))
    }
}

fn host_input<A: Sink>(hostname: &str, s: Sample) -> Result<HostMetricInput<A>, String> {
    let cpu_percent = (!s.cpu.is_empty())
        .then(|| percent(100.0 * s.cpu.values().map(|st| busy(st)).sum::<f64>() / s.cpu.len() as f64));
    let used = s.memory_by_state.iter().find(|(st, _)| st.as_deref() == Some("used")).map(|(_, v)| *v);
    let total = s
        .memory_limit
        .or_else(|| (!s.memory_by_state.is_empty()).then(|| s.memory_by_state.iter().map(|(_, v)| v).sum::<f64>()));
    // Utilization gives bytes only with a total to scale.
    let used = used.or_else(|| Some(s.memory_utilization? * total?));
    if s.memory_utilization.is_some() && used.is_none() {
        return Err("system.memory.utilization needs system.memory.usage or system.memory.limit for bytes".into());
    }
    let filesystem_usage = s.filesystem_usage.values().filter_map(|states| {
        let all: f64 = states.iter().map(|(_, v)| v).sum();
        let used: f64 = states.iter().filter(|(st, _)| st.as_deref() == Some("used")).map(|(_, v)| v).sum();
        (all > 0.0).then(|| 100.0 * used / all)
    });
    let disk = s
        .filesystem
        .iter()
        .copied()
        .chain(filesystem_usage)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    Ok(HostMetricInput {
        timestamp: nanos(s.time),
        hostname: hostname.to_owned(),
        cpu_percent,
        memory_used_bytes: used.map(bytes).transpose()?,
        memory_total_bytes: total.map(bytes).transpose()?,
        disk_used_percent: disk.map(percent),
        network_rx_bytes_per_sec: s.rx_per_sec,
        network_tx_bytes_per_sec: s.tx_per_sec,
        attributes: A::default(),
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLog, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{Gauge, Metric, NumberDataPoint, ScopeMetrics, Sum};
    use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
    use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span as OtlpSpan, Status as OtlpStatus};
    use sextant_model::row::{LogLevel, SpanStatus};

    use super::*;
    use sextant_model::attributes::Attributes;

    const T0: u64 = 1_795_342_530_123_456_789;

    // The mappings with attributes as values, to compare.
    fn spans(rs: &[ResourceSpans]) -> Mapped<Span> {
        super::spans::<Attributes>(rs)
    }

    fn logs(rl: &[ResourceLogs]) -> Mapped<LogRecord> {
        super::logs::<Attributes>(rl)
    }

    fn host_metrics(rm: &[ResourceMetrics]) -> Mapped<HostMetric> {
        super::host_metrics::<Attributes>(rm)
    }

    fn kv(key: &str, v: any_value::Value) -> KeyValue {
        KeyValue { key: key.into(), value: Some(AnyValue { value: Some(v) }), ..Default::default() }
    }

    fn s(v: &str) -> any_value::Value {
        any_value::Value::StringValue(v.into())
    }

    fn resource(attrs: Vec<KeyValue>) -> Option<Resource> {
        Some(Resource { attributes: attrs, ..Default::default() })
    }

    fn get<'a>(attrs: &'a [Attribute], key: &str) -> Option<&'a Value> {
        attrs.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref())
    }

    fn otlp_span(trace: u8, span: u8) -> OtlpSpan {
        OtlpSpan {
            trace_id: vec![trace; 16],
            span_id: vec![span; 8],
            name: "GET /orders".into(),
            start_time_unix_nano: T0,
            end_time_unix_nano: T0 + 1_500_001,
            ..Default::default()
        }
    }

    fn traces(spans: Vec<OtlpSpan>) -> Vec<ResourceSpans> {
        vec![ResourceSpans {
            resource: resource(vec![kv("service.name", s("checkout")), kv("host.name", s("web-1"))]),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "my.lib".into(),
                    version: "1.2".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }]
    }

    #[test]
    fn a_span_keeps_service_kind_status_exception_links_and_scope() {
        let mut span = otlp_span(0xab, 0x01);
        span.parent_span_id = vec![0x02; 8];
        span.kind = span::SpanKind::Server as i32;
        span.status = Some(OtlpStatus { code: status::StatusCode::Error as i32, message: "boom".into() });
        span.attributes = vec![kv("http.route", s("/orders")), kv("host.name", s("overridden"))];
        span.events = vec![Event {
            name: "exception".into(),
            attributes: vec![
                kv("exception.type", s("ValueError")),
                kv("exception.message", s("order 4411 failed")),
                kv("exception.stacktrace", s("Traceback ...")),
            ],
            ..Default::default()
        }];
        span.links = vec![Link { trace_id: vec![0xcd; 16], span_id: vec![0x03; 8], ..Default::default() }];
        let out = spans(&traces(vec![span]));
        assert_eq!((out.rejected, out.message()), (0, String::new()));
        let row = &out.rows[0];
        assert_eq!(row.trace_id, "ab".repeat(16));
        assert_eq!(row.span_id, "01".repeat(8));
        assert_eq!(row.parent_span_id, "02".repeat(8));
        assert_eq!(row.service_name, "checkout");
        assert_eq!(row.operation, "GET /orders");
        assert_eq!(row.start_unix_nanos, T0 as i64);
        // Nanoseconds exactly, not through milliseconds.
        assert_eq!(row.duration_nanos, 1_500_001);
        assert_eq!(row.status, SpanStatus::Error);
        let a = &row.attributes;
        assert_eq!(get(a, "span.kind"), Some(&Value::String("server".into())));
        assert_eq!(get(a, "otel.status_description"), Some(&Value::String("boom".into())));
        assert_eq!(get(a, "exception.type"), Some(&Value::String("ValueError".into())));
        assert_eq!(get(a, "exception.message"), Some(&Value::String("order 4411 failed".into())));
        assert_eq!(get(a, "otel.events"), Some(&Value::Array(vec![Value::String("exception".into())])));
        let link = format!("{}-{}", "cd".repeat(16), "03".repeat(8));
        assert_eq!(get(a, "otel.links"), Some(&Value::Array(vec![Value::String(link)])));
        assert_eq!(get(a, "otel.scope.name"), Some(&Value::String("my.lib".into())));
        assert_eq!(get(a, "otel.scope.version"), Some(&Value::String("1.2".into())));
        // The span's own attribute wins over the resource's; service.name is not repeated.
        assert_eq!(get(a, "host.name"), Some(&Value::String("overridden".into())));
        assert_eq!(a.iter().filter(|x| x.key == "host.name").count(), 1);
        assert_eq!(get(a, "service.name"), None);
    }

    #[test]
    fn invalid_spans_are_rejected_one_by_one_with_their_reasons() {
        let mut short_id = otlp_span(1, 1);
        short_id.trace_id = vec![1; 8];
        let mut backwards = otlp_span(2, 2);
        backwards.end_time_unix_nano = T0 - 1;
        let mut nameless = otlp_span(3, 3);
        nameless.name = " ".into();
        let mut too_long = otlp_span(4, 4);
        too_long.end_time_unix_nano = T0 + MAX_DURATION_NS_FOR_TEST + 1;
        let mut past_i64 = otlp_span(5, 5);
        past_i64.start_time_unix_nano = u64::MAX - 10;
        past_i64.end_time_unix_nano = u64::MAX;
        let out = spans(&traces(vec![short_id, otlp_span(9, 9), backwards, nameless, too_long, past_i64]));
        assert_eq!(out.rows.len(), 1);
        assert_eq!(out.rows[0].trace_id, "09".repeat(16));
        assert_eq!(out.rejected, 5);
        let m = out.message();
        for reason in [
            "trace_id must be 16 bytes",
            "end_time_unix_nano is before start_time_unix_nano",
            "operation: must not be empty",
            "duration_ms: must be at most 30 days",
            "timestamp: must be from 1970",
        ] {
            assert!(m.contains(reason), "{m:?} lacks {reason:?}");
        }
    }

    const MAX_DURATION_NS_FOR_TEST: u64 = sextant_model::ingest::MAX_DURATION_NS;

    #[test]
    fn a_span_without_service_name_is_the_unknown_service() {
        let mut rs = traces(vec![otlp_span(1, 1)]);
        rs[0].resource = None;
        assert_eq!(spans(&rs).rows[0].service_name, UNKNOWN_SERVICE);
    }

    #[test]
    fn resource_attributes_are_copied_within_a_byte_and_a_count_limit() {
        let many: Vec<KeyValue> = (0..200).map(|i| kv(&format!("r{i}"), s("v"))).collect();
        let mut rs = traces(vec![otlp_span(1, 1)]);
        rs[0].resource.as_mut().unwrap().attributes.extend(many);
        let out = spans(&rs);
        assert_eq!(out.rejected, 0);
        let copied = &out.rows[0].attributes;
        let bytes: usize = copied
            .iter()
            .map(|a| std::mem::size_of::<Attribute>() + a.key.len() + a.value.as_ref().map_or(0, value_len))
            .sum();
        assert!(bytes <= MAX_INHERITED_BYTES, "{bytes} bytes copied");
        assert!(copied.len() > 20 && copied.len() < 200, "{} copied", copied.len());
        // The scope's first, then the resource's in order.
        assert_eq!(copied[0].key, "otel.scope.name");
        assert!(get(copied, "r0").is_some());
        assert!(get(copied, "r199").is_none());

        // The span's own attributes come first; the copies stop at the count limit.
        let mut span = otlp_span(2, 2);
        span.attributes = (0..MAX_ATTRIBUTES - 3).map(|i| kv(&format!("a{i}"), s("v"))).collect();
        let out = spans(&traces(vec![span]));
        assert_eq!(out.rejected, 0);
        assert_eq!(out.rows[0].attributes.len(), MAX_ATTRIBUTES);

        // Its own attributes past the limit are refused, as the JSON API refuses them.
        let mut span = otlp_span(2, 2);
        span.attributes = (0..=MAX_ATTRIBUTES).map(|i| kv(&format!("a{i}"), s("v"))).collect();
        let out = spans(&traces(vec![span]));
        assert_eq!(out.rejected, 1);
        assert!(out.message().contains("attributes: at most 128 attributes"), "{}", out.message());
    }

    #[test]
    fn values_become_scalars_arrays_or_json_text() {
        let arr = any_value::Value::ArrayValue(ArrayValue {
            values: vec![AnyValue { value: Some(s("a")) }, AnyValue { value: Some(any_value::Value::IntValue(2)) }],
        });
        let nested = any_value::Value::KvlistValue(KeyValueList { values: vec![kv("k", s("v"))] });
        let mut span = otlp_span(1, 1);
        span.attributes = vec![
            kv("arr", arr),
            kv("map", nested),
            kv("bytes", any_value::Value::BytesValue(vec![0xde, 0xad])),
            kv("d", any_value::Value::DoubleValue(0.5)),
        ];
        let out = spans(&traces(vec![span]));
        let a = &out.rows[0].attributes;
        assert_eq!(get(a, "arr"), Some(&Value::Array(vec![Value::String("a".into()), Value::Int(2)])));
        assert_eq!(get(a, "map"), Some(&Value::String(r#"{"k":"v"}"#.into())));
        assert_eq!(get(a, "bytes"), Some(&Value::String("dead".into())));
        assert_eq!(get(a, "d"), Some(&Value::Double(0.5)));
    }

    fn otlp_logs(records: Vec<OtlpLog>) -> Vec<ResourceLogs> {
        vec![ResourceLogs {
            resource: resource(vec![kv("service.name", s("billing"))]),
            scope_logs: vec![ScopeLogs { log_records: records, ..Default::default() }],
            ..Default::default()
        }]
    }

    #[test]
    fn log_severity_body_and_ids_map_onto_the_log_line() {
        let warn = OtlpLog {
            time_unix_nano: T0,
            severity_number: 14,
            body: Some(AnyValue { value: Some(s("disk almost full")) }),
            trace_id: vec![0xab; 16],
            span_id: vec![0x01; 8],
            event_name: "disk.check".into(),
            ..Default::default()
        };
        let by_text = OtlpLog {
            observed_time_unix_nano: T0 + 1,
            severity_text: "critical".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList { values: vec![kv("a", s("b"))] })),
            }),
            ..Default::default()
        };
        let out = logs(&otlp_logs(vec![warn, by_text]));
        assert_eq!(out.rejected, 0, "{}", out.message());
        let (w, c) = (&out.rows[0], &out.rows[1]);
        assert_eq!((w.level, w.service.as_str(), w.message.as_str()), (LogLevel::Warn, "billing", "disk almost full"));
        assert_eq!((w.trace_id.as_str(), w.span_id.as_str()), ("ab".repeat(16).as_str(), "01".repeat(8).as_str()));
        assert_eq!(get(&w.attributes, "event.name"), Some(&Value::String("disk.check".into())));
        assert_eq!((c.level, c.message.as_str(), c.unix_nanos), (LogLevel::Fatal, r#"{"a":"b"}"#, T0 as i64 + 1));
        assert_eq!((c.trace_id.as_str(), c.span_id.as_str()), ("", ""));
    }

    #[test]
    fn severity_numbers_fall_into_six_levels() {
        let name = |n, text| ingest::level_name(level(n, text));
        let levels: Vec<&str> = [1, 4, 5, 9, 13, 17, 21, 24].iter().map(|n| name(*n, "")).collect();
        assert_eq!(levels, ["TRACE", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "FATAL"]);
        assert_eq!(name(0, "Warning"), "WARN");
        assert_eq!(name(0, ""), "INFO");
        assert_eq!(name(99, "error"), "ERROR");
    }

    #[test]
    fn a_log_without_time_or_with_a_bad_id_is_rejected_alone() {
        let timeless = OtlpLog { body: Some(AnyValue { value: Some(s("x")) }), ..Default::default() };
        let bad_span = OtlpLog { time_unix_nano: T0, span_id: vec![1; 3], ..Default::default() };
        let fine = OtlpLog { time_unix_nano: T0, ..Default::default() };
        let out = logs(&otlp_logs(vec![timeless, bad_span, fine]));
        assert_eq!((out.rows.len(), out.rejected), (1, 2));
        assert!(out.message().contains("span_id must be 8 bytes"), "{}", out.message());
    }

    fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
        Metric {
            name: name.into(),
            data: Some(metric::Data::Gauge(Gauge { data_points: points })),
            ..Default::default()
        }
    }

    fn point(time: u64, v: f64, attrs: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            time_unix_nano: time,
            value: Some(number_data_point::Value::AsDouble(v)),
            attributes: attrs,
            ..Default::default()
        }
    }

    fn host(metrics: Vec<Metric>) -> Vec<ResourceMetrics> {
        vec![ResourceMetrics {
            resource: resource(vec![kv("host.name", s("db-1")), kv("service.name", s("agent"))]),
            scope_metrics: vec![ScopeMetrics { metrics, ..Default::default() }],
            ..Default::default()
        }]
    }

    #[test]
    fn system_metrics_become_one_host_sample() {
        let state = |st: &str| kv("state", s(st));
        let cpu = |c: &str, st: &str| vec![kv("cpu", s(c)), kv("state", s(st))];
        let network = Metric {
            name: "system.network.io".into(),
            data: Some(metric::Data::Sum(Sum {
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: true,
                data_points: vec![
                    NumberDataPoint {
                        start_time_unix_nano: T0 - 10_000_000_000,
                        time_unix_nano: T0,
                        value: Some(number_data_point::Value::AsInt(5000)),
                        attributes: vec![kv("direction", s("receive")), kv("device", s("eth0"))],
                        ..Default::default()
                    },
                    NumberDataPoint {
                        start_time_unix_nano: T0 - 10_000_000_000,
                        time_unix_nano: T0,
                        value: Some(number_data_point::Value::AsInt(1000)),
                        attributes: vec![kv("direction", s("transmit")), kv("device", s("eth0"))],
                        ..Default::default()
                    },
                ],
            })),
            ..Default::default()
        };
        let metrics = vec![
            gauge(
                "system.cpu.utilization",
                vec![
                    point(T0, 0.8, cpu("0", "idle")),
                    point(T0, 0.15, cpu("0", "user")),
                    point(T0, 0.4, cpu("1", "idle")),
                ],
            ),
            // Another metric of the same collection, a millisecond later: the same sample.
            gauge(
                "system.memory.usage",
                vec![point(T0 + 1_000_000, 3e9, vec![state("used")]), point(T0 + 1_000_000, 1e9, vec![state("free")])],
            ),
            gauge("system.filesystem.utilization", vec![point(T0, 0.25, vec![]), point(T0, 0.75, vec![])]),
            network,
        ];
        let out = host_metrics(&host(metrics));
        assert_eq!((out.rejected, out.rows.len()), (0, 1), "{}", out.message());
        let h = &out.rows[0];
        assert_eq!(h.hostname, "db-1");
        assert_eq!(h.unix_nanos, T0 as i64 + 1_000_000);
        // Busy: (1 − 0.8) and (1 − 0.4), averaged over the two CPUs.
        assert!((h.cpu_percent.unwrap() - 40.0).abs() < 1e-9, "{:?}", h.cpu_percent);
        assert_eq!((h.memory_used_bytes, h.memory_total_bytes), (Some(3_000_000_000), Some(4_000_000_000)));
        assert_eq!(h.disk_used_percent, Some(75.0));
        assert_eq!((h.network_rx_bytes_per_sec, h.network_tx_bytes_per_sec), (Some(500.0), Some(100.0)));
    }

    #[test]
    fn other_metrics_and_unusable_points_are_rejected_with_a_reason() {
        let cumulative = Metric {
            name: "system.network.io".into(),
            data: Some(metric::Data::Sum(Sum {
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                data_points: vec![point(T0, 1e6, vec![kv("direction", s("receive"))])],
                ..Default::default()
            })),
            ..Default::default()
        };
        let metrics = vec![
            gauge("http.server.duration", vec![point(T0, 1.0, vec![]), point(T0, 2.0, vec![])]),
            gauge("system.cpu.utilization", vec![point(T0, 0.5, vec![])]),
            cumulative,
        ];
        let out = host_metrics(&host(metrics));
        assert_eq!(out.rows.len(), 1);
        assert_eq!(out.rows[0].cpu_percent, Some(50.0));
        assert_eq!(out.rejected, 3);
        let m = out.message();
        assert!(m.contains("metric `http.server.duration`: only the host metrics"), "{m}");
        assert!(m.contains("send delta temporality"), "{m}");
        // Without host.name nothing can be stored.
        let mut rm = host(vec![gauge("system.cpu.utilization", vec![point(T0, 0.5, vec![])])]);
        rm[0].resource = None;
        let out = host_metrics(&rm);
        assert_eq!((out.rows.len(), out.rejected), (0, 1));
        assert!(out.message().contains("host.name resource attribute"), "{}", out.message());
    }

    #[test]
    fn an_invalid_host_sample_rejects_all_its_points() {
        let metrics = vec![gauge("system.cpu.utilization", vec![point(T0, 1.5, vec![]), point(T0, 0.2, vec![])])];
        let out = host_metrics(&host(metrics));
        assert_eq!((out.rows.len(), out.rejected), (0, 2));
        assert!(out.message().contains("cpu_percent: must be between 0 and 100"), "{}", out.message());
    }

    #[test]
    fn a_request_stores_at_most_the_item_cap() {
        let spans_in: Vec<OtlpSpan> = (0..MAX_OTLP_ITEMS + 3).map(|_| otlp_span(1, 1)).collect();
        let out = spans(&traces(spans_in));
        assert_eq!((out.rows.len(), out.rejected), (MAX_OTLP_ITEMS, 3));
        assert!(out.message().contains("at most 10000 spans"), "{}", out.message());
    }
}
