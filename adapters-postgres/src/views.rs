//! The read models: a notification with its tasks and attempts, the review list of parked tasks, a
//! user's inbox, and the task gauges. Reads only; every write lives in `create`, `claim`, `finish` and
//! `resolve`.

use std::collections::HashMap;

use herald_domain::{EventKey, Millis, TaskId};
use herald_domain::{NotificationId, NotificationRef, Timestamp, UserId};
use herald_ports::store::{
    AttemptView, EgressSlot, InboxChannel, InboxCursor, InboxItem, NotificationView, OutcomeBucket, OutcomeCount,
    ParkedBucket, ParkedFilter, ParkedTask, StoreError, TaskCount, TaskView,
};
use sqlx::PgPool;

use crate::convert::{from_db, store_error, to_db};
use crate::rows::{
    task_view_columns, AttemptRow, EgressRow, IdRow, InboxChannelRow, InboxRow, NotificationRow, OutcomeBucketRow,
    OutcomeCountRow, ParkedBucketRow, ParkedRow, TaskCountRow, TaskViewRow,
};

/// The attempts of several tasks, each named by (user, task) — `$1` users, `$2` task ids, pairwise — so
/// that every probe uses the `(user_id, task_id, attempt_no)` key: attempts are found by index, never by
/// scanning `delivery_attempt`.
pub const ATTEMPTS_OF_TASKS: &str = "SELECT a.task_id, a.attempt_no, a.action, a.outcome, a.late_outcome, a.detail, \
     a.started_at, a.finished_at, a.note, a.decided_by \
     FROM unnest($1::text[], $2::bigint[]) AS k(user_id, task_id) \
     JOIN delivery_attempt a ON a.user_id = k.user_id AND a.task_id = k.task_id \
     ORDER BY a.task_id, a.attempt_no";

/// The tasks of one notification.
const TASKS_OF_NOTIFICATION: &str = concat!(
    "SELECT ",
    task_view_columns!(),
    " FROM delivery_task t WHERE user_id = $1 AND notification_id = $2 ORDER BY id"
);

/// The review list (SPEC §6): parked tasks, longest waiting first. Served by the partial index
/// `delivery_task_parked` on `parked_at` (migration `0012`: the moment a task parked, NULL unless it is
/// parked by `herald_task_parked`, the SQL spelling of [`PARKED`](crate::PARKED)).
const PARKED_TASKS: &str = concat!(
    "SELECT ",
    task_view_columns!(),
    " FROM delivery_task t WHERE parked_at IS NOT NULL ORDER BY parked_at, id LIMIT $1"
);

/// The task gauges: tasks per channel and state, parked ones in their own group — read from the tally
/// the database keeps of `delivery_task` (migration `0010`), never from the table itself, which holds
/// every finished task. Each group is the sum of its signed deltas; `entries` is how many delta rows it
/// took, which tells the reader when to compact. A group whose sum is 0 has no tasks, and is left out of
/// the answer as a group with no rows was when the tasks were counted.
///
/// Every delta commits with the task rows it describes, so in any one snapshot the sums are exactly
/// `count(*)` of `delivery_task` per `(channel, state, PARKED)`.
pub const TASK_TALLY: &str = "SELECT channel, state, parked, sum(n)::bigint AS n, count(*) AS entries \
     FROM task_tally GROUP BY 1, 2, 3 ORDER BY 1, 2, 3";

/// Folds the tally's deltas into one row per group (groups summing to 0 go), in one statement, so a
/// reader sees the tally either before or after it, with the same sums.
///
/// Safe beside the writers and beside another compaction, under READ COMMITTED: the `DELETE` removes
/// only rows of its snapshot, and `RETURNING` names exactly the rows this statement removed.
/// * A delta committed after the snapshot (or still uncommitted) is not seen, so it is neither removed
///   nor summed: it stays, and counts as before. Nothing is lost.
/// * Two compactions at once: a row both see is removed by the first; the second waits for the first
///   to commit, finds the row deleted and skips it (READ COMMITTED re-checks a row that changed under
///   it; a deleted one is dropped from the statement), so it is summed by the first only. If the first
///   rolls back, the row is still there and the second removes and sums it. The first's folded rows are
///   either outside the second's snapshot (then the second never touches them) or inside it, and then
///   so is the removal of the rows they replace. Nothing is counted twice.
///
/// No row is ever updated, so the writers' inserts never wait on a compaction and a compaction waits
/// only on another one.
///
/// Answers how many rows it removed.
pub const COMPACT_TASK_TALLY: &str = "WITH gone AS (DELETE FROM task_tally RETURNING channel, state, parked, n), \
     folded AS (INSERT INTO task_tally (channel, state, parked, n) \
       SELECT channel, state, parked, sum(n)::bigint FROM gone GROUP BY 1, 2, 3 HAVING sum(n) <> 0) \
     SELECT count(*) FROM gone";

/// The reader compacts once the tally holds this many rows more than it has groups with tasks: a few
/// statements' worth when idle, every read under load (the rows of a few seconds of batches).
const COMPACT_AFTER_EXTRA_ENTRIES: i64 = 64;

/// Loads the attempts of `tasks` (oldest first) into them.
async fn with_attempts(pool: &PgPool, mut tasks: Vec<TaskView>) -> Result<Vec<TaskView>, StoreError> {
    if tasks.is_empty() {
        return Ok(tasks);
    }
    let users: Vec<&str> = tasks.iter().map(|t| t.user_id.as_str()).collect();
    let ids: Vec<i64> = tasks.iter().map(|t| t.task_id.0).collect();
    let rows: Vec<AttemptRow> =
        sqlx::query_as(ATTEMPTS_OF_TASKS).bind(&users).bind(&ids).fetch_all(pool).await.map_err(store_error)?;
    let mut by_task: HashMap<i64, Vec<AttemptView>> = HashMap::new();
    for row in rows {
        by_task.entry(row.task_id).or_default().push(AttemptView::try_from(row)?);
    }
    for task in &mut tasks {
        task.attempts = by_task.remove(&task.task_id.0).unwrap_or_default();
    }
    Ok(tasks)
}

/// The tasks of `rows`, with their attempts.
async fn task_views(pool: &PgPool, rows: Vec<TaskViewRow>) -> Result<Vec<TaskView>, StoreError> {
    with_attempts(pool, rows.into_iter().map(TaskView::try_from).collect::<Result<_, _>>()?).await
}

pub(crate) async fn notification(pool: &PgPool, id: NotificationId) -> Result<Option<NotificationView>, StoreError> {
    let Some(row): Option<NotificationRow> = sqlx::query_as(
        "SELECT id, public_id, user_id, event_key, body, thread_key, created_at, expires_at FROM notification \
         WHERE id = $1",
    )
    .bind(id.0)
    .fetch_optional(pool)
    .await
    .map_err(store_error)?
    else {
        return Ok(None);
    };
    let task_rows: Vec<TaskViewRow> = sqlx::query_as(TASKS_OF_NOTIFICATION)
        .bind(&row.user_id)
        .bind(id.0)
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let tasks = task_views(pool, task_rows).await?;
    Ok(Some(row.into_view(tasks)))
}

pub(crate) async fn parked(pool: &PgPool, limit: u32) -> Result<Vec<TaskView>, StoreError> {
    let rows: Vec<TaskViewRow> =
        sqlx::query_as(PARKED_TASKS).bind(i64::from(limit)).fetch_all(pool).await.map_err(store_error)?;
    task_views(pool, rows).await
}

pub(crate) async fn inbox(pool: &PgPool, user: &UserId, limit: u32) -> Result<Vec<InboxItem>, StoreError> {
    inbox_page(pool, user, None, limit).await
}

/// A page of the inbox, newest first, after a cursor (`$3`, `$4`; NULL for the first page): served by
/// `inbox_item_newest` `(user_id, created_at DESC, notification_id DESC)`, the row comparison being its
/// key order, and each item's notification by its primary key. The cursor names its notification by
/// the outside name (`$4`), turned into the serial by `notification_public_id` — a name this user does
/// not own gives no position, and an empty page.
pub const INBOX_PAGE: &str =
    "SELECT i.notification_id, n.public_id, n.body, i.created_at, i.read_at FROM inbox_item i \
     JOIN notification n ON n.user_id = i.user_id AND n.id = i.notification_id \
     WHERE i.user_id = $1 AND ($3::timestamptz IS NULL OR (i.created_at, i.notification_id) < \
       ($3, (SELECT c.id FROM notification c WHERE c.public_id = $4 AND c.user_id = $1))) \
     ORDER BY i.created_at DESC, i.notification_id DESC LIMIT $2";

/// A page of the inbox, newest first, after `cursor` ([`INBOX_PAGE`]).
pub(crate) async fn inbox_page(
    pool: &PgPool,
    user: &UserId,
    cursor: Option<InboxCursor>,
    limit: u32,
) -> Result<Vec<InboxItem>, StoreError> {
    let rows: Vec<InboxRow> = sqlx::query_as(INBOX_PAGE)
        .bind(user.as_str())
        .bind(i64::from(limit))
        .bind(cursor.map(|c| to_db(c.created_at)))
        .bind(cursor.map(|c| c.notification.0))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let mut items: Vec<InboxItem> = rows.into_iter().map(InboxItem::from).collect();
    let ids: Vec<i64> = items.iter().map(|i| i.notification_id.0).collect();
    // Own tasks, plus the digest task each merged event joined, each with its latest attempt's outcome
    // (one index probe on (user_id, task_id, attempt_no) per task, in this one statement).
    let channel_rows: Vec<InboxChannelRow> = sqlx::query_as(
        "SELECT t.notification_id, t.channel, t.state, t.needs_review, (t.digest_count IS NOT NULL) AS in_digest, \
                t.attempt_count, last.outcome AS last_outcome, last.note AS last_note, \
                COALESCE(last.detail LIKE $3, false) AS destination_gone \
         FROM delivery_task t \
         LEFT JOIN LATERAL (SELECT a.outcome, a.note, a.detail FROM delivery_attempt a WHERE a.user_id = t.user_id AND a.task_id = t.id \
                            ORDER BY a.attempt_no DESC LIMIT 1) last ON true \
         WHERE t.user_id = $1 AND t.notification_id = ANY($2) \
         UNION ALL \
         SELECT m.notification_id, m.channel, d.state, d.needs_review, true, d.attempt_count, last.outcome, last.note, \
                COALESCE(last.detail LIKE $3, false) \
         FROM digest_member m JOIN delivery_task d ON d.user_id = m.user_id AND d.id = m.digest_task_id \
         LEFT JOIN LATERAL (SELECT a.outcome, a.note, a.detail FROM delivery_attempt a WHERE a.user_id = d.user_id AND a.task_id = d.id \
                            ORDER BY a.attempt_no DESC LIMIT 1) last ON true \
         WHERE m.user_id = $1 AND m.notification_id = ANY($2) \
         ORDER BY 1, 2",
    )
    .bind(user.as_str())
    .bind(&ids)
    .bind(format!("{}%", herald_domain::classify::WEBPUSH_SUBSCRIPTION_EXPIRED))
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    let mut by_notification: HashMap<i64, Vec<InboxChannel>> = HashMap::new();
    for row in channel_rows {
        by_notification.entry(row.notification_id).or_default().push(InboxChannel::try_from(row)?);
    }
    for item in &mut items {
        item.channels = by_notification.remove(&item.notification_id.0).unwrap_or_default();
    }
    Ok(items)
}

/// The task gauges ([`TASK_TALLY`]), then a compaction of the tally ([`COMPACT_TASK_TALLY`]) when it has
/// grown: the gauges' refresh keeps the tally small, and no other job is needed. The answer is the read's;
/// a compaction that fails is logged and left to the next read.
pub(crate) async fn task_counts(pool: &PgPool) -> Result<Vec<TaskCount>, StoreError> {
    let groups: Vec<TaskCountRow> = sqlx::query_as(TASK_TALLY).fetch_all(pool).await.map_err(store_error)?;
    let entries: i64 = groups.iter().map(TaskCountRow::entries).sum();
    let counts: Vec<TaskCount> =
        groups.into_iter().filter(TaskCountRow::has_tasks).map(TaskCount::try_from).collect::<Result<_, _>>()?;
    if entries - i64::try_from(counts.len()).unwrap_or(i64::MAX) >= COMPACT_AFTER_EXTRA_ENTRIES {
        if let Err(error) = compact_task_tally(pool).await {
            tracing::warn!(%error, "compacting the task tally failed; the next read tries again");
        }
    }
    Ok(counts)
}

/// Runs [`COMPACT_TASK_TALLY`]; answers how many rows it removed.
pub(crate) async fn compact_task_tally(pool: &PgPool) -> Result<u64, StoreError> {
    let removed: i64 = sqlx::query_scalar(COMPACT_TASK_TALLY).fetch_one(pool).await.map_err(store_error)?;
    Ok(u64::try_from(removed).unwrap_or(0))
}

/// The review queue with the console's filters: served by `delivery_task_parked` (no channel) or
/// `delivery_task_parked_by_channel`, both partial indexes on `parked_at` (migration `0012`), in
/// `(parked_at, id)` order — the keyset the next page continues from.
pub const PARKED_PAGE: &str = concat!(
    "SELECT parked_at, ",
    task_view_columns!(),
    " FROM delivery_task t WHERE parked_at IS NOT NULL \
     AND ($1::text IS NULL OR channel = $1) AND ($2::timestamptz IS NULL OR parked_at <= $2) \
     AND ($3::timestamptz IS NULL OR (parked_at, id) > ($3, $4)) ORDER BY parked_at, id LIMIT $5"
);

pub(crate) async fn parked_page(pool: &PgPool, filter: &ParkedFilter) -> Result<Vec<ParkedTask>, StoreError> {
    let rows: Vec<ParkedRow> = sqlx::query_as(PARKED_PAGE)
        .bind(filter.channel.as_ref().map(|c| c.as_str().to_owned()))
        .bind(filter.parked_before.map(to_db))
        .bind(filter.after.map(|(at, _)| to_db(at)))
        .bind(filter.after.map(|(_, TaskId(id))| id))
        .bind(i64::from(filter.limit))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let parked_at: Vec<_> = rows.iter().map(|r| from_db(r.parked_at)).collect();
    let tasks = task_views(pool, rows.into_iter().map(|r| r.task).collect()).await?;
    Ok(parked_at.into_iter().zip(tasks).map(|(parked_at, task)| ParkedTask { parked_at, task }).collect())
}

/// Served by the unique key `notification_user_event_key`.
pub const NOTIFICATION_BY_EVENT: &str = "SELECT id FROM notification WHERE user_id = $1 AND event_key = $2";

/// The notification of a user's event ([`NOTIFICATION_BY_EVENT`]).
pub(crate) async fn notification_by_event(
    pool: &PgPool,
    user: &UserId,
    event_key: &EventKey,
) -> Result<Option<NotificationId>, StoreError> {
    let row: Option<IdRow> = sqlx::query_as(NOTIFICATION_BY_EVENT)
        .bind(user.as_str())
        .bind(event_key.as_str())
        .fetch_optional(pool)
        .await
        .map_err(store_error)?;
    Ok(row.map(|r| NotificationId(r.id)))
}

/// Served by `notification_public_id` (migration `0009`).
pub const NOTIFICATION_BY_REF: &str = "SELECT id FROM notification WHERE public_id = $1";

/// The notification known outside by `notification` ([`NOTIFICATION_BY_REF`]).
pub(crate) async fn notification_by_ref(
    pool: &PgPool,
    notification: NotificationRef,
) -> Result<Option<NotificationId>, StoreError> {
    let row: Option<IdRow> =
        sqlx::query_as(NOTIFICATION_BY_REF).bind(notification.0).fetch_optional(pool).await.map_err(store_error)?;
    Ok(row.map(|r| NotificationId(r.id)))
}

/// Served by `delivery_task_by_reference` (migration `0005`).
pub const NOTIFICATION_BY_REFERENCE: &str =
    "SELECT notification_id AS id FROM delivery_task WHERE reference = $1 LIMIT 1";

/// The notification of a task reference ([`NOTIFICATION_BY_REFERENCE`]). A text that is not a UUID finds
/// nothing.
pub(crate) async fn notification_by_reference(
    pool: &PgPool,
    reference: &str,
) -> Result<Option<NotificationId>, StoreError> {
    let Ok(reference) = uuid::Uuid::parse_str(reference.trim()) else { return Ok(None) };
    let row: Option<IdRow> =
        sqlx::query_as(NOTIFICATION_BY_REFERENCE).bind(reference).fetch_optional(pool).await.map_err(store_error)?;
    Ok(row.map(|r| NotificationId(r.id)))
}

/// Attempts since `$1` by channel and outcome: a range scan of `delivery_attempt_recent` (migration
/// `0005`), each attempt's task found by its primary key.
pub const OUTCOME_COUNTS: &str =
    "SELECT t.channel, a.outcome, count(*) AS n, max(a.started_at) AS latest FROM delivery_attempt a \
     JOIN delivery_task t ON t.user_id = a.user_id AND t.id = a.task_id \
     WHERE a.started_at >= $1 AND a.outcome IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2";

/// Attempts since `since` by channel and outcome ([`OUTCOME_COUNTS`]).
pub(crate) async fn outcome_counts(pool: &PgPool, since: Timestamp) -> Result<Vec<OutcomeCount>, StoreError> {
    let rows: Vec<OutcomeCountRow> =
        sqlx::query_as(OUTCOME_COUNTS).bind(to_db(since)).fetch_all(pool).await.map_err(store_error)?;
    rows.into_iter().map(OutcomeCount::try_from).collect()
}

/// Tasks a person decided that still hold the decision, by channel and decision: the decision rows are
/// the only attempts with a note, found by the partial index `delivery_attempt_decided` (migration `0030`),
/// each one's task by its primary key.
pub const DECIDED_COUNTS: &str =
    "SELECT t.channel, a.outcome, count(*) AS n, max(a.started_at) AS latest FROM delivery_attempt a \
     JOIN delivery_task t ON t.user_id = a.user_id AND t.id = a.task_id \
     WHERE a.note IS NOT NULL AND ((a.outcome = 'MANUAL_SENT' AND t.state = 'SENT') \
        OR (a.outcome = 'MANUAL_FAILED' AND t.state = 'FAILED')) GROUP BY 1, 2 ORDER BY 1, 2";

/// [`DECIDED_COUNTS`].
pub(crate) async fn decided_counts(pool: &PgPool) -> Result<Vec<OutcomeCount>, StoreError> {
    let rows: Vec<OutcomeCountRow> = sqlx::query_as(DECIDED_COUNTS).fetch_all(pool).await.map_err(store_error)?;
    rows.into_iter().map(OutcomeCount::try_from).collect()
}

/// Attempts since `$1` by bucket of `$2` milliseconds and outcome: a range scan of `delivery_attempt_recent`
/// (migration `0005`), as [`OUTCOME_COUNTS`] without the tasks.
pub const OUTCOME_BUCKETS: &str =
    "SELECT (floor(extract(epoch FROM a.started_at) * 1000 / $2) * $2)::bigint AS start_ms, a.outcome, \
     count(*) AS n FROM delivery_attempt a WHERE a.started_at >= $1 AND a.outcome IS NOT NULL \
     GROUP BY 1, 2 ORDER BY 1, 2";

/// [`OUTCOME_BUCKETS`].
pub(crate) async fn outcome_buckets(
    pool: &PgPool,
    since: Timestamp,
    width: Millis,
) -> Result<Vec<OutcomeBucket>, StoreError> {
    let rows: Vec<OutcomeBucketRow> = sqlx::query_as(OUTCOME_BUCKETS)
        .bind(to_db(since))
        .bind(i64::try_from(width.0.max(1)).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    rows.into_iter().map(OutcomeBucket::try_from).collect()
}

/// Tasks parked now that parked since `$1`, by bucket of `$2` milliseconds: a range scan of
/// `delivery_task_parked` (migration `0012`).
pub const PARKED_BUCKETS: &str =
    "SELECT (floor(extract(epoch FROM parked_at) * 1000 / $2) * $2)::bigint AS start_ms, count(*) AS n \
     FROM delivery_task WHERE parked_at IS NOT NULL AND parked_at >= $1 GROUP BY 1 ORDER BY 1";

/// [`PARKED_BUCKETS`].
pub(crate) async fn parked_buckets(
    pool: &PgPool,
    since: Timestamp,
    width: Millis,
) -> Result<Vec<ParkedBucket>, StoreError> {
    let rows: Vec<ParkedBucketRow> = sqlx::query_as(PARKED_BUCKETS)
        .bind(to_db(since))
        .bind(i64::try_from(width.0.max(1)).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    Ok(rows.into_iter().map(ParkedBucket::from).collect())
}

/// One row per channel that ever called (primary key order).
pub(crate) async fn egress_slots(pool: &PgPool) -> Result<Vec<EgressSlot>, StoreError> {
    let rows: Vec<EgressRow> = sqlx::query_as("SELECT channel, last_call_at FROM channel_egress ORDER BY channel")
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    Ok(rows.into_iter().map(EgressSlot::from).collect())
}
