//! A person's data has an end (SPEC §13): the erasure of a user, in one transaction.

use chrono::{DateTime, Utc};
use herald_domain::claim::erased;
use herald_domain::{Outcome, Timestamp, UserId};
use herald_ports::store::{Erasure, ErasureRecord, StoreError};
use sqlx::{PgConnection, PgPool};

use crate::convert::{count_u32, from_db, opt_from_db, store_error, to_db};
use crate::rows::from_row;

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

from_row!(RecordRow {
    user_id,
    requested_at,
    requested_by,
    settled_tasks,
    released_reviews,
    destroyed_destinations,
    content_removed_at,
    content_removed,
    records_removed_at,
    records_removed,
    tombstoned_at
});

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
pub(crate) async fn erase(pool: &PgPool, user: &UserId, actor: &str, now: Timestamp) -> Result<Erasure, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    sqlx::query(LOCK_USER).bind(user.as_str()).execute(&mut *tx).await.map_err(store_error)?;
    let inserted = sqlx::query(&format!(
        "INSERT INTO user_erasure (user_digest, user_id, requested_at, requested_by) VALUES ({DIGEST}, $1, $2, $3) \
         ON CONFLICT (user_digest) DO NOTHING"
    ))
    .bind(user.as_str())
    .bind(to_db(now))
    .bind(actor)
    .execute(&mut *tx)
    .await
    .map_err(store_error)?;
    if inserted.rows_affected() == 0 {
        tx.rollback().await.map_err(store_error)?;
        let record =
            erasure(pool, user).await?.ok_or_else(|| StoreError::Unknown(anyhow::anyhow!("erasure vanished")))?;
        return Ok(Erasure { record, first: false });
    }
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
