//! Query plans and partials (`sextant_model::query`) and their messages. Partials move their
//! rows and strings across; latency sketches are encoded here and decoded (checked to merge)
//! on the way back.

use sextant_model::cohort::Definition;
use sextant_model::query::{
    ActiveDay, ActiveDays, ActiveUsersPlan, ApmPlan, CohortFilter, CohortMembers, CohortSizes, CohortSizesPlan,
    CohortUsersPlan, Cost, Endpoints, ErrorGroup, ErrorGroups, ErrorOccurrence, ErrorsPlan, EventBucket, EventBuckets,
    EventBucketsPlan, FunnelPlan, FunnelStep, FunnelSteps, HostBucket, HostSeries, HostSeriesPlan, HostsPlan, KeyedLog,
    LatestHosts, LogKey, LogList, LogSearchPlan, Mean, Merge, Partial, Plan, Refused, ReplayEvents, ReplayEventsPlan,
    ReplayListPlan, ReplaySession, ReplaySessions, RetentionCohort, RetentionCohorts, RetentionPlan, ServiceMap,
    ServiceMapPlan, ShardQuery, ShardReply, Stats, TraceKey, TraceList, TraceListPlan,
};
use sextant_model::row::LogLevel;
use sextant_model::sketch::LatencySketch;

use crate::{query_reply, query_request};

fn all<T, U: From<T>>(v: Vec<T>) -> Vec<U> {
    v.into_iter().map(U::from).collect()
}

fn sketch(bytes: &[u8]) -> Result<LatencySketch, String> {
    LatencySketch::decode_mergeable(bytes).map_err(|e| e.to_string())
}

// ------------------------------------------------------------------------------ request

impl From<ShardQuery> for crate::QueryRequest {
    fn from(q: ShardQuery) -> Self {
        let ShardQuery { group, project_id, from_unix_nanos, to_unix_nanos, max_rows, plan } = q;
        crate::QueryRequest { group, project_id, from_unix_nanos, to_unix_nanos, max_rows, plan: Some(plan.into()) }
    }
}

/// A plan received by a shard is checked like one a client sent (cohort definitions).
impl TryFrom<crate::QueryRequest> for ShardQuery {
    type Error = String;

    fn try_from(q: crate::QueryRequest) -> Result<Self, String> {
        let crate::QueryRequest { group, project_id, from_unix_nanos, to_unix_nanos, max_rows, plan } = q;
        let plan = plan.ok_or("the query has no plan")?.try_into()?;
        Ok(ShardQuery { group, project_id, from_unix_nanos, to_unix_nanos, max_rows, plan })
    }
}

fn cohort_to_wire(c: Option<CohortFilter>) -> Option<crate::CohortFilter> {
    c.map(|c| crate::CohortFilter { definition: Some((&c.definition).into()), at_unix_nanos: c.at_unix_nanos })
}

fn cohort_from_wire(c: crate::CohortFilter) -> Result<CohortFilter, String> {
    let definition = c.definition.as_ref().ok_or("a cohort needs a definition")?;
    Ok(CohortFilter { definition: definition.try_into()?, at_unix_nanos: c.at_unix_nanos })
}

fn optional_cohort(c: Option<crate::CohortFilter>) -> Result<Option<CohortFilter>, String> {
    c.map(cohort_from_wire).transpose()
}

impl From<Plan> for query_request::Plan {
    fn from(p: Plan) -> Self {
        use query_request::Plan as W;
        match p {
            Plan::Traces(p) => {
                let TraceListPlan { services, operation, errors_only, min_duration_nanos, limit, before } = p;
                let before =
                    before.map(|b| crate::TraceKey { start_unix_nanos: b.start_unix_nanos, trace_id: b.trace_id });
                W::Traces(crate::TraceListPlan { services, operation, errors_only, min_duration_nanos, limit, before })
            }
            Plan::Logs(p) => {
                let LogSearchPlan { services, levels, query, limit, before } = p;
                let levels = levels.into_iter().map(LogLevel::code).collect();
                W::Logs(crate::LogSearchPlan { services, levels, query, limit, before: before.map(Into::into) })
            }
            Plan::Apm(ApmPlan { services }) => W::Apm(crate::ApmPlan { services }),
            Plan::ServiceMap(ServiceMapPlan) => W::ServiceMap(crate::ServiceMapPlan {}),
            Plan::Errors(ErrorsPlan { services, fingerprint }) => {
                W::Errors(crate::ErrorsPlan { services, fingerprint })
            }
            Plan::Hosts(HostsPlan) => W::Hosts(crate::HostsPlan {}),
            Plan::HostSeries(HostSeriesPlan { hostname, step_nanos }) => {
                W::HostSeries(crate::HostSeriesPlan { hostname, step_nanos })
            }
            Plan::Replays(ReplayListPlan { distinct_id }) => W::Replays(crate::ReplayListPlan { distinct_id }),
            Plan::ReplayEvents(ReplayEventsPlan { session_id }) => {
                W::ReplayEvents(crate::ReplayEventsPlan { session_id })
            }
            Plan::EventBuckets(EventBucketsPlan { events, bucket_starts, cohort, counts_only }) => {
                W::EventBuckets(crate::EventBucketsPlan {
                    events,
                    bucket_starts,
                    cohort: cohort_to_wire(cohort),
                    counts_only,
                })
            }
            Plan::ActiveUsers(ActiveUsersPlan { day_starts, first_reported, cohort }) => {
                W::ActiveUsers(crate::ActiveUsersPlan { day_starts, first_reported, cohort: cohort_to_wire(cohort) })
            }
            Plan::Funnel(FunnelPlan { steps, window_nanos, strict, range_from, range_to, cohort }) => {
                W::Funnel(crate::FunnelPlan {
                    steps,
                    window_nanos,
                    strict,
                    range_from,
                    range_to,
                    cohort: cohort_to_wire(cohort),
                })
            }
            Plan::Retention(RetentionPlan {
                start_event,
                return_event,
                bucket_starts,
                cohorts,
                periods,
                first_time,
            }) => W::Retention(crate::RetentionPlan {
                start_event,
                return_event,
                bucket_starts,
                cohorts,
                periods,
                first_time,
            }),
            Plan::CohortSizes(CohortSizesPlan { cohorts, at_unix_nanos }) => W::CohortSizes(crate::CohortSizesPlan {
                cohorts: cohorts.iter().map(Into::into).collect(),
                at_unix_nanos,
            }),
            Plan::CohortUsers(CohortUsersPlan { cohort, after, limit }) => {
                W::CohortUsers(crate::CohortUsersPlan { cohort: cohort_to_wire(Some(cohort)), after, limit })
            }
        }
    }
}

impl TryFrom<query_request::Plan> for Plan {
    type Error = String;

    fn try_from(p: query_request::Plan) -> Result<Self, String> {
        use query_request::Plan as W;
        Ok(match p {
            W::Traces(p) => {
                let crate::TraceListPlan { services, operation, errors_only, min_duration_nanos, limit, before } = p;
                let before = before.map(|b| TraceKey { start_unix_nanos: b.start_unix_nanos, trace_id: b.trace_id });
                Plan::Traces(TraceListPlan { services, operation, errors_only, min_duration_nanos, limit, before })
            }
            W::Logs(p) => {
                let crate::LogSearchPlan { services, levels, query, limit, before } = p;
                let levels = levels.into_iter().map(LogLevel::from_code).collect();
                Plan::Logs(LogSearchPlan { services, levels, query, limit, before: before.map(Into::into) })
            }
            W::Apm(crate::ApmPlan { services }) => Plan::Apm(ApmPlan { services }),
            W::ServiceMap(crate::ServiceMapPlan {}) => Plan::ServiceMap(ServiceMapPlan),
            W::Errors(crate::ErrorsPlan { services, fingerprint }) => {
                Plan::Errors(ErrorsPlan { services, fingerprint })
            }
            W::Hosts(crate::HostsPlan {}) => Plan::Hosts(HostsPlan),
            W::HostSeries(crate::HostSeriesPlan { hostname, step_nanos }) => {
                Plan::HostSeries(HostSeriesPlan { hostname, step_nanos })
            }
            W::Replays(crate::ReplayListPlan { distinct_id }) => Plan::Replays(ReplayListPlan { distinct_id }),
            W::ReplayEvents(crate::ReplayEventsPlan { session_id }) => {
                Plan::ReplayEvents(ReplayEventsPlan { session_id })
            }
            W::EventBuckets(crate::EventBucketsPlan { events, bucket_starts, cohort, counts_only }) => {
                Plan::EventBuckets(EventBucketsPlan {
                    events,
                    bucket_starts,
                    cohort: optional_cohort(cohort)?,
                    counts_only,
                })
            }
            W::ActiveUsers(crate::ActiveUsersPlan { day_starts, first_reported, cohort }) => {
                Plan::ActiveUsers(ActiveUsersPlan { day_starts, first_reported, cohort: optional_cohort(cohort)? })
            }
            W::Funnel(crate::FunnelPlan { steps, window_nanos, strict, range_from, range_to, cohort }) => {
                Plan::Funnel(FunnelPlan {
                    steps,
                    window_nanos,
                    strict,
                    range_from,
                    range_to,
                    cohort: optional_cohort(cohort)?,
                })
            }
            W::Retention(crate::RetentionPlan {
                start_event,
                return_event,
                bucket_starts,
                cohorts,
                periods,
                first_time,
            }) => Plan::Retention(RetentionPlan {
                start_event,
                return_event,
                bucket_starts,
                cohorts,
                periods,
                first_time,
            }),
            W::CohortSizes(crate::CohortSizesPlan { cohorts, at_unix_nanos }) => Plan::CohortSizes(CohortSizesPlan {
                cohorts: cohorts.iter().map(Definition::try_from).collect::<Result<_, _>>()?,
                at_unix_nanos,
            }),
            W::CohortUsers(crate::CohortUsersPlan { cohort, after, limit }) => Plan::CohortUsers(CohortUsersPlan {
                cohort: cohort_from_wire(cohort.ok_or("a cohort is required")?)?,
                after,
                limit,
            }),
        })
    }
}

same_fields!(LogKey = LogKey <=> crate::LogKey { unix_nanos, group, content_hash, duplicate });

// ------------------------------------------------------------------------------ reply

impl From<ShardReply> for crate::QueryReply {
    fn from(r: ShardReply) -> Self {
        let (budget_exceeded, memory_budget_bytes, partial) = match r.partial {
            Ok(p) => (false, 0, Some(p.into())),
            Err(Refused::Rows) => (true, 0, None),
            Err(Refused::Memory { budget_bytes }) => (false, budget_bytes.max(1), None),
        };
        crate::QueryReply { rows_scanned: r.rows_scanned, budget_exceeded, memory_budget_bytes, partial }
    }
}

impl TryFrom<crate::QueryReply> for ShardReply {
    type Error = String;

    fn try_from(r: crate::QueryReply) -> Result<Self, String> {
        let partial = match (r.budget_exceeded, r.memory_budget_bytes, r.partial) {
            (true, _, _) => Err(Refused::Rows),
            (false, budget_bytes @ 1.., _) => Err(Refused::Memory { budget_bytes }),
            (false, 0, Some(p)) => Ok(p.try_into()?),
            (false, 0, None) => return Err("a shard answered without a partial".into()),
        };
        Ok(ShardReply { rows_scanned: r.rows_scanned, partial })
    }
}

same_fields!(Cost = Cost <=> crate::QueryCost { rows, bytes, stops_early });

fn stats(s: Stats) -> (u64, u64, f64, Vec<u8>) {
    (s.count, s.errors, s.sum_ms, s.sketch.encode())
}

impl From<Partial> for query_reply::Partial {
    fn from(p: Partial) -> Self {
        use query_reply::Partial as W;
        match p {
            Partial::Traces(TraceList(traces)) => W::Traces(crate::TraceListPartial { traces: all(traces) }),
            Partial::Logs(LogList(logs)) => W::Logs(crate::LogSearchPartial {
                logs: logs
                    .into_iter()
                    .map(|l| crate::KeyedLog { key: Some(l.key.into()), log: Some(l.log.into()) })
                    .collect(),
            }),
            Partial::Apm(Endpoints(map)) => W::Apm(crate::ApmPartial {
                endpoints: map
                    .into_iter()
                    .map(|((service, operation), s)| {
                        let (count, error_count, sum_ms, sketch) = stats(s);
                        crate::EndpointStats { service, operation, count, error_count, sum_ms, sketch }
                    })
                    .collect(),
            }),
            Partial::ServiceMap(ServiceMap { nodes, edges }) => W::ServiceMap(crate::ServiceMapPartial {
                nodes: nodes
                    .into_iter()
                    .map(|(service, s)| {
                        let (span_count, error_count, _, sketch) = stats(s);
                        crate::ServiceStats { service, span_count, error_count, sketch }
                    })
                    .collect(),
                edges: edges
                    .into_iter()
                    .map(|((source, target), s)| {
                        let (call_count, error_count, _, sketch) = stats(s);
                        crate::EdgeStats { source, target, call_count, error_count, sketch }
                    })
                    .collect(),
            }),
            Partial::Errors(ErrorGroups(groups)) => {
                W::Errors(crate::ErrorsPartial { groups: groups.into_values().map(Into::into).collect() })
            }
            Partial::Hosts(LatestHosts(latest)) => {
                W::Hosts(crate::HostsPartial { latest: latest.into_values().map(Into::into).collect() })
            }
            Partial::HostSeries(HostSeries(buckets)) => {
                W::HostSeries(crate::HostSeriesPartial { buckets: buckets.into_values().map(Into::into).collect() })
            }
            Partial::Replays(ReplaySessions(sessions)) => {
                W::Replays(crate::ReplayListPartial { sessions: all(sessions) })
            }
            Partial::ReplayEvents(ReplayEvents(events)) => {
                W::ReplayEvents(crate::ReplayEventsPartial { events: all(events) })
            }
            Partial::EventBuckets(EventBuckets(buckets)) => W::EventBuckets(crate::EventBucketsPartial {
                buckets: buckets
                    .into_iter()
                    .map(|b| crate::EventBucket { count: b.count, unique_users: b.unique_users })
                    .collect(),
            }),
            Partial::ActiveUsers(ActiveDays(days)) => W::ActiveUsers(crate::ActiveUsersPartial {
                days: days.into_iter().map(|d| crate::ActiveDay { dau: d.dau, wau: d.wau, mau: d.mau }).collect(),
            }),
            Partial::Funnel(FunnelSteps(steps)) => W::Funnel(crate::FunnelPartial {
                steps: steps
                    .into_iter()
                    .map(|s| crate::FunnelStep {
                        users: s.users,
                        seconds_sketch: s.seconds.encode(),
                        seconds_sum: s.seconds_sum,
                    })
                    .collect(),
            }),
            Partial::Retention(RetentionCohorts(cohorts)) => W::Retention(crate::RetentionPartial {
                cohorts: cohorts
                    .into_iter()
                    .map(|c| crate::RetentionCohort { size: c.size, returned: c.returned })
                    .collect(),
            }),
            Partial::CohortSizes(CohortSizes(sizes)) => W::CohortSizes(crate::CohortSizesPartial { sizes }),
            Partial::CohortUsers(CohortMembers(distinct_ids)) => {
                W::CohortUsers(crate::CohortUsersPartial { distinct_ids })
            }
        }
    }
}

impl TryFrom<query_reply::Partial> for Partial {
    type Error = String;

    fn try_from(p: query_reply::Partial) -> Result<Self, String> {
        use query_reply::Partial as W;
        Ok(match p {
            W::Traces(p) => Partial::Traces(TraceList(all(p.traces))),
            W::Logs(p) => Partial::Logs(LogList(
                p.logs
                    .into_iter()
                    .map(|l| {
                        let log = l.log.ok_or("a log line without its record")?;
                        Ok(KeyedLog { key: l.key.unwrap_or_default().into(), log: log.into() })
                    })
                    .collect::<Result<_, String>>()?,
            )),
            W::Apm(p) => {
                let mut out = Endpoints::default();
                for e in p.endpoints {
                    let s =
                        Stats { count: e.count, errors: e.error_count, sum_ms: e.sum_ms, sketch: sketch(&e.sketch)? };
                    out.0.entry((e.service, e.operation)).or_default().merge(s);
                }
                Partial::Apm(out)
            }
            W::ServiceMap(p) => {
                let mut out = ServiceMap::default();
                for n in p.nodes {
                    let s =
                        Stats { count: n.span_count, errors: n.error_count, sum_ms: 0.0, sketch: sketch(&n.sketch)? };
                    out.nodes.entry(n.service).or_default().merge(s);
                }
                for e in p.edges {
                    let s =
                        Stats { count: e.call_count, errors: e.error_count, sum_ms: 0.0, sketch: sketch(&e.sketch)? };
                    out.edges.entry((e.source, e.target)).or_default().merge(s);
                }
                Partial::ServiceMap(out)
            }
            W::Errors(p) => {
                let mut out = ErrorGroups::default();
                for g in p.groups {
                    out.add(g.into());
                }
                Partial::Errors(out)
            }
            W::Hosts(p) => {
                let mut out = LatestHosts::default();
                for m in p.latest {
                    out.offer(m.into());
                }
                Partial::Hosts(out)
            }
            W::HostSeries(p) => {
                let mut out = HostSeries::default();
                for b in p.buckets {
                    let b = HostBucket::from(b);
                    out.0
                        .entry(b.start_unix_nanos)
                        .or_insert_with(|| HostBucket { start_unix_nanos: b.start_unix_nanos, ..Default::default() })
                        .merge(b);
                }
                Partial::HostSeries(out)
            }
            W::Replays(p) => Partial::Replays(ReplaySessions(all(p.sessions))),
            W::ReplayEvents(p) => Partial::ReplayEvents(ReplayEvents(all(p.events))),
            W::EventBuckets(p) => Partial::EventBuckets(EventBuckets(
                p.buckets.into_iter().map(|b| EventBucket { count: b.count, unique_users: b.unique_users }).collect(),
            )),
            W::ActiveUsers(p) => Partial::ActiveUsers(ActiveDays(
                p.days.into_iter().map(|d| ActiveDay { dau: d.dau, wau: d.wau, mau: d.mau }).collect(),
            )),
            W::Funnel(p) => Partial::Funnel(FunnelSteps(
                p.steps
                    .into_iter()
                    .map(|s| {
                        Ok(FunnelStep {
                            users: s.users,
                            seconds: sketch(&s.seconds_sketch)?,
                            seconds_sum: s.seconds_sum,
                        })
                    })
                    .collect::<Result<_, String>>()?,
            )),
            W::Retention(p) => Partial::Retention(RetentionCohorts(
                p.cohorts.into_iter().map(|c| RetentionCohort { size: c.size, returned: c.returned }).collect(),
            )),
            W::CohortSizes(p) => Partial::CohortSizes(CohortSizes(p.sizes)),
            W::CohortUsers(p) => Partial::CohortUsers(CohortMembers(p.distinct_ids)),
        })
    }
}

impl From<ErrorGroup> for crate::ErrorGroup {
    fn from(g: ErrorGroup) -> Self {
        let ErrorGroup {
            fingerprint,
            service,
            kind,
            message,
            count,
            first_unix_nanos,
            last_unix_nanos,
            sample_trace_id,
            sample_unix_nanos,
            source,
            recent,
        } = g;
        crate::ErrorGroup {
            fingerprint,
            service,
            r#type: kind,
            message,
            count,
            first_unix_nanos,
            last_unix_nanos,
            sample_trace_id,
            source,
            sample_unix_nanos,
            recent: recent
                .into_iter()
                .map(|o| crate::ErrorOccurrence { unix_nanos: o.unix_nanos, trace_id: o.trace_id, message: o.message })
                .collect(),
        }
    }
}

impl From<crate::ErrorGroup> for ErrorGroup {
    fn from(g: crate::ErrorGroup) -> Self {
        let crate::ErrorGroup {
            fingerprint,
            service,
            r#type,
            message,
            count,
            first_unix_nanos,
            last_unix_nanos,
            sample_trace_id,
            source,
            sample_unix_nanos,
            recent,
        } = g;
        ErrorGroup {
            fingerprint,
            service,
            kind: r#type,
            message,
            count,
            first_unix_nanos,
            last_unix_nanos,
            sample_trace_id,
            sample_unix_nanos,
            source,
            recent: recent
                .into_iter()
                .map(|o| ErrorOccurrence { unix_nanos: o.unix_nanos, trace_id: o.trace_id, message: o.message })
                .collect(),
        }
    }
}

fn mean_to_wire(m: Option<Mean>) -> Option<crate::Mean> {
    m.map(|m| crate::Mean { sum: m.sum, count: m.count })
}

fn mean_from_wire(m: Option<crate::Mean>) -> Option<Mean> {
    m.map(|m| Mean { sum: m.sum, count: m.count })
}

same_fields!(HostBucket = HostBucket <=> crate::HostBucket {
    start_unix_nanos;
    cpu_percent: mean_to_wire, mean_from_wire;
    memory_used_bytes: mean_to_wire, mean_from_wire;
    memory_total_bytes: mean_to_wire, mean_from_wire;
    disk_used_percent: mean_to_wire, mean_from_wire;
    network_rx_bytes_per_sec: mean_to_wire, mean_from_wire;
    network_tx_bytes_per_sec: mean_to_wire, mean_from_wire;
});

same_fields!(ReplaySession = ReplaySession <=> crate::ReplaySession {
    session_id, distinct_id, start_unix_nanos, end_unix_nanos, event_count, size_bytes,
});

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::cohort::{Condition, CountOp, Kind, Logic};

    fn definition() -> Definition {
        let c = Condition {
            kind: Kind::Did,
            event: "e".into(),
            op: CountOp::Ge,
            count: 2,
            range: String::new(),
            range_ns: 9,
        };
        Definition { logic: Logic::And, conditions: vec![c] }
    }

    #[test]
    fn plans_survive_the_wire() {
        let cohort = Some(CohortFilter { definition: definition(), at_unix_nanos: 7 });
        let plans = [
            Plan::Traces(TraceListPlan {
                services: vec!["a".into()],
                operation: "op".into(),
                errors_only: true,
                min_duration_nanos: 3,
                limit: 4,
                before: Some(TraceKey { start_unix_nanos: 5, trace_id: "t".into() }),
            }),
            Plan::Logs(LogSearchPlan {
                services: vec![],
                levels: vec![LogLevel::Warn, LogLevel::Fatal],
                query: "q".into(),
                limit: 2,
                before: Some(LogKey { unix_nanos: 1, group: 2, content_hash: 3, duplicate: 4 }),
            }),
            Plan::Funnel(FunnelPlan {
                steps: vec!["a".into(), "b".into()],
                window_nanos: 1,
                strict: true,
                range_from: 2,
                range_to: 3,
                cohort: cohort.clone(),
            }),
            Plan::CohortSizes(CohortSizesPlan { cohorts: vec![definition()], at_unix_nanos: 8 }),
            Plan::CohortUsers(CohortUsersPlan {
                cohort: CohortFilter { definition: definition(), at_unix_nanos: 7 },
                after: "x".into(),
                limit: 3,
            }),
            Plan::ActiveUsers(ActiveUsersPlan { day_starts: vec![1, 2], first_reported: 1, cohort }),
            Plan::ServiceMap(ServiceMapPlan),
        ];
        for plan in plans {
            let q = ShardQuery {
                group: 3,
                project_id: "p".into(),
                from_unix_nanos: 1,
                to_unix_nanos: 2,
                max_rows: 9,
                plan: plan.clone(),
            };
            assert_eq!(ShardQuery::try_from(crate::QueryRequest::from(q.clone())), Ok(q));
        }
    }

    #[test]
    fn a_plan_without_its_cohort_definition_is_refused() {
        let mut wire = crate::QueryRequest::from(ShardQuery {
            group: 1,
            project_id: "p".into(),
            from_unix_nanos: 1,
            to_unix_nanos: 2,
            max_rows: 1,
            plan: Plan::CohortUsers(CohortUsersPlan {
                cohort: CohortFilter { definition: definition(), at_unix_nanos: 7 },
                after: String::new(),
                limit: 1,
            }),
        });
        if let Some(query_request::Plan::CohortUsers(p)) = &mut wire.plan {
            p.cohort.as_mut().unwrap().definition = None;
        }
        assert!(ShardQuery::try_from(wire.clone()).is_err());
        wire.plan = None;
        assert!(ShardQuery::try_from(wire).is_err());
    }

    #[test]
    fn partials_survive_the_wire_and_a_budget_reply_has_none() {
        let mut sketch = LatencySketch::default();
        sketch.add(12.5);
        let stats = Stats { count: 1, errors: 1, sum_ms: 12.5, sketch };
        let apm = Endpoints([(("s".to_owned(), "o".to_owned()), stats)].into_iter().collect());
        let reply = ShardReply { rows_scanned: 4, partial: Ok(Partial::Apm(apm)) };
        let back = ShardReply::try_from(crate::QueryReply::from(reply)).unwrap();
        let Ok(Partial::Apm(Endpoints(map))) = back.partial else { panic!("apm expected") };
        let s = &map[&("s".to_owned(), "o".to_owned())];
        assert_eq!((s.count, s.errors, s.sum_ms, s.sketch.count(), back.rows_scanned), (1, 1, 12.5, 1, 4));

        let over = crate::QueryReply::from(ShardReply { rows_scanned: 9, partial: Err(Refused::Rows) });
        assert!(over.budget_exceeded);
        assert_eq!(ShardReply::try_from(over).unwrap().partial.err(), Some(Refused::Rows));
        let memory = Refused::Memory { budget_bytes: 1 << 30 };
        let over = crate::QueryReply::from(ShardReply { rows_scanned: 9, partial: Err(memory) });
        assert_eq!(ShardReply::try_from(over).unwrap().partial.err(), Some(memory));
        let empty =
            crate::QueryReply { rows_scanned: 0, budget_exceeded: false, memory_budget_bytes: 0, partial: None };
        assert!(ShardReply::try_from(empty).is_err());
        let bad = query_reply::Partial::Funnel(crate::FunnelPartial {
            steps: vec![crate::FunnelStep { users: 1, seconds_sketch: vec![1, 2, 3], seconds_sum: 0.0 }],
        });
        assert!(Partial::try_from(bad).is_err());
    }
}
