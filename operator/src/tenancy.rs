//! Tenants, projects, plans, quotas and alert rules: what to push to the cluster's admin API
//! for a resource and what it observes. Pure; the controllers execute the actions.

use kube::{Resource, ResourceExt};

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::admin::{
    AlertRuleRequest, ManagedBy, PlanPrice, PlanRequest, PlanUsage, ProjectRequest, QuotaRequest, QuotaUsage,
    TenantRequest,
};
use crate::conditions::{self, Desired};
use crate::v1alpha1::{AlertRule, Plan, PlanUsageStatus, Project, Quota, QuotaUsageStatus, Tenant};

/// Finalizer of every resource whose cluster-side object must be removed first.
pub const FINALIZER: &str = "sextant.dev/cleanup";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenancyError {
    #[error("{kind} has no {field}")]
    Missing { kind: &'static str, field: &'static str },
}

/// A resource that another one refers to, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referent {
    /// Its key in the cluster: the Kubernetes UID.
    pub key: String,
    /// Whether it has been pushed to the cluster (its Ready condition).
    pub ready: bool,
}

impl Referent {
    pub fn of<K: Resource>(
        obj: &K,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) -> Option<Self> {
        Some(Self { key: obj.meta().uid.clone()?, ready: conditions::is_true(conditions, conditions::READY) })
    }
}

/// What the controller must do for a resource while it exists.
#[derive(Debug, Clone, PartialEq)]
pub enum Apply<R> {
    /// A referenced resource is missing or not ready: report it and look again later.
    Wait(Desired),
    /// Create or update the object in the cluster.
    Push(R),
}

/// What to do when the resource is being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// Something still depends on it: keep the finalizer.
    Wait(String),
    /// Delete the cluster-side object (and for projects, all their data).
    Delete { key: String },
}

fn uid<K: Resource>(obj: &K, kind: &'static str) -> Result<String, TenancyError> {
    obj.meta().uid.clone().ok_or(TenancyError::Missing { kind, field: "metadata.uid" })
}

pub fn managed_by<K: Resource<DynamicType = ()>>(obj: &K) -> Result<ManagedBy, TenancyError> {
    Ok(ManagedBy {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        namespace: obj.meta().namespace.clone(),
        name: obj.meta().name.clone().ok_or(TenancyError::Missing { kind: "object", field: "metadata.name" })?,
        uid: uid(obj, "object")?,
    })
}

fn waiting(reason: &str, message: String) -> Desired {
    Desired::new(conditions::READY, false, reason, message)
}

/// A tenant needs its plan to exist.
pub fn plan_tenant(tenant: &Tenant, plan_exists: bool) -> Result<Apply<TenantRequest>, TenancyError> {
    let spec = &tenant.spec;
    if !plan_exists {
        return Ok(Apply::Wait(waiting("PlanNotFound", format!("Plan `{}` does not exist", spec.plan))));
    }
    Ok(Apply::Push(TenantRequest {
        display_name: spec.display_name.clone(),
        plan: spec.plan.clone(),
        owner_email: spec.owner_email.clone(),
        suspended: spec.suspended,
        managed_by: managed_by(tenant)?,
    }))
}

/// Deleting a tenant waits for its projects: their data is deleted by their own finalizers.
pub fn cleanup_tenant(tenant: &Tenant, remaining_projects: &[String]) -> Result<Cleanup, TenancyError> {
    if !remaining_projects.is_empty() {
        return Ok(Cleanup::Wait(format!(
            "waiting for {} project(s) to be deleted: {}",
            remaining_projects.len(),
            remaining_projects.join(", ")
        )));
    }
    Ok(Cleanup::Delete { key: uid(tenant, "Tenant")? })
}

/// Name of the Secret holding a project's credentials.
pub fn credentials_secret_name(project: &Project) -> String {
    format!("{}-credentials", project.name_any())
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProjectPush {
    pub key: String,
    pub request: ProjectRequest,
    /// Issue credentials and write them into this Secret (only when it does not exist: issuing
    /// revokes the previous pair, so an existing Secret is never rotated by reconcile).
    pub write_secret: Option<String>,
}

pub fn plan_project(
    project: &Project,
    tenant: Option<&Referent>,
    secret_exists: bool,
) -> Result<Apply<ProjectPush>, TenancyError> {
    let Some(tenant) = tenant else {
        return Ok(Apply::Wait(waiting("TenantNotFound", format!("Tenant `{}` does not exist", project.spec.tenant))));
    };
    if !tenant.ready {
        return Ok(Apply::Wait(waiting("TenantNotReady", format!("Tenant `{}` is not ready", project.spec.tenant))));
    }
    Ok(Apply::Push(ProjectPush {
        key: uid(project, "Project")?,
        request: ProjectRequest {
            tenant_key: tenant.key.clone(),
            name: project.spec.name.clone(),
            managed_by: managed_by(project)?,
        },
        write_secret: (!secret_exists).then(|| credentials_secret_name(project)),
    }))
}

pub fn cleanup_keyed<K: Resource>(obj: &K, kind: &'static str) -> Result<Cleanup, TenancyError> {
    Ok(Cleanup::Delete { key: uid(obj, kind)? })
}

pub fn plan_plan(plan: &Plan) -> Result<PlanRequest, TenancyError> {
    let spec = &plan.spec;
    Ok(PlanRequest {
        display_name: spec.display_name.clone(),
        gb_per_month: spec.quotas.gb_per_month,
        events_per_month: spec.quotas.events_per_month,
        retention_days: spec.retention_days,
        features: spec.features.clone(),
        price: spec.price.as_ref().map(|p| PlanPrice {
            amount_cents: p.amount_cents,
            currency: p.currency.clone(),
            interval: p.interval,
        }),
        managed_by: managed_by(plan)?,
    })
}

/// A quota applies to one tenant or one project, which must already be in the cluster.
pub fn plan_quota(quota: &Quota, target: Option<&Referent>) -> Result<Apply<QuotaRequest>, TenancyError> {
    let spec = &quota.spec;
    let (kind, name) = match (&spec.tenant, &spec.project) {
        (Some(t), None) => ("Tenant", t),
        (None, Some(p)) => ("Project", p),
        _ => {
            return Ok(Apply::Wait(waiting(
                "InvalidTarget",
                "exactly one of spec.tenant and spec.project must be set".into(),
            )))
        }
    };
    let Some(target) = target.filter(|t| t.ready) else {
        return Ok(Apply::Wait(waiting("TargetNotReady", format!("{kind} `{name}` does not exist or is not ready"))));
    };
    let (tenant_key, project_key) =
        if kind == "Tenant" { (Some(target.key.clone()), None) } else { (None, Some(target.key.clone())) };
    Ok(Apply::Push(QuotaRequest {
        tenant_key,
        project_key,
        gb_per_month: spec.gb_per_month,
        bytes_per_month: spec.bytes_per_month,
        events_per_month: spec.events_per_month,
        ingest_requests_per_second: spec.ingest_requests_per_second,
        enforcement: spec.enforcement,
        managed_by: managed_by(quota)?,
    }))
}

/// How often the usage in Quota and Plan status is read from the clusters.
pub const USAGE_REFRESH: Duration = Duration::from_secs(60);

/// Whether usage read at `observed_at` is due to be read again at `now` (also when the clock
/// went back).
pub fn usage_due(observed_at: Option<&Time>, now: Timestamp) -> bool {
    observed_at.is_none_or(|t| !(0..USAGE_REFRESH.as_secs() as i64).contains(&(now.as_second() - t.0.as_second())))
}

/// Whole percent of `limit` used (a zero limit is full).
fn percent(used: u64, limit: u64) -> u64 {
    if limit == 0 {
        100
    } else {
        (u128::from(used) * 100 / u128::from(limit)) as u64
    }
}

pub fn quota_usage_status(u: &QuotaUsage, now: Timestamp) -> QuotaUsageStatus {
    let percentage = [(u.used_bytes, u.limit_bytes), (u.used_events, u.limit_events)]
        .into_iter()
        .filter_map(|(used, limit)| limit.map(|l| percent(used, l)))
        .max();
    QuotaUsageStatus {
        period: u.period.clone(),
        used_bytes: u.used_bytes,
        limit_bytes: u.limit_bytes,
        used_events: u.used_events,
        limit_events: u.limit_events,
        percentage,
        observed_at: Time(now),
    }
}

/// The answers of every cluster the plan is pushed to, summed; `None` without any.
pub fn plan_usage_status(answers: &[PlanUsage], now: Timestamp) -> Option<PlanUsageStatus> {
    let period = answers.iter().map(|u| &u.period).max()?.clone();
    let mut status = PlanUsageStatus {
        period,
        organizations: 0,
        organizations_at_limit: 0,
        used_bytes: 0,
        used_events: 0,
        observed_at: Time(now),
    };
    for u in answers {
        status.organizations += u.organizations;
        status.organizations_at_limit += u.organizations_at_limit;
        status.used_bytes = status.used_bytes.saturating_add(u.used_bytes);
        status.used_events = status.used_events.saturating_add(u.used_events);
    }
    Some(status)
}

pub fn plan_alert_rule(rule: &AlertRule, project: Option<&Referent>) -> Result<Apply<AlertRuleRequest>, TenancyError> {
    let spec = &rule.spec;
    let Some(project) = project.filter(|p| p.ready) else {
        return Ok(Apply::Wait(waiting(
            "ProjectNotReady",
            format!("Project `{}` does not exist or is not ready", spec.project),
        )));
    };
    Ok(Apply::Push(AlertRuleRequest {
        project_key: project.key.clone(),
        name: spec.name.clone().unwrap_or_else(|| rule.name_any()),
        metric: spec.metric,
        filter: spec.filter.clone(),
        comparison: spec.comparison,
        threshold: spec.threshold,
        window_minutes: spec.window_minutes,
        enabled: spec.enabled,
        managed_by: managed_by(rule)?,
        for_seconds: spec.for_seconds,
        webhook_id: spec.notify.as_ref().map(|n| n.webhook_id.clone()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha1::{AlertRuleSpec, ProjectSpec, QuotaSpec, TenantSpec};
    use serde_json::json;

    fn with_meta<K: Resource>(mut obj: K, uid: &str) -> K {
        obj.meta_mut().namespace = Some("acme".into());
        obj.meta_mut().uid = Some(uid.into());
        obj
    }

    fn tenant() -> Tenant {
        let spec: TenantSpec =
            serde_json::from_value(json!({"displayName": "Acme", "plan": "pro", "ownerEmail": "ops@acme.test"}))
                .unwrap();
        with_meta(Tenant::new("acme", spec), "tenant-uid")
    }

    fn project() -> Project {
        with_meta(Project::new("shop", ProjectSpec { tenant: "acme".into(), name: "Shop".into() }), "project-uid")
    }

    #[test]
    fn tenant_waits_for_its_plan_then_pushes_managed_by() {
        assert!(matches!(plan_tenant(&tenant(), false).unwrap(), Apply::Wait(d) if d.reason == "PlanNotFound"));
        let Apply::Push(req) = plan_tenant(&tenant(), true).unwrap() else { panic!() };
        assert_eq!(req.plan, "pro");
        assert_eq!(req.managed_by.kind, "Tenant");
        assert_eq!(req.managed_by.api_version, "sextant.dev/v1alpha1");
        assert_eq!(req.managed_by.uid, "tenant-uid");
    }

    #[test]
    fn tenant_deletion_waits_for_projects() {
        let c = cleanup_tenant(&tenant(), &["shop".into()]).unwrap();
        assert!(matches!(c, Cleanup::Wait(m) if m.contains("shop")));
        assert_eq!(cleanup_tenant(&tenant(), &[]).unwrap(), Cleanup::Delete { key: "tenant-uid".into() });
    }

    #[test]
    fn project_waits_for_a_ready_tenant() {
        assert!(
            matches!(plan_project(&project(), None, false).unwrap(), Apply::Wait(d) if d.reason == "TenantNotFound")
        );
        let not_ready = Referent { key: "tenant-uid".into(), ready: false };
        assert!(
            matches!(plan_project(&project(), Some(&not_ready), false).unwrap(), Apply::Wait(d) if d.reason == "TenantNotReady")
        );
    }

    #[test]
    fn project_credentials_are_issued_only_when_the_secret_is_missing() {
        let t = Referent { key: "tenant-uid".into(), ready: true };
        let Apply::Push(p) = plan_project(&project(), Some(&t), false).unwrap() else { panic!() };
        assert_eq!(p.key, "project-uid");
        assert_eq!(p.request.tenant_key, "tenant-uid");
        assert_eq!(p.write_secret.as_deref(), Some("shop-credentials"));
        let Apply::Push(p) = plan_project(&project(), Some(&t), true).unwrap() else { panic!() };
        assert_eq!(p.write_secret, None);
    }

    #[test]
    fn quota_targets_exactly_one_ready_object() {
        let spec: QuotaSpec =
            serde_json::from_value(json!({"project": "shop", "gbPerMonth": 5, "enforcement": "Soft"})).unwrap();
        let q = with_meta(Quota::new("shop-quota", spec), "quota-uid");
        assert!(matches!(plan_quota(&q, None).unwrap(), Apply::Wait(_)));
        let p = Referent { key: "project-uid".into(), ready: true };
        let Apply::Push(req) = plan_quota(&q, Some(&p)).unwrap() else { panic!() };
        assert_eq!(
            (req.tenant_key, req.project_key.as_deref(), req.gb_per_month),
            (None, Some("project-uid"), Some(5))
        );

        let both: QuotaSpec = serde_json::from_value(json!({"project": "shop", "tenant": "acme"})).unwrap();
        let q = with_meta(Quota::new("bad", both), "q2");
        assert!(matches!(plan_quota(&q, Some(&p)).unwrap(), Apply::Wait(d) if d.reason == "InvalidTarget"));
    }

    #[test]
    fn a_quota_in_bytes_is_pushed_to_the_byte() {
        let spec: QuotaSpec =
            serde_json::from_value(json!({"tenant": "acme", "bytesPerMonth": 1_500_000, "enforcement": "Hard"}))
                .unwrap();
        let q = with_meta(Quota::new("acme-quota", spec), "quota-uid");
        let t = Referent { key: "tenant-uid".into(), ready: true };
        let Apply::Push(req) = plan_quota(&q, Some(&t)).unwrap() else { panic!() };
        assert_eq!(
            (req.bytes_per_month, req.gb_per_month, req.tenant_key.as_deref()),
            (Some(1_500_000), None, Some("tenant-uid"))
        );
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn usage_is_read_again_a_minute_after_the_last_read() {
        let read = Time(at(1_795_000_000));
        assert!(usage_due(None, at(1_795_000_000)), "never read");
        assert!(!usage_due(Some(&read), at(1_795_000_059)));
        assert!(usage_due(Some(&read), at(1_795_000_060)));
        assert!(usage_due(Some(&read), at(1_794_999_000)), "the clock went back");
    }

    #[test]
    fn quota_usage_shows_the_most_used_of_its_own_limits_in_whole_percent() {
        let u = QuotaUsage {
            period: "2026-11".into(),
            period_start: "2026-11-01T00:00:00.000Z".into(),
            period_end: "2026-12-01T00:00:00.000Z".into(),
            used_bytes: 1_999,
            limit_bytes: Some(2_000),
            used_events: 10,
            limit_events: Some(1_000),
        };
        let s = quota_usage_status(&u, at(1_795_000_000));
        assert_eq!(
            (s.period.as_str(), s.used_bytes, s.limit_bytes, s.percentage),
            ("2026-11", 1_999, Some(2_000), Some(99))
        );
        assert_eq!(s.observed_at, Time(at(1_795_000_000)));
        let over = QuotaUsage { used_events: 3_000, ..u.clone() };
        assert_eq!(quota_usage_status(&over, at(0)).percentage, Some(300), "over the limit: past 100");
        let none = QuotaUsage { limit_bytes: None, limit_events: None, ..u.clone() };
        assert_eq!(quota_usage_status(&none, at(0)).percentage, None, "no limit of its own");
        let zero = QuotaUsage { limit_bytes: Some(0), used_bytes: 0, limit_events: None, ..u };
        assert_eq!(quota_usage_status(&zero, at(0)).percentage, Some(100), "a zero limit is full");
    }

    #[test]
    fn plan_usage_sums_the_clusters() {
        let u = |orgs, at_limit, bytes| PlanUsage {
            period: "2026-11".into(),
            period_start: String::new(),
            period_end: String::new(),
            organizations: orgs,
            organizations_at_limit: at_limit,
            used_bytes: bytes,
            used_events: 1,
            limit_bytes: Some(10),
            limit_events: None,
        };
        let s = plan_usage_status(&[u(3, 1, 100), u(2, 0, 5)], at(7)).unwrap();
        assert_eq!((s.organizations, s.organizations_at_limit, s.used_bytes, s.used_events), (5, 1, 105, 2));
        assert_eq!(plan_usage_status(&[], at(7)), None);
    }

    #[test]
    fn alert_rule_name_defaults_to_the_resource_name() {
        let spec: AlertRuleSpec = serde_json::from_value(json!({
            "project": "shop", "metric": "error_rate", "comparison": ">", "threshold": 0.05, "windowMinutes": 5
        }))
        .unwrap();
        let r = with_meta(AlertRule::new("checkout-errors", spec), "rule-uid");
        let p = Referent { key: "project-uid".into(), ready: true };
        let Apply::Push(req) = plan_alert_rule(&r, Some(&p)).unwrap() else { panic!() };
        assert_eq!(req.name, "checkout-errors");
        assert!(req.enabled);
        assert_eq!(req.project_key, "project-uid");
    }
}
