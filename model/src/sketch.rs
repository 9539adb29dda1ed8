//! Latency sketches for percentiles that merge across shards (DESIGN B5): a DDSketch keeps
//! logarithmic buckets, so a merged sketch answers any quantile within the same relative
//! error as one built from all values at once, whatever the number of shards.

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

impl Default for LatencySketch {
    fn default() -> Self {
        Self(DDSketch::new(Config::new(RELATIVE_ACCURACY, MAX_BINS, MIN_VALUE)))
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
}
