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

/// `From` both ways between a message and its node-side row, which has the same fields with
/// the attributes encoded. Both sides are destructured whole: a field added to one and not to
/// the other (which the node would silently drop) does not compile.
macro_rules! mirror {
    ($message:ident <=> $row:ident { $($field:ident),* $(,)? }) => {
        impl From<$message> for $row {
            fn from(m: $message) -> Self {
                let $message { $($field,)* attributes } = m;
                $row { $($field,)* attributes: encode_attributes(&attributes) }
            }
        }

        impl From<$row> for $message {
            fn from(r: $row) -> Self {
                let $row { $($field,)* attributes } = r;
                $message { $($field,)* attributes: decode_attributes(&attributes) }
            }
        }
    };
}

mirror!(Span <=> SpanRow {
    trace_id, span_id, parent_span_id, service_name, operation, start_unix_nanos, duration_nanos, status,
});
mirror!(LogRecord <=> LogRow { unix_nanos, level, service, message, trace_id, span_id });
mirror!(HostMetric <=> HostMetricRow {
    unix_nanos, hostname, cpu_percent, memory_used_bytes, memory_total_bytes, disk_used_percent,
    network_rx_bytes_per_sec, network_tx_bytes_per_sec,
});

impl From<ShardBatch> for ShardRows {
    fn from(b: ShardBatch) -> Self {
        let ShardBatch { project_id, spans, logs, host_metrics, json_bytes, events, replay_events } = b;
        ShardRows {
            project_id,
            spans: spans.into_iter().map(SpanRow::from).collect(),
            logs: logs.into_iter().map(LogRow::from).collect(),
            host_metrics: host_metrics.into_iter().map(HostMetricRow::from).collect(),
            json_bytes,
            events,
            replay_events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{any_value, AnyValue, ArrayValue, Event, ReplayEvent};

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
        // Every field set (not its default), so that each is seen on the wire.
        ShardBatch {
            project_id: "p".into(),
            spans: vec![Span {
                trace_id: "t".into(),
                span_id: "s".into(),
                parent_span_id: "r".into(),
                service_name: "api".into(),
                operation: "GET /".into(),
                start_unix_nanos: -5,
                duration_nanos: 7,
                status: 2,
                attributes: attributes.clone(),
            }],
            logs: vec![LogRecord {
                unix_nanos: 3,
                level: 4,
                service: "api".into(),
                message: "m".into(),
                trace_id: "t".into(),
                span_id: "s".into(),
                attributes: attributes.clone(),
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
                attributes,
            }],
            json_bytes: 9,
            events: vec![Event { event: "e".into(), ..Default::default() }],
            replay_events: vec![ReplayEvent { session_id: "x".into(), ..Default::default() }],
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
