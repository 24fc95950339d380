//! The invariants of the tables the database derives from `delivery_task` by triggers: the task tally's
//! (migration `0010`: the gauges' sums equal an exact count of `delivery_task`) and the claim queue's
//! (migration `0012`: one `task_queue` row per scheduled task, with its channel and due time); and the
//! ones Herald's statements keep by construction since migrations `0016` and `0018` dropped their foreign
//! keys: every attempt belongs to a stored task, every inbox item and task to a stored notification. Checked by `tests/it/tally.rs`, after every step of the model test,
//! and at the end of the soak.

use herald_postgres::PARKED;
use sqlx::{PgPool, Row};

/// What the task gauges counted before the tally: `count(*)` of `delivery_task` per channel, state and
/// parked ([`PARKED`], the review list's predicate), in the gauges' order. A full scan of the table.
#[must_use]
pub fn exact_task_counts_query() -> String {
    format!(
        "SELECT channel, state, {PARKED} AS parked, count(*) AS n FROM delivery_task t GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )
}

/// One group of the gauges: channel, state, parked, tasks.
pub type Group = (String, String, bool, i64);

/// [`exact_task_counts_query`]'s answer.
///
/// # Errors
/// Database failures.
pub async fn exact_task_counts(pool: &PgPool) -> anyhow::Result<Vec<Group>> {
    Ok(sqlx::query_as(&exact_task_counts_query()).fetch_all(pool).await?)
}

/// The groups where the tally's sum and the exact count differ, one line each (empty when the invariant
/// holds). Both sides are read by one statement, so in one snapshot: writers may keep running.
///
/// # Errors
/// Database failures.
pub async fn tally_differences(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let query = format!(
        "WITH exact AS ({}), \
              tally AS (SELECT channel, state, parked, sum(n)::bigint AS n FROM task_tally GROUP BY 1, 2, 3 \
                        HAVING sum(n) <> 0) \
         SELECT channel, state, parked, e.n AS exact, y.n AS tally \
         FROM exact e FULL JOIN tally y USING (channel, state, parked) \
         WHERE e.n IS DISTINCT FROM y.n ORDER BY 1, 2, 3",
        exact_task_counts_query()
    );
    let rows = sqlx::query(&query).fetch_all(pool).await?;
    Ok(rows
        .iter()
        .map(|r| {
            format!(
                "{} {}{}: {} tasks, tally {}",
                r.get::<String, _>(0),
                r.get::<String, _>(1),
                if r.get::<bool, _>(2) { " parked" } else { "" },
                r.get::<Option<i64>, _>(3).unwrap_or(0),
                r.get::<Option<i64>, _>(4).unwrap_or(0)
            )
        })
        .collect())
}

/// The tasks where `task_queue` and `delivery_task` disagree, one line each (empty when the invariant
/// holds): a scheduled task without its queue row or with another due time or channel, or a queue row
/// of a task that is not scheduled. One statement, so one snapshot.
///
/// # Errors
/// Database failures.
pub async fn queue_differences(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let rows: Vec<(String, i64, Option<String>, Option<String>)> = sqlx::query_as(
        "WITH scheduled AS (SELECT user_id, id AS task_id, channel, next_attempt_at AS due_at FROM delivery_task \
                            WHERE next_attempt_at IS NOT NULL) \
         SELECT user_id, task_id, s.channel || ' due ' || s.due_at::text, q.channel || ' due ' || q.due_at::text \
         FROM scheduled s FULL JOIN task_queue q USING (user_id, task_id) \
         WHERE (s.channel, s.due_at) IS DISTINCT FROM (q.channel, q.due_at) ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(user, id, task, queued)| {
            format!(
                "task {user}/{id}: {}, queue row {}",
                task.unwrap_or_else(|| "not scheduled".to_owned()),
                queued.unwrap_or_else(|| "missing".to_owned())
            )
        })
        .collect())
}

/// The attempts whose task is not stored, one line each (empty when the invariant holds). No foreign key
/// checks this (migration `0016`): the statements that write attempts insert them from the task rows they
/// update. Reads every attempt.
///
/// # Errors
/// Database failures.
pub async fn attempts_without_task(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let rows: Vec<(String, i64, i32)> = sqlx::query_as(
        "SELECT a.user_id, a.task_id, a.attempt_no FROM delivery_attempt a \
         WHERE NOT EXISTS (SELECT 1 FROM delivery_task t WHERE t.user_id = a.user_id AND t.id = a.task_id) \
         ORDER BY 1, 2, 3",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(user, task, no)| format!("attempt {no} of task {user}/{task}: no such task")).collect())
}

/// The inbox items and tasks whose notification is not stored, one line each (empty when the invariant
/// holds). No foreign key checks this since migration `0018`: the statements that write them insert them
/// with their notification. Reads every inbox item and task.
///
/// # Errors
/// Database failures.
pub async fn rows_without_notification(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT 'inbox item', i.user_id, i.notification_id, 0::bigint FROM inbox_item i \
         WHERE NOT EXISTS (SELECT 1 FROM notification n WHERE n.user_id = i.user_id AND n.id = i.notification_id) \
         UNION ALL \
         SELECT 'task', t.user_id, t.notification_id, t.id FROM delivery_task t \
         WHERE NOT EXISTS (SELECT 1 FROM notification n WHERE n.user_id = t.user_id AND n.id = t.notification_id) \
         ORDER BY 1, 2, 3, 4",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(kind, user, notification, task)| match kind.as_str() {
            "task" => format!("task {user}/{task}: no notification {user}/{notification}"),
            _ => format!("inbox item {user}/{notification}: no such notification"),
        })
        .collect())
}

/// [`tally_differences`], [`queue_differences`], [`attempts_without_task`] and [`rows_without_notification`]
/// together: every table kept in step with the tasks, against the tasks.
///
/// # Errors
/// Database failures.
pub async fn derived_differences(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let mut differences = tally_differences(pool).await?;
    differences.extend(queue_differences(pool).await?);
    differences.extend(attempts_without_task(pool).await?);
    differences.extend(rows_without_notification(pool).await?);
    Ok(differences)
}

/// How many rows the tally holds (deltas not yet compacted included).
///
/// # Errors
/// Database failures.
pub async fn tally_rows(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM task_tally").fetch_one(pool).await?)
}

/// The store's gauges answer (`NotificationStore::task_counts`, which compacts a grown tally) in the
/// shape of the exact count.
#[must_use]
pub fn groups(counts: &[herald_ports::store::TaskCount]) -> Vec<Group> {
    counts
        .iter()
        .map(|c| {
            (c.channel.to_string(), c.state.as_str().to_owned(), c.parked, i64::try_from(c.count).unwrap_or(i64::MAX))
        })
        .collect()
}

/// [`derived_differences`], then the gauges' answer against the exact count, group for group and in
/// order. The second comparison reads twice, so it needs no writer to run meanwhile.
///
/// # Errors
/// Database failures.
pub async fn gauge_differences(store: &herald_postgres::PgStore) -> anyhow::Result<Vec<String>> {
    use herald_ports::prelude::*;
    let mut differences = derived_differences(store.pool()).await?;
    let answer = groups(&store.task_counts().await?);
    let exact = exact_task_counts(store.pool()).await?;
    if answer != exact {
        differences.push(format!("the gauges answer {answer:?}, the exact count is {exact:?}"));
    }
    Ok(differences)
}
