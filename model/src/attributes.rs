//! Attributes: free-form `key -> value` maps where a value is a string, number, bool or an
//! array of these (docs/API.md, "Attributes"). The JSON form converts here.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::row::{Attribute, Value as AttributeValue};

pub const MAX_ATTRIBUTES: usize = 128;
pub const MAX_KEY_LEN: usize = 256;
pub const MAX_VALUE_LEN: usize = 64 * 1024;
pub const MAX_ARRAY_LEN: usize = 256;

/// Attributes as parsed from JSON; nested objects are rejected at parse time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes(pub Vec<Attribute>);

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
                let mut out = Vec::new();
                // One past the limit is kept so validation refuses the object; the rest is skipped.
                while let Some(key) = m.next_key::<String>()? {
                    if out.len() > MAX_ATTRIBUTES {
                        m.next_value::<de::IgnoredAny>()?;
                        continue;
                    }
                    let value: Scalar = m.next_value()?;
                    out.push(Attribute { key, value: Some(value.0) });
                }
                Ok(Attributes(out))
            }
        }
        d.deserialize_any(MapV)
    }
}

/// One attribute value; arrays may only hold scalars.
struct Scalar(AttributeValue);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueV { allow_array: true })
    }
}

struct ValueV {
    allow_array: bool,
}

fn wrap(v: AttributeValue) -> Scalar {
    Scalar(v)
}

impl<'de> Visitor<'de> for ValueV {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.allow_array {
            f.write_str("a string, number, bool or an array of these")
        } else {
            f.write_str("a string, number or bool")
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(wrap(AttributeValue::String(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(wrap(AttributeValue::String(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
        Ok(wrap(AttributeValue::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(wrap(AttributeValue::Int(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(wrap(match i64::try_from(v) {
            Ok(i) => AttributeValue::Int(i),
            Err(_) => AttributeValue::Double(v as f64),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(wrap(AttributeValue::Double(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Scalar, A::Error> {
        if !self.allow_array {
            return Err(de::Error::custom("arrays may only contain strings, numbers and bools"));
        }
        let mut values = Vec::new();
        // One past the limit is kept so validation refuses the array; the rest is skipped.
        while values.len() <= MAX_ARRAY_LEN {
            match s.next_element_seed(ScalarSeed)? {
                Some(v) => values.push(v.0),
                None => return Ok(wrap(AttributeValue::Array(values))),
            }
        }
        while s.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(wrap(AttributeValue::Array(values)))
    }
}

struct ScalarSeed;

impl<'de> de::DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(ValueV { allow_array: false })
    }
}

/// Checks the size limits of an attribute set; returns the reason of the first violation.
pub fn validate(attrs: &[Attribute]) -> Result<(), String> {
    if attrs.len() > MAX_ATTRIBUTES {
        return Err(format!("at most {MAX_ATTRIBUTES} attributes are allowed"));
    }
    for kv in attrs {
        if kv.key.is_empty() || kv.key.len() > MAX_KEY_LEN {
            return Err(format!("attribute keys must have 1 to {MAX_KEY_LEN} bytes"));
        }
        match kv.value.as_ref() {
            Some(AttributeValue::String(s)) if s.len() > MAX_VALUE_LEN => {
                return Err(format!("attribute `{}` is longer than {MAX_VALUE_LEN} bytes", kv.key));
            }
            Some(AttributeValue::Double(d)) if !d.is_finite() => {
                return Err(format!("attribute `{}` is not a finite number", kv.key));
            }
            Some(AttributeValue::Array(a)) if a.len() > MAX_ARRAY_LEN => {
                return Err(format!("attribute `{}` has more than {MAX_ARRAY_LEN} elements", kv.key));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Stored attributes back to a JSON object (keys sorted, as a reader expects stable output).
pub fn to_json(attrs: &[Attribute]) -> Value {
    let sorted: BTreeMap<&str, Value> =
        attrs.iter().map(|kv| (kv.key.as_str(), kv.value.as_ref().map_or(Value::Null, any_to_json))).collect();
    Value::Object(sorted.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<_, _>>())
}

fn any_to_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::String(s) => Value::String(s.clone()),
        AttributeValue::Int(i) => Value::Number((*i).into()),
        AttributeValue::Double(d) => Number::from_f64(*d).map_or(Value::Null, Value::Number),
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Array(a) => Value::Array(a.iter().map(any_to_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_scalars_and_arrays() {
        let json = r#"{"http.status_code":200,"ok":true,"ratio":0.5,"tags":["a",1,false],"name":"x"}"#;
        let a: Attributes = serde_json::from_str(json).unwrap();
        assert_eq!(a.0.len(), 5);
        let back = to_json(&a.0);
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap());
    }

    #[test]
    fn rejects_nested_objects_and_nested_arrays() {
        assert!(serde_json::from_str::<Attributes>(r#"{"a":{"b":1}}"#).is_err());
        assert!(serde_json::from_str::<Attributes>(r#"{"a":[[1]]}"#).is_err());
        assert!(serde_json::from_str::<Attributes>(r#"[1]"#).is_err());
    }
}
