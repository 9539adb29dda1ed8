//! Alert rules' runtime state (docs/API.md, "Alerts"): what one evaluation does to a rule's
//! state, the transitions it records, and the evaluator lease. Meta applies these in log order
//! from the values an evaluator measured, so every replica reaches the same state.

use serde::{Deserialize, Serialize};

use crate::admin::{AlertMetric, Comparison};
use crate::meta::AlertRule;

/// Rules per project (API and AlertRule resources together).
pub const MAX_RULES_PER_PROJECT: usize = 100;
/// Transitions kept per rule, newest last.
pub const MAX_HISTORY: usize = 50;
/// Longest filter value (a service, operation, hostname, event name or log query).
pub const MAX_FILTER_CHARS: usize = 1_000;
pub const MAX_WINDOW_MINUTES: u32 = 1_440;
/// Longest `for_seconds`: a day.
pub const MAX_FOR_SECONDS: u32 = 86_400;
/// A lease lasts at least this long and at most [`MAX_LEASE_MS`].
pub const MIN_LEASE_MS: i64 = 1_000;
pub const MAX_LEASE_MS: i64 = 600_000;
/// A log-count rule counts at most this many lines per shard (docs/API.md, "Alerts").
pub const MAX_LOG_COUNT_PER_SHARD: u32 = 10_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    #[default]
    Ok,
    /// The condition holds, for less than the rule's `for_seconds` so far.
    Pending,
    Firing,
    /// The metric had no value in the window (no spans for a rate or percentile, no host
    /// samples).
    NoData,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Ok => "ok",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
            AlertState::NoData => "no_data",
        }
    }
}

/// One change of state; `seq` numbers a rule's transitions from 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertTransition {
    pub seq: u64,
    pub from: AlertState,
    pub to: AlertState,
    pub at_ms: i64,
    pub value: Option<f64>,
}

impl AlertTransition {
    /// The system event this transition emits: entering `firing` triggers, leaving it resolves.
    pub fn event_name(&self) -> Option<&'static str> {
        match (self.from, self.to) {
            (f, AlertState::Firing) if f != AlertState::Firing => Some("system.alert_triggered"),
            (AlertState::Firing, t) if t != AlertState::Firing => Some("system.alert_resolved"),
            _ => None,
        }
    }

    /// The event's id: the same for every evaluator that could record this transition, so a
    /// takeover never emits it twice.
    pub fn event_id(&self, rule_id: &str) -> String {
        format!("alert:{rule_id}:{}", self.seq)
    }
}

/// A rule's state as the last evaluation left it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertStatus {
    pub state: AlertState,
    pub last_value: Option<f64>,
    pub last_evaluated_at_ms: Option<i64>,
    /// When the condition started to hold, while `pending` or `firing`.
    pub since_ms: Option<i64>,
    /// Transitions so far (the last one's `seq`).
    pub seq: u64,
    /// The newest [`MAX_HISTORY`] transitions, oldest first.
    pub history: Vec<AlertTransition>,
}

impl AlertStatus {
    /// Applies one evaluation at `now_ms`: `value` is `None` when the metric had no data. Returns
    /// the transition it caused, if any.
    pub fn observe(
        &mut self,
        comparison: Comparison,
        threshold: f64,
        for_ms: i64,
        value: Option<f64>,
        now_ms: i64,
    ) -> Option<AlertTransition> {
        self.last_value = value;
        self.last_evaluated_at_ms = Some(now_ms);
        let next = match value {
            None => AlertState::NoData,
            Some(v) if holds(comparison, v, threshold) => {
                let since = *self.since_ms.get_or_insert(now_ms);
                if now_ms.saturating_sub(since) >= for_ms {
                    AlertState::Firing
                } else {
                    AlertState::Pending
                }
            }
            Some(_) => AlertState::Ok,
        };
        if !matches!(next, AlertState::Pending | AlertState::Firing) {
            self.since_ms = None;
        }
        if next == self.state {
            return None;
        }
        self.seq += 1;
        let t = AlertTransition { seq: self.seq, from: self.state, to: next, at_ms: now_ms, value };
        self.state = next;
        self.history.push(t.clone());
        if self.history.len() > MAX_HISTORY {
            let extra = self.history.len() - MAX_HISTORY;
            self.history.drain(..extra);
        }
        Some(t)
    }
}

/// Whether `value comparison threshold` holds. NaN never does.
pub fn holds(comparison: Comparison, value: f64, threshold: f64) -> bool {
    match comparison {
        Comparison::Greater => value > threshold,
        Comparison::GreaterOrEqual => value >= threshold,
        Comparison::Less => value < threshold,
        Comparison::LessOrEqual => value <= threshold,
    }
}

/// `">"` etc. as a [`Comparison`].
pub fn parse_comparison(s: &str) -> Option<Comparison> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
}

/// `"error_rate"` etc. as an [`AlertMetric`].
pub fn parse_metric(s: &str) -> Option<AlertMetric> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
}

/// A rule and its state, as `MetaQuery::Alerts` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertEntry {
    pub rule: AlertRule,
    pub status: AlertStatus,
}

/// What an evaluator measured for one rule, given the rule's `seq` it read: meta ignores it
/// when the rule has moved on since (another evaluator's result, or this one's retried).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertObservation {
    pub rule_id: String,
    pub seq: u64,
    pub value: Option<f64>,
}

/// The right to evaluate alert rules, held by one router at a time. `token` grows with every
/// new holder and fences off results of an earlier one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertLease {
    pub holder: String,
    pub token: u64,
    pub expires_at_ms: i64,
}

impl AlertLease {
    /// Whether `holder` with `token` may record results: it is still the latest holder. A
    /// round that outlasted the lease still counts while no other router has taken it, since
    /// taking it changes the token.
    pub fn admits(&self, holder: &str, token: u64) -> bool {
        self.holder == holder && self.token == token
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ManualClock;

    fn states(s: &AlertStatus) -> Vec<(AlertState, AlertState)> {
        s.history.iter().map(|t| (t.from, t.to)).collect()
    }

    #[test]
    fn a_condition_held_for_the_for_duration_goes_pending_then_firing_then_back_to_ok() {
        use AlertState::*;
        let clock = ManualClock::at_millis(1_000_000);
        let now = || clock.clock().now_millis();
        let mut s = AlertStatus::default();
        let observe = |s: &mut AlertStatus, v: f64| s.observe(Comparison::Greater, 0.1, 60_000, Some(v), now());
        assert_eq!(observe(&mut s, 0.05), None);
        assert_eq!(s.state, Ok);
        let t = observe(&mut s, 0.5).unwrap();
        assert_eq!((t.seq, t.from, t.to, t.event_name()), (1, Ok, Pending, None));
        clock.advance(Duration::from_secs(30));
        assert_eq!(observe(&mut s, 0.5), None, "still pending inside the for duration");
        clock.advance(Duration::from_secs(30));
        let t = observe(&mut s, 0.6).unwrap();
        assert_eq!((t.seq, t.to, t.event_name()), (2, Firing, Some("system.alert_triggered")));
        assert_eq!(t.event_id("r1"), "alert:r1:2");
        clock.advance(Duration::from_secs(30));
        assert_eq!(observe(&mut s, 0.7), None, "firing stays firing");
        let t = observe(&mut s, 0.0).unwrap();
        assert_eq!((t.to, t.event_name()), (Ok, Some("system.alert_resolved")));
        assert_eq!(states(&s), [(Ok, Pending), (Pending, Firing), (Firing, Ok)]);
        assert_eq!((s.last_value, s.last_evaluated_at_ms, s.seq), (Some(0.0), Some(now()), 3));
    }

    #[test]
    fn a_condition_that_stops_holding_while_pending_restarts_the_for_duration() {
        let clock = ManualClock::at_millis(0);
        let now = || clock.clock().now_millis();
        let mut s = AlertStatus::default();
        s.observe(Comparison::GreaterOrEqual, 10.0, 60_000, Some(10.0), now());
        clock.advance(Duration::from_secs(50));
        s.observe(Comparison::GreaterOrEqual, 10.0, 60_000, Some(9.0), now());
        clock.advance(Duration::from_secs(20));
        let t = s.observe(Comparison::GreaterOrEqual, 10.0, 60_000, Some(11.0), now()).unwrap();
        assert_eq!(t.to, AlertState::Pending, "70 s after it first held, but only just again");
    }

    #[test]
    fn without_a_for_duration_ok_fires_at_once() {
        let mut s = AlertStatus::default();
        let t = s.observe(Comparison::Less, 5.0, 0, Some(1.0), 10).unwrap();
        assert_eq!((t.from, t.to), (AlertState::Ok, AlertState::Firing));
    }

    #[test]
    fn no_data_is_a_state_of_its_own_and_leaving_firing_for_it_resolves() {
        use AlertState::*;
        let clock = ManualClock::at_millis(5_000);
        let now = || clock.clock().now_millis();
        let mut s = AlertStatus::default();
        let t = s.observe(Comparison::Greater, 100.0, 0, None, now()).unwrap();
        assert_eq!((t.from, t.to, t.event_name()), (Ok, NoData, None));
        assert_eq!(s.observe(Comparison::Greater, 100.0, 0, None, now()), None);
        clock.advance(Duration::from_secs(30));
        let t = s.observe(Comparison::Greater, 100.0, 0, Some(150.0), now()).unwrap();
        assert_eq!((t.from, t.to, t.event_name()), (NoData, Firing, Some("system.alert_triggered")));
        let t = s.observe(Comparison::Greater, 100.0, 0, None, now()).unwrap();
        assert_eq!((t.from, t.to, t.event_name()), (Firing, NoData, Some("system.alert_resolved")));
        assert_eq!(s.last_value, None);
    }

    #[test]
    fn the_history_keeps_only_the_newest_transitions() {
        let mut s = AlertStatus::default();
        for i in 0..(MAX_HISTORY as i64 + 7) {
            s.observe(Comparison::Greater, 0.5, 0, Some((i % 2) as f64), i);
        }
        assert_eq!(s.history.len(), MAX_HISTORY);
        assert_eq!(s.history.last().unwrap().seq, s.seq);
        assert_eq!(s.history[0].seq, s.seq - MAX_HISTORY as u64 + 1);
    }

    #[test]
    fn nan_never_satisfies_a_comparison() {
        for c in [Comparison::Greater, Comparison::GreaterOrEqual, Comparison::Less, Comparison::LessOrEqual] {
            assert!(!holds(c, f64::NAN, 1.0));
        }
        assert_eq!(parse_comparison(">="), Some(Comparison::GreaterOrEqual));
        assert_eq!(parse_metric("p99_latency_ms"), Some(AlertMetric::P99LatencyMs));
        assert_eq!(parse_metric("vibes"), None);
    }

    #[test]
    fn a_lease_admits_only_its_holder_with_its_token() {
        let lease = AlertLease { holder: "a".into(), token: 3, expires_at_ms: 100 };
        assert!(lease.admits("a", 3));
        assert!(!lease.admits("a", 2));
        assert!(!lease.admits("b", 3));
    }
}
