//! Funnel semantics (DESIGN A8), per user: the furthest step reached by any chain
//! t1 ≤ t2 ≤ … ≤ tk with tk − t1 ≤ window, where step 1 falls inside the range. `Ordered`
//! allows other events between steps (ClickHouse `windowFunnel`); `Strict` requires the steps
//! to be consecutive events of the user, nothing in between, not even a repeated step. Events
//! with equal timestamps are taken in step order, other events after them.
//!
//! Pure functions of one user's events: shards run them (a user's events all live on one
//! shard) and the router only sums.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Ordered,
    Strict,
}

#[derive(Clone, Debug)]
pub struct Funnel {
    pub steps: Vec<String>,
    pub window_ns: i64,
    pub order: Order,
    /// Step 1 must fall in `[from_ns, to_ns)`.
    pub from_ns: i64,
    pub to_ns: i64,
}

pub const MIN_STEPS: usize = 2;
pub const MAX_STEPS: usize = 10;

impl Funnel {
    fn matches(&self, step: usize, event: &str, t: i64) -> bool {
        self.steps[step] == event && (step > 0 || (self.from_ns..self.to_ns).contains(&t))
    }

    /// The times of the furthest chain of one user (`chain[k]` is when step k+1 happened),
    /// empty when step 1 was never reached. `events` are (time, name) in any order.
    pub fn progress(&self, events: &[(i64, &str)]) -> Vec<i64> {
        match self.order {
            Order::Ordered => self.ordered(events),
            Order::Strict => self.strict(events),
        }
    }

    fn ordered(&self, events: &[(i64, &str)]) -> Vec<i64> {
        // Equal times in step order (by the first step an event matches). One event never
        // stands for two consecutive steps: its steps are tried from the last one down, as
        // ClickHouse's windowFunnel does.
        let mut marked: Vec<(i64, usize, Vec<usize>)> = events
            .iter()
            .filter_map(|&(t, e)| {
                let steps: Vec<usize> = (0..self.steps.len()).filter(|&s| self.matches(s, e, t)).collect();
                let first = *steps.first()?;
                Some((t, first, steps))
            })
            .collect();
        marked.sort_unstable();
        // chains[k]: the chain reaching step k+1 that started latest (the most window left).
        let mut chains: Vec<Option<Vec<i64>>> = vec![None; self.steps.len()];
        let mut best: Vec<i64> = Vec::new();
        for (t, _, steps) in marked {
            for &s in steps.iter().rev() {
                let chain = if s == 0 {
                    Some(vec![t])
                } else {
                    chains[s - 1].as_ref().filter(|c| t - c[0] <= self.window_ns).map(|c| {
                        let mut c = c.clone();
                        c.push(t);
                        c
                    })
                };
                if let Some(c) = chain {
                    if c.len() > best.len() {
                        best = c.clone();
                    }
                    chains[s] = Some(c);
                }
            }
        }
        best
    }

    fn strict(&self, events: &[(i64, &str)]) -> Vec<i64> {
        // Equal times: events of a step in step order, then the others.
        let rank = |e: &str| self.steps.iter().position(|s| s == e).unwrap_or(self.steps.len());
        let mut sorted: Vec<(i64, usize, &str)> = events.iter().map(|&(t, e)| (t, rank(e), e)).collect();
        sorted.sort_unstable();
        let mut best: Vec<i64> = Vec::new();
        for start in 0..sorted.len() {
            let (t0, _, e0) = sorted[start];
            if !self.matches(0, e0, t0) {
                continue;
            }
            let mut chain = vec![t0];
            for &(t, _, e) in &sorted[start + 1..] {
                let step = chain.len();
                if step == self.steps.len() || !self.matches(step, e, t) || t - t0 > self.window_ns {
                    break;
                }
                chain.push(t);
            }
            if chain.len() > best.len() {
                best = chain;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn funnel(steps: &[&str], window: i64, order: Order) -> Funnel {
        Funnel {
            steps: steps.iter().map(|s| s.to_string()).collect(),
            window_ns: window,
            order,
            from_ns: 0,
            to_ns: 100,
        }
    }

    fn reached(f: &Funnel, events: &[(i64, &str)]) -> usize {
        f.progress(events).len()
    }

    #[test]
    fn ordered_allows_other_events_and_respects_the_window() {
        let f = funnel(&["a", "b", "c"], 10, Order::Ordered);
        assert_eq!(reached(&f, &[(1, "a"), (2, "x"), (3, "b"), (4, "c")]), 3);
        assert_eq!(reached(&f, &[(1, "a"), (3, "b"), (12, "c")]), 2, "c is outside the window");
        // A later start leaves more window: a@5 b@8 c@15 completes.
        assert_eq!(reached(&f, &[(1, "a"), (5, "a"), (8, "b"), (15, "c")]), 3);
        assert_eq!(f.progress(&[(1, "a"), (5, "a"), (8, "b"), (15, "c")]), [5, 8, 15]);
        assert_eq!(reached(&f, &[(3, "b"), (4, "c")]), 0, "never started");
        assert_eq!(reached(&f, &[(150, "a"), (151, "b")]), 0, "step 1 outside the range");
        assert_eq!(reached(&f, &[(99, "a"), (105, "b")]), 2, "later steps may fall after the range");
        // Equal timestamps count in step order.
        assert_eq!(reached(&f, &[(5, "b"), (5, "a"), (5, "c")]), 3);
        // The window's boundary is included.
        assert_eq!(reached(&f, &[(0, "a"), (10, "b")]), 2);
    }

    #[test]
    fn strict_requires_consecutive_events() {
        let f = funnel(&["a", "b", "c"], 10, Order::Strict);
        assert_eq!(reached(&f, &[(1, "a"), (2, "b"), (3, "c")]), 3);
        assert_eq!(reached(&f, &[(1, "a"), (2, "x"), (3, "b")]), 1, "an event in between");
        assert_eq!(reached(&f, &[(1, "a"), (2, "a"), (3, "b")]), 2, "a repeated step restarts from the second a");
        assert_eq!(reached(&f, &[(1, "a"), (2, "b"), (2, "b"), (3, "c")]), 2, "not even a repeated step");
        // Equal times: steps in step order, others after them.
        assert_eq!(reached(&f, &[(5, "x"), (5, "b"), (5, "a"), (6, "c")]), 2);
        assert_eq!(reached(&f, &[(1, "a"), (2, "b"), (20, "c")]), 2, "window");
    }

    #[test]
    fn a_name_in_several_steps() {
        let ordered = funnel(&["a", "a", "b"], 10, Order::Ordered);
        assert_eq!(reached(&ordered, &[(1, "a"), (2, "a"), (3, "b")]), 3);
        assert_eq!(reached(&ordered, &[(1, "a"), (3, "b")]), 1, "one event never stands for two steps");
        let strict = funnel(&["a", "a", "b"], 10, Order::Strict);
        assert_eq!(reached(&strict, &[(1, "a"), (2, "a"), (3, "b")]), 3);
        assert_eq!(reached(&strict, &[(1, "a"), (3, "b")]), 1);
    }
}
