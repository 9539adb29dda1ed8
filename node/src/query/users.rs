//! The users of one analytics query on one shard. Funnels, retention, active users and
//! cohorts group millions of rows by user, each read as the shard's number of its distinct id
//! (`segment::user_number`): per-user state is a flat vector indexed by that number.
//! [`UserRows`] keeps each row under its user's number and groups them at the end, a
//! cache-sized partition at a time, for queries that need each user's rows.

/// Values keyed by user number, grouped per user at the end. Rows go to one of many
/// partitions by their number's low bits as they come, and each partition is grouped on its
/// own by a counting sort over its users, whose counts stay in cache: grouping all the rows at
/// once costs a cache miss per row once there are hundreds of thousands of users.
pub struct UserRows<T> {
    partitions: Vec<Partition<T>>,
    /// A row's partition is the low bits of its user's number: `user & mask`.
    mask: u32,
}

struct Partition<T> {
    users: Vec<u32>,
    values: Vec<T>,
}

/// Rows a partition is meant to hold, for `UserRows::new`'s expected count.
const PARTITION_ROWS: u64 = 4096;
/// Rows reserved up front at most, over all partitions (address space, not memory, until used).
const MAX_RESERVED_ROWS: u64 = 1 << 24;

impl<T: Copy + Default> UserRows<T> {
    /// Room for about `expected` rows (an estimate: more or fewer may come).
    pub fn new(expected: u64) -> Self {
        let count = expected.div_ceil(PARTITION_ROWS).clamp(1, 1 << 12).next_power_of_two();
        let each = (expected.min(MAX_RESERVED_ROWS) / count) as usize;
        let partition = || Partition { users: Vec::with_capacity(each), values: Vec::with_capacity(each) };
        UserRows { partitions: (0..count).map(|_| partition()).collect(), mask: count as u32 - 1 }
    }

    pub fn push(&mut self, user: u32, value: T) {
        let p = &mut self.partitions[(user & self.mask) as usize];
        p.users.push(user);
        p.values.push(value);
    }

    pub fn len(&self) -> usize {
        self.partitions.iter().map(|p| p.users.len()).sum()
    }

    /// Bytes of memory the rows take (grouping adds about one partition's worth at a time).
    pub fn bytes(&self) -> u64 {
        (self.len() * (4 + std::mem::size_of::<T>())) as u64
    }

    /// Calls `f` once per user with its number and values, in the order they were pushed
    /// (mutable, so that they can be sorted in place).
    pub fn each_user(self, mut f: impl FnMut(u32, &mut [T])) {
        let shift = self.mask.count_ones();
        // A user's place in its partition: its number without the partition's bits.
        let local = |u: u32| (u >> shift) as usize;
        let (mut starts, mut grouped) = (Vec::new(), Vec::new());
        for (p, rows) in self.partitions.into_iter().enumerate() {
            let users = rows.users.iter().map(|&u| local(u) + 1).max().unwrap_or(0);
            starts.clear();
            starts.resize(users + 1, 0usize);
            for &u in &rows.users {
                starts[local(u) + 1] += 1;
            }
            for u in 0..users {
                starts[u + 1] += starts[u];
            }
            grouped.clear();
            grouped.resize(rows.values.len(), T::default());
            let mut next = starts.clone();
            for (&u, &v) in rows.users.iter().zip(&rows.values) {
                grouped[next[local(u)]] = v;
                next[local(u)] += 1;
            }
            for u in 0..users {
                if starts[u] < starts[u + 1] {
                    f(((u as u32) << shift) | p as u32, &mut grouped[starts[u]..starts[u + 1]]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the number of partitions, each user's values come once, together and in
        /// the order pushed, under the user's number.
        #[test]
        fn user_rows_group_every_users_values_in_order(
            rows in proptest::collection::vec((0u32..300, proptest::num::u32::ANY), 0..2000),
            spread in proptest::bool::ANY,
            expected in 0u64..100_000,
        ) {
            let mut grouped = UserRows::new(expected);
            let mut want: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
            for &(user, value) in &rows {
                // Numbers with gaps too (a partition holds every 2^k-th user).
                let user = if spread { user * 37 + 5 } else { user };
                grouped.push(user, value);
                want.entry(user).or_default().push(value);
            }
            proptest::prop_assert_eq!(grouped.len(), rows.len());
            let mut got: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
            grouped.each_user(|user, values| {
                assert!(got.insert(user, values.to_vec()).is_none(), "a user came twice");
            });
            proptest::prop_assert_eq!(got, want);
        }
    }
}
