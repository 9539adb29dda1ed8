//! Where time is read. Code that decides by time (token expiry, refresh grace, rate-limit
//! windows, data retention, default query ranges, heartbeats) takes a [`Clock`] from its
//! state instead of asking the operating system, so tests move time with a [`ManualClock`]
//! rather than sleeping.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall time (Unix nanoseconds) and of monotonic time. Cheap to clone; clones of a
/// manual clock see the same time.
#[derive(Clone, Default)]
pub struct Clock(Source);

#[derive(Clone, Default)]
enum Source {
    #[default]
    System,
    Manual(Arc<Manual>),
}

struct Manual {
    wall_ns: AtomicI64,
    monotonic_ns: AtomicU64,
}

impl Clock {
    /// The operating system's clocks: what the binaries run on.
    pub fn system() -> Self {
        Clock(Source::System)
    }

    /// Wall time in Unix nanoseconds (saturating outside what an `i64` holds).
    pub fn now_nanos(&self) -> i64 {
        match &self.0 {
            Source::System => match SystemTime::now().duration_since(UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
                Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
            },
            Source::Manual(m) => m.wall_ns.load(Ordering::SeqCst),
        }
    }

    /// Wall time in Unix milliseconds.
    pub fn now_millis(&self) -> i64 {
        self.now_nanos().div_euclid(1_000_000)
    }

    /// Wall time in whole Unix seconds.
    pub fn now_secs(&self) -> i64 {
        self.now_nanos().div_euclid(1_000_000_000)
    }

    /// Monotonic time since an arbitrary fixed origin: for measuring how long something took or
    /// has waited. Never goes back, whatever the wall clock does.
    pub fn monotonic(&self) -> Duration {
        match &self.0 {
            Source::System => {
                static ORIGIN: OnceLock<Instant> = OnceLock::new();
                ORIGIN.get_or_init(Instant::now).elapsed()
            }
            Source::Manual(m) => Duration::from_nanos(m.monotonic_ns.load(Ordering::SeqCst)),
        }
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::System => f.write_str("Clock::System"),
            Source::Manual(m) => write!(f, "Clock::Manual({})", m.wall_ns.load(Ordering::SeqCst)),
        }
    }
}

/// A clock that moves only when told to, for tests. Clone it to keep a handle while the code
/// under test holds [`ManualClock::clock`].
#[derive(Clone)]
pub struct ManualClock(Arc<Manual>);

impl ManualClock {
    /// Stopped at `unix_nanos`, monotonic time at zero.
    pub fn at_nanos(unix_nanos: i64) -> Self {
        ManualClock(Arc::new(Manual { wall_ns: AtomicI64::new(unix_nanos), monotonic_ns: AtomicU64::new(0) }))
    }

    /// Stopped at `unix_millis`.
    pub fn at_millis(unix_millis: i64) -> Self {
        Self::at_nanos(unix_millis.saturating_mul(1_000_000))
    }

    /// The clock the code under test reads.
    pub fn clock(&self) -> Clock {
        Clock(Source::Manual(self.0.clone()))
    }

    /// Moves wall and monotonic time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.0.monotonic_ns.fetch_add(ns, Ordering::SeqCst);
        let ns = i64::try_from(ns).unwrap_or(i64::MAX);
        let _ = self.0.wall_ns.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| Some(w.saturating_add(ns)));
    }

    /// Sets wall time only, as a clock step would (monotonic time does not move).
    pub fn set_nanos(&self, unix_nanos: i64) {
        self.0.wall_ns.store(unix_nanos, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_every_clone_sees_it() {
        let manual = ManualClock::at_millis(1_000);
        let (a, b) = (manual.clock(), manual.clock().clone());
        assert_eq!((a.now_millis(), a.monotonic()), (1_000, Duration::ZERO));
        manual.advance(Duration::from_millis(1_500));
        assert_eq!(a.now_nanos(), 2_500_000_000);
        assert_eq!(b.now_secs(), 2);
        assert_eq!(b.monotonic(), Duration::from_millis(1_500));
    }

    #[test]
    fn stepping_the_wall_clock_back_leaves_monotonic_time_alone() {
        let manual = ManualClock::at_millis(10_000);
        manual.advance(Duration::from_secs(1));
        manual.set_nanos(0);
        let clock = manual.clock();
        assert_eq!(clock.now_nanos(), 0);
        assert_eq!(clock.monotonic(), Duration::from_secs(1));
    }

    #[test]
    fn times_before_the_epoch_round_down() {
        let clock = ManualClock::at_nanos(-1).clock();
        assert_eq!((clock.now_millis(), clock.now_secs()), (-1, -1));
    }

    #[test]
    fn the_system_clock_reads_the_current_time_and_never_goes_back() {
        let clock = Clock::system();
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        let now = clock.now_nanos();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        assert!((before..=after).contains(&now));
        let (m1, m2) = (clock.monotonic(), clock.monotonic());
        assert!(m2 >= m1);
    }
}
