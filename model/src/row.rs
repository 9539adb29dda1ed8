//! The rows Sextant stores, as the domain knows them: what validation produces, what a shard
//! applies and what reads return. Wire and disk forms convert to and from these in
//! `sextant_proto::convert`; nothing here depends on them.
//!
//! Rows with attributes are generic over how the attributes are held: decoded
//! (`Vec<Attribute>`, the default) where they are built or read, or kept encoded in the segment
//! attribute encoding (docs/ARCHITECTURE.md, "Attribute encoding") where a shard only copies
//! them into segments.

/// Attributes kept in the segment attribute encoding (docs/ARCHITECTURE.md, "Attribute
/// encoding"): a row's encoded attributes one after another, each after its length as a
/// varint, in the order they came. How a shard holds the rows it applies, copying the bytes
/// into segments without decoding them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Encoded(pub bytes::Bytes);

/// One attribute value; arrays hold scalars.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    String(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Array(Vec<Value>),
}

/// One `key -> value` pair; `None` is an attribute whose value was absent or null.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub key: String,
    pub value: Option<Value>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpanStatus {
    #[default]
    Unset,
    Ok,
    Error,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogLevel {
    #[default]
    Unspecified,
    Trace,
    Debug,
    Info,
    Warn,
    Error,
    Fatal,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Span<A = Vec<Attribute>> {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub service_name: String,
    pub operation: String,
    pub start_unix_nanos: i64,
    pub duration_nanos: u64,
    pub status: SpanStatus,
    pub attributes: A,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogRecord<A = Vec<Attribute>> {
    pub unix_nanos: i64,
    pub level: LogLevel,
    pub service: String,
    pub message: String,
    pub trace_id: String,
    pub span_id: String,
    pub attributes: A,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostMetric<A = Vec<Attribute>> {
    pub unix_nanos: i64,
    pub hostname: String,
    pub cpu_percent: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub disk_used_percent: Option<f64>,
    pub network_rx_bytes_per_sec: Option<f64>,
    pub network_tx_bytes_per_sec: Option<f64>,
    pub attributes: A,
}

impl<A> HostMetric<A> {
    /// The sample's values in [`HOST_METRICS`](crate::query::HOST_METRICS) order, as a mean
    /// adds them up (byte counts as `f64`).
    pub fn values(&self) -> [Option<f64>; 6] {
        [
            self.cpu_percent,
            self.memory_used_bytes.map(|v| v as f64),
            self.memory_total_bytes.map(|v| v as f64),
            self.disk_used_percent,
            self.network_rx_bytes_per_sec,
            self.network_tx_bytes_per_sec,
        ]
    }
}

/// A product-analytics event; `properties_json` is its properties object as JSON text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    /// The client's, else derived from the content (empty without a timestamp).
    pub uuid: String,
    pub event: String,
    pub distinct_id: String,
    pub unix_nanos: i64,
    pub properties_json: String,
}

/// One rrweb event of a session recording; `data_json` is its `data` object as JSON text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayEvent {
    pub session_id: String,
    pub distinct_id: String,
    pub window_id: String,
    pub unix_nanos: i64,
    pub event_type: i32,
    pub data_json: String,
    /// Derived from the event's content by the router: a retried request is stored once.
    pub uuid: String,
}

/// What a shard knows of one trace (all its spans live on that shard). Partial summaries of
/// the same trace merge: min start, max end, summed counts, union of services.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceSummary {
    pub trace_id: String,
    pub start_unix_nanos: i64,
    pub end_unix_nanos: i64,
    /// Empty while the root span is not known.
    pub root_service: String,
    pub root_operation: String,
    pub span_count: u32,
    pub error_count: u32,
    pub services: Vec<String>,
}

/// One endpoint's spans over one minute or one hour, added up when the spans are written (a
/// rollup): APM over long ranges reads these instead of every span.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanRollup {
    pub service: String,
    pub operation: String,
    /// The start of its minute or hour.
    pub bucket_unix_nanos: i64,
    pub totals: crate::query::SpanTotals,
}

/// Events of one name over one hour, counted when the events are written (a rollup): event
/// counts over long ranges read these instead of every event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventRollup {
    pub event: String,
    pub hour_unix_nanos: i64,
    pub count: u64,
}

/// One host's samples over one minute, added up when they are written (a rollup): host
/// series over long ranges read these instead of every sample. `means.start_unix_nanos` is
/// the minute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostRollup {
    pub hostname: String,
    pub means: crate::query::HostBucket,
}

/// The rows of one ingest request that land on one shard: exactly one Raft entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowBatch<A = Vec<Attribute>> {
    pub project_id: String,
    pub spans: Vec<Span<A>>,
    pub logs: Vec<LogRecord<A>>,
    pub host_metrics: Vec<HostMetric<A>>,
    /// JSON size of the accepted objects (docs/API.md, "Usage").
    pub json_bytes: u64,
    pub events: Vec<Event>,
    pub replay_events: Vec<ReplayEvent>,
    /// When the router received the request (its clock): the month the batch is metered in
    /// (docs/API.md, "Usage"). 0 in entries written before it existed.
    pub received_unix_millis: i64,
}

impl<A> RowBatch<A> {
    pub fn rows(&self) -> usize {
        self.spans.len() + self.logs.len() + self.host_metrics.len() + self.events.len() + self.replay_events.len()
    }

    /// The same rows with their attributes held another way.
    pub fn map_attributes<B>(self, mut f: impl FnMut(A) -> B) -> RowBatch<B> {
        let RowBatch { project_id, spans, logs, host_metrics, json_bytes, events, replay_events, received_unix_millis } =
            self;
        RowBatch {
            received_unix_millis,
            project_id,
            spans: spans.into_iter().map(|s| s.map_attributes(&mut f)).collect(),
            logs: logs.into_iter().map(|l| l.map_attributes(&mut f)).collect(),
            host_metrics: host_metrics.into_iter().map(|m| m.map_attributes(&mut f)).collect(),
            json_bytes,
            events,
            replay_events,
        }
    }
}

/// `map_attributes` of a row type: the same row with `f` of its attributes.
macro_rules! map_attributes {
    ($row:ident { $($field:ident),* $(,)? }) => {
        impl<A> $row<A> {
            pub fn map_attributes<B>(self, f: impl FnOnce(A) -> B) -> $row<B> {
                let $row { $($field,)* attributes } = self;
                $row { $($field,)* attributes: f(attributes) }
            }
        }
    };
}

map_attributes!(Span {
    trace_id,
    span_id,
    parent_span_id,
    service_name,
    operation,
    start_unix_nanos,
    duration_nanos,
    status,
});
map_attributes!(LogRecord { unix_nanos, level, service, message, trace_id, span_id });
map_attributes!(HostMetric {
    unix_nanos,
    hostname,
    cpu_percent,
    memory_used_bytes,
    memory_total_bytes,
    disk_used_percent,
    network_rx_bytes_per_sec,
    network_tx_bytes_per_sec,
});
