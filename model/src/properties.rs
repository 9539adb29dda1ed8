//! Event properties as they are stored: the object's canonical text, the bytes
//! `serde_json::to_string` writes for its `Value` (keys sorted, the last of a repeated key
//! kept, no whitespace), so that equal properties are equal bytes (docs/API.md, "Events").
//! The text is written while the request body is parsed, without a tree and without reading
//! the properties a second time.

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::analytics::MAX_PROPERTIES_BYTES;
use crate::attributes::Key;

/// One event's properties as read from a body.
#[derive(Debug, Clone, PartialEq)]
pub enum Properties {
    /// The canonical text of an object (`{}` for `null`).
    Object(String),
    /// An object longer than [`MAX_PROPERTIES_BYTES`] once written canonically.
    TooLarge,
    /// A value that is not an object.
    NotObject,
}

/// Bytes the writers of one object may write before it is known to be too large: a bound on
/// memory (repeated keys make the written text longer than what is kept, so the exact limit is
/// checked on the result).
const WRITE_BUDGET: usize = 4 * MAX_PROPERTIES_BYTES;

impl<'de> Deserialize<'de> for Properties {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TopV)
    }
}

struct TopV;

impl<'de> Visitor<'de> for TopV {
    type Value = Properties;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Properties, A::Error> {
        let mut text = Vec::new();
        let mut room = Room { left: WRITE_BUDGET, over: false };
        Canonical { out: &mut text, room: &mut room }.object(map)?;
        if room.over || text.len() > MAX_PROPERTIES_BYTES {
            return Ok(Properties::TooLarge);
        }
        // Written from `str`s and ASCII punctuation only.
        Ok(Properties::Object(String::from_utf8(text).expect("canonical text is UTF-8")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Properties, E> {
        Ok(Properties::Object("{}".to_owned()))
    }
    fn visit_none<E: de::Error>(self) -> Result<Properties, E> {
        self.visit_unit()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Properties, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Properties::NotObject)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Properties, E> {
        Ok(Properties::NotObject)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Properties, E> {
        Ok(Properties::NotObject)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Properties, E> {
        Ok(Properties::NotObject)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Properties, E> {
        Ok(Properties::NotObject)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Properties, E> {
        Ok(Properties::NotObject)
    }
}

/// What the writers of one object may still write.
struct Room {
    left: usize,
    /// Past the budget: the rest is read, not written.
    over: bool,
}

impl Room {
    /// Takes `n` bytes; false (and over from then on) when they are not there.
    fn take(&mut self, n: usize) -> bool {
        match self.left.checked_sub(n) {
            Some(left) if !self.over => self.left = left,
            _ => self.over = true,
        }
        !self.over
    }
}

/// Writes one value canonically at the end of `out`.
struct Canonical<'w> {
    out: &'w mut Vec<u8>,
    room: &'w mut Room,
}

impl Canonical<'_> {
    /// Counts what was written since `start`; past the budget, drops it and writes no more.
    fn spent(&mut self, start: usize) {
        if !self.room.take(self.out.len() - start) {
            self.out.truncate(start);
        }
    }

    fn string(&mut self, s: &str, escaped: bool) {
        if self.room.over {
            return;
        }
        let start = self.out.len();
        write_string(self.out, s, escaped);
        self.spent(start);
    }

    fn object<'de, A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Values are written in the order sent, then copied out in the order of their keys.
        let mut values = Vec::with_capacity(512);
        let mut members: Vec<(Key<'de>, Range<usize>)> = Vec::with_capacity(16);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let start = values.len();
            map.next_value_seed(Canonical { out: &mut values, room: self.room })?;
            // The key and its punctuation, once assembled below.
            self.room.take(key.0.len() + 4);
            members.push((key, start..values.len()));
        }
        if self.room.over {
            return Ok(());
        }
        members.sort_by(|a, b| a.0 .0.cmp(&b.0 .0));
        self.out.reserve(values.len() + members.iter().map(|(k, _)| k.0.len() + 4).sum::<usize>() + 2);
        self.out.push(b'{');
        let mut first = true;
        for (i, (key, range)) in members.iter().enumerate() {
            // Of a repeated key, the last sent is kept (the sort is stable).
            if members.get(i + 1).is_some_and(|(next, _)| next.0 == key.0) {
                continue;
            }
            if !first {
                self.out.push(b',');
            }
            first = false;
            write_string(self.out, &key.0, key.is_escaped());
            self.out.push(b':');
            self.out.extend_from_slice(&values[range.clone()]);
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// `s` as a JSON string, as serde_json writes it. A string read without escapes holds nothing
/// to escape (JSON text has no raw quote, backslash or control character in a string).
fn write_string(out: &mut Vec<u8>, s: &str, escaped: bool) {
    if escaped {
        serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
    } else {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.object(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let comma = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq.next_element_seed(Canonical { out: &mut *self.out, room: &mut *self.room })?.is_none() {
                self.out.truncate(comma);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        self.room.take(2);
        Ok(())
    }
    fn visit_borrowed_str<E: de::Error>(mut self, v: &'de str) -> Result<(), E> {
        self.string(v, false);
        Ok(())
    }
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.string(v, true);
        Ok(())
    }
    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        let start = self.out.len();
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
        self.spent(start);
        Ok(())
    }
    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        let start = self.out.len();
        self.out.extend_from_slice(b"null");
        self.spent(start);
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.number(&v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.number(&v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.number(&v)
    }
}

impl Canonical<'_> {
    fn number<E: de::Error>(mut self, n: &impl serde::Serialize) -> Result<(), E> {
        let start = self.out.len();
        serde_json::to_writer(&mut *self.out, n).map_err(E::custom)?;
        self.spent(start);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> Properties {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn properties_are_stored_with_sorted_keys_and_no_whitespace() {
        let p = canonical(r#"{ "b": [1, {"y": 2, "x": "é"}], "a": {"n": null, "t": true}, "c": 1.50 }"#);
        assert_eq!(p, Properties::Object(r#"{"a":{"n":null,"t":true},"b":[1,{"x":"é","y":2}],"c":1.5}"#.into()));
    }

    #[test]
    fn the_last_of_a_repeated_key_is_kept() {
        assert_eq!(canonical(r#"{"k": 1, "a": 0, "k": 2}"#), Properties::Object(r#"{"a":0,"k":2}"#.into()));
    }

    #[test]
    fn values_that_are_not_objects_are_named_so() {
        for text in ["[1]", "\"s\"", "3", "true"] {
            assert_eq!(canonical(text), Properties::NotObject, "{text}");
        }
        assert_eq!(canonical("null"), Properties::Object("{}".into()));
    }

    #[test]
    fn properties_past_the_limit_are_too_large_however_they_are_built() {
        let long = "x".repeat(MAX_PROPERTIES_BYTES);
        assert_eq!(canonical(&format!(r#"{{"k": "{long}"}}"#)), Properties::TooLarge);
        // Far past the write budget: nothing more is written, and the rest is still read.
        let huge = "y".repeat(WRITE_BUDGET);
        assert_eq!(
            canonical(&format!(r#"{{"a": ["{huge}", "{huge}"], "b": {{"c": "{huge}"}}}}"#)),
            Properties::TooLarge
        );
        // Just under the limit once written.
        let fits = "z".repeat(MAX_PROPERTIES_BYTES - 8);
        assert_eq!(canonical(&format!(r#"{{ "k" : "{fits}" }}"#)), Properties::Object(format!(r#"{{"k":"{fits}"}}"#)));
    }

    #[test]
    fn a_number_no_float_holds_fails_the_parse_instead_of_emptying_the_properties() {
        let err = serde_json::from_str::<Properties>(r#"{"n": 1e400}"#).unwrap_err();
        assert!(err.is_syntax(), "{err}");
    }

    #[test]
    fn a_repeated_key_counts_once_against_the_limit() {
        let half = "h".repeat(MAX_PROPERTIES_BYTES / 2);
        let p = canonical(&format!(r#"{{"k": "{half}", "k": "{half}", "k": "short"}}"#));
        assert_eq!(p, Properties::Object(r#"{"k":"short"}"#.into()));
    }
}
