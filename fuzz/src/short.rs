//! The short runs of the test suite: each seed as is, then a fixed number of inputs made
//! from them by random edits (bit flips, bytes of interest, tokens of the format, splices),
//! from a fixed seed, so a run is the same on every machine. No coverage feedback: that is
//! the long runs' job (libFuzzer, see docs/RELIABILITY.md); these keep every target and
//! every regression input running in CI.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;

/// xorshift64*: small, deterministic.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'-', b'0', b'9', b'e', b'%', b'&', b'=',
];

/// Tokens worth inserting for most text formats.
pub const COMMON_TOKENS: &[&str] = &[
    "null",
    "true",
    "false",
    "-0",
    "1e308",
    "-1e400",
    "1.7976931348623157e308",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "7e15",
    "9300000000000",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\u{1}",
    "é",
    "😀",
    "%",
    "%zz",
    "%e9",
    "&",
    "=",
    "\"",
    "[]",
    "{}",
    "1677-09-21T00:12:44Z",
    "2262-04-11T23:47:15Z",
    "9999-12-31T23:59:59Z",
    "0000-01-01T00:00:00+23:59",
    "NaN",
    "inf",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, tokens: &[&str], seeds: &[Vec<u8>], max_len: usize) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                input.insert(i, rng.next_u64() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                input.drain(i..i + n);
            }
            4 | 5 => {
                let i = rng.below(len + 1);
                let t = if rng.below(2) == 0 && !tokens.is_empty() {
                    tokens[rng.below(tokens.len())]
                } else {
                    COMMON_TOKENS[rng.below(COMMON_TOKENS.len())]
                };
                input.splice(i..i, t.bytes());
            }
            6 if len > 0 => {
                // Repeat a slice: deep nesting, long runs.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                let piece = input[i..i + n].to_vec();
                for _ in 0..1 + rng.below(8) {
                    input.splice(i..i, piece.iter().copied());
                }
            }
            7 if !seeds.is_empty() => {
                // Splice in part of another seed.
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = a + rng.below(other.len() - a) + 1;
                    let i = rng.below(len + 1);
                    input.splice(i..i, other[a..b].iter().copied());
                }
            }
            _ if len > 0 => input.truncate(rng.below(len)),
            _ => input.push(rng.next_u64() as u8),
        }
    }
    input.truncate(max_len);
}

/// The files of `dir` (seeds and regression inputs), sorted by name.
pub fn seeds(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("seed directory {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.into_iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Runs `target` on every seed, then on `iterations` edited inputs of at most `max_len`
/// bytes. A panic reports the input (escaped) before it propagates.
pub fn run(name: &str, seeds: &[Vec<u8>], tokens: &[&str], iterations: usize, max_len: usize, target: impl Fn(&[u8])) {
    let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut rng = Rng::new(seed);
    // SEXTANT_FUZZ_SCALE=n runs n times as many inputs (a longer run without libFuzzer).
    let scale = std::env::var("SEXTANT_FUZZ_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1usize);
    let iterations = iterations.saturating_mul(scale);
    let one = |i: usize, input: &[u8]| {
        crate::alloc::set_input(input);
        let result = catch_unwind(AssertUnwindSafe(|| target(input)));
        crate::alloc::clear_input();
        if let Err(panic) = result {
            eprintln!("{name}: input {i} panicked: {:?}", String::from_utf8_lossy(input));
            eprintln!("{name}: input {i} (hex): {}", input.iter().map(|b| format!("{b:02x}")).collect::<String>());
            resume_unwind(panic);
        }
    };
    for (i, s) in seeds.iter().enumerate() {
        one(i, s);
    }
    let mut last = seeds.first().cloned().unwrap_or_default();
    for i in 0..iterations {
        let mut input =
            if rng.below(3) == 0 || seeds.is_empty() { last } else { seeds[rng.below(seeds.len())].clone() };
        mutate(&mut rng, &mut input, tokens, seeds, max_len);
        one(seeds.len() + i, &input);
        last = input;
    }
}
