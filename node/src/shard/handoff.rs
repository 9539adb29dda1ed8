//! Rows a router in this process handed over with their payload
//! ([`Decoded`](sextant_proto::convert::persist_row::Decoded)), kept from the write's proposal
//! until its entry applies: apply then takes them instead of decoding the payload again.
//! Apply trusts them only for the very bytes of the entry it applies; anything else (a
//! follower, a retry over the network, a write that ended first) decodes the entry.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use sextant_model::row::{Encoded, RowBatch};
use sextant_proto::convert::persist_row::Decoded;

#[derive(Default)]
pub struct Handoffs(Mutex<FxHashMap<u128, Arc<Decoded>>>);

/// A hand-off held for a write: dropped when the write ends, it lets go of rows not taken.
pub struct Held {
    handoffs: Arc<Handoffs>,
    batch_id: u128,
    decoded: Arc<Decoded>,
}

impl Handoffs {
    pub fn hold(self: &Arc<Self>, batch_id: u128, decoded: Arc<Decoded>) -> Held {
        self.0.lock().unwrap().insert(batch_id, decoded.clone());
        Held { handoffs: self.clone(), batch_id, decoded }
    }

    /// The rows handed over for `batch_id`, if they came with this very `payload`.
    pub fn take(&self, batch_id: u128, payload: &[u8]) -> Option<RowBatch<Encoded>> {
        let decoded = self.0.lock().unwrap().remove(&batch_id)?;
        decoded.take_rows(payload)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut map = self.handoffs.0.lock().unwrap();
        if map.get(&self.batch_id).is_some_and(|d| Arc::ptr_eq(d, &self.decoded)) {
            map.remove(&self.batch_id);
        }
    }
}
