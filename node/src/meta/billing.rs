//! The plan catalog and per-org or per-project quota overrides: what the routers' rate
//! limiters and the storage nodes' data expiry read (docs/API.md, "Rate limits" and
//! "Data retention").

use std::collections::BTreeMap;

use sextant_model::meta::{MetaCommandResult, Plan, Quota, Refusal};
use sextant_model::subscription::BillingAccount;
use sextant_model::OrgId;

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Billing {
    /// Plans by name.
    pub(super) plans: BTreeMap<String, Plan>,
    /// Quotas by id.
    pub(super) quotas: BTreeMap<String, Quota>,
    /// Subscriptions, cards and payments of the orgs that ever checked out
    /// (`subscriptions`).
    pub(super) accounts: BTreeMap<OrgId, BillingAccount>,
}

impl Billing {
    /// Adds the plans not in the catalog yet; never overwrites.
    pub(super) fn seed(&mut self, plans: Vec<Plan>) {
        for plan in plans {
            self.plans.entry(plan.name.clone()).or_insert(plan);
        }
    }

    pub(super) fn put_plan(&mut self, plan: Plan) {
        self.plans.insert(plan.name.clone(), plan);
    }
}

impl MetaState {
    pub(super) fn put_quota(&mut self, quota: Quota) -> MetaCommandResult {
        let project_ok = quota.project_id.is_none_or(|p| self.tenancy.project_of_org(p, quota.org_id));
        if !self.tenancy.orgs.contains_key(&quota.org_id) || !project_ok {
            return Refused(Refusal::NotFound);
        }
        self.billing.quotas.insert(quota.id.clone(), quota);
        Done
    }

    /// Quotas set by a Quota resource are removed with it, not here.
    pub(super) fn delete_quota(&mut self, id: &str) -> MetaCommandResult {
        if self.billing.quotas.get(id).is_some_and(|q| q.managed_by.is_some()) {
            return Refused(Refusal::Managed);
        }
        match self.billing.quotas.remove(id) {
            Some(_) => Done,
            None => Refused(Refusal::NotFound),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    #[test]
    fn plans_are_seeded_once_and_quotas_belong_to_an_org() {
        let (mut s, owner) = state_with_user();
        let mut plans = sextant_model::meta::default_plans();
        s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
        plans[0].rate_limits.ingest_rps = Some(7);
        s.execute(MetaCommand::SeedPlans { plans: plans.clone() });
        assert_eq!(s.billing.plans["free"].rate_limits.ingest_rps, None, "seeding never overwrites");
        assert_eq!(s.execute(MetaCommand::PutPlan { plan: plans[0].clone() }), Done);
        assert_eq!(s.billing.plans["free"].rate_limits.ingest_rps, Some(7));

        let quota = |org, project| Quota {
            id: "q1".into(),
            org_id: org,
            project_id: project,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: None,
            monthly_events: None,
            hard: false,
        };
        assert_eq!(
            s.execute(MetaCommand::PutQuota { quota: quota(OrgId::random(), None) }),
            Refused(Refusal::NotFound)
        );
        let foreign_project = Some(ProjectId::random());
        assert_eq!(
            s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, foreign_project) }),
            Refused(Refusal::NotFound)
        );
        let own_project = Some(s.tenancy.orgs[&owner.org_id].default_project);
        assert_eq!(s.execute(MetaCommand::PutQuota { quota: quota(owner.org_id, own_project) }), Done);
        let view: MetaView = read(&s, &MetaQuery::View);
        assert_eq!(view.quotas.len(), 1);
        assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Done);
        assert_eq!(s.execute(MetaCommand::DeleteQuota { id: "q1".into() }), Refused(Refusal::NotFound));
    }
}
