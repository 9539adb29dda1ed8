//! Funnel semantics (docs/API.md, "Funnels"), per user: the furthest step reached by any chain
//! t1 ≤ t2 ≤ … ≤ tk with tk − t1 ≤ window, where step 1 falls inside the range. `Ordered`
//! allows other events between steps (ClickHouse `windowFunnel`); `Strict` requires the steps
//! to be consecutive events of the user, nothing in between, not even a repeated step. Events
//! with equal timestamps are taken in step order, other events after them.
//!
//! Pure functions of one user's events: shards run them (a user's events all live on one
//! shard) and the router only sums. Shards see millions of events, so the work is done on
//! [`StepEvent`]s (an event name is reduced to a step index once) without allocating per user.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Ordered,
    Strict,
}

/// Built by [`Funnel::new`], which derives what the per-event work looks up.
#[derive(Clone, Debug)]
pub struct Funnel {
    pub steps: Vec<String>,
    pub window_ns: i64,
    pub order: Order,
    /// Step 1 must fall in `[from_ns, to_ns)`.
    pub from_ns: i64,
    pub to_ns: i64,
    /// `next_same[s]`: the next step after `s` with the same name, or [`NOT_A_STEP`] (looked up
    /// for every event; comparing the names each time was a tenth of a funnel's time).
    next_same: [u8; MAX_STEPS],
    /// `first_of[s]`: the first step with the name of step `s` (strict funnels).
    first_of: [u8; MAX_STEPS],
}

pub const MIN_STEPS: usize = 2;
pub const MAX_STEPS: usize = 10;

/// One event of a user: its time and [`Funnel::step_of`] its name.
pub type StepEvent = (i64, u8);

/// What [`Funnel::step_of`] gives for a name that is no step.
pub const NOT_A_STEP: u8 = u8::MAX;

/// The times of a chain of steps (`times()[k]` is when step k+1 happened), without allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    times: [i64; MAX_STEPS],
    len: usize,
}

impl Chain {
    pub fn times(&self) -> &[i64] {
        &self.times[..self.len]
    }

    fn extended(mut self, t: i64) -> Chain {
        self.times[self.len] = t;
        self.len += 1;
        self
    }

    fn start(t: i64) -> Chain {
        Chain::default().extended(t)
    }
}

impl Funnel {
    /// `steps`: 2 to [`MAX_STEPS`] names (a name may come back as a later step).
    pub fn new(steps: Vec<String>, window_ns: i64, order: Order, from_ns: i64, to_ns: i64) -> Funnel {
        let (mut next_same, mut first_of) = ([NOT_A_STEP; MAX_STEPS], [NOT_A_STEP; MAX_STEPS]);
        for s in 0..steps.len().min(MAX_STEPS) {
            if let Some(n) = (s + 1..steps.len()).find(|&n| steps[n] == steps[s]) {
                next_same[s] = n as u8;
            }
            first_of[s] = steps.iter().position(|name| *name == steps[s]).map_or(NOT_A_STEP, |f| f as u8);
        }
        Funnel { steps, window_ns, order, from_ns, to_ns, next_same, first_of }
    }

    /// Whether a later step has the first step's name (then an event of that name may stand
    /// for more than the start).
    pub fn repeats_first_step(&self) -> bool {
        self.next_same[0] != NOT_A_STEP
    }

    /// The first step named `name` (a name may stand for several steps), or [`NOT_A_STEP`].
    pub fn step_of(&self, name: &str) -> u8 {
        self.steps.iter().position(|s| s == name).map_or(NOT_A_STEP, |k| k as u8)
    }

    /// The next step after `step` with the same name.
    fn next_same(&self, step: usize) -> Option<usize> {
        Some(self.next_same[step]).filter(|&s| s != NOT_A_STEP).map(usize::from)
    }

    /// The first step an event of step `first` at `t` can stand for: step 1 only inside the
    /// range, else the next step of the same name, if any.
    fn first_match(&self, first: u8, t: i64) -> Option<usize> {
        let first = first as usize;
        if first >= self.steps.len() {
            return None;
        }
        if first == 0 && !(self.from_ns..self.to_ns).contains(&t) {
            return self.next_same(0);
        }
        Some(first)
    }

    /// The times of the furthest chain of one user (`chain[k]` is when step k+1 happened),
    /// empty when step 1 was never reached. `events` are (time, name) in any order.
    pub fn progress(&self, events: &[(i64, &str)]) -> Vec<i64> {
        let mut steps: Vec<StepEvent> = events.iter().map(|&(t, e)| (t, self.step_of(e))).collect();
        self.progress_of_steps(&mut steps).times().to_vec()
    }

    /// [`progress`](Self::progress) of events given as [`StepEvent`]s, in any order (they are
    /// sorted in place).
    pub fn progress_of_steps(&self, events: &mut [StepEvent]) -> Chain {
        match self.order {
            Order::Ordered => self.ordered(events),
            Order::Strict => self.strict(events),
        }
    }

    fn ordered(&self, events: &mut [StepEvent]) -> Chain {
        // Equal times in step order (by the first step an event matches). One event never
        // stands for two consecutive steps: its steps are tried from the last one down, as
        // ClickHouse's windowFunnel does. An event matches its first step and every later step
        // of the same name.
        for e in events.iter_mut() {
            e.1 = self.first_match(e.1, e.0).map_or(NOT_A_STEP, |s| s as u8);
        }
        events.sort_unstable();
        // chains[k]: the chain reaching step k+1 that started latest (the most window left).
        let mut chains: [Option<Chain>; MAX_STEPS] = [None; MAX_STEPS];
        let mut best = Chain::default();
        let mut matched = [0usize; MAX_STEPS];
        for &(t, first) in events.iter() {
            if first == NOT_A_STEP {
                continue;
            }
            let mut n = 0;
            let mut s = Some(first as usize);
            while let Some(step) = s {
                matched[n] = step;
                n += 1;
                s = self.next_same(step);
            }
            for &s in matched[..n].iter().rev() {
                let chain = if s == 0 {
                    Some(Chain::start(t))
                } else {
                    chains[s - 1].filter(|c| t - c.times[0] <= self.window_ns).map(|c| c.extended(t))
                };
                if let Some(c) = chain {
                    if c.len > best.len {
                        best = c;
                    }
                    chains[s] = Some(c);
                }
            }
        }
        best
    }

    fn strict(&self, events: &mut [StepEvent]) -> Chain {
        // Equal times: events of a step in step order, then the others.
        events.sort_unstable();
        // A step matches the events of the first step with its name.
        let first_of = &self.first_of;
        let mut best = Chain::default();
        for start in 0..events.len() {
            let (t0, k0) = events[start];
            if k0 != 0 || !(self.from_ns..self.to_ns).contains(&t0) {
                continue;
            }
            let mut chain = Chain::start(t0);
            for &(t, k) in &events[start + 1..] {
                let step = chain.len;
                if step == self.steps.len() || k != first_of[step] || t - t0 > self.window_ns {
                    break;
                }
                chain = chain.extended(t);
            }
            if chain.len > best.len {
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
        Funnel::new(steps.iter().map(|s| s.to_string()).collect(), window, order, 0, 100)
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

    /// The implementation before [`StepEvent`]s (names compared as strings, a vector per
    /// event): the reference the property test holds the current one to.
    mod reference {
        use super::super::Funnel;

        fn matches(f: &Funnel, step: usize, event: &str, t: i64) -> bool {
            f.steps[step] == event && (step > 0 || (f.from_ns..f.to_ns).contains(&t))
        }

        pub fn ordered(f: &Funnel, events: &[(i64, &str)]) -> Vec<i64> {
            let mut marked: Vec<(i64, usize, Vec<usize>)> = events
                .iter()
                .filter_map(|&(t, e)| {
                    let steps: Vec<usize> = (0..f.steps.len()).filter(|&s| matches(f, s, e, t)).collect();
                    let first = *steps.first()?;
                    Some((t, first, steps))
                })
                .collect();
            marked.sort_unstable();
            let mut chains: Vec<Option<Vec<i64>>> = vec![None; f.steps.len()];
            let mut best: Vec<i64> = Vec::new();
            for (t, _, steps) in marked {
                for &s in steps.iter().rev() {
                    let chain = if s == 0 {
                        Some(vec![t])
                    } else {
                        chains[s - 1].as_ref().filter(|c| t - c[0] <= f.window_ns).map(|c| {
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

        pub fn strict(f: &Funnel, events: &[(i64, &str)]) -> Vec<i64> {
            let rank = |e: &str| f.steps.iter().position(|s| s == e).unwrap_or(f.steps.len());
            let mut sorted: Vec<(i64, usize, &str)> = events.iter().map(|&(t, e)| (t, rank(e), e)).collect();
            sorted.sort_unstable();
            let mut best: Vec<i64> = Vec::new();
            for start in 0..sorted.len() {
                let (t0, _, e0) = sorted[start];
                if !matches(f, 0, e0, t0) {
                    continue;
                }
                let mut chain = vec![t0];
                for &(t, _, e) in &sorted[start + 1..] {
                    let step = chain.len();
                    if step == f.steps.len() || !matches(f, step, e, t) || t - t0 > f.window_ns {
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

    proptest::proptest! {
        /// Few names and times, so that repeated steps, names in several steps, equal times,
        /// range and window boundaries all come up.
        #[test]
        fn step_events_give_the_chains_of_the_reference(
            steps in proptest::collection::vec(0u8..4, MIN_STEPS..=5),
            events in proptest::collection::vec((0i64..40, 0u8..6), 0..24),
            window in 0i64..15,
            from in 0i64..20,
            strict in proptest::bool::ANY,
        ) {
            let name = |k: u8| format!("e{k}");
            let f = Funnel::new(
                steps.iter().map(|&k| name(k)).collect(),
                window,
                if strict { Order::Strict } else { Order::Ordered },
                from,
                from + 10,
            );
            let names: Vec<(i64, String)> = events.iter().map(|&(t, k)| (t, name(k))).collect();
            let refs: Vec<(i64, &str)> = names.iter().map(|(t, e)| (*t, e.as_str())).collect();
            let expected = if strict { reference::strict(&f, &refs) } else { reference::ordered(&f, &refs) };
            proptest::prop_assert_eq!(f.progress(&refs), expected);
        }
    }
}
