//! LZ-string in its base64 form (`?compression=lz64`), which older posthog-js versions sent as
//! `data=<lz64>` (docs/API.md, "PostHog-compatible capture"). The decoder keeps each dictionary
//! entry as its prefix's code and one character (an LZW chain), so memory grows with the codes
//! read, not with the square of the text; output stops at a limit; and `grow` is told of each
//! step of memory before it is taken.

use std::mem::size_of;

/// Why a body was not decompressed.
#[derive(Debug, PartialEq, Eq)]
pub enum Lz64Error<E> {
    /// Not LZ-string's base64 form.
    Invalid(&'static str),
    /// It decompresses to more than the limit.
    TooLarge,
    /// `grow` refused.
    Refused(E),
}

const NONE: u32 = u32::MAX;

/// A dictionary entry: its text is the text of `prefix` followed by `last`.
#[derive(Clone, Copy)]
struct Entry {
    prefix: u32,
    last: u16,
    first: u16,
    len: u32,
}

/// Memory is charged in steps of this many entries or output characters.
const STEP: usize = 16 * 1024;

struct Bits<'a> {
    input: &'a [u8],
    index: usize,
    value: u32,
    position: u32,
}

fn sextet(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        // LZ-string's alphabet ends with its padding, worth no bits.
        b'=' => 64,
        _ => return None,
    } as u32)
}

impl Bits<'_> {
    /// The next value; past the end, none (as LZ-string reads it).
    fn next(&mut self) -> Result<u32, &'static str> {
        let v = match self.input.get(self.index) {
            Some(&c) => sextet(c).ok_or("not LZ-string base64")?,
            None => 0,
        };
        self.index += 1;
        Ok(v)
    }

    /// `n` bits, least significant first.
    fn read(&mut self, n: u32) -> Result<u32, &'static str> {
        let mut bits = 0u32;
        for i in 0..n {
            let set = self.value & self.position != 0;
            self.position >>= 1;
            if self.position == 0 {
                self.position = 32;
                self.value = self.next()?;
            }
            if set {
                bits |= 1 << i;
            }
        }
        Ok(bits)
    }
}

/// Decompresses LZ-string's base64 form into UTF-8 text of at most `limit` bytes.
pub fn decompress<E>(
    input: &[u8],
    limit: usize,
    grow: &mut dyn FnMut(usize) -> Result<(), E>,
) -> Result<Vec<u8>, Lz64Error<E>> {
    let invalid = Lz64Error::Invalid;
    let Some(&head) = input.first() else { return Err(invalid("empty")) };
    let mut bits = Bits { input, index: 1, value: sextet(head).ok_or(invalid("not LZ-string base64"))?, position: 32 };
    // Codes 0 to 2 are markers: a literal of 8 or 16 bits follows, or the end.
    let mut dict: Vec<Entry> = vec![Entry { prefix: NONE, last: 0, first: 0, len: 0 }; 3];
    let mut out: Vec<u16> = Vec::new();
    let mut charged = (0usize, 0usize);
    // Before the dictionary holds `entries` or the output `chars`.
    let mut charge = |entries: usize, chars: usize| -> Result<(), Lz64Error<E>> {
        while entries > charged.0 {
            grow(STEP * size_of::<Entry>()).map_err(Lz64Error::Refused)?;
            charged.0 += STEP;
        }
        while chars > charged.1 {
            grow(STEP * size_of::<u16>()).map_err(Lz64Error::Refused)?;
            charged.1 += STEP;
        }
        Ok(())
    };
    let literal = |c: u32| Entry { prefix: NONE, last: c as u16, first: c as u16, len: 1 };
    let first = match bits.read(2).map_err(invalid)? {
        0 => bits.read(8).map_err(invalid)?,
        1 => bits.read(16).map_err(invalid)?,
        2 => return Ok(Vec::new()),
        _ => return Err(invalid("not LZ-string")),
    };
    charge(dict.len() + 1, 1)?;
    dict.push(literal(first));
    let mut w = dict.len() - 1;
    out.push(first as u16);
    let mut enlarge_in: u64 = 4;
    let mut num_bits: u32 = 3;
    loop {
        if bits.index > input.len() {
            return Err(invalid("truncated LZ-string"));
        }
        let mut c = bits.read(num_bits).map_err(invalid)? as usize;
        match c {
            0 | 1 => {
                let ch = bits.read(if c == 0 { 8 } else { 16 }).map_err(invalid)?;
                charge(dict.len() + 1, out.len())?;
                dict.push(literal(ch));
                c = dict.len() - 1;
                enlarge_in -= 1;
            }
            2 => break,
            _ => {}
        }
        if enlarge_in == 0 {
            enlarge_in = 1 << num_bits;
            num_bits += 1;
        }
        // The code names an entry, or the one this step adds (the previous text and its
        // first character).
        let entry_first = match dict.get(c) {
            Some(e) => e.first,
            None if c == dict.len() => dict[w].first,
            None => return Err(invalid("an LZ-string code past its dictionary")),
        };
        let prev = dict[w];
        let added = Entry { prefix: w as u32, last: entry_first, first: prev.first, len: prev.len + 1 };
        let len = if c == dict.len() { added.len } else { dict[c].len } as usize;
        if out.len() + len > limit {
            return Err(Lz64Error::TooLarge);
        }
        let start = out.len();
        charge(dict.len() + 1, start + len)?;
        dict.push(added);
        out.resize(start + len, 0);
        let (mut at, mut k) = (start + len, c);
        while at > start {
            at -= 1;
            out[at] = dict[k].last;
            k = dict[k].prefix as usize;
        }
        enlarge_in -= 1;
        w = c;
        if enlarge_in == 0 {
            if num_bits >= 32 {
                return Err(invalid("an LZ-string dictionary too large"));
            }
            enlarge_in = 1 << num_bits;
            num_bits += 1;
        }
    }
    let text = String::from_utf16(&out).map_err(|_| invalid("LZ-string text that is not UTF-16"))?;
    if text.len() > limit {
        return Err(Lz64Error::TooLarge);
    }
    Ok(text.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &str, limit: usize) -> Result<String, Lz64Error<()>> {
        decompress(input.as_bytes(), limit, &mut |_| Ok(())).map(|b| String::from_utf8(b).unwrap())
    }

    // Outputs of LZString.compressToBase64 (lz-string 1.5.0, the version posthog-js bundled).
    const HELLO: &str = "BYUwNmD2AEDukCcwBNqgjeTlA===";
    const EVENT: &str =
        "N4IgpgbmB2AuIC4QBIAOBDA5pAlmA7iADQioBOA9qmGbHgM6KiwUDWMiI9AHqgPrdiIACY56daAGNYfHMM4BXAIwgAvqqA==";

    #[test]
    fn lz_string_base64_decompresses_to_what_was_compressed() {
        assert_eq!(run(HELLO, 100).unwrap(), "hello world hello world");
        assert_eq!(
            run(EVENT, 1000).unwrap(),
            r#"{"event":"$pageview","properties":{"token":"sxp_x","distinct_id":"u1"}}"#
        );
        assert_eq!(run("JeXg3AB7AEA/B2D3BjA9gEwKZA==", 100).unwrap(), "é😀 ünïcode");
        // A run: each code names a longer entry (the dictionary's own last one).
        assert_eq!(run("IY18ZXTt/DFOS1b0c17Pd/wYUcSaWeRZVdTbXTEA", 1000).unwrap(), "a".repeat(1000));
        assert_eq!(run("IY18ZXTt/DFOS1b0c17Pd/wYUcSaWeRZVdTbXTEA", 999), Err(Lz64Error::TooLarge));
    }

    #[test]
    fn output_past_the_limit_is_refused_and_so_is_garbage() {
        assert_eq!(run(HELLO, 10), Err(Lz64Error::TooLarge));
        assert!(matches!(run("", 10), Err(Lz64Error::Invalid(_))));
        assert!(matches!(run("BIU!", 10), Err(Lz64Error::Invalid(_))));
        assert!(matches!(run(&HELLO[..8], 100), Err(Lz64Error::Invalid(_))), "truncated");
    }

    #[test]
    fn memory_is_charged_before_it_is_taken() {
        let mut asked = 0;
        let mut refuse = |n: usize| {
            asked += n;
            Err::<(), _>("budget")
        };
        assert_eq!(decompress(HELLO.as_bytes(), 100, &mut refuse), Err(Lz64Error::Refused("budget")));
        assert!(asked > 0);
    }
}
