//! Cohorts (docs/API.md, "Cohorts"): a named set of users defined by how often they did events. A
//! condition counts a user's events of one name within a range ending at the evaluation instant and
//! compares the count; `did_not` is the negation of the same comparison. The candidates are the
//! project's users with at least one event of any kind before the instant, so `did … "<" 1` and
//! `did_not` match users who never did the event.
//!
//! Definitions are validated here (router), stored in meta, sent to shards inside query plans and
//! evaluated there with [`Definition::matches`]: one definition of the semantics.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::calendar::parse_range;
use crate::ingest::FieldError;
use crate::ProjectId;

pub const MAX_CONDITIONS: usize = 20;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_EVENT_CHARS: usize = 200;
/// Longest condition range: ten years, like the active-users period; the query cost budget
/// is what bounds the work (docs/API.md, "Limits").
pub const MAX_RANGE_NS: i64 = 3660 * 86_400 * 1_000_000_000;
pub const MAX_COUNT: u64 = 1_000_000_000;
pub const MAX_COHORTS_PER_PROJECT: usize = 100;
const DEFAULT_RANGE: &str = "30d";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Logic {
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Did,
    DidNot,
}

/// Declaration order is the `count_op` code of query plans ([`CountOp::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CountOp {
    Ge,
    Gt,
    Eq,
    Le,
    Lt,
    Ne,
}

const OPS: [(CountOp, &str); 6] = [
    (CountOp::Ge, ">="),
    (CountOp::Gt, ">"),
    (CountOp::Eq, "="),
    (CountOp::Le, "<="),
    (CountOp::Lt, "<"),
    (CountOp::Ne, "!="),
];

impl CountOp {
    pub fn parse(s: &str) -> Option<Self> {
        OPS.iter().find(|(_, t)| *t == s).map(|(op, _)| *op)
    }

    pub fn symbol(self) -> &'static str {
        OPS.iter().find(|(op, _)| *op == self).map(|(_, t)| *t).unwrap_or(">=")
    }

    pub fn code(self) -> u32 {
        OPS.iter().position(|(op, _)| *op == self).unwrap_or(0) as u32
    }

    pub fn from_code(code: u32) -> Option<Self> {
        OPS.get(code as usize).map(|(op, _)| *op)
    }

    pub fn holds(self, n: u64, count: u64) -> bool {
        match self {
            CountOp::Ge => n >= count,
            CountOp::Gt => n > count,
            CountOp::Eq => n == count,
            CountOp::Le => n <= count,
            CountOp::Lt => n < count,
            CountOp::Ne => n != count,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub kind: Kind,
    pub event: String,
    pub op: CountOp,
    pub count: u64,
    /// As the client wrote it (`30d`), shown back unchanged.
    pub range: String,
    pub range_ns: i64,
}

impl Condition {
    /// Whether a user with `n` events of this condition's name within its range satisfies it.
    pub fn holds(&self, n: u64) -> bool {
        self.op.holds(n, self.count) != (self.kind == Kind::DidNot)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub logic: Logic,
    pub conditions: Vec<Condition>,
}

impl Definition {
    /// `counts[i]` is the user's number of events for condition `i`.
    pub fn matches(&self, counts: &[u64]) -> bool {
        let mut each = self.conditions.iter().zip(counts).map(|(c, n)| c.holds(*n));
        match self.logic {
            Logic::And => each.all(|b| b),
            Logic::Or => each.any(|b| b),
        }
    }

    /// Whether a user who did none of the conditions' events matches. If not, only users with
    /// one of those events within its range can be members, and shards need not look at the
    /// whole history to find the other candidates.
    pub fn matches_without_events(&self) -> bool {
        self.matches(&vec![0; self.conditions.len()])
    }

    pub fn longest_range_ns(&self) -> i64 {
        self.conditions.iter().map(|c| c.range_ns).max().unwrap_or(0)
    }

    /// The API shape (docs/API.md, "Cohorts").
    pub fn to_json(&self) -> Value {
        let conditions: Vec<Value> = self
            .conditions
            .iter()
            .map(|c| {
                json!({
                    "type": if c.kind == Kind::Did { "did" } else { "did_not" },
                    "event": c.event,
                    "count_op": c.op.symbol(),
                    "count": c.count,
                    "range": c.range,
                })
            })
            .collect();
        json!({ "logic": if self.logic == Logic::And { "and" } else { "or" }, "conditions": conditions })
    }

    /// A definition that arrived in a query plan, checked like one a client sent.
    pub fn check(self) -> Result<Self, String> {
        if self.conditions.is_empty() || self.conditions.len() > MAX_CONDITIONS {
            return Err(format!("a cohort has 1 to {MAX_CONDITIONS} conditions"));
        }
        if self.conditions.iter().any(|c| c.event.is_empty() || c.range_ns <= 0 || c.range_ns > MAX_RANGE_NS) {
            return Err("a condition needs an event and a range of at most 3660 days".into());
        }
        Ok(self)
    }
}

/// A stored cohort of one project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cohort {
    pub id: String,
    pub project_id: ProjectId,
    pub name: String,
    pub definition: Definition,
    pub created_at_ms: i64,
}

/// `POST /api/cohorts` body.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CohortInput {
    pub name: String,
    pub conditions: DefinitionInput,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DefinitionInput {
    pub logic: Option<String>,
    pub conditions: Vec<ConditionInput>,
}

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConditionInput {
    #[serde(rename = "type")]
    pub kind: String,
    pub event: String,
    pub count_op: Option<String>,
    pub count: Option<u64>,
    pub range: Option<String>,
}

fn problem(field: String, reason: &str) -> FieldError {
    FieldError { index: 0, field, reason: reason.to_owned() }
}

/// Validates a cohort body: the name and the definition, every problem with its field
/// (`conditions.conditions[2].count_op`). `count_op` defaults to `>=` and `count` to 1, so
/// `{"type":"did_not","event":"x"}` reads "never did x"; `range` defaults to 30 days.
pub fn validate(input: &CohortInput) -> Result<(String, Definition), Vec<FieldError>> {
    let mut problems = Vec::new();
    let name = input.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        problems.push(problem("name".into(), "must be 1 to 200 characters without control characters"));
    }
    let logic = match input.conditions.logic.as_deref().unwrap_or("and") {
        "and" => Logic::And,
        "or" => Logic::Or,
        _ => {
            problems.push(problem("conditions.logic".into(), "must be and or or"));
            Logic::And
        }
    };
    let list = &input.conditions.conditions;
    if list.is_empty() || list.len() > MAX_CONDITIONS {
        problems.push(problem("conditions.conditions".into(), "must list 1 to 20 conditions"));
    }
    let mut conditions = Vec::new();
    for (i, c) in list.iter().enumerate().take(MAX_CONDITIONS) {
        let field = |f: &str| format!("conditions.conditions[{i}].{f}");
        let kind = match c.kind.as_str() {
            "did" => Kind::Did,
            "did_not" => Kind::DidNot,
            _ => {
                problems.push(problem(field("type"), "must be did or did_not"));
                Kind::Did
            }
        };
        if c.event.is_empty() || c.event.chars().count() > MAX_EVENT_CHARS {
            problems.push(problem(field("event"), "must be 1 to 200 characters"));
        }
        let op = match c.count_op.as_deref() {
            None => CountOp::Ge,
            Some(s) => CountOp::parse(s).unwrap_or_else(|| {
                problems.push(problem(field("count_op"), "must be one of >=, >, =, <=, <, !="));
                CountOp::Ge
            }),
        };
        let count = c.count.unwrap_or(1);
        if count > MAX_COUNT {
            problems.push(problem(field("count"), "must be at most 1000000000"));
        }
        let range = c.range.clone().unwrap_or_else(|| DEFAULT_RANGE.to_owned());
        let range_ns = parse_range(&range).filter(|r| *r <= MAX_RANGE_NS).unwrap_or_else(|| {
            problems.push(problem(field("range"), "must be an integer and a unit m, h, d or w, at most 3660 days"));
            0
        });
        conditions.push(Condition { kind, event: c.event.clone(), op, count, range, range_ns });
    }
    if problems.is_empty() {
        Ok((name.to_owned(), Definition { logic, conditions }))
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(v: Value) -> CohortInput {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn conditions_compare_counts_and_did_not_negates() {
        let (_, def) = validate(&input(json!({"name": "x", "conditions": {"logic": "and", "conditions": [
            {"type": "did", "event": "buy", "count_op": ">=", "count": 2, "range": "7d"},
            {"type": "did_not", "event": "churn", "range": "30d"},
        ]}})))
        .unwrap();
        assert!(def.matches(&[2, 0]) && def.matches(&[5, 0]));
        assert!(!def.matches(&[1, 0]) && !def.matches(&[2, 1]));
        assert!(!def.matches_without_events());
        assert_eq!(def.longest_range_ns(), 30 * 86_400 * 1_000_000_000);
        let mut or = def.clone();
        or.logic = Logic::Or;
        assert!(or.matches(&[0, 0]) && or.matches_without_events() && !or.matches(&[1, 3]));
        // (operator, count, the user's count, holds)
        for (op, count, n, want) in
            [("<", 1, 0, true), ("<", 1, 1, false), ("!=", 3, 3, false), ("=", 3, 3, true), (">", 3, 3, false)]
        {
            let c = Condition {
                kind: Kind::Did,
                event: "e".into(),
                op: CountOp::parse(op).unwrap(),
                count,
                range: "1d".into(),
                range_ns: 1,
            };
            assert_eq!(c.holds(n), want, "{op} {count} {n}");
            assert_eq!(Condition { kind: Kind::DidNot, ..c.clone() }.holds(n), !want);
        }
    }

    #[test]
    fn definitions_round_trip_through_json_shape_and_codes() {
        let body = json!({"logic": "or", "conditions": [
            {"type": "did", "event": "a", "count_op": "!=", "count": 3, "range": "2w"},
            {"type": "did_not", "event": "b", "count_op": ">=", "count": 1, "range": "30d"},
        ]});
        let (name, def) = validate(&input(json!({"name": " n ", "conditions": body}))).unwrap();
        assert_eq!(name, "n");
        assert_eq!(def.to_json(), body);
        let codes: Vec<_> = def.conditions.iter().map(|c| CountOp::from_code(c.op.code())).collect();
        assert_eq!(codes, [Some(CountOp::Ne), Some(CountOp::Ge)]);
        assert_eq!(def.clone().check(), Ok(def));
    }

    #[test]
    fn every_problem_names_its_field() {
        let errs = validate(&input(json!({"name": "", "conditions": {"logic": "xor", "conditions": [
            {"type": "maybe", "event": "", "count_op": "~", "count": 2_000_000_000u64, "range": "3y"},
        ]}})))
        .unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "name",
                "conditions.logic",
                "conditions.conditions[0].type",
                "conditions.conditions[0].event",
                "conditions.conditions[0].count_op",
                "conditions.conditions[0].count",
                "conditions.conditions[0].range",
            ]
        );
        let range = |r: &str| {
            validate(&input(json!({"name": "n", "conditions": {"conditions": [
                {"type": "did", "event": "e", "range": r},
            ]}})))
        };
        assert_eq!(range("400d").unwrap().1.longest_range_ns(), 400 * 86_400 * 1_000_000_000, "a year is not a cap");
        assert_eq!(range("522w").unwrap().1.longest_range_ns(), 522 * 7 * 86_400 * 1_000_000_000);
        assert_eq!(range("3661d").unwrap_err()[0].field, "conditions.conditions[0].range");
        let none = validate(&input(json!({"name": "n", "conditions": {"conditions": []}}))).unwrap_err();
        assert_eq!(none[0].field, "conditions.conditions");
        assert!(Definition { logic: Logic::And, conditions: vec![] }.check().is_err());
    }
}
