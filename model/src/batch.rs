//! The items of an ingest request, capped while they are parsed: past the cap an item is
//! counted and skipped, never built, so a body of a million `{}` costs what one thousand do.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// At most `MAX` items kept; `len()` is how many the body held.
#[derive(Debug)]
pub struct Capped<T, const MAX: usize> {
    items: Vec<T>,
    total: usize,
}

impl<T, const MAX: usize> Capped<T, MAX> {
    /// How many items the body held, kept or not.
    pub fn len(&self) -> usize {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The items, or how many there were when the body held more than `MAX`.
    pub fn into_items(self) -> Result<Vec<T>, usize> {
        if self.total > MAX {
            Err(self.total)
        } else {
            Ok(self.items)
        }
    }
}

impl<T, const MAX: usize> From<Vec<T>> for Capped<T, MAX> {
    fn from(items: Vec<T>) -> Self {
        let total = items.len();
        Self { items, total }
    }
}

impl<T, const MAX: usize> Capped<T, MAX> {
    /// A body that held `total` items, more than `MAX`: none kept.
    pub fn over(total: usize) -> Self {
        Self { items: Vec::new(), total }
    }

    /// Reads the rest of a JSON array, keeping at most `MAX` items.
    pub fn from_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error>
    where
        T: Deserialize<'de>,
    {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX).min(64));
        let mut total = 0usize;
        while total < MAX {
            match seq.next_element()? {
                Some(item) => items.push(item),
                None => return Ok(Capped { items, total }),
            }
            total += 1;
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {
            total = total.saturating_add(1);
        }
        if total > MAX {
            return Ok(Self::over(total));
        }
        Ok(Capped { items, total })
    }
}

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for Capped<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const MAX: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for V<T, MAX> {
            type Value = Capped<T, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an array of at most {MAX} items")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Capped::from_seq(seq)
            }
        }
        d.deserialize_seq(V::<T, MAX>(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Item {
        #[allow(dead_code)]
        a: Option<u32>,
    }

    #[test]
    fn items_past_the_cap_are_counted_not_kept() {
        let body = format!("[{}]", vec!["{}"; 5000].join(","));
        let parsed: Capped<Item, 1000> = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed.len(), 5000);
        assert_eq!(parsed.items.capacity(), 0, "nothing past the cap stays allocated");
        assert_eq!(parsed.into_items().unwrap_err(), 5000);
    }

    #[test]
    fn up_to_the_cap_every_item_is_kept() {
        let body = format!("[{}]", vec![r#"{"a":1}"#; 1000].join(","));
        let parsed: Capped<Item, 1000> = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed.into_items().unwrap().len(), 1000);
        let empty: Capped<Item, 1000> = serde_json::from_str("[]").unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn items_past_the_cap_must_still_be_json() {
        let body = format!("[{},{{]", vec!["{}"; 3].join(","));
        assert!(serde_json::from_str::<Capped<Item, 2>>(&body).is_err());
    }
}
