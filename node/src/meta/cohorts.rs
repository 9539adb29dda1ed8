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

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    #[test]
    fn cohorts_belong_to_a_project_of_the_org_and_are_bounded() {
        use sextant_model::cohort::{Cohort, CountOp, Definition, Kind, Logic};
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let cohort = |id: String, project_id| Cohort {
            id,
            project_id,
            name: "buyers".into(),
            definition: Definition {
                logic: Logic::And,
                conditions: vec![sextant_model::cohort::Condition {
                    kind: Kind::Did,
                    event: "buy".into(),
                    op: CountOp::Ge,
                    count: 1,
                    range: "7d".into(),
                    range_ns: 7,
                }],
            },
            created_at_ms: T0,
        };
        let create = |org, c| MetaCommand::CreateCohort { org_id: org, cohort: c };
        assert_eq!(s.execute(create(OrgId::random(), cohort("c0".into(), project))), Refused(Refusal::NotFound));
        assert_eq!(
            s.execute(create(owner.org_id, cohort("c0".into(), ProjectId::random()))),
            Refused(Refusal::NotFound)
        );
        for i in 0..MAX_COHORTS_PER_PROJECT {
            assert_eq!(s.execute(create(owner.org_id, cohort(format!("c{i:03}"), project))), Done);
        }
        assert_eq!(s.execute(create(owner.org_id, cohort("extra".into(), project))), Refused(Refusal::LimitReached));
        let listed: Vec<Cohort> = read(&s, &MetaQuery::Cohorts { project_id: project });
        assert_eq!(listed.len(), MAX_COHORTS_PER_PROJECT);
        assert_eq!(listed[0], cohort("c000".into(), project));
        let other: Vec<Cohort> = read(&s, &MetaQuery::Cohorts { project_id: ProjectId::random() });
        assert!(other.is_empty());
        // The command survives the log's encoding.
        let cmd = create(owner.org_id, cohort("c1".into(), project));
        assert_eq!(through_the_log(&cmd), cmd);
    }
}
