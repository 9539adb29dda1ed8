//! Reads under overload: a router runs at most so many reads at once and lets a bounded
//! number wait for a place, each for a bounded time; past either a read is 503 `overloaded`
//! with `Retry-After: 1` at once, instead of queueing until its deadline (504). Ingest is
//! bounded by the body budget (`body`), each project's share (`ingest::admission`) and the
//! shards' write queues (`sextant_node::admission`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::error::ApiError;

/// Longest wait for a place before a read is refused: well inside the read timeout, so that
/// a refused read is answered quickly and a client can retry elsewhere.
pub const READ_QUEUE_WAIT: Duration = Duration::from_secs(2);

pub struct ReadSlots {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
}

impl ReadSlots {
    pub fn new(max_running: usize, queue: usize) -> Self {
        Self { running: Arc::new(Semaphore::new(max_running.max(1))), waiting: AtomicUsize::new(0), queue }
    }

    /// A place to run a read, waiting at most `wait` if the queue has room.
    pub async fn enter(&self, wait: Duration) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::ReadsOverloaded);
        }
        let got = tokio::time::timeout(wait, self.running.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match got {
            Ok(Ok(p)) => Ok(p),
            _ => Err(ApiError::ReadsOverloaded),
        }
    }

    /// Reads running now.
    pub fn running(&self, max_running: usize) -> usize {
        max_running.max(1) - self.running.available_permits()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_past_the_running_and_waiting_bounds_are_refused_at_once() {
        let slots = Arc::new(ReadSlots::new(2, 1));
        let a = slots.enter(READ_QUEUE_WAIT).await.unwrap();
        let _b = slots.enter(READ_QUEUE_WAIT).await.unwrap();
        let s = slots.clone();
        let waiter = tokio::spawn(async move { s.enter(READ_QUEUE_WAIT).await.map(|_| ()) });
        while slots.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        let started = tokio::time::Instant::now();
        assert!(matches!(slots.enter(READ_QUEUE_WAIT).await, Err(ApiError::ReadsOverloaded)));
        assert!(started.elapsed() < READ_QUEUE_WAIT, "a full queue refuses without waiting");
        drop(a);
        waiter.await.unwrap().expect("the waiter gets the place given back");
        assert_eq!(slots.waiting(), 0);
    }

    #[tokio::test]
    async fn a_read_that_waits_too_long_is_refused_after_the_wait() {
        let slots = ReadSlots::new(1, 10);
        let _held = slots.enter(READ_QUEUE_WAIT).await.unwrap();
        let wait = Duration::from_millis(50);
        let started = tokio::time::Instant::now();
        assert!(matches!(slots.enter(wait).await, Err(ApiError::ReadsOverloaded)));
        assert!(started.elapsed() >= wait);
        assert_eq!(slots.waiting(), 0);
        assert_eq!(slots.running(1), 1);
    }
}
