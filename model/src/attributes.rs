//! Attributes: free-form `key -> value` maps where a value is a string, number, bool or an
//! array of these (docs/API.md, "Attributes"). The JSON form converts here.
//!
//! Parsing hands each attribute to an [`AttributeSink`] as it is read: [`Attributes`] keeps
//! them as values; the router's sink writes them straight into the segment attribute encoding,
//! so a key or a value borrowed from the request body never becomes a string of its own.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::row::{Attribute, Value as AttributeValue};

pub const MAX_ATTRIBUTES: usize = 128;
pub const MAX_KEY_LEN: usize = 256;
pub const MAX_VALUE_LEN: usize = 64 * 1024;
pub const MAX_ARRAY_LEN: usize = 256;

/// An attribute value as parsed, borrowed where it can be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    Str(&'a str),
    Int(i64),
    Double(f64),
    Bool(bool),
    Array(&'a [AttributeValue]),
}

impl<'a> From<&'a AttributeValue> for ValueRef<'a> {
    fn from(v: &'a AttributeValue) -> Self {
        match v {
            AttributeValue::String(s) => ValueRef::Str(s),
            AttributeValue::Int(i) => ValueRef::Int(*i),
            AttributeValue::Double(d) => ValueRef::Double(*d),
            AttributeValue::Bool(b) => ValueRef::Bool(*b),
            AttributeValue::Array(a) => ValueRef::Array(a),
        }
    }
}

impl ValueRef<'_> {
    pub fn to_owned(self) -> AttributeValue {
        match self {
            ValueRef::Str(s) => AttributeValue::String(s.to_owned()),
            ValueRef::Int(i) => AttributeValue::Int(i),
            ValueRef::Double(d) => AttributeValue::Double(d),
            ValueRef::Bool(b) => AttributeValue::Bool(b),
            ValueRef::Array(a) => AttributeValue::Array(a.to_vec()),
        }
    }
}

/// Where an object's attributes go as they are parsed or mapped, in order.
pub trait AttributeSink: Default {
    /// The attributes as a validated row holds them.
    type Stored;
    /// One attribute; `None` for one whose value was absent.
    fn push(&mut self, key: &str, value: Option<ValueRef<'_>>);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first reason the attributes pushed break a limit ([`validate`]'s).
    fn check(&self) -> Result<(), String>;
    fn stored(self) -> Self::Stored;
}

/// Attributes as values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes(pub Vec<Attribute>);

impl AttributeSink for Attributes {
    type Stored = Vec<Attribute>;
    fn push(&mut self, key: &str, value: Option<ValueRef<'_>>) {
        self.0.push(Attribute { key: key.to_owned(), value: value.map(ValueRef::to_owned) });
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn check(&self) -> Result<(), String> {
        validate(&self.0)
    }
    fn stored(self) -> Vec<Attribute> {
        self.0
    }
}

impl From<Vec<Attribute>> for Attributes {
    fn from(attributes: Vec<Attribute>) -> Self {
        Attributes(attributes)
    }
}

impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d)
    }
}

/// An attributes object (or `null`, none) into a sink; nested objects and nested arrays are
/// refused at parse time. For `#[serde(deserialize_with)]`.
pub fn deserialize<'de, D: Deserializer<'de>, S: AttributeSink>(d: D) -> Result<S, D::Error> {
    d.deserialize_any(ObjectV(PhantomData))
}

struct ObjectV<S>(PhantomData<S>);

impl<'de, S: AttributeSink> Visitor<'de> for ObjectV<S> {
    type Value = S;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of attributes")
    }
    fn visit_unit<E: de::Error>(self) -> Result<S, E> {
        Ok(S::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<S, A::Error> {
        let mut out = S::default();
        // One past the limit is kept so validation refuses the object; the rest is skipped.
        while let Some(Key(key)) = m.next_key()? {
            if out.len() > MAX_ATTRIBUTES {
                m.next_value::<de::IgnoredAny>()?;
                continue;
            }
            m.next_value_seed(Push { sink: &mut out, key: &key })?;
        }
        Ok(out)
    }
}

/// A key, borrowed from the body unless it had escapes.
pub(crate) struct Key<'de>(pub Cow<'de, str>);

impl Key<'_> {
    /// Whether the key was written with escapes (so it could not be borrowed).
    pub(crate) fn is_escaped(&self) -> bool {
        matches!(self.0, Cow::Owned(_))
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyV;
        impl<'de> Visitor<'de> for KeyV {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyV)
    }
}

/// One attribute's value, pushed with its key as soon as it is read.
struct Push<'s, S> {
    sink: &'s mut S,
    key: &'s str,
}

impl<'de, S: AttributeSink> DeserializeSeed<'de> for Push<'_, S> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: AttributeSink> Visitor<'de> for Push<'_, S> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, number, bool or an array of these")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.sink.push(self.key, Some(ValueRef::Str(v)));
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.sink.push(self.key, Some(ValueRef::Bool(v)));
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.sink.push(self.key, Some(ValueRef::Int(v)));
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.sink.push(self.key, Some(ValueRef::from(&unsigned(v))));
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.sink.push(self.key, Some(ValueRef::Double(v)));
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let mut values = Vec::new();
        // One past the limit is kept so validation refuses the array; the rest is skipped.
        while values.len() <= MAX_ARRAY_LEN {
            match s.next_element::<Scalar>()? {
                Some(v) => values.push(v.0),
                None => break,
            }
        }
        if values.len() > MAX_ARRAY_LEN {
            while s.next_element::<de::IgnoredAny>()?.is_some() {}
        }
        self.sink.push(self.key, Some(ValueRef::Array(&values)));
        Ok(())
    }
}

/// An unsigned number: an integer while it fits, else a double.
fn unsigned(v: u64) -> AttributeValue {
    match i64::try_from(v) {
        Ok(i) => AttributeValue::Int(i),
        Err(_) => AttributeValue::Double(v as f64),
    }
}

/// An element of an array attribute: a scalar.
struct Scalar(AttributeValue);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarV)
    }
}

struct ScalarV;

impl<'de> Visitor<'de> for ScalarV {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, number or bool")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar(AttributeValue::String(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar(AttributeValue::String(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar(AttributeValue::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar(AttributeValue::Int(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar(unsigned(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar(AttributeValue::Double(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Scalar, A::Error> {
        Err(de::Error::custom("arrays may only contain strings, numbers and bools"))
    }
}

/// Checks the size limits of an attribute set; returns the reason of the first violation.
pub fn validate(attrs: &[Attribute]) -> Result<(), String> {
    check_count(attrs.len())?;
    attrs.iter().try_for_each(|kv| check(&kv.key, kv.value.as_ref().map(ValueRef::from)))
}

/// The limit on how many attributes an object has.
pub fn check_count(n: usize) -> Result<(), String> {
    if n > MAX_ATTRIBUTES {
        return Err(format!("at most {MAX_ATTRIBUTES} attributes are allowed"));
    }
    Ok(())
}

/// The limits on one attribute.
pub fn check(key: &str, value: Option<ValueRef<'_>>) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!("attribute keys must have 1 to {MAX_KEY_LEN} bytes"));
    }
    match value {
        Some(ValueRef::Str(s)) if s.len() > MAX_VALUE_LEN => {
            Err(format!("attribute `{key}` is longer than {MAX_VALUE_LEN} bytes"))
        }
        Some(ValueRef::Double(d)) if !d.is_finite() => Err(format!("attribute `{key}` is not a finite number")),
        Some(ValueRef::Array(a)) if a.len() > MAX_ARRAY_LEN => {
            Err(format!("attribute `{key}` has more than {MAX_ARRAY_LEN} elements"))
        }
        _ => Ok(()),
    }
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
