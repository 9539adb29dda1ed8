//! One attribute as the node holds it: the encoded `Attribute` it arrived in (the segment
//! attribute encoding, docs/ARCHITECTURE.md "Attribute encoding"), read in place. From apply to segment, rows keep their
//! attributes this way: the columns of frequent keys and the stored remainder are copies of
//! these bytes, never decoded into messages and encoded again (that was most of the cost of
//! applying a batch of spans, and a tenth of a flush).
//!
//! Every encoded attribute a row holds is in the form prost writes ([`canonicalize`] makes
//! sure at apply and when rows are read back), so one attribute always has the same bytes
//! and [`Attribute::parse`] reads every one of them.
//!
//! The stored form of a row's attributes (the `attributes` column) is the encoded attributes
//! sorted by key, each length-delimited: the same set always has the same bytes, whichever
//! order the client sent it in (order carries no meaning in OpenTelemetry).

use std::borrow::Cow;

use bytes::Bytes;
use prost::encoding::{decode_varint, encoded_len_varint};
use sextant_model::row::{Attribute as Decoded, Encoded};
use sextant_proto::convert::persist_row::{self as persist, DecodeError};

/// One encoded attribute, read in place: its key at once, its value when asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attribute<'a> {
    pub key: &'a str,
    /// The value as encoded, if the attribute has one.
    pub value: Option<&'a [u8]>,
    /// The whole attribute as encoded.
    pub encoded: &'a [u8],
}

/// An encoded value, read in place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Value<'a> {
    pub encoded: &'a [u8],
    pub kind: Kind<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind<'a> {
    /// A value with none of its kinds set.
    Unset,
    Str(&'a str),
    Int(i64),
    Double(f64),
    Bool(bool),
    /// An array, not read further (no column holds arrays).
    Array,
}

/// Tags of the fields read here: (field number << 3) | wire type.
const KEY: u8 = 1 << 3 | 2;
const VALUE: u8 = 2 << 3 | 2;
const STRING: u8 = 1 << 3 | 2;
const INT: u8 = 2 << 3;
const DOUBLE: u8 = 3 << 3 | 1;
const BOOL: u8 = 4 << 3;
const ARRAY: u8 = 5 << 3 | 2;

/// A varint written in as few bytes as it takes (as prost writes them).
#[inline]
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    match bytes.first() {
        // Lengths of keys and of most values: one byte.
        Some(&b) if b < 0x80 => {
            *bytes = &bytes[1..];
            Some(u64::from(b))
        }
        _ => {
            let before = bytes.len();
            let v = decode_varint(bytes).ok()?;
            (before - bytes.len() == encoded_len_varint(v)).then_some(v)
        }
    }
}

/// A length-delimited field's contents.
#[inline]
fn delimited<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(bytes)?).ok()?;
    let contents = bytes.get(..len)?;
    *bytes = &bytes[len..];
    Some(contents)
}

/// The contents of the field tagged `tag` if it comes next.
#[inline]
fn field<'a>(bytes: &mut &'a [u8], tag: u8) -> Option<&'a [u8]> {
    let (&first, rest) = bytes.split_first()?;
    if first != tag {
        return None;
    }
    *bytes = rest;
    delimited(bytes)
}

/// Text, checked to be UTF-8. Keys and values are mostly short ASCII, which is checked in a
/// few instructions; `str::from_utf8` took as many as the rest of reading an attribute.
#[inline]
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

impl<'a> Attribute<'a> {
    /// Reads the fields of an encoded attribute written the way prost writes them (in order,
    /// none empty that prost leaves out, no other field); `None` for any other bytes. The
    /// value is read by [`Attribute::value`].
    #[inline]
    pub fn parse(encoded: &'a [u8]) -> Option<Self> {
        let mut rest = encoded;
        let key = match field(&mut rest, KEY) {
            // prost leaves an empty key out.
            Some([]) => return None,
            Some(key) => utf8(key)?,
            None => "",
        };
        let value = field(&mut rest, VALUE);
        rest.is_empty().then_some(Attribute { key, value, encoded })
    }

    /// The value, if the attribute has one (and it reads as a value as prost writes
    /// it, as every value a row holds does).
    pub fn value(&self) -> Option<Value<'a>> {
        let encoded = self.value?;
        Some(Value { encoded, kind: Kind::parse(encoded)? })
    }

    /// The value as text, as searches match it (the `key:value` terms of the log index and
    /// attribute filters); `None` without a value and for arrays.
    pub fn text(&self) -> Option<Cow<'a, str>> {
        Some(match self.value()?.kind {
            Kind::Str(s) => Cow::Borrowed(s),
            Kind::Int(i) => Cow::Owned(i.to_string()),
            Kind::Double(d) => Cow::Owned(d.to_string()),
            Kind::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
            Kind::Unset | Kind::Array => return None,
        })
    }
}

impl<'a> Kind<'a> {
    /// Reads an encoded value written the way prost writes it; an array is not read
    /// further.
    fn parse(encoded: &'a [u8]) -> Option<Self> {
        let Some((&tag, mut rest)) = encoded.split_first() else {
            return Some(Kind::Unset);
        };
        let kind = match tag {
            STRING => Kind::Str(utf8(delimited(&mut rest)?)?),
            INT => Kind::Int(varint(&mut rest)? as i64),
            DOUBLE => {
                let (bits, after) = rest.split_first_chunk::<8>()?;
                rest = after;
                Kind::Double(f64::from_le_bytes(*bits))
            }
            BOOL => match varint(&mut rest)? {
                0 => Kind::Bool(false),
                1 => Kind::Bool(true),
                _ => return None,
            },
            ARRAY => {
                delimited(&mut rest)?;
                Kind::Array
            }
            _ => return None,
        };
        rest.is_empty().then_some(kind)
    }
}

/// Whether `encoded` is an attribute as prost writes it, value included. The fields of an
/// array value (no column holds arrays) are checked the long way: arrays are rare and nest.
fn in_prosts_form(encoded: &[u8]) -> bool {
    let Some(attribute) = Attribute::parse(encoded) else {
        return false;
    };
    match (attribute.value, attribute.value()) {
        (None, _) => true,
        (Some(v), Some(Value { kind: Kind::Array, .. })) => persist::value_in_canonical_form(v),
        (Some(_), value) => value.is_some(),
    }
}

/// Brings every attribute to the form prost writes (re-encoding the few that are not), or
/// fails on one that is no attribute at all.
pub fn canonicalize(attributes: &mut Encoded) -> Result<(), DecodeError> {
    if persist::each_attribute(attributes).all(in_prosts_form) {
        return Ok(());
    }
    let each: Vec<Vec<u8>> =
        persist::each_attribute(attributes).map(persist::reencode_attribute).collect::<Result<_, _>>()?;
    *attributes = persist::encoded_from(&each);
    debug_assert!(persist::each_attribute(attributes).all(in_prosts_form), "prost writes what it reads");
    Ok(())
}

/// The attributes of a row, read in place: framed as a stored form is, in the order they
/// came. Rows hold canonical attributes only (see the module docs), so reading reaches the end.
pub fn read(attributes: &Encoded) -> impl Iterator<Item = Attribute<'_>> {
    read_stored(&attributes.0)
}

/// Appends `attributes` in their stored form (sorted by key, stably: a repeated key keeps its
/// order).
pub fn write_stored(attributes: &mut [Attribute<'_>], out: &mut Vec<u8>) {
    attributes.sort_by(|a, b| a.key.cmp(b.key));
    for a in attributes.iter() {
        persist::put_delimited(a.encoded, out);
    }
}

/// The stored form of a row's attributes.
pub fn stored(attributes: &Encoded) -> Vec<u8> {
    let mut out = Vec::new();
    write_stored(&mut read(attributes).collect::<Vec<_>>(), &mut out);
    out
}

/// The next encoded attribute of a stored form (without its length), moving `stored` past it;
/// `None` at the end or at bytes that are not a length and that many bytes.
pub fn next_stored<'a>(stored: &mut &'a [u8]) -> Option<&'a [u8]> {
    persist::next_delimited(stored)
}

/// The attributes of a stored form, read in place. What this node stores is in prost's form;
/// reading stops at bytes that are not.
pub fn read_stored(mut stored: &[u8]) -> impl Iterator<Item = Attribute<'_>> {
    std::iter::from_fn(move || Attribute::parse(next_stored(&mut stored)?))
}

/// The attributes of a stored form, as a row holds them; reading stops at bytes that are no
/// attribute.
pub fn from_stored(stored: &[u8]) -> Encoded {
    let mut rest = stored;
    while let Some(entry) = next_stored(&mut rest) {
        if !in_prosts_form(entry) {
            return brought_to_prosts_form(stored);
        }
    }
    if !rest.is_empty() {
        return brought_to_prosts_form(stored);
    }
    Encoded(Bytes::copy_from_slice(stored))
}

/// [`from_stored`] of a stored form not all in prost's form (this node writes none): each
/// attribute brought to it, up to the first that is no attribute.
fn brought_to_prosts_form(mut stored: &[u8]) -> Encoded {
    let mut out = Vec::new();
    while let Some(entry) = next_stored(&mut stored) {
        match persist::reencode_attribute(entry) {
            Ok(a) => out.push(a),
            Err(_) => break,
        }
    }
    persist::encoded_from(&out)
}

/// The attributes a row holds, decoded; one that does not decode is left out (rows hold
/// canonical attributes only: none is).
pub fn decode(attributes: &Encoded) -> Vec<Decoded> {
    persist::decode_attributes(attributes)
}

/// The stored form of decoded attributes.
pub fn encode_stored(attributes: Vec<Decoded>) -> Vec<u8> {
    stored(&persist::encode_attributes(attributes))
}

/// The decoded attributes of a stored form; reading stops at bytes that are no attribute.
pub fn decode_stored(mut stored: &[u8]) -> Vec<Decoded> {
    let mut out = Vec::new();
    while let Some(entry) = next_stored(&mut stored) {
        match persist::decode_attribute(entry) {
            Ok(a) => out.push(a),
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sextant_model::row::Value as V;

    fn scalar() -> impl Strategy<Value = V> {
        prop_oneof![
            ".{0,12}".prop_map(V::String),
            any::<i64>().prop_map(V::Int),
            any::<f64>().prop_map(V::Double),
            any::<bool>().prop_map(V::Bool),
        ]
    }

    fn value() -> impl Strategy<Value = Option<V>> {
        prop::option::of(prop_oneof![4 => scalar(), 1 => prop::collection::vec(scalar(), 0..3).prop_map(V::Array)])
    }

    fn attribute() -> impl Strategy<Value = Decoded> {
        ("[a-c.]{0,3}", value()).prop_map(|(key, value)| Decoded { key, value })
    }

    fn same(a: &[Decoded], b: &[Decoded]) -> bool {
        // Bit for bit: NaN is a value like any other here.
        format!("{a:?}") == format!("{b:?}")
    }

    proptest! {
        /// Whatever the encoder writes reads in place as what it encodes.
        #[test]
        fn every_encoded_attribute_reads_in_place(decoded in attribute()) {
            let encoded = persist::encode_attribute(decoded.clone());
            let a = Attribute::parse(&encoded).expect("the encoder's own form");
            prop_assert_eq!(a.key, decoded.key.as_str());
            prop_assert_eq!(a.encoded, &encoded[..]);
            let value_bytes = decoded.value.clone().map(|v| {
                let mut out = Vec::new();
                persist::encode_value(v, &mut out);
                out
            });
            prop_assert_eq!(a.value.map(<[u8]>::to_vec), value_bytes);
            prop_assert_eq!(a.value().map(|v| v.encoded), a.value);
            let kind = a.value().map(|v| v.kind);
            match decoded.value {
                None => prop_assert!(kind.is_none()),
                Some(V::String(s)) => prop_assert_eq!(kind, Some(Kind::Str(&s))),
                Some(V::Int(i)) => prop_assert_eq!(kind, Some(Kind::Int(i))),
                Some(V::Double(d)) => prop_assert!(matches!(kind, Some(Kind::Double(x)) if x.to_bits() == d.to_bits())),
                Some(V::Bool(b)) => prop_assert_eq!(kind, Some(Kind::Bool(b))),
                Some(V::Array(_)) => prop_assert_eq!(kind, Some(Kind::Array)),
            }
        }

        /// The stored form reads back as the attributes sorted by key (stably).
        #[test]
        fn the_stored_form_is_sorted_and_reads_back(attrs in prop::collection::vec(attribute(), 0..6)) {
            let mut sorted = attrs.clone();
            sorted.sort_by(|a, b| a.key.cmp(&b.key));
            let stored = encode_stored(attrs);
            prop_assert!(same(&decode_stored(&stored), &sorted));
            let held = from_stored(&stored);
            prop_assert!(same(&persist::decode_attributes(&held), &sorted));
            prop_assert_eq!(super::stored(&held), stored);
        }
    }

    #[test]
    fn other_encodings_are_brought_to_prosts() {
        let attribute = Decoded { key: "k".into(), value: Some(V::Int(5)) };
        let canonical = persist::encode_attribute(attribute);
        let variants: Vec<Vec<u8>> = vec![
            // The value before the key.
            [&canonical[3..], &canonical[..3]].concat(),
            // An empty key written out.
            [&[KEY, 0][..], &canonical[3..]].concat(),
            // A varint in more bytes than it takes (5 as 0x85 0x00).
            vec![KEY, 1, b'k', VALUE, 3, INT, 0x85, 0x00],
            // An array holding a varint in more bytes than it takes.
            vec![KEY, 1, b'a', VALUE, 7, ARRAY, 5, 1 << 3 | 2, 3, INT, 0x85, 0x00],
            // A field this version does not know.
            [&canonical[..], &[3 << 3, 1][..]].concat(),
        ];
        for (i, variant) in variants.into_iter().enumerate() {
            assert!(!in_prosts_form(&variant), "variant {i} is not prost's form");
            let mut attrs = persist::encoded_from([&canonical[..], &variant, &canonical]);
            canonicalize(&mut attrs).unwrap();
            let expected = persist::reencode_attribute(&variant).unwrap();
            let got: Vec<&[u8]> = persist::each_attribute(&attrs).collect();
            assert_eq!(got, [&canonical[..], &expected, &canonical], "variant {i}");
            assert!(in_prosts_form(got[1]));
            let mut stored = Vec::new();
            for a in [&canonical[..], &variant] {
                persist::put_delimited(a, &mut stored);
            }
            let held = from_stored(&stored);
            assert_eq!(persist::each_attribute(&held).collect::<Vec<_>>(), [&canonical[..], &expected], "variant {i}");
        }
        let mut garbage = persist::encoded_from([&canonical[..], &[KEY, 9, b'x']]);
        assert!(canonicalize(&mut garbage).is_err(), "a truncated key is no attribute");
        let stored =
            [&[canonical.len() as u8][..], &canonical, &[3, KEY, 9, b'x'], &[canonical.len() as u8], &canonical]
                .concat();
        let held = from_stored(&stored);
        assert_eq!(
            persist::each_attribute(&held).collect::<Vec<_>>(),
            [&canonical[..]],
            "up to the first that is none"
        );
    }
}
