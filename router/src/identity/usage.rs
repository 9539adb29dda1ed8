//! `GET /api/v1/usage` (docs/API.md, "Usage"): the org's usage this calendar month (UTC)
//! against its plan's limits (or its `Quota` override), per kind and per project, and the
//! months before. The current month comes from the router's cached meta view, the one
//! quota enforcement reads; past months from meta.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use sextant_model::meta::MetaQuery;
use sextant_model::subscription::{status_view, SubscriptionStatus};
use sextant_model::usage::{month_of_millis, month_start_millis, next_month, resolve_limits, UsageCounts, UsageRecord};
use sextant_model::{OrgId, ProjectId};

use crate::cluster::MetaCache;
use crate::http::error::ApiError;
use crate::identity::account::time_json;
use crate::identity::auth::Session;
use crate::AppState;

/// Bytes in the gigabyte of `used_gb` and `limit_gb` (plan limits are in these).
pub const GB: f64 = 1e9;
const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProjectUsage {
    pub project_id: ProjectId,
    pub name: String,
    pub used_gb: f64,
    #[serde(flatten)]
    pub counts: UsageCounts,
}

/// A past month.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MonthUsage {
    /// `YYYY-MM`.
    pub month: String,
    pub period_start: String,
    pub period_end: String,
    pub used_gb: f64,
    pub events_used: u64,
    #[serde(flatten)]
    pub counts: UsageCounts,
    pub projects: Vec<ProjectUsage>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageResponse {
    pub plan: String,
    pub in_trial: bool,
    /// Whole days (rounded up) until the trial ends; 0 outside a trial.
    pub trial_days_left: i64,
    pub used_gb: f64,
    /// `null`: unlimited.
    pub limit_gb: Option<f64>,
    /// Percent of `limit_gb` used; `null` when unlimited.
    pub percentage: Option<f64>,
    pub events_used: u64,
    pub events_limit: Option<u64>,
    pub period_start: String,
    /// Exclusive: the instant the next month begins.
    pub period_end: String,
    #[serde(flatten)]
    pub counts: UsageCounts,
    pub projects: Vec<ProjectUsage>,
    /// Past months, newest first.
    pub history: Vec<MonthUsage>,
}

fn month_name(month: u32) -> String {
    format!("{:04}-{:02}", month / 100, month % 100)
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / GB
}

/// The org's byte and event limits: its `Quota` override where it sets one, else its plan's
/// (resolved as ingest enforcement resolves them).
fn limits(cache: &MetaCache, org: OrgId, plan: &str) -> (Option<u64>, Option<u64>) {
    let l = resolve_limits(cache.plans.get(plan), &cache.quotas, org, None);
    (l.bytes.map(|l| l.limit), l.events.map(|l| l.limit))
}

/// Per project (all of the org's, listed by name) and their sum.
fn scoped(
    projects: &[(ProjectId, String)],
    of: impl Fn(&ProjectId) -> UsageCounts,
) -> (UsageCounts, Vec<ProjectUsage>) {
    let mut total = UsageCounts::default();
    let listed = projects
        .iter()
        .map(|(id, name)| {
            let c = of(id);
            total.add(&c);
            ProjectUsage { project_id: *id, name: name.clone(), used_gb: gb(c.bytes), counts: c }
        })
        .collect();
    (total, listed)
}

/// The org's live projects, by name.
fn org_projects(cache: &MetaCache, org_id: OrgId) -> Vec<(ProjectId, String)> {
    let mut projects: Vec<(ProjectId, String)> = cache
        .projects
        .values()
        .filter(|p| p.org_id == org_id && !cache.deleted_projects.contains(&p.id))
        .map(|p| (p.id, p.name.clone()))
        .collect();
    projects.sort_by(|a, b| (&a.1, a.0.to_string()).cmp(&(&b.1, b.0.to_string())));
    projects
}

#[utoipa::path(
    get, path = "/api/v1/usage", tag = "usage", summary = "This month's usage against the plan",
    responses((status = 200, description = "Usage of the organization, per project, and of past months; unlimited limits are null.", body = UsageResponse), crate::http::openapi::AccountErrors),
    security(("jwt" = []))
)]
pub async fn get(State(app): State<Arc<AppState>>, session: Session) -> Result<Json<UsageResponse>, ApiError> {
    let org_id = session.claims.org;
    let projects = org_projects(&*app.meta()?, org_id);
    let ids = projects.iter().map(|(id, _)| id.to_string()).collect();
    let past: Vec<UsageRecord> = app.cluster.meta_read(&MetaQuery::Usage { project_ids: ids }).await?;
    Ok(Json(usage(&*app.meta()?, org_id, &projects, app.clock.now_millis(), past)?))
}

/// The usage of `org_id` at `now`: this month from `cache`, earlier months from `past`.
pub fn usage(
    cache: &MetaCache,
    org_id: OrgId,
    projects: &[(ProjectId, String)],
    now: i64,
    past: Vec<UsageRecord>,
) -> Result<UsageResponse, ApiError> {
    let org = cache.orgs.get(&org_id).ok_or_else(|| ApiError::NotFound("no such organization".into()))?;
    let month = month_of_millis(now);
    let (total, per_project) = scoped(projects, |p| cache.usage.get(&(*p, month)).copied().unwrap_or_default());
    let plan = cache.plan_name(&org_id, now).unwrap_or(&org.plan).to_owned();
    let (limit_bytes, events_limit) = limits(cache, org_id, &plan);
    // A trial that a paid subscription replaced is over.
    let trial = cache.trials.get(&org_id).copied();
    let trial_end = trial
        .filter(|_| status_view(org, trial, cache.billing.get(&org_id), now).status == SubscriptionStatus::Trialing);

    let mut by_month: BTreeMap<u32, HashMap<String, UsageCounts>> = BTreeMap::new();
    for r in past.into_iter().filter(|r| r.month < month) {
        by_month.entry(r.month).or_default().insert(r.project_id, r.counts);
    }
    let history = by_month
        .into_iter()
        .rev()
        .map(|(m, of)| {
            let (total, projects) = scoped(projects, |p| of.get(&p.to_string()).copied().unwrap_or_default());
            MonthUsage {
                month: month_name(m),
                period_start: time_json(month_start_millis(m)),
                period_end: time_json(month_start_millis(next_month(m))),
                used_gb: gb(total.bytes),
                events_used: total.events,
                counts: total,
                projects,
            }
        })
        .collect();

    Ok(UsageResponse {
        plan,
        in_trial: trial_end.is_some(),
        trial_days_left: trial_end.map_or(0, |end| (end - now + DAY_MS - 1) / DAY_MS),
        used_gb: gb(total.bytes),
        limit_gb: limit_bytes.map(gb),
        percentage: limit_bytes.map(|l| if l == 0 { 100.0 } else { total.bytes as f64 * 100.0 / l as f64 }),
        events_used: total.events,
        events_limit,
        period_start: time_json(month_start_millis(month)),
        period_end: time_json(month_start_millis(next_month(month))),
        counts: total,
        projects: per_project,
        history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sextant_model::meta::{default_plans, MetaView, Org, OrgTrial, Project, Quota};
    use sextant_model::usage::previous_month;
    use sextant_model::ManualClock;

    /// 2026-11-20T12:00:00Z.
    const NOW: i64 = 1_795_176_000_000;

    fn counts(bytes: u64, n: u64) -> UsageCounts {
        UsageCounts { bytes, spans: n, logs: 2 * n, metric_samples: 3 * n, events: 4 * n, replay_events: 5 * n }
    }

    fn view(org: OrgId, plan: &str, a: ProjectId, b: ProjectId, reported: Vec<UsageRecord>) -> MetaView {
        let project = |id, name: &str| Project {
            id,
            org_id: org,
            name: name.into(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
        };
        MetaView {
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
            projects: vec![project(a, "web"), project(b, "api"), project(ProjectId::random(), "x")]
                .into_iter()
                .enumerate()
                .map(|(i, mut p)| {
                    if i == 2 {
                        p.org_id = OrgId::random(); // another org's project
                    }
                    p
                })
                .collect(),
            plans: default_plans(),
            usage: reported,
            ..Default::default()
        }
    }

    fn rec(p: ProjectId, month: u32, c: UsageCounts) -> UsageRecord {
        UsageRecord { project_id: p.to_string(), month, counts: c }
    }

    #[test]
    fn the_usage_response_has_the_seed_fields_the_counts_per_kind_and_project_and_the_history() {
        let (org, a, b) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let month = month_of_millis(NOW);
        let mut v =
            view(org, "free", a, b, vec![rec(a, month, counts(250_000_000, 1)), rec(b, month, counts(50_000_000, 2))]);
        v.trials = vec![OrgTrial { org_id: org, ends_at_ms: NOW + 3 * DAY_MS - 1000 }];
        let cache = MetaCache::from(v);
        let projects = org_projects(&cache, org);
        let past = vec![rec(a, previous_month(month), counts(7, 1)), rec(b, 202609, counts(9, 1))];
        let got = serde_json::to_value(usage(&cache, org, &projects, NOW, past).unwrap()).unwrap();
        let kinds = |c: UsageCounts, gb: f64| {
            json!({"used_gb": gb, "bytes": c.bytes, "spans": c.spans, "logs": c.logs,
                   "metric_samples": c.metric_samples, "events": c.events, "replay_events": c.replay_events})
        };
        let with = |mut a: serde_json::Value, b: serde_json::Value| {
            a.as_object_mut().unwrap().extend(b.as_object().unwrap().clone());
            a
        };
        let project = |id: ProjectId, name: &str, c: UsageCounts| {
            with(json!({"project_id": id, "name": name}), kinds(c, c.bytes as f64 / 1e9))
        };
        let zero = UsageCounts::default();
        let want = with(
            json!({
                "plan": "free",
                "in_trial": true,
                "trial_days_left": 3,
                "limit_gb": 1.0,
                "percentage": 30.0,
                "events_used": 12,
                "events_limit": 1_000_000,
                "period_start": "2026-11-01T00:00:00.000Z",
                "period_end": "2026-12-01T00:00:00.000Z",
                "projects": [project(b, "api", counts(50_000_000, 2)), project(a, "web", counts(250_000_000, 1))],
                "history": [
                    with(json!({"month": "2026-10", "period_start": "2026-10-01T00:00:00.000Z",
                                "period_end": "2026-11-01T00:00:00.000Z", "events_used": 4,
                                "projects": [project(b, "api", zero), project(a, "web", counts(7, 1))]}),
                         kinds(counts(7, 1), 7e-9)),
                    with(json!({"month": "2026-09", "period_start": "2026-09-01T00:00:00.000Z",
                                "period_end": "2026-10-01T00:00:00.000Z", "events_used": 4,
                                "projects": [project(b, "api", counts(9, 1)), project(a, "web", zero)]}),
                         kinds(counts(9, 1), 9e-9)),
                ],
            }),
            kinds(counts(300_000_000, 3), 0.3),
        );
        assert_eq!(got, want);
    }

    #[test]
    fn unlimited_plans_answer_null_limits_and_a_quota_overrides_the_plan() {
        let (org, a, b) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let cache = MetaCache::from(view(org, "enterprise", a, b, vec![]));
        let got = usage(&cache, org, &org_projects(&cache, org), NOW, vec![]).unwrap();
        assert_eq!((got.limit_gb, got.percentage, got.events_limit), (None, None, None));
        assert_eq!((got.in_trial, got.trial_days_left, got.used_gb), (false, 0, 0.0));

        let mut v = view(org, "pro", a, b, vec![rec(a, month_of_millis(NOW), counts(1_000_000_000, 1))]);
        v.quotas = vec![Quota {
            id: "q".into(),
            org_id: org,
            project_id: None,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: Some(4_000_000_000),
            monthly_events: None,
            hard: true,
        }];
        let cache = MetaCache::from(v);
        let got = usage(&cache, org, &org_projects(&cache, org), NOW, vec![]).unwrap();
        assert_eq!((got.limit_gb, got.percentage, got.events_limit), (Some(4.0), Some(25.0), Some(10_000_000)));
    }

    /// At 00:00 UTC on the 1st the current month starts from zero and the month that ended
    /// moves to the history, by the router's clock.
    #[test]
    fn at_midnight_utc_on_the_first_the_month_rolls_over() {
        let (org, a, b) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let clock = ManualClock::at_millis(month_start_millis(202612) - 1);
        let nov = rec(a, 202611, counts(100, 1));
        let cache = MetaCache::from(view(org, "pro", a, b, vec![nov.clone()]));
        let projects = org_projects(&cache, org);
        let before = usage(&cache, org, &projects, clock.clock().now_millis(), vec![nov.clone()]).unwrap();
        assert_eq!((before.counts.bytes, before.period_start.as_str()), (100, "2026-11-01T00:00:00.000Z"));
        assert!(before.history.is_empty());
        clock.advance(std::time::Duration::from_millis(1));
        let after = usage(&cache, org, &projects, clock.clock().now_millis(), vec![nov]).unwrap();
        assert_eq!((after.counts, after.period_start.as_str()), (UsageCounts::default(), "2026-12-01T00:00:00.000Z"));
        assert_eq!(after.period_end, "2027-01-01T00:00:00.000Z");
        assert_eq!(
            after.history.iter().map(|h| (h.month.as_str(), h.counts.bytes)).collect::<Vec<_>>(),
            [("2026-11", 100)]
        );
    }
}
