//! Product-analytics objects (docs/API.md, "Events" and "Session replay ingest"): events and
//! session-replay events, their limits and their validation — one function per kind, used by the
//! native API and the PostHog-compatible capture endpoints alike.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::batch::Capped;
use crate::ingest::FieldError;
use crate::properties::Properties;
use crate::row::{Event, ReplayEvent};
use crate::time::TimeInput;

pub const MAX_EVENTS: usize = 1000;
pub const MAX_EVENTS_BODY: usize = 20 * 1024 * 1024;
pub const MAX_REPLAY_EVENTS: usize = 500;
pub const MAX_REPLAY_BODY: usize = 10 * 1024 * 1024;
/// `event` and `distinct_id` (and session/window ids).
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_UUID_LEN: usize = 64;
/// One event's properties, serialized.
pub const MAX_PROPERTIES_BYTES: usize = 64 * 1024;
/// One rrweb event's `data`, serialized (full snapshots of a page are large).
pub const MAX_REPLAY_DATA_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventJson {
    #[serde(default)]
    pub event: Option<String>,
    /// A string, or a number taken as its decimal text.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub distinct_id: Option<Value>,
    #[serde(default)]
    pub timestamp: Option<TimeInput>,
    /// Written in their stored form as the body is parsed ([`Properties`]).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub properties: Option<Properties>,
    #[serde(default)]
    pub uuid: Option<String>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchBody {
    #[serde(default)]
    pub token: Option<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::capped::<EventJson, MAX_EVENTS>))]
    pub events: Capped<EventJson, MAX_EVENTS>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayEventJson {
    #[serde(rename = "type")]
    pub event_type: i64,
    /// Kept as sent: stored as text, never needed as a tree (which takes ten times the memory).
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub data: Box<serde_json::value::RawValue>,
    pub timestamp: TimeInput,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplayBody {
    #[serde(default)]
    pub token: Option<String>,
    pub session_id: String,
    #[serde(default)]
    pub distinct_id: Option<String>,
    #[serde(default)]
    pub window_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::openapi::capped::<ReplayEventJson, MAX_REPLAY_EVENTS>))]
    pub events: Capped<ReplayEventJson, MAX_REPLAY_EVENTS>,
}

/// Refuses PostHog properties (kept as text while a body is split) whose text is too long to
/// pass validation.
pub fn check_properties_text(raw: &Option<Box<RawValue>>) -> Result<(), &'static str> {
    if raw.as_ref().is_some_and(|r| r.get().len() > MAX_PROPERTIES_TEXT) {
        return Err("properties must be at most 64 KiB");
    }
    Ok(())
}

/// Properties as sent, whitespace included, before they are measured serialized.
const MAX_PROPERTIES_TEXT: usize = 4 * MAX_PROPERTIES_BYTES;

fn fail(errors: &mut Vec<FieldError>, index: usize, field: &str, reason: &str) {
    errors.push(FieldError { index, field: field.to_owned(), reason: reason.to_owned() });
}

/// A required name: non-empty after trimming, at most [`MAX_NAME_CHARS`] characters, no
/// control characters.
fn name(errors: &mut Vec<FieldError>, index: usize, field: &str, value: Option<&str>) -> Option<String> {
    match value {
        None => fail(errors, index, field, "is required"),
        Some(v) if v.trim().is_empty() => fail(errors, index, field, "must not be empty"),
        Some(v) if v.chars().count() > MAX_NAME_CHARS => fail(errors, index, field, "must be at most 200 characters"),
        Some(v) if v.chars().any(char::is_control) => fail(errors, index, field, "must not contain control characters"),
        Some(v) => return Some(v.to_owned()),
    }
    None
}

/// `distinct_id` may come as a string or a number (SDKs send both); stored as text.
fn distinct_id(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Validates one event. `now_ns` is the receive time, the default timestamp.
pub fn validate_event(index: usize, e: EventJson, now_ns: i64, errors: &mut Vec<FieldError>) -> Option<Event> {
    let before = errors.len();
    let event = name(errors, index, "event", e.event.as_deref());
    let properties = e.properties.unwrap_or_else(|| Properties::Object("{}".to_owned()));
    // PostHog SDKs may put the distinct id in the properties.
    let did = distinct_id(e.distinct_id.as_ref()).or_else(|| match &properties {
        Properties::Object(text) => {
            let props: Value = serde_json::from_str(text).ok()?;
            distinct_id(props.get("distinct_id"))
        }
        _ => None,
    });
    if e.distinct_id.as_ref().is_some_and(|v| !v.is_string() && !v.is_number() && !v.is_null()) {
        fail(errors, index, "distinct_id", "must be a string");
    }
    let distinct = name(errors, index, "distinct_id", did.as_deref());
    let time = match &e.timestamp {
        None => now_ns,
        Some(t) => t.to_unix_nanos().unwrap_or_else(|reason| {
            fail(errors, index, "timestamp", reason);
            0
        }),
    };
    let properties = match properties {
        Properties::Object(text) => text,
        Properties::TooLarge => {
            fail(errors, index, "properties", "must be at most 64 KiB");
            String::new()
        }
        Properties::NotObject => {
            fail(errors, index, "properties", "must be an object");
            String::new()
        }
    };
    let uuid = e.uuid.unwrap_or_default();
    if uuid.len() > MAX_UUID_LEN || uuid.chars().any(|c| c.is_control() || c.is_whitespace()) {
        fail(errors, index, "uuid", "must be at most 64 characters without spaces");
    }
    (errors.len() == before).then(|| {
        let mut row = Event {
            uuid,
            event: event.unwrap_or_default(),
            distinct_id: distinct.unwrap_or_default(),
            unix_nanos: time,
            properties_json: properties,
        };
        // Without a timestamp the time is the receive time, new on every retry: no uuid.
        if row.uuid.is_empty() && e.timestamp.is_some() {
            row.uuid = crate::idempotency::event_uuid(&row);
        }
        row
    })
}

/// Validates the events of one replay request (they share its session, user and window).
pub fn validate_replay(body: ReplayBody, errors: &mut Vec<FieldError>) -> Vec<ReplayEvent> {
    let session = name(errors, 0, "session_id", Some(&body.session_id));
    let window = body.window_id.unwrap_or_default();
    let distinct = body.distinct_id.unwrap_or_default();
    for (field, v) in [("window_id", &window), ("distinct_id", &distinct)] {
        if v.chars().count() > MAX_NAME_CHARS || v.chars().any(char::is_control) {
            fail(errors, 0, field, "must be at most 200 characters without control characters");
        }
    }
    // The caller refuses a body over the cap with its own error; such a body has no events.
    let events = body.events.into_items().unwrap_or_default();
    let mut out = Vec::with_capacity(events.len());
    for (i, e) in events.into_iter().enumerate() {
        let before = errors.len();
        let time = e.timestamp.to_unix_nanos().unwrap_or_else(|reason| {
            fail(errors, i, "timestamp", reason);
            0
        });
        if !(0..=64).contains(&e.event_type) {
            fail(errors, i, "type", "must be an rrweb event type (0–64)");
        }
        let data = e.data.get().to_owned();
        if data.len() > MAX_REPLAY_DATA_BYTES {
            fail(errors, i, "data", "must be at most 8 MiB");
        }
        if errors.len() == before {
            let mut row = ReplayEvent {
                session_id: session.clone().unwrap_or_default(),
                distinct_id: distinct.clone(),
                window_id: window.clone(),
                unix_nanos: time,
                event_type: e.event_type as i32,
                data_json: data,
                uuid: String::new(),
            };
            row.uuid = crate::idempotency::replay_uuid(&row);
            out.push(row);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(v: Value) -> Result<Event, Vec<FieldError>> {
        let mut errors = Vec::new();
        let e = validate_event(0, serde_json::from_str(&v.to_string()).unwrap(), 42, &mut errors);
        e.ok_or(errors)
    }

    /// JSON text as clients write it: odd number forms, escapes, repeated keys, whitespace.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let scalar = prop_oneof![
            Just("0"),
            Just("-0"),
            Just("7"),
            Just("-12"),
            Just("1e2"),
            Just("1.50"),
            Just("3.0E-2"),
            Just("18446744073709551615"),
            Just("18446744073709551616"),
            Just("-9223372036854775808"),
            Just("-9223372036854775809"),
            Just("true"),
            Just("false"),
            Just("null"),
            Just("\"plain\""),
            Just("\"é ✓\""),
            Just("\"\\u00e9\""),
            Just("\"line\\nbreak\""),
            Just("\"\\/\""),
            Just("\"\\u0001\""),
            Just("\"\\ud83d\\ude00\""),
            Just("\"\""),
        ]
        .prop_map(str::to_owned);
        let number = prop_oneof![
            proptest::num::f64::NORMAL.prop_map(|f| format!("{f}")),
            proptest::num::f64::NORMAL.prop_map(|f| format!("{f:e}")),
            proptest::num::f64::SUBNORMAL.prop_map(|f| format!("{f:E}")),
            proptest::num::i64::ANY.prop_map(|n| n.to_string()),
            proptest::num::u128::ANY.prop_map(|n| n.to_string()),
        ];
        let scalar = prop_oneof![scalar, number];
        let key = prop_oneof![Just("a"), Just("b"), Just("$browser"), Just("A"), Just("é"), Just("k\\\"q"), Just("")];
        let space = prop_oneof![Just(""), Just(" "), Just("\n  ")];
        scalar.prop_recursive(6, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec((key.clone(), inner.clone(), space.clone()), 0..6).prop_map(|members| {
                    let body: Vec<String> =
                        members.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
                    format!("{{{}}}", body.join(","))
                }),
                prop::collection::vec((inner, space.clone()), 0..4).prop_map(|items| {
                    let body: Vec<String> = items.iter().map(|(v, w)| format!("{w}{v}{w}")).collect();
                    format!("[{}]", body.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        #[test]
        fn stored_properties_are_the_bytes_serde_json_writes_for_them(members in proptest::collection::vec(json_text(), 0..5)) {
            let object = format!("{{{}}}", members.iter().enumerate().map(|(i, v)| format!("\"p{}\": {v}", i % 3)).collect::<Vec<_>>().join(","));
            let value: Value = serde_json::from_str(&object).unwrap();
            let stored: Properties = serde_json::from_str(&object).unwrap();
            proptest::prop_assert_eq!(stored, Properties::Object(serde_json::to_string(&value).unwrap()));
        }
    }

    #[test]
    fn event_defaults_and_limits() {
        let e = event(json!({"event": "signup", "distinct_id": "u1"})).unwrap();
        assert_eq!((e.unix_nanos, e.properties_json.as_str(), e.uuid.as_str()), (42, "{}", ""));
        let e = event(json!({"event": "x", "distinct_id": 7, "timestamp": 1000, "properties": {"a": 1}})).unwrap();
        assert_eq!((e.distinct_id.as_str(), e.unix_nanos), ("7", 1_000_000_000));
        let fields = |v| event(v).unwrap_err().into_iter().map(|e| e.field).collect::<Vec<_>>();
        assert_eq!(fields(json!({"distinct_id": "u"})), ["event"]);
        assert_eq!(fields(json!({"event": " ", "distinct_id": ""})), ["event", "distinct_id"]);
        assert_eq!(fields(json!({"event": "e".repeat(201), "distinct_id": "u"})), ["event"]);
        assert_eq!(fields(json!({"event": "e", "distinct_id": "u", "properties": [1]})), ["properties"]);
        let large = json!({"event": "e", "distinct_id": "u", "properties": {"k": "x".repeat(MAX_PROPERTIES_BYTES)}});
        assert_eq!(fields(large), ["properties"]);
        let e = event(json!({"event": "e", "properties": {"distinct_id": 12, "b": 1, "a": 2}})).unwrap();
        assert_eq!((e.distinct_id.as_str(), e.properties_json.as_str()), ("12", r#"{"a":2,"b":1,"distinct_id":12}"#));
        assert_eq!(fields(json!({"event": "e", "distinct_id": "u", "timestamp": "yesterday"})), ["timestamp"]);
        // 200 characters of multi-byte text are fine: the limit counts characters.
        assert!(event(json!({"event": "é".repeat(200), "distinct_id": "u"})).is_ok());
    }
}
