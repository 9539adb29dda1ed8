//! Metering roll-up (docs/API.md, "Usage"): each data group's leader reports the group's
//! cumulative counters per project and month every few seconds; meta keeps the latest report
//! of each group and sums over groups. A report carries the Raft index its counters are at, so
//! a repeated, delayed or reordered report never counts twice or goes back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sextant_model::meta::MetaCommandResult;
use sextant_model::usage::{ReportedIndex, UsageCounts, UsageRecord};

/// One data group's counters as last reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct GroupUsage {
    /// The group's log index the counters are at.
    applied_index: u64,
    /// Project -> month `YYYYMM` -> cumulative counts.
    projects: BTreeMap<String, BTreeMap<u32, UsageCounts>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Metering {
    groups: BTreeMap<u64, GroupUsage>,
}

impl Metering {
    /// A group's report: kept unless meta holds one at a later index. Months the report does
    /// not name keep their last value (a shard drops months older than the previous one).
    pub(super) fn report(&mut self, group: u64, applied_index: u64, usage: Vec<UsageRecord>) -> MetaCommandResult {
        let g = self.groups.entry(group).or_default();
        if applied_index < g.applied_index {
            return MetaCommandResult::Done;
        }
        g.applied_index = applied_index;
        for r in usage {
            g.projects.entry(r.project_id).or_default().insert(r.month, r.counts);
        }
        MetaCommandResult::Done
    }

    /// Per project and month, summed over groups; only `projects` if given.
    pub(super) fn records(&self, projects: Option<&[String]>) -> Vec<UsageRecord> {
        let mut sum: BTreeMap<(&str, u32), UsageCounts> = BTreeMap::new();
        for g in self.groups.values() {
            for (p, months) in &g.projects {
                if projects.is_some_and(|ps| !ps.contains(p)) {
                    continue;
                }
                for (m, c) in months {
                    sum.entry((p, *m)).or_default().add(c);
                }
            }
        }
        sum.into_iter().map(|((p, m), counts)| UsageRecord { project_id: p.to_owned(), month: m, counts }).collect()
    }

    /// The log index each group's counters are at.
    pub(super) fn indexes(&self) -> Vec<ReportedIndex> {
        self.groups.iter().map(|(g, u)| ReportedIndex { group: *g, applied_index: u.applied_index }).collect()
    }

    /// The two newest months any group reported, for every project: what routers cache.
    pub(super) fn recent(&self) -> Vec<UsageRecord> {
        let newest = self.groups.values().flat_map(|g| g.projects.values().flat_map(|m| m.keys())).max().copied();
        let Some(newest) = newest else { return Vec::new() };
        let from = sextant_model::usage::previous_month(newest);
        let mut all = self.records(None);
        all.retain(|r| r.month >= from);
        all
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;
    use sextant_model::meta::MetaQuery;
    use sextant_model::usage::{ReportedIndex, UsageCounts, UsageRecord};

    fn rec(project: &str, month: u32, bytes: u64, spans: u64) -> UsageRecord {
        UsageRecord { project_id: project.into(), month, counts: UsageCounts { bytes, spans, ..Default::default() } }
    }

    fn report(group: u64, applied_index: u64, usage: Vec<UsageRecord>) -> MetaCommand {
        MetaCommand::ReportUsage { group, applied_index, usage }
    }

    fn usage(s: &crate::meta::MetaState, projects: &[&str]) -> Vec<UsageRecord> {
        read(s, &MetaQuery::Usage { project_ids: projects.iter().map(|p| p.to_string()).collect() })
    }

    #[test]
    fn repeated_and_reordered_reports_never_count_twice_and_groups_add_up() {
        let (mut s, _) = state_with_user();
        s.execute(report(1, 10, vec![rec("p", 202611, 100, 1)]));
        s.execute(report(1, 10, vec![rec("p", 202611, 100, 1)]));
        s.execute(report(2, 7, vec![rec("p", 202611, 40, 4), rec("q", 202611, 5, 5)]));
        assert_eq!(usage(&s, &["p"]), [rec("p", 202611, 140, 5)]);
        // A later report replaces, an earlier one that arrives after it is ignored.
        s.execute(report(1, 20, vec![rec("p", 202611, 300, 3)]));
        s.execute(report(1, 15, vec![rec("p", 202611, 200, 2)]));
        assert_eq!(usage(&s, &["p"]), [rec("p", 202611, 340, 7)]);
        // An abort can lower a group's counters: the later index wins, even when smaller.
        s.execute(report(1, 21, vec![rec("p", 202611, 250, 2)]));
        assert_eq!(usage(&s, &["p", "q"]), [rec("p", 202611, 290, 6), rec("q", 202611, 5, 5)]);
        // Routers learn how far each group's counters go.
        let at = |group, applied_index| ReportedIndex { group, applied_index };
        assert_eq!(s.view().usage_indexes, [at(1, 21), at(2, 7)]);
    }

    #[test]
    fn past_months_stay_as_last_reported_and_the_view_holds_the_two_newest() {
        let (mut s, _) = state_with_user();
        s.execute(report(1, 1, vec![rec("p", 202609, 9, 0), rec("p", 202610, 10, 0)]));
        s.execute(report(1, 2, vec![rec("p", 202611, 11, 0), rec("p", 202612, 12, 0)]));
        let months = |r: Vec<UsageRecord>| r.into_iter().map(|r| (r.month, r.counts.bytes)).collect::<Vec<_>>();
        assert_eq!(months(usage(&s, &["p"])), [(202609, 9), (202610, 10), (202611, 11), (202612, 12)]);
        assert_eq!(months(s.view().usage), [(202611, 11), (202612, 12)]);
        // Survives the meta snapshot.
        let copy: crate::meta::MetaState = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(months(usage(&copy, &["p"])), [(202609, 9), (202610, 10), (202611, 11), (202612, 12)]);
    }
}
