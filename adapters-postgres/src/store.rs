//! Creating notifications, claiming and finishing tasks, and the human exit.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use herald_domain::claim::{decide_claim, ClaimContext, ClaimDecision};
use herald_domain::egress::{decide_egress, deferral, EgressDecision};
use herald_domain::finish::FinishContext;
use herald_domain::resolve::{resolve_manually, FinalState};
use herald_domain::{
    Action, AttemptToken, ChannelName, ChannelRules, Millis, NotificationId, Outcome, TaskId, TaskSnapshot, TaskState,
    Timestamp, Transition, UserId,
};
use herald_ports::store::{
    ChannelTable, ClaimBatch, ClaimRequest, ClaimedTask, Created, FinishRecord, FinishResult, GiveBack, InboxItem,
    NewNotification, NotificationStore, NotificationView, ResolveError, Resolved, Settled, StoreError, TaskCount,
    TaskSummary, TaskView,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use crate::clock::PgClock;
use crate::convert::{count_i32, count_u32, from_db, opt_from_db, opt_to_db, parse_code, store_error, to_db};

/// The PostgreSQL store. Cheap to clone: it is a connection pool (two, when finishes get their own).
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    /// Where finishes and give-backs run: the main pool unless [`PgStore::with_finish_pool`] gave them
    /// one of their own, so that claims and API requests queueing for connections never delay the write
    /// that records what a channel answered.
    pub(crate) finishes: PgPool,
}

impl PgStore {
    /// Connects a pool of at most `max_connections`.
    ///
    /// # Errors
    /// `Unavailable` when the server cannot be reached; `Unknown` for a malformed URL.
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        Ok(PgStore::from_pool(connect_pool(url, max_connections).await?))
    }

    #[must_use]
    pub fn from_pool(pool: PgPool) -> PgStore {
        PgStore { finishes: pool.clone(), pool }
    }

    /// Gives finishes and give-backs a pool of their own of `max_connections` (SPEC §5: the outcome of a
    /// call must be written while the attempt's lease lasts; queued behind claims and API requests it
    /// might not be).
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn with_finish_pool(mut self, url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        self.finishes = connect_pool(url, max_connections).await?;
        Ok(self)
    }

    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the embedded migrations.
    ///
    /// # Errors
    /// When a migration fails or the database is unreachable.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::MIGRATOR.run(&self.pool).await.map_err(|e| StoreError::Unknown(e.into()))
    }

    /// The database's clock, shared by every worker.
    #[must_use]
    pub fn clock(&self) -> PgClock {
        PgClock::new(self.pool.clone())
    }

    /// True when the database answers.
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// True when every embedded migration has been applied.
    pub async fn is_migrated(&self) -> bool {
        let applied: Result<Vec<i64>, _> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success").fetch_all(&self.pool).await;
        applied.is_ok_and(|versions| crate::MIGRATOR.iter().all(|m| versions.contains(&m.version)))
    }
}

async fn connect_pool(url: &str, max_connections: u32) -> Result<PgPool, StoreError> {
    let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| StoreError::Unknown(e.into()))?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await
        .map_err(store_error)
}

/// The columns of a task row that decisions read, in one place for every query that loads them.
pub(crate) const TASK_DECISION_COLUMNS: &str = "t.id, t.user_id, t.notification_id, t.channel, t.state, \
     t.attempt_token, t.lease_until, t.outcome_uncertain, t.uncertain_since, t.needs_review, t.next_attempt_at, \
     t.attempt_count, t.max_attempts, t.last_attempt_no, t.digest_count";

pub(crate) struct TaskRow {
    pub id: TaskId,
    pub user_id: UserId,
    pub notification_id: NotificationId,
    pub channel: ChannelName,
    pub token: Option<Uuid>,
    pub snapshot: TaskSnapshot,
    pub budget: u32,
    pub last_attempt_no: i32,
    pub digest_count: Option<u32>,
}

impl TaskRow {
    pub(crate) fn from_row(row: &PgRow) -> Result<TaskRow, StoreError> {
        let state: String = row.try_get("state").map_err(store_error)?;
        let get = store_error;
        Ok(TaskRow {
            id: TaskId(row.try_get("id").map_err(get)?),
            user_id: UserId(row.try_get("user_id").map_err(get)?),
            notification_id: NotificationId(row.try_get("notification_id").map_err(get)?),
            channel: ChannelName(row.try_get("channel").map_err(get)?),
            token: row.try_get("attempt_token").map_err(get)?,
            snapshot: TaskSnapshot {
                state: parse_code(&state)?,
                outcome_uncertain: row.try_get("outcome_uncertain").map_err(get)?,
                needs_review: row.try_get("needs_review").map_err(get)?,
                next_attempt_at: opt_from_db(row.try_get("next_attempt_at").map_err(get)?),
                lease_until: opt_from_db(row.try_get("lease_until").map_err(get)?),
                attempt_count: count_u32(row.try_get("attempt_count").map_err(get)?),
                uncertain_since: opt_from_db(row.try_get("uncertain_since").map_err(get)?),
            },
            budget: count_u32(row.try_get("max_attempts").map_err(get)?),
            last_attempt_no: row.try_get("last_attempt_no").map_err(get)?,
            digest_count: row.try_get::<Option<i32>, _>("digest_count").map_err(get)?.map(count_u32),
        })
    }
}

/// Stores a transition that ends or pauses the current holding (no lease, no token).
pub(crate) async fn store_transition(
    conn: &mut PgConnection,
    task: &TaskRow,
    t: &Transition,
    detail: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE delivery_task SET state = $3, outcome_uncertain = $4, needs_review = $5, next_attempt_at = $6, \
         uncertain_since = $7, provider_msg_id = COALESCE($8, provider_msg_id), last_error = $9, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = $10 \
         WHERE user_id = $1 AND id = $2",
    )
    .bind(task.user_id.as_str())
    .bind(task.id.0)
    .bind(t.state.as_str())
    .bind(t.outcome_uncertain)
    .bind(t.needs_review)
    .bind(opt_to_db(t.next_attempt_at))
    .bind(opt_to_db(t.uncertain_since))
    .bind(t.provider_msg_id.as_deref())
    .bind(detail.or(t.reason))
    .bind(to_db(now))
    .execute(&mut *conn)
    .await
    .map_err(store_error)?;
    Ok(())
}

/// Writes an attempt row that calls no channel (claim-time decision or manual resolution).
pub(crate) async fn record_decision(
    conn: &mut PgConnection,
    task: &TaskRow,
    attempt_no: i32,
    outcome: Outcome,
    note: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH bump AS (UPDATE delivery_task SET last_attempt_no = $3 WHERE user_id = $1 AND id = $2) \
         INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, outcome, note, started_at, finished_at) \
         VALUES ($1, $2, $3, gen_random_uuid(), $4, $5, $6, $6)",
    )
    .bind(task.user_id.as_str())
    .bind(task.id.0)
    .bind(attempt_no)
    .bind(outcome.as_str())
    .bind(note)
    .bind(to_db(now))
    .execute(&mut *conn)
    .await
    .map_err(store_error)?;
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

/// The claim query (SPEC §4). `next_attempt_at` doubles as the lease end while SENDING, so one partial
/// index serves both halves of the runnable predicate; the domain re-checks each row.
///
/// Oldest due first, ties by id, so a backlog drains in order. A rate-limited channel whose next egress
/// slot is not free yet (`$4`/`$5`: the channels with an interval and their spacing, interval + guard,
/// in ms) is not selected at all: its backlog keeps its due times untouched and is taken, oldest first,
/// once the slot is free. The egress decision under the row lock remains the rule; this only spares
/// claims that could not call anyway.
pub(crate) const CLAIM_QUERY: &str = "SELECT t.id, t.user_id, t.notification_id, t.channel, t.state, \
     t.attempt_token, t.lease_until, t.outcome_uncertain, t.uncertain_since, t.needs_review, t.next_attempt_at, \
     t.attempt_count, t.max_attempts, t.last_attempt_no, t.digest_count, t.reference::text AS reference, \
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
     FOR UPDATE OF t SKIP LOCKED";

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

/// Decides and stores one locked row. Shared with the negative-control claim, which differs only in how
/// it finds and locks rows.
pub(crate) async fn claim_row(
    conn: &mut PgConnection,
    row: &PgRow,
    request: &ClaimRequest,
    batch: &mut ClaimBatch,
) -> Result<(), StoreError> {
    let task = TaskRow::from_row(row)?;
    let Some(rules) = request.channels.get(&task.channel) else { return Ok(()) };
    let now = request.now;
    let ctx = ClaimContext {
        task: task.snapshot.clone(),
        budget: task.budget,
        pref_enabled: row.try_get("pref_enabled").map_err(store_error)?,
        expires_at: from_db(row.try_get("expires_at").map_err(store_error)?),
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
            let held = sqlx::query(
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
            let token: Uuid = held.try_get("attempt_token").map_err(store_error)?;
            let attempts_used = count_u32(held.try_get("attempt_count").map_err(store_error)?);
            let attempt_no: i32 = held.try_get("last_attempt_no").map_err(store_error)?;
            sqlx::query(
                "INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, started_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(task.user_id.as_str())
            .bind(task.id.0)
            .bind(attempt_no)
            .bind(token)
            .bind(action.as_str())
            .bind(&request.worker)
            .bind(to_db(now))
            .execute(&mut *conn)
            .await
            .map_err(store_error)?;
            batch.claimed.push(ClaimedTask {
                task_id: task.id,
                reference: row.try_get("reference").map_err(store_error)?,
                notification_id: task.notification_id,
                user_id: task.user_id.clone(),
                channel: task.channel.clone(),
                token: AttemptToken(token),
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
                body: row.try_get("body").map_err(store_error)?,
                expires_at: ctx.expires_at,
                destination: row.try_get("destination").map_err(store_error)?,
                digest_count: task.digest_count,
            });
        }
    }
    Ok(())
}

pub(crate) fn channel_names(table: &ChannelTable) -> Vec<String> {
    table.names().map(|n| n.as_str().to_owned()).collect()
}

/// The fenced finish statement (SPEC §5): the task changes only while this attempt holds it; either way
/// the observation lands on the attempt row — as its outcome, or as its late outcome when superseded.
///
/// A finish may be sent again when its first answer was lost (the connection broke after the commit):
/// when this attempt's outcome already is this observation, that earlier finish landed, and the repeat
/// changes nothing and answers `repeated`. (A superseded attempt's outcome is `LEASE_EXPIRED`, which no
/// channel observation equals.)
const FINISH_QUERY: &str = "WITH held AS ( \
       UPDATE delivery_task SET state = $4, outcome_uncertain = $5, needs_review = $6, next_attempt_at = $7, \
         uncertain_since = $8, provider_msg_id = COALESCE($9, provider_msg_id), last_error = $10, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = $11 \
       WHERE user_id = $1 AND id = $2 AND state = 'SENDING' AND attempt_token = $3 \
       RETURNING id), \
     mine AS (SELECT EXISTS (SELECT 1 FROM held) AS held) \
     UPDATE delivery_attempt a SET \
       outcome = CASE WHEN mine.held THEN $12 ELSE a.outcome END, \
       detail = CASE WHEN mine.held THEN $13 ELSE a.detail END, \
       finished_at = CASE WHEN mine.held THEN $11 ELSE a.finished_at END, \
       late_outcome = CASE WHEN mine.held OR a.outcome IS NOT DISTINCT FROM $12 THEN a.late_outcome ELSE $12 END, \
       late_detail = CASE WHEN mine.held OR a.outcome IS NOT DISTINCT FROM $12 THEN a.late_detail ELSE $13 END, \
       late_at = CASE WHEN mine.held OR a.outcome IS NOT DISTINCT FROM $12 THEN a.late_at ELSE $11 END \
     FROM mine \
     WHERE a.user_id = $1 AND a.attempt_token = $3 \
     RETURNING CASE WHEN mine.held THEN 'applied' WHEN a.outcome IS NOT DISTINCT FROM $12 THEN 'repeated' \
       ELSE 'stale' END";

/// Takes back an attempt whose holder missed its egress slot (SPEC §7), fenced like the finish: while
/// the token still holds the task, the task returns to its claim-time knowledge with the attempt count
/// and number undone, and the attempt row goes — no call was made, and attempt rows record calls and
/// decisions, not slots that went unused. All data-modifying parts of one statement see one snapshot, so
/// the row is deleted exactly when the task was held.
const GIVE_BACK_QUERY: &str = "WITH held AS ( \
       UPDATE delivery_task SET state = $4, outcome_uncertain = $5, needs_review = false, next_attempt_at = $6, \
         uncertain_since = $7, last_error = $8, attempt_token = NULL, lease_owner = NULL, lease_until = NULL, \
         attempt_count = attempt_count - 1, last_attempt_no = last_attempt_no - 1, updated_at = $9 \
       WHERE user_id = $1 AND id = $2 AND state = 'SENDING' AND attempt_token = $3 \
       RETURNING id), \
     gone AS ( \
       DELETE FROM delivery_attempt WHERE user_id = $1 AND attempt_token = $3 AND EXISTS (SELECT 1 FROM held) \
       RETURNING id) \
     SELECT EXISTS (SELECT 1 FROM held)";

#[async_trait]
impl NotificationStore for PgStore {
    #[tracing::instrument(skip_all, fields(user_id = %new.user_id))]
    async fn create(
        &self,
        new: &NewNotification,
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Created, StoreError> {
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO notification (user_id, event_key, body, thread_key, max_attempts, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (user_id, event_key) DO NOTHING RETURNING id",
        )
        .bind(new.user_id.as_str())
        .bind(new.event_key.as_str())
        .bind(&new.body)
        .bind(new.thread_key.as_ref().map(|k| k.as_str()))
        .bind(new.max_attempts.map(count_i32))
        .bind(to_db(now))
        .bind(to_db(now + new.ttl))
        .fetch_optional(&mut *tx)
        .await
        .map_err(store_error)?;

        let Some(id) = inserted else {
            // A duplicate: nothing to write. Under READ COMMITTED the conflicting insert waited for the
            // other transaction, and this new statement sees its committed row.
            tx.rollback().await.map_err(store_error)?;
            let id: i64 = sqlx::query_scalar("SELECT id FROM notification WHERE user_id = $1 AND event_key = $2")
                .bind(new.user_id.as_str())
                .bind(new.event_key.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(store_error)?;
            let tasks = task_summaries(&self.pool, &new.user_id, NotificationId(id)).await?;
            return Ok(Created { notification_id: NotificationId(id), created: false, tasks });
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

        let mut tasks = Vec::new();
        for (channel, rules) in channels.0.iter().filter(|(name, _)| enabled.iter().any(|e| e == name.as_str())) {
            let budget = new.max_attempts.unwrap_or(rules.retry.max_attempts).max(1);
            if let Some(summary) =
                crate::views::create_task(&mut tx, new, NotificationId(id), channel, rules, budget, now).await?
            {
                tasks.push(summary);
            }
        }
        if !tasks.is_empty() {
            // Delivered to listening workers at commit, never for a rolled-back create (SPEC §4 wake-up).
            crate::notify::notify_new_tasks(&mut tx).await?;
        }
        tx.commit().await.map_err(store_error)?;
        Ok(Created { notification_id: NotificationId(id), created: true, tasks })
    }

    #[tracing::instrument(skip_all, fields(worker = %request.worker))]
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let (limited, spacing) = egress_spacing(&request.channels);
        let mut rows = sqlx::query(CLAIM_QUERY)
            .bind(to_db(request.now))
            .bind(channel_names(&request.channels))
            .bind(i64::from(request.limit))
            .bind(limited)
            .bind(spacing)
            .fetch_all(&mut *tx)
            .await
            .map_err(store_error)?;
        // A batch may lock the egress rows of several rate-limited channels. Taking them in one global
        // order (by channel name) keeps two claimers from waiting on each other's rows — a deadlock.
        rows.sort_by_cached_key(|row| row.try_get::<String, _>("channel").unwrap_or_default());
        let mut batch = ClaimBatch::default();
        for row in &rows {
            claim_row(&mut tx, row, request, &mut batch).await?;
        }
        tx.commit().await.map_err(store_error)?;
        Ok(batch)
    }

    #[tracing::instrument(skip_all, fields(task_id = %record.task_id))]
    async fn finish(&self, record: &FinishRecord) -> Result<FinishResult, StoreError> {
        let t = &record.transition;
        let result: Option<String> = sqlx::query_scalar(FINISH_QUERY)
            .bind(record.user_id.as_str())
            .bind(record.task_id.0)
            .bind(record.token.0)
            .bind(t.state.as_str())
            .bind(t.outcome_uncertain)
            .bind(t.needs_review)
            .bind(opt_to_db(t.next_attempt_at))
            .bind(opt_to_db(t.uncertain_since))
            .bind(t.provider_msg_id.as_deref())
            .bind(last_error(record))
            .bind(to_db(record.now))
            .bind(record.observation.outcome().as_str())
            .bind(&record.detail)
            .fetch_optional(&self.finishes)
            .await
            .map_err(store_error)?;
        match result.as_deref() {
            Some("applied" | "repeated") => Ok(FinishResult::Applied),
            Some(_) => Ok(FinishResult::Stale),
            None => Err(StoreError::Unknown(anyhow::anyhow!("no attempt row for the finishing token"))),
        }
    }

    #[tracing::instrument(skip_all, fields(task_id = %record.task_id))]
    async fn give_back(&self, record: &GiveBack) -> Result<FinishResult, StoreError> {
        let t = &record.transition;
        let held: bool = sqlx::query_scalar(GIVE_BACK_QUERY)
            .bind(record.user_id.as_str())
            .bind(record.task_id.0)
            .bind(record.token.0)
            .bind(t.state.as_str())
            .bind(t.outcome_uncertain)
            .bind(opt_to_db(t.next_attempt_at))
            .bind(opt_to_db(t.uncertain_since))
            .bind(t.reason)
            .bind(to_db(record.now))
            .fetch_one(&self.finishes)
            .await
            .map_err(store_error)?;
        Ok(if held { FinishResult::Applied } else { FinishResult::Stale })
    }

    async fn reserve_egress(
        &self,
        channel: &ChannelName,
        rules: &ChannelRules,
        now: Timestamp,
    ) -> Result<EgressDecision, StoreError> {
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let decision = egress(&mut tx, channel, rules, now).await?;
        tx.commit().await.map_err(store_error)?;
        Ok(decision)
    }

    #[tracing::instrument(skip_all, fields(task_id = %task))]
    async fn resolve_manually(
        &self,
        task: TaskId,
        final_state: FinalState,
        note: &str,
        now: Timestamp,
    ) -> Result<Resolved, ResolveError> {
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let row =
            sqlx::query(&format!("SELECT {TASK_DECISION_COLUMNS} FROM delivery_task t WHERE t.id = $1 FOR UPDATE"))
                .bind(task.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(store_error)?
                .ok_or(ResolveError::NotFound)?;
        let row = TaskRow::from_row(&row)?;
        let transition = resolve_manually(&row.snapshot, final_state)
            .map_err(|refused| ResolveError::NotParked { state: refused.state })?;
        record_decision(&mut tx, &row, row.last_attempt_no + 1, final_state.outcome(), Some(note), now).await?;
        store_transition(&mut tx, &row, &transition, Some(&format!("resolved by a human: {note}")), now).await?;
        tx.commit().await.map_err(store_error)?;
        Ok(Resolved { task_id: task, state: transition.state })
    }

    async fn notification(&self, id: NotificationId) -> Result<Option<NotificationView>, StoreError> {
        crate::views::notification(&self.pool, id).await
    }

    async fn parked(&self, limit: u32) -> Result<Vec<TaskView>, StoreError> {
        crate::views::parked(&self.pool, limit).await
    }

    async fn inbox(&self, user: &UserId, limit: u32) -> Result<Vec<InboxItem>, StoreError> {
        crate::views::inbox(&self.pool, user, limit).await
    }

    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError> {
        let rows = sqlx::query(
            "SELECT channel, state, (state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL) AS parked, \
             count(*) AS n FROM delivery_task GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state").map_err(store_error)?;
                let count: i64 = row.try_get("n").map_err(store_error)?;
                Ok(TaskCount {
                    channel: ChannelName(row.try_get("channel").map_err(store_error)?),
                    state: parse_code(&state)?,
                    parked: row.try_get("parked").map_err(store_error)?,
                    count: u64::try_from(count).unwrap_or(0),
                })
            })
            .collect()
    }
}

/// `last_error` after a finish: the detail of what went wrong, or nothing once sent.
fn last_error(record: &FinishRecord) -> Option<String> {
    match record.transition.state {
        TaskState::Sent => None,
        _ => Some(match record.transition.reason {
            Some(reason) => format!("{}: {reason}", record.detail),
            None => record.detail.clone(),
        }),
    }
}

pub(crate) async fn task_summaries(
    pool: &PgPool,
    user: &UserId,
    notification: NotificationId,
) -> Result<Vec<TaskSummary>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, reference::text AS reference, channel, state FROM delivery_task \
         WHERE user_id = $1 AND notification_id = $2 ORDER BY id",
    )
    .bind(user.as_str())
    .bind(notification.0)
    .fetch_all(pool)
    .await
    .map_err(store_error)?;
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state").map_err(store_error)?;
            Ok(TaskSummary {
                task_id: TaskId(row.try_get("id").map_err(store_error)?),
                reference: row.try_get("reference").map_err(store_error)?,
                channel: ChannelName(row.try_get("channel").map_err(store_error)?),
                state: parse_code(&state)?,
            })
        })
        .collect()
}

/// Parses a stored action code.
pub(crate) fn parse_action(value: Option<String>) -> Result<Option<Action>, StoreError> {
    value.map(|v| parse_code::<Action>(&v)).transpose()
}
