//! Keeps every hosted shard's expiry policy (data TTL) in line with meta: a project keeps its
//! data for its org's plan's `retention_days` (docs/API.md "Data retention"), and a deleted
//! project keeps nothing; the compactor does the dropping (and the flusher writes out
//! buffers holding deleted projects' rows, so those go too).
//!
//! The view is read through the meta leader (a linearizable read), never from a possibly
//! stale local replica: a lagging view could apply a shorter, outdated expiry and delete
//! data a plan upgrade meant to keep. Anything unknown (project, org, plan) keeps its data.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sextant_model::meta::{MetaQuery, MetaView};
use sextant_model::subscription::effective_plan;

use crate::host::NodeHost;
use crate::meta_client;
use crate::segment::compaction::ExpiryPolicy;

/// Also how long a deleted project's data can outlive its deletion, plus one compaction pass.
const EVERY: Duration = Duration::from_secs(10);
const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// The policy `view` implies at `now_ns`.
pub fn policy(view: &MetaView, now_ns: i64) -> ExpiryPolicy {
    let days: HashMap<&str, u32> =
        view.plans.iter().filter_map(|p| Some((p.name.as_str(), p.retention_days?))).collect();
    // The plan in force: a paid subscription's, or free once a trial or subscription ended.
    let trials: HashMap<_, i64> = view.trials.iter().map(|t| (t.org_id, t.ends_at_ms)).collect();
    let accounts: HashMap<_, _> = view.billing.iter().map(|a| (a.org_id, a)).collect();
    let now_ms = now_ns.div_euclid(1_000_000);
    let org_days: HashMap<_, u32> = view
        .orgs
        .iter()
        .filter_map(|o| {
            let plan = effective_plan(o, trials.get(&o.id).copied(), accounts.get(&o.id).copied(), now_ms);
            Some((o.id, *days.get(plan)?))
        })
        .collect();
    let cutoffs = view
        .projects
        .iter()
        .filter_map(|p| {
            let d = *org_days.get(&p.org_id)?;
            Some((p.id.to_string(), now_ns.saturating_sub(i64::from(d) * DAY_NS)))
        })
        .collect();
    let deleted = view.deleted_projects.iter().map(|p| p.to_string()).collect();
    ExpiryPolicy { cutoffs, deleted }
}

pub fn spawn(host: Arc<NodeHost>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = crate::host::periodic(EVERY);
        loop {
            tick.tick().await;
            if host.shards().is_empty() {
                continue;
            }
            let view: MetaView = match meta_client::read(&host, &MetaQuery::View).await {
                Ok(view) => view,
                Err(e) => {
                    tracing::debug!(error = %e, "meta unreachable; expiry unchanged");
                    continue;
                }
            };
            let p = policy(&view, host.config.clock.now_nanos());
            for (_, shard) in host.shards() {
                shard.state.write().unwrap().state.set_expiry(p.clone());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::meta::{default_plans, Org, Project};
    use sextant_model::{OrgId, ProjectId};

    fn org(plan: &str) -> Org {
        Org {
            id: OrgId::random(),
            name: "o".into(),
            plan: plan.into(),
            default_project: ProjectId::random(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        }
    }

    fn project(o: &Org) -> Project {
        Project {
            id: ProjectId::random(),
            org_id: o.id,
            name: "p".into(),
            created_at_ms: 0,
            managed_by: None,
            key: None,
        }
    }

    #[test]
    fn each_project_keeps_what_its_org_plan_says_and_unknowns_keep_everything() {
        let (free, enterprise, odd) = (org("free"), org("enterprise"), org("no-such-plan"));
        let (a, b, c) = (project(&free), project(&enterprise), project(&odd));
        let view = MetaView {
            orgs: vec![free, enterprise, odd],
            projects: vec![a.clone(), b.clone(), c.clone()],
            plans: default_plans(),
            ..Default::default()
        };
        let now = 100 * DAY_NS;
        let p = policy(&view, now);
        assert_eq!(p.cutoffs.get(&a.id.to_string()), Some(&(now - 7 * DAY_NS)));
        assert!(!p.cutoffs.contains_key(&b.id.to_string()), "enterprise keeps everything");
        assert!(!p.cutoffs.contains_key(&c.id.to_string()), "unknown plan keeps everything");
        assert!(p.deleted.is_empty());
    }

    #[test]
    fn retention_follows_the_plan_in_force_not_the_orgs_base_plan() {
        use sextant_model::meta::OrgTrial;
        use sextant_model::subscription::{BillingAccount, Subscription, SubscriptionStatus};
        let now = 100 * DAY_NS;
        let now_ms = now / 1_000_000;
        let (paying, trial_over) = (org("free"), org("pro"));
        let (a, b) = (project(&paying), project(&trial_over));
        let mut account = BillingAccount::new(paying.id);
        account.subscription = Some(Subscription {
            id: "sub_1".into(),
            plan: "growth".into(),
            status: SubscriptionStatus::Active,
            auto_renew: true,
            current_period_start_ms: now_ms - 86_400_000,
            current_period_end_ms: now_ms + 86_400_000,
            grace_until_ms: None,
            ended_at_ms: None,
            provider_updated_ms: 0,
        });
        let view = MetaView {
            trials: vec![OrgTrial { org_id: trial_over.id, ends_at_ms: now_ms - 1 }],
            orgs: vec![paying, trial_over],
            projects: vec![a.clone(), b.clone()],
            plans: default_plans(),
            billing: vec![account],
            ..Default::default()
        };
        let p = policy(&view, now);
        assert_eq!(p.cutoffs.get(&a.id.to_string()), Some(&(now - 90 * DAY_NS)), "growth, paid");
        assert_eq!(p.cutoffs.get(&b.id.to_string()), Some(&(now - 7 * DAY_NS)), "free once the trial ended");
    }

    #[test]
    fn deleted_projects_keep_nothing() {
        let gone = ProjectId::random();
        let view = MetaView { deleted_projects: vec![gone], plans: default_plans(), ..Default::default() };
        let p = policy(&view, 100 * DAY_NS);
        assert!(p.expired(&gone.to_string(), i64::MAX), "a deleted project's rows expire whatever their time");
        assert!(!p.expired(&ProjectId::random().to_string(), 0));
    }
}
