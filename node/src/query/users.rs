//! The users of one analytics query on one shard. Funnels, retention, active users and
//! cohorts group millions of rows by distinct id. [`Users`] numbers the ids densely as rows
//! come (keeping the ids in one string, not one allocation per user): the per-row work is a
//! lookup, and per-user state a flat vector indexed by that number. [`UserRows`] keeps each
//! row under the shard's number of its user (`segment::user_number`, read from the segments)
//! and groups them at the end, a cache-sized partition at a time, for queries that need no
//! names, only each user's rows.

use std::collections::HashSet;

use rustc_hash::FxHashSet;

use crate::segment::table::Strings;
use crate::segment::user_number::{IdHashes, Slots};
use crate::shard::ScanJob;

/// Distinct ids numbered 0, 1, 2… in the order first seen.
///
/// An id is known by 96 bits of its xxh3 hash, so a row's lookup never reads the id text of
/// earlier users (with millions of users, that read is a cache miss per row), and a table
/// slot with the user's number takes 16 bytes (four to a cache line: the table of a million
/// users is 32 MiB, and the lookups were the largest cost of a funnel). Two ids with the same
/// 96 bits would count as one user: among a billion ids the chance of any such pair is about
/// 6·10⁻¹² (ClickHouse's `uniqExact` makes the same kind of trade with 128 bits).
#[derive(Default)]
pub struct Users {
    numbers: Slots,
    /// Every id, concatenated; user `u`'s is `text[ends[u - 1]..ends[u]]`.
    text: String,
    ends: Vec<usize>,
    hashes: IdHashes,
}

impl Users {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of memory the table of users holds.
    pub fn bytes(&self) -> u64 {
        let slots = self.numbers.bytes();
        let entries = self.hashes.bytes();
        (slots + self.text.capacity() + self.ends.capacity() * std::mem::size_of::<usize>() + entries) as u64
    }

    /// The distinct id of user `u`.
    pub fn name(&self, u: u32) -> &str {
        let u = u as usize;
        &self.text[if u == 0 { 0 } else { self.ends[u - 1] }..self.ends[u]]
    }

    /// The number of `id` of the given hash, new if it was not seen yet (then it equals the
    /// previous `len()`).
    fn number_hashed(&mut self, id: &str, hash: u128) -> u32 {
        let next = self.len() as u32;
        let u = self.numbers.get_or_insert(hash, next);
        if u == next {
            self.text.push_str(id);
            self.ends.push(self.text.len());
        }
        u
    }

    /// Numbers the ids of a batch's column. The ids are hashed first, so that the table slot
    /// of a row some rows ahead is fetched while this one is looked up: with hundreds of
    /// thousands of users the slots are mostly out of cache, and the misses overlap instead of
    /// queueing. Segment rows are sorted by distinct id, so a row of the same user as the row
    /// before skips the lookup.
    pub fn numbers_of<'a>(&'a mut self, ids: Strings<'a>) -> impl Iterator<Item = u32> + 'a {
        const AHEAD: usize = 8;
        let hashes = self.hashes.of(&ids);
        let mut last: Option<(u128, u32)> = None;
        (0..hashes.len()).map(move |i| {
            if let Some(&h) = hashes.get(i + AHEAD) {
                self.numbers.prefetch(h);
            }
            let hash = hashes[i];
            match last {
                Some((prev, u)) if prev == hash => u,
                _ => {
                    let u = self.number_hashed(ids.value(i), hash);
                    last = Some((hash, u));
                    u
                }
            }
        })
    }
}

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

/// The numbers of a cohort's members, to admit users by number.
pub fn member_numbers(members: Option<&HashSet<String>>, job: &ScanJob) -> Option<FxHashSet<u32>> {
    members.map(|m| job.user_numbers(m.iter().map(String::as_str)).into_iter().collect())
}

#[cfg(test)]
mod tests {
    use arrow_array::StringArray;

    use super::*;

    fn number(users: &mut Users, id: &str) -> u32 {
        users.numbers_of(Strings::Plain(&StringArray::from(vec![id]))).next().unwrap()
    }

    #[test]
    fn numbers_are_dense_stable_and_give_back_the_ids() {
        let mut users = Users::default();
        let ids = StringArray::from(vec!["b", "b", "a", "", "b", "c"]);
        let numbers: Vec<u32> = users.numbers_of(Strings::Plain(&ids)).collect();
        assert_eq!(numbers, [0, 0, 1, 2, 0, 3]);
        assert_eq!([users.name(0), users.name(1), users.name(2), users.name(3)], ["b", "a", "", "c"]);
        assert_eq!(number(&mut users, "a"), 1);
        assert_eq!(users.len(), 4);
    }

    #[test]
    fn numbers_survive_the_table_growing() {
        let mut users = Users::default();
        let ids: Vec<String> = (0..5000).map(|i| format!("user-{i}")).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(number(&mut users, id), i as u32);
        }
        let column = StringArray::from_iter_values(ids.iter().rev());
        let again: Vec<u32> = users.numbers_of(Strings::Plain(&column)).collect();
        assert_eq!(again, (0..5000).rev().collect::<Vec<u32>>());
        assert_eq!((users.len(), users.name(4321)), (5000, "user-4321"));
    }

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
