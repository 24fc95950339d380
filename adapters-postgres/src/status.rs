//! The status events' outbox (issue 46, migration `0031`). The events themselves are written by the
//! trigger `herald_status_events` on `delivery_task`, in the transaction of the change they tell; this
//! module keeps the subscriptions the trigger reads and lets a dispatcher claim, settle and list events.

use chrono::{DateTime, Utc};
use herald_domain::{Millis, NotificationRef, StatusKind, Timestamp};
use herald_ports::{ParkedStatusEvent, StatusEvent, StoreError, SubscriptionFilter};
use sqlx::PgPool;

use crate::convert::{from_db, store_error, to_db};
use crate::rows::row;

/// Replaces the subscriptions in one transaction: a task change commits against the old set or the new.
/// Processes starting at once take turns (the lock conflicts with itself, not with the trigger's reads), and
/// a set equal to the stored one is left as it is.
pub(crate) async fn set_subscriptions(pool: &PgPool, subscriptions: &[SubscriptionFilter]) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    sqlx::query("LOCK TABLE status_subscription IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;
    let stored: Vec<(String, Vec<String>, Option<Vec<String>>)> =
        sqlx::query_as("SELECT name, kinds, service_tokens FROM status_subscription ORDER BY name")
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;
    let mut wanted: Vec<(String, Vec<String>, Option<Vec<String>>)> = subscriptions
        .iter()
        .map(|s| (s.name.clone(), s.kinds.iter().map(|k| k.as_str().to_owned()).collect(), s.service_tokens.clone()))
        .collect();
    wanted.sort();
    if stored == wanted {
        return tx.commit().await.map_err(store_error);
    }
    sqlx::query("DELETE FROM status_subscription").execute(&mut *tx).await.map_err(store_error)?;
    for subscription in subscriptions {
        let kinds: Vec<&str> = subscription.kinds.iter().map(|kind| kind.as_str()).collect();
        sqlx::query("INSERT INTO status_subscription (name, kinds, service_tokens) VALUES ($1, $2, $3)")
            .bind(&subscription.name)
            .bind(&kinds)
            .bind(&subscription.service_tokens)
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
    }
    tx.commit().await.map_err(store_error)
}

/// Chooses and locks the due rows, oldest first by the index of pending events (`SKIP LOCKED`: another
/// dispatcher's rows are passed over; rows waiting for a retry are read past), moves
/// their due time to the end of the hold and counts the try, in one statement; the notification's public
/// id, event key and (for `with_body`) body come from the same statement. The update finds each locked row
/// by its physical address (a locked row does not move), so it reads no index.
const CLAIM_STATUS_EVENTS: &str = "WITH due AS MATERIALIZED ( \
       SELECT ctid FROM status_event \
        WHERE delivered_at IS NULL AND parked_at IS NULL AND due_at <= $2 AND subscription = ANY ($1) \
        ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED), \
     held AS ( \
       UPDATE status_event e SET due_at = $4, tries = e.tries + 1 \
        WHERE e.ctid = ANY (ARRAY(SELECT ctid FROM due)) \
       RETURNING e.id, e.seq, e.subscription, e.user_id, e.notification_id, e.channel, e.attempt_no, e.kind, \
                 e.reason, e.actor, e.channel_message_id, e.occurred_at, e.tries) \
     SELECT h.id, h.seq, h.subscription, h.channel, h.attempt_no, h.kind, h.reason, h.actor, h.channel_message_id, \
            h.occurred_at, h.tries, n.public_id, n.event_key, \
            CASE WHEN h.subscription = ANY ($5) THEN n.body END AS body \
       FROM held h JOIN notification n ON n.user_id = h.user_id AND n.id = h.notification_id \
      ORDER BY h.seq";

row! {
    struct ClaimedRow {
        id: uuid::Uuid,
        seq: i64,
        subscription: String,
        channel: String,
        attempt_no: i32,
        kind: String,
        reason: Option<String>,
        actor: Option<String>,
        channel_message_id: Option<String>,
        occurred_at: DateTime<Utc>,
        tries: i32,
        public_id: uuid::Uuid,
        event_key: String,
        body: Option<String>,
    }
}

fn kind(name: &str) -> Result<StatusKind, StoreError> {
    StatusKind::parse(name).ok_or_else(|| StoreError::Unknown(anyhow::anyhow!("unknown status event kind {name:?}")))
}

fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

pub(crate) async fn claim(
    pool: &PgPool,
    subscriptions: &[String],
    with_body: &[String],
    limit: u32,
    now: Timestamp,
    hold: Millis,
) -> Result<Vec<StatusEvent>, StoreError> {
    let rows: Vec<ClaimedRow> = sqlx::query_as(CLAIM_STATUS_EVENTS)
        .bind(subscriptions)
        .bind(to_db(now))
        .bind(i64::from(limit))
        .bind(to_db(now + hold))
        .bind(with_body)
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    rows.into_iter()
        .map(|row| {
            Ok(StatusEvent {
                id: row.id,
                sequence: row.seq,
                subscription: row.subscription,
                kind: kind(&row.kind)?,
                notification: NotificationRef(row.public_id),
                event_key: row.event_key,
                channel: row.channel,
                attempt: count(row.attempt_no),
                reason: row.reason,
                actor: row.actor,
                channel_message_id: row.channel_message_id,
                occurred_at: from_db(row.occurred_at),
                tries: count(row.tries),
                body: row.body,
            })
        })
        .collect()
}

/// The events of these sequences, pending until now (found by the pending index), delivered.
pub(crate) async fn delivered(pool: &PgPool, sequences: &[i64], now: Timestamp) -> Result<(), StoreError> {
    if sequences.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE status_event SET due_at = NULL, delivered_at = $2, last_error = NULL \
          WHERE seq = ANY ($1) AND delivered_at IS NULL AND parked_at IS NULL",
    )
    .bind(sequences)
    .bind(to_db(now))
    .execute(pool)
    .await
    .map_err(store_error)?;
    Ok(())
}

pub(crate) async fn retry(pool: &PgPool, sequence: i64, due: Timestamp, error: &str) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE status_event SET due_at = $2, last_error = $3 WHERE seq = $1 AND delivered_at IS NULL AND parked_at IS NULL",
    )
    .bind(sequence)
        .bind(to_db(due))
        .bind(error)
        .execute(pool)
        .await
        .map_err(store_error)?;
    Ok(())
}

pub(crate) async fn park(pool: &PgPool, sequence: i64, now: Timestamp, error: &str) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE status_event SET due_at = NULL, parked_at = $2, last_error = $3 \
          WHERE seq = $1 AND delivered_at IS NULL AND parked_at IS NULL",
    )
    .bind(sequence)
    .bind(to_db(now))
    .bind(error)
    .execute(pool)
    .await
    .map_err(store_error)?;
    Ok(())
}

/// Removes the events delivered before `before`, oldest first, `batch` per statement (each its own
/// transaction), by the index of delivered events; pending and parked events are not in it.
pub(crate) async fn purge_delivered(pool: &PgPool, before: Timestamp, batch: u32) -> Result<u32, StoreError> {
    let mut removed = 0u64;
    loop {
        let n = sqlx::query(
            "DELETE FROM status_event WHERE ctid = ANY (ARRAY(SELECT ctid FROM status_event \
               WHERE delivered_at IS NOT NULL AND delivered_at < $1 ORDER BY delivered_at LIMIT $2))",
        )
        .bind(to_db(before))
        .bind(i64::from(batch))
        .execute(pool)
        .await
        .map_err(store_error)?
        .rows_affected();
        removed += n;
        if n < u64::from(batch) {
            return Ok(u32::try_from(removed).unwrap_or(u32::MAX));
        }
    }
}

row! {
    struct ParkedRow {
        id: uuid::Uuid,
        subscription: String,
        kind: String,
        public_id: uuid::Uuid,
        channel: String,
        tries: i32,
        last_error: Option<String>,
        parked_at: DateTime<Utc>,
    }
}

pub(crate) async fn parked(pool: &PgPool, limit: u32) -> Result<Vec<ParkedStatusEvent>, StoreError> {
    let rows: Vec<ParkedRow> = sqlx::query_as(
        "SELECT e.id, e.subscription, e.kind, n.public_id, e.channel, e.tries, e.last_error, e.parked_at \
           FROM status_event e JOIN notification n ON n.user_id = e.user_id AND n.id = e.notification_id \
          WHERE e.parked_at IS NOT NULL ORDER BY e.parked_at DESC, e.seq DESC LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    rows.into_iter()
        .map(|row| {
            Ok(ParkedStatusEvent {
                id: row.id,
                subscription: row.subscription,
                kind: kind(&row.kind)?,
                notification: NotificationRef(row.public_id),
                channel: row.channel,
                tries: count(row.tries),
                last_error: row.last_error,
                parked_at: from_db(row.parked_at),
            })
        })
        .collect()
}

pub(crate) async fn parked_count(pool: &PgPool) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM status_event WHERE parked_at IS NOT NULL")
        .fetch_one(pool)
        .await
        .map_err(store_error)?;
    Ok(u64::try_from(n).unwrap_or(0))
}
