//! The write path of a submission (SPEC §3, §7): `create` stores the notification, its inbox item and
//! one task per enabled channel in one transaction, and `create_task` makes the digest decision for a
//! task under a per-(user, thread, channel) advisory lock.

use chrono::{DateTime, Utc};
use herald_domain::digest::{decide_digest, DigestDecision, OpenDigest};
use herald_domain::{
    ChannelName, ChannelRules, EventKey, Millis, NotificationId, NotificationRef, TaskId, TaskState, ThreadKey,
    Timestamp, UserId,
};
use herald_ports::store::{ChannelTable, Created, Merged, NewNotification, StoreError, StoredSubmission, TaskSummary};
use sqlx::{PgConnection, PgPool};

use crate::convert::{channel_names, count_i32, count_u32, from_db, store_error, to_db};
use crate::notify::notify_new_tasks;
use crate::rows::TaskSummaryRow;

/// One transaction: the notification (`ON CONFLICT (user_id, event_key) DO NOTHING`), then — only when
/// it was inserted — its inbox item and tasks, and the wake-up for workers. A duplicate writes nothing
/// and answers the existing notification's tasks with `created = false`.
pub(crate) async fn create(
    pool: &PgPool,
    new: &NewNotification,
    channels: &ChannelTable,
    now: Timestamp,
) -> Result<Created, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    let inserted: Option<(i64, uuid::Uuid)> = sqlx::query_as(
        "INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id, public_id",
    )
    .bind(new.user_id.as_str())
    .bind(new.event_key.as_str())
    .bind(&new.body)
    .bind(new.thread_key.as_ref().map(|k| k.as_str()))
    .bind(new.max_attempts.map(count_i32))
    .bind(to_db(now))
    .bind(to_db(now + new.ttl))
    .fetch_optional(&mut *tx)
    .await
    .map_err(store_error)?;

    let Some((id, public_id)) = inserted else {
        // A duplicate: nothing to write. Under READ COMMITTED the conflicting insert waited for the
        // other transaction, and this new statement sees its committed row.
        tx.rollback().await.map_err(store_error)?;
        let stored: SubmissionRow = sqlx::query_as(SUBMISSION_QUERY)
            .bind(vec![new.user_id.as_str().to_owned()])
            .bind(new.event_key.as_str())
            .fetch_one(pool)
            .await
            .map_err(store_error)?;
        let id = NotificationId(stored.id);
        let notification_ref = NotificationRef(stored.public_id);
        let differs = stored.into_submission().differences(new);
        let tasks = task_summaries(pool, &new.user_id, id).await?;
        let merged = merged_into(pool, &new.user_id, id).await?;
        return Ok(Created { notification_id: id, notification_ref, created: false, tasks, merged, differs });
    };

    sqlx::query("INSERT INTO inbox_item (user_id, notification_id, created_at) VALUES ($1, $2, $3)")
        .bind(new.user_id.as_str())
        .bind(id)
        .bind(to_db(now))
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;

    let enabled: Vec<String> =
        sqlx::query_scalar("SELECT channel FROM channel_pref WHERE user_id = $1 AND enabled AND channel = ANY($2)")
            .bind(new.user_id.as_str())
            .bind(channel_names(channels))
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;

    let (mut tasks, mut merged) = (Vec::new(), Vec::new());
    for (channel, rules) in channels.0.iter().filter(|(name, _)| enabled.iter().any(|e| e == name.as_str())) {
        let budget = new.max_attempts.unwrap_or(rules.retry.max_attempts).max(1);
        match create_task(&mut tx, new, NotificationId(id), channel, rules, budget, now).await? {
            Placed::Task(summary) => tasks.push(summary),
            Placed::Merged(digest_task_id) => merged.push(Merged { channel: channel.clone(), digest_task_id }),
        }
    }
    if !tasks.is_empty() {
        // Delivered to listening workers at commit, never for a rolled-back create (SPEC §4 wake-up).
        notify_new_tasks(&mut tx).await?;
    }
    tx.commit().await.map_err(store_error)?;
    Ok(Created {
        notification_id: NotificationId(id),
        notification_ref: NotificationRef(public_id),
        created: true,
        tasks,
        merged,
        differs: Vec::new(),
    })
}

/// The stored submissions of `$2` (an event key) for the users `$1`.
const SUBMISSION_QUERY: &str = "SELECT id, public_id, user_id, body, thread_key, max_attempts, \
     (extract(epoch FROM expires_at - created_at) * 1000)::bigint AS ttl_ms \
     FROM notification WHERE user_id = ANY($1) AND event_key = $2";

#[derive(sqlx::FromRow)]
struct SubmissionRow {
    id: i64,
    public_id: uuid::Uuid,
    user_id: String,
    body: String,
    thread_key: Option<String>,
    max_attempts: Option<i32>,
    ttl_ms: i64,
}

impl SubmissionRow {
    fn into_submission(self) -> StoredSubmission {
        StoredSubmission {
            user_id: UserId(self.user_id),
            body: self.body,
            ttl: Millis(u64::try_from(self.ttl_ms).unwrap_or(0)),
            thread_key: self.thread_key.map(ThreadKey),
            max_attempts: self.max_attempts.map(count_u32),
        }
    }
}

/// The submissions stored under `event_key` for any of `users` (served by the unique key).
pub(crate) async fn submitted(
    pool: &PgPool,
    event_key: &EventKey,
    users: &[UserId],
) -> Result<Vec<StoredSubmission>, StoreError> {
    let users: Vec<String> = users.iter().map(|u| u.as_str().to_owned()).collect();
    let rows: Vec<SubmissionRow> = sqlx::query_as(SUBMISSION_QUERY)
        .bind(users)
        .bind(event_key.as_str())
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    Ok(rows.into_iter().map(SubmissionRow::into_submission).collect())
}

/// Where an event's prompt went on one channel.
enum Placed {
    /// A task of its own (an instant prompt, or a digest it opened).
    Task(TaskSummary),
    /// Merged into this open digest task.
    Merged(TaskId),
}

/// The digests an existing notification's prompts were merged into, for a repeated submit.
async fn merged_into(pool: &PgPool, user: &UserId, notification: NotificationId) -> Result<Vec<Merged>, StoreError> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT channel, digest_task_id FROM digest_member WHERE user_id = $1 AND notification_id = $2 ORDER BY channel",
    )
    .bind(user.as_str())
    .bind(notification.0)
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    Ok(rows
        .into_iter()
        .map(|(channel, task)| Merged { channel: ChannelName(channel), digest_task_id: TaskId(task) })
        .collect())
}

/// Creates the task of one enabled channel for a new notification, or merges the event into an open
/// digest (SPEC §7).
async fn create_task(
    conn: &mut PgConnection,
    new: &NewNotification,
    notification: NotificationId,
    channel: &ChannelName,
    rules: &ChannelRules,
    budget: u32,
    now: Timestamp,
) -> Result<Placed, StoreError> {
    let mut due = now;
    let mut digest_count: Option<i32> = None;
    if let (Some(rule), Some(thread)) = (rules.digest, new.thread_key.as_ref()) {
        // Serialise decisions per (user, thread, channel) so concurrent events cannot all pass the limit.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2 || chr(31) || $3, 0))")
            .bind(new.user_id.as_str())
            .bind(thread.as_str())
            .bind(channel.as_str())
            .execute(&mut *conn)
            .await
            .map_err(store_error)?;
        let instants: Vec<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT created_at FROM delivery_task WHERE user_id = $1 AND thread_key = $2 AND channel = $3 \
             AND digest_count IS NULL AND created_at > $4",
        )
        .bind(new.user_id.as_str())
        .bind(thread.as_str())
        .bind(channel.as_str())
        .bind(to_db(now - rule.window))
        .fetch_all(&mut *conn)
        .await
        .map_err(store_error)?;
        let instants: Vec<Timestamp> = instants.into_iter().map(from_db).collect();
        // Locked, so that a claim of this digest in progress is waited for and the row re-checked: a
        // digest the claim took (its text and count already read) is no longer `PENDING` and takes no
        // member, which would otherwise be counted in a digest that never mentions it. Claims skip the
        // row while this transaction holds it, and read the count after it commits.
        let open: Option<(i64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, next_attempt_at FROM delivery_task WHERE user_id = $1 AND thread_key = $2 AND channel = $3 \
             AND digest_count IS NOT NULL AND state = 'PENDING' AND next_attempt_at > $4 ORDER BY id DESC LIMIT 1 \
             FOR UPDATE",
        )
        .bind(new.user_id.as_str())
        .bind(thread.as_str())
        .bind(channel.as_str())
        .bind(to_db(now))
        .fetch_optional(&mut *conn)
        .await
        .map_err(store_error)?;
        let open = open.map(|(id, due_at)| OpenDigest { task: TaskId(id), due_at: from_db(due_at) });
        match decide_digest(rule, &instants, open, now) {
            DigestDecision::SendNow => {}
            DigestDecision::Open { due_at } => {
                due = due_at;
                digest_count = Some(1);
            }
            DigestDecision::Join { task } => {
                sqlx::query(
                    "WITH joined AS (UPDATE delivery_task SET digest_count = digest_count + 1, updated_at = $4, \
                       expires_at = GREATEST(expires_at, $6) \
                     WHERE user_id = $1 AND id = $3) \
                     INSERT INTO digest_member (user_id, notification_id, channel, digest_task_id) VALUES ($1, $2, $5, $3)",
                )
                .bind(new.user_id.as_str())
                .bind(notification.0)
                .bind(task.0)
                .bind(to_db(now))
                .bind(channel.as_str())
                .bind(to_db(now + new.ttl))
                .execute(&mut *conn)
                .await
                .map_err(store_error)?;
                return Ok(Placed::Merged(task));
            }
        }
    }
    let (id, reference): (i64, String) = sqlx::query_as(
        "INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
         thread_key, digest_count, expires_at, created_at, updated_at) \
         VALUES ($1, $2, $3, 'PENDING', $4, $5, $6, $7, $9, $8, $8) RETURNING id, reference::text",
    )
    .bind(new.user_id.as_str())
    .bind(notification.0)
    .bind(channel.as_str())
    .bind(to_db(due))
    .bind(count_i32(budget))
    .bind(new.thread_key.as_ref().map(ThreadKey::as_str))
    .bind(digest_count)
    .bind(to_db(now))
    .bind(digest_count.map(|_| to_db(now + new.ttl)))
    .fetch_one(&mut *conn)
    .await
    .map_err(store_error)?;
    Ok(Placed::Task(TaskSummary {
        task_id: TaskId(id),
        reference,
        channel: channel.clone(),
        state: TaskState::Pending,
    }))
}

/// The tasks of an existing notification, as a duplicate submission answers them.
async fn task_summaries(
    pool: &PgPool,
    user: &UserId,
    notification: NotificationId,
) -> Result<Vec<TaskSummary>, StoreError> {
    let rows: Vec<TaskSummaryRow> = sqlx::query_as(
        "SELECT id, reference::text AS reference, channel, state FROM delivery_task \
         WHERE user_id = $1 AND notification_id = $2 ORDER BY id",
    )
    .bind(user.as_str())
    .bind(notification.0)
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    rows.into_iter().map(TaskSummary::try_from).collect()
}
