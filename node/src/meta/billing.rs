//! The plan catalog and per-org or per-project quota overrides: what the routers' rate
//! limiters and the storage nodes' data expiry read (docs/API.md, "Rate limits" and
//! "Data retention").

use std::collections::BTreeMap;

use sextant_model::meta::{MetaCommandResult, Plan, Quota, Refusal};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default)]
pub(super) struct Billing {
    /// Plans by name.
    pub(super) plans: BTreeMap<String, Plan>,
    /// Quotas by id.
    pub(super) quotas: BTreeMap<String, Quota>,
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
        if self.managed.quotas.contains_key(id) {
            return Refused(Refusal::Managed);
        }
        match self.billing.quotas.remove(id) {
            Some(_) => Done,
            None => Refused(Refusal::NotFound),
        }
    }
}
