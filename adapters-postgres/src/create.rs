//! The write path of a submission (SPEC §3, §7): `create` stores the notification, its inbox item and
//! one task per enabled channel in one transaction, and `create_task` makes the digest decision for a
//! task under a per-(user, thread, channel) advisory lock.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use herald_domain::digest::{decide_digest, DigestDecision, OpenDigest};
use herald_domain::{
    ChannelName, ChannelRules, EventKey, Millis, NotificationId, NotificationRef, TaskId, TaskState, ThreadKey,
    Timestamp, UserId,
};
use herald_ports::store::{ChannelTable, Created, Merged, NewNotification, StoreError, StoredSubmission, TaskSummary};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{PgConnection, PgPool, Postgres};

use crate::convert::{channel_names, count_i32, count_u32, from_db, store_error, to_db};
use crate::rows::TaskSummaryRow;

/// The notification (`ON CONFLICT (user_id, event_key) DO NOTHING`), then — only when it was inserted —
/// its inbox item and tasks, atomically. A duplicate writes nothing and answers the existing
/// notification's tasks with `created = false`.
///
/// When no digest decision can be due (the event has no thread, or no channel has a digest rule) all of
/// it is [`AT_ONCE`], one autocommitted statement: one round trip instead of six. Otherwise one
/// transaction runs [`create_task`]'s decision per channel under its lock.
pub(crate) async fn create(
    pool: &PgPool,
    new: &NewNotification,
    channels: &ChannelTable,
    now: Timestamp,
) -> Result<Created, StoreError> {
    if !digest_possible(new, channels) {
        return match create_at_once(pool, new, channels, now).await? {
            Some(created) => Ok(created),
            None => existing(pool, new).await,
        };
    }
    let mut tx = pool.begin().await.map_err(store_error)?;
    let inserted: Option<(i64, uuid::Uuid)> = bind_notification(
        sqlx::query_as(
            "INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, \
               submitted_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id, public_id",
        ),
        new,
        now,
    )
    .bind(new.submitted_by.as_deref())
    .fetch_optional(&mut *tx)
    .await
    .map_err(store_error)?;

    let Some((id, public_id)) = inserted else {
        tx.rollback().await.map_err(store_error)?;
        return existing(pool, new).await;
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
        let budget = budget(new, rules);
        match create_task(&mut tx, new, NotificationId(id), channel, rules, budget, now).await? {
            Placed::Task(summary) => tasks.push(summary),
            Placed::Merged(digest_task_id) => merged.push(Merged { channel: channel.clone(), digest_task_id }),
        }
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

/// Whether storing `new` may take a digest decision: it names a thread and some channel digests. Without
/// one, a submission is a single statement ([`AT_ONCE`]), which concurrent submissions may share
/// (`create_batch`).
pub(crate) fn digest_possible(new: &NewNotification, channels: &ChannelTable) -> bool {
    new.thread_key.is_some() && channels.0.iter().any(|(_, rules)| rules.digest.is_some())
}

/// A task's attempt budget: the notification's `max_attempts` when given, else the channel's; at least 1.
pub(crate) fn budget(new: &NewNotification, rules: &ChannelRules) -> u32 {
    new.max_attempts.unwrap_or(rules.retry.max_attempts).max(1)
}

/// Binds the notification's own columns as `$1`–`$7` — user, event key, body, thread, attempt budget,
/// created, expires — as both inserting statements of a create take them.
fn bind_notification<'q, O>(
    query: QueryAs<'q, Postgres, O, PgArguments>,
    new: &'q NewNotification,
    now: Timestamp,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    query
        .bind(new.user_id.as_str())
        .bind(new.event_key.as_str())
        .bind(&new.body)
        .bind(new.thread_key.as_ref().map(|k| k.as_str()))
        .bind(new.max_attempts.map(count_i32))
        .bind(to_db(now))
        .bind(to_db(now + new.ttl))
}

/// A submission whose notification exists: nothing is written; the answer is the stored one, its tasks
/// and digest memberships, with the differences of `new` from it. Under READ COMMITTED the conflicting
/// insert waited for the other transaction, and these new statements see its committed row.
///
/// A repeat for an erased user is refused like a new submission (SPEC §13): the answer would show what
/// the erasure settled.
pub(crate) async fn existing(pool: &PgPool, new: &NewNotification) -> Result<Created, StoreError> {
    let erased: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM user_erasure WHERE user_digest = sha256(convert_to($1, 'UTF8')))",
    )
    .bind(new.user_id.as_str())
    .fetch_one(pool)
    .await
    .map_err(store_error)?;
    if erased {
        return Err(StoreError::UserErased);
    }
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
    Ok(Created { notification_id: id, notification_ref, created: false, tasks, merged, differs })
}

/// A submission without digest decisions, in one statement: the notification, its inbox item and a
/// `PENDING` task, due now, on each channel of `$8` the user has enabled (`$9` the budgets, pairwise);
/// `$10` the submitting service token.
/// The task insert joins the notification insert's `RETURNING`, so a duplicate (no row returned) writes
/// nothing else; the foreign key from the tasks to the notification is checked at the end of the
/// statement, when the notification is there. One row per task (one with no task when none was
/// written); no row at all for a duplicate.
const AT_ONCE: &str = "WITH n AS ( \
       INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, \
         submitted_by) \
       VALUES ($1, $2, $3, $4, $5, $6, $7, $10) ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id, public_id), \
     i AS (INSERT INTO inbox_item (user_id, notification_id, created_at) SELECT $1, id, $6 FROM n), \
     t AS ( \
       INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
         thread_key, digest_count, expires_at, created_at, updated_at) \
       SELECT $1, n.id, c.name, 'PENDING', $6, c.budget, $4, NULL, NULL, $6, $6 \
       FROM n CROSS JOIN unnest($8::text[], $9::int[]) WITH ORDINALITY AS c(name, budget, o) \
       JOIN channel_pref p ON p.user_id = $1 AND p.channel = c.name AND p.enabled \
       ORDER BY c.o \
       RETURNING id, reference::text AS reference, channel) \
     SELECT n.id, n.public_id, t.id AS task_id, t.reference, t.channel FROM n LEFT JOIN t ON true";

/// [`AT_ONCE`]: `None` when the notification existed (nothing written).
pub(crate) async fn create_at_once(
    pool: &PgPool,
    new: &NewNotification,
    channels: &ChannelTable,
    now: Timestamp,
) -> Result<Option<Created>, StoreError> {
    let budgets: Vec<i32> = channels.0.iter().map(|(_, rules)| count_i32(budget(new, rules))).collect();
    let rows: Vec<AtOnceRow> = bind_notification(sqlx::query_as(AT_ONCE), new, now)
        .bind(channel_names(channels))
        .bind(&budgets)
        .bind(new.submitted_by.as_deref())
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let Some(first) = rows.first() else { return Ok(None) };
    let (id, public_id) = (first.id, first.public_id);
    let mut tasks: Vec<TaskSummary> = rows
        .into_iter()
        .filter_map(|row| {
            Some(TaskSummary {
                task_id: TaskId(row.task_id?),
                reference: row.reference?,
                channel: ChannelName(row.channel?),
                state: TaskState::Pending,
            })
        })
        .collect();
    // RETURNING follows no promised order: a submission's tasks are answered in channel order.
    tasks.sort_by_key(|t| channels.0.iter().position(|(name, _)| *name == t.channel));
    Ok(Some(Created {
        notification_id: NotificationId(id),
        notification_ref: NotificationRef(public_id),
        created: true,
        tasks,
        merged: Vec::new(),
        differs: Vec::new(),
    }))
}

crate::rows::row! {
    struct AtOnceRow {
        id: i64,
        public_id: uuid::Uuid,
        task_id: Option<i64>,
        reference: Option<String>,
        channel: Option<String>,
    }
}

/// The stored submissions of `$2` (an event key) for the users `$1`.
const SUBMISSION_QUERY: &str = "SELECT id, public_id, user_id, body, thread_key, max_attempts, \
     (extract(epoch FROM expires_at - created_at) * 1000)::bigint AS ttl_ms \
     FROM notification WHERE user_id = ANY($1) AND event_key = $2";

crate::rows::row! {
    struct SubmissionRow {
        id: i64,
        public_id: uuid::Uuid,
        user_id: String,
        body: String,
        thread_key: Option<String>,
        max_attempts: Option<i32>,
        ttl_ms: i64,
    }
}

impl SubmissionRow {
    fn into_submission(self) -> StoredSubmission {
        self.stored()
    }

    fn stored(&self) -> StoredSubmission {
        StoredSubmission {
            user_id: UserId(self.user_id.clone()),
            body: self.body.clone(),
            ttl: Millis(u64::try_from(self.ttl_ms).unwrap_or(0)),
            thread_key: self.thread_key.clone().map(ThreadKey),
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

/// Every recipient of one event (SPEC §3 for each), in **one transaction** and a number of statements
/// that does not grow with the recipients, except on a channel that merges into digests:
///
/// 1. the notifications, one `INSERT … SELECT FROM unnest(…) ON CONFLICT (user_id, event_key) DO NOTHING`
///    in user order (so two events for overlapping users wait for each other in one order, never in a
///    cycle);
/// 2. for the recipients whose notification existed: their stored submissions, compared by the repeat
///    rule — when any differs, the transaction is rolled back and nothing of the event is written;
///    otherwise their tasks and digest memberships, one statement each, for the answer;
/// 3. the inbox items, one statement; the enabled channels of every new recipient, one statement;
/// 4. the tasks of every channel without a digest rule (or of an event without a thread), one statement;
/// 5. on a channel with a digest rule, for an event with a thread, each new recipient's decision is
///    [`create_task`] itself — the same advisory lock, reads and `decide_digest` as a single submit —
///    in this transaction, because the decision depends on the rows of that (user, thread, channel)
///    read under its lock;
/// 6. one wake-up for workers when any task was written.
///
/// The answers are in the order of `news`.
pub(crate) async fn create_many(
    pool: &PgPool,
    news: &[NewNotification],
    channels: &ChannelTable,
    now: Timestamp,
) -> Result<Vec<Created>, StoreError> {
    if news.is_empty() {
        return Ok(Vec::new());
    }
    // Positions of `news` in user order.
    let mut order: Vec<usize> = (0..news.len()).collect();
    order.sort_by(|a, b| news[*a].user_id.cmp(&news[*b].user_id));
    if order.windows(2).any(|w| news[w[0]].user_id == news[w[1]].user_id) {
        // The answers are matched to recipients by user: an event names each user once (the API checks it).
        return Err(StoreError::Unknown(anyhow::anyhow!("an event names a recipient twice")));
    }
    let column = |f: &dyn Fn(&NewNotification) -> Option<String>| -> Vec<Option<String>> {
        order.iter().map(|&i| f(&news[i])).collect()
    };
    let users = column(&|n| Some(n.user_id.as_str().to_owned()));
    let keys = column(&|n| Some(n.event_key.as_str().to_owned()));
    let bodies = column(&|n| Some(n.body.clone()));
    let threads = column(&|n| n.thread_key.as_ref().map(|t| t.as_str().to_owned()));
    let budgets: Vec<Option<i32>> = order.iter().map(|&i| news[i].max_attempts.map(count_i32)).collect();
    let expiries: Vec<DateTime<Utc>> = order.iter().map(|&i| to_db(now + news[i].ttl)).collect();

    let mut tx = pool.begin().await.map_err(store_error)?;
    let inserted: Vec<(i64, uuid::Uuid, String)> = sqlx::query_as(
        "INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at, \
           submitted_by) \
         SELECT u, k, b, t, m, $7, e, s FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], \
           $6::timestamptz[], $8::text[]) WITH ORDINALITY AS r(u, k, b, t, m, e, s, o) ORDER BY o \
         ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id, public_id, user_id",
    )
    .bind(&users)
    .bind(&keys)
    .bind(&bodies)
    .bind(&threads)
    .bind(&budgets)
    .bind(&expiries)
    .bind(to_db(now))
    .bind(column(&|n| n.submitted_by.clone()))
    .fetch_all(&mut *tx)
    .await
    .map_err(store_error)?;
    let inserted: HashMap<String, (i64, uuid::Uuid)> =
        inserted.into_iter().map(|(id, public_id, user)| (user, (id, public_id))).collect();

    let mut answers: Vec<Option<Created>> = vec![None; news.len()];
    // The recipients whose notification existed: repeats, compared before anything else is kept.
    let repeats: Vec<usize> =
        order.iter().copied().filter(|&i| !inserted.contains_key(news[i].user_id.as_str())).collect();
    if !repeats.is_empty() {
        let users: Vec<&str> = repeats.iter().map(|&i| news[i].user_id.as_str()).collect();
        let keys: Vec<&str> = repeats.iter().map(|&i| news[i].event_key.as_str()).collect();
        // A repeat for an erased user is refused like a new one (SPEC §13).
        let erased: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) AS u(id) \
               JOIN user_erasure e ON e.user_digest = sha256(convert_to(u.id, 'UTF8')))",
        )
        .bind(&users)
        .fetch_one(&mut *tx)
        .await
        .map_err(store_error)?;
        if erased {
            tx.rollback().await.map_err(store_error)?;
            return Err(StoreError::UserErased);
        }
        // A new statement: under READ COMMITTED it sees the rows a conflicting insert waited for.
        let stored: Vec<SubmissionRow> = sqlx::query_as(SUBMISSIONS_OF_PAIRS)
            .bind(&users)
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;
        let stored: HashMap<String, SubmissionRow> = stored.into_iter().map(|row| (row.user_id.clone(), row)).collect();
        let mut ids = Vec::with_capacity(repeats.len());
        let mut any_differs = false;
        for &i in &repeats {
            let row = stored.get(news[i].user_id.as_str()).ok_or_else(|| {
                StoreError::Unknown(anyhow::anyhow!("a notification that conflicted on insert is not there"))
            })?;
            let differs = row.stored().differences(&news[i]);
            any_differs |= !differs.is_empty();
            ids.push(row.id);
            answers[i] = Some(Created {
                notification_id: NotificationId(row.id),
                notification_ref: NotificationRef(row.public_id),
                created: false,
                tasks: Vec::new(),
                merged: Vec::new(),
                differs,
            });
        }
        if any_differs {
            // One recipient's conflict is the whole event's: nothing is written for anyone.
            tx.rollback().await.map_err(store_error)?;
            return Ok(answers.into_iter().flatten().filter(|a| !a.differs.is_empty()).collect());
        }
        let tasks: Vec<(i64, TaskSummaryRow)> = sqlx::query_as::<_, TasksOfRow>(
            "SELECT t.notification_id, t.id, t.reference::text AS reference, t.channel, t.state \
             FROM unnest($1::text[], $2::bigint[]) AS k(user_id, notification_id) \
             JOIN delivery_task t ON t.user_id = k.user_id AND t.notification_id = k.notification_id ORDER BY t.id",
        )
        .bind(&users)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|row| (row.notification_id, row.task))
        .collect();
        let merged: Vec<(i64, String, i64)> = sqlx::query_as(
            "SELECT m.notification_id, m.channel, m.digest_task_id \
             FROM unnest($1::text[], $2::bigint[]) AS k(user_id, notification_id) \
             JOIN digest_member m ON m.user_id = k.user_id AND m.notification_id = k.notification_id \
             ORDER BY m.notification_id, m.channel",
        )
        .bind(&users)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(store_error)?;
        let by_id: HashMap<i64, usize> = repeats.iter().zip(&ids).map(|(&i, &id)| (id, i)).collect();
        for (notification, task) in tasks {
            if let Some(answer) = by_id.get(&notification).and_then(|&i| answers[i].as_mut()) {
                answer.tasks.push(TaskSummary::try_from(task)?);
            }
        }
        for (notification, channel, task) in merged {
            if let Some(answer) = by_id.get(&notification).and_then(|&i| answers[i].as_mut()) {
                answer.merged.push(Merged { channel: ChannelName(channel), digest_task_id: TaskId(task) });
            }
        }
    }

    // The new recipients, in user order.
    let fresh: Vec<(usize, i64, uuid::Uuid)> = order
        .iter()
        .filter_map(|&i| inserted.get(news[i].user_id.as_str()).map(|&(id, public_id)| (i, id, public_id)))
        .collect();
    if !fresh.is_empty() {
        let users: Vec<&str> = fresh.iter().map(|&(i, _, _)| news[i].user_id.as_str()).collect();
        let ids: Vec<i64> = fresh.iter().map(|&(_, id, _)| id).collect();
        sqlx::query(
            "INSERT INTO inbox_item (user_id, notification_id, created_at) \
             SELECT u, n, $3 FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS r(u, n, o) ORDER BY o",
        )
        .bind(&users)
        .bind(&ids)
        .bind(to_db(now))
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;
        let enabled: Vec<(String, String)> = sqlx::query_as(
            "SELECT user_id, channel FROM channel_pref WHERE user_id = ANY($1) AND enabled AND channel = ANY($2)",
        )
        .bind(&users)
        .bind(channel_names(channels))
        .fetch_all(&mut *tx)
        .await
        .map_err(store_error)?;
        let enabled: HashSet<(String, String)> = enabled.into_iter().collect();

        // Every (recipient, channel) a task or a digest decision is due for, in user then channel order.
        let mut plain: Vec<(usize, i64, &ChannelName, u32)> = Vec::new();
        let mut digest: Vec<(usize, i64, &ChannelName, &ChannelRules, u32)> = Vec::new();
        for &(i, id, public_id) in &fresh {
            let new = &news[i];
            answers[i] = Some(Created {
                notification_id: NotificationId(id),
                notification_ref: NotificationRef(public_id),
                created: true,
                tasks: Vec::new(),
                merged: Vec::new(),
                differs: Vec::new(),
            });
            for (channel, rules) in &channels.0 {
                if !enabled.contains(&(new.user_id.as_str().to_owned(), channel.as_str().to_owned())) {
                    continue;
                }
                let budget = budget(new, rules);
                if rules.digest.is_some() && new.thread_key.is_some() {
                    digest.push((i, id, channel, rules, budget));
                } else {
                    plain.push((i, id, channel, budget));
                }
            }
        }
        // The instant tasks: what `create_task` writes for `SendNow`, for all of them at once.
        if !plain.is_empty() {
            let users: Vec<&str> = plain.iter().map(|&(i, ..)| news[i].user_id.as_str()).collect();
            let ids: Vec<i64> = plain.iter().map(|&(_, id, ..)| id).collect();
            let names: Vec<&str> = plain.iter().map(|&(_, _, channel, _)| channel.as_str()).collect();
            let budgets: Vec<i32> = plain.iter().map(|&(.., budget)| count_i32(budget)).collect();
            let threads: Vec<Option<&str>> =
                plain.iter().map(|&(i, ..)| news[i].thread_key.as_ref().map(ThreadKey::as_str)).collect();
            let rows: Vec<(i64, String, i64, String)> = sqlx::query_as(
                "INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
                 thread_key, digest_count, expires_at, created_at, updated_at) \
                 SELECT u, n, c, 'PENDING', $6, b, t, NULL, NULL, $6, $6 \
                 FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::text[]) WITH ORDINALITY \
                   AS r(u, n, c, b, t, o) ORDER BY o \
                 RETURNING id, reference::text, notification_id, channel",
            )
            .bind(&users)
            .bind(&ids)
            .bind(&names)
            .bind(&budgets)
            .bind(&threads)
            .bind(to_db(now))
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;
            // RETURNING follows no promised order: each row finds its recipient by its notification.
            let by_id: HashMap<i64, usize> = fresh.iter().map(|&(i, id, _)| (id, i)).collect();
            for (task, reference, notification, channel) in rows {
                if let Some(answer) = by_id.get(&notification).and_then(|&i| answers[i].as_mut()) {
                    answer.tasks.push(TaskSummary {
                        task_id: TaskId(task),
                        reference,
                        channel: ChannelName(channel),
                        state: TaskState::Pending,
                    });
                }
            }
        }
        // Digest decisions, each under its (user, thread, channel) lock, exactly as a single submit.
        for (i, id, channel, rules, budget) in digest {
            match create_task(&mut tx, &news[i], NotificationId(id), channel, rules, budget, now).await? {
                Placed::Task(summary) => {
                    if let Some(answer) = answers[i].as_mut() {
                        answer.tasks.push(summary);
                    }
                }
                Placed::Merged(digest_task_id) => {
                    if let Some(answer) = answers[i].as_mut() {
                        answer.merged.push(Merged { channel: channel.clone(), digest_task_id });
                    }
                }
            }
        }
        // A recipient's tasks in channel order, as a single submit answers them.
        for &(i, ..) in &fresh {
            if let Some(answer) = answers[i].as_mut() {
                answer.tasks.sort_by_key(|t| channels.0.iter().position(|(name, _)| *name == t.channel));
            }
        }
    }
    tx.commit().await.map_err(store_error)?;
    answers
        .into_iter()
        .map(|a| a.ok_or_else(|| StoreError::Unknown(anyhow::anyhow!("a recipient without an answer"))))
        .collect()
}

/// The stored submissions of the pairs `($1[i], $2[i])` (user, event key), each by the unique key.
const SUBMISSIONS_OF_PAIRS: &str = "SELECT n.id, n.public_id, n.user_id, n.body, n.thread_key, n.max_attempts, \
     (extract(epoch FROM n.expires_at - n.created_at) * 1000)::bigint AS ttl_ms \
     FROM unnest($1::text[], $2::text[]) AS k(user_id, event_key) \
     JOIN notification n ON n.user_id = k.user_id AND n.event_key = k.event_key";

crate::rows::row! {
    /// A task of one of several notifications.
    struct TasksOfRow {
        notification_id: i64,
    } flatten {
        task: TaskSummaryRow,
    }
}
