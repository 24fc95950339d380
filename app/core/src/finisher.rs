//! Batched finishes (SPEC §5): the calls of a worker process hand their observations to a
//! [`Finisher`], which writes everything queued in one clock read and one fenced statement
//! ([`DeliveryStore::finish_batch`]) and answers each call with its own result.
//!
//! A flush takes whatever is queued when it starts and, while that is fewer than [`GATHER_TARGET`],
//! waits for more, at most [`GATHER`] (5 ms) after its first finish: while one flush is on its way to
//! the database the next one fills, and a flush of a few rows — each a statement and a WAL flush of its
//! own — becomes rare (in the benchmark this cut PostgreSQL's CPU per delivery by about a third and
//! raised the drain by about half). A finish therefore waits at most [`GATHER`] plus the flushes ahead
//! of it — [`FLUSHERS`] statements of at most [`MAX_BATCH`] rows each — far inside the finish margin
//! the lease check keeps for it (`herald_domain::claim::FINISH_MARGIN`, 1 s). The call's answer is not
//! delayed by it: the finish comes after the call.
//!
//! The transition is computed here, at flush, from the clock read of the flush: the record stored
//! carries the `now` it was decided with, exactly as when each call read the clock itself.

use std::sync::{Arc, OnceLock};

use herald_domain::finish::FinishContext;
use herald_domain::{finish, AttemptToken, Jitter, Observation, TaskId, UserId};
use herald_ports::{Clock, DeliveryStore, FinishRecord, FinishResult, StoreError};
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::report::error_chain;

/// Statements writing finishes at the same time, per process. Two: one fills while the other is on
/// its way to the database.
pub const FLUSHERS: usize = 2;

/// The most finishes one statement writes.
pub const MAX_BATCH: usize = 256;

/// A flush with fewer finishes than this waits for more, at most [`GATHER`] after its first one.
pub const GATHER_TARGET: usize = 32;

/// How long a finish may wait for others to share its statement.
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(GATHER_MS);
const GATHER_MS: u64 = 5;

/// One call's observation, waiting to be written.
#[derive(Clone, Debug)]
pub struct PendingFinish {
    pub task_id: TaskId,
    pub user_id: UserId,
    pub token: AttemptToken,
    pub context: FinishContext,
    pub observation: Observation,
    pub detail: String,
}

type Reply = oneshot::Sender<Result<(FinishRecord, FinishResult), StoreError>>;
type Queue = Arc<Mutex<mpsc::UnboundedReceiver<(PendingFinish, Reply)>>>;

/// The per-process finish queue. The flushing tasks start with the first finish (inside the runtime)
/// and end when the finisher is dropped, after writing what was queued.
pub struct Finisher {
    store: Arc<dyn DeliveryStore>,
    clock: Arc<dyn Clock>,
    queue: OnceLock<mpsc::UnboundedSender<(PendingFinish, Reply)>>,
}

impl Finisher {
    #[must_use]
    pub fn new(store: Arc<dyn DeliveryStore>, clock: Arc<dyn Clock>) -> Finisher {
        Finisher { store, clock, queue: OnceLock::new() }
    }

    /// Writes `pending` with the next flush; answers the record written (with the flush's `now` and the
    /// transition decided at it) and whether the attempt still held its task.
    ///
    /// # Errors
    /// The flush's clock read or statement failed: nothing of this finish was written (or its answer was
    /// lost — a repeat is recognised, see [`DeliveryStore::finish`]); the caller may try again.
    pub async fn finish(&self, pending: PendingFinish) -> Result<(FinishRecord, FinishResult), StoreError> {
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.get_or_init(|| self.start());
        queue.send((pending, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    fn start(&self) -> mpsc::UnboundedSender<(PendingFinish, Reply)> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let receiver: Queue = Arc::new(Mutex::new(receiver));
        for _ in 0..FLUSHERS {
            tokio::spawn(flush_loop(Arc::clone(&self.store), Arc::clone(&self.clock), Arc::clone(&receiver)));
        }
        sender
    }
}

impl std::fmt::Debug for Finisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finisher").field("started", &self.queue.get().is_some()).finish_non_exhaustive()
    }
}

fn gone() -> StoreError {
    StoreError::Unknown(anyhow::anyhow!("the finish queue stopped"))
}

/// Takes the next batch: waits for one finish, then takes whatever else is queued, up to [`MAX_BATCH`];
/// while fewer than [`GATHER_TARGET`] are there, it waits for more, at most [`GATHER`] after the first.
/// `None` once the finisher is gone and the queue is empty.
async fn next_batch<T>(queue: &Mutex<mpsc::UnboundedReceiver<T>>, gather: std::time::Duration) -> Option<Vec<T>> {
    let mut receiver = queue.lock().await;
    let first = receiver.recv().await?;
    let deadline = tokio::time::Instant::now() + gather;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) if batch.len() >= GATHER_TARGET => break,
            Err(_) => match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(next)) => batch.push(next),
                Ok(None) | Err(_) => break,
            },
        }
    }
    Some(batch)
}

async fn flush_loop(store: Arc<dyn DeliveryStore>, clock: Arc<dyn Clock>, queue: Queue) {
    while let Some(batch) = next_batch(&queue, GATHER).await {
        let now = match clock.now().await {
            Ok(now) => now,
            Err(error) => {
                for (_, reply) in batch {
                    let _ = reply.send(Err(shared(&error)));
                }
                continue;
            }
        };
        let (pending, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let records: Vec<FinishRecord> = pending
            .into_iter()
            .map(|p| FinishRecord {
                transition: finish(&p.context, &p.observation, now, Jitter::from_bits(rand::random())),
                task_id: p.task_id,
                user_id: p.user_id,
                token: p.token,
                observation: p.observation,
                detail: p.detail,
                now,
            })
            .collect();
        match store.finish_batch(&records).await {
            Ok(results) if results.len() == records.len() => {
                for ((record, result), reply) in records.into_iter().zip(results).zip(replies) {
                    let _ = reply.send(result.map(|result| (record, result)));
                }
            }
            Ok(results) => {
                let error = StoreError::Unknown(anyhow::anyhow!(
                    "the store answered {} results for {} finishes",
                    results.len(),
                    records.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(shared(&error)));
                }
            }
            Err(error) => {
                for reply in replies {
                    let _ = reply.send(Err(shared(&error)));
                }
            }
        }
    }
}

/// The same failure for each finish of a failed flush: same kind, same message and causes.
fn shared(error: &StoreError) -> StoreError {
    let text = anyhow::anyhow!(std::error::Error::source(error).map(error_chain).unwrap_or_default());
    match error {
        StoreError::Unavailable(_) => StoreError::Unavailable(text),
        StoreError::Unknown(_) => StoreError::Unknown(text),
        StoreError::UserErased => StoreError::UserErased,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn queue_of(
        items: impl IntoIterator<Item = u32>,
    ) -> (mpsc::UnboundedSender<u32>, Mutex<mpsc::UnboundedReceiver<u32>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        for item in items {
            tx.send(item).expect("send");
        }
        (tx, Mutex::new(rx))
    }

    /// `next_batch`, failing the test instead of hanging when it would wait for its gather time.
    async fn batch(queue: &Mutex<mpsc::UnboundedReceiver<u32>>, gather: Duration) -> Option<Vec<u32>> {
        tokio::time::timeout(Duration::from_secs(30), next_batch(queue, gather)).await.expect("next_batch waited")
    }

    #[tokio::test]
    async fn enough_queued_finishes_go_at_once() {
        // The sender stays open and the gather time is an hour: only not waiting can answer.
        let (_tx, queue) = queue_of(0..40);
        assert_eq!(batch(&queue, HOUR).await.expect("batch").len(), 40);
    }

    #[tokio::test]
    async fn a_lone_finish_waits_for_company_for_the_gather_time_and_then_goes() {
        let (_tx, queue) = queue_of([7]);
        let started = Instant::now();
        assert_eq!(batch(&queue, Duration::from_millis(50)).await.expect("batch"), vec![7]);
        assert!(started.elapsed() >= Duration::from_millis(50), "it went without waiting");
    }

    #[tokio::test]
    async fn finishes_arriving_meanwhile_join_the_batch_up_to_the_maximum() {
        let (tx, queue) = queue_of([1]);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for i in 0..u32::try_from(MAX_BATCH).expect("size") + 10 {
                tx.send(100 + i).expect("send");
            }
            tx
        });
        let first = batch(&queue, HOUR).await.expect("batch");
        assert_eq!(first.len(), MAX_BATCH, "the late ones joined, up to the maximum, without waiting out the hour");
        assert_eq!(first[0], 1);
        let _tx = late.await.expect("sender");
        assert_eq!(batch(&queue, Duration::ZERO).await.expect("the rest").len(), 11);
    }

    #[tokio::test]
    async fn a_closed_empty_queue_ends_the_flusher() {
        let (tx, queue) = queue_of([]);
        drop(tx);
        assert!(batch(&queue, HOUR).await.is_none());
    }
}
