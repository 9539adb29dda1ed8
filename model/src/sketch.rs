//! Latency sketches for percentiles that merge across shards (docs/ARCHITECTURE.md, "Queries"): a
//! DDSketch keeps logarithmic buckets, so a merged sketch answers any quantile within the same
//! relative error as one built from all values at once, whatever the number of shards.
//!
//! Scans that feed millions of values use [`LatencyBuckets`]: the same buckets, counted
//! without a logarithm per value, turned into a sketch once at the end.

use std::sync::OnceLock;

use sketches_ddsketch::{Config, DDSketch};

/// Relative accuracy of the buckets: half the 1% the contract allows, so rounding at bucket
/// edges never takes an answer over it.
pub const RELATIVE_ACCURACY: f64 = 0.005;
// The binary decoding restores these two defaults of the crate; sketches only merge when
// their configurations are equal, so every sketch is built with them.
const MAX_BINS: u32 = 2048;
const MIN_VALUE: f64 = 1.0e-9;

#[derive(Debug, thiserror::Error)]
pub enum SketchError {
    #[error("undecodable latency sketch: {0}")]
    Decode(String),
    #[error("latency sketches of different accuracies cannot be merged")]
    Mismatch,
}

/// Non-negative durations: milliseconds for span latencies, seconds for funnel conversions.
#[derive(Clone)]
pub struct LatencySketch(DDSketch);

fn config() -> Config {
    Config::new(RELATIVE_ACCURACY, MAX_BINS, MIN_VALUE)
}

impl Default for LatencySketch {
    fn default() -> Self {
        Self(DDSketch::new(config()))
    }
}

impl std::fmt::Debug for LatencySketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencySketch").field("count", &self.count()).finish()
    }
}

impl LatencySketch {
    pub fn add(&mut self, ms: f64) {
        self.0.add(ms.max(0.0));
    }

    pub fn count(&self) -> u64 {
        self.0.count() as u64
    }

    /// The value at rank ⌊q·(n−1)⌋ of the sorted values, within the relative accuracy.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let v = self.0.quantile(q).ok().flatten()?;
        // The exact extremes are kept beside the buckets: a bucket's representative value
        // never needs to lie outside them.
        Some(v.clamp(self.0.min()?, self.0.max()?))
    }

    pub fn max(&self) -> Option<f64> {
        self.0.max()
    }

    /// Exact for a sketch built by [`LatencySketch::add`]; within the relative accuracy for
    /// one built from [`LatencyBuckets`].
    pub fn sum(&self) -> Option<f64> {
        self.0.sum()
    }

    pub fn merge(&mut self, other: &LatencySketch) -> Result<(), SketchError> {
        if other.count() == 0 {
            return Ok(());
        }
        self.0.merge(&other.0).map_err(|_| SketchError::Mismatch)
    }

    /// The standard DDSketch binary encoding (the one of DataDog's sketches-java); an empty
    /// sketch is no bytes at all, which [`LatencySketch::decode`] reads back as empty.
    pub fn encode(&self) -> Vec<u8> {
        if self.count() == 0 {
            return Vec::new();
        }
        self.0.to_java_bytes()
    }

    /// Merges a sketch received in its [`LatencySketch::encode`] form.
    pub fn merge_encoded(&mut self, bytes: &[u8]) -> Result<(), SketchError> {
        self.merge(&Self::decode(bytes)?)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        DDSketch::from_java_bytes(bytes).map(Self).map_err(|e| SketchError::Decode(e.to_string()))
    }

    /// [`decode`](Self::decode), refusing a sketch of another accuracy: what it returns merges
    /// with any sketch of this module without error.
    pub fn decode_mergeable(bytes: &[u8]) -> Result<Self, SketchError> {
        let decoded = Self::decode(bytes)?;
        let mut out = Self::default();
        out.merge(&decoded)?;
        Ok(out)
    }

    /// Merges a sketch known to have this module's accuracy (built here, or read with
    /// [`decode_mergeable`](Self::decode_mergeable)).
    pub fn absorb(&mut self, other: LatencySketch) {
        if self.count() == 0 {
            *self = other;
        } else {
            self.merge(&other).expect("latency sketches share one accuracy");
        }
    }
}

/// Values counted in the sketch's buckets: what [`LatencySketch::add`] does per value, at a
/// fraction of the cost — a table lookup on the value's bits instead of a logarithm, and one
/// counter instead of the sketch's store — for scans over millions of spans. Turned into a
/// sketch once, with [`LatencyBuckets::to_sketch`]: the same buckets, count, minimum and
/// maximum as adding every value one by one, so the same quantiles.
#[derive(Clone, Debug)]
pub struct LatencyBuckets {
    /// `counts[i]` values fell in the bucket with key `offset + i`, plus 2^32 for every time
    /// the key is in `overflows`. 32-bit counters: a scan's counters of a hundred endpoints
    /// then stay in a core's cache, where cache misses on them were most of the counting cost.
    offset: i32,
    counts: Vec<u32>,
    overflows: Vec<i32>,
    /// Values at or under the sketch's minimum (zero durations).
    zeros: u64,
    min: f64,
    max: f64,
}

impl Default for LatencyBuckets {
    fn default() -> Self {
        Self {
            offset: 0,
            counts: Vec::new(),
            overflows: Vec::new(),
            zeros: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl LatencyBuckets {
    /// As [`LatencySketch::add`].
    #[inline]
    pub fn add(&mut self, ms: f64) {
        let v = ms.max(0.0);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        if v <= MIN_VALUE {
            self.zeros += 1;
        } else {
            let key = bucket_key(v);
            let i = self.index(key);
            let c = &mut self.counts[i];
            if *c == u32::MAX {
                *c = 0;
                self.overflows.push(key);
            } else {
                *c += 1;
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.wide_counts().iter().sum::<u64>() + self.zeros
    }

    /// The count of each key from `offset` on.
    fn wide_counts(&self) -> Vec<u64> {
        let mut counts: Vec<u64> = self.counts.iter().map(|&c| u64::from(c)).collect();
        for &key in &self.overflows {
            counts[(key - self.offset) as usize] += 1 << 32;
        }
        counts
    }

    #[inline]
    fn index(&mut self, key: i32) -> usize {
        let i = key.wrapping_sub(self.offset) as u32 as usize;
        if i >= self.counts.len() {
            return self.grow(key);
        }
        i
    }

    /// Makes room for `key`, with some margin on the side it grew (neighbouring keys follow).
    #[cold]
    fn grow(&mut self, key: i32) -> usize {
        const MARGIN: i32 = 32;
        if self.counts.is_empty() {
            self.offset = key - MARGIN;
            self.counts = vec![0; 2 * MARGIN as usize];
        } else if key < self.offset {
            let extra = (self.offset - key + MARGIN) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, extra));
            self.offset -= extra as i32;
        } else {
            self.counts.resize((key - self.offset + MARGIN) as usize, 0);
        }
        (key - self.offset) as usize
    }

    /// Adds `zeros` values at or under the minimum and widens the extremes to `min` and `max`
    /// (what [`counts`](Self::counts) lists besides the buckets).
    pub fn add_extremes(&mut self, zeros: u64, min: f64, max: f64) {
        self.zeros += zeros;
        self.min = self.min.min(min);
        self.max = self.max.max(max);
    }

    /// Adds `n` values of the bucket with key `key` (as [`counts`](Self::counts) lists them):
    /// adding another's counts and extremes is the same as having counted its values here, so
    /// the sketch is the one of a single scan over all the values.
    pub fn add_bucket(&mut self, key: i32, n: u64) {
        let i = self.index(key);
        let total = u64::from(self.counts[i]) + n;
        self.counts[i] = total as u32;
        for _ in 0..total >> 32 {
            self.overflows.push(key);
        }
    }

    /// Adds `other`'s values: the same buckets as counting both's values here.
    pub fn absorb(&mut self, other: &LatencyBuckets) {
        self.add_extremes(other.zeros, other.min, other.max);
        for (key, n) in other.nonzero() {
            self.add_bucket(key, n);
        }
    }

    /// The non-empty buckets as (key, count), keys increasing.
    fn nonzero(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let offset = self.offset;
        self.wide_counts().into_iter().enumerate().filter(|(_, c)| *c > 0).map(move |(i, c)| (offset + i as i32, c))
    }

    /// What was counted, in a form to store.
    pub fn counts(&self) -> BucketCounts {
        BucketCounts { zeros: self.zeros, min: self.min, max: self.max, buckets: self.nonzero().collect() }
    }

    /// The sketch of the values counted. Each bucket goes in as one value of that bucket with
    /// its count: the bucket's representative value, kept within [min, max] (a non-empty
    /// bucket holding the minimum or maximum contains that clamp too, so the key is the
    /// same), and the exact minimum and maximum once each, so the sketch's extremes are the
    /// exact ones. Only the sketch's sum is approximate (APM keeps its own exact sum).
    pub fn to_sketch(&self) -> LatencySketch {
        let mut sketch = LatencySketch::default();
        let total = self.count();
        if total == 0 {
            return sketch;
        }
        let mut counts = self.wide_counts();
        let mut zeros = self.zeros;
        let mut take_one = |v: f64| {
            if v <= MIN_VALUE {
                zeros -= 1;
            } else {
                counts[(bucket_key(v) - self.offset) as usize] -= 1;
            }
            sketch.0.add(v);
        };
        take_one(self.min);
        if total > 1 {
            take_one(self.max);
        }
        sketch.0.add_with_count(0.0f64.clamp(self.min, self.max), zeros);
        let cfg = config();
        for (i, &c) in counts.iter().enumerate() {
            if c > 0 {
                let key = self.offset + i as i32;
                sketch.0.add_with_count(cfg.value(key).clamp(self.min, self.max), c);
            }
        }
        sketch
    }
}

impl PartialEq for LatencyBuckets {
    fn eq(&self, other: &Self) -> bool {
        self.counts() == other.counts()
    }
}

/// The content of [`LatencyBuckets`]: values at or under the sketch's minimum, the exact
/// extremes (infinities when empty) and the count of every non-empty bucket, keys increasing.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketCounts {
    pub zeros: u64,
    pub min: f64,
    pub max: f64,
    pub buckets: Vec<(i32, u64)>,
}

/// Mantissa bits that select a cell of [`KeyTable`]: a cell spans a ratio of at most
/// 1 + 2^-7 ≈ 1.0078, less than one bucket (γ ≈ 1.01005), so it holds at most one bucket edge.
const CELL_BITS: u32 = 7;
/// Values in [2^-30, 2^34) ms (1 ns to 199 days) go through the table, others through the
/// logarithm.
const FIRST_EXPONENT: i64 = -30;
const LAST_EXPONENT: i64 = 34;
const FIRST_CELL: i64 = (1023 + FIRST_EXPONENT) << CELL_BITS;

/// The sketch's bucket key of every positive f64, by its exponent and first mantissa bits:
/// the key at the cell's start and the first value of the cell in the next bucket. Built
/// once from the sketch's own key function (bisecting for each edge), so it gives exactly
/// the keys the sketch would.
struct KeyTable {
    cells: Vec<(i32, f64)>,
}

fn key_table() -> &'static KeyTable {
    static TABLE: OnceLock<KeyTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let cfg = config();
        let cells = (FIRST_CELL..(1023 + LAST_EXPONENT) << CELL_BITS)
            .map(|cell| {
                let first = (cell as u64) << (52 - CELL_BITS);
                let last = ((cell as u64 + 1) << (52 - CELL_BITS)) - 1;
                let key = cfg.key(f64::from_bits(first));
                if cfg.key(f64::from_bits(last)) == key {
                    return (key, f64::INFINITY);
                }
                // The smallest value of the cell whose key is past `key`.
                let (mut lo, mut hi) = (first, last);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if cfg.key(f64::from_bits(mid)) > key {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                (key, f64::from_bits(lo))
            })
            .collect();
        KeyTable { cells }
    })
}

/// `config().key(v)` for `v > MIN_VALUE`.
#[inline]
fn bucket_key(v: f64) -> i32 {
    let cell = (v.to_bits() >> (52 - CELL_BITS)) as i64 - FIRST_CELL;
    match key_table().cells.get(cell as usize) {
        Some(&(key, next)) => key + i32::from(v >= next),
        None => config().key(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact value at the rank the sketch reports.
    fn exact(sorted: &[f64], q: f64) -> f64 {
        sorted[(q * (sorted.len() - 1) as f64) as usize]
    }

    #[test]
    fn merged_shard_sketches_stay_within_one_percent_of_exact_percentiles() {
        // A skewed latency distribution (long tail over five decades), deterministic.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut values = Vec::new();
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            values.push(0.05 * (u * 11.5).exp());
        }
        for shards in [1usize, 4, 7] {
            let mut parts = vec![LatencySketch::default(); shards];
            for (i, v) in values.iter().enumerate() {
                parts[i % shards].add(*v);
            }
            let mut merged = LatencySketch::default();
            for p in &parts {
                merged.merge(&LatencySketch::decode(&p.encode()).unwrap()).unwrap();
            }
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(merged.count(), values.len() as u64);
            for q in [0.5, 0.9, 0.95, 0.99, 0.999] {
                let (got, want) = (merged.quantile(q).unwrap(), exact(&sorted, q));
                assert!((got - want).abs() / want <= 0.01, "{shards} shards, q={q}: {got} vs {want}");
            }
            assert_eq!(merged.max(), sorted.last().copied());
        }
    }

    #[test]
    fn empty_sketches_merge_and_decode() {
        let mut a = LatencySketch::default();
        a.merge(&LatencySketch::decode(&[]).unwrap()).unwrap();
        a.add(0.0);
        a.add(3.0);
        let b = LatencySketch::decode(&a.encode()).unwrap();
        assert_eq!(b.count(), 2);
        assert_eq!(b.quantile(0.0), Some(0.0));
        assert!(LatencySketch::decode(&[0xff, 1, 2]).is_err());
    }

    fn skewed_values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                0.05 * (u * 11.5).exp()
            })
            .collect()
    }

    #[test]
    fn bucket_keys_are_the_sketch_keys() {
        let cfg = config();
        let mut values = skewed_values(100_000, 7);
        // Microsecond and millisecond durations (what spans store), far out of the table,
        // and the values around every bucket edge of the table.
        values.extend((1..20_000).map(|us| us as f64 / 1000.0));
        values.extend([1e-9 * 1.5, 1e-7, 3e12, 1e15, f64::MAX]);
        for &(_, next) in &key_table().cells {
            if next.is_finite() {
                let b = next.to_bits();
                values.extend([b - 2, b - 1, b, b + 1].map(f64::from_bits));
            }
        }
        for v in values {
            assert_eq!(bucket_key(v), cfg.key(v), "{v:e}");
        }
    }

    #[test]
    fn bucket_counts_make_the_sketch_of_adding_each_value() {
        let mut cases = vec![skewed_values(20_000, 3), vec![], vec![4.2], vec![0.0, 0.0], vec![7.0, 7.0, 7.0]];
        cases.push((0..5000).map(|i| (i % 977) as f64 / 1000.0).collect());
        cases.push(vec![0.0, 1e-12, 5.0, 5.0001, 1e6, 3e13]);
        for values in cases {
            let (mut one_by_one, mut buckets) = (LatencySketch::default(), LatencyBuckets::default());
            for &v in &values {
                one_by_one.add(v);
                buckets.add(v);
            }
            let batched = LatencySketch::decode(&buckets.to_sketch().encode()).unwrap();
            assert_eq!(batched.count(), values.len() as u64);
            assert_eq!(batched.max(), one_by_one.max());
            assert_eq!(batched.0.min(), one_by_one.0.min());
            for q in (0..=1000).map(|i| i as f64 / 1000.0) {
                assert_eq!(batched.quantile(q), one_by_one.quantile(q), "q={q} of {} values", values.len());
            }
            if let (Some(a), Some(b)) = (batched.sum(), one_by_one.sum()) {
                assert!((a - b).abs() <= b * RELATIVE_ACCURACY, "sum {a} vs {b}");
            }
        }
    }

    #[test]
    fn merged_buckets_make_the_sketch_of_one_scan_over_all_values() {
        let values = skewed_values(30_000, 11);
        let mut whole = LatencyBuckets::default();
        let mut parts = vec![LatencyBuckets::default(); 7];
        for (i, &v) in values.iter().enumerate() {
            whole.add(v);
            parts[(i * 31 + i / 5) % 7].add(v);
        }
        parts.push(LatencyBuckets::default());
        let mut merged = LatencyBuckets::default();
        for p in &parts {
            let c = p.counts();
            merged.add_extremes(c.zeros, c.min, c.max);
            for (key, n) in c.buckets {
                merged.add_bucket(key, n);
            }
        }
        assert_eq!(merged, whole);
        assert_eq!(merged.to_sketch().encode(), whole.to_sketch().encode());
    }

    #[test]
    fn bucket_counters_carry_past_32_bits() {
        let mut buckets = LatencyBuckets::default();
        buckets.add(5.0);
        let i = (bucket_key(5.0) - buckets.offset) as usize;
        buckets.counts[i] = u32::MAX - 1;
        for _ in 0..3 {
            buckets.add(5.0);
        }
        buckets.add(9.0);
        let want = u64::from(u32::MAX) + 3;
        assert_eq!(buckets.count(), want);
        let sketch = buckets.to_sketch();
        assert_eq!(sketch.count(), want);
        assert!((sketch.quantile(0.5).unwrap() - 5.0).abs() <= 5.0 * 0.01);
        assert_eq!(sketch.max(), Some(9.0));
    }
}
