//! Admin API: usage against the limits of a Quota or a Plan resource in the current calendar
//! month (UTC), from the router's cached roll-up (docs/API.md, "Usage"); the operator writes it
//! into the resources' status.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use sextant_model::admin::{PlanUsage, QuotaUsage};
use sextant_model::meta::{Plan, Quota};
use sextant_model::usage::{month_of_millis, month_start_millis, next_month, UsageCounts};

use super::tenancy::key;
use super::Admin;
use crate::cluster::MetaCache;
use crate::http::error::ApiError;
use crate::identity::account::time_json;
use crate::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/quotas/{key}/usage", get(quota)).route("/plans/{name}/usage", get(plan))
}

async fn quota(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<QuotaUsage>, ApiError> {
    let key = key(&raw)?;
    let cache = app.meta()?;
    let q = cache.managed_quota(&key).ok_or(ApiError::NotFound("no such quota".into()))?;
    Ok(Json(quota_usage(&cache, q, app.clock.now_millis())))
}

async fn plan(
    _: Admin,
    State(app): State<Arc<AppState>>,
    Path(raw): Path<String>,
) -> Result<Json<PlanUsage>, ApiError> {
    let name = key(&raw)?;
    let cache = app.meta()?;
    let plan = cache.plans.get(&name).ok_or(ApiError::NotFound("no such plan".into()))?;
    Ok(Json(plan_usage(&cache, plan, app.clock.now_millis())))
}

/// (`YYYY-MM`, start, end) of the month holding `now`.
fn period(month: u32) -> (String, String, String) {
    (
        format!("{:04}-{:02}", month / 100, month % 100),
        time_json(month_start_millis(month)),
        time_json(month_start_millis(next_month(month))),
    )
}

/// What `q` is measured against at `now`: its project's usage, or its organization's.
pub fn quota_usage(cache: &MetaCache, q: &Quota, now: i64) -> QuotaUsage {
    let month = month_of_millis(now);
    let used = match q.project_id {
        Some(p) => cache.usage.get(&(p, month)),
        None => cache.org_usage.get(&(q.org_id, month)),
    }
    .copied()
    .unwrap_or_default();
    let (period, period_start, period_end) = period(month);
    QuotaUsage {
        period,
        period_start,
        period_end,
        used_bytes: used.bytes,
        limit_bytes: q.monthly_bytes,
        used_events: used.events,
        limit_events: q.monthly_events,
    }
}

/// The organizations on `plan` at `now` (the plan in force: subscription, trial, or the org's
/// own) and their usage against the plan's own limits.
pub fn plan_usage(cache: &MetaCache, plan: &Plan, now: i64) -> PlanUsage {
    let month = month_of_millis(now);
    let (mut organizations, mut at_limit, mut total) = (0, 0, UsageCounts::default());
    for org in cache.orgs.values().filter(|o| cache.plan_name(&o.id, now) == Some(plan.name.as_str())) {
        let used = cache.org_usage.get(&(org.id, month)).copied().unwrap_or_default();
        organizations += 1;
        let reached = |limit: Option<u64>, used: u64| limit.is_some_and(|l| used >= l);
        if reached(plan.monthly_bytes, used.bytes) || reached(plan.monthly_events, used.events) {
            at_limit += 1;
        }
        total.add(&used);
    }
    let (period, period_start, period_end) = period(month);
    PlanUsage {
        period,
        period_start,
        period_end,
        organizations,
        organizations_at_limit: at_limit,
        used_bytes: total.bytes,
        used_events: total.events,
        limit_bytes: plan.monthly_bytes,
        limit_events: plan.monthly_events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::{default_plans, MetaView, Org, Project};
    use sextant_model::usage::UsageRecord;
    use sextant_model::{OrgId, ProjectId};

    /// 2026-11-20T12:00:00Z.
    const NOW: i64 = 1_795_176_000_000;

    fn org(id: OrgId, plan: &str, project: ProjectId) -> Org {
        Org {
            id,
            name: "acme".into(),
            plan: plan.into(),
            default_project: project,
            created_at_ms: 0,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        }
    }

    fn project(id: ProjectId, org_id: OrgId) -> Project {
        Project { id, org_id, name: "web".into(), created_at_ms: 0, managed_by: None, key: None }
    }

    fn rec(p: ProjectId, month: u32, bytes: u64, events: u64) -> UsageRecord {
        UsageRecord { project_id: p.to_string(), month, counts: UsageCounts { bytes, events, ..Default::default() } }
    }

    /// Two free orgs (one with two projects, one over the free gigabyte) and a pro one.
    fn cache() -> (MetaCache, OrgId, ProjectId, ProjectId) {
        let (a, b, c) = (OrgId::random(), OrgId::random(), OrgId::random());
        let (a1, a2, b1, c1) = (ProjectId::random(), ProjectId::random(), ProjectId::random(), ProjectId::random());
        let view = MetaView {
            orgs: vec![org(a, "free", a1), org(b, "free", b1), org(c, "pro", c1)],
            projects: vec![project(a1, a), project(a2, a), project(b1, b), project(c1, c)],
            plans: default_plans(),
            usage: vec![
                rec(a1, 202611, 100, 1),
                rec(a2, 202611, 20, 2),
                rec(a1, 202610, 999_999, 0), // last month
                rec(b1, 202611, 1_000_000_000, 0),
                rec(c1, 202611, 5, 5),
            ],
            ..Default::default()
        };
        (MetaCache::from(view), a, a1, a2)
    }

    fn quota(org_id: OrgId, project_id: Option<ProjectId>) -> Quota {
        Quota {
            id: "q".into(),
            org_id,
            project_id,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: Some(1000),
            monthly_events: None,
            hard: true,
        }
    }

    #[test]
    fn a_quota_reports_this_months_usage_of_its_project_or_its_whole_organization() {
        let (cache, a, a1, _) = cache();
        let of_org = quota_usage(&cache, &quota(a, None), NOW);
        assert_eq!(
            of_org,
            QuotaUsage {
                period: "2026-11".into(),
                period_start: "2026-11-01T00:00:00.000Z".into(),
                period_end: "2026-12-01T00:00:00.000Z".into(),
                used_bytes: 120,
                limit_bytes: Some(1000),
                used_events: 3,
                limit_events: None,
            }
        );
        let of_project = quota_usage(&cache, &quota(a, Some(a1)), NOW);
        assert_eq!((of_project.used_bytes, of_project.used_events), (100, 1));
        let december = quota_usage(&cache, &quota(a, None), month_start_millis(202612));
        assert_eq!((december.period.as_str(), december.used_bytes), ("2026-12", 0), "a new month starts at zero");
    }

    #[test]
    fn a_plan_reports_its_organizations_and_those_at_its_limit() {
        let (cache, ..) = cache();
        let free = plan_usage(&cache, &cache.plans["free"], NOW);
        assert_eq!((free.organizations, free.organizations_at_limit), (2, 1));
        assert_eq!((free.used_bytes, free.used_events), (1_000_000_120, 3));
        assert_eq!(free.limit_bytes, Some(1_000_000_000));
        let business = plan_usage(&cache, &cache.plans["business"], NOW);
        assert_eq!((business.organizations, business.used_bytes), (0, 0));
    }
}
