//! Cohort definitions inside query plans.

use sextant_model::cohort::{Condition, CountOp, Definition, Kind, Logic};

use crate::{CohortCondition, CohortDefinition};

impl From<&Definition> for CohortDefinition {
    fn from(d: &Definition) -> Self {
        CohortDefinition {
            any: d.logic == Logic::Or,
            conditions: d
                .conditions
                .iter()
                .map(|c| CohortCondition {
                    did_not: c.kind == Kind::DidNot,
                    event: c.event.clone(),
                    count_op: c.op.code(),
                    count: c.count,
                    range_nanos: c.range_ns,
                })
                .collect(),
        }
    }
}

/// A definition received by a shard is checked like one a client sent.
impl TryFrom<&CohortDefinition> for Definition {
    type Error = String;

    fn try_from(p: &CohortDefinition) -> Result<Self, String> {
        let conditions = p
            .conditions
            .iter()
            .map(|c| {
                Ok(Condition {
                    kind: if c.did_not { Kind::DidNot } else { Kind::Did },
                    event: c.event.clone(),
                    op: CountOp::from_code(c.count_op).ok_or("unknown count operator")?,
                    count: c.count,
                    range: String::new(),
                    range_ns: c.range_nanos,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Definition { logic: if p.any { Logic::Or } else { Logic::And }, conditions }.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_survives_a_query_plan() {
        let c =
            |kind, op, range_ns| Condition { kind, event: "e".into(), op, count: 3, range: String::new(), range_ns };
        let def = Definition {
            logic: Logic::Or,
            conditions: vec![c(Kind::Did, CountOp::Ne, 10), c(Kind::DidNot, CountOp::Lt, 20)],
        };
        assert_eq!(Definition::try_from(&CohortDefinition::from(&def)), Ok(def));
    }

    #[test]
    fn a_plan_with_no_conditions_or_an_unknown_operator_is_refused() {
        assert!(Definition::try_from(&CohortDefinition { any: false, conditions: vec![] }).is_err());
        let bad = CohortCondition { did_not: false, event: "e".into(), count_op: 99, count: 1, range_nanos: 1 };
        assert!(Definition::try_from(&CohortDefinition { any: false, conditions: vec![bad] }).is_err());
    }
}
