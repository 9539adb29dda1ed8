//! Session recordings from posthog-js (docs/API.md, "Session recordings from posthog-js"): a
//! `$snapshot` event's properties — `$session_id`, `$window_id`, `distinct_id`, and rrweb events
//! in `$snapshot_data` (an array, or one event) or `$snapshot_items` — become the native replay
//! body, validated by [`analytics::validate_replay`] like `/v1/replay/events`. posthog-js gzips
//! parts of some rrweb events into latin1 strings (`"cv": "2024-10"`); they are expanded here
//! through the caller's `inflate`, which bounds and charges what they expand to, so that a
//! player is given plain rrweb events.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::SnapshotJson;
use crate::analytics::{self, ReplayBody, ReplayEventJson, MAX_REPLAY_EVENTS};
use crate::batch::Capped;
use crate::ingest::FieldError;
use crate::row::ReplayEvent;
use crate::time::TimeInput;

/// The one version of posthog-js's compression of rrweb events.
pub const COMPRESSION_VERSION: &str = "2024-10";

/// The rrweb full snapshot: its whole `data` is compressed.
const FULL_SNAPSHOT: i64 = 2;
/// Incremental snapshots: their mutation and style-sheet lists are.
const INCREMENTAL_SNAPSHOT: i64 = 3;
const COMPRESSED_FIELDS: [&str; 4] = ["texts", "attributes", "removes", "adds"];

#[derive(Deserialize)]
struct SnapshotProperties {
    #[serde(rename = "$session_id", default)]
    session_id: Option<Value>,
    #[serde(rename = "$window_id", default)]
    window_id: Option<Value>,
    #[serde(default)]
    distinct_id: Option<Value>,
    #[serde(rename = "$snapshot_data", default)]
    data: Option<Box<RawValue>>,
    #[serde(rename = "$snapshot_items", default)]
    items: Option<Box<RawValue>>,
}

/// An rrweb event as posthog-js sends it.
#[derive(Debug, Deserialize)]
pub struct SentEvent {
    #[serde(rename = "type")]
    event_type: i64,
    data: Box<RawValue>,
    timestamp: TimeInput,
    #[serde(default)]
    cv: Option<String>,
}

/// The recording a `$snapshot` event carries, before its events are expanded and validated.
#[derive(Debug)]
pub struct Recording {
    index: usize,
    session_id: String,
    window_id: Option<String>,
    distinct_id: Option<String>,
    events: Capped<SentEvent, MAX_REPLAY_EVENTS>,
}

fn fail(errors: &mut Vec<FieldError>, index: usize, field: &str, reason: impl Into<String>) {
    errors.push(FieldError { index, field: field.to_owned(), reason: reason.into() });
}

/// Text of an id sent as a string or a number (SDKs send both).
fn id_text(v: Option<&Value>) -> Result<Option<String>, ()> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(()),
    }
}

/// Reads a `$snapshot` event's recording; `None` (and `errors`) when it has none.
pub fn parse(snapshot: SnapshotJson, errors: &mut Vec<FieldError>) -> Option<Recording> {
    let index = snapshot.index;
    let Some(raw) = snapshot.properties else {
        fail(errors, index, "properties", "are required on a $snapshot event");
        return None;
    };
    let props: SnapshotProperties = match serde_json::from_str(raw.get()) {
        Ok(p) => p,
        Err(e) => {
            fail(errors, index, "properties", format!("invalid $snapshot properties: {e}"));
            return None;
        }
    };
    let before = errors.len();
    let session_id = match id_text(props.session_id.as_ref()) {
        Ok(Some(s)) => s,
        Ok(None) => {
            fail(errors, index, "properties.$session_id", "is required");
            String::new()
        }
        Err(()) => {
            fail(errors, index, "properties.$session_id", "must be a string");
            String::new()
        }
    };
    let window_id = id_text(props.window_id.as_ref()).unwrap_or_else(|()| {
        fail(errors, index, "properties.$window_id", "must be a string");
        None
    });
    let distinct_id = id_text(props.distinct_id.as_ref().or(snapshot.distinct_id.as_ref())).unwrap_or_else(|()| {
        fail(errors, index, "properties.distinct_id", "must be a string");
        None
    });
    let (field, list) = match (props.data, props.items) {
        (Some(data), _) => ("properties.$snapshot_data", data),
        (None, Some(items)) => ("properties.$snapshot_items", items),
        (None, None) => {
            fail(errors, index, "properties.$snapshot_data", "is required");
            return None;
        }
    };
    // An array of rrweb events, or (older SDKs) one.
    let events = if list.get().trim_start().starts_with('[') {
        serde_json::from_str::<Capped<SentEvent, MAX_REPLAY_EVENTS>>(list.get())
    } else {
        serde_json::from_str::<SentEvent>(list.get()).map(|e| Capped::from(vec![e]))
    };
    let events = match events {
        Ok(events) => events,
        Err(e) => {
            fail(errors, index, field, format!("must hold rrweb events {{type, data, timestamp}}: {e}"));
            return None;
        }
    };
    (errors.len() == before).then_some(Recording { index, session_id, window_id, distinct_id, events })
}

/// Why a compressed field was not expanded: the input's fault (a field error), or the
/// caller's refusal (a limit or budget, returned as is).
pub enum Inflated<E> {
    Invalid(String),
    Refused(E),
}

impl Recording {
    /// How many rrweb events it carries (counted past the cap, not kept).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Its rrweb events expanded (`inflate` decompresses one gzip member) and validated as
    /// `/v1/replay/events` validates them; what is wrong goes to `errors`, fields named as
    /// sent, at the `$snapshot` event's index.
    pub fn validate<E>(
        self,
        inflate: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>, Inflated<E>>,
        errors: &mut Vec<FieldError>,
    ) -> Result<Vec<ReplayEvent>, E> {
        let index = self.index;
        let sent = self.events.into_items().unwrap_or_default();
        let mut events = Vec::with_capacity(sent.len());
        let before = errors.len();
        for (i, e) in sent.into_iter().enumerate() {
            match expand(e, inflate) {
                Ok(e) => events.push(e),
                Err(Inflated::Refused(e)) => return Err(e),
                Err(Inflated::Invalid(reason)) => {
                    fail(errors, index, &format!("properties.$snapshot_data[{i}]"), reason)
                }
            }
        }
        if errors.len() > before {
            return Ok(Vec::new());
        }
        let body = ReplayBody {
            token: None,
            session_id: self.session_id,
            distinct_id: self.distinct_id,
            window_id: self.window_id,
            events: Capped::from(events),
        };
        let mut found = Vec::new();
        let rows = analytics::validate_replay(body, &mut found);
        for e in found {
            let field = match e.field.as_str() {
                "session_id" | "window_id" => format!("properties.${}", e.field),
                "distinct_id" => "properties.distinct_id".to_owned(),
                other => format!("properties.$snapshot_data[{}].{other}", e.index),
            };
            errors.push(FieldError { index, field, reason: e.reason });
        }
        Ok(rows)
    }
}

/// One rrweb event with what posthog-js compressed expanded.
fn expand<E>(
    e: SentEvent,
    inflate: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>, Inflated<E>>,
) -> Result<ReplayEventJson, Inflated<E>> {
    let data = match e.cv.as_deref() {
        None => e.data,
        Some(COMPRESSION_VERSION) if e.event_type == FULL_SNAPSHOT => inflate_string(&e.data, inflate)?,
        Some(COMPRESSION_VERSION) if e.event_type == INCREMENTAL_SNAPSHOT => {
            let mut fields: BTreeMap<String, Box<RawValue>> = serde_json::from_str(e.data.get())
                .map_err(|err| Inflated::Invalid(format!("data must be an object: {err}")))?;
            for name in COMPRESSED_FIELDS {
                if let Some(value) = fields.get_mut(name) {
                    if value.get().starts_with('"') {
                        *value = inflate_string(value, inflate)?;
                    }
                }
            }
            let text = serde_json::to_string(&fields).map_err(|err| Inflated::Invalid(err.to_string()))?;
            RawValue::from_string(text).map_err(|err| Inflated::Invalid(err.to_string()))?
        }
        Some(COMPRESSION_VERSION) => e.data,
        Some(other) => return Err(Inflated::Invalid(format!("unknown compression `cv` {other:?}"))),
    };
    Ok(ReplayEventJson { event_type: e.event_type, data, timestamp: e.timestamp })
}

/// A JSON string holding gzip bytes one per character (latin1), expanded to the JSON it holds.
fn inflate_string<E>(
    value: &RawValue,
    inflate: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>, Inflated<E>>,
) -> Result<Box<RawValue>, Inflated<E>> {
    let text: String = serde_json::from_str(value.get())
        .map_err(|_| Inflated::Invalid("a compressed field must be a string".to_owned()))?;
    let bytes = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| Inflated::Invalid("a compressed field must be latin1 text".to_owned()))?;
    let json = inflate(&bytes)?;
    let json = String::from_utf8(json).map_err(|_| Inflated::Invalid("compressed JSON must be UTF-8".to_owned()))?;
    RawValue::from_string(json).map_err(|e| Inflated::Invalid(format!("compressed data is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// gzip as posthog-js writes it into a string: one character per byte.
    fn latin1_gzip(json: &Value) -> String {
        gzip(json.to_string().as_bytes()).into_iter().map(char::from).collect()
    }

    /// A stored gzip member: the test needs no gzip encoder.
    fn gzip(data: &[u8]) -> Vec<u8> {
        // A gzip member with one stored (uncompressed) deflate block.
        assert!(data.len() < 65536);
        let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1];
        let len = data.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&crc32(data).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    /// Reads back what [`gzip`] writes (a stored block), as the router's gunzip would.
    fn stored_inflate(limit: usize) -> impl FnMut(&[u8]) -> Result<Vec<u8>, Inflated<String>> {
        move |gz: &[u8]| {
            if gz.len() < 18 || gz[..3] != [0x1f, 0x8b, 8] || gz[10] != 1 {
                return Err(Inflated::Invalid("not gzip".into()));
            }
            let len = u16::from_le_bytes([gz[11], gz[12]]) as usize;
            if len > limit {
                return Err(Inflated::Refused(format!("over {limit} bytes")));
            }
            gz.get(15..15 + len).map(<[u8]>::to_vec).ok_or_else(|| Inflated::Invalid("truncated".into()))
        }
    }

    fn snapshot(index: usize, properties: Value) -> SnapshotJson {
        SnapshotJson {
            index,
            distinct_id: None,
            properties: Some(RawValue::from_string(properties.to_string()).unwrap()),
        }
    }

    fn recorded(properties: Value, limit: usize) -> Result<Result<Vec<ReplayEvent>, Vec<FieldError>>, String> {
        let mut errors = Vec::new();
        let Some(recording) = parse(snapshot(3, properties), &mut errors) else { return Ok(Err(errors)) };
        let rows = recording.validate(&mut stored_inflate(limit), &mut errors)?;
        Ok(if errors.is_empty() { Ok(rows) } else { Err(errors) })
    }

    #[test]
    fn compressed_rrweb_events_are_expanded_to_what_was_recorded() {
        let full = json!({"node": {"type": 0, "childNodes": [], "id": 1}, "initialOffset": {"left": 0, "top": 0}});
        let adds = json!([{"parentId": 5, "nextId": null, "node": {"type": 3, "textContent": "hello", "id": 9}}]);
        let props = json!({
            "$session_id": "s1", "$window_id": "w1", "distinct_id": "u1",
            "$snapshot_data": [
                {"type": 4, "data": {"href": "http://x/", "width": 10, "height": 20}, "timestamp": 1000},
                {"type": 2, "cv": "2024-10", "data": latin1_gzip(&full), "timestamp": 1001},
                {"type": 3, "cv": "2024-10", "timestamp": 1002,
                 "data": {"source": 0, "adds": latin1_gzip(&adds), "texts": latin1_gzip(&json!([])),
                          "attributes": latin1_gzip(&json!([])), "removes": latin1_gzip(&json!([]))}},
            ],
        });
        let rows = recorded(props, 1 << 20).unwrap().unwrap();
        assert_eq!(rows.len(), 3);
        assert!(rows
            .iter()
            .all(|r| (r.session_id.as_str(), r.window_id.as_str(), r.distinct_id.as_str()) == ("s1", "w1", "u1")));
        let data = |i: usize| serde_json::from_str::<Value>(&rows[i].data_json).unwrap();
        assert_eq!(data(1), full);
        assert_eq!(data(2), json!({"source": 0, "adds": adds, "texts": [], "attributes": [], "removes": []}));
        assert_eq!((rows[1].event_type, rows[1].unix_nanos), (2, 1_001_000_000));
    }

    #[test]
    fn one_event_and_snapshot_items_are_recordings_too() {
        let one = json!({"$session_id": 7, "$snapshot_data": {"type": 4, "data": {}, "timestamp": 5}});
        let rows = recorded(one, 100).unwrap().unwrap();
        assert_eq!((rows.len(), rows[0].session_id.as_str()), (1, "7"));
        let items =
            json!({"$session_id": "s", "$snapshot_items": [{"type": 3, "data": {"source": 1}, "timestamp": 5}]});
        assert_eq!(recorded(items, 100).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn what_is_wrong_is_named_by_the_field_sent() {
        let fields = |props: Value| -> Vec<String> {
            recorded(props, 1 << 20)
                .unwrap()
                .unwrap_err()
                .into_iter()
                .map(|e| {
                    assert_eq!(e.index, 3);
                    e.field
                })
                .collect()
        };
        assert_eq!(fields(json!({"$snapshot_data": []})), ["properties.$session_id"]);
        assert_eq!(fields(json!({"$session_id": "s"})), ["properties.$snapshot_data"]);
        assert_eq!(fields(json!({"$session_id": ["s"], "$snapshot_data": []})), ["properties.$session_id"]);
        assert_eq!(fields(json!({"$session_id": "s", "$snapshot_data": [{"type": 2}]})), ["properties.$snapshot_data"]);
        let bad = |e: Value| {
            fields(json!({"$session_id": "s", "$snapshot_data": [{"type": 4, "data": {}, "timestamp": 1}, e]}))
        };
        assert_eq!(bad(json!({"type": 99, "data": {}, "timestamp": 1})), ["properties.$snapshot_data[1].type"]);
        assert_eq!(
            bad(json!({"type": 2, "cv": "2024-10", "data": "not gzip", "timestamp": 1})),
            ["properties.$snapshot_data[1]"]
        );
        assert_eq!(
            bad(json!({"type": 2, "cv": "2024-10", "data": "\u{263a}", "timestamp": 1})),
            ["properties.$snapshot_data[1]"]
        );
        assert_eq!(bad(json!({"type": 2, "cv": "1999", "data": {}, "timestamp": 1})), ["properties.$snapshot_data[1]"]);
        let not_json = gzip(b"{nope").into_iter().map(char::from).collect::<String>();
        assert_eq!(
            bad(json!({"type": 2, "cv": "2024-10", "data": not_json, "timestamp": 1})),
            ["properties.$snapshot_data[1]"]
        );
        assert_eq!(fields(json!({"$session_id": "s".repeat(201), "$snapshot_data": []})), ["properties.$session_id"]);
    }

    #[test]
    fn expansion_past_the_callers_limit_is_its_refusal() {
        let big = json!({"text": "x".repeat(2000)});
        let props = json!({"$session_id": "s", "$snapshot_data": [{"type": 2, "cv": "2024-10", "data": latin1_gzip(&big), "timestamp": 1}]});
        assert!(recorded(props.clone(), 100).is_err());
        assert_eq!(recorded(props, 10_000).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn events_past_the_cap_are_counted_not_kept() {
        let events: Vec<Value> =
            (0..MAX_REPLAY_EVENTS + 3).map(|i| json!({"type": 3, "data": {}, "timestamp": i})).collect();
        let mut errors = Vec::new();
        let r = parse(snapshot(0, json!({"$session_id": "s", "$snapshot_data": events})), &mut errors).unwrap();
        assert_eq!(r.len(), MAX_REPLAY_EVENTS + 3);
    }
}
