//! Monthly quotas (docs/API.md, "Usage"): checked once a request is authenticated and before
//! its body is read, so a client over a hard quota costs nothing more. Observability ingest
//! (JSON and OTLP) is measured in bytes, analytics ingest (events, replays, PostHog capture) in
//! events, against the limits [`resolve_limits`] gives, from the router's cached view of usage,
//! a few seconds behind what was committed.

use std::collections::HashSet;
use std::sync::Mutex;

use sextant_model::usage::{exceeded, month_of_millis, month_start_millis, next_month, resolve_limits, Exceeded};
use sextant_model::{OrgId, ProjectId};

use crate::cluster::MetaCache;
use crate::http::error::ApiError;
use crate::identity::account::time_json;
use crate::AppState;

/// What an ingest endpoint is metered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Meter {
    /// Observability: bytes of accepted objects.
    Bytes,
    /// Product analytics: events.
    Events,
}

impl Meter {
    pub fn name(self) -> &'static str {
        match self {
            Meter::Bytes => "bytes",
            Meter::Events => "events",
        }
    }
}

/// The orgs already warned of a soft quota crossed, per month and meter: one log line each.
#[derive(Default)]
pub struct SoftWarnings(Mutex<HashSet<(OrgId, u32, Meter)>>);

impl SoftWarnings {
    /// True the first time for (org, month, meter).
    fn first(&self, org: OrgId, month: u32, meter: Meter) -> bool {
        let mut warned = self.0.lock().unwrap();
        warned.retain(|(_, m, _)| *m >= month); // months that ended are forgotten
        warned.insert((org, month, meter))
    }
}

/// What the quotas say about one more request of `project` at `now`.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// Over a soft quota: accepted, and reported.
    AcceptOverSoft {
        org: OrgId,
        month: u32,
        exceeded: Exceeded,
    },
    /// Over a hard quota: refused until `resets_at` (Unix milliseconds).
    Refuse {
        exceeded: Exceeded,
        resets_at: i64,
    },
}

/// The quota decision for `project`'s next request metered in `meter`, at `now`.
pub fn decide(cache: &MetaCache, project: ProjectId, meter: Meter, now: i64) -> Decision {
    let Some(org_id) = cache.projects.get(&project).map(|p| p.org_id) else { return Decision::Accept };
    if !cache.orgs.contains_key(&org_id) {
        return Decision::Accept;
    }
    let limits = resolve_limits(cache.plan_of(&org_id, now), &cache.quotas, org_id, Some(project));
    let limit = match meter {
        Meter::Bytes => limits.bytes,
        Meter::Events => limits.events,
    };
    let Some(l) = limit else { return Decision::Accept };
    let month = month_of_millis(now);
    let counts = match l.project {
        Some(p) => cache.usage.get(&(p, month)),
        // The org's live projects, as the usage endpoint counts them.
        None => cache.org_usage.get(&(org_id, month)),
    };
    let used = counts.map_or(0, |c| match meter {
        Meter::Bytes => c.bytes,
        Meter::Events => c.events,
    });
    match exceeded(limit, used) {
        None => Decision::Accept,
        Some(exceeded) if exceeded.hard => {
            Decision::Refuse { exceeded, resets_at: month_start_millis(next_month(month)) }
        }
        Some(exceeded) => Decision::AcceptOverSoft { org: org_id, month, exceeded },
    }
}

/// Refuses a request of `project` over a hard quota with 402 `quota_exceeded`; over a soft
/// one, counts it and warns once per org and month.
pub fn check(app: &AppState, project: ProjectId, meter: Meter) -> Result<(), ApiError> {
    let Some(cache) = app.cluster.meta_cache() else { return Ok(()) };
    match decide(&cache, project, meter, app.clock.now_millis()) {
        Decision::Accept => Ok(()),
        Decision::AcceptOverSoft { org, month, exceeded } => {
            app.metrics.over_quota(meter.name(), false);
            crate::webhooks::quota_crossed(app, &cache, project, meter, &exceeded);
            if app.soft_quota_warnings.first(org, month, meter) {
                tracing::warn!(
                    org = %org, meter = meter.name(), limit = exceeded.limit, used = exceeded.used,
                    "soft monthly quota exceeded; ingest is still accepted"
                );
            }
            Ok(())
        }
        Decision::Refuse { exceeded, resets_at } => {
            app.metrics.over_quota(meter.name(), true);
            crate::webhooks::quota_crossed(app, &cache, project, meter, &exceeded);
            Err(ApiError::QuotaExceeded {
                what: meter.name(),
                limit: exceeded.limit,
                used: exceeded.used,
                resets_at: time_json(resets_at),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::{default_plans, MetaView, Org, Project, Quota};
    use sextant_model::usage::{UsageCounts, UsageRecord};
    use sextant_model::ManualClock;

    /// 2026-11-30T23:59:59.999Z: the last instant of November.
    const END_OF_NOV: i64 = 1_796_083_200_000 - 1;

    fn quota(org: OrgId, project: Option<ProjectId>, bytes: Option<u64>, events: Option<u64>, hard: bool) -> Quota {
        Quota {
            id: "q".into(),
            org_id: org,
            project_id: project,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: bytes,
            monthly_events: events,
            hard,
        }
    }

    /// An org on `plan` with projects `a` and `b`, which used `used` (bytes, events) each in
    /// November 2026.
    fn cache(plan: &str, quotas: Vec<Quota>, used: (u64, u64)) -> (MetaCache, OrgId, ProjectId, ProjectId) {
        let (org, a, b) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let project = |id, name: &str| Project {
            id,
            org_id: org,
            name: name.into(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
        };
        let counts = UsageCounts { bytes: used.0, events: used.1, ..Default::default() };
        let quotas = quotas.into_iter().map(|mut q| {
            q.org_id = org;
            q
        });
        let view = MetaView {
            orgs: vec![Org {
                id: org,
                name: "acme".into(),
                plan: plan.into(),
                default_project: a,
                created_at_ms: 0,
                managed_by: None,
                key: None,
                owner_email: None,
                suspended: false,
            }],
            projects: vec![project(a, "web"), project(b, "api")],
            plans: default_plans(),
            quotas: quotas.collect(),
            usage: [a, b].iter().map(|p| UsageRecord { project_id: p.to_string(), month: 202611, counts }).collect(),
            ..Default::default()
        };
        (MetaCache::from(view), org, a, b)
    }

    fn org_quota(bytes: Option<u64>, events: Option<u64>, hard: bool) -> Quota {
        quota(OrgId::random(), None, bytes, events, hard)
    }

    #[test]
    fn a_hard_quota_admits_until_the_org_reaches_it_then_refuses_until_next_month() {
        // Two projects of 50 bytes each: the org used 100.
        let (under, _, a, _) = cache("free", vec![org_quota(Some(101), None, true)], (50, 0));
        assert_eq!(decide(&under, a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        let (at, _, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (50, 0));
        let refused =
            Decision::Refuse { exceeded: Exceeded { limit: 100, used: 100, hard: true }, resets_at: END_OF_NOV + 1 };
        assert_eq!(decide(&at, a, Meter::Bytes, END_OF_NOV), refused);
        assert_eq!(time_json(END_OF_NOV + 1), "2026-12-01T00:00:00.000Z");
        // Events are not limited by this quota and the free plan's million is far.
        assert_eq!(decide(&at, a, Meter::Events, END_OF_NOV), Decision::Accept);
    }

    #[test]
    fn a_soft_quota_accepts_over_the_limit_and_says_so() {
        let (c, org, a, _) = cache("free", vec![org_quota(None, Some(10), false)], (0, 30));
        assert_eq!(
            decide(&c, a, Meter::Events, END_OF_NOV),
            Decision::AcceptOverSoft { org, month: 202611, exceeded: Exceeded { limit: 10, used: 60, hard: false } }
        );
        let warnings = SoftWarnings::default();
        assert!(warnings.first(org, 202611, Meter::Events));
        assert!(!warnings.first(org, 202611, Meter::Events), "once per org and month");
        assert!(warnings.first(org, 202611, Meter::Bytes));
        assert!(warnings.first(org, 202612, Meter::Events), "again the next month");
    }

    #[test]
    fn plan_limits_are_hard_and_an_unlimited_plan_never_refuses() {
        let gb = 1_000_000_000;
        let (free, _, a, _) = cache("free", vec![], (gb / 2, 0));
        assert!(matches!(decide(&free, a, Meter::Bytes, END_OF_NOV), Decision::Refuse { .. }));
        let (enterprise, _, a, _) = cache("enterprise", vec![], (u64::MAX / 4, u64::MAX / 4));
        assert_eq!(decide(&enterprise, a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        assert_eq!(decide(&enterprise, a, Meter::Events, END_OF_NOV), Decision::Accept);
    }

    #[test]
    fn a_project_quota_is_measured_against_that_project_alone() {
        let p_quota = |p| quota(OrgId::random(), Some(p), Some(60), None, true);
        let (mut c, _, a, b) = cache("enterprise", vec![], (50, 0));
        let q = p_quota(a);
        c.quotas = vec![Quota { org_id: c.projects[&a].org_id, ..q }];
        // The org used 100, project a only 50 of its 60; b has no limit at all.
        assert_eq!(decide(&c, a, Meter::Bytes, END_OF_NOV), Decision::Accept);
        assert_eq!(decide(&c, b, Meter::Bytes, END_OF_NOV), Decision::Accept);
        c.quotas[0].monthly_bytes = Some(50);
        assert!(matches!(decide(&c, a, Meter::Bytes, END_OF_NOV), Decision::Refuse { .. }));
    }

    /// At 00:00 UTC on the 1st the new month's usage is empty, so a refused org ingests again.
    #[test]
    fn ingest_resumes_when_the_month_rolls_over() {
        let (c, _, a, _) = cache("free", vec![org_quota(Some(100), None, true)], (50, 0));
        let clock = ManualClock::at_millis(END_OF_NOV);
        assert!(matches!(decide(&c, a, Meter::Bytes, clock.clock().now_millis()), Decision::Refuse { .. }));
        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(decide(&c, a, Meter::Bytes, clock.clock().now_millis()), Decision::Accept);
    }

    #[test]
    fn an_unknown_project_is_not_refused_here() {
        let (c, ..) = cache("free", vec![org_quota(Some(0), Some(0), true)], (0, 0));
        assert_eq!(decide(&c, ProjectId::random(), Meter::Bytes, END_OF_NOV), Decision::Accept);
    }
}
