//! Request rate limits (docs/API.md, "Rate limits") with `governor`'s GCRA. A limit is
//! cluster-wide: each router enforces its share, the limit divided by the number of live
//! routers (Loki's global strategy), so N routers together admit about the configured rate.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use sextant_model::meta::RateLimitOverrides;
use sextant_model::Clock;

use crate::http::error::ApiError;

/// What a limit is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Observability ingest, per API key.
    Ingest,
    /// Product analytics `/v1/*`, per project token.
    Analytics,
    /// JWT endpoints, per user.
    Api,
    /// `/auth/*`, per client IP.
    Auth,
}

/// Cluster-wide requests per second of each class (the defaults of docs/API.md, "Rate limits").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub ingest_rps: u32,
    pub analytics_rps: u32,
    pub api_rps: u32,
    pub auth_rps: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self { ingest_rps: 500, analytics_rps: 500, api_rps: 30, auth_rps: 5 }
    }
}

impl RateLimitConfig {
    /// The cluster-wide rate of `class`: the first override that sets it (strongest first:
    /// project quota, org quota, plan), else the default.
    pub fn limit(&self, class: Class, overrides: &[&RateLimitOverrides]) -> u32 {
        let pick = |f: fn(&RateLimitOverrides) -> Option<u32>, default: u32| {
            overrides.iter().find_map(|o| f(o)).unwrap_or(default)
        };
        match class {
            Class::Ingest => pick(|o| o.ingest_rps, self.ingest_rps),
            Class::Analytics => pick(|o| o.analytics_rps, self.analytics_rps),
            Class::Api => pick(|o| o.api_rps, self.api_rps),
            // Before authentication: nobody's plan applies.
            Class::Auth => self.auth_rps,
        }
    }
}

/// This router's part of a cluster-wide limit. Rounded up so that a small limit never becomes
/// zero; the overshoot is below one request per second per router.
pub fn share(limit: u32, live_routers: usize) -> u32 {
    let n = live_routers.max(1) as u32;
    limit.div_ceil(n).max(1)
}

/// The limiters' time: the monotonic reading of the router's clock.
#[derive(Clone, Debug)]
struct LimiterClock(Clock);

impl governor::clock::Clock for LimiterClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(self.0.monotonic())
    }
}

type Limiter = RateLimiter<String, DefaultKeyedStateStore<String>, LimiterClock, NoOpMiddleware<Nanos>>;

pub struct RateLimits {
    pub config: RateLimitConfig,
    /// One keyed limiter per (class, per-router rate). A change of share (a router joined or
    /// left) or of plan moves a key to another limiter, starting it with a fresh burst; that
    /// happens rarely enough not to matter.
    limiters: Mutex<HashMap<(Class, u32), Arc<Limiter>>>,
    clock: Clock,
}

impl RateLimits {
    pub fn new(config: RateLimitConfig, clock: Clock) -> Self {
        Self { config, limiters: Mutex::new(HashMap::new()), clock }
    }

    fn limiter(&self, class: Class, rate: u32) -> Arc<Limiter> {
        let mut limiters = self.limiters.lock().unwrap();
        limiters
            .entry((class, rate))
            .or_insert_with(|| {
                // Burst of one second's worth: short spikes pass, sustained excess does not.
                let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
                let clock = LimiterClock(self.clock.clone());
                Arc::new(RateLimiter::new(Quota::per_second(rate), DefaultKeyedStateStore::default(), clock))
            })
            .clone()
    }

    /// Admits one request of `key`, or says when to retry.
    pub fn check(
        &self,
        class: Class,
        key: &str,
        overrides: &[&RateLimitOverrides],
        live_routers: usize,
    ) -> Result<(), ApiError> {
        let rate = share(self.config.limit(class, overrides), live_routers);
        let limiter = self.limiter(class, rate);
        match limiter.check_key(&key.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(limiter.clock().now());
                Err(ApiError::RateLimited { retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64 })
            }
        }
    }

    /// Forgets keys whose buckets are full again, so per-IP and per-key state stays bounded.
    pub fn retain_recent(&self) {
        for limiter in self.limiters.lock().unwrap().values() {
            limiter.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_the_limit_between_live_routers() {
        assert_eq!(share(500, 0), 500);
        assert_eq!(share(500, 1), 500);
        assert_eq!(share(500, 2), 250);
        assert_eq!(share(500, 3), 167);
        assert_eq!(share(5, 10), 1);
        assert_eq!(share(0, 1), 1);
    }

    #[test]
    fn the_strongest_override_that_sets_a_rate_wins() {
        let config = RateLimitConfig::default();
        let plan = RateLimitOverrides { ingest_rps: Some(2000), analytics_rps: None, api_rps: Some(60) };
        let org_quota = RateLimitOverrides { ingest_rps: None, analytics_rps: Some(50), api_rps: Some(90) };
        let project_quota = RateLimitOverrides { ingest_rps: Some(10), analytics_rps: None, api_rps: None };
        assert_eq!(config.limit(Class::Ingest, &[]), 500);
        assert_eq!(config.limit(Class::Ingest, &[&plan]), 2000);
        assert_eq!(config.limit(Class::Analytics, &[&plan]), 500);
        let all = [&project_quota, &org_quota, &plan];
        assert_eq!(config.limit(Class::Ingest, &all), 10);
        assert_eq!(config.limit(Class::Analytics, &all), 50);
        assert_eq!(config.limit(Class::Api, &all), 90);
        assert_eq!(config.limit(Class::Auth, &all), 5);
    }

    #[test]
    fn burst_then_refusal_with_retry_after_per_key() {
        let limits = RateLimits::new(
            RateLimitConfig { ingest_rps: 10, analytics_rps: 10, api_rps: 10, auth_rps: 10 },
            Clock::system(),
        );
        for _ in 0..10 {
            limits.check(Class::Ingest, "k1", &[], 1).unwrap();
        }
        match limits.check(Class::Ingest, "k1", &[], 1) {
            Err(ApiError::RateLimited { retry_after_secs }) => assert_eq!(retry_after_secs, 1),
            other => panic!("expected 429, got {other:?}"),
        }
        // Other keys and other classes have their own buckets.
        limits.check(Class::Ingest, "k2", &[], 1).unwrap();
        limits.check(Class::Api, "k1", &[], 1).unwrap();
        // With two routers alive this router's share is half.
        for _ in 0..5 {
            limits.check(Class::Auth, "ip", &[], 2).unwrap();
        }
        assert!(limits.check(Class::Auth, "ip", &[], 2).is_err());
    }

    #[test]
    fn rate_limit_window_refills_when_the_clock_advances() {
        let manual = sextant_model::ManualClock::at_millis(0);
        let config = RateLimitConfig { ingest_rps: 10, analytics_rps: 10, api_rps: 10, auth_rps: 4 };
        let limits = RateLimits::new(config, manual.clock());
        for _ in 0..4 {
            limits.check(Class::Auth, "ip", &[], 1).unwrap();
        }
        let refused = || matches!(limits.check(Class::Auth, "ip", &[], 1), Err(ApiError::RateLimited { .. }));
        assert!(refused(), "burst exhausted");
        // One request's worth of time later (1/4 s), exactly one more passes.
        manual.advance(std::time::Duration::from_millis(249));
        assert!(refused(), "admitted before its slot");
        manual.advance(std::time::Duration::from_millis(1));
        limits.check(Class::Auth, "ip", &[], 1).unwrap();
        assert!(refused());
        // A full second refills the whole burst.
        manual.advance(std::time::Duration::from_secs(1));
        for _ in 0..4 {
            limits.check(Class::Auth, "ip", &[], 1).unwrap();
        }
        assert!(refused());
    }

    #[test]
    fn idle_keys_are_forgotten_once_their_bucket_is_full_again() {
        let manual = sextant_model::ManualClock::at_millis(0);
        let limits = RateLimits::new(RateLimitConfig::default(), manual.clock());
        limits.check(Class::Auth, "ip", &[], 1).unwrap();
        let keys = |l: &RateLimits| l.limiters.lock().unwrap().values().map(|l| l.len()).sum::<usize>();
        limits.retain_recent();
        assert_eq!(keys(&limits), 1, "a key whose bucket is not full yet is kept");
        manual.advance(std::time::Duration::from_secs(1));
        limits.retain_recent();
        assert_eq!(keys(&limits), 0);
    }
}
