//! Names interned while grouping: readers refer to a service or an operation by a number, so
//! their tables hold no strings and a dictionary column is looked up once per key.

use arrow_array::Array;
use rustc_hash::FxHashMap;

use crate::segment::table::Strings;

#[derive(Default)]
pub struct Names {
    pub list: Vec<String>,
    index: FxHashMap<String, u32>,
    /// Per batch of a dictionary column: the number of each key, `u32::MAX` until a row has it.
    of_key: Vec<u32>,
}

impl Names {
    pub fn get(&mut self, name: &str) -> u32 {
        if let Some(&n) = self.index.get(name) {
            return n;
        }
        let n = self.list.len() as u32;
        self.list.push(name.to_owned());
        self.index.insert(name.to_owned(), n);
        n
    }

    pub fn name(&self, n: u32) -> &str {
        &self.list[n as usize]
    }

    /// The number of each of the `n` rows' names, into `out`; once per key for a dictionary.
    pub fn of_rows(&mut self, names: Strings<'_>, n: usize, out: &mut Vec<u32>) {
        out.clear();
        match names {
            Strings::Dictionary { keys, values } => {
                self.of_key.clear();
                self.of_key.resize(values.len(), u32::MAX);
                for &k in keys {
                    let mut s = self.of_key[k as usize];
                    if s == u32::MAX {
                        s = self.get(values.value(k as usize));
                        self.of_key[k as usize] = s;
                    }
                    out.push(s);
                }
            }
            Strings::Plain(_) => out.extend((0..n).map(|i| self.get(names.value(i)))),
        }
    }
}
