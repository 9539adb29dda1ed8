//! Cohort definitions (docs/API.md, "Cohorts"). Not part of the routers' view: read per
//! request, so a new cohort is usable at once on every router.

use std::collections::BTreeMap;

use sextant_model::cohort::{Cohort, MAX_COHORTS_PER_PROJECT};
use sextant_model::meta::{MetaCommandResult, Refusal};
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

/// Cohorts by id.
#[derive(Clone, Debug, Default)]
pub(super) struct Cohorts {
    pub(super) by_id: BTreeMap<String, Cohort>,
}

impl Cohorts {
    /// The cohorts of a project, oldest first.
    pub(super) fn of_project(&self, project_id: ProjectId) -> Vec<Cohort> {
        let mut list: Vec<&Cohort> = self.by_id.values().filter(|c| c.project_id == project_id).collect();
        list.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        list.into_iter().cloned().collect()
    }
}

impl MetaState {
    pub(super) fn create_cohort(&mut self, org_id: OrgId, cohort: Cohort) -> MetaCommandResult {
        if !self.tenancy.project_of_org(cohort.project_id, org_id) {
            return Refused(Refusal::NotFound);
        }
        let siblings = self.cohorts.by_id.values().filter(|c| c.project_id == cohort.project_id).count();
        if siblings >= MAX_COHORTS_PER_PROJECT {
            return Refused(Refusal::LimitReached);
        }
        // Ids are random 128-bit values; a retried command must not replace another.
        self.cohorts.by_id.entry(cohort.id.clone()).or_insert(cohort);
        Done
    }
}
