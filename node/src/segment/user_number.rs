//! User numbers: each distinct id of a shard's events gets a small integer (0, 1, 2… in the
//! order first numbered), stored beside the id in events segments (the [`USER`] column), so
//! that per-user queries read four bytes a row and index per-user state by it instead of
//! decoding and hashing every row's id (docs/ARCHITECTURE.md, "User numbers").
//!
//! Numbers belong to one replica's applied state and are not replicated: a flush or a
//! compaction numbers the users of the rows it writes; open and a snapshot install rebuild the
//! table from the segments (keeping the numbers stored there, and numbering the users of
//! segments written before numbers were stored). Reads of rows without numbers (the buffer,
//! older segments) number them through the same table, so every row of a user reads one
//! number. A query reads the segments of one replica, so numbers need only agree within it.

use std::sync::{Arc, RwLock};

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use xxhash_rust::xxh3::xxh3_128;

use super::table::{Cols, Strings};

/// The column of events segments holding each row's user number.
pub const USER: &str = "user";
/// The column a scan reads in place of [`USER`] where a source has no numbers.
pub const USER_ID: &str = "distinct_id";

/// A shard's table of distinct ids (by hash) to user numbers. Shared by the shard's writers
/// (flush, compaction) and readers; replaced whole when a snapshot is installed.
#[derive(Default)]
pub struct UserNumbers {
    table: RwLock<Numbered>,
}

/// The largest number given (`u32::MAX` marks an empty slot).
const LAST: u32 = u32::MAX - 1;

#[derive(Default)]
struct Numbered {
    slots: Slots,
    /// The number the next new user gets: one past the largest given.
    next: u32,
}

impl Numbered {
    /// Records a number stored in a segment. False when the user already has another one (a
    /// segment that disagrees with the others; the first number stays) or the number is the
    /// empty slots' mark (a corrupted segment).
    fn keep(&mut self, hash: u128, number: u32) -> bool {
        if number > LAST {
            return false;
        }
        let u = self.slots.get_or_insert(hash, number);
        self.next = self.next.max((number + 1).min(LAST));
        u == number
    }

    fn number(&mut self, hash: u128) -> u32 {
        let next = self.next;
        let u = self.slots.get_or_insert(hash, next);
        if u == next {
            // Past four billion users a shard's last users share the last number.
            self.next = (next + 1).min(LAST);
        }
        u
    }
}

impl UserNumbers {
    /// The number of each hash (see [`IdHashes`]), new ones for users not numbered yet.
    /// Hashes are looked up a few ahead of use: with a million users the slots are mostly out
    /// of cache, and the misses overlap instead of queueing. Equal neighbours (rows sorted by
    /// id) are looked up once.
    pub fn numbers(&self, hashes: &[u128]) -> Vec<u32> {
        const AHEAD: usize = 8;
        let mut table = self.table.write().unwrap();
        let mut out = Vec::with_capacity(hashes.len());
        let mut last: Option<(u128, u32)> = None;
        for (i, &hash) in hashes.iter().enumerate() {
            if let Some(&h) = hashes.get(i + AHEAD) {
                table.slots.prefetch(h);
            }
            let u = match last {
                Some((prev, u)) if prev == hash => u,
                _ => table.number(hash),
            };
            last = Some((hash, u));
            out.push(u);
        }
        out
    }

    /// Users numbered.
    pub fn len(&self) -> usize {
        self.table.read().unwrap().slots.used
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes of the table.
    pub fn heap_bytes(&self) -> usize {
        self.table.read().unwrap().slots.slots.len() * std::mem::size_of::<Slot>()
    }

    /// The table of the users in `segments` (events segments; others are skipped): first the
    /// numbers they store, then new numbers for the users of segments that store none.
    pub fn rebuild(segments: &[Arc<super::Segment>]) -> std::io::Result<UserNumbers> {
        let mut table = Numbered::default();
        let events = || segments.iter().filter(|s| s.meta.table == super::Table::Events);
        let mut disagreeing = 0u64;
        for segment in events().filter(|s| s.has_user_numbers()) {
            segment.each_user(|hashes, numbers| {
                let mut last = None;
                for (&h, &u) in hashes.iter().zip(numbers.unwrap_or_default()) {
                    if last != Some(h) {
                        disagreeing += u64::from(!table.keep(h, u));
                        last = Some(h);
                    }
                }
            })?;
        }
        for segment in events().filter(|s| !s.has_user_numbers()) {
            segment.each_user(|hashes, _| {
                for &h in hashes {
                    table.number(h);
                }
            })?;
        }
        if disagreeing > 0 {
            tracing::error!(users = disagreeing, "segments give users different numbers; the first number is kept");
        }
        Ok(UserNumbers { table: RwLock::new(table) })
    }
}

/// Adds [`USER`] to batches read without it: numbers each row's [`USER_ID`] through the
/// shard's table (the column is dropped unless the scan asked for it too).
pub struct Numbering {
    users: Arc<UserNumbers>,
    hashes: IdHashes,
    keep_ids: bool,
}

impl Numbering {
    pub fn new(users: Arc<UserNumbers>, keep_ids: bool) -> Self {
        Numbering { users, hashes: IdHashes::default(), keep_ids }
    }

    /// The numbers of `ids` (numbered now if new).
    pub fn numbers_of<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<u32> {
        self.users.numbers(&ids.map(id_hash).collect::<Vec<_>>())
    }

    pub fn add(&mut self, mut rb: RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let schema = rb.schema();
        if schema.index_of(USER).is_ok() {
            return Ok(rb);
        }
        let Ok(ids) = schema.index_of(USER_ID) else { return Ok(rb) };
        let hashes = self.hashes.of(&Cols(&rb).strings(USER_ID));
        let numbers = self.users.numbers(&hashes);
        if !self.keep_ids {
            rb.remove_column(ids);
        }
        with_user_column(&rb, numbers)
    }
}

pub fn user_field() -> Field {
    Field::new(USER, DataType::UInt32, false)
}

/// `rb` with `numbers` (one per row) as its last column, [`USER`].
pub fn with_user_column(rb: &RecordBatch, numbers: Vec<u32>) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let fields = rb.schema().fields().iter().cloned().chain([Arc::new(user_field())]).collect::<Vec<_>>();
    let columns = rb.columns().iter().cloned().chain([Arc::new(UInt32Array::from(numbers)) as ArrayRef]).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
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
    pub fn bytes(&self) -> usize {
        self.entry_hashes.len() * std::mem::size_of::<(u64, u128)>()
    }
}

/// A table from id hashes (96 of their bits: two ids sharing them count as one user; among a
/// billion ids the chance of any such pair is about 6·10⁻¹²) to numbers. Open addressing with
/// linear probing, at most half full, 16 bytes a slot. Not a `HashMap`, for
/// [`prefetch`](Self::prefetch).
#[derive(Default)]
pub struct Slots {
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
    pub fn prefetch(&self, hash: u128) {
        if !self.slots.is_empty() {
            super::prefetch::line(&self.slots[self.home(hash)]);
        }
    }

    /// The number of `hash`; `next` when it is not in the table yet (then inserted).
    pub fn get_or_insert(&mut self, hash: u128, next: u32) -> u32 {
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

    /// Bytes of the table.
    pub fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
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

/// The hash of a distinct id as [`IdHashes`] computes it.
pub fn id_hash(id: &str) -> u128 {
    xxh3_128(id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_dense_stable_and_kept_numbers_move_the_next_one_past_them() {
        let users = UserNumbers::default();
        let h = |id: &str| id_hash(id);
        assert_eq!(users.numbers(&[h("b"), h("b"), h("a"), h("b"), h("c")]), [0, 0, 1, 0, 2]);
        let mut kept = Numbered::default();
        assert!(kept.keep(h("x"), 7) && kept.keep(h("x"), 7));
        assert!(!kept.keep(h("x"), 3), "a second number for the same user is refused");
        let again = UserNumbers { table: RwLock::new(kept) };
        assert_eq!(again.numbers(&[h("x"), h("y")]), [7, 8]);
        let many: Vec<u128> = (0..5000).map(|i| h(&format!("user-{i}"))).collect();
        let first = users.numbers(&many);
        assert_eq!(users.numbers(&many), first, "numbers survive the table growing");
        assert_eq!((users.len(), first[4999]), (5003, 5002));
    }
}
