//! Group commit of submissions (SPEC §3): concurrent `create`s without a digest decision share one
//! statement and one commit.
//!
//! A submission's statement ([`create`](crate::create)'s `AT_ONCE`) costs PostgreSQL far more than its
//! rows: the executor, four triggers, the foreign-key checks and the commit, each paid once per statement.
//! Here a few flushers each take whatever submissions are queued when they start (at most
//! [`MAX_BATCH`]) and write them with [`AT_ONCE_MANY`]: the same rows as that many single statements
//! would write, in one statement. Nothing waits to fill a batch — a submission that finds a flusher free
//! goes at once, alone — so batches form only while statements are already on their way, and a quiet
//! service answers as fast as before.
//!
//! Each submission keeps its own answer:
//! * inserted: its notification and tasks, as the single statement answers them;
//! * its `(user_id, event_key)` existed (or came earlier in the same batch): the caller reads the stored
//!   one, exactly as a duplicate of the single statement does (`existing`);
//! * the batch's statement failed: nothing of it was written (one statement, one transaction), and each
//!   caller runs its own single statement, so one submission the database refuses — or a deadlock
//!   between two batches — never fails the others. A batch of one answers its error directly.
//!
//! Rows are inserted in `(user_id, event_key)` order, so two batches that share keys take their locks
//! in the same order and do not deadlock each other.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use herald_domain::{ChannelName, NotificationId, NotificationRef, TaskId, TaskState, Timestamp};
use herald_ports::store::{ChannelTable, Created, NewNotification, StoreError, TaskSummary};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::convert::{count_i32, store_error, to_db};
use crate::create;

/// Statements writing submissions at the same time, per store.
pub(crate) const FLUSHERS: usize = 4;

/// The most submissions one statement writes.
pub(crate) const MAX_BATCH: usize = 64;

/// What a queued submission learns from its flush.
enum Answer {
    Created(Created),
    /// Its notification exists: read it (a duplicate).
    Existing,
    /// The batch's statement failed and wrote nothing: write it alone.
    Alone,
    /// It was the batch's only submission, and its statement failed.
    Failed(StoreError),
}

struct Queued {
    new: NewNotification,
    channels: ChannelTable,
    now: Timestamp,
    reply: oneshot::Sender<Answer>,
}

type Queue = Arc<Mutex<mpsc::UnboundedReceiver<Queued>>>;

/// A store's submission queue; its flushers start with the first submission (inside the runtime) and
/// end when the last clone of the store is dropped.
#[derive(Debug, Default)]
pub(crate) struct CreateQueue {
    queue: OnceLock<mpsc::UnboundedSender<Queued>>,
}

impl CreateQueue {
    /// Stores `new` as [`create::create`] does when no digest decision is due, sharing the statement
    /// with the submissions queued meanwhile.
    pub(crate) async fn create(
        &self,
        pool: &PgPool,
        new: &NewNotification,
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Created, StoreError> {
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.get_or_init(|| start(pool));
        let queued = Queued { new: new.clone(), channels: channels.clone(), now, reply };
        if queue.send(queued).is_err() {
            return create::create(pool, new, channels, now).await;
        }
        match answer.await {
            Ok(Answer::Created(created)) => Ok(created),
            Ok(Answer::Existing) => create::existing(pool, new).await,
            Ok(Answer::Failed(error)) => Err(error),
            // A flusher that stopped before answering wrote nothing, or wrote it all: the single
            // statement then finds the notification and answers it as a duplicate.
            Ok(Answer::Alone) | Err(_) => create::create(pool, new, channels, now).await,
        }
    }
}

fn start(pool: &PgPool) -> mpsc::UnboundedSender<Queued> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let receiver: Queue = Arc::new(Mutex::new(receiver));
    for _ in 0..FLUSHERS {
        tokio::spawn(flush_loop(pool.clone(), Arc::clone(&receiver)));
    }
    sender
}

/// Waits for one submission, then takes whatever else is queued, up to [`MAX_BATCH`]; never waits for
/// more. `None` once the store is gone and the queue is empty.
async fn next_batch(queue: &Mutex<mpsc::UnboundedReceiver<Queued>>) -> Option<Vec<Queued>> {
    let mut receiver = queue.lock().await;
    let first = receiver.recv().await?;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    Some(batch)
}

async fn flush_loop(pool: PgPool, queue: Queue) {
    while let Some(batch) = next_batch(&queue).await {
        flush(&pool, batch).await;
    }
}

/// Splits `batch` into the submissions to write (the first of each `(user_id, event_key)`, in key
/// order) and the repeats of those within the batch, which are duplicates once the first is written.
fn split(batch: Vec<Queued>) -> (Vec<Queued>, Vec<Queued>) {
    let mut seen = HashSet::new();
    let (mut writes, mut repeats) = (Vec::with_capacity(batch.len()), Vec::new());
    for queued in batch {
        if seen.insert((queued.new.user_id.clone(), queued.new.event_key.clone())) {
            writes.push(queued);
        } else {
            repeats.push(queued);
        }
    }
    writes.sort_by(|a, b| (&a.new.user_id, &a.new.event_key).cmp(&(&b.new.user_id, &b.new.event_key)));
    (writes, repeats)
}

async fn flush(pool: &PgPool, batch: Vec<Queued>) {
    let (writes, repeats) = split(batch);
    if writes.len() == 1 && repeats.is_empty() {
        let only = writes.into_iter().next().expect("one submission");
        // A duplicate is read by its caller, as in a batch: the flusher only writes.
        let answer = match create::create_at_once(pool, &only.new, &only.channels, only.now).await {
            Ok(Some(created)) => Answer::Created(created),
            Ok(None) => Answer::Existing,
            Err(error) => Answer::Failed(error),
        };
        let _ = only.reply.send(answer);
        return;
    }
    match write(pool, &writes).await {
        Ok(mut answers) => {
            for (queued, created) in writes.into_iter().zip(answers.drain(..)) {
                let _ = queued.reply.send(created.map_or(Answer::Existing, Answer::Created));
            }
            for queued in repeats {
                let _ = queued.reply.send(Answer::Existing);
            }
        }
        Err(error) => {
            tracing::debug!(%error, submissions = writes.len() + repeats.len(), "a batch of submissions failed; each is written alone");
            for queued in writes.into_iter().chain(repeats) {
                let _ = queued.reply.send(Answer::Alone);
            }
        }
    }
}

/// `AT_ONCE` for many submissions, each row as that statement writes it: `$1`–`$7` the notifications'
/// columns (user, event key, body, thread, attempt budget, created, expires) pairwise, the ordinal of
/// each its position in them; `$8`–`$11` one row per (submission, configured channel): the submission's
/// ordinal, the channel, its attempt budget and its position among the channels; `$12` the submitting
/// service token of each notification, pairwise with `$1`. A task is written for
/// each channel the user has enabled. One row per task of an inserted notification (one with no task
/// when none was written); none for a notification that existed.
const AT_ONCE_MANY: &str = "WITH s AS ( \
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], \
                            $7::timestamptz[], $12::text[]) \
         WITH ORDINALITY AS s(user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, \
                              submitted_by, o)), \
     n AS ( \
       INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, \
         submitted_by) \
       SELECT user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, submitted_by \
       FROM s ORDER BY o \
       ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id, public_id, user_id, event_key), \
     ns AS (SELECT n.id, n.public_id, s.user_id, s.thread_key, s.created_at, s.o \
            FROM n JOIN s ON s.user_id = n.user_id AND s.event_key = n.event_key), \
     i AS (INSERT INTO inbox_item (user_id, notification_id, created_at) SELECT user_id, id, created_at FROM ns), \
     t AS ( \
       INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
         thread_key, digest_count, expires_at, created_at, updated_at) \
       SELECT ns.user_id, ns.id, c.name, 'PENDING', ns.created_at, c.budget, ns.thread_key, NULL, NULL, \
              ns.created_at, ns.created_at \
       FROM ns JOIN unnest($8::bigint[], $9::text[], $10::int[], $11::int[]) AS c(o, name, budget, position) \
         ON c.o = ns.o \
       JOIN channel_pref p ON p.user_id = ns.user_id AND p.channel = c.name AND p.enabled \
       ORDER BY ns.o, c.position \
       RETURNING id, notification_id, reference::text AS reference, channel) \
     SELECT ns.o, ns.id, ns.public_id, t.id AS task_id, t.reference, t.channel \
     FROM ns LEFT JOIN t ON t.notification_id = ns.id";

crate::rows::row! {
    struct ManyRow {
        o: i64,
        id: i64,
        public_id: uuid::Uuid,
        task_id: Option<i64>,
        reference: Option<String>,
        channel: Option<String>,
    }
}

/// Writes `writes` (distinct keys) in one statement; for each, what the single statement would have
/// answered: `Some` when inserted, `None` when it existed.
async fn write(pool: &PgPool, writes: &[Queued]) -> Result<Vec<Option<Created>>, StoreError> {
    let mut columns = Columns::default();
    for (ordinal, queued) in (1_i64..).zip(writes) {
        columns.push(ordinal, &queued.new, &queued.channels, queued.now);
    }
    let rows: Vec<ManyRow> = sqlx::query_as(AT_ONCE_MANY)
        .bind(columns.users)
        .bind(columns.keys)
        .bind(columns.bodies)
        .bind(columns.threads)
        .bind(columns.budgets)
        .bind(columns.created)
        .bind(columns.expires)
        .bind(columns.task_ordinals)
        .bind(columns.task_channels)
        .bind(columns.task_budgets)
        .bind(columns.task_positions)
        .bind(columns.submitters)
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let mut inserted: HashMap<i64, Created> = HashMap::new();
    for row in rows {
        let created = inserted.entry(row.o).or_insert_with(|| Created {
            notification_id: NotificationId(row.id),
            notification_ref: NotificationRef(row.public_id),
            created: true,
            tasks: Vec::new(),
            merged: Vec::new(),
            differs: Vec::new(),
        });
        if let (Some(task_id), Some(reference), Some(channel)) = (row.task_id, row.reference, row.channel) {
            created.tasks.push(TaskSummary {
                task_id: TaskId(task_id),
                reference,
                channel: ChannelName(channel),
                state: TaskState::Pending,
            });
        }
    }
    Ok((1_i64..)
        .zip(writes)
        .map(|(ordinal, queued)| {
            inserted.remove(&ordinal).map(|mut created| {
                // RETURNING follows no promised order: a submission's tasks are answered in channel order.
                created.tasks.sort_by_key(|t| queued.channels.0.iter().position(|(name, _)| *name == t.channel));
                created
            })
        })
        .collect())
}

/// The parameters of [`AT_ONCE_MANY`], column by column.
#[derive(Default)]
struct Columns {
    users: Vec<String>,
    keys: Vec<String>,
    bodies: Vec<String>,
    threads: Vec<Option<String>>,
    budgets: Vec<Option<i32>>,
    created: Vec<DateTime<Utc>>,
    expires: Vec<DateTime<Utc>>,
    task_ordinals: Vec<i64>,
    task_channels: Vec<String>,
    task_budgets: Vec<i32>,
    task_positions: Vec<i32>,
    submitters: Vec<Option<String>>,
}

impl Columns {
    fn push(&mut self, ordinal: i64, new: &NewNotification, channels: &ChannelTable, now: Timestamp) {
        self.users.push(new.user_id.as_str().to_owned());
        self.keys.push(new.event_key.as_str().to_owned());
        self.bodies.push(new.body.clone());
        self.threads.push(new.thread_key.as_ref().map(|k| k.as_str().to_owned()));
        self.budgets.push(new.max_attempts.map(count_i32));
        self.created.push(to_db(now));
        self.expires.push(to_db(now + new.ttl));
        self.submitters.push(new.submitted_by.clone());
        for ((name, rules), position) in channels.0.iter().zip(0_i32..) {
            self.task_ordinals.push(ordinal);
            self.task_channels.push(name.as_str().to_owned());
            self.task_budgets.push(count_i32(create::budget(new, rules)));
            self.task_positions.push(position);
        }
    }
}

#[cfg(test)]
mod tests {
    use herald_domain::{EventKey, Millis, UserId};

    use super::*;

    fn queued(user: &str, key: &str) -> (Queued, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let new = NewNotification {
            user_id: UserId::from(user),
            event_key: EventKey::from(key),
            body: "b".into(),
            ttl: Millis(1000),
            max_attempts: None,
            thread_key: None,
            submitted_by: None,
        };
        (Queued { new, channels: ChannelTable::default(), now: Timestamp::from_millis(0), reply }, answer)
    }

    fn keys(batch: &[Queued]) -> Vec<(String, String)> {
        batch.iter().map(|q| (q.new.user_id.as_str().to_owned(), q.new.event_key.as_str().to_owned())).collect()
    }

    #[test]
    fn a_batch_writes_each_key_once_in_key_order_and_keeps_its_repeats_for_after() {
        let batch: Vec<Queued> = [("bob", "k2"), ("alice", "k9"), ("bob", "k1"), ("alice", "k9"), ("bob", "k2")]
            .into_iter()
            .map(|(user, key)| queued(user, key).0)
            .collect();
        let (writes, repeats) = split(batch);
        let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(u, k)| ((*u).to_owned(), (*k).to_owned())).collect()
        };
        assert_eq!(keys(&writes), owned(&[("alice", "k9"), ("bob", "k1"), ("bob", "k2")]));
        assert_eq!(keys(&repeats), owned(&[("alice", "k9"), ("bob", "k2")]));
    }
}
