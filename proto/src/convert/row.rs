//! Rows: the domain rows of `sextant_model::row` and their messages.

use sextant_model::row::{
    Attribute, Event, HostMetric, LogLevel, LogRecord, ReplayEvent, Span, SpanStatus, TraceSummary, Value,
};

use crate::{any_value, AnyValue, ArrayValue, KeyValue};

impl From<Value> for AnyValue {
    fn from(v: Value) -> Self {
        AnyValue {
            value: Some(match v {
                Value::String(s) => any_value::Value::StringValue(s),
                Value::Int(i) => any_value::Value::IntValue(i),
                Value::Double(d) => any_value::Value::DoubleValue(d),
                Value::Bool(b) => any_value::Value::BoolValue(b),
                Value::Array(a) => {
                    any_value::Value::ArrayValue(ArrayValue { values: a.into_iter().map(Into::into).collect() })
                }
            }),
        }
    }
}

/// `None` for a value with none of the kinds set.
fn value(v: AnyValue) -> Option<Value> {
    Some(match v.value? {
        any_value::Value::StringValue(s) => Value::String(s),
        any_value::Value::IntValue(i) => Value::Int(i),
        any_value::Value::DoubleValue(d) => Value::Double(d),
        any_value::Value::BoolValue(b) => Value::Bool(b),
        any_value::Value::ArrayValue(a) => Value::Array(a.values.into_iter().filter_map(value).collect()),
    })
}

impl From<Attribute> for KeyValue {
    fn from(a: Attribute) -> Self {
        KeyValue { key: a.key, value: a.value.map(Into::into) }
    }
}

impl From<KeyValue> for Attribute {
    fn from(kv: KeyValue) -> Self {
        Attribute { key: kv.key, value: kv.value.and_then(value) }
    }
}

fn attributes_to_wire(a: Vec<Attribute>) -> Vec<KeyValue> {
    a.into_iter().map(Into::into).collect()
}

fn attributes_from_wire(a: Vec<KeyValue>) -> Vec<Attribute> {
    a.into_iter().map(Into::into).collect()
}

same_fields!(Span = Span <=> crate::Span {
    trace_id, span_id, parent_span_id, service_name, operation, start_unix_nanos, duration_nanos;
    status: SpanStatus::code, SpanStatus::from_code;
    attributes: attributes_to_wire, attributes_from_wire;
});
same_fields!(LogRecord = LogRecord <=> crate::LogRecord {
    unix_nanos, service, message, trace_id, span_id;
    level: LogLevel::code, LogLevel::from_code;
    attributes: attributes_to_wire, attributes_from_wire;
});
same_fields!(HostMetric = HostMetric <=> crate::HostMetric {
    unix_nanos, hostname, cpu_percent, memory_used_bytes, memory_total_bytes, disk_used_percent,
    network_rx_bytes_per_sec, network_tx_bytes_per_sec;
    attributes: attributes_to_wire, attributes_from_wire;
});
same_fields!(Event = Event <=> crate::Event { uuid, event, distinct_id, unix_nanos, properties_json });
same_fields!(ReplayEvent = ReplayEvent <=> crate::ReplayEvent {
    session_id, distinct_id, window_id, unix_nanos, event_type, data_json, uuid,
});
same_fields!(TraceSummary = TraceSummary <=> crate::TraceSummary {
    trace_id, start_unix_nanos, end_unix_nanos, root_service, root_operation, span_count, error_count, services,
});

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes() -> Vec<Attribute> {
        let a = |key: &str, value| Attribute { key: key.into(), value };
        vec![
            a("s", Some(Value::String("checkout".into()))),
            a("i", Some(Value::Int(-3))),
            a("d", Some(Value::Double(0.25))),
            a("b", Some(Value::Bool(true))),
            a("a", Some(Value::Array(vec![Value::Int(1), Value::String("x".into())]))),
            a("null", None),
        ]
    }

    #[test]
    fn every_row_kind_survives_the_wire_unchanged() {
        let batch = sextant_model::row::RowBatch {
            project_id: "p".into(),
            spans: vec![Span {
                trace_id: "t".into(),
                span_id: "s".into(),
                parent_span_id: "r".into(),
                service_name: "api".into(),
                operation: "GET /".into(),
                start_unix_nanos: 5,
                duration_nanos: 7,
                status: SpanStatus::Error,
                attributes: attributes(),
            }],
            logs: vec![LogRecord {
                unix_nanos: 9,
                level: LogLevel::Warn,
                service: "api".into(),
                message: "m".into(),
                trace_id: "t".into(),
                span_id: "s".into(),
                attributes: attributes(),
            }],
            host_metrics: vec![HostMetric {
                unix_nanos: 11,
                hostname: "h".into(),
                cpu_percent: Some(1.5),
                memory_used_bytes: Some(2),
                memory_total_bytes: Some(3),
                disk_used_percent: None,
                network_rx_bytes_per_sec: Some(4.0),
                network_tx_bytes_per_sec: Some(5.0),
                attributes: attributes(),
            }],
            json_bytes: 123,
            events: vec![Event {
                uuid: "u".into(),
                event: "e".into(),
                distinct_id: "d".into(),
                unix_nanos: 13,
                properties_json: "{}".into(),
            }],
            replay_events: vec![ReplayEvent {
                session_id: "s".into(),
                distinct_id: "d".into(),
                window_id: "w".into(),
                unix_nanos: 15,
                event_type: 2,
                data_json: "{}".into(),
                uuid: "u".into(),
            }],
            received_unix_millis: 0,
        };
        fn through_the_wire<T: Clone + PartialEq + std::fmt::Debug, W: From<T>>(rows: &[T]) -> bool
        where
            T: From<W>,
        {
            rows.iter().all(|r| T::from(W::from(r.clone())) == *r)
        }
        assert!(through_the_wire::<_, crate::Span>(&batch.spans));
        assert!(through_the_wire::<_, crate::LogRecord>(&batch.logs));
        assert!(through_the_wire::<_, crate::HostMetric>(&batch.host_metrics));
        assert!(through_the_wire::<_, crate::Event>(&batch.events));
        assert!(through_the_wire::<_, crate::ReplayEvent>(&batch.replay_events));
    }

    #[test]
    fn the_row_enum_codes_are_the_numbers_of_the_wire_enums() {
        use crate::{LogLevel as W, SpanStatus as S};
        let statuses = [(SpanStatus::Unset, S::Unset), (SpanStatus::Ok, S::Ok), (SpanStatus::Error, S::Error)];
        for (domain, wire) in statuses {
            assert_eq!(domain.code(), wire as i32, "{domain:?}");
        }
        let levels = [
            (LogLevel::Unspecified, W::Unspecified),
            (LogLevel::Trace, W::Trace),
            (LogLevel::Debug, W::Debug),
            (LogLevel::Info, W::Info),
            (LogLevel::Warn, W::Warn),
            (LogLevel::Error, W::Error),
            (LogLevel::Fatal, W::Fatal),
        ];
        for (domain, wire) in levels {
            assert_eq!(domain.code(), wire as i32, "{domain:?}");
        }
    }

    #[test]
    fn unknown_enum_codes_read_as_the_default() {
        let span = |status| crate::Span { status, ..Default::default() };
        assert_eq!(Span::from(span(99)).status, SpanStatus::Unset);
        let log = |level| crate::LogRecord { level, ..Default::default() };
        assert_eq!(LogRecord::from(log(-1)).level, LogLevel::Unspecified);
    }
}
