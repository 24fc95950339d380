//! The claim (SPEC §4): the claim query, the decision and write for each locked row (`claim_row`), and
//! the channel's egress reservation (SPEC §7) that the claim and the test send share.

use chrono::{DateTime, Utc};
use herald_domain::claim::{decide_claim, ClaimContext, ClaimDecision};
use herald_domain::egress::{decide_egress, deferral, EgressDecision};
use herald_domain::finish::FinishContext;
use herald_domain::{ChannelName, ChannelRules, Millis, Timestamp};
use herald_ports::store::{ChannelTable, ClaimBatch, ClaimRequest, ClaimedTask, Settled, StoreError};
use sqlx::{PgConnection, PgPool};

use crate::convert::{channel_names, from_db, opt_from_db, opt_to_db, store_error, to_db};
use crate::rows::{task_decision_columns, ClaimRow, HeldRow, TaskRow};
use crate::transition::{record_decision, store_transition};

/// The claim query (SPEC §4). `next_attempt_at` doubles as the lease end while SENDING, so one partial
/// index serves both halves of the runnable predicate; the domain re-checks each row.
///
/// Oldest due first, ties by id, so a backlog drains in order. A rate-limited channel whose next egress
/// slot is not free yet (`$4`/`$5`: the channels with an interval and their spacing, interval + guard,
/// in ms) is not selected at all: its backlog keeps its due times untouched and is taken, oldest first,
/// once the slot is free. The egress decision under the row lock remains the rule; this only spares
/// claims that could not call anyway.
pub(crate) const CLAIM_QUERY: &str = concat!(
    "SELECT ",
    task_decision_columns!(),
    ", t.reference::text AS reference, \
     n.body, COALESCE(t.expires_at, n.expires_at) AS expires_at, COALESCE(p.enabled, false) AS pref_enabled, p.destination \
     FROM delivery_task t \
     JOIN notification n ON n.user_id = t.user_id AND n.id = t.notification_id \
     LEFT JOIN channel_pref p ON p.user_id = t.user_id AND p.channel = t.channel \
     WHERE t.next_attempt_at <= $1 AND t.channel = ANY($2) \
       AND (t.state <> 'SENDING' OR t.lease_until < $1) \
       AND NOT EXISTS (SELECT 1 FROM channel_egress e \
             JOIN unnest($4::text[], $5::bigint[]) AS r(channel, spacing_ms) ON r.channel = e.channel \
             WHERE e.channel = t.channel AND e.last_call_at > $1 - r.spacing_ms * interval '1 millisecond') \
     ORDER BY t.next_attempt_at, t.id \
     LIMIT $3 \
     FOR UPDATE OF t SKIP LOCKED"
);

/// One claim transaction: lock up to `limit` runnable rows, decide and store each, commit.
pub(crate) async fn claim(pool: &PgPool, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    let (limited, spacing) = egress_spacing(&request.channels);
    let mut rows: Vec<ClaimRow> = sqlx::query_as(CLAIM_QUERY)
        .bind(to_db(request.now))
        .bind(channel_names(&request.channels))
        .bind(i64::from(request.limit))
        .bind(limited)
        .bind(spacing)
        .fetch_all(&mut *tx)
        .await
        .map_err(store_error)?;
    // A batch may lock the egress rows of several rate-limited channels. Taking them in one global
    // order (by channel name; a stable sort keeps due order within a channel) keeps two claimers from
    // waiting on each other's rows — a deadlock.
    rows.sort_by(|a, b| a.channel().cmp(b.channel()));
    let mut batch = ClaimBatch::default();
    for row in rows {
        claim_row(&mut tx, row, request, &mut batch).await?;
    }
    tx.commit().await.map_err(store_error)?;
    Ok(batch)
}

/// The rate-limited channels of a claim and the spacing of their egress reservations, as the claim
/// query's `$4` and `$5`.
pub(crate) fn egress_spacing(table: &ChannelTable) -> (Vec<String>, Vec<i64>) {
    table
        .0
        .iter()
        .filter(|(_, rules)| rules.min_interval > Millis::ZERO)
        .map(|(name, rules)| {
            let spacing = rules.min_interval + rules.egress_guard;
            (name.as_str().to_owned(), i64::try_from(spacing.0).unwrap_or(i64::MAX))
        })
        .unzip()
}

/// Decides and stores one locked row of the claim query. Shared with the negative-control claim, which
/// differs only in how it finds and locks rows.
pub(crate) async fn claim_row(
    conn: &mut PgConnection,
    row: ClaimRow,
    request: &ClaimRequest,
    batch: &mut ClaimBatch,
) -> Result<(), StoreError> {
    let task = TaskRow::try_from(row.task)?;
    let Some(rules) = request.channels.get(&task.channel) else { return Ok(()) };
    let now = request.now;
    let ctx = ClaimContext {
        task: task.snapshot.clone(),
        budget: task.budget,
        pref_enabled: row.pref_enabled,
        expires_at: from_db(row.expires_at),
        capability: rules.contract.capability,
        policy: rules.policy,
    };
    match decide_claim(&ctx, now) {
        ClaimDecision::Skip => {}
        ClaimDecision::Settle { superseded, record, transition } => {
            if superseded {
                batch.lease_expired += expire_holder(conn, &task, now).await?;
            }
            let mut attempt_no = task.last_attempt_no;
            if let Some(outcome) = record {
                attempt_no += 1;
                record_decision(conn, &task, attempt_no, outcome, None, now).await?;
            }
            store_transition(conn, &task, &transition, None, now).await?;
            batch.settled.push(Settled {
                task_id: task.id,
                channel: task.channel.clone(),
                outcome: record,
                state: transition.state,
                parked: transition.is_parked(),
            });
        }
        ClaimDecision::Call { action, uncertain, superseded, uncertain_since } => {
            if superseded {
                batch.lease_expired += expire_holder(conn, &task, now).await?;
            }
            if let EgressDecision::DeferUntil(until) = egress(conn, &task.channel, rules, now).await? {
                // Another claim took the slot first. A task that is due stays as it is — untouched, it
                // keeps its place in the backlog, and the claim query passes its channel over until the
                // slot is free. Only a task taken over from an expired holder must be written now: its
                // holder's attempt was just closed, and the row must stop pointing at it.
                if superseded {
                    let transition = deferral(&task.snapshot, uncertain, uncertain_since, until);
                    store_transition(conn, &task, &transition, None, now).await?;
                }
                batch.deferred.push(task.id);
                return Ok(());
            }
            let lease_until = now + request.lease;
            // Counters are bumped by the statement itself rather than from the values read earlier, so
            // the row stays consistent even for the unlocked negative-control claim.
            let held: HeldRow = sqlx::query_as(
                "UPDATE delivery_task SET state = 'SENDING', attempt_token = gen_random_uuid(), lease_owner = $3, \
                 lease_until = $4, next_attempt_at = $4, attempt_count = attempt_count + 1, \
                 last_attempt_no = last_attempt_no + 1, outcome_uncertain = $5, uncertain_since = $6, \
                 needs_review = false, updated_at = $7 \
                 WHERE user_id = $1 AND id = $2 RETURNING attempt_token, attempt_count, last_attempt_no",
            )
            .bind(task.user_id.as_str())
            .bind(task.id.0)
            .bind(&request.worker)
            .bind(to_db(lease_until))
            .bind(uncertain)
            .bind(opt_to_db(uncertain_since))
            .bind(to_db(now))
            .fetch_one(&mut *conn)
            .await
            .map_err(store_error)?;
            let (token, attempts_used, attempt_no) = held.into_parts();
            sqlx::query(
                "INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, started_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(task.user_id.as_str())
            .bind(task.id.0)
            .bind(attempt_no)
            .bind(token.0)
            .bind(action.as_str())
            .bind(&request.worker)
            .bind(to_db(now))
            .execute(&mut *conn)
            .await
            .map_err(store_error)?;
            batch.claimed.push(ClaimedTask {
                task_id: task.id,
                reference: row.reference,
                notification_id: task.notification_id,
                user_id: task.user_id.clone(),
                channel: task.channel.clone(),
                token,
                attempt_no,
                action,
                finish: FinishContext {
                    action,
                    prior_uncertain: uncertain,
                    uncertain_since,
                    attempt_started_at: now,
                    expires_at: ctx.expires_at,
                    attempts_used,
                    budget: task.budget,
                    capability: rules.contract.capability,
                    retry: rules.retry,
                },
                body: row.body,
                expires_at: ctx.expires_at,
                destination: row.destination,
                digest_count: task.digest_count,
            });
        }
    }
    Ok(())
}

/// Marks the superseded holder's unfinished attempt `LEASE_EXPIRED`.
async fn expire_holder(conn: &mut PgConnection, task: &TaskRow, now: Timestamp) -> Result<u32, StoreError> {
    let Some(token) = task.token else { return Ok(0) };
    let done = sqlx::query(
        "UPDATE delivery_attempt SET outcome = 'LEASE_EXPIRED', finished_at = $3 \
         WHERE user_id = $1 AND attempt_token = $2 AND outcome IS NULL",
    )
    .bind(task.user_id.as_str())
    .bind(token)
    .bind(to_db(now))
    .execute(&mut *conn)
    .await
    .map_err(store_error)?;
    Ok(u32::try_from(done.rows_affected()).unwrap_or(0))
}

/// Locks the channel's egress row and decides whether a call may be reserved at `now`; records the
/// reservation when it may. Channels without an interval skip the lock entirely. The row is the one
/// place every worker process (and the test send) meets, so the interval holds across all of them.
pub(crate) async fn egress(
    conn: &mut PgConnection,
    channel: &ChannelName,
    rules: &ChannelRules,
    now: Timestamp,
) -> Result<EgressDecision, StoreError> {
    if rules.min_interval == Millis::ZERO {
        return Ok(EgressDecision::Go);
    }
    sqlx::query("INSERT INTO channel_egress (channel) VALUES ($1) ON CONFLICT (channel) DO NOTHING")
        .bind(channel.as_str())
        .execute(&mut *conn)
        .await
        .map_err(store_error)?;
    let last: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT last_call_at FROM channel_egress WHERE channel = $1 FOR UPDATE")
            .bind(channel.as_str())
            .fetch_one(&mut *conn)
            .await
            .map_err(store_error)?;
    let decision = decide_egress(opt_from_db(last), rules.min_interval, rules.egress_guard, now);
    if decision == EgressDecision::Go {
        sqlx::query("UPDATE channel_egress SET last_call_at = $2 WHERE channel = $1")
            .bind(channel.as_str())
            .bind(to_db(now))
            .execute(&mut *conn)
            .await
            .map_err(store_error)?;
    }
    Ok(decision)
}

/// The test send's reservation (SPEC §9): the same egress row and decision as a claim, in a transaction
/// of its own.
pub(crate) async fn reserve_egress(
    pool: &PgPool,
    channel: &ChannelName,
    rules: &ChannelRules,
    now: Timestamp,
) -> Result<EgressDecision, StoreError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    let decision = egress(&mut tx, channel, rules, now).await?;
    tx.commit().await.map_err(store_error)?;
    Ok(decision)
}
