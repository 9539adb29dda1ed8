//! Cohort membership on one shard (docs/API.md "Cohorts", `model::cohort`). A user's events
//! all live on this shard, so counting them here decides the user's membership exactly; the
//! router adds the shards' sizes and merges their member lists. Also the filter of
//! timeseries, active users and funnels by cohort ([`Members`]): the members are computed
//! first, then the plan's own scan keeps only their rows.

use std::collections::HashSet;

use rustc_hash::FxHashMap;
use sextant_model::cohort::Definition;
use sextant_model::query::{CohortFilter, CohortMembers, CohortSizes, CohortSizesPlan, CohortUsersPlan, ShardQuery};

use super::users::Users;
use super::{bytes_of, each_batch_holding, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table, EVENT_DICTIONARIES};
use crate::shard::ScanJob;

impl QueryKind for CohortSizesPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let cohorts = Cohorts::new(self.cohorts.clone(), self.at_unix_nanos)?;
        let job = shard.scan(cohorts.scan(&req.project_id));
        Ok(Box::new(move |_, budget| Ok(sizes(&cohorts, job, budget)?.into())))
    }
}

impl QueryKind for CohortUsersPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        check_users(self)?;
        let cohorts = Cohorts::of_filter(&self.cohort)?;
        let job = shard.scan(cohorts.scan(&req.project_id));
        let plan = self.clone();
        Ok(Box::new(move |_, budget| Ok(users(&plan, &cohorts, job, budget)?.into())))
    }
}

/// The members of the cohort a plan is restricted to, if any: computed before the plan reads
/// its own rows, which then keep only the members'.
pub struct Members(Option<(Cohorts, ScanJob)>);

impl Members {
    /// The cohort of a plan's filter, checked.
    pub fn of(filter: Option<&CohortFilter>) -> Result<Option<Cohorts>, QueryError> {
        filter.map(Cohorts::of_filter).transpose()
    }

    /// Starts the scan deciding membership (under the shard's state lock).
    pub fn start(cohort: Option<Cohorts>, req: &ShardQuery, shard: &dyn Scans) -> Self {
        Self(cohort.map(|c| {
            let job = shard.scan(c.scan(&req.project_id));
            (c, job)
        }))
    }

    pub fn run(self, budget: &mut Budget) -> Result<Option<HashSet<String>>, QueryError> {
        self.0.map(|(cohorts, job)| cohorts.only_members(job, budget)).transpose()
    }
}

/// A member's entry in a set of ids, besides its text: the `String` and its slot.
const MEMBER_BYTES: u64 = 40;

/// Most member ids one shard returns for a page.
const MAX_PAGE: u32 = 1001;

/// Cohorts evaluated at one instant, from one scan.
pub struct Cohorts {
    definitions: Vec<Definition>,
    at: i64,
}

impl Cohorts {
    /// Definitions of a plan were checked when it was read from the wire.
    pub fn new(definitions: Vec<Definition>, at: i64) -> Result<Self, QueryError> {
        if definitions.is_empty() || definitions.len() > 1000 || at <= 0 {
            return Err(QueryError::BadPlan("1 to 1000 cohorts and a positive instant".into()));
        }
        Ok(Self { definitions, at })
    }

    pub fn of_filter(filter: &CohortFilter) -> Result<Self, QueryError> {
        Self::new(vec![filter.definition.clone()], filter.at_unix_nanos)
    }

    /// The rows that decide membership. If some cohort admits users without any of its
    /// events (`did_not`, `< 1`…), every user with an event before the instant is a candidate,
    /// so the whole history is read; otherwise only the conditions' events within the longest
    /// range.
    pub fn scan(&self, project: &str) -> Scan {
        let whole_history = self.definitions.iter().any(Definition::matches_without_events);
        let (from_ns, events) = if whole_history {
            (0, Vec::new())
        } else {
            let longest = self.definitions.iter().map(Definition::longest_range_ns).max().unwrap_or(0);
            let mut events: Vec<String> =
                self.definitions.iter().flat_map(|d| d.conditions.iter().map(|c| c.event.clone())).collect();
            events.sort();
            events.dedup();
            (self.at.saturating_sub(longest).max(0), events)
        };
        Scan {
            table: Table::Events,
            project: project.to_owned(),
            from_ns,
            to_ns: self.at,
            filter: Filter { events, ..Default::default() },
            columns: ["distinct_id", "time_ns", "event"].iter().map(|c| c.to_string()).collect(),
            dictionaries: EVENT_DICTIONARIES.to_vec(),
            stored_ids: false,
        }
    }

    /// The members of each cohort.
    pub fn members(&self, job: ScanJob, budget: &mut Budget) -> Result<Vec<HashSet<String>>, QueryError> {
        // Conditions of every cohort flattened; per event name, (flat index, range start).
        // Looked up for every row: a fast hash for the short names.
        let mut by_event: FxHashMap<&str, Vec<(usize, i64)>> = FxHashMap::default();
        let mut offsets = Vec::new();
        let mut total = 0;
        for d in &self.definitions {
            offsets.push(total);
            for c in &d.conditions {
                by_event.entry(c.event.as_str()).or_default().push((total, self.at.saturating_sub(c.range_ns)));
                total += 1;
            }
        }
        // Every user seen is a candidate; `counts[u * total + k]`: user u's count for
        // condition k.
        let mut users = Users::default();
        let mut counts: Vec<u64> = Vec::new();
        each_batch_holding(job, budget, |rb| {
            let c = Cols(rb);
            let (ids, times) = (c.strings("distinct_id"), c.i64("time_ns"));
            let conditions = c.strings("event").map(|name| by_event.get(name));
            for (i, u) in users.numbers_of(ids).enumerate() {
                // A new user's counts start at zero.
                counts.resize(counts.len().max((u as usize + 1) * total), 0);
                if let Some(conds) = conditions[i] {
                    let (t, mine) = (times.value(i), &mut counts[u as usize * total..]);
                    for &(k, from) in conds {
                        if t >= from {
                            mine[k] += 1;
                        }
                    }
                }
            }
            // And, at most, every user again in the member sets built from them.
            Ok(2 * users.bytes() + bytes_of(&counts) + users.len() as u64 * MEMBER_BYTES)
        })?;
        let mut out = vec![HashSet::new(); self.definitions.len()];
        for u in 0..users.len() {
            let mine = &counts[u * total..(u + 1) * total];
            for (j, d) in self.definitions.iter().enumerate() {
                if d.matches(&mine[offsets[j]..offsets[j] + d.conditions.len()]) {
                    out[j].insert(users.name(u as u32).to_owned());
                }
            }
        }
        Ok(out)
    }

    /// The members of the only cohort (a filter).
    pub fn only_members(&self, job: ScanJob, budget: &mut Budget) -> Result<HashSet<String>, QueryError> {
        Ok(self.members(job, budget)?.pop().unwrap_or_default())
    }
}

pub fn sizes(cohorts: &Cohorts, job: ScanJob, budget: &mut Budget) -> Result<CohortSizes, QueryError> {
    Ok(CohortSizes(cohorts.members(job, budget)?.iter().map(|m| m.len() as u64).collect()))
}

pub fn check_users(plan: &CohortUsersPlan) -> Result<(), QueryError> {
    if plan.limit == 0 || plan.limit > MAX_PAGE {
        return Err(QueryError::BadPlan(format!("a page has 1 to {MAX_PAGE} users")));
    }
    Ok(())
}

/// The page of members after `plan.after`, in byte order of their distinct ids.
pub fn users(
    plan: &CohortUsersPlan,
    cohorts: &Cohorts,
    job: ScanJob,
    budget: &mut Budget,
) -> Result<CohortMembers, QueryError> {
    let mut ids: Vec<String> =
        cohorts.only_members(job, budget)?.into_iter().filter(|id| id.as_str() > plan.after.as_str()).collect();
    ids.sort_unstable();
    ids.truncate(plan.limit as usize);
    Ok(CohortMembers(ids))
}
