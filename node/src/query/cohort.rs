//! Cohort membership on one shard (docs/API.md "Cohorts", `model::cohort`). A user's events
//! all live on this shard, so counting them here decides the user's membership exactly; the
//! router adds the shards' sizes and merges their member lists. Also the filter of
//! timeseries, active users and funnels by cohort ([`Members`]): the members are computed
//! first, then the plan's own scan keeps only their rows.

use std::ops::Range;

use rustc_hash::{FxHashMap, FxHashSet};
use sextant_model::cohort::Definition;
use sextant_model::query::{CohortFilter, CohortMembers, CohortSizes, CohortSizesPlan, CohortUsersPlan, ShardQuery};

use super::{bytes_of, each_batch_holding, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::table::Cols;
use crate::segment::user_number::{USER, USER_ID};
use crate::segment::{Filter, Scan, Table, EVENT_DICTIONARIES};
use crate::shard::ScanJob;

impl QueryKind for CohortSizesPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let cohorts = Cohorts::new(self.cohorts.clone(), self.at_unix_nanos)?;
        let job = shard.scan(cohorts.scan(&req.project_id, false));
        Ok(Box::new(move |_, budget| Ok(sizes(&cohorts, job, budget)?.into())))
    }
}

impl QueryKind for CohortUsersPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        check_users(self)?;
        let cohorts = Cohorts::of_filter(&self.cohort)?;
        let job = shard.scan(cohorts.scan(&req.project_id, true));
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
            let job = shard.scan(c.scan(&req.project_id, false));
            (c, job)
        }))
    }

    /// The members' user numbers (the shard's, as the plan's own scan reads them: both
    /// scans started together, under one state lock).
    pub fn run(self, budget: &mut Budget) -> Result<Option<FxHashSet<u32>>, QueryError> {
        self.0
            .map(|(cohorts, job)| {
                let counted = cohorts.count(job, budget)?;
                Ok(cohorts.members(&counted, 0).map(|i| counted.numbers[i]).collect())
            })
            .transpose()
    }
}

/// A member's entry in a set of numbers.
const MEMBER_BYTES: u64 = 8;

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
    /// range. Users are read by number; with `names`, their distinct ids too.
    pub fn scan(&self, project: &str, names: bool) -> Scan {
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
        let columns = [USER, "time_ns", "event"].into_iter().chain(names.then_some(USER_ID));
        Scan {
            table: Table::Events,
            project: project.to_owned(),
            from_ns,
            to_ns: self.at,
            filter: Filter { events, ..Default::default() },
            columns: columns.map(str::to_owned).collect(),
            dictionaries: EVENT_DICTIONARIES.to_vec(),
            stored_ids: false,
        }
    }

    /// Every user's count of each condition's events, by user number; with a scan of
    /// names, each user's distinct id too.
    fn count(&self, job: ScanJob, budget: &mut Budget) -> Result<Counted, QueryError> {
        // Conditions of every cohort flattened; per event name, (flat index, range start).
        // Looked up once per name in a batch's dictionary.
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
        let mut counted = Counted { conditions: total, offsets, ..Default::default() };
        each_batch_holding(job, budget, |rb| {
            let c = Cols(rb);
            let (users, times) = (c.u32(USER).values(), c.i64("time_ns"));
            let conditions = c.strings("event").map(|name| by_event.get(name));
            let names = rb.schema().index_of(USER_ID).is_ok().then(|| c.strings(USER_ID));
            for (i, &u) in users.iter().enumerate() {
                // Every user seen is a candidate, whose counts start at zero.
                let mine = counted.user(u, || names.as_ref().map(|n| n.value(i)));
                if let Some(conds) = conditions[i] {
                    let t = times.value(i);
                    for &(k, from) in conds {
                        if t >= from {
                            mine[k] += 1;
                        }
                    }
                }
            }
            Ok(counted.bytes())
        })?;
        Ok(counted)
    }

    /// The places in `counted` (users in the order seen) of cohort `j`'s members.
    fn members<'a>(&'a self, counted: &'a Counted, j: usize) -> impl Iterator<Item = usize> + 'a {
        let (d, at) = (&self.definitions[j], counted.offsets[j]);
        let width = counted.conditions;
        (0..counted.numbers.len())
            .filter(move |&i| d.matches(&counted.counts[i * width..][at..at + d.conditions.len()]))
    }
}

/// The users seen by a cohort's scan, in the order seen, and each one's counts:
/// `counts[i * conditions + k]` for condition `k` of the `i`-th.
#[derive(Default)]
struct Counted {
    conditions: usize,
    /// Each cohort's first condition in the flattened list.
    offsets: Vec<usize>,
    /// Per shard user number: the user's place among those seen ([`NOT_SEEN`] if none).
    /// Numbers belong to the shard, across its projects: the counts are kept only for
    /// this project's users.
    places: Vec<u32>,
    /// Per user seen: its shard number.
    numbers: Vec<u32>,
    counts: Vec<u64>,
    /// Distinct ids, for a scan of names: the `i`-th user's is `text[names[i].clone()]`.
    text: String,
    names: Vec<Range<usize>>,
}

const NOT_SEEN: u32 = u32::MAX;

impl Counted {
    /// The counts of the user numbered `u`, made (and its id recorded, if `name` gives one)
    /// the first time it is seen.
    fn user<'a>(&mut self, u: u32, name: impl FnOnce() -> Option<&'a str>) -> &mut [u64] {
        let u = u as usize;
        if u >= self.places.len() {
            // Numbers are dense from 0 per shard: this grows about as the shard's users do.
            self.places.resize(u + 1, NOT_SEEN);
        }
        if self.places[u] == NOT_SEEN {
            self.places[u] = self.numbers.len() as u32;
            self.numbers.push(u as u32);
            self.counts.resize(self.counts.len() + self.conditions, 0);
            if let Some(id) = name() {
                let start = self.text.len();
                self.text.push_str(id);
                self.names.push(start..self.text.len());
            }
        }
        let i = self.places[u] as usize;
        &mut self.counts[i * self.conditions..(i + 1) * self.conditions]
    }

    /// Memory held, with room for a set of every user as members.
    fn bytes(&self) -> u64 {
        let names = self.text.capacity() as u64 + bytes_of(&self.names);
        let users = bytes_of(&self.places) + bytes_of(&self.numbers) + bytes_of(&self.counts);
        users + names + self.numbers.len() as u64 * MEMBER_BYTES
    }
}

pub fn sizes(cohorts: &Cohorts, job: ScanJob, budget: &mut Budget) -> Result<CohortSizes, QueryError> {
    let counted = cohorts.count(job, budget)?;
    let sizes = (0..cohorts.definitions.len()).map(|j| cohorts.members(&counted, j).count() as u64);
    Ok(CohortSizes(sizes.collect()))
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
    let counted = cohorts.count(job, budget)?;
    let members = cohorts.members(&counted, 0).map(|i| &counted.text[counted.names[i].clone()]);
    let mut ids: Vec<&str> = members.filter(|id| *id > plan.after.as_str()).collect();
    ids.sort_unstable();
    ids.truncate(plan.limit as usize);
    Ok(CohortMembers(ids.into_iter().map(str::to_owned).collect()))
}
