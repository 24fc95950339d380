//! Task creation (with the digest decision) and the read models: notification view, review list, inbox.

use std::collections::HashMap;

use herald_domain::digest::{decide_digest, DigestDecision, OpenDigest};
use herald_domain::{
    ChannelName, ChannelRules, EventKey, NotificationId, TaskId, TaskState, ThreadKey, Timestamp, UserId,
};
use herald_ports::store::{
    AttemptView, InboxChannel, InboxItem, NewNotification, NotificationView, StoreError, TaskSummary, TaskView,
};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use crate::convert::{count_i32, count_u32, from_db, opt_from_db, parse_code, store_error, to_db};
use crate::store::parse_action;

/// Creates the task of one enabled channel for a new notification, or merges the event into an open
/// digest (SPEC §7). Returns `None` when the event joined another notification's digest task.
pub(crate) async fn create_task(
    conn: &mut PgConnection,
    new: &NewNotification,
    notification: NotificationId,
    channel: &ChannelName,
    rules: &ChannelRules,
    budget: u32,
    now: Timestamp,
) -> Result<Option<TaskSummary>, StoreError> {
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
        let instants: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
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
        let open = sqlx::query(
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
        .map_err(store_error)?
        .map(|row| -> Result<OpenDigest, StoreError> {
            Ok(OpenDigest {
                task: TaskId(row.try_get("id").map_err(store_error)?),
                due_at: from_db(row.try_get("next_attempt_at").map_err(store_error)?),
            })
        })
        .transpose()?;
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
                return Ok(None);
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
    Ok(Some(TaskSummary { task_id: TaskId(id), reference, channel: channel.clone(), state: TaskState::Pending }))
}

const TASK_VIEW_COLUMNS: &str = "id, user_id, notification_id, channel, state, outcome_uncertain, needs_review, \
     attempt_count, next_attempt_at, provider_msg_id, last_error, digest_count, reference::text AS reference";

fn task_view(row: &PgRow) -> Result<TaskView, StoreError> {
    let e = store_error;
    let state: String = row.try_get("state").map_err(e)?;
    Ok(TaskView {
        task_id: TaskId(row.try_get("id").map_err(e)?),
        reference: row.try_get("reference").map_err(e)?,
        notification_id: NotificationId(row.try_get("notification_id").map_err(e)?),
        user_id: UserId(row.try_get("user_id").map_err(e)?),
        channel: ChannelName(row.try_get("channel").map_err(e)?),
        state: parse_code(&state)?,
        outcome_uncertain: row.try_get("outcome_uncertain").map_err(e)?,
        needs_review: row.try_get("needs_review").map_err(e)?,
        attempt_count: count_u32(row.try_get("attempt_count").map_err(e)?),
        next_attempt_at: opt_from_db(row.try_get("next_attempt_at").map_err(e)?),
        provider_msg_id: row.try_get("provider_msg_id").map_err(e)?,
        last_error: row.try_get("last_error").map_err(e)?,
        digest_count: row.try_get::<Option<i32>, _>("digest_count").map_err(e)?.map(count_u32),
        attempts: Vec::new(),
    })
}

/// The attempts of several tasks, each named by (user, task) — `$1` users, `$2` task ids, pairwise — so
/// that every probe uses the `(user_id, task_id, attempt_no)` key: attempts are found by index, never by
/// scanning `delivery_attempt`.
pub const ATTEMPTS_OF_TASKS: &str = "SELECT a.task_id, a.attempt_no, a.action, a.outcome, a.late_outcome, a.detail, \
     a.started_at, a.finished_at \
     FROM unnest($1::text[], $2::bigint[]) AS k(user_id, task_id) \
     JOIN delivery_attempt a ON a.user_id = k.user_id AND a.task_id = k.task_id \
     ORDER BY a.task_id, a.attempt_no";

/// Loads the attempts of `tasks` (oldest first) into them.
async fn with_attempts(pool: &PgPool, mut tasks: Vec<TaskView>) -> Result<Vec<TaskView>, StoreError> {
    if tasks.is_empty() {
        return Ok(tasks);
    }
    let users: Vec<&str> = tasks.iter().map(|t| t.user_id.as_str()).collect();
    let ids: Vec<i64> = tasks.iter().map(|t| t.task_id.0).collect();
    let rows = sqlx::query(ATTEMPTS_OF_TASKS).bind(&users).bind(&ids).fetch_all(pool).await.map_err(store_error)?;
    let mut by_task: HashMap<i64, Vec<AttemptView>> = HashMap::new();
    for row in &rows {
        let e = store_error;
        let outcome: Option<String> = row.try_get("outcome").map_err(e)?;
        let late: Option<String> = row.try_get("late_outcome").map_err(e)?;
        by_task.entry(row.try_get("task_id").map_err(e)?).or_default().push(AttemptView {
            attempt_no: row.try_get("attempt_no").map_err(e)?,
            action: parse_action(row.try_get("action").map_err(e)?)?,
            outcome: outcome.as_deref().map(parse_code).transpose()?,
            late_outcome: late.as_deref().map(parse_code).transpose()?,
            started_at: from_db(row.try_get("started_at").map_err(e)?),
            finished_at: opt_from_db(row.try_get("finished_at").map_err(e)?),
            detail: row.try_get("detail").map_err(e)?,
        });
    }
    for task in &mut tasks {
        task.attempts = by_task.remove(&task.task_id.0).unwrap_or_default();
    }
    Ok(tasks)
}

pub(crate) async fn notification(pool: &PgPool, id: NotificationId) -> Result<Option<NotificationView>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT id, user_id, event_key, body, thread_key, created_at, expires_at FROM notification WHERE id = $1",
    )
    .bind(id.0)
    .fetch_optional(pool)
    .await
    .map_err(store_error)?
    else {
        return Ok(None);
    };
    let e = store_error;
    let user = UserId(row.try_get("user_id").map_err(e)?);
    let task_rows = sqlx::query(&format!(
        "SELECT {TASK_VIEW_COLUMNS} FROM delivery_task WHERE user_id = $1 AND notification_id = $2 ORDER BY id"
    ))
    .bind(user.as_str())
    .bind(id.0)
    .fetch_all(pool)
    .await
    .map_err(e)?;
    let tasks = with_attempts(pool, task_rows.iter().map(task_view).collect::<Result<_, _>>()?).await?;
    Ok(Some(NotificationView {
        notification_id: id,
        user_id: user,
        event_key: EventKey(row.try_get("event_key").map_err(e)?),
        body: row.try_get("body").map_err(e)?,
        thread_key: row.try_get::<Option<String>, _>("thread_key").map_err(e)?.map(ThreadKey),
        created_at: from_db(row.try_get("created_at").map_err(e)?),
        expires_at: from_db(row.try_get("expires_at").map_err(e)?),
        tasks,
    }))
}

pub(crate) async fn parked(pool: &PgPool, limit: u32) -> Result<Vec<TaskView>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {TASK_VIEW_COLUMNS} FROM delivery_task \
         WHERE state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL ORDER BY updated_at, id LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    with_attempts(pool, rows.iter().map(task_view).collect::<Result<_, _>>()?).await
}

pub(crate) async fn inbox(pool: &PgPool, user: &UserId, limit: u32) -> Result<Vec<InboxItem>, StoreError> {
    let e = store_error;
    let rows = sqlx::query(
        "SELECT i.notification_id, n.body, i.created_at, i.read_at FROM inbox_item i \
         JOIN notification n ON n.user_id = i.user_id AND n.id = i.notification_id \
         WHERE i.user_id = $1 ORDER BY i.created_at DESC, i.notification_id DESC LIMIT $2",
    )
    .bind(user.as_str())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(e)?;
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        items.push(InboxItem {
            notification_id: NotificationId(row.try_get("notification_id").map_err(e)?),
            body: row.try_get("body").map_err(e)?,
            created_at: from_db(row.try_get("created_at").map_err(e)?),
            read_at: opt_from_db(row.try_get("read_at").map_err(e)?),
            channels: Vec::new(),
        });
    }
    let ids: Vec<i64> = items.iter().map(|i| i.notification_id.0).collect();
    // Own tasks, plus the digest task each merged event joined, each with its latest attempt's outcome
    // (one index probe on (user_id, task_id, attempt_no) per task, in this one statement).
    let channel_rows = sqlx::query(
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
    .map_err(e)?;
    let mut by_notification: HashMap<i64, Vec<InboxChannel>> = HashMap::new();
    for row in &channel_rows {
        let state: String = row.try_get("state").map_err(e)?;
        let last_outcome: Option<String> = row.try_get("last_outcome").map_err(e)?;
        by_notification.entry(row.try_get("notification_id").map_err(e)?).or_default().push(InboxChannel {
            channel: ChannelName(row.try_get("channel").map_err(e)?),
            state: parse_code(&state)?,
            needs_review: row.try_get("needs_review").map_err(e)?,
            in_digest: row.try_get("in_digest").map_err(e)?,
            last_outcome: last_outcome.as_deref().map(parse_code).transpose()?,
            attempt_count: count_u32(row.try_get("attempt_count").map_err(e)?),
        });
    }
    for item in &mut items {
        item.channels = by_notification.remove(&item.notification_id.0).unwrap_or_default();
    }
    Ok(items)
}
