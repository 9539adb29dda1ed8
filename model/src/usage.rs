//! Metering (docs/API.md, "Usage"): what each project ingested per calendar month (UTC),
//! counted by the shards where rows are committed and rolled up into meta.
//!
//! A month is named by its number `YYYYMM` (`202611`); a batch belongs to the month of its
//! receive time, which the router stamps on it ([`crate::row::RowBatch::received_unix_millis`]),
//! so every replica and every replay of the Raft log files it under the same month.

use serde::{Deserialize, Serialize};

use crate::meta::{Plan, Quota};
use crate::{OrgId, ProjectId};

/// What one project ingested in one month (or a sum of such).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageCounts {
    /// JSON size of the accepted observability and analytics objects.
    pub bytes: u64,
    pub spans: u64,
    pub logs: u64,
    /// Host metric rows.
    pub metric_samples: u64,
    pub events: u64,
    pub replay_events: u64,
}

impl UsageCounts {
    pub fn add(&mut self, o: &UsageCounts) {
        self.bytes += o.bytes;
        self.spans += o.spans;
        self.logs += o.logs;
        self.metric_samples += o.metric_samples;
        self.events += o.events;
        self.replay_events += o.replay_events;
    }

    /// Takes `o` away again (an aborted batch); never below zero.
    pub fn sub(&mut self, o: &UsageCounts) {
        self.bytes = self.bytes.saturating_sub(o.bytes);
        self.spans = self.spans.saturating_sub(o.spans);
        self.logs = self.logs.saturating_sub(o.logs);
        self.metric_samples = self.metric_samples.saturating_sub(o.metric_samples);
        self.events = self.events.saturating_sub(o.events);
        self.replay_events = self.replay_events.saturating_sub(o.replay_events);
    }

    pub fn is_zero(&self) -> bool {
        *self == UsageCounts::default()
    }
}

/// One project's counts in one month, as a shard group reports them and meta answers them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub project_id: String,
    /// `YYYYMM`.
    pub month: u32,
    pub counts: UsageCounts,
}

/// How far a data group's counters in meta go: every batch the group committed at or below
/// `applied_index` of its Raft log is counted in the roll-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedIndex {
    pub group: u64,
    pub applied_index: u64,
}

const DAY_MS: i64 = 86_400_000;

/// (year, month 1..=12, day) of a day number since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of (year, month, day).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The month (`YYYYMM`, UTC) holding the instant `unix_millis`.
pub fn month_of_millis(unix_millis: i64) -> u32 {
    let (y, m, _) = civil_from_days(unix_millis.div_euclid(DAY_MS));
    (y.clamp(0, 9999) as u32) * 100 + m
}

/// The instant (Unix milliseconds) at which `month` begins, 00:00 UTC on its first day.
pub fn month_start_millis(month: u32) -> i64 {
    days_from_civil(i64::from(month / 100), (month % 100).clamp(1, 12), 1) * DAY_MS
}

/// The month after `month`.
pub fn next_month(month: u32) -> u32 {
    if month % 100 >= 12 {
        (month / 100 + 1) * 100 + 1
    } else {
        month + 1
    }
}

/// The month before `month`.
pub fn previous_month(month: u32) -> u32 {
    if month % 100 <= 1 {
        // Year 0 has no month before: it stays (only a forged receive time gets there).
        (month / 100).checked_sub(1).map_or(month, |y| y * 100 + 12)
    } else {
        month - 1
    }
}

/// One monthly limit and what crossing it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub limit: u64,
    /// Hard refuses ingest at the limit; soft accepts it and only reports it.
    pub hard: bool,
    /// What usage the limit is measured against: one project's (a project `Quota`), or the
    /// whole organization's.
    pub project: Option<ProjectId>,
}

/// The byte and event limits that apply; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub bytes: Option<Limit>,
    pub events: Option<Limit>,
}

/// The limits of `org` (on `plan`), and of `project` within it if given: for each of bytes
/// and events, the first that sets it of the project's `Quota`, the org-wide `Quota` and the
/// plan. Plan limits are hard. The usage endpoint (`project: None`) and ingest enforcement
/// both resolve limits here.
pub fn resolve_limits<'a>(
    plan: Option<&Plan>,
    quotas: impl IntoIterator<Item = &'a Quota>,
    org: OrgId,
    project: Option<ProjectId>,
) -> Limits {
    let (mut of_project, mut of_org) = (None, None);
    for q in quotas.into_iter().filter(|q| q.org_id == org) {
        match q.project_id {
            None => of_org = of_org.or(Some(q)),
            Some(p) if Some(p) == project => of_project = of_project.or(Some(q)),
            Some(_) => {}
        }
    }
    let pick = |of_quota: fn(&Quota) -> Option<u64>, of_plan: Option<u64>| {
        let quota = |q: Option<&Quota>, scope| {
            q.and_then(|q| of_quota(q).map(|l| Limit { limit: l, hard: q.hard, project: scope }))
        };
        quota(of_project, project)
            .or_else(|| quota(of_org, None))
            .or_else(|| of_plan.map(|l| Limit { limit: l, hard: true, project: None }))
    };
    Limits {
        bytes: pick(|q| q.monthly_bytes, plan.and_then(|p| p.monthly_bytes)),
        events: pick(|q| q.monthly_events, plan.and_then(|p| p.monthly_events)),
    }
}

/// A limit reached: usage is at or over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub limit: u64,
    pub used: u64,
    pub hard: bool,
}

/// Whether `used` has reached `limit` (an unlimited `None` never is). At the limit exactly
/// counts as reached: nothing more fits.
pub fn exceeded(limit: Option<Limit>, used: u64) -> Option<Exceeded> {
    limit.filter(|l| used >= l.limit).map(|l| Exceeded { limit: l.limit, used, hard: l.hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_begin_at_midnight_utc_on_the_first() {
        // 2026-11-30T23:59:59.999Z and 2026-12-01T00:00:00Z.
        let dec = 1_796_083_200_000;
        assert_eq!(month_of_millis(dec - 1), 202611);
        assert_eq!(month_of_millis(dec), 202612);
        assert_eq!(month_start_millis(202612), dec);
        assert_eq!(month_of_millis(0), 197001);
        assert_eq!(month_start_millis(202403), 1_709_251_200_000, "after a leap February");
        assert_eq!((next_month(202612), previous_month(202701)), (202701, 202612));
        assert_eq!((next_month(202602), previous_month(202602)), (202603, 202601));
        assert_eq!((month_of_millis(i64::MIN / 2) / 100, previous_month(1)), (0, 1), "clamped, never a panic");
        for month in [197001, 200002, 202412, 209906] {
            assert_eq!(month_of_millis(month_start_millis(month)), month);
            assert_eq!(month_of_millis(month_start_millis(next_month(month)) - 1), month);
        }
    }
    fn quota(org: OrgId, project: Option<ProjectId>, bytes: Option<u64>, events: Option<u64>, hard: bool) -> Quota {
        Quota {
            id: "q".into(),
            org_id: org,
            project_id: project,
            rate_limits: Default::default(),
            managed_by: None,
            monthly_bytes: bytes,
            monthly_events: events,
            hard,
        }
    }

    fn free() -> Plan {
        crate::meta::default_plans().into_iter().find(|p| p.name == "free").unwrap()
    }

    #[test]
    fn a_project_quota_overrides_the_org_quota_which_overrides_the_plan_kind_by_kind() {
        let (org, p, other) = (OrgId::random(), ProjectId::random(), ProjectId::random());
        let plan = free();
        let plan_bytes = plan.monthly_bytes.unwrap();
        let hard_plan = |l| Some(Limit { limit: l, hard: true, project: None });
        let none: [Quota; 0] = [];
        assert_eq!(
            resolve_limits(Some(&plan), &none, org, Some(p)),
            Limits { bytes: hard_plan(plan_bytes), events: hard_plan(plan.monthly_events.unwrap()) }
        );
        let quotas = [
            quota(OrgId::random(), None, Some(1), Some(1), true), // another org's
            quota(org, Some(other), Some(2), Some(2), true),      // another project's
            quota(org, None, Some(100), None, false),
            quota(org, Some(p), None, Some(7), true),
        ];
        let got = resolve_limits(Some(&plan), &quotas, org, Some(p));
        assert_eq!(got.bytes, Some(Limit { limit: 100, hard: false, project: None }), "org quota, soft");
        assert_eq!(got.events, Some(Limit { limit: 7, hard: true, project: Some(p) }), "project quota");
        let org_wide = resolve_limits(Some(&plan), &quotas, org, None);
        assert_eq!(org_wide.events, hard_plan(plan.monthly_events.unwrap()), "the plan where no org quota sets it");
    }

    #[test]
    fn unlimited_plans_and_unknown_plans_have_no_limits() {
        let org = OrgId::random();
        let mut plan = free();
        plan.monthly_bytes = None;
        plan.monthly_events = None;
        let none: [Quota; 0] = [];
        assert_eq!(resolve_limits(Some(&plan), &none, org, None), Limits::default());
        assert_eq!(resolve_limits(None, &none, org, None), Limits::default());
        assert_eq!(exceeded(None, u64::MAX), None);
    }

    #[test]
    fn a_limit_is_exceeded_once_usage_reaches_it() {
        let hard = Some(Limit { limit: 10, hard: true, project: None });
        let soft = Some(Limit { limit: 10, hard: false, project: None });
        assert_eq!(exceeded(hard, 9), None, "under");
        assert_eq!(exceeded(hard, 10), Some(Exceeded { limit: 10, used: 10, hard: true }), "at");
        assert_eq!(exceeded(hard, 11), Some(Exceeded { limit: 10, used: 11, hard: true }), "over");
        assert_eq!(exceeded(soft, 11), Some(Exceeded { limit: 10, used: 11, hard: false }), "soft, over");
        let zero = Some(Limit { limit: 0, hard: true, project: None });
        assert!(exceeded(zero, 0).is_some(), "a zero limit admits nothing");
    }
}
