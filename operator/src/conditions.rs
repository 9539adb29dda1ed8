//! Kubernetes status conditions, shared by every Sextant resource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition types used across the resources. Kubernetes convention: PascalCase, positive.
pub const READY: &str = "Ready";
pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
pub const BLOCKED: &str = "Blocked";
pub const SCALING: &str = "Scaling";
pub const NODE_REPLACEMENT: &str = "NodeReplacement";

/// A condition as the planner decides it; [`merge`] turns it into a `Condition` with the right
/// transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Desired {
    pub fn new(type_: &'static str, status: bool, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self { type_, status, reason: reason.into(), message: message.into() }
    }
}

/// Sets `desired` into `conditions`, keeping `lastTransitionTime` when the status did not change
/// (so `kubectl wait` and alerting see real transitions only).
pub fn merge(conditions: &mut Vec<Condition>, desired: Desired, generation: Option<i64>, now: Timestamp) {
    let status = if desired.status { "True" } else { "False" }.to_owned();
    let transition = conditions
        .iter()
        .find(|c| c.type_ == desired.type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    conditions.retain(|c| c.type_ != desired.type_);
    conditions.push(Condition {
        type_: desired.type_.to_owned(),
        status,
        reason: desired.reason,
        message: desired.message,
        observed_generation: generation,
        last_transition_time: transition,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// Builds a fresh condition list from desired ones, keeping transition times from `previous`.
pub fn rebuild(
    previous: &[Condition],
    desired: Vec<Desired>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> =
        previous.iter().filter(|c| desired.iter().any(|d| d.type_ == c.type_)).cloned().collect();
    // One condition per type: when a type is decided twice, the last decision wins.
    for (i, d) in desired.iter().enumerate() {
        if !desired[i + 1..].iter().any(|later| later.type_ == d.type_) {
            merge(&mut out, d.clone(), generation, now);
        }
    }
    out
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let t2 = Timestamp::from_second(3_000).unwrap();
        let mut c = Vec::new();
        merge(&mut c, Desired::new(READY, false, "Pending", "waiting"), Some(1), t0);
        merge(&mut c, Desired::new(READY, false, "Pending", "still waiting"), Some(2), t1);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time.0, t0);
        assert_eq!(c[0].observed_generation, Some(2));
        assert_eq!(c[0].message, "still waiting");
        merge(&mut c, Desired::new(READY, true, "Reconciled", ""), Some(2), t2);
        assert_eq!(c[0].last_transition_time.0, t2);
        assert!(is_true(&c, READY));
    }

    #[test]
    fn rebuild_drops_conditions_no_longer_desired() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let mut c = Vec::new();
        merge(&mut c, Desired::new(BLOCKED, true, "TooFewNodes", ""), Some(1), t0);
        let c = rebuild(&c, vec![Desired::new(READY, true, "Reconciled", "")], Some(2), t0);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].type_, READY);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn desired() -> impl Strategy<Value = Desired> {
            (
                prop::sample::select(vec![READY, AVAILABLE, PROGRESSING, DEGRADED, BLOCKED]),
                any::<bool>(),
                "[A-Z][a-z]{0,8}",
                ".{0,20}",
            )
                .prop_map(|(t, s, r, m)| Desired::new(t, s, r, m))
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

            /// Re-deciding the same conditions later changes nothing, so a no-op reconcile writes
            /// no status (a write would trigger another reconcile, forever).
            #[test]
            fn rebuilding_the_same_conditions_is_a_fixed_point(
                first in proptest::collection::vec(desired(), 0..6),
                gen in 1i64..100,
                t0 in 1_000i64..2_000,
                later in 0i64..10_000,
            ) {
                let now = Timestamp::from_second(t0).unwrap();
                let a = rebuild(&[], first.clone(), Some(gen), now);
                let b = rebuild(&a, first, Some(gen), Timestamp::from_second(t0 + later).unwrap());
                prop_assert_eq!(&a, &b);
                let mut types: Vec<&str> = a.iter().map(|c| c.type_.as_str()).collect();
                let n = types.len();
                types.dedup();
                prop_assert_eq!(types.len(), n, "one condition per type, sorted");
            }
        }
    }
}
