//! The test send's reservation (SPEC §9): the per-(user, channel) quota, then — behind every real
//! delivery — the channel's egress slot, in one transaction.

use chrono::{DateTime, Utc};
use herald_domain::egress::EgressDecision;
use herald_domain::quota::{decide_test_send, TestSendQuota};
use herald_domain::{ChannelName, ChannelRules, Millis, Timestamp, UserId};
use herald_ports::store::{StoreError, TestSendGrant};
use sqlx::PgPool;

use crate::claim::egress;
use crate::convert::{from_db, store_error, to_db};

/// Whether a real delivery of `channel` is due now: a test send on a rate-limited channel waits behind it.
/// The claim's runnable filter without the lease half (a task being sent holds no slot it still needs).
const DELIVERY_WAITING: &str = "SELECT EXISTS (SELECT 1 FROM task_queue q \
       JOIN delivery_task t ON t.user_id = q.user_id AND t.id = q.task_id \
     WHERE q.channel = $1 AND q.due_at <= $2 AND t.state <> 'SENDING')";

/// Reserves one test send of `user` on `channel` at `now`: refused by the quota (nothing written), or —
/// on a channel with an egress interval — by a real delivery waiting for the channel or a slot not free
/// yet (nothing written either: the press does not count), else the egress slot is taken and the press
/// recorded.
pub(crate) async fn reserve_test_send(
    pool: &PgPool,
    user: &UserId,
    channel: &ChannelName,
    rules: &ChannelRules,
    quota: TestSendQuota,
    audit: &[herald_ports::NewAuditEvent],
    now: Timestamp,
) -> Result<TestSendGrant, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    // User ids and channel names never contain '/', so the pair is unambiguous.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('herald test send/' || $1 || '/' || $2, 0))")
        .bind(user.as_str())
        .bind(channel.as_str())
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;
    let earlier: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT sent_at FROM test_send_log WHERE user_id = $1 AND channel = $2 AND sent_at > $3 - interval '1 day'",
    )
    .bind(user.as_str())
    .bind(channel.as_str())
    .bind(to_db(now))
    .fetch_all(&mut *tx)
    .await
    .map_err(store_error)?;
    let earlier: Vec<Timestamp> = earlier.into_iter().map(from_db).collect();
    if let Err(wait) = decide_test_send(&earlier, now, quota) {
        tx.rollback().await.map_err(store_error)?;
        return Ok(TestSendGrant::QuotaExceeded(wait));
    }
    if rules.min_interval > Millis::ZERO {
        let waiting: bool = sqlx::query_scalar(DELIVERY_WAITING)
            .bind(channel.as_str())
            .bind(to_db(now))
            .fetch_one(&mut *tx)
            .await
            .map_err(store_error)?;
        if waiting {
            tx.rollback().await.map_err(store_error)?;
            return Ok(TestSendGrant::ChannelBusy(rules.min_interval + rules.egress_guard));
        }
        if let EgressDecision::DeferUntil(until) = egress(&mut tx, channel, rules, now).await? {
            tx.rollback().await.map_err(store_error)?;
            return Ok(TestSendGrant::ChannelBusy(until.since(now)));
        }
    }
    // This send into the log, and the user's entries older than a day out of it.
    for sql in [
        "INSERT INTO test_send_log (user_id, channel, sent_at) VALUES ($1, $2, $3)",
        "DELETE FROM test_send_log WHERE user_id = $1 AND channel = $2 AND sent_at <= $3 - interval '1 day'",
    ] {
        sqlx::query(sql)
            .bind(user.as_str())
            .bind(channel.as_str())
            .bind(to_db(now))
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
    }
    crate::audit::commit_with(tx, audit).await?;
    Ok(TestSendGrant::Go)
}
