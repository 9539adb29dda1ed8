//! Analytics capture bodies (docs/API.md, "PostHog-compatible capture"): the PostHog shapes
//! (`{batch:[...]}`, `[...]`, one event), and where a body carries its project token, found
//! without keeping the body.

pub mod lz64;
pub mod recording;

use std::fmt;
use std::io::{self, Read};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::analytics::{EventJson, MAX_EVENTS};
use crate::batch::Capped;
use crate::properties::Properties;
use crate::time::TimeInput;

/// The events of a PostHog capture body and the token found in it (`api_key` or `token` at
/// the top, else the first event's `api_key`, `token` or `properties.token`). `$snapshot`
/// events (session recordings, [`crate::recording`]) are apart from the others, with their
/// index in the body; both count towards [`MAX_EVENTS`].
#[derive(Debug)]
pub struct PosthogBody {
    pub events: Capped<EventJson, MAX_EVENTS>,
    pub snapshots: Vec<SnapshotJson>,
    pub token: Option<String>,
}

/// The event name of session-recording events.
pub const SNAPSHOT_EVENT: &str = "$snapshot";

/// A `$snapshot` event as sent: its place in the body, and its properties as text (they hold
/// the rrweb events, larger than any other event's properties may be).
#[derive(Debug)]
pub struct SnapshotJson {
    pub index: usize,
    pub distinct_id: Option<Value>,
    pub properties: Option<Box<RawValue>>,
}

/// One PostHog event: the native fields and where PostHog SDKs put the token.
#[derive(Debug, Default, Deserialize)]
struct PosthogEvent {
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    distinct_id: Option<Value>,
    #[serde(default)]
    timestamp: Option<TimeInput>,
    /// Bounded once the event is known not to be a `$snapshot` ([`split`]).
    #[serde(default)]
    properties: Option<Box<RawValue>>,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    token: Option<String>,
}

impl PosthogEvent {
    fn token(&self) -> Option<String> {
        self.api_key.clone().or_else(|| self.token.clone()).or_else(|| properties_token(&self.properties))
    }
}

fn properties_token(properties: &Option<Box<RawValue>>) -> Option<String> {
    #[derive(Deserialize)]
    struct Token {
        token: Option<String>,
    }
    let raw = properties.as_ref()?;
    serde_json::from_str::<Token>(raw.get()).ok()?.token
}

/// Splits events into `$snapshot` events and the others, whose properties are bounded as the
/// native API's are.
fn split<E: de::Error>(events: Vec<PosthogEvent>) -> Result<(Vec<EventJson>, Vec<SnapshotJson>), E> {
    let mut plain = Vec::with_capacity(events.len());
    let mut snapshots = Vec::new();
    for (index, e) in events.into_iter().enumerate() {
        if e.event.as_deref() == Some(SNAPSHOT_EVENT) {
            snapshots.push(SnapshotJson { index, distinct_id: e.distinct_id, properties: e.properties });
        } else {
            crate::analytics::check_properties_text(&e.properties).map_err(E::custom)?;
            // Written in their stored form as the native API's are; a number no float holds
            // refuses the body there too.
            let properties: Option<Properties> =
                e.properties.map(|raw| serde_json::from_str(raw.get())).transpose().map_err(E::custom)?;
            plain.push(EventJson {
                event: e.event,
                distinct_id: e.distinct_id,
                timestamp: e.timestamp,
                properties,
                uuid: e.uuid,
            });
        }
    }
    Ok((plain, snapshots))
}

/// Parses a PostHog body; past [`MAX_EVENTS`] events are counted, not kept.
pub fn posthog_body(json: &[u8]) -> Result<PosthogBody, serde_json::Error> {
    serde_json::from_slice(json)
}

impl<'de> Deserialize<'de> for PosthogBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BodyV)
    }
}

struct BodyV;

fn events_of<E: de::Error>(events: Capped<PosthogEvent, MAX_EVENTS>, token: Option<String>) -> Result<PosthogBody, E> {
    let total = events.len();
    match events.into_items() {
        Ok(items) => {
            let token = token.or_else(|| items.iter().find_map(PosthogEvent::token));
            let (plain, snapshots) = split(items)?;
            Ok(PosthogBody { events: Capped::from(plain), snapshots, token })
        }
        Err(_) => Ok(PosthogBody { events: Capped::over(total), snapshots: Vec::new(), token }),
    }
}

impl<'de> Visitor<'de> for BodyV {
    type Value = PosthogBody;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event object, an array of events or {\"batch\": [...]}")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<PosthogBody, A::Error> {
        events_of(Capped::from_seq(seq)?, None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PosthogBody, A::Error> {
        let mut token = None;
        let mut batch = None;
        // Without `batch`, the object is itself the one event.
        let mut single = PosthogEvent::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "batch" => batch = Some(map.next_value::<Capped<PosthogEvent, MAX_EVENTS>>()?),
                "events" if batch.is_none() => batch = Some(map.next_value()?),
                "api_key" | "token" => {
                    let value: Option<String> = map.next_value()?;
                    token = token.or(value);
                }
                "event" => single.event = map.next_value()?,
                "distinct_id" => single.distinct_id = map.next_value()?,
                "timestamp" => single.timestamp = map.next_value()?,
                "uuid" => single.uuid = map.next_value()?,
                "properties" => single.properties = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match batch {
            Some(events) => events_of(events, token),
            None => {
                let token = token.or_else(|| properties_token(&single.properties));
                let (plain, snapshots) = split(vec![single])?;
                Ok(PosthogBody { events: Capped::from(plain), snapshots, token })
            }
        }
    }
}

/// Whether a PostHog body is a `data=<base64 JSON>` form (older SDKs).
pub fn is_form(body: &[u8]) -> bool {
    body.starts_with(FORM_PREFIX)
}

const FORM_PREFIX: &[u8] = b"data=";

/// The `data` field of a form, percent-decoded, or the body itself when it is not a form (the
/// text an older SDK's LZ-string body holds: [`lz64`]).
pub fn form_data(body: &[u8]) -> io::Result<Vec<u8>> {
    match body.strip_prefix(FORM_PREFIX) {
        None => Ok(body.to_vec()),
        Some(field) => {
            let mut out = Vec::with_capacity(field.len());
            FormField { inner: field, done: false }.read_to_end(&mut out)?;
            Ok(out)
        }
    }
}

/// The JSON text of a PostHog body as a stream: the body itself, or the decoded `data` field
/// of a form (percent-encoded base64, up to the next `&`), decoded as it is read.
pub fn posthog_json<'a>(mut body: impl Read + 'a) -> Box<dyn Read + 'a> {
    let mut head = [0u8; FORM_PREFIX.len()];
    let mut got = 0;
    while got < head.len() {
        match body.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Box::new(Failed(Some(e))),
        }
    }
    if head[..got] != *FORM_PREFIX {
        return Box::new(io::Cursor::new(head).take(got as u64).chain(body));
    }
    let field = FormField { inner: body, done: false };
    Box::new(base64::read::DecoderReader::new(field, &base64::engine::general_purpose::STANDARD))
}

/// A reader that fails once with the error it was made with.
struct Failed(Option<io::Error>);

impl Read for Failed {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        self.0.take().map_or(Ok(0), Err)
    }
}

/// The rest of a form field after `data=`: percent-decoded, without whitespace, up to `&`.
struct FormField<R> {
    inner: R,
    done: bool,
}

impl<R: Read> FormField<R> {
    fn byte(&mut self) -> io::Result<Option<u8>> {
        let mut b = [0u8; 1];
        loop {
            match self.inner.read(&mut b) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some(b[0])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl<R: Read> Read for FormField<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() && !self.done {
            let b = match self.byte()? {
                None | Some(b'&') => {
                    self.done = true;
                    break;
                }
                Some(b'%') => {
                    let (Some(hi), Some(lo)) = (self.byte()?, self.byte()?) else {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, "`data` is not percent-encoded"));
                    };
                    let hex = [hi, lo];
                    let text = std::str::from_utf8(&hex).ok();
                    text.and_then(|t| u8::from_str_radix(t, 16).ok())
                        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "`data` is not percent-encoded"))?
                }
                Some(b) => b,
            };
            if !b.is_ascii_whitespace() {
                buf[n] = b;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// Where a kind of body may carry its project token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenPlaces {
    /// `/v1/batch`, `/v1/replay/events`: `token` at the top.
    Native,
    /// PostHog capture: `api_key`/`token` at the top, else in an event or its properties.
    Posthog,
}

/// A JSON string longer than this stops a token search: keys and tokens are short, and the
/// search must not buffer what an unauthenticated client sends. Longer than any string an
/// event can carry (its properties are at most 64 KiB).
pub const MAX_SCANNED_STRING: usize = 1 << 20;

/// The project token of a JSON body, read from `reader` without keeping the body: memory
/// stays within [`MAX_SCANNED_STRING`] whatever the body holds. `None` when the body has no
/// token where `places` says one may be, or is not JSON.
pub fn find_token(reader: impl Read, places: TokenPlaces) -> Option<String> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_reader(StringGuard::new(reader));
    // Stops with an error as soon as a token is found; the outcome is in `found`.
    let _ = TopSeed { found: &mut found, places }.deserialize(&mut de);
    found.filter(|t| !t.is_empty())
}

/// The error that ends a search early: the token is in `found`.
const FOUND: &str = "token found";

struct TopSeed<'a> {
    found: &'a mut Option<String>,
    places: TokenPlaces,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object or array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.places == TokenPlaces::Posthog {
            while seq.next_element_seed(EventSeed { found: &mut *self.found, depth: 0 })?.is_some() {}
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            match (key, self.places) {
                (Key::Token, _) | (Key::ApiKey, TokenPlaces::Posthog) => take_token(&mut map, self.found)?,
                (Key::Batch, TokenPlaces::Posthog) => {
                    map.next_value_seed(EventsSeed { found: &mut *self.found })?;
                }
                (Key::Properties, TokenPlaces::Posthog) => {
                    map.next_value_seed(EventSeed { found: &mut *self.found, depth: 1 })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

fn take_token<'de, A: MapAccess<'de>>(map: &mut A, found: &mut Option<String>) -> Result<(), A::Error> {
    if let Some(token) = map.next_value::<Option<String>>()? {
        if !token.is_empty() {
            *found = Some(token);
            return Err(de::Error::custom(FOUND));
        }
    }
    Ok(())
}

/// The keys a search looks at; any other is skipped unread.
enum Key {
    Token,
    ApiKey,
    Batch,
    Properties,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "token" => Key::Token,
                    "api_key" => Key::ApiKey,
                    "batch" | "events" => Key::Batch,
                    "properties" => Key::Properties,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

struct EventsSeed<'a> {
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(EventSeed { found: &mut *self.found, depth: 0 })?.is_some() {}
        Ok(())
    }
}

/// An event (depth 0: `api_key`, `token`, `properties.token`) or its properties (depth 1:
/// `token`). Anything else is skipped.
struct EventSeed<'a> {
    found: &'a mut Option<String>,
    depth: u8,
}

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Token => take_token(&mut map, self.found)?,
                Key::ApiKey if self.depth == 0 => take_token(&mut map, self.found)?,
                Key::Properties if self.depth == 0 => {
                    map.next_value_seed(EventSeed { found: &mut *self.found, depth: 1 })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    // Not an object: nothing to find in it.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Fails a read once a JSON string runs past [`MAX_SCANNED_STRING`] bytes: serde_json buffers
/// each key and string it hands to a visitor, and a search must not buffer a huge one.
struct StringGuard<R> {
    inner: R,
    in_string: bool,
    escaped: bool,
    run: usize,
}

impl<R: Read> StringGuard<R> {
    fn new(inner: R) -> Self {
        Self { inner, in_string: false, escaped: false, run: 0 }
    }
}

impl<R: Read> Read for StringGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if !self.in_string {
                if b == b'"' {
                    self.in_string = true;
                    self.run = 0;
                }
                continue;
            }
            self.run += 1;
            if self.run > MAX_SCANNED_STRING {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "string too long for a token search"));
            }
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn posthog(v: Value) -> PosthogBody {
        posthog_body(v.to_string().as_bytes()).unwrap()
    }

    fn tokens(v: Value, places: TokenPlaces) -> Option<String> {
        find_token(v.to_string().as_bytes(), places)
    }

    #[test]
    fn posthog_bodies_of_every_shape() {
        let body = posthog(json!({"api_key": "sxp_a", "batch": [{"event": "a", "distinct_id": "u"}]}));
        assert_eq!((body.events.len(), body.token.as_deref()), (1, Some("sxp_a")));
        let body = posthog(json!({"event": "a", "properties": {"distinct_id": "u", "token": "sxp_b"}}));
        assert_eq!(body.token.as_deref(), Some("sxp_b"));
        let event = body.events.into_items().unwrap().pop().unwrap();
        let mut errors = Vec::new();
        let e = crate::analytics::validate_event(0, event, 0, &mut errors).unwrap();
        assert_eq!(e.distinct_id, "u");
        let body = posthog(json!([{"event": "a", "properties": {"token": "sxp_c"}}, {"event": "b"}]));
        assert_eq!((body.events.len(), body.token.as_deref()), (2, Some("sxp_c")));
        assert!(posthog_body(b"\"nope\"").is_err());
        assert!(posthog_body(br#"{"batch": 3}"#).is_err());
    }

    fn read_all(r: impl Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        posthog_json(r).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn a_posthog_form_is_decoded_as_it_is_read() {
        use base64::Engine;
        let json = br#"{"api_key":"sxp_f","batch":[{"event":"e","distinct_id":"u"}]}"#;
        let b64 = base64::engine::general_purpose::STANDARD.encode(json);
        let form = format!("data={}&compression=none", b64.replace('+', "%2B").replace('=', "%3D"));
        assert_eq!(read_all(form.as_bytes()).unwrap(), json);
        assert_eq!(find_token(posthog_json(form.as_bytes()), TokenPlaces::Posthog).as_deref(), Some("sxp_f"));
        assert_eq!(read_all(&json[..]).unwrap(), json, "plain JSON passes through");
        assert_eq!(read_all(&b"[]"[..]).unwrap(), b"[]", "bodies shorter than the form prefix too");
        assert!(read_all(&b"data=%zz"[..]).is_err());
        assert!(read_all(&b"data=!!!!"[..]).is_err(), "not base64");
    }

    #[test]
    fn snapshot_events_are_set_apart_with_their_place_and_large_properties() {
        let large = "x".repeat(MAX_SCANNED_STRING);
        let body = posthog(json!([
            {"event": "$pageview", "properties": {"distinct_id": "u", "token": "sxp_s"}},
            {"event": "$snapshot", "properties": {"$session_id": "s", "$snapshot_data": [{"big": large}]}},
        ]));
        assert_eq!((body.events.len(), body.snapshots.len(), body.token.as_deref()), (1, 1, Some("sxp_s")));
        assert_eq!(body.snapshots[0].index, 1);
        assert!(body.snapshots[0].properties.as_ref().unwrap().get().len() > MAX_SCANNED_STRING);
        // Other events' properties stay bounded.
        let err = posthog_body(json!({"event": "e", "properties": {"big": large}}).to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("64 KiB"), "{err}");
        let one = posthog(json!({"event": "$snapshot", "distinct_id": "u", "properties": {}}));
        assert_eq!((one.events.len(), one.snapshots.len()), (0, 1));
    }

    #[test]
    fn posthog_properties_are_stored_as_the_native_apis_and_refuse_what_no_float_holds() {
        let body = posthog(json!({"event": "e", "distinct_id": "u", "properties": {"b": 1, "a": [true]}}));
        assert_eq!(
            body.events.into_items().unwrap()[0].properties,
            Some(Properties::Object(r#"{"a":[true],"b":1}"#.into()))
        );
        let err = posthog_body(br#"{"event": "e", "distinct_id": "u", "properties": {"n": 1e400}}"#).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }

    #[test]
    fn posthog_events_past_the_cap_are_counted_not_kept() {
        let body = format!("{{\"api_key\":\"sxp_a\",\"batch\":[{}]}}", vec!["{}"; MAX_EVENTS + 5].join(","));
        let parsed = posthog_body(body.as_bytes()).unwrap();
        assert_eq!(parsed.events.into_items().unwrap_err(), MAX_EVENTS + 5);
    }

    #[test]
    fn tokens_are_found_where_each_kind_of_body_carries_them() {
        use TokenPlaces::*;
        assert_eq!(tokens(json!({"events": [{}], "token": "sxp_1"}), Native).as_deref(), Some("sxp_1"));
        assert_eq!(tokens(json!({"events": [{"token": "sxp_1"}]}), Native), None, "native tokens are at the top");
        assert_eq!(tokens(json!({"batch": [{}], "api_key": "sxp_2"}), Posthog).as_deref(), Some("sxp_2"));
        assert_eq!(tokens(json!([{}, {"properties": {"token": "sxp_3"}}]), Posthog).as_deref(), Some("sxp_3"));
        assert_eq!(tokens(json!({"batch": [{"api_key": "sxp_4"}]}), Posthog).as_deref(), Some("sxp_4"));
        assert_eq!(tokens(json!({"event": "e", "properties": {"token": "sxp_5"}}), Posthog).as_deref(), Some("sxp_5"));
        assert_eq!(tokens(json!({"events": [{"properties": {"x": {"token": "no"}}}]}), Posthog), None);
        assert_eq!(tokens(json!({"token": ""}), Native), None);
        assert_eq!(find_token(&b"not json"[..], Native), None);
    }

    #[test]
    fn a_token_search_reads_no_further_than_the_token() {
        let mut body = br#"{"token":"sxp_1","events":["#.to_vec();
        body.extend_from_slice(b"this is not JSON and never read");
        assert_eq!(find_token(&body[..], TokenPlaces::Native).as_deref(), Some("sxp_1"));
    }

    #[test]
    fn a_token_search_stops_at_a_huge_string() {
        let key = "k".repeat(MAX_SCANNED_STRING + 1);
        let body = format!(r#"{{"{key}":1,"token":"sxp_1"}}"#);
        assert_eq!(find_token(body.as_bytes(), TokenPlaces::Native), None);
        // A long string inside a value that is skipped is read up to the guard too.
        let escaped = format!(r#"{{"a":"x\"{}","token":"sxp_1"}}"#, "y".repeat(100));
        assert_eq!(find_token(escaped.as_bytes(), TokenPlaces::Native).as_deref(), Some("sxp_1"));
    }

    #[test]
    fn a_token_search_of_a_million_empty_events_keeps_nothing() {
        let body = format!("{{\"events\":[{}]}}", vec!["{}"; 1_000_000].join(","));
        assert_eq!(find_token(body.as_bytes(), TokenPlaces::Posthog), None);
    }
}
