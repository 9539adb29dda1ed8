//! The users of one analytics query on one shard. Funnels, retention, active users and
//! cohorts group millions of rows by distinct id. [`Users`] numbers the ids densely as rows
//! come (keeping the ids in one string, not one allocation per user): the per-row work is a
//! lookup, and per-user state a flat vector indexed by that number. [`UserRows`] keeps each
//! row under its id's hash and groups them at the end, a cache-sized partition at a time,
//! for queries that need no names, only each user's rows.

use std::collections::HashSet;

use arrow_array::Array;
use xxhash_rust::xxh3::xxh3_128;

use crate::segment::table::Strings;

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

/// The xxh3-128 hash of each row's distinct id, column by column. A dictionary column's
/// entries are hashed once, and only those rows use (a filtered batch keeps its row group's
/// whole dictionary), in a table kept from batch to batch: one sized to each dictionary costs
/// more in fresh pages than the hashing it saves.
#[derive(Default)]
pub struct IdHashes {
    /// Columns numbered (from 1) by [`of`](Self::of), and the hash of each dictionary entry,
    /// with the column it was computed for.
    column: u64,
    entry_hashes: Vec<(u64, u128)>,
}

impl IdHashes {
    pub fn of(&mut self, ids: &Strings<'_>) -> Vec<u128> {
        match ids {
            Strings::Plain(a) => (0..a.len()).map(|i| xxh3_128(a.value(i).as_bytes())).collect(),
            Strings::Dictionary { keys, values } => {
                self.column += 1;
                let (column, entries) = (self.column, &mut self.entry_hashes);
                if entries.len() < values.len() {
                    entries.resize(values.len(), (0, 0));
                }
                keys.iter()
                    .map(|&k| {
                        let entry = &mut entries[k as usize];
                        if entry.0 != column {
                            *entry = (column, xxh3_128(values.value(k as usize).as_bytes()));
                        }
                        entry.1
                    })
                    .collect()
            }
        }
    }

    /// Bytes of memory the table of entry hashes holds.
    fn bytes(&self) -> usize {
        self.entry_hashes.len() * std::mem::size_of::<(u64, u128)>()
    }
}

impl Users {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of memory the table of users holds.
    pub fn bytes(&self) -> u64 {
        let slots = self.numbers.slots.len() * std::mem::size_of::<Slot>();
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

/// The table of [`Users`]: id hashes (96 of their bits) to user numbers, open addressing
/// with linear probing, at most half full. Not a `HashMap`, for [`prefetch`](Self::prefetch).
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    used: usize,
}

#[derive(Clone, Copy)]
struct Slot {
    low: u64,
    high: u32,
    user: u32,
}

const EMPTY: Slot = Slot { low: 0, high: 0, user: u32::MAX };

impl Slots {
    fn home(&self, hash: u128) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    /// Asks the CPU to bring `hash`'s slot into cache (a hint: no effect on the result).
    fn prefetch(&self, hash: u128) {
        #[cfg(target_arch = "x86_64")]
        if !self.slots.is_empty() {
            let slot: *const Slot = &self.slots[self.home(hash)];
            // SAFETY: a prefetch reads nothing and never faults; the pointer is into `slots`.
            #[allow(unused_unsafe)]
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(slot.cast());
            }
        }
    }

    /// The user of `hash`; `next` when it is not in the table yet (then inserted).
    fn get_or_insert(&mut self, hash: u128, next: u32) -> u32 {
        if (self.used + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let (low, high) = (hash as u64, (hash >> 64) as u32);
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let slot = &mut self.slots[i];
            if slot.user == EMPTY.user {
                *slot = Slot { low, high, user: next };
                self.used += 1;
                return next;
            }
            if slot.low == low && slot.high == high {
                return slot.user;
            }
            i = (i + 1) & mask;
        }
    }

    /// An empty table that takes `users` users without growing.
    fn with_room(users: usize) -> Self {
        Slots { slots: vec![EMPTY; (users * 2).max(1024).next_power_of_two()], used: 0 }
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(1024);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; size]);
        self.used = 0;
        for slot in old.into_iter().filter(|s| s.user != EMPTY.user) {
            let hash = slot.low as u128 | (slot.high as u128) << 64;
            self.get_or_insert(hash, slot.user);
        }
    }
}

/// Values grouped by user: each user's values together, in the order they were given.
pub struct ByUser<T> {
    /// User `u`'s values are `values[starts[u]..starts[u + 1]]`.
    starts: Vec<usize>,
    values: Vec<T>,
}

impl<T: Copy + Default> ByUser<T> {
    /// Groups `(user, value)` rows of `users` users (a counting sort: two passes, no hashing).
    pub fn group(users: usize, rows: &[(u32, T)]) -> Self {
        let mut starts = vec![0usize; users + 1];
        for &(u, _) in rows {
            starts[u as usize + 1] += 1;
        }
        for u in 0..users {
            starts[u + 1] += starts[u];
        }
        let mut next = starts.clone();
        let mut values = vec![T::default(); rows.len()];
        for &(u, v) in rows {
            values[next[u as usize]] = v;
            next[u as usize] += 1;
        }
        ByUser { starts, values }
    }

    /// Each user's values (possibly none), by user number; mutable, so that they can be sorted
    /// in place.
    pub fn each_mut(&mut self) -> impl Iterator<Item = (u32, &mut [T])> {
        let mut rest = self.values.as_mut_slice();
        self.starts.windows(2).enumerate().map(move |(u, w)| {
            let (mine, others) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            rest = others;
            (u as u32, mine)
        })
    }
}

/// Values keyed by user (the 96 bits of the distinct id's hash that [`Users`] knows an id
/// by), grouped per user at the end. Rows go to one of many partitions by their hash as they
/// come, and each partition is grouped on its own with a table of its users that stays in
/// cache: numbering every row in one table of all the users costs a cache miss per row once
/// there are hundreds of thousands of them.
pub struct UserRows<T> {
    partitions: Vec<Vec<Keyed<T>>>,
    /// A row's partition is the top bits of its hash: `high >> shift`.
    shift: u32,
}

#[derive(Clone, Copy)]
struct Keyed<T> {
    low: u64,
    high: u32,
    value: T,
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
        UserRows { partitions: (0..count).map(|_| Vec::with_capacity(each)).collect(), shift: 32 - count.ilog2() }
    }

    pub fn push(&mut self, hash: u128, value: T) {
        let (low, high) = (hash as u64, (hash >> 64) as u32);
        let partition = ((high as u64) >> self.shift) as usize;
        self.partitions[partition].push(Keyed { low, high, value });
    }

    pub fn len(&self) -> usize {
        self.partitions.iter().map(Vec::len).sum()
    }

    /// Bytes of memory the rows take (grouping adds about one partition's worth at a time).
    pub fn bytes(&self) -> u64 {
        (self.len() * std::mem::size_of::<Keyed<T>>()) as u64
    }

    /// Calls `f` once per user with the user's hash (its 96 bits, see [`user_key`]) and
    /// values, in the order they were pushed (mutable, so that they can be sorted in place).
    pub fn each_user(self, mut f: impl FnMut(u128, &mut [T])) {
        let (mut of_row, mut keys, mut starts, mut grouped) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rows in self.partitions {
            let mut users = Slots::with_room(rows.len());
            keys.clear();
            of_row.clear();
            for r in &rows {
                let hash = r.low as u128 | (r.high as u128) << 64;
                let next = keys.len() as u32;
                let u = users.get_or_insert(hash, next);
                if u == next {
                    keys.push(hash);
                }
                of_row.push(u);
            }
            // A counting sort by user number, stable.
            starts.clear();
            starts.resize(keys.len() + 1, 0usize);
            for &u in &of_row {
                starts[u as usize + 1] += 1;
            }
            for u in 0..keys.len() {
                starts[u + 1] += starts[u];
            }
            grouped.clear();
            grouped.resize(rows.len(), T::default());
            let mut next = starts.clone();
            for (r, &u) in rows.iter().zip(&of_row) {
                grouped[next[u as usize]] = r.value;
                next[u as usize] += 1;
            }
            for (u, &hash) in keys.iter().enumerate() {
                f(hash, &mut grouped[starts[u]..starts[u + 1]]);
            }
        }
    }
}

/// The 96 bits of an id's hash a user is known by ([`Users`], [`UserRows`]).
pub fn user_key(hash: u128) -> u128 {
    hash & ((1 << 96) - 1)
}

/// The keys of a cohort's members (see [`user_key`]), to admit users by hash.
pub fn member_keys(members: Option<&HashSet<String>>) -> Option<rustc_hash::FxHashSet<u128>> {
    members.map(|m| m.iter().map(|id| user_key(xxh3_128(id.as_bytes()))).collect())
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
        /// the order pushed, under the hash of the user's id.
        #[test]
        fn user_rows_group_every_users_values_in_order(
            rows in proptest::collection::vec((0u16..300, proptest::num::u32::ANY), 0..2000),
            expected in 0u64..100_000,
        ) {
            let mut grouped = UserRows::new(expected);
            let mut want: std::collections::BTreeMap<u128, Vec<u32>> = Default::default();
            for &(user, value) in &rows {
                let hash = xxh3_128(format!("user-{user}").as_bytes());
                grouped.push(hash, value);
                want.entry(user_key(hash)).or_default().push(value);
            }
            proptest::prop_assert_eq!(grouped.len(), rows.len());
            let mut got: std::collections::BTreeMap<u128, Vec<u32>> = Default::default();
            grouped.each_user(|hash, values| {
                assert!(got.insert(hash, values.to_vec()).is_none(), "a user came twice");
            });
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn grouping_keeps_each_users_values_in_order() {
        let mut g = ByUser::group(4, &[(2, 'a'), (0, 'b'), (2, 'c'), (3, 'd'), (0, 'e')]);
        let groups: Vec<(u32, Vec<char>)> = g.each_mut().map(|(u, v)| (u, v.to_vec())).collect();
        assert_eq!(groups, [(0, vec!['b', 'e']), (1, vec![]), (2, vec!['a', 'c']), (3, vec!['d'])]);
    }
}
