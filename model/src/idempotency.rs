//! Content-derived uuids for analytics rows the client sent without one (docs/API.md,
//! "Idempotency of analytics events"): the same event sent twice gets the same uuid, so
//! storage keeps one copy of a retried batch.
//!
//! The uuid is an xxh3-128 of the content, without the project (storage keys include it),
//! written as a UUID version 8 (custom). Fields are length-prefixed so no two contents meet.

use xxhash_rust::xxh3::xxh3_128;

use crate::row::{Event, ReplayEvent};

fn field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    buf.extend_from_slice(bytes);
}

/// `hash` as a version-8 UUID text (`xxxxxxxx-xxxx-8xxx-yxxx-xxxxxxxxxxxx`).
fn uuid_text(hash: u128) -> String {
    let v = (hash & !(0xf << 76) & !(0x3 << 62)) | (0x8 << 76) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The uuid of an event from its name, distinct id, time and properties (canonical JSON text:
/// object keys sorted). Only meaningful when the client sent the timestamp: a defaulted one is
/// the receive time, different on every retry.
pub fn event_uuid(e: &Event) -> String {
    let mut buf = Vec::with_capacity(64 + e.event.len() + e.distinct_id.len() + e.properties_json.len());
    buf.push(b'e');
    field(&mut buf, e.event.as_bytes());
    field(&mut buf, e.distinct_id.as_bytes());
    buf.extend_from_slice(&e.unix_nanos.to_le_bytes());
    field(&mut buf, e.properties_json.as_bytes());
    uuid_text(xxh3_128(&buf))
}

/// The uuid of a replay event from its session, window, time, type and data.
pub fn replay_uuid(r: &ReplayEvent) -> String {
    let mut buf = Vec::with_capacity(64 + r.session_id.len() + r.window_id.len() + r.data_json.len());
    buf.push(b'r');
    field(&mut buf, r.session_id.as_bytes());
    field(&mut buf, r.window_id.as_bytes());
    buf.extend_from_slice(&r.unix_nanos.to_le_bytes());
    buf.extend_from_slice(&r.event_type.to_le_bytes());
    field(&mut buf, r.data_json.as_bytes());
    uuid_text(xxh3_128(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::{validate_event, validate_replay, EventJson, ReplayBody};
    use serde_json::{json, Value};

    fn event(v: Value, now: i64) -> Event {
        let mut errors = Vec::new();
        let e: EventJson = serde_json::from_value(v).unwrap();
        validate_event(0, e, now, &mut errors).unwrap()
    }

    #[test]
    fn an_event_without_uuid_gets_one_from_its_content_and_its_given_timestamp() {
        let sent = json!({"event": "buy", "distinct_id": "u1", "timestamp": 1_700_000_000_000i64,
                          "properties": {"b": 1, "a": [1, 2]}});
        let first = event(sent.clone(), 1);
        assert_eq!(first, event(sent.clone(), 2), "a retry, received later, is the same event");
        let u = &first.uuid;
        assert_eq!((u.len(), &u[14..15]), (36, "8"), "a version-8 UUID: {u}");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        // Key order does not matter; every field of the content does.
        let reordered = json!({"event": "buy", "distinct_id": "u1", "timestamp": 1_700_000_000_000i64,
                               "properties": {"a": [1, 2], "b": 1}});
        assert_eq!(event(reordered, 3).uuid, first.uuid);
        for (k, v) in [
            ("event", json!("view")),
            ("distinct_id", json!("u2")),
            ("timestamp", json!(1_700_000_000_001i64)),
            ("properties", json!({"b": 2, "a": [1, 2]})),
        ] {
            let mut other = sent.clone();
            other[k] = v;
            assert_ne!(event(other, 1).uuid, first.uuid, "{k}");
        }
        // The client's uuid is kept; without a timestamp there is nothing to derive one from.
        let given = json!({"event": "buy", "distinct_id": "u1", "uuid": "client-1"});
        assert_eq!(event(given, 1).uuid, "client-1");
        assert_eq!(event(json!({"event": "buy", "distinct_id": "u1"}), 1).uuid, "");
    }

    #[test]
    fn replay_events_get_a_uuid_from_session_window_time_type_and_data() {
        let body = |window: &str, data: Value| -> ReplayBody {
            serde_json::from_value(json!({"session_id": "s", "window_id": window, "events": [
                {"type": 3, "data": data, "timestamp": 1_700_000_000_000i64},
                {"type": 2, "data": data, "timestamp": 1_700_000_000_000i64},
            ]}))
            .unwrap()
        };
        let uuids = |b: ReplayBody| {
            let mut errors = Vec::new();
            let rows = validate_replay(b, &mut errors);
            assert!(errors.is_empty());
            rows.into_iter().map(|r| r.uuid).collect::<Vec<_>>()
        };
        let first = uuids(body("w", json!({"x": 1})));
        assert_eq!(first, uuids(body("w", json!({"x": 1}))));
        assert_ne!(first[0], first[1], "the type is part of the content");
        assert_ne!(first, uuids(body("w2", json!({"x": 1}))));
        assert_ne!(first, uuids(body("w", json!({"x": 2}))));
    }
}
