use proptest::prelude::*;

use super::*;
use crate::row::TraceSummary;

/// `parts` merged in the order of `order` (a permutation of their indices).
fn merged_in<P: Merge + Clone>(parts: &[P], order: &[usize]) -> P {
    merge_all(order.iter().map(|&i| parts[i].clone()))
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

impl Clone for CohortSizes {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl Clone for RetentionCohorts {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl Clone for ErrorGroups {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl Clone for TraceList {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

#[test]
fn groups_merge_counts_bounds_and_latest_sample() {
    let g = |count, first, last, trace: &str| ErrorGroup {
        fingerprint: "f".into(),
        count,
        first_unix_nanos: first,
        last_unix_nanos: last,
        sample_trace_id: trace.into(),
        sample_unix_nanos: last,
        ..Default::default()
    };
    let mut a = g(2, 10, 20, "t1");
    a.merge(g(3, 5, 30, "t2"));
    a.merge(g(1, 7, 40, ""));
    assert_eq!((a.count, a.first_unix_nanos, a.last_unix_nanos, a.sample_trace_id.as_str()), (6, 5, 40, "t2"));
}

#[test]
fn partials_of_another_kind_are_not_picked() {
    assert!(TraceList::pick(Partial::Logs(LogList::default())).is_none());
    let mine = Partial::Traces(TraceList(vec![TraceSummary::default()]));
    let list = merge_all(TraceList::pick(mine));
    assert_eq!(list.page(10).0.len(), 1);
}

#[test]
fn sums_ignore_entries_past_the_plan() {
    let sizes = merge_all([CohortSizes(vec![1, 2, 3]), CohortSizes(vec![10])]).fit(2);
    assert_eq!(sizes, [11, 2]);
    // No shard answered: zeros of the plan's shape.
    assert_eq!(CohortSizes::default().fit(2), [0, 0]);
}

#[test]
fn sketches_merge_whatever_shard_is_empty() {
    let stats = |values: &[f64]| {
        let mut s = Stats { count: values.len() as u64, ..Default::default() };
        for v in values {
            s.sketch.add(*v);
        }
        s
    };
    let mut a = Stats::default();
    a.merge(stats(&[1.0, 2.0]));
    a.merge(Stats::default());
    a.merge(stats(&[3.0, 4.0, 100.0]));
    assert_eq!((a.count, a.sketch.count()), (5, 5));
    assert_eq!(a.sketch.max(), Some(100.0));
    let q = a.sketch.quantile(0.5).unwrap();
    assert!((q - 3.0).abs() / 3.0 <= 0.01, "{q}");
}

proptest! {
    /// Sums per plan position do not depend on the order the shards are merged in.
    #[test]
    fn position_sums_merge_in_any_order(
        parts in proptest::collection::vec(proptest::collection::vec(0u64..1000, 0..6), 0..6),
        seed in any::<u64>(),
    ) {
        let sizes: Vec<CohortSizes> = parts.iter().cloned().map(CohortSizes).collect();
        let order: Vec<usize> = (0..parts.len()).collect();
        let want = merged_in(&sizes, &order).fit(4);
        prop_assert_eq!(merged_in(&sizes, &shuffled(parts.len(), seed)).fit(4), want.clone());
        // Grouped differently: (a + b) + (c + ...).
        let (left, right) = sizes.split_at(sizes.len() / 2);
        let mut grouped = merged_in(left, &(0..left.len()).collect::<Vec<_>>());
        grouped.merge(merged_in(right, &(0..right.len()).collect::<Vec<_>>()));
        prop_assert_eq!(grouped.fit(4), want.clone());
        for (k, n) in want.iter().enumerate() {
            prop_assert_eq!(*n, parts.iter().map(|p| p.get(k).copied().unwrap_or(0)).sum::<u64>());
        }

        let cohorts: Vec<RetentionCohorts> = parts
            .iter()
            .map(|p| RetentionCohorts(p.iter().map(|&n| RetentionCohort { size: n, returned: p.clone() }).collect()))
            .collect();
        prop_assert_eq!(
            merged_in(&cohorts, &shuffled(parts.len(), seed)).fit(3, 2),
            merged_in(&cohorts, &order).fit(3, 2)
        );
    }

    /// Error groups merge to the same groups in any shard order when occurrences differ in
    /// time (on equal times the first merged sample stays).
    #[test]
    fn error_groups_merge_in_any_order(
        shards in proptest::collection::vec(
            proptest::collection::vec((0u8..4, 1u64..5, 0i64..1000, any::<bool>()), 0..6), 1..5),
        seed in any::<u64>(),
    ) {
        let mut time = 0;
        let parts: Vec<ErrorGroups> = shards
            .iter()
            .map(|groups| {
                let mut out = ErrorGroups::default();
                for &(fp, count, first, traced) in groups {
                    time += 1;
                    let at = first * 100 + time;
                    out.add(ErrorGroup {
                        fingerprint: format!("f{fp}"),
                        count,
                        first_unix_nanos: at - 5,
                        last_unix_nanos: at,
                        sample_trace_id: if traced { format!("t{at}") } else { String::new() },
                        sample_unix_nanos: at,
                        recent: (0..count as i64)
                            .map(|i| ErrorOccurrence { unix_nanos: at - i, trace_id: format!("t{at}"), message: "m".into() })
                            .collect(),
                        ..Default::default()
                    });
                }
                out
            })
            .collect();
        let order: Vec<usize> = (0..parts.len()).collect();
        // Without a sample trace the sample time is not part of the answer.
        let shown = |groups: Vec<ErrorGroup>| -> Vec<ErrorGroup> {
            groups
                .into_iter()
                .map(|mut g| {
                    if g.sample_trace_id.is_empty() {
                        g.sample_unix_nanos = 0;
                    }
                    g
                })
                .collect()
        };
        let want = shown(merged_in(&parts, &order).sorted());
        prop_assert_eq!(shown(merged_in(&parts, &shuffled(parts.len(), seed)).sorted()), want.clone());
        for g in &want {
            prop_assert!(g.recent.len() <= RECENT);
            prop_assert!(g.recent.windows(2).all(|w| w[0].unix_nanos >= w[1].unix_nanos));
        }
    }

    /// A page of traces is the same whatever order the shards' lists arrive in.
    #[test]
    fn trace_pages_do_not_depend_on_shard_order(
        shards in proptest::collection::vec(proptest::collection::vec(0i64..20, 0..8), 1..5),
        limit in 1usize..10,
        seed in any::<u64>(),
    ) {
        let parts: Vec<TraceList> = shards
            .iter()
            .enumerate()
            .map(|(s, starts)| {
                TraceList(starts.iter().enumerate().map(|(i, &t)| TraceSummary {
                    trace_id: format!("{s}-{i}"),
                    start_unix_nanos: t,
                    ..Default::default()
                }).collect())
            })
            .collect();
        let order: Vec<usize> = (0..parts.len()).collect();
        let (want, more) = merged_in(&parts, &order).page(limit);
        let (got, got_more) = merged_in(&parts, &shuffled(parts.len(), seed)).page(limit);
        prop_assert_eq!(got, want.clone());
        prop_assert_eq!(got_more, more);
        prop_assert!(want.windows(2).all(|w| trace_key(&w[0]) > trace_key(&w[1])));
    }
}
