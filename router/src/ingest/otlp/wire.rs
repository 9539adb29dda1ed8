//! What decoding an OTLP message will cost, known before it is decoded: a protobuf message two
//! bytes long can become a struct of hundreds of bytes (an empty span in a batch of them is
//! 170 times its encoding), so the body budget is charged from a walk of the encoded message
//! with the OTLP schema's message fields, not from its length.

use std::mem::size_of;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1 as common;
use opentelemetry_proto::tonic::logs::v1 as logs;
use opentelemetry_proto::tonic::metrics::v1 as metrics;
use opentelemetry_proto::tonic::resource::v1 as resource;
use opentelemetry_proto::tonic::trace::v1 as trace;

use super::mapping::{MAX_INHERITED_BYTES, MAX_OTLP_ITEMS};

/// The export request a body holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Traces,
    Logs,
    Metrics,
}

/// Message types of the OTLP export requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum M {
    TraceRequest,
    LogsRequest,
    MetricsRequest,
    ResourceSpans,
    ResourceLogs,
    ResourceMetrics,
    Resource,
    EntityRef,
    ScopeSpans,
    ScopeLogs,
    ScopeMetrics,
    Scope,
    Span,
    Event,
    Link,
    Status,
    LogRecord,
    Metric,
    Gauge,
    Sum,
    Histogram,
    ExponentialHistogram,
    Summary,
    NumberDataPoint,
    HistogramDataPoint,
    ExponentialHistogramDataPoint,
    Buckets,
    SummaryDataPoint,
    ValueAtQuantile,
    Exemplar,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

impl M {
    /// The message type of field `field`, when it is a message.
    fn child(self, field: u64) -> Option<M> {
        use M::*;
        Some(match (self, field) {
            (TraceRequest, 1) => ResourceSpans,
            (LogsRequest, 1) => ResourceLogs,
            (MetricsRequest, 1) => ResourceMetrics,
            (ResourceSpans | ResourceLogs | ResourceMetrics, 1) => Resource,
            (ResourceSpans, 2) => ScopeSpans,
            (ResourceLogs, 2) => ScopeLogs,
            (ResourceMetrics, 2) => ScopeMetrics,
            (Resource, 1) => KeyValue,
            (Resource, 3) => EntityRef,
            (ScopeSpans | ScopeLogs | ScopeMetrics, 1) => Scope,
            (ScopeSpans, 2) => Span,
            (ScopeLogs, 2) => LogRecord,
            (ScopeMetrics, 2) => Metric,
            (Scope, 3) => KeyValue,
            (Span, 9) => KeyValue,
            (Span, 11) => Event,
            (Span, 13) => Link,
            (Span, 15) => Status,
            (Event, 3) | (Link, 4) => KeyValue,
            (LogRecord, 5) => AnyValue,
            (LogRecord, 6) => KeyValue,
            (Metric, 5) => Gauge,
            (Metric, 7) => Sum,
            (Metric, 9) => Histogram,
            (Metric, 10) => ExponentialHistogram,
            (Metric, 11) => Summary,
            (Metric, 12) => KeyValue,
            (Gauge | Sum, 1) => NumberDataPoint,
            (Histogram, 1) => HistogramDataPoint,
            (ExponentialHistogram, 1) => ExponentialHistogramDataPoint,
            (Summary, 1) => SummaryDataPoint,
            (NumberDataPoint, 7) => KeyValue,
            (NumberDataPoint, 5) => Exemplar,
            (HistogramDataPoint, 9) => KeyValue,
            (HistogramDataPoint, 8) => Exemplar,
            (ExponentialHistogramDataPoint, 1) => KeyValue,
            (ExponentialHistogramDataPoint, 8 | 9) => Buckets,
            (ExponentialHistogramDataPoint, 11) => Exemplar,
            (SummaryDataPoint, 7) => KeyValue,
            (SummaryDataPoint, 6) => ValueAtQuantile,
            (Exemplar, 7) => KeyValue,
            (KeyValue, 2) => AnyValue,
            (AnyValue, 5) => ArrayValue,
            (AnyValue, 6) => KeyValueList,
            (ArrayValue, 1) => AnyValue,
            (KeyValueList, 1) => KeyValue,
            _ => return None,
        })
    }

    /// Bytes one instance takes decoded, twice over (a vector's spare capacity).
    fn cost(self) -> usize {
        use M::*;
        let size = match self {
            TraceRequest => size_of::<ExportTraceServiceRequest>(),
            LogsRequest => size_of::<ExportLogsServiceRequest>(),
            MetricsRequest => size_of::<ExportMetricsServiceRequest>(),
            ResourceSpans => size_of::<trace::ResourceSpans>(),
            ResourceLogs => size_of::<logs::ResourceLogs>(),
            ResourceMetrics => size_of::<metrics::ResourceMetrics>(),
            Resource => size_of::<resource::Resource>(),
            EntityRef => size_of::<common::EntityRef>(),
            ScopeSpans => size_of::<trace::ScopeSpans>(),
            ScopeLogs => size_of::<logs::ScopeLogs>(),
            ScopeMetrics => size_of::<metrics::ScopeMetrics>(),
            Scope => size_of::<common::InstrumentationScope>(),
            Span => size_of::<trace::Span>(),
            Event => size_of::<trace::span::Event>(),
            Link => size_of::<trace::span::Link>(),
            Status => size_of::<trace::Status>(),
            LogRecord => size_of::<logs::LogRecord>(),
            Metric => size_of::<metrics::Metric>(),
            Gauge => size_of::<metrics::Gauge>(),
            Sum => size_of::<metrics::Sum>(),
            Histogram => size_of::<metrics::Histogram>(),
            ExponentialHistogram => size_of::<metrics::ExponentialHistogram>(),
            Summary => size_of::<metrics::Summary>(),
            NumberDataPoint => size_of::<metrics::NumberDataPoint>(),
            HistogramDataPoint => size_of::<metrics::HistogramDataPoint>(),
            ExponentialHistogramDataPoint => size_of::<metrics::ExponentialHistogramDataPoint>(),
            Buckets => size_of::<metrics::exponential_histogram_data_point::Buckets>(),
            SummaryDataPoint => size_of::<metrics::SummaryDataPoint>(),
            ValueAtQuantile => size_of::<metrics::summary_data_point::ValueAtQuantile>(),
            Exemplar => size_of::<metrics::Exemplar>(),
            KeyValue => size_of::<common::KeyValue>(),
            AnyValue => size_of::<common::AnyValue>(),
            ArrayValue => size_of::<common::ArrayValue>(),
            KeyValueList => size_of::<common::KeyValueList>(),
        };
        2 * size
    }

    /// A repeated varint field, packed: one byte on the wire is eight in memory, twice over.
    fn packed_varints(self, field: u64) -> bool {
        matches!((self, field), (M::Buckets, 2))
    }
}

/// Deeper nesting than prost decodes (its recursion limit) is refused here already.
const MAX_DEPTH: usize = 100;

/// A scalar field: at most a `u64` in a repeated field, twice over.
const SCALAR_COST: usize = 16;

/// A string or bytes field: its bytes and, in a repeated field, a header, twice over.
const STRING_COST: usize = 48;

/// Why a body is not an OTLP message.
pub const MALFORMED: &str = "the body is not a valid OTLP protobuf message";

/// An upper bound of the bytes that decoding `message` as `root` and mapping it take; `Err`
/// when it is not well-formed protobuf (decoding it would fail too).
pub fn decoded_cost(message: &[u8], root: Root) -> Result<usize, &'static str> {
    let root = match root {
        Root::Traces => M::TraceRequest,
        Root::Logs => M::LogsRequest,
        Root::Metrics => M::MetricsRequest,
    };
    let mut cost = root.cost();
    let mut items = 0usize;
    // The open messages: type, where each ends, the message field last seen in it.
    let mut open: Vec<(M, usize, u64)> = vec![(root, message.len(), 0)];
    let mut pos = 0usize;
    while let Some(&(m, end, last)) = open.last() {
        if pos == end {
            open.pop();
            continue;
        }
        let key = varint(message, &mut pos, end)?;
        let field = key >> 3;
        if field == 0 {
            return Err(MALFORMED);
        }
        match key & 7 {
            0 => {
                varint(message, &mut pos, end)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            1 => {
                pos = skip(pos, 8, end)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            5 => {
                pos = skip(pos, 4, end)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            2 => {
                let len = usize::try_from(varint(message, &mut pos, end)?).map_err(|_| MALFORMED)?;
                let body_end = skip(pos, len, end)?;
                match m.child(field) {
                    Some(child) => {
                        if open.len() >= MAX_DEPTH {
                            return Err("the OTLP message is nested too deeply");
                        }
                        // A vector's first element allocates room for four.
                        let first = field != last;
                        if let Some(top) = open.last_mut() {
                            top.2 = field;
                        }
                        let each = if first { 2 * child.cost() } else { child.cost() };
                        cost = cost.saturating_add(each);
                        items += usize::from(matches!(child, M::Span | M::LogRecord));
                        open.push((child, body_end, 0));
                    }
                    None => {
                        let bytes = if m.packed_varints(field) { len.saturating_mul(16) } else { len };
                        cost = cost.saturating_add(bytes).saturating_add(STRING_COST);
                        pos = body_end;
                    }
                }
            }
            // Groups (3, 4) are not in OTLP; 6 and 7 are not wire types.
            _ => return Err(MALFORMED),
        }
    }
    Ok(cost.saturating_add(inherited(items)))
}

/// The resource and scope attributes the mapping copies into each span or log record it keeps,
/// twice over (the attribute vector's spare capacity, the allocator's rounding).
fn inherited(items: usize) -> usize {
    items.min(MAX_OTLP_ITEMS).saturating_mul(2 * MAX_INHERITED_BYTES)
}

fn skip(pos: usize, n: usize, end: usize) -> Result<usize, &'static str> {
    pos.checked_add(n).filter(|e| *e <= end).ok_or(MALFORMED)
}

fn varint(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        if *pos >= end {
            return Err(MALFORMED);
        }
        let b = buf[*pos];
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(MALFORMED);
        }
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(MALFORMED)
}

/// Bytes one JSON value may take while it is buffered: the OTLP types with a oneof (any value,
/// metric, number data point, exemplar) buffer their fields as generic values before they are
/// typed.
const JSON_BUFFERED_COST: usize = 64;

impl M {
    /// The message type of a JSON member, by its lowerCamelCase name.
    fn json_child(self, key: &str) -> Option<M> {
        use M::*;
        let field = match (self, key) {
            (TraceRequest | LogsRequest | MetricsRequest, "resourceSpans" | "resourceLogs" | "resourceMetrics") => 1,
            (ResourceSpans | ResourceLogs | ResourceMetrics, "resource") => 1,
            (ResourceSpans, "scopeSpans") | (ResourceLogs, "scopeLogs") | (ResourceMetrics, "scopeMetrics") => 2,
            (Resource, "attributes") => 1,
            (Resource, "entityRefs") => 3,
            (ScopeSpans | ScopeLogs | ScopeMetrics, "scope") => 1,
            (ScopeSpans, "spans") | (ScopeLogs, "logRecords") | (ScopeMetrics, "metrics") => 2,
            (Scope | Event, "attributes") => 3,
            (Link, "attributes") => 4,
            (Span, "attributes") => 9,
            (Span, "events") => 11,
            (Span, "links") => 13,
            (Span, "status") => 15,
            (LogRecord, "body") => 5,
            (LogRecord, "attributes") => 6,
            (Metric, "gauge") => 5,
            (Metric, "sum") => 7,
            (Metric, "histogram") => 9,
            (Metric, "exponentialHistogram") => 10,
            (Metric, "summary") => 11,
            (Metric, "metadata") => 12,
            (Gauge | Sum | Histogram | ExponentialHistogram | Summary, "dataPoints") => 1,
            (NumberDataPoint | SummaryDataPoint, "attributes") => 7,
            (NumberDataPoint, "exemplars") => 5,
            (HistogramDataPoint, "attributes") => 9,
            (HistogramDataPoint, "exemplars") => 8,
            (ExponentialHistogramDataPoint, "attributes") => 1,
            (ExponentialHistogramDataPoint, "positive") => 8,
            (ExponentialHistogramDataPoint, "negative") => 9,
            (ExponentialHistogramDataPoint, "exemplars") => 11,
            (SummaryDataPoint, "quantileValues") => 6,
            (Exemplar, "filteredAttributes") => 7,
            (KeyValue, "value") => 2,
            (AnyValue, "arrayValue") => 5,
            (AnyValue, "kvlistValue") => 6,
            (ArrayValue | KeyValueList, "values") => 1,
            _ => return None,
        };
        self.child(field)
    }

    /// Types whose members are buffered as generic values before they are typed.
    fn buffers(self) -> bool {
        matches!(self, M::AnyValue | M::Metric | M::NumberDataPoint | M::Exemplar)
    }
}

/// The same bound for OTLP/JSON, from a walk of the JSON with the schema's member names;
/// `Err` when it is not JSON (parsing it would fail too).
pub fn json_cost(json: &[u8], root: Root) -> Result<usize, String> {
    let root = match root {
        Root::Traces => M::TraceRequest,
        Root::Logs => M::LogsRequest,
        Root::Metrics => M::MetricsRequest,
    };
    let tally = Tally::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    serde::de::DeserializeSeed::deserialize(Walk { m: Some(root), buffered: false, tally: &tally }, &mut de)
        .and_then(|()| de.end())
        .map_err(|e| e.to_string())?;
    Ok(tally.cost.get().saturating_add(2 * root.cost()).saturating_add(inherited(tally.items.get())))
}

#[derive(Default)]
struct Tally {
    cost: std::cell::Cell<usize>,
    items: std::cell::Cell<usize>,
}

impl Tally {
    fn add(&self, n: usize) {
        self.cost.set(self.cost.get().saturating_add(n));
    }
}

/// One JSON value: of message type `m` (`None`: not a message), inside a buffered type or not.
#[derive(Clone, Copy)]
struct Walk<'t> {
    m: Option<M>,
    buffered: bool,
    tally: &'t Tally,
}

impl Walk<'_> {
    fn leaf(self, bytes: usize) {
        let buffered = if self.buffered { JSON_BUFFERED_COST + bytes } else { 0 };
        self.tally.add(SCALAR_COST + bytes + buffered);
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an OTLP/JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // An object of a message type costs what an element of a vector of them does.
        if let Some(m) = self.m {
            self.tally.add(2 * m.cost());
            self.tally.items.set(self.tally.items.get() + usize::from(matches!(m, M::Span | M::LogRecord)));
        }
        let buffered = self.buffered || self.m.is_some_and(M::buffers);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if buffered {
                self.tally.add(JSON_BUFFERED_COST + key.len());
            }
            let child = self.m.and_then(|m| m.json_child(&key));
            map.next_value_seed(Walk { m: child, buffered, tally: self.tally })?;
        }
        if buffered {
            self.tally.add(JSON_BUFFERED_COST);
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // Elements are of the member's type; a vector holds twice what it uses.
        while seq.next_element_seed(self)?.is_some() {
            self.tally.add(SCALAR_COST);
        }
        if self.buffered {
            self.tally.add(JSON_BUFFERED_COST);
        }
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.leaf(v.len() + STRING_COST);
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.leaf(0);
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.leaf(0);
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.leaf(0);
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.leaf(0);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.leaf(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any bytes: an answer, never a panic or an endless walk.
        #[test]
        fn any_bytes_are_walked_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for root in [Root::Traces, Root::Logs, Root::Metrics] {
                let _ = decoded_cost(&bytes, root);
                let _ = json_cost(&bytes, root);
            }
        }
    }

    #[test]
    fn costs_grow_with_what_decoding_holds() {
        // One span, then two: the second costs at least a span.
        let one = [0x0a, 0x04, 0x12, 0x02, 0x12, 0x00];
        let two = [0x0a, 0x06, 0x12, 0x04, 0x12, 0x00, 0x12, 0x00];
        let (a, b) = (decoded_cost(&one, Root::Traces).unwrap(), decoded_cost(&two, Root::Traces).unwrap());
        assert!(b >= a + size_of::<trace::Span>(), "{a} then {b}");
        assert!(json_cost(br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{},{}]}]}]}"#, Root::Traces).unwrap() >= b);
        assert!(json_cost(b"{\"resourceSpans\": [", Root::Traces).is_err());
    }
}
