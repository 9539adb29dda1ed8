//! Node-side rows ([`ShardRows`], [`SpanRow`]…) and the messages they mirror. Both read the
//! same bytes; converting one into the other encodes or decodes the attributes.

use prost::bytes::Bytes;
use prost::Message;

use crate::{HostMetric, HostMetricRow, KeyValue, LogRecord, LogRow, ShardBatch, ShardRows, Span, SpanRow};

/// Each attribute as its encoded `KeyValue`.
pub fn encode_attributes(attributes: &[KeyValue]) -> Vec<Bytes> {
    attributes.iter().map(|kv| Bytes::from(kv.encode_to_vec())).collect()
}

/// Encoded attributes decoded; one that is no `KeyValue` is left out.
pub fn decode_attributes(attributes: &[Bytes]) -> Vec<KeyValue> {
    attributes.iter().filter_map(|a| KeyValue::decode(&a[..]).ok()).collect()
}

impl From<Span> for SpanRow {
    fn from(s: Span) -> Self {
        SpanRow {
            trace_id: s.trace_id,
            span_id: s.span_id,
            parent_span_id: s.parent_span_id,
            service_name: s.service_name,
            operation: s.operation,
            start_unix_nanos: s.start_unix_nanos,
            duration_nanos: s.duration_nanos,
            status: s.status,
            attributes: encode_attributes(&s.attributes),
        }
    }
}

impl From<SpanRow> for Span {
    fn from(s: SpanRow) -> Self {
        Span {
            attributes: decode_attributes(&s.attributes),
            trace_id: s.trace_id,
            span_id: s.span_id,
            parent_span_id: s.parent_span_id,
            service_name: s.service_name,
            operation: s.operation,
            start_unix_nanos: s.start_unix_nanos,
            duration_nanos: s.duration_nanos,
            status: s.status,
        }
    }
}

impl From<LogRecord> for LogRow {
    fn from(l: LogRecord) -> Self {
        LogRow {
            unix_nanos: l.unix_nanos,
            level: l.level,
            service: l.service,
            message: l.message,
            trace_id: l.trace_id,
            span_id: l.span_id,
            attributes: encode_attributes(&l.attributes),
        }
    }
}

impl From<LogRow> for LogRecord {
    fn from(l: LogRow) -> Self {
        LogRecord {
            attributes: decode_attributes(&l.attributes),
            unix_nanos: l.unix_nanos,
            level: l.level,
            service: l.service,
            message: l.message,
            trace_id: l.trace_id,
            span_id: l.span_id,
        }
    }
}

impl From<HostMetric> for HostMetricRow {
    fn from(m: HostMetric) -> Self {
        HostMetricRow {
            unix_nanos: m.unix_nanos,
            hostname: m.hostname,
            cpu_percent: m.cpu_percent,
            memory_used_bytes: m.memory_used_bytes,
            memory_total_bytes: m.memory_total_bytes,
            disk_used_percent: m.disk_used_percent,
            network_rx_bytes_per_sec: m.network_rx_bytes_per_sec,
            network_tx_bytes_per_sec: m.network_tx_bytes_per_sec,
            attributes: encode_attributes(&m.attributes),
        }
    }
}

impl From<HostMetricRow> for HostMetric {
    fn from(m: HostMetricRow) -> Self {
        HostMetric {
            attributes: decode_attributes(&m.attributes),
            unix_nanos: m.unix_nanos,
            hostname: m.hostname,
            cpu_percent: m.cpu_percent,
            memory_used_bytes: m.memory_used_bytes,
            memory_total_bytes: m.memory_total_bytes,
            disk_used_percent: m.disk_used_percent,
            network_rx_bytes_per_sec: m.network_rx_bytes_per_sec,
            network_tx_bytes_per_sec: m.network_tx_bytes_per_sec,
        }
    }
}

impl From<ShardBatch> for ShardRows {
    fn from(b: ShardBatch) -> Self {
        ShardRows {
            project_id: b.project_id,
            spans: b.spans.into_iter().map(SpanRow::from).collect(),
            logs: b.logs.into_iter().map(LogRow::from).collect(),
            host_metrics: b.host_metrics.into_iter().map(HostMetricRow::from).collect(),
            json_bytes: b.json_bytes,
            events: b.events,
            replay_events: b.replay_events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{any_value, AnyValue, ArrayValue, Event};

    fn kv(key: &str, value: Option<any_value::Value>) -> KeyValue {
        KeyValue { key: key.into(), value: Some(AnyValue { value }) }
    }

    /// A batch with every kind of attribute value, and every table.
    fn batch() -> ShardBatch {
        let attributes = vec![
            kv("s", Some(any_value::Value::StringValue("checkout-7f9c2".into()))),
            kv("i", Some(any_value::Value::IntValue(-3))),
            kv("d", Some(any_value::Value::DoubleValue(0.25))),
            kv("b", Some(any_value::Value::BoolValue(true))),
            kv(
                "a",
                Some(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue { value: Some(any_value::Value::StringValue("x".into())) }],
                })),
            ),
            kv("", None),
            KeyValue { key: "none".into(), value: None },
        ];
        ShardBatch {
            project_id: "p".into(),
            spans: vec![Span {
                trace_id: "t".into(),
                span_id: "s".into(),
                attributes: attributes.clone(),
                ..Default::default()
            }],
            logs: vec![LogRecord { message: "m".into(), attributes: attributes.clone(), ..Default::default() }],
            host_metrics: vec![HostMetric {
                hostname: "h".into(),
                cpu_percent: Some(1.5),
                attributes,
                ..Default::default()
            }],
            json_bytes: 9,
            events: vec![Event { event: "e".into(), ..Default::default() }],
            replay_events: vec![],
        }
    }

    #[test]
    fn node_rows_read_the_bytes_of_a_shard_batch() {
        let batch = batch();
        let wire = batch.encode_to_vec();
        let rows = ShardRows::decode(&wire[..]).unwrap();
        assert_eq!(rows, ShardRows::from(batch.clone()));
        assert_eq!(rows.encode_to_vec(), wire, "written back, the same bytes");
        assert_eq!(ShardBatch::decode(&rows.encode_to_vec()[..]).unwrap(), batch);
        assert_eq!(Span::from(rows.spans[0].clone()), batch.spans[0]);
        assert_eq!(LogRecord::from(rows.logs[0].clone()), batch.logs[0]);
        assert_eq!(HostMetric::from(rows.host_metrics[0].clone()), batch.host_metrics[0]);
    }
}
