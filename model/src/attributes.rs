//! Attributes: free-form `key -> value` maps where a value is a string, number, bool or an
//! array of these (DESIGN A3). The JSON form and the stored (protobuf) form convert here.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use prost::encoding::{decode_varint, encode_varint, encoded_len_varint};
use prost::Message;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use sextant_proto::{any_value, AnyValue, KeyValue};

pub const MAX_ATTRIBUTES: usize = 128;
pub const MAX_KEY_LEN: usize = 256;
pub const MAX_VALUE_LEN: usize = 64 * 1024;
pub const MAX_ARRAY_LEN: usize = 256;

/// Attributes as parsed from JSON (nested objects are rejected at parse time), already encoded
/// as a storage node keeps them: each one a `KeyValue` as prost writes it, length-delimited,
/// in the order given. They are written straight from the JSON text: building `KeyValue`
/// messages first (two allocations an attribute, freed once encoded) was about a sixth of the
/// router's work on a span.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes {
    encoded: Vec<u8>,
    count: usize,
    /// The first size limit an attribute breaks, reported by [`Attributes::validate`].
    problem: Option<String>,
}

impl Attributes {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Checks the size limits of the set; returns the reason of the first violation.
    pub fn validate(&self) -> Result<(), String> {
        if self.count > MAX_ATTRIBUTES {
            return Err(format!("at most {MAX_ATTRIBUTES} attributes are allowed"));
        }
        self.problem.clone().map_or(Ok(()), Err)
    }

    /// Each attribute's encoded `KeyValue`, as slices of one buffer.
    pub fn into_encoded(self) -> Vec<Bytes> {
        let all = Bytes::from(self.encoded);
        let mut out = Vec::with_capacity(self.count);
        let mut rest = &all[..];
        while !rest.is_empty() {
            // Written by `push`: a length, then that many bytes.
            let len = decode_varint(&mut rest).expect("a length written by push") as usize;
            out.push(all.slice_ref(&rest[..len]));
            rest = &rest[len..];
        }
        out
    }

    /// The attributes as messages.
    pub fn to_key_values(&self) -> Vec<KeyValue> {
        let mut rest = &self.encoded[..];
        let mut out = Vec::with_capacity(self.count);
        while !rest.is_empty() {
            out.push(KeyValue::decode_length_delimited(&mut rest).expect("a KeyValue written by push"));
        }
        out
    }

    /// Appends the attribute `key` with its encoded `AnyValue`.
    fn push(&mut self, key: &str, value: &[u8], limit: Option<Limit>) {
        if self.problem.is_none() {
            self.problem = match limit {
                _ if key.is_empty() || key.len() > MAX_KEY_LEN => {
                    Some(format!("attribute keys must have 1 to {MAX_KEY_LEN} bytes"))
                }
                Some(Limit::LongString) => Some(format!("attribute `{key}` is longer than {MAX_VALUE_LEN} bytes")),
                Some(Limit::NonFinite) => Some(format!("attribute `{key}` is not a finite number")),
                Some(Limit::LongArray) => Some(format!("attribute `{key}` has more than {MAX_ARRAY_LEN} elements")),
                None => None,
            };
        }
        // prost leaves an empty key out.
        let key_field = if key.is_empty() { 0 } else { 1 + encoded_len_varint(key.len() as u64) + key.len() };
        let value_field = 1 + encoded_len_varint(value.len() as u64) + value.len();
        encode_varint((key_field + value_field) as u64, &mut self.encoded);
        if !key.is_empty() {
            self.encoded.push(FIELD_1_BYTES);
            encode_varint(key.len() as u64, &mut self.encoded);
            self.encoded.extend_from_slice(key.as_bytes());
        }
        self.encoded.push(FIELD_2_BYTES);
        encode_varint(value.len() as u64, &mut self.encoded);
        self.encoded.extend_from_slice(value);
        self.count += 1;
    }
}

/// A limit an attribute value breaks.
enum Limit {
    LongString,
    NonFinite,
    LongArray,
}

// Tags: (field number << 3) | wire type. `KeyValue`: key = 1, value = 2; `AnyValue`: string = 1,
// int = 2, double = 3, bool = 4, array = 5; `ArrayValue`: values = 1.
const FIELD_1_BYTES: u8 = 1 << 3 | 2;
const FIELD_2_BYTES: u8 = 2 << 3 | 2;
const INT: u8 = 2 << 3;
const DOUBLE: u8 = 3 << 3 | 1;
const BOOL: u8 = 4 << 3;
const ARRAY: u8 = 5 << 3 | 2;

/// One scalar value, as JSON gave it.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    Str(&'a str),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Scalar<'_> {
    /// Its `AnyValue`, as prost writes it.
    fn encode(self, out: &mut Vec<u8>) {
        match self {
            Scalar::Str(s) => {
                out.push(FIELD_1_BYTES);
                encode_varint(s.len() as u64, out);
                out.extend_from_slice(s.as_bytes());
            }
            Scalar::Int(i) => {
                out.push(INT);
                encode_varint(i as u64, out);
            }
            Scalar::Double(d) => {
                out.push(DOUBLE);
                out.extend_from_slice(&d.to_le_bytes());
            }
            Scalar::Bool(b) => out.extend_from_slice(&[BOOL, u8::from(b)]),
        }
    }

    fn encoded_len(self) -> usize {
        match self {
            Scalar::Str(s) => 1 + encoded_len_varint(s.len() as u64) + s.len(),
            Scalar::Int(i) => 1 + encoded_len_varint(i as u64),
            Scalar::Double(_) => 9,
            Scalar::Bool(_) => 2,
        }
    }
}

impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapV;
        impl<'de> Visitor<'de> for MapV {
            type Value = Attributes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of attributes")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Attributes, E> {
                Ok(Attributes::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Attributes, A::Error> {
                let mut out = Attributes::default();
                // Reused for every attribute: the key (JSON may escape it) and the encoded value.
                let (mut key, mut value) = (String::new(), Vec::new());
                while m.next_key_seed(KeySeed(&mut key))?.is_some() {
                    value.clear();
                    let limit = m.next_value_seed(ValueSeed { out: &mut value, element: false })?;
                    out.push(&key, &value, limit);
                }
                Ok(out)
            }
        }
        d.deserialize_any(MapV)
    }
}

/// Reads a key into a reused string.
struct KeySeed<'a>(&'a mut String);

impl<'de> de::DeserializeSeed<'de> for KeySeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an attribute key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

/// Writes a value as an encoded `AnyValue` (an array element: as a length-delimited one);
/// returns the limit it breaks, if any. Arrays may only hold scalars.
struct ValueSeed<'a> {
    out: &'a mut Vec<u8>,
    element: bool,
}

impl ValueSeed<'_> {
    fn scalar(self, v: Scalar<'_>) -> Option<Limit> {
        if self.element {
            self.out.push(FIELD_1_BYTES);
            encode_varint(v.encoded_len() as u64, self.out);
        }
        v.encode(self.out);
        match v {
            Scalar::Str(s) if s.len() > MAX_VALUE_LEN && !self.element => Some(Limit::LongString),
            Scalar::Double(d) if !d.is_finite() && !self.element => Some(Limit::NonFinite),
            _ => None,
        }
    }
}

impl<'de> de::DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Option<Limit>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Limit>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Option<Limit>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.element {
            f.write_str("a string, number or bool")
        } else {
            f.write_str("a string, number, bool or an array of these")
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Limit>, E> {
        Ok(self.scalar(Scalar::Str(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<Limit>, E> {
        Ok(self.scalar(Scalar::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<Limit>, E> {
        Ok(self.scalar(Scalar::Int(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<Limit>, E> {
        Ok(self.scalar(match i64::try_from(v) {
            Ok(i) => Scalar::Int(i),
            Err(_) => Scalar::Double(v as f64),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<Limit>, E> {
        Ok(self.scalar(Scalar::Double(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Option<Limit>, A::Error> {
        if self.element {
            return Err(de::Error::custom("arrays may only contain strings, numbers and bools"));
        }
        // The `ArrayValue`, whose length comes first.
        let mut items = Vec::new();
        let mut n = 0;
        while s.next_element_seed(ValueSeed { out: &mut items, element: true })?.is_some() {
            n += 1;
        }
        self.out.push(ARRAY);
        encode_varint(items.len() as u64, self.out);
        self.out.extend_from_slice(&items);
        Ok((n > MAX_ARRAY_LEN).then_some(Limit::LongArray))
    }
}

/// Stored attributes back to a JSON object (keys sorted, as a reader expects stable output).
pub fn to_json(attrs: &[KeyValue]) -> Value {
    let sorted: BTreeMap<&str, Value> =
        attrs.iter().map(|kv| (kv.key.as_str(), kv.value.as_ref().map_or(Value::Null, any_to_json))).collect();
    Value::Object(sorted.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<_, _>>())
}

fn any_to_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::IntValue(i)) => Value::Number((*i).into()),
        Some(any_value::Value::DoubleValue(d)) => Number::from_f64(*d).map_or(Value::Null, Value::Number),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(any_to_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_scalars_and_arrays() {
        let json = r#"{"http.status_code":200,"ok":true,"ratio":0.5,"tags":["a",1,false],"name":"x"}"#;
        let a: Attributes = serde_json::from_str(json).unwrap();
        assert_eq!(a.len(), 5);
        let back = to_json(&a.to_key_values());
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap());
    }

    /// Written straight from JSON, each attribute has the very bytes prost gives its message.
    #[test]
    fn attributes_are_encoded_as_prost_encodes_them() {
        use sextant_proto::ArrayValue;
        let json = r#"{"s":"v\"x\u00e9","":1,"i":-7,"big":18446744073709551615,"d":0.25,"b":false,
            "a":["x",2,true,1.5],"e":[],"k\n":""}"#;
        let a: Attributes = serde_json::from_str(json).unwrap();
        let v = |value| Some(AnyValue { value: Some(value) });
        let kv = |key: &str, value| KeyValue { key: key.into(), value: v(value) };
        let scalar = |value| AnyValue { value: Some(value) };
        let expected = [
            kv("s", any_value::Value::StringValue("v\"xé".into())),
            kv("", any_value::Value::IntValue(1)),
            kv("i", any_value::Value::IntValue(-7)),
            kv("big", any_value::Value::DoubleValue(u64::MAX as f64)),
            kv("d", any_value::Value::DoubleValue(0.25)),
            kv("b", any_value::Value::BoolValue(false)),
            kv(
                "a",
                any_value::Value::ArrayValue(ArrayValue {
                    values: vec![
                        scalar(any_value::Value::StringValue("x".into())),
                        scalar(any_value::Value::IntValue(2)),
                        scalar(any_value::Value::BoolValue(true)),
                        scalar(any_value::Value::DoubleValue(1.5)),
                    ],
                }),
            ),
            kv("e", any_value::Value::ArrayValue(ArrayValue { values: vec![] })),
            kv("k\n", any_value::Value::StringValue(String::new())),
        ];
        assert_eq!(a.to_key_values(), expected);
        let encoded: Vec<Vec<u8>> = a.into_encoded().iter().map(|b| b.to_vec()).collect();
        assert_eq!(encoded, expected.iter().map(Message::encode_to_vec).collect::<Vec<_>>());
    }

    #[test]
    fn limits_are_reported_in_order_with_the_count_first() {
        let parse = |json: &str| serde_json::from_str::<Attributes>(json).unwrap().validate();
        assert_eq!(parse(r#"{"ok":1}"#), Ok(()));
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(
            parse(&format!(r#"{{"a":"{long}","":1}}"#)),
            Err(format!("attribute `a` is longer than {MAX_VALUE_LEN} bytes"))
        );
        assert_eq!(parse(r#"{"":"a"}"#), Err(format!("attribute keys must have 1 to {MAX_KEY_LEN} bytes")));
        let many = (0..=MAX_ARRAY_LEN).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        assert_eq!(
            parse(&format!(r#"{{"a":[{many}]}}"#)),
            Err(format!("attribute `a` has more than {MAX_ARRAY_LEN} elements"))
        );
        // Long strings inside arrays are not limited one by one (the body size is).
        assert_eq!(parse(&format!(r#"{{"a":["{long}"]}}"#)), Ok(()));
        let keys = (0..=MAX_ATTRIBUTES).map(|i| format!(r#""k{i}":"{long}""#)).collect::<Vec<_>>().join(",");
        assert_eq!(parse(&format!("{{{keys}}}")), Err(format!("at most {MAX_ATTRIBUTES} attributes are allowed")));
    }

    #[test]
    fn rejects_nested_objects_and_nested_arrays() {
        assert!(serde_json::from_str::<Attributes>(r#"{"a":{"b":1}}"#).is_err());
        assert!(serde_json::from_str::<Attributes>(r#"{"a":[[1]]}"#).is_err());
        assert!(serde_json::from_str::<Attributes>(r#"[1]"#).is_err());
    }
}
