//! Rows as nodes persist them (`proto/persist/rows.proto`): the ingest payload of a Raft entry,
//! and the attribute encoding segments store (docs/ARCHITECTURE.md, "Attribute encoding").
//! A shard keeps attributes encoded ([`Encoded`]): apply and flush copy the bytes.

use bytes::Bytes;
use prost::Message;
use sextant_model::attributes::{AttributeSink, ValueRef};
use sextant_model::row::{
    Attribute, Encoded, Event, HostMetric, LogLevel, LogRecord, ReplayEvent, RowBatch, Span, SpanStatus, Value,
};

use crate::persist as pb;

/// Bytes that do not decode as what they should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(prost::DecodeError);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DecodeError {}

impl From<prost::DecodeError> for DecodeError {
    fn from(e: prost::DecodeError) -> Self {
        DecodeError(e)
    }
}

/// `None` for a value with none of its kinds set (and so an array leaves such values out).
fn value_from_pb(v: pb::Value) -> Option<Value> {
    use pb::value::Kind;
    Some(match v.kind? {
        Kind::String(s) => Value::String(s),
        Kind::Int(i) => Value::Int(i),
        Kind::Double(d) => Value::Double(d),
        Kind::Bool(b) => Value::Bool(b),
        Kind::Array(a) => Value::Array(a.values.into_iter().filter_map(value_from_pb).collect()),
    })
}

fn attribute_from_pb(a: pb::Attribute) -> Attribute {
    Attribute { key: a.key, value: a.value.and_then(value_from_pb) }
}

/// One attribute, encoded.
pub fn encode_attribute(a: Attribute) -> Vec<u8> {
    let value = a.value.as_ref().map(ValueRef::from);
    let mut out = Vec::with_capacity(attribute_wire::attribute_len(&a.key, value));
    attribute_wire::put_attribute(&a.key, value, &mut out);
    out
}

/// One encoded attribute, decoded.
pub fn decode_attribute(encoded: &[u8]) -> Result<Attribute, DecodeError> {
    Ok(attribute_from_pb(pb::Attribute::decode(encoded)?))
}

/// An encoded attribute, decoded and encoded again: the one form this encoder writes.
pub fn reencode_attribute(encoded: &[u8]) -> Result<Vec<u8>, DecodeError> {
    Ok(pb::Attribute::decode(encoded)?.encode_to_vec())
}

/// Whether `encoded` is a value in the one form this encoder writes it.
pub fn value_in_canonical_form(encoded: &[u8]) -> bool {
    pb::Value::decode(encoded).is_ok_and(|v| v.encode_to_vec() == encoded)
}

/// An encoded value, decoded; `None` for one with none of its kinds set.
pub fn decode_value(encoded: &[u8]) -> Result<Option<Value>, DecodeError> {
    Ok(value_from_pb(pb::Value::decode(encoded)?))
}

/// Appends the encoded `value` (its fields, without a length).
pub fn encode_value(value: Value, out: &mut Vec<u8>) {
    attribute_wire::put_value((&value).into(), out)
}

/// Attributes encoded, as a shard holds them.
pub fn encode_attributes(attributes: Vec<Attribute>) -> Encoded {
    Encoded(Bytes::from(Packed::from(attributes).bytes.into_boxed_slice()))
}

/// Decoded attributes; an attribute that does not decode is left out.
pub fn decode_attributes(attributes: &Encoded) -> Vec<Attribute> {
    each_attribute(attributes).filter_map(|a| decode_attribute(a).ok()).collect()
}

/// The next item of `framed` (a varint length, then that many bytes), moving `framed` past
/// it; `None` at the end or at bytes that are not a length and that many bytes.
#[inline]
pub fn next_delimited<'a>(framed: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut rest = *framed;
    // The end is checked first: `decode_varint` would build an error there, for every row.
    let len = match *rest.first()? {
        byte @ 0..0x80 => {
            rest = &rest[1..];
            usize::from(byte)
        }
        _ => usize::try_from(prost::encoding::decode_varint(&mut rest).ok()?).ok()?,
    };
    let item = rest.get(..len)?;
    *framed = &rest[len..];
    Some(item)
}

/// Appends `item` after its length as a varint: the framing [`next_delimited`] reads.
pub fn put_delimited(item: &[u8], out: &mut Vec<u8>) {
    attribute_wire::put_varint(item.len() as u64, out);
    out.extend_from_slice(item);
}

/// A row's encoded attributes, one by one.
pub fn each_attribute(attributes: &Encoded) -> impl Iterator<Item = &[u8]> {
    let mut rest = &attributes.0[..];
    std::iter::from_fn(move || next_delimited(&mut rest))
}

/// Encoded attributes, as a row holds them.
pub fn encoded_from(attributes: impl IntoIterator<Item = impl AsRef<[u8]>>) -> Encoded {
    let mut out = Vec::new();
    for a in attributes {
        put_delimited(a.as_ref(), &mut out);
    }
    Encoded(Bytes::from(out.into_boxed_slice()))
}

/// A row's attributes as the `repeated bytes` field of its message: slices of its buffer.
fn encoded_bytes(a: Encoded) -> Vec<Bytes> {
    each_attribute(&a).map(|item| a.0.slice_ref(item)).collect()
}

fn joined(attributes: Vec<Bytes>) -> Encoded {
    encoded_from(&attributes)
}

same_fields!(Span<Encoded> = Span <=> pb::SpanRow {
    trace_id, span_id, parent_span_id, service_name, operation, start_unix_nanos, duration_nanos;
    status: SpanStatus::code, SpanStatus::from_code;
    attributes: encoded_bytes, joined;
});
same_fields!(LogRecord<Encoded> = LogRecord <=> pb::LogRow {
    unix_nanos, service, message, trace_id, span_id;
    level: LogLevel::code, LogLevel::from_code;
    attributes: encoded_bytes, joined;
});
same_fields!(HostMetric<Encoded> = HostMetric <=> pb::HostMetricRow {
    unix_nanos, hostname, cpu_percent, memory_used_bytes, memory_total_bytes, disk_used_percent,
    network_rx_bytes_per_sec, network_tx_bytes_per_sec;
    attributes: encoded_bytes, joined;
});
same_fields!(Event = Event <=> pb::EventRow { uuid, event, distinct_id, unix_nanos, properties_json });
same_fields!(ReplayEvent = ReplayEvent <=> pb::ReplayEventRow {
    session_id, distinct_id, window_id, unix_nanos, event_type, data_json, uuid,
});

fn all<T, U>(v: Vec<T>, f: impl FnMut(T) -> U) -> Vec<U> {
    v.into_iter().map(f).collect()
}

/// The ingest payload of a batch whose attributes are encoded already.
pub fn encode_ingest_encoded(batch: RowBatch<Encoded>) -> Vec<u8> {
    let RowBatch { project_id, spans, logs, host_metrics, json_bytes, events, replay_events, received_unix_millis } =
        batch;
    pb::RowBatch {
        project_id,
        spans: all(spans, pb::SpanRow::from),
        logs: all(logs, pb::LogRow::from),
        host_metrics: all(host_metrics, pb::HostMetricRow::from),
        json_bytes,
        events: all(events, pb::EventRow::from),
        replay_events: all(replay_events, pb::ReplayEventRow::from),
        received_unix_millis,
    }
    .encode_to_vec()
}

/// `pb::Attribute` and `pb::Value` written straight from the model's, byte for byte as prost
/// writes them (a oneof's field is written even when it holds its default), without building
/// the messages first: the router encodes every attribute of every row.
mod attribute_wire {
    use prost::encoding::{encoded_len_varint, key_len, WireType};
    use sextant_model::attributes::ValueRef;
    use sextant_model::row::Value;

    /// Most lengths here take one byte.
    #[inline]
    pub fn put_varint(v: u64, out: &mut Vec<u8>) {
        if v < 0x80 {
            out.push(v as u8);
        } else {
            prost::encoding::encode_varint(v, out);
        }
    }

    #[inline]
    pub fn put_key(field: u32, wire_type: WireType, out: &mut Vec<u8>) {
        put_varint(u64::from(field << 3 | wire_type as u32), out);
    }

    fn delimited_len(field: u32, len: usize) -> usize {
        key_len(field) + encoded_len_varint(len as u64) + len
    }

    fn put_delimited(field: u32, len: usize, out: &mut Vec<u8>) {
        put_key(field, WireType::LengthDelimited, out);
        put_varint(len as u64, out);
    }

    fn array_len(values: &[Value]) -> usize {
        values.iter().map(|v| delimited_len(1, value_len(v.into()))).sum()
    }

    pub fn value_len(v: ValueRef<'_>) -> usize {
        match v {
            ValueRef::Str(s) => delimited_len(1, s.len()),
            ValueRef::Int(i) => key_len(2) + encoded_len_varint(i as u64),
            ValueRef::Double(_) => key_len(3) + 8,
            ValueRef::Bool(_) => key_len(4) + 1,
            ValueRef::Array(values) => delimited_len(5, array_len(values)),
        }
    }

    pub fn put_value(v: ValueRef<'_>, out: &mut Vec<u8>) {
        match v {
            ValueRef::Str(s) => {
                put_delimited(1, s.len(), out);
                out.extend_from_slice(s.as_bytes());
            }
            ValueRef::Int(i) => {
                put_key(2, WireType::Varint, out);
                put_varint(i as u64, out);
            }
            ValueRef::Double(d) => {
                put_key(3, WireType::SixtyFourBit, out);
                out.extend_from_slice(&d.to_le_bytes());
            }
            ValueRef::Bool(b) => {
                put_key(4, WireType::Varint, out);
                out.push(u8::from(b));
            }
            ValueRef::Array(values) => {
                put_delimited(5, array_len(values), out);
                for v in values {
                    put_delimited(1, value_len(v.into()), out);
                    put_value(v.into(), out);
                }
            }
        }
    }

    pub fn attribute_len(key: &str, value: Option<ValueRef<'_>>) -> usize {
        let key = if key.is_empty() { 0 } else { delimited_len(1, key.len()) };
        key + value.map_or(0, |v| delimited_len(2, value_len(v)))
    }

    pub fn put_attribute(key: &str, value: Option<ValueRef<'_>>, out: &mut Vec<u8>) {
        if !key.is_empty() {
            put_delimited(1, key.len(), out);
            out.extend_from_slice(key.as_bytes());
        }
        if let Some(v) = value {
            put_delimited(2, value_len(v), out);
            put_value(v, out);
        }
    }
}

/// Attributes encoded as they are parsed or mapped (the router's [`AttributeSink`]): each
/// attribute in the segment attribute encoding after its length, one after another, which is
/// a row's `repeated bytes` attributes field without its tags, and how a shard holds them
/// ([`Encoded`]). No key or value becomes a string of its own, and the payload copies them in
/// one piece per attribute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Packed {
    bytes: Vec<u8>,
    count: usize,
    /// The first attribute past a limit, as validation reports it.
    problem: Option<String>,
}

impl AttributeSink for Packed {
    type Stored = Packed;
    fn push(&mut self, key: &str, value: Option<ValueRef<'_>>) {
        if self.problem.is_none() {
            self.problem = sextant_model::attributes::check(key, value).err();
        }
        if self.bytes.is_empty() {
            // A span's 5 to 15 attributes take 150 to 450 bytes: room for most at once.
            self.bytes.reserve(512);
        }
        let len = attribute_wire::attribute_len(key, value);
        attribute_wire::put_varint(len as u64, &mut self.bytes);
        attribute_wire::put_attribute(key, value, &mut self.bytes);
        self.count += 1;
    }
    fn len(&self) -> usize {
        self.count
    }
    fn check(&self) -> Result<(), String> {
        sextant_model::attributes::check_count(self.count)?;
        self.problem.clone().map_or(Ok(()), Err)
    }
    fn stored(self) -> Packed {
        self
    }
}

impl From<Vec<Attribute>> for Packed {
    fn from(attributes: Vec<Attribute>) -> Self {
        let mut packed = Packed::default();
        for a in &attributes {
            packed.push(&a.key, a.value.as_ref().map(ValueRef::from));
        }
        packed
    }
}

impl Packed {
    /// As the repeated bytes field `tag` of a row.
    fn repeated_len(&self, tag: u32) -> usize {
        self.count * prost::encoding::key_len(tag) + self.bytes.len()
    }

    fn put_repeated(&self, tag: u32, out: &mut Vec<u8>) {
        let mut rest = &self.bytes[..];
        while !rest.is_empty() {
            let whole = rest;
            next_delimited(&mut rest).expect("lengths this type wrote");
            attribute_wire::put_key(tag, prost::encoding::WireType::LengthDelimited, out);
            // The length and the attribute, in one piece.
            out.extend_from_slice(&whole[..whole.len() - rest.len()]);
        }
    }
}

/// A row whose attributes are not encoded yet: its fields, then (as its last field, `tag`)
/// the attributes, which is how prost writes the row with them as `repeated bytes`.
struct Unencoded<R> {
    row: R,
    tag: u32,
    attributes: Packed,
    /// The encoded length of the row with its attributes.
    len: usize,
}

impl<R: Message> Unencoded<R> {
    fn new<A>(row: A, tag: u32, to_pb: impl FnOnce(A) -> R, take: impl FnOnce(&mut A) -> Packed) -> Self {
        let mut row = row;
        let attributes = take(&mut row);
        let row = to_pb(row);
        let len = row.encoded_len() + attributes.repeated_len(tag);
        Unencoded { row, tag, attributes, len }
    }

    fn field_len(&self, field: u32) -> usize {
        prost::encoding::key_len(field) + prost::encoding::encoded_len_varint(self.len as u64) + self.len
    }

    fn encode(&self, field: u32, out: &mut Vec<u8>) {
        use prost::encoding::{encode_key, encode_varint, WireType};
        encode_key(field, WireType::LengthDelimited, out);
        encode_varint(self.len as u64, out);
        self.row.encode_raw(out);
        self.attributes.put_repeated(self.tag, out);
    }
}

/// An ingest payload and its rows as [`decode_ingest`] reads them. A router hands both to a
/// node in its own process, which then applies the rows without decoding what was just
/// encoded, once it has checked that the entry it applies holds these very bytes.
#[derive(Debug)]
pub struct Decoded {
    pub payload: Bytes,
    rows: std::sync::Mutex<Option<RowBatch<Encoded>>>,
}

impl Decoded {
    /// The rows, if `payload` is this one's and they were not taken yet.
    pub fn take_rows(&self, payload: &[u8]) -> Option<RowBatch<Encoded>> {
        // The very buffer (an entry read back as it was appended), or the same bytes.
        let same = std::ptr::eq(self.payload.as_ptr(), payload.as_ptr()) && self.payload.len() == payload.len();
        if !same && self.payload[..] != *payload {
            return None;
        }
        self.rows.lock().unwrap().take()
    }
}

/// The ingest payload of a batch: what the router replicates as one Raft entry. Written as
/// prost writes a `RowBatch` (fields in number order), with each attribute encoded straight
/// into the payload rather than into bytes of its own first.
pub fn encode_ingest<A: Into<Packed> + Default>(batch: RowBatch<A>) -> Vec<u8> {
    Written::new(batch).payload
}

/// The attributes of a batch's rows in one buffer, each row's a slice of it: one allocation
/// per batch rather than one per row, and none of the payload kept.
struct OneBuffer {
    bytes: Vec<u8>,
    /// Where each row's attributes end.
    ends: Vec<usize>,
}

impl OneBuffer {
    fn with_capacity(len: usize) -> Self {
        OneBuffer { bytes: Vec::with_capacity(len), ends: Vec::new() }
    }

    /// A row's attributes, already each after its length.
    fn push_framed(&mut self, framed: &[u8]) {
        self.bytes.extend_from_slice(framed);
        self.ends.push(self.bytes.len());
    }

    /// A row's attributes, one by one.
    fn push_each(&mut self, attributes: Vec<Bytes>) {
        for a in attributes {
            put_delimited(&a, &mut self.bytes);
        }
        self.ends.push(self.bytes.len());
    }

    /// The rows' attributes, in the order they were pushed.
    fn finish(self) -> impl Iterator<Item = Encoded> {
        let bytes = Bytes::from(self.bytes);
        let mut start = 0;
        self.ends.into_iter().map(move |end| {
            let row = Encoded(bytes.slice(start..end));
            start = end;
            row
        })
    }
}

fn next(attributes: &mut impl Iterator<Item = Encoded>) -> Encoded {
    attributes.next().expect("one per row pushed")
}

/// The ingest payload of a batch, and the batch as the payload reads back (see [`Decoded`]).
pub fn encode_ingest_decoded<A: Into<Packed> + Default>(batch: RowBatch<A>) -> Decoded {
    let Written { payload, head, spans, logs, host_metrics, tail } = Written::new(batch);
    let payload = Bytes::from(payload);
    fn packed<R>(rows: &[Unencoded<R>]) -> usize {
        rows.iter().map(|r| r.attributes.bytes.len()).sum()
    }
    let mut one = OneBuffer::with_capacity(packed(&spans) + packed(&logs) + packed(&host_metrics));
    spans.iter().for_each(|s| one.push_framed(&s.attributes.bytes));
    logs.iter().for_each(|l| one.push_framed(&l.attributes.bytes));
    host_metrics.iter().for_each(|m| one.push_framed(&m.attributes.bytes));
    let attributes = &mut one.finish();
    let rows = RowBatch {
        received_unix_millis: tail.received_unix_millis,
        project_id: head.project_id,
        spans: all(spans, |s| Span::from(s.row).map_attributes(|_| next(attributes))),
        logs: all(logs, |l| LogRecord::from(l.row).map_attributes(|_| next(attributes))),
        host_metrics: all(host_metrics, |m| HostMetric::from(m.row).map_attributes(|_| next(attributes))),
        json_bytes: tail.json_bytes,
        events: all(tail.events, Event::from),
        replay_events: all(tail.replay_events, ReplayEvent::from),
    };
    Decoded { payload, rows: std::sync::Mutex::new(Some(rows)) }
}

/// A batch written as its ingest payload, with the parts it was written from.
struct Written {
    payload: Vec<u8>,
    /// Field 1.
    head: pb::RowBatch,
    spans: Vec<Unencoded<pb::SpanRow>>,
    logs: Vec<Unencoded<pb::LogRow>>,
    host_metrics: Vec<Unencoded<pb::HostMetricRow>>,
    /// Fields 5 to 8.
    tail: pb::RowBatch,
}

impl Written {
    /// Attributes not packed yet are packed row by row as they are written.
    fn new<A: Into<Packed> + Default>(batch: RowBatch<A>) -> Self {
        let RowBatch { project_id, spans, logs, host_metrics, json_bytes, events, replay_events, received_unix_millis } =
            batch;
        let take = std::mem::take;
        let spans: Vec<_> = all(spans, |s| {
            Unencoded::new(
                s,
                9,
                |s| pb::SpanRow::from(s.map_attributes(|_| Encoded::default())),
                |s| take(&mut s.attributes).into(),
            )
        });
        let logs: Vec<_> = all(logs, |l| {
            Unencoded::new(
                l,
                7,
                |l| pb::LogRow::from(l.map_attributes(|_| Encoded::default())),
                |l| take(&mut l.attributes).into(),
            )
        });
        let host_metrics: Vec<_> = all(host_metrics, |m| {
            Unencoded::new(
                m,
                9,
                |m| pb::HostMetricRow::from(m.map_attributes(|_| Encoded::default())),
                |m| take(&mut m.attributes).into(),
            )
        });
        // Fields 1 and 5 to 8; 2 to 4 go between them.
        let head = pb::RowBatch { project_id, ..Default::default() };
        let tail = pb::RowBatch {
            json_bytes,
            events: all(events, pb::EventRow::from),
            replay_events: all(replay_events, pb::ReplayEventRow::from),
            received_unix_millis,
            ..Default::default()
        };
        let len = head.encoded_len()
            + spans.iter().map(|s| s.field_len(2)).sum::<usize>()
            + logs.iter().map(|l| l.field_len(3)).sum::<usize>()
            + host_metrics.iter().map(|m| m.field_len(4)).sum::<usize>()
            + tail.encoded_len();
        let mut out = Vec::with_capacity(len);
        head.encode_raw(&mut out);
        spans.iter().for_each(|s| s.encode(2, &mut out));
        logs.iter().for_each(|l| l.encode(3, &mut out));
        host_metrics.iter().for_each(|m| m.encode(4, &mut out));
        tail.encode_raw(&mut out);
        debug_assert_eq!(out.len(), len);
        Written { payload: out, head, spans, logs, host_metrics, tail }
    }
}

/// An ingest payload, its attributes left encoded. They are copied into one buffer for the
/// batch ([`OneBuffer`]): rows kept in a shard's buffer keep none of the payload.
pub fn decode_ingest(payload: Bytes) -> Result<RowBatch<Encoded>, DecodeError> {
    let pb::RowBatch {
        project_id,
        mut spans,
        mut logs,
        mut host_metrics,
        json_bytes,
        events,
        replay_events,
        received_unix_millis,
    } = pb::RowBatch::decode(payload)?;
    let framed =
        |a: &[Bytes]| a.iter().map(|a| prost::encoding::encoded_len_varint(a.len() as u64) + a.len()).sum::<usize>();
    let len = spans.iter().map(|s| framed(&s.attributes)).sum::<usize>()
        + logs.iter().map(|l| framed(&l.attributes)).sum::<usize>()
        + host_metrics.iter().map(|m| framed(&m.attributes)).sum::<usize>();
    let mut one = OneBuffer::with_capacity(len);
    let take = std::mem::take::<Vec<Bytes>>;
    spans.iter_mut().for_each(|s| one.push_each(take(&mut s.attributes)));
    logs.iter_mut().for_each(|l| one.push_each(take(&mut l.attributes)));
    host_metrics.iter_mut().for_each(|m| one.push_each(take(&mut m.attributes)));
    let attributes = &mut one.finish();
    Ok(RowBatch {
        received_unix_millis,
        project_id,
        spans: all(spans, |s| Span::from(s).map_attributes(|_| next(attributes))),
        logs: all(logs, |l| LogRecord::from(l).map_attributes(|_| next(attributes))),
        host_metrics: all(host_metrics, |m| HostMetric::from(m).map_attributes(|_| next(attributes))),
        json_bytes,
        events: all(events, Event::from),
        replay_events: all(replay_events, ReplayEvent::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes() -> Vec<Attribute> {
        let a = |key: &str, value| Attribute { key: key.into(), value };
        vec![
            a("s", Some(Value::String("checkout-7f9c2".into()))),
            a("i", Some(Value::Int(-3))),
            a("d", Some(Value::Double(0.25))),
            a("b", Some(Value::Bool(true))),
            a("a", Some(Value::Array(vec![Value::String("x".into()), Value::Int(1)]))),
            a("", Some(Value::Bool(false))),
            a("none", None),
        ]
    }

    /// Every field set (not its default), so that each is seen in the bytes.
    fn batch() -> RowBatch {
        RowBatch {
            project_id: "p".into(),
            spans: vec![Span {
                trace_id: "t".into(),
                span_id: "s".into(),
                parent_span_id: "r".into(),
                service_name: "api".into(),
                operation: "GET /".into(),
                start_unix_nanos: -5,
                duration_nanos: 7,
                status: SpanStatus::Error,
                attributes: attributes(),
            }],
            logs: vec![LogRecord {
                unix_nanos: 3,
                level: LogLevel::Info,
                service: "api".into(),
                message: "m".into(),
                trace_id: "t".into(),
                span_id: "s".into(),
                attributes: attributes(),
            }],
            host_metrics: vec![HostMetric {
                unix_nanos: 4,
                hostname: "h".into(),
                cpu_percent: Some(1.5),
                memory_used_bytes: Some(2),
                memory_total_bytes: Some(3),
                disk_used_percent: Some(0.0),
                network_rx_bytes_per_sec: Some(5.5),
                network_tx_bytes_per_sec: Some(6.5),
                attributes: attributes(),
            }],
            json_bytes: 9,
            received_unix_millis: 1_796_083_200_000,
            events: vec![Event {
                uuid: "u".into(),
                event: "e".into(),
                distinct_id: "d".into(),
                unix_nanos: 13,
                properties_json: "{}".into(),
            }],
            replay_events: vec![ReplayEvent {
                session_id: "x".into(),
                distinct_id: "d".into(),
                window_id: "w".into(),
                unix_nanos: 15,
                event_type: 2,
                data_json: "{}".into(),
                uuid: "u".into(),
            }],
        }
    }

    fn fixture() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/src/convert/fixtures/ingest-v1.bin")).unwrap()
    }

    /// An ingest payload of format 1 (written as the `ShardBatch` RPC message this schema
    /// took its numbers from, before it existed) reads, and is written back byte for byte.
    #[test]
    fn ingest_payloads_of_format_1_still_read() {
        let payload = fixture();
        // Format 1 had no receive time: it reads as 0.
        let format_1 = RowBatch { received_unix_millis: 0, ..batch() };
        let read = decode_ingest(Bytes::from(payload.clone())).unwrap();
        assert_eq!(read.clone().map_attributes(|a| decode_attributes(&a)), format_1);
        assert_eq!(encode_ingest_encoded(read), payload, "written back, the same bytes");
        assert_eq!(encode_ingest(format_1), payload);
    }

    #[test]
    fn every_field_survives_the_payload() {
        let read = decode_ingest(Bytes::from(encode_ingest(batch()))).unwrap();
        assert_eq!(read.map_attributes(|a| decode_attributes(&a)), batch());
    }

    /// A node applies the rows handed with a payload as if it had decoded the payload.
    #[test]
    fn rows_handed_with_a_payload_are_the_rows_it_decodes_to() {
        let mut two = batch();
        two.spans.push(Span { attributes: vec![], ..two.spans[0].clone() });
        two.logs.extend([two.logs[0].clone(), LogRecord { attributes: vec![], ..two.logs[0].clone() }]);
        two.host_metrics.push(two.host_metrics[0].clone());
        for b in [batch(), two, RowBatch::default()] {
            let decoded = encode_ingest_decoded(b.clone());
            assert_eq!(decoded.payload, encode_ingest(b), "the same payload");
            let payload = decoded.payload.to_vec();
            assert_eq!(decoded.take_rows(b"other bytes"), None, "only for its own payload");
            let rows = decoded.take_rows(&payload).unwrap();
            assert_eq!(rows, decode_ingest(Bytes::from(payload.clone())).unwrap());
            assert_eq!(decoded.take_rows(&payload), None, "taken once");
        }
    }

    /// A shard buffers rows until it flushes them: their Raft entries can go long before.
    #[test]
    fn decoded_rows_keep_none_of_the_payload() {
        let payload = Bytes::from(fixture());
        let read = decode_ingest(payload.clone()).unwrap();
        let range = payload.as_ptr() as usize..payload.as_ptr() as usize + payload.len();
        let attributes = &read.spans[0].attributes.0;
        assert!(!attributes.is_empty());
        assert!(!range.contains(&(attributes.as_ptr() as usize)), "a copy");
        assert!(payload.is_unique(), "no reference to it is left");
    }

    /// Converting a vector of attributes (or array values) reuses its allocation only while
    /// both element types have one size: reading attributes allocates no vector per row.
    #[test]
    fn attribute_conversions_reuse_their_vectors() {
        use std::mem::{align_of, size_of};
        assert_eq!(
            (size_of::<Attribute>(), align_of::<Attribute>()),
            (size_of::<pb::Attribute>(), align_of::<pb::Attribute>())
        );
        assert_eq!((size_of::<Value>(), align_of::<Value>()), (size_of::<pb::Value>(), align_of::<pb::Value>()));
    }

    /// The messages prost would write for a model value and attribute.
    fn value_to_pb(v: Value) -> pb::Value {
        use pb::value::Kind;
        pb::Value {
            kind: Some(match v {
                Value::String(s) => Kind::String(s),
                Value::Int(i) => Kind::Int(i),
                Value::Double(d) => Kind::Double(d),
                Value::Bool(b) => Kind::Bool(b),
                Value::Array(a) => Kind::Array(pb::ValueArray { values: a.into_iter().map(value_to_pb).collect() }),
            }),
        }
    }

    fn attribute_to_pb(a: Attribute) -> pb::Attribute {
        pb::Attribute { key: a.key, value: a.value.map(value_to_pb) }
    }

    /// The router writes attributes itself; prost must read them as it would have written
    /// them, byte for byte (segments and the Raft log hold these bytes).
    #[test]
    fn attributes_are_written_as_prost_writes_them() {
        fn value(depth: u32, seed: &mut u64) -> Value {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = *seed >> 33;
            match r % if depth == 0 { 4 } else { 5 } {
                0 => Value::String("é".repeat((r % 200) as usize)),
                1 => Value::Int(if r % 2 == 0 { (r as i64) << 20 } else { -((r % 1000) as i64) }),
                2 => Value::Double(f64::from_bits(r << 12)),
                3 => Value::Bool(r % 2 == 0),
                _ => Value::Array((0..r % 4).map(|_| value(depth - 1, seed)).collect()),
            }
        }
        let mut seed = 7;
        let mut cases = attributes();
        for i in 0..2000u64 {
            let key = "k".repeat((i % 150) as usize);
            cases.push(Attribute { key, value: (i % 7 != 0).then(|| value(3, &mut seed)) });
        }
        for a in cases {
            let by_prost = attribute_to_pb(a.clone()).encode_to_vec();
            assert_eq!(encode_attribute(a.clone()), by_prost, "{a:?}");
            if let Some(v) = a.value {
                let mut mine = Vec::new();
                encode_value(v.clone(), &mut mine);
                assert_eq!(mine, value_to_pb(v).encode_to_vec());
            }
        }
    }

    /// Attributes parsed straight into [`Packed`] are those parsed as values and encoded, with
    /// the same verdict on the limits; keys and values with escapes (not borrowed from the
    /// body) included.
    #[test]
    fn attributes_parsed_into_packed_are_those_parsed_as_values() {
        use proptest::prelude::*;
        use sextant_model::attributes::{self, Attributes, MAX_ARRAY_LEN, MAX_ATTRIBUTES, MAX_KEY_LEN};
        let text = prop_oneof!["[a-z.]{0,12}", "[a-z\\\\\"é\\n]{0,6}", Just("k".repeat(MAX_KEY_LEN + 1))];
        let scalar = prop_oneof![
            text.clone().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("JSON numbers", |d| d.is_finite()).prop_map(serde_json::Value::from),
            any::<bool>().prop_map(serde_json::Value::from),
        ];
        let value = prop_oneof![
            4 => scalar.clone(),
            1 => proptest::collection::vec(scalar, 0..4).prop_map(serde_json::Value::from),
            1 => Just(serde_json::Value::from(vec![1; MAX_ARRAY_LEN + 2])),
        ];
        let object = proptest::collection::vec((text, value), 0..12);
        let many = (0..MAX_ATTRIBUTES + 5).map(|i| (format!("a{i}"), serde_json::Value::from(i))).collect::<Vec<_>>();
        let mut runner = proptest::test_runner::TestRunner::default();
        let check = |pairs: Vec<(String, serde_json::Value)>| {
            let mut body = String::from("{");
            for (i, (k, v)) in pairs.iter().enumerate() {
                body += &format!("{}{}:{v}", if i > 0 { "," } else { "" }, serde_json::Value::from(k.as_str()));
            }
            body += "}";
            let as_values: Attributes = serde_json::from_str(&body).unwrap();
            let packed: Packed = attributes::deserialize(&mut serde_json::Deserializer::from_str(&body)).unwrap();
            assert_eq!(packed.check(), as_values.check(), "{body}");
            assert_eq!(packed.len(), as_values.0.len());
            assert_eq!(packed, Packed::from(as_values.0.clone()), "{body}");
            let span = Span { attributes: packed, ..Default::default() };
            let payload = encode_ingest(RowBatch { spans: vec![span], ..Default::default() });
            let read = decode_ingest(Bytes::from(payload)).unwrap();
            assert_eq!(decode_attributes(&read.spans[0].attributes), as_values.0, "{body}");
        };
        check(many);
        runner.run(&object, |pairs| Ok(check(pairs))).unwrap();
    }

    #[test]
    fn values_encode_and_decode() {
        for a in attributes() {
            assert_eq!(decode_attribute(&encode_attribute(a.clone())).unwrap(), a);
            let Some(v) = a.value else { continue };
            let mut encoded = Vec::new();
            encode_value(v.clone(), &mut encoded);
            assert!(value_in_canonical_form(&encoded));
            assert_eq!(decode_value(&encoded).unwrap(), Some(v));
        }
        assert_eq!(decode_value(&[]).unwrap(), None, "a value with no kind set");
        assert!(decode_attribute(&[1 << 3 | 2, 9, b'x']).is_err(), "a truncated key");
    }
}
