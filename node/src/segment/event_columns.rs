//! A buffer's events as columns: each row's time and its (project, event name) as a number,
//! brought up to date by the reads that use them (applying a row does not pay for them). A
//! scan of events that needs only times, names and user numbers builds its batches from these
//! without reaching the rows, whose text is scattered through memory.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use rustc_hash::FxHashMap;

use super::buffer::BufferedRow;
use super::table::Row;
use super::user_number::{user_field, USER};

/// The key of a row that is not an event.
const NOT_AN_EVENT: u32 = u32::MAX;

#[derive(Default)]
pub struct EventColumns {
    /// Per buffered row: its entry in `names`, or [`NOT_AN_EVENT`].
    keys: Vec<u32>,
    times: Vec<i64>,
    /// Each (project, event name) once, and per project where its names are in `names`.
    names: Vec<(Arc<str>, Box<str>)>,
    numbered: FxHashMap<Arc<str>, FxHashMap<Box<str>, u32>>,
}

impl EventColumns {
    /// Takes in the rows past those already covered.
    pub fn extend(&mut self, rows: &[BufferedRow]) {
        let new = rows.get(self.keys.len()..).unwrap_or_default();
        self.keys.reserve(new.len());
        self.times.reserve(new.len());
        let mut last: Option<(&Arc<str>, &str, u32)> = None;
        for r in new {
            let Row::Event(e) = &r.row else {
                self.keys.push(NOT_AN_EVENT);
                self.times.push(0);
                continue;
            };
            // A batch's events often share a name with the one before.
            let key = match last {
                Some((project, name, key)) if Arc::ptr_eq(project, &r.project) && name == e.event => key,
                _ => self.number(&r.project, &e.event),
            };
            last = Some((&r.project, &e.event, key));
            self.keys.push(key);
            self.times.push(e.unix_nanos);
        }
    }

    fn number(&mut self, project: &Arc<str>, name: &str) -> u32 {
        let names = self.numbered.entry(project.clone()).or_default();
        if let Some(&key) = names.get(name) {
            return key;
        }
        let key = self.names.len() as u32;
        self.names.push((project.clone(), name.into()));
        names.insert(name.into(), key);
        key
    }

    /// The rows at `positions` (covered, of any table) that are events of `project` in
    /// `[from_ns, to_ns)` named one of `events` (any name when empty), as batches of `time_ns`,
    /// `event` (a dictionary of the project's names only) and, given user numbers, [`USER`].
    pub fn select(
        &self,
        positions: impl Iterator<Item = u32>,
        project: &str,
        events: &[String],
        (from_ns, to_ns): (i64, i64),
        users: Option<&[u32]>,
    ) -> Vec<RecordBatch> {
        // Each entry's key in the project's dictionary, or -1 for an entry not selected.
        let mut values: Vec<&str> = Vec::new();
        let dictionary: Vec<i32> = self
            .names
            .iter()
            .map(|(p, name)| {
                if **p != *project || !(events.is_empty() || events.iter().any(|e| **e == **name)) {
                    return -1;
                }
                values.push(name);
                values.len() as i32 - 1
            })
            .collect();
        let values: ArrayRef = Arc::new(StringArray::from(values));
        let live: Vec<(u32, i32)> = positions
            .filter_map(|i| {
                let key = *self.keys.get(i as usize)?;
                let in_project = *dictionary.get(key as usize)?;
                let t = self.times[i as usize];
                (in_project >= 0 && t >= from_ns && t < to_ns).then_some((i, in_project))
            })
            .collect();
        let mut fields = vec![
            Field::new("time_ns", DataType::Int64, false),
            Field::new("event", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), false),
        ];
        if users.is_some() {
            fields.push(user_field());
        }
        let schema = Arc::new(Schema::new(fields));
        const CHUNK: usize = 8192;
        live.chunks(CHUNK)
            .map(|chunk| {
                let times = Int64Array::from_iter_values(chunk.iter().map(|&(i, _)| self.times[i as usize]));
                let keys = Int32Array::from_iter_values(chunk.iter().map(|&(_, k)| k));
                let names = DictionaryArray::<Int32Type>::try_new(keys, values.clone()).expect("keys index the names");
                let mut columns: Vec<ArrayRef> = vec![Arc::new(times), Arc::new(names)];
                if let Some(users) = users {
                    columns
                        .push(Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|&(i, _)| users[i as usize]))));
                }
                RecordBatch::try_new(schema.clone(), columns).expect("columns match their fields")
            })
            .collect()
    }

    /// Whether `column` is one that [`select`](Self::select) builds.
    pub fn builds(column: &str) -> bool {
        ["time_ns", "event", USER].contains(&column)
    }
}
