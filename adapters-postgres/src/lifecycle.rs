//! A person's data has an end (SPEC §13): the erasure of a user, in one transaction; the purge — retention
//! for every user and the three boundaries after an erasure — in bounded batches; the purge's lease.

use chrono::{DateTime, Utc};
use herald_domain::claim::erased;
use herald_domain::{Outcome, Timestamp, UserId};
use herald_ports::audit::NewAuditEvent;
use herald_ports::store::{Erasure, ErasureRecord, PurgeCutoffs, PurgeReport, StoreError};
use sqlx::{PgConnection, PgPool};

use crate::convert::{count_u32, from_db, opt_from_db, store_error, to_db};
use crate::rows::row;

/// The erasure's lock on `$1`'s writes: the exclusive side of the shared advisory lock the guard trigger
/// `herald_refuse_erased` (migration `0020`) takes for every user a statement writes notifications or
/// preferences for. Taken first, in a statement of its own, so every later statement of the erasure sees
/// whatever a submission that held the lock committed.
const LOCK_USER: &str = "SELECT pg_advisory_xact_lock(hashtextextended('herald erasure/' || $1, 0))";

const RECORD_COLUMNS: &str = "user_id, requested_at, requested_by, settled_tasks, released_reviews, \
     destroyed_destinations, content_removed_at, content_removed, records_removed_at, records_removed, tombstoned_at";

/// Settles every task of `$1` that is not in a holder's hands (`PENDING`, `UNKNOWN` — parked or not) as
/// `herald_domain::claim::erased` decides: `$3`/`$4` the state and reason without uncertain history,
/// `$5`/`$6` with it; each gets a `USER_ERASED` attempt row (`$7`) at `$2`. The rows are locked first
/// (`FOR UPDATE`): a claim holding one is waited for, and a task it took (now `SENDING`) is left to its
/// holder. Answers how many were settled and how many of those were parked.
const SETTLE: &str = "WITH locked AS MATERIALIZED ( \
       SELECT t.id, t.outcome_uncertain, (t.state = 'UNKNOWN' AND t.needs_review AND t.next_attempt_at IS NULL) AS parked \
       FROM delivery_task t WHERE t.user_id = $1 AND t.state IN ('PENDING', 'UNKNOWN') FOR UPDATE), \
     settled AS ( \
       UPDATE delivery_task t SET \
         state = CASE WHEN l.outcome_uncertain THEN $5 ELSE $3 END, \
         last_error = CASE WHEN l.outcome_uncertain THEN $6 ELSE $4 END, \
         needs_review = false, next_attempt_at = NULL, uncertain_since = NULL, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, \
         last_attempt_no = t.last_attempt_no + 1, updated_at = $2 \
       FROM locked l WHERE t.user_id = $1 AND t.id = l.id \
       RETURNING t.user_id, t.id, t.last_attempt_no, l.parked), \
     recorded AS ( \
       INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, outcome, started_at, finished_at) \
       SELECT user_id, id, last_attempt_no, herald_uuid_v7(), $7, $2, $2 FROM settled) \
     SELECT count(*)::int AS settled, (count(*) FILTER (WHERE parked))::int AS released FROM settled";

row! {
    struct RecordRow {
        user_id: Option<String>,
        requested_at: DateTime<Utc>,
        requested_by: String,
        settled_tasks: i32,
        released_reviews: i32,
        destroyed_destinations: i32,
        content_removed_at: Option<DateTime<Utc>>,
        content_removed: Option<i32>,
        records_removed_at: Option<DateTime<Utc>>,
        records_removed: Option<i32>,
        tombstoned_at: Option<DateTime<Utc>>,
    }
}

impl From<RecordRow> for ErasureRecord {
    fn from(r: RecordRow) -> ErasureRecord {
        let at = |t: Option<DateTime<Utc>>, n: Option<i32>| t.map(|t| (from_db(t), count_u32(n.unwrap_or(0))));
        ErasureRecord {
            user_id: r.user_id.map(UserId),
            requested_at: from_db(r.requested_at),
            requested_by: r.requested_by,
            settled_tasks: count_u32(r.settled_tasks),
            released_reviews: count_u32(r.released_reviews),
            destroyed_destinations: count_u32(r.destroyed_destinations),
            content_removed: at(r.content_removed_at, r.content_removed),
            records_removed: at(r.records_removed_at, r.records_removed),
            tombstoned_at: opt_from_db(r.tombstoned_at),
        }
    }
}

/// The SHA-256 of a user id, as `user_erasure.user_digest` and the guard trigger compute it.
const DIGEST: &str = "sha256(convert_to($1, 'UTF8'))";

/// The erasure (`LifecycleStore::erase`).
pub(crate) async fn erase(
    pool: &PgPool,
    user: &UserId,
    audit: &NewAuditEvent,
    now: Timestamp,
) -> Result<Erasure, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    sqlx::query(LOCK_USER).bind(user.as_str()).execute(&mut *tx).await.map_err(store_error)?;
    let inserted = sqlx::query(&format!(
        "INSERT INTO user_erasure (user_digest, user_id, requested_at, requested_by) VALUES ({DIGEST}, $1, $2, $3) \
         ON CONFLICT (user_digest) DO NOTHING"
    ))
    .bind(user.as_str())
    .bind(to_db(now))
    .bind(audit.actor.label())
    .execute(&mut *tx)
    .await
    .map_err(store_error)?;
    if inserted.rows_affected() == 0 {
        tx.rollback().await.map_err(store_error)?;
        let record =
            erasure(pool, user).await?.ok_or_else(|| StoreError::Unknown(anyhow::anyhow!("erasure vanished")))?;
        return Ok(Erasure { record, first: false });
    }
    crate::audit::insert(&mut tx, audit).await?;
    let (settled, released) = settle(&mut tx, user, now).await?;
    let destroyed = sqlx::query("DELETE FROM channel_pref WHERE user_id = $1")
        .bind(user.as_str())
        .execute(&mut *tx)
        .await
        .map_err(store_error)?
        .rows_affected();
    for statement in [
        "DELETE FROM test_send_log WHERE user_id = $1",
        "DELETE FROM console_sign_in_link WHERE user_id = $1",
        "UPDATE console_session SET ended_at = $2, ended_reason = 'user erased' WHERE user_id = $1 AND ended_at IS NULL",
    ] {
        sqlx::query(statement).bind(user.as_str()).bind(to_db(now)).execute(&mut *tx).await.map_err(store_error)?;
    }
    let row: RecordRow = sqlx::query_as(&format!(
        "UPDATE user_erasure SET settled_tasks = $2, released_reviews = $3, destroyed_destinations = $4 \
         WHERE user_digest = {DIGEST} RETURNING {RECORD_COLUMNS}"
    ))
    .bind(user.as_str())
    .bind(settled)
    .bind(released)
    .bind(i32::try_from(destroyed).unwrap_or(i32::MAX))
    .fetch_one(&mut *tx)
    .await
    .map_err(store_error)?;
    tx.commit().await.map_err(store_error)?;
    Ok(Erasure { record: row.into(), first: true })
}

/// [`SETTLE`] for one user: (settled, of which parked).
async fn settle(conn: &mut PgConnection, user: &UserId, now: Timestamp) -> Result<(i32, i32), StoreError> {
    let (plain, uncertain) = (erased(false), erased(true));
    sqlx::query_as(SETTLE)
        .bind(user.as_str())
        .bind(to_db(now))
        .bind(plain.state.as_str())
        .bind(plain.reason)
        .bind(uncertain.state.as_str())
        .bind(uncertain.reason)
        .bind(Outcome::UserErased.as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(store_error)
}

/// The erasure record of `user` (`LifecycleStore::erasure`).
pub(crate) async fn erasure(pool: &PgPool, user: &UserId) -> Result<Option<ErasureRecord>, StoreError> {
    let row: Option<RecordRow> =
        sqlx::query_as(&format!("SELECT {RECORD_COLUMNS} FROM user_erasure WHERE user_digest = {DIGEST}"))
            .bind(user.as_str())
            .fetch_optional(pool)
            .await
            .map_err(store_error)?;
    Ok(row.map(ErasureRecord::from))
}

/// `LifecycleStore::take_lease`: the job's row is taken when free (absent, or its lease over at `$3`) or
/// already this holder's.
pub(crate) async fn take_lease(
    pool: &PgPool,
    job: &str,
    holder: &str,
    now: Timestamp,
    until: Timestamp,
) -> Result<bool, StoreError> {
    let taken: Option<String> = sqlx::query_scalar(
        "INSERT INTO lifecycle_lease (job, holder, until) VALUES ($1, $2, $4) \
         ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until \
         WHERE lifecycle_lease.holder = EXCLUDED.holder OR lifecycle_lease.until < $3 \
         RETURNING holder",
    )
    .bind(job)
    .bind(holder)
    .bind(to_db(now))
    .bind(to_db(until))
    .fetch_optional(pool)
    .await
    .map_err(store_error)?;
    Ok(taken.is_some())
}

/// Removes the notifications `(users[i], ids[i])` with everything hanging off them — attempts, digest
/// memberships (theirs, and those pointing at their tasks), inbox items, tasks — in one transaction of
/// five statements. Answers how many notifications were removed.
async fn remove_notifications(conn: &mut PgConnection, users: &[String], ids: &[i64]) -> Result<u32, StoreError> {
    const PAIRS: &str = "unnest($1::text[], $2::bigint[]) AS n(user_id, id)";
    let statements = [
        format!(
            "DELETE FROM delivery_attempt a USING delivery_task t, {PAIRS} \
             WHERE t.user_id = n.user_id AND t.notification_id = n.id AND a.user_id = t.user_id AND a.task_id = t.id"
        ),
        format!(
            "DELETE FROM digest_member d USING {PAIRS} WHERE d.user_id = n.user_id AND (d.notification_id = n.id \
             OR d.digest_task_id IN (SELECT t.id FROM delivery_task t WHERE t.user_id = n.user_id AND t.notification_id = n.id))"
        ),
        format!("DELETE FROM inbox_item i USING {PAIRS} WHERE i.user_id = n.user_id AND i.notification_id = n.id"),
        format!("DELETE FROM delivery_task t USING {PAIRS} WHERE t.user_id = n.user_id AND t.notification_id = n.id"),
        format!("DELETE FROM notification x USING {PAIRS} WHERE x.user_id = n.user_id AND x.id = n.id"),
    ];
    let mut removed = 0;
    for statement in &statements {
        removed = sqlx::query(statement)
            .bind(users)
            .bind(ids)
            .execute(&mut *conn)
            .await
            .map_err(store_error)?
            .rows_affected();
    }
    Ok(u32::try_from(removed).unwrap_or(u32::MAX))
}

/// A notification none of whose tasks is still due, in a holder's hands, or waiting for a person.
const FINISHED: &str =
    "NOT EXISTS (SELECT 1 FROM delivery_task t WHERE t.user_id = n.user_id AND t.notification_id = n.id \
     AND (t.state IN ('PENDING', 'SENDING') OR t.needs_review OR t.next_attempt_at IS NOT NULL))";

/// Retention for every user: pages of the oldest notifications by id (the primary key's order, which is
/// the order they were made in), each page's finished ones older than the window removed in a
/// transaction of its own that locks them with `SKIP LOCKED` (a claim never locks a finished task or a
/// notification). Stops at the first page holding a notification younger than the window.
async fn purge_finished(pool: &PgPool, before: Timestamp, batch: u32) -> Result<u32, StoreError> {
    let mut after = 0i64;
    let mut removed = 0;
    loop {
        let page: Vec<(String, i64, bool)> = sqlx::query_as(
            "SELECT n.user_id, n.id, n.created_at < $2 FROM notification n WHERE n.id > $1 ORDER BY n.id LIMIT $3",
        )
        .bind(after)
        .bind(to_db(before))
        .bind(i64::from(batch))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
        let Some(last) = page.last() else { break };
        after = last.1;
        let young = page.iter().any(|(_, _, old)| !old);
        let (users, ids): (Vec<String>, Vec<i64>) =
            page.into_iter().filter(|(_, _, old)| *old).map(|(user, id, _)| (user, id)).unzip();
        if !ids.is_empty() {
            let mut tx = pool.begin().await.map_err(store_error)?;
            let due: Vec<(String, i64)> = sqlx::query_as(&format!(
                "SELECT n.user_id, n.id FROM notification n JOIN unnest($1::text[], $2::bigint[]) AS c(user_id, id) \
                 ON n.user_id = c.user_id AND n.id = c.id WHERE {FINISHED} FOR UPDATE OF n SKIP LOCKED"
            ))
            .bind(&users)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;
            let (users, ids): (Vec<String>, Vec<i64>) = due.into_iter().unzip();
            removed += remove_notifications(&mut tx, &users, &ids).await?;
            tx.commit().await.map_err(store_error)?;
        }
        if young {
            break;
        }
    }
    Ok(removed)
}

/// Runs `statement` (`$1` the user, `$2` the batch) until it changes no row; answers the rows changed.
async fn in_batches(pool: &PgPool, statement: &str, user: &str, batch: u32) -> Result<u32, StoreError> {
    let mut total = 0u64;
    loop {
        let n = sqlx::query(statement)
            .bind(user)
            .bind(i64::from(batch))
            .execute(pool)
            .await
            .map_err(store_error)?
            .rows_affected();
        total += n;
        if n == 0 {
            return Ok(u32::try_from(total).unwrap_or(u32::MAX));
        }
    }
}

/// The erasures due at a boundary: requested before `$1`, the boundary not run (`$2`: its column).
async fn due_erasures(pool: &PgPool, column: &str, before: Timestamp, extra: &str) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(&format!(
        "SELECT user_id FROM user_erasure WHERE {column} IS NULL AND requested_at < $1 AND user_id IS NOT NULL {extra} \
         ORDER BY requested_at LIMIT 100"
    ))
    .bind(to_db(before))
    .fetch_all(pool)
    .await
    .map_err(store_error)
}

/// `LifecycleStore::purge`.
pub(crate) async fn purge(pool: &PgPool, c: &PurgeCutoffs) -> Result<PurgeReport, StoreError> {
    let mut report = PurgeReport {
        finished_notifications: purge_finished(pool, c.finished_before, c.batch).await?,
        ..PurgeReport::default()
    };

    // Content: bodies blanked, inbox items removed.
    for user in due_erasures(pool, "content_removed_at", c.content_before, "").await? {
        let blanked = in_batches(
            pool,
            "UPDATE notification SET body = '' WHERE user_id = $1 AND id IN \
               (SELECT id FROM notification WHERE user_id = $1 AND body <> '' LIMIT $2)",
            &user,
            c.batch,
        )
        .await?;
        in_batches(
            pool,
            "DELETE FROM inbox_item WHERE user_id = $1 AND notification_id IN \
               (SELECT notification_id FROM inbox_item WHERE user_id = $1 LIMIT $2)",
            &user,
            c.batch,
        )
        .await?;
        sqlx::query("UPDATE user_erasure SET content_removed_at = $2, content_removed = $3 WHERE user_id = $1")
            .bind(&user)
            .bind(to_db(c.now))
            .bind(i32::try_from(blanked).unwrap_or(i32::MAX))
            .execute(pool)
            .await
            .map_err(store_error)?;
        report.content_boundaries += 1;
    }

    // Records: every notification of the user with its tasks and attempts, and the ended sessions.
    for user in due_erasures(pool, "records_removed_at", c.records_before, "AND content_removed_at IS NOT NULL").await?
    {
        let mut removed = 0;
        loop {
            let ids: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM notification WHERE user_id = $1 ORDER BY id LIMIT $2")
                    .bind(&user)
                    .bind(i64::from(c.batch))
                    .fetch_all(pool)
                    .await
                    .map_err(store_error)?;
            if ids.is_empty() {
                break;
            }
            let users = vec![user.clone(); ids.len()];
            let mut tx = pool.begin().await.map_err(store_error)?;
            removed += remove_notifications(&mut tx, &users, &ids).await?;
            tx.commit().await.map_err(store_error)?;
        }
        sqlx::query("DELETE FROM console_session WHERE user_id = $1")
            .bind(&user)
            .execute(pool)
            .await
            .map_err(store_error)?;
        sqlx::query("UPDATE user_erasure SET records_removed_at = $2, records_removed = $3 WHERE user_id = $1")
            .bind(&user)
            .bind(to_db(c.now))
            .bind(i32::try_from(removed).unwrap_or(i32::MAX))
            .execute(pool)
            .await
            .map_err(store_error)?;
        report.records_boundaries += 1;
    }

    // The tombstone: the record no longer names the user (the digest stays, so a submission is still refused).
    let tombstones = sqlx::query(
        "UPDATE user_erasure SET user_id = NULL, tombstoned_at = $2 \
         WHERE tombstoned_at IS NULL AND records_removed_at IS NOT NULL AND requested_at < $1",
    )
    .bind(to_db(c.tombstone_before))
    .bind(to_db(c.now))
    .execute(pool)
    .await
    .map_err(store_error)?
    .rows_affected();
    report.tombstones = u32::try_from(tombstones).unwrap_or(u32::MAX);
    report.status_events = crate::status::purge_delivered(pool, c.status_events_before, c.batch).await?;
    Ok(report)
}
