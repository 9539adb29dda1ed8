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

impl From<SpanStatus> for crate::SpanStatus {
    fn from(s: SpanStatus) -> Self {
        match s {
            SpanStatus::Unset => crate::SpanStatus::Unset,
            SpanStatus::Ok => crate::SpanStatus::Ok,
            SpanStatus::Error => crate::SpanStatus::Error,
        }
    }
}

impl From<crate::SpanStatus> for SpanStatus {
    fn from(s: crate::SpanStatus) -> Self {
        match s {
            crate::SpanStatus::Unset => SpanStatus::Unset,
            crate::SpanStatus::Ok => SpanStatus::Ok,
            crate::SpanStatus::Error => SpanStatus::Error,
        }
    }
}

/// An unknown code reads as unset, as protobuf reads an unknown enum value.
pub fn span_status(code: i32) -> SpanStatus {
    crate::SpanStatus::try_from(code).unwrap_or_default().into()
}

impl From<LogLevel> for crate::LogLevel {
    fn from(l: LogLevel) -> Self {
        match l {
            LogLevel::Unspecified => crate::LogLevel::Unspecified,
            LogLevel::Trace => crate::LogLevel::Trace,
            LogLevel::Debug => crate::LogLevel::Debug,
            LogLevel::Info => crate::LogLevel::Info,
            LogLevel::Warn => crate::LogLevel::Warn,
            LogLevel::Error => crate::LogLevel::Error,
            LogLevel::Fatal => crate::LogLevel::Fatal,
        }
    }
}

impl From<crate::LogLevel> for LogLevel {
    fn from(l: crate::LogLevel) -> Self {
        match l {
            crate::LogLevel::Unspecified => LogLevel::Unspecified,
            crate::LogLevel::Trace => LogLevel::Trace,
            crate::LogLevel::Debug => LogLevel::Debug,
            crate::LogLevel::Info => LogLevel::Info,
            crate::LogLevel::Warn => LogLevel::Warn,
            crate::LogLevel::Error => LogLevel::Error,
            crate::LogLevel::Fatal => LogLevel::Fatal,
        }
    }
}

/// An unknown code reads as unspecified.
pub fn log_level(code: i32) -> LogLevel {
    crate::LogLevel::try_from(code).unwrap_or_default().into()
}

impl From<Span> for crate::Span {
    fn from(s: Span) -> Self {
        let Span {
            trace_id,
            span_id,
            parent_span_id,
            service_name,
            operation,
            start_unix_nanos,
            duration_nanos,
            status,
            attributes,
        } = s;
        crate::Span {
            trace_id,
            span_id,
            parent_span_id,
            service_name,
            operation,
            start_unix_nanos,
            duration_nanos,
            status: crate::SpanStatus::from(status) as i32,
            attributes: attributes_to_wire(attributes),
        }
    }
}

impl From<crate::Span> for Span {
    fn from(s: crate::Span) -> Self {
        let crate::Span {
            trace_id,
            span_id,
            parent_span_id,
            service_name,
            operation,
            start_unix_nanos,
            duration_nanos,
            status,
            attributes,
        } = s;
        Span {
            trace_id,
            span_id,
            parent_span_id,
            service_name,
            operation,
            start_unix_nanos,
            duration_nanos,
            status: span_status(status),
            attributes: attributes_from_wire(attributes),
        }
    }
}

impl From<LogRecord> for crate::LogRecord {
    fn from(l: LogRecord) -> Self {
        let LogRecord { unix_nanos, level, service, message, trace_id, span_id, attributes } = l;
        crate::LogRecord {
            unix_nanos,
            level: crate::LogLevel::from(level) as i32,
            service,
            message,
            trace_id,
            span_id,
            attributes: attributes_to_wire(attributes),
        }
    }
}

impl From<crate::LogRecord> for LogRecord {
    fn from(l: crate::LogRecord) -> Self {
        let crate::LogRecord { unix_nanos, level, service, message, trace_id, span_id, attributes } = l;
        LogRecord {
            unix_nanos,
            level: log_level(level),
            service,
            message,
            trace_id,
            span_id,
            attributes: attributes_from_wire(attributes),
        }
    }
}

/// Both directions of a message whose fields are the domain type's, same names. Both sides are destructured whole, so a field added to one does not compile.
macro_rules! same_fields {
    ($domain:ident <=> $wire:path { $($field:ident),* $(,)? }) => {
        impl From<$domain> for $wire {
            fn from(d: $domain) -> Self {
                let $domain { $($field,)* } = d;
                $wire { $($field,)* }
            }
        }

        impl From<$wire> for $domain {
            fn from(w: $wire) -> Self {
                let $wire { $($field,)* } = w;
                $domain { $($field,)* }
            }
        }
    };
}

impl From<HostMetric> for crate::HostMetric {
    fn from(m: HostMetric) -> Self {
        let HostMetric {
            unix_nanos,
            hostname,
            cpu_percent,
            memory_used_bytes,
            memory_total_bytes,
            disk_used_percent,
            network_rx_bytes_per_sec,
            network_tx_bytes_per_sec,
            attributes,
        } = m;
        crate::HostMetric {
            unix_nanos,
            hostname,
            cpu_percent,
            memory_used_bytes,
            memory_total_bytes,
            disk_used_percent,
            network_rx_bytes_per_sec,
            network_tx_bytes_per_sec,
            attributes: attributes_to_wire(attributes),
        }
    }
}

impl From<crate::HostMetric> for HostMetric {
    fn from(m: crate::HostMetric) -> Self {
        let crate::HostMetric {
            unix_nanos,
            hostname,
            cpu_percent,
            memory_used_bytes,
            memory_total_bytes,
            disk_used_percent,
            network_rx_bytes_per_sec,
            network_tx_bytes_per_sec,
            attributes,
        } = m;
        HostMetric {
            unix_nanos,
            hostname,
            cpu_percent,
            memory_used_bytes,
            memory_total_bytes,
            disk_used_percent,
            network_rx_bytes_per_sec,
            network_tx_bytes_per_sec,
            attributes: attributes_from_wire(attributes),
        }
    }
}

same_fields!(Event <=> crate::Event { uuid, event, distinct_id, unix_nanos, properties_json });
same_fields!(ReplayEvent <=> crate::ReplayEvent {
    session_id, distinct_id, window_id, unix_nanos, event_type, data_json, uuid,
});
same_fields!(TraceSummary <=> crate::TraceSummary {
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
    fn unknown_enum_codes_read_as_the_default() {
        assert_eq!(span_status(99), SpanStatus::Unset);
        assert_eq!(log_level(-1), LogLevel::Unspecified);
    }
}
