//! The read models: a notification with its tasks and attempts, the review list of parked tasks, a
//! user's inbox, and the task gauges. Reads only; every write lives in `create`, `claim`, `finish` and
//! `resolve`.

use std::collections::HashMap;

use herald_domain::{NotificationId, UserId};
use herald_ports::store::{AttemptView, InboxChannel, InboxItem, NotificationView, StoreError, TaskCount, TaskView};
use sqlx::PgPool;

use crate::convert::store_error;
use crate::rows::{
    parked, task_view_columns, AttemptRow, InboxChannelRow, InboxRow, NotificationRow, TaskCountRow, TaskViewRow,
};

/// The attempts of several tasks, each named by (user, task) — `$1` users, `$2` task ids, pairwise — so
/// that every probe uses the `(user_id, task_id, attempt_no)` key: attempts are found by index, never by
/// scanning `delivery_attempt`.
pub const ATTEMPTS_OF_TASKS: &str = "SELECT a.task_id, a.attempt_no, a.action, a.outcome, a.late_outcome, a.detail, \
     a.started_at, a.finished_at \
     FROM unnest($1::text[], $2::bigint[]) AS k(user_id, task_id) \
     JOIN delivery_attempt a ON a.user_id = k.user_id AND a.task_id = k.task_id \
     ORDER BY a.task_id, a.attempt_no";

/// The tasks of one notification.
const TASKS_OF_NOTIFICATION: &str = concat!(
    "SELECT ",
    task_view_columns!(),
    " FROM delivery_task WHERE user_id = $1 AND notification_id = $2 ORDER BY id"
);

/// The review list (SPEC §6): parked tasks, longest waiting first. Served by the partial index
/// `delivery_task_parked`, declared with the same predicate.
const PARKED_TASKS: &str = concat!(
    "SELECT ",
    task_view_columns!(),
    " FROM delivery_task t WHERE ",
    parked!(),
    " ORDER BY updated_at, id LIMIT $1"
);

/// The task gauges: tasks per channel and state, parked ones in their own group.
const TASK_COUNTS: &str = concat!(
    "SELECT channel, state, ",
    parked!(),
    " AS parked, count(*) AS n FROM delivery_task t GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
);

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
        "SELECT id, user_id, event_key, body, thread_key, created_at, expires_at FROM notification WHERE id = $1",
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
    let rows: Vec<InboxRow> = sqlx::query_as(
        "SELECT i.notification_id, n.body, i.created_at, i.read_at FROM inbox_item i \
         JOIN notification n ON n.user_id = i.user_id AND n.id = i.notification_id \
         WHERE i.user_id = $1 ORDER BY i.created_at DESC, i.notification_id DESC LIMIT $2",
    )
    .bind(user.as_str())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    let mut items: Vec<InboxItem> = rows.into_iter().map(InboxItem::from).collect();
    let ids: Vec<i64> = items.iter().map(|i| i.notification_id.0).collect();
    // Own tasks, plus the digest task each merged event joined, each with its latest attempt's outcome
    // (one index probe on (user_id, task_id, attempt_no) per task, in this one statement).
    let channel_rows: Vec<InboxChannelRow> = sqlx::query_as(
        "SELECT t.notification_id, t.channel, t.state, t.needs_review, (t.digest_count IS NOT NULL) AS in_digest, \
                t.attempt_count, last.outcome AS last_outcome \
         FROM delivery_task t \
         LEFT JOIN LATERAL (SELECT a.outcome FROM delivery_attempt a WHERE a.user_id = t.user_id AND a.task_id = t.id \
                            ORDER BY a.attempt_no DESC LIMIT 1) last ON true \
         WHERE t.user_id = $1 AND t.notification_id = ANY($2) \
         UNION ALL \
         SELECT m.notification_id, m.channel, d.state, d.needs_review, true, d.attempt_count, last.outcome \
         FROM digest_member m JOIN delivery_task d ON d.user_id = m.user_id AND d.id = m.digest_task_id \
         LEFT JOIN LATERAL (SELECT a.outcome FROM delivery_attempt a WHERE a.user_id = d.user_id AND a.task_id = d.id \
                            ORDER BY a.attempt_no DESC LIMIT 1) last ON true \
         WHERE m.user_id = $1 AND m.notification_id = ANY($2) \
         ORDER BY 1, 2",
    )
    .bind(user.as_str())
    .bind(&ids)
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

pub(crate) async fn task_counts(pool: &PgPool) -> Result<Vec<TaskCount>, StoreError> {
    let rows: Vec<TaskCountRow> = sqlx::query_as(TASK_COUNTS).fetch_all(pool).await.map_err(store_error)?;
    rows.into_iter().map(TaskCount::try_from).collect()
}
