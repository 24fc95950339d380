//! The claim (SPEC §4): the claim query, the decisions over a batch of locked rows and their one write (`claim_rows`), and
//! the channel's egress reservation (SPEC §7) that the claim and the test send share.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use herald_domain::claim::{decide_claim, ClaimContext, ClaimDecision};
use herald_domain::egress::{decide_egress, deferral, EgressDecision};
use herald_domain::finish::FinishContext;
use herald_domain::{Action, ChannelName, ChannelRules, Millis, Outcome, TaskState, Timestamp, Transition};
use herald_ports::store::{ChannelTable, ClaimBatch, ClaimRequest, ClaimedTask, Deferred, Settled, StoreError};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::convert::{channel_names, from_db, opt_from_db, opt_to_db, store_error, to_db};
use crate::rows::{task_decision_columns, ClaimRow, HeldRow, TaskRow};

/// The claim query (SPEC §4). The schedule is `task_queue` (migration `0012`: one row per task with a due
/// time, kept by triggers on `delivery_task`); `next_attempt_at` doubles as the lease end while SENDING, so
/// the queue's index `(due_at, task_id)` serves both halves of the runnable predicate and the order. The
/// domain re-checks each row.
///
/// Each candidate is locked in the order writers use. Writers — a finish, a resolution — lock the task
/// row and then, from the queue's trigger, the queue row; so the claim locks a candidate's task row first,
/// by a locking subquery (`SKIP LOCKED`), and its queue row after (`SKIP LOCKED`: that lock is what keeps
/// two claims apart). Locked the other way round, a claim that took a queue row while a writer held its
/// task row used a place of its `LIMIT` on a task it could not claim, and came back short while runnable
/// tasks waited behind it. The task-row lock is the `THEN` of a `CASE`, so it is taken only for a row that
/// passed every other check: in a plain conjunction the planner orders the checks by cost, and a claim
/// scanning past the backlog of a channel whose slot is taken would lock every one of those tasks.
///
/// The task rows are then read again in a `MATERIALIZED` selection of their own (`FOR NO KEY UPDATE`: the
/// claim never changes a key, so creates inserting attempt rows that reference a task are not blocked;
/// `SKIP LOCKED` too, so a claim never waits for a writer). The runnable predicate is checked again on the
/// locked task. Every task column the decision reads comes out of that selection: a row updated by a
/// finish that committed while the statement ran is locked in its new version, and only the locking
/// selection returns that version — a second read of `delivery_task` in the same statement would see the
/// version of the statement's snapshot, from before the finish, and decide on a state that no longer
/// exists.
///
/// A lease is over only once its end has passed (`lease_until < now`), while any other due task is
/// runnable at its due time: a queue row due exactly now is passed over when its task is `SENDING`. Taken
/// into the `LIMIT`, such a row would be dropped by the re-check and the claim would come back short while
/// runnable tasks wait behind it. The state is read with a scalar subquery, one index probe for those rows
/// only, which the planner must run row by row. Written as `NOT EXISTS (… AND s.state = 'SENDING')`, the
/// planner may hash it: with statistics that show few `SENDING` tasks, the first row due exactly now made
/// the claim read the whole of `delivery_task`, every finished task included, to build the hash (150 ms
/// with 140,000 tasks in the benchmark's latency phase, where new tasks are due the millisecond they are
/// created). `tests/tests/it/reliability.rs` keeps that text as its negative control.
///
/// Oldest due first, ties by id, so a backlog drains in order. A rate-limited channel whose next egress
/// slot is not free yet (`$4`/`$5`: the channels with an interval and their spacing, interval + guard,
/// in ms) is not selected at all: its backlog keeps its due times untouched and is taken, oldest first,
/// once the slot is free. The egress decision under the row lock remains the rule; this only spares
/// claims that could not call anyway.
/// The claim query up to its limit, with `$lock` the locking clause of the candidate's task row (the
/// `THEN` of the `CASE`).
macro_rules! claim_head {
    ($lock:expr) => {
        concat!(
            "WITH due AS MATERIALIZED (SELECT q.user_id, q.task_id FROM task_queue q \
               WHERE q.due_at <= $1 AND q.channel = ANY($2) \
                 AND CASE WHEN (q.due_at < $1 OR (SELECT s.state FROM delivery_task s \
                       WHERE s.user_id = q.user_id AND s.id = q.task_id) IS DISTINCT FROM 'SENDING') \
                   AND NOT EXISTS (SELECT 1 FROM channel_egress e \
                       JOIN unnest($4::text[], $5::bigint[]) AS r(channel, spacing_ms) ON r.channel = e.channel \
                       WHERE e.channel = q.channel AND e.last_call_at > $1 - r.spacing_ms * interval '1 millisecond') \
                 THEN EXISTS (SELECT 1 FROM delivery_task l WHERE l.user_id = q.user_id AND l.id = q.task_id ",
            $lock,
            ") ELSE false END \
               ORDER BY q.due_at, q.task_id \
               LIMIT "
        )
    };
}
#[cfg(feature = "negative-controls")]
pub(crate) use claim_head;

/// The claim query after its limit, with `$lock_queue` and `$lock_task` the locking clauses of the queue
/// rows and of `picked`.
macro_rules! claim_tail {
    ($lock_queue:expr, $lock_task:expr) => {
        concat!(
            " ",
            $lock_queue,
            "), \
             picked AS MATERIALIZED (SELECT ",
            task_decision_columns!(),
            ", t.reference::text AS reference, t.expires_at AS task_expires_at \
               FROM due JOIN delivery_task t ON t.user_id = due.user_id AND t.id = due.task_id \
               WHERE t.next_attempt_at <= $1 AND (t.state <> 'SENDING' OR t.lease_until < $1) ",
            $lock_task,
            ") \
             SELECT ",
            task_decision_columns!(),
            ", t.reference, \
             n.body, COALESCE(t.task_expires_at, n.expires_at) AS expires_at, COALESCE(p.enabled, false) AS pref_enabled, p.destination, \
             EXISTS (SELECT 1 FROM user_erasure x WHERE x.user_id = t.user_id) AS erased \
             FROM picked t \
             JOIN notification n ON n.user_id = t.user_id AND n.id = t.notification_id \
             LEFT JOIN channel_pref p ON p.user_id = t.user_id AND p.channel = t.channel \
             ORDER BY t.channel, t.next_attempt_at, t.id"
        )
    };
}
#[cfg(feature = "negative-controls")]
pub(crate) use claim_tail;

/// The claim's three row locks, in the order [`claim_head!`] and [`claim_tail!`] take them: the
/// candidate's task row, its queue row, the task row again in `picked`.
macro_rules! lock_check {
    () => {
        "FOR NO KEY UPDATE SKIP LOCKED"
    };
}
macro_rules! lock_queue {
    () => {
        "FOR NO KEY UPDATE OF q SKIP LOCKED"
    };
}
macro_rules! lock_task {
    () => {
        "FOR NO KEY UPDATE OF t SKIP LOCKED"
    };
}
#[cfg(all(test, feature = "negative-controls"))]
pub(crate) use {lock_check, lock_queue, lock_task};

/// The claim query (SPEC §4), made of its parts ([`claim_head!`], [`claim_tail!`]) with `$3` the limit. The
/// claim runs it with the limit written in ([`claim_text`]); the negative control of NC1 (`negative.rs`)
/// leaves the locks out of the same parts, and the benchmark's pgbench script (`herald-bench`) wraps this
/// text: no copy of it is kept anywhere, so none can drift.
pub const CLAIM_QUERY: &str = concat!(claim_head!(lock_check!()), "$3", claim_tail!(lock_queue!(), lock_task!()));

/// [`CLAIM_QUERY`] up to its limit, and after it.
const CLAIM_HEAD: &str = claim_head!(lock_check!());
const CLAIM_TAIL: &str = claim_tail!(lock_queue!(), lock_task!());

/// The claim query as the claim runs it: [`CLAIM_QUERY`] with the batch's size written in for `$3`.
///
/// With the limit a parameter, PostgreSQL planned the query again at every claim (`plan_cache_mode =
/// auto` keeps a plan made without the parameters only when it looks no dearer than the ones made for
/// them, and a plan that does not know it stops after a few rows never does): about 0.4–0.7 ms of its CPU
/// per claim, as much as running it. With the limit in the text, after its first five runs the query runs
/// from one plan per connection and text, and that plan knows it reads a few rows (a plan made without
/// its limit estimated a tenth of the queue, which is how the claims went wrong when they were made to
/// plan generically: docs/BENCHMARKS.md). `$3` is still bound, and unused. A worker claims batches of a
/// few sizes (its batch, and what is free of its concurrency), so a connection keeps a few texts.
#[must_use]
pub fn claim_text(limit: u32) -> String {
    format!("{CLAIM_HEAD}{limit}{CLAIM_TAIL}")
}

/// The `WITH` part of [`WRITE_DECISIONS`] (a macro, so that `concat!` can use it).
macro_rules! write_decisions_with {
    () => {
        "WITH arrays AS MATERIALIZED ( \
       SELECT $1::text[] AS user_id, $2::bigint[] AS id, $3::text[] AS state, $4::bool[] AS hold, \
         $5::timestamptz[] AS next_at, $6::int[] AS d_count, $7::int[] AS d_no, $8::bool[] AS uncertain, \
         $9::timestamptz[] AS since, $10::bool[] AS review, $11::text[] AS msg, $12::bool[] AS set_error, \
         $13::text[] AS error, $14::text[] AS action, $15::text[] AS outcome), \
     u AS ( \
       SELECT u.* FROM arrays a, unnest(a.user_id, a.id, a.state, a.hold, a.next_at, a.d_count, a.d_no, \
         a.uncertain, a.since, a.review, a.msg, a.set_error, a.error, a.action, a.outcome) \
         AS u(user_id, id, state, hold, next_at, d_count, d_no, uncertain, since, review, msg, set_error, error, \
              action, outcome)), \
     held AS ( \
       UPDATE delivery_task t SET state = u.state, \
         attempt_token = CASE WHEN u.hold THEN herald_uuid_v7() END, \
         lease_owner = CASE WHEN u.hold THEN $16 END, \
         lease_until = CASE WHEN u.hold THEN u.next_at END, \
         next_attempt_at = u.next_at, \
         attempt_count = t.attempt_count + u.d_count, last_attempt_no = t.last_attempt_no + u.d_no, \
         outcome_uncertain = u.uncertain, uncertain_since = u.since, needs_review = u.review, \
         provider_msg_id = COALESCE(u.msg, t.provider_msg_id), \
         last_error = CASE WHEN u.set_error THEN u.error ELSE t.last_error END, \
         updated_at = $17 \
       FROM u WHERE t.user_id = u.user_id AND t.id = u.id \
       RETURNING t.user_id, t.id, t.attempt_token, t.attempt_count, t.last_attempt_no), \
     attempts AS ( \
       INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, outcome, \
         started_at, finished_at) \
       SELECT h.user_id, h.id, h.last_attempt_no, COALESCE(h.attempt_token, herald_uuid_v7()), u.action, \
         CASE WHEN u.hold THEN $16 END, u.outcome, $17, CASE WHEN u.hold THEN NULL ELSE $17 END \
       FROM held h JOIN u ON u.user_id = h.user_id AND u.id = h.id \
       WHERE u.d_no > 0)"
    };
}

/// Writes every decision of a batch at once: one `UPDATE … FROM unnest` of the task rows, and the
/// attempt rows (claim-time decisions and calls) inserted from what that update returned, so each
/// attempt number and token is the one its task row now holds. Counters are bumped by the statement
/// itself rather than set from the values read earlier, so the rows stay consistent even for the
/// unlocked negative-control claim.
///
/// The arrays reach `unnest` through a one-row materialized CTE, so no plan sees how long they are:
/// every plan, made for the parameters or not, estimates ten rows. Unnested directly, a plan made for a
/// batch of two or three rows looks cheaper than the generic one (ten rows), and PostgreSQL would plan
/// the statement again on every claim; with equal estimates it keeps the generic plan after its first
/// five runs. That plan finds each row by its key whatever the batch size, and a plan generation
/// ([`plan_generation`]) replaces one made while the tables were small.
const WRITE_DECISIONS: &str = concat!(
    write_decisions_with!(),
    " SELECT id, attempt_token, attempt_count, last_attempt_no FROM held WHERE attempt_token IS NOT NULL"
);

/// [`WRITE_DECISIONS`] up to its final `SELECT`: the `WITH` part, whose `held` holds every task row written
/// (`user_id`, `id`, `attempt_token`, `attempt_count`, `last_attempt_no`). The benchmark's pgbench script
/// follows it with a `SELECT` of its own.
pub const WRITE_DECISIONS_WITH: &str = write_decisions_with!();

/// One claim transaction: lock up to `limit` runnable rows, decide over all of them, store every
/// decision together, commit. A constant number of statements whatever the batch size: the claim
/// query; the egress rows of the batch's rate-limited channels, locked once each; the superseded
/// holders' attempts closed in one statement; every task and attempt row written in one; and, for a
/// batch that came back short, one read of the rate-limited channels passed over with tasks due
/// ([`WAITING_FOR_SLOT`]), so the batch tells when their slot is free (`ClaimBatch::next_slot`).
///
/// `claimed` counts the rows this store's claims have taken, for [`plan_generation`].
pub(crate) async fn claim(
    pool: &PgPool,
    request: &ClaimRequest,
    claimed: &AtomicU64,
) -> Result<ClaimBatch, StoreError> {
    let generation = plan_generation(claimed.load(Ordering::Relaxed));
    let mut tx = pool.begin().await.map_err(store_error)?;
    let (limited, spacing) = egress_spacing(&request.channels);
    let rows = claim_query_rows(&mut tx, &planned(&claim_text(request.limit), generation), request, &limited, &spacing)
        .await?;
    claimed.fetch_add(u64::try_from(rows.len()).unwrap_or(u64::MAX), Ordering::Relaxed);
    let mut batch = claim_rows(&mut tx, rows, request, generation).await?;
    let taken = batch.claimed.len() + batch.settled.len() + batch.deferred.len();
    if !limited.is_empty() && taken < usize::try_from(request.limit).unwrap_or(usize::MAX) {
        // A short claim: the worker would wait for its poll interval. Tell it when a channel passed
        // over for its slot can be called again.
        let slot = waiting_for_slot(&mut tx, request, &limited, &spacing, generation).await?;
        batch.next_slot = earliest(batch.next_slot, slot);
    }
    tx.commit().await.map_err(store_error)?;
    Ok(batch)
}

/// Runs `text` — the claim query, or a negative control's variant of it — with the claim's parameters.
pub(crate) async fn claim_query_rows(
    conn: &mut PgConnection,
    text: &str,
    request: &ClaimRequest,
    limited: &[String],
    spacing: &[i64],
) -> Result<Vec<ClaimRow>, StoreError> {
    sqlx::query_as(text)
        .bind(to_db(request.now))
        .bind(channel_names(&request.channels))
        .bind(i64::from(request.limit))
        .bind(limited)
        .bind(spacing)
        .fetch_all(&mut *conn)
        .await
        .map_err(store_error)
}

/// Which plans of the claim's statements and the batched finish a connection uses, from the rows this
/// store's claims have taken: 0 until 256, then one more each time that count doubles.
///
/// The statements are kept prepared, and a connection plans a prepared statement once for all — at its
/// first run on the finish pool ([`Planning::Generic`](crate::Planning)); elsewhere when PostgreSQL finds
/// the plan made without the parameters no dearer than the ones made for them, which for the claim query
/// it mostly does — and keeps that plan until the tables it reads are analyzed. Made while
/// `delivery_task` held a few rows — a worker started on a new installation — the plan reads the whole
/// table (a hash join over a sequential scan where each row wants one index probe), and goes on doing so
/// as the table grows by every task delivered: where autovacuum is off or slow, for the connection's
/// whole life. Each generation is a new statement text ([`planned`]), so every connection prepares and
/// plans it again from the tables as they are then; a few dozen generations cover any lifetime, and each
/// costs a connection a few plannings. Planning at every run instead costs the claim, and the batched
/// finish, 0.3–0.5 ms of the database's CPU each time.
#[must_use]
pub fn plan_generation(claimed: u64) -> u32 {
    (claimed / 256).checked_ilog2().map_or(0, |doublings| doublings + 1)
}

/// The text of a statement for a plan generation: the statement itself, then a comment naming the
/// generation (a different text is a different prepared statement).
pub(crate) fn planned(sql: &str, generation: u32) -> Cow<'_, str> {
    if generation == 0 {
        Cow::Borrowed(sql)
    } else {
        Cow::Owned(format!("{sql} /* plan generation {generation} */"))
    }
}

/// The rate-limited channels (`$2`/`$3` as the claim query's `$4`/`$5`) whose egress slot is not free
/// at `$1`, and that have a task runnable by the time it is (the claim query's runnable predicate at
/// that instant): each with its latest reservation. Read, not locked — it only tells the worker when to
/// claim again; the claim then decides under the row lock. As in the claim query, a queue row due before
/// that instant is runnable by then (a `SENDING` task's row is due at its lease end), and only a row due
/// exactly then needs its task's state, read by one index probe: no join with `delivery_task`, which a
/// plan made on other statistics could hash whole.
const WAITING_FOR_SLOT: &str = "SELECT e.channel, e.last_call_at FROM channel_egress e \
       JOIN unnest($2::text[], $3::bigint[]) AS r(channel, spacing_ms) ON r.channel = e.channel \
       CROSS JOIN LATERAL (SELECT e.last_call_at + r.spacing_ms * interval '1 millisecond' AS free_at) s \
     WHERE s.free_at > $1 \
       AND EXISTS (SELECT 1 FROM task_queue q \
             WHERE q.channel = e.channel AND q.due_at <= s.free_at \
               AND (q.due_at < s.free_at OR (SELECT t.state FROM delivery_task t \
                     WHERE t.user_id = q.user_id AND t.id = q.task_id) IS DISTINCT FROM 'SENDING'))";

/// The earliest instant a rate-limited channel with work waiting, which the claim passed over, may be
/// called again: the domain's egress decision at `now` over each such channel's latest reservation.
async fn waiting_for_slot(
    conn: &mut PgConnection,
    request: &ClaimRequest,
    limited: &[String],
    spacing: &[i64],
    generation: u32,
) -> Result<Option<Timestamp>, StoreError> {
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(&planned(WAITING_FOR_SLOT, generation))
        .bind(to_db(request.now))
        .bind(limited)
        .bind(spacing)
        .fetch_all(&mut *conn)
        .await
        .map_err(store_error)?;
    let mut slot = None;
    for (channel, last) in rows {
        let Some(rules) = request.channels.get(&ChannelName(channel)) else { continue };
        let free_at = match decide_egress(Some(from_db(last)), rules.min_interval, rules.egress_guard, request.now) {
            EgressDecision::DeferUntil(until) => until,
            // Free by the time this ran (the query and the decision agree, so only at the very instant).
            EgressDecision::Go => request.now,
        };
        slot = earliest(slot, Some(free_at));
    }
    Ok(slot)
}

/// The earlier of two optional instants.
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
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

/// What a claim does with one locked row, decided before anything is written.
struct Planned {
    row: ClaimRow,
    task: TaskRow,
    expires_at: Timestamp,
    decision: ClaimDecision,
}

/// The task-row writes of a batch, column by column, as [`WRITE_DECISIONS`] binds them.
#[derive(Default)]
struct Writes {
    user_id: Vec<String>,
    id: Vec<i64>,
    state: Vec<&'static str>,
    hold: Vec<bool>,
    next_at: Vec<Option<DateTime<Utc>>>,
    d_count: Vec<i32>,
    d_no: Vec<i32>,
    uncertain: Vec<bool>,
    since: Vec<Option<DateTime<Utc>>>,
    review: Vec<bool>,
    msg: Vec<Option<String>>,
    set_error: Vec<bool>,
    error: Vec<Option<&'static str>>,
    action: Vec<Option<&'static str>>,
    outcome: Vec<Option<&'static str>>,
}

impl Writes {
    /// A transition that releases the holding (SUPPRESSED, FAILED, parked, or a deferral), with the
    /// claim-time attempt row when `record` is given.
    fn transition(&mut self, task: &TaskRow, t: &Transition, record: Option<Outcome>) {
        self.user_id.push(task.user_id.as_str().to_owned());
        self.id.push(task.id.0);
        self.state.push(t.state.as_str());
        self.hold.push(false);
        self.next_at.push(opt_to_db(t.next_attempt_at));
        self.d_count.push(0);
        self.d_no.push(i32::from(record.is_some()));
        self.uncertain.push(t.outcome_uncertain);
        self.since.push(opt_to_db(t.uncertain_since));
        self.review.push(t.needs_review);
        self.msg.push(t.provider_msg_id.clone());
        self.set_error.push(true);
        self.error.push(t.reason);
        self.action.push(None);
        self.outcome.push(record.map(Outcome::as_str));
    }

    /// A holding: `SENDING` under a fresh token until `lease_until`, one attempt spent, its attempt row.
    fn hold(
        &mut self,
        task: &TaskRow,
        action: Action,
        uncertain: bool,
        since: Option<Timestamp>,
        lease_until: Timestamp,
    ) {
        self.user_id.push(task.user_id.as_str().to_owned());
        self.id.push(task.id.0);
        self.state.push(TaskState::Sending.as_str());
        self.hold.push(true);
        self.next_at.push(Some(to_db(lease_until)));
        self.d_count.push(1);
        self.d_no.push(1);
        self.uncertain.push(uncertain);
        self.since.push(opt_to_db(since));
        self.review.push(false);
        self.msg.push(None);
        self.set_error.push(false);
        self.error.push(None);
        self.action.push(Some(action.as_str()));
        self.outcome.push(None);
    }
}

/// Decides and stores a batch of rows of the claim query. Shared with the negative-control claim, which
/// differs only in how it finds and locks rows.
///
/// The rows are taken in channel order (the claim query's), so that the egress rows of several
/// rate-limited channels are always locked in one global order — two claimers never wait on each
/// other's rows (a deadlock) — and, within a channel, oldest due first.
///
/// `generation` names the plans of its statements ([`plan_generation`]).
pub(crate) async fn claim_rows(
    conn: &mut PgConnection,
    mut rows: Vec<ClaimRow>,
    request: &ClaimRequest,
    generation: u32,
) -> Result<ClaimBatch, StoreError> {
    rows.sort_by(|a, b| a.channel().cmp(b.channel()));
    let now = request.now;
    let mut planned = Vec::with_capacity(rows.len());
    for row in rows {
        let task = TaskRow::try_from(row.task.clone())?;
        let Some(rules) = request.channels.get(&task.channel) else { continue };
        let ctx = ClaimContext {
            task: task.snapshot.clone(),
            budget: task.budget,
            pref_enabled: row.pref_enabled,
            erased: row.erased,
            expires_at: from_db(row.expires_at),
            capability: rules.contract.capability,
            policy: rules.policy,
        };
        let decision = decide_claim(&ctx, now);
        planned.push(Planned { row, task, expires_at: ctx.expires_at, decision });
    }

    // The egress rows of the rate-limited channels this batch would call, each locked once.
    let mut egress_channels: Vec<&ChannelName> = planned
        .iter()
        .filter(|p| p.decision.calls_channel())
        .map(|p| &p.task.channel)
        .filter(|name| request.channels.get(name).is_some_and(|r| r.min_interval > Millis::ZERO))
        .collect();
    egress_channels.dedup();
    let mut slots = lock_egress(conn, &egress_channels).await?;
    let mut reserved: Vec<String> = Vec::new();

    let mut batch = ClaimBatch::default();
    let mut writes = Writes::default();
    let mut expired: (Vec<String>, Vec<Uuid>, Vec<String>) = (Vec::new(), Vec::new(), Vec::new());
    let mut calls: Vec<(Planned, Action, bool, Option<Timestamp>)> = Vec::new();
    for p in planned {
        let Some(rules) = request.channels.get(&p.task.channel) else { continue };
        match p.decision.clone() {
            ClaimDecision::Skip => {}
            ClaimDecision::Settle { superseded, record, transition } => {
                if superseded {
                    expire(&mut expired, &p.task);
                }
                writes.transition(&p.task, &transition, record);
                batch.settled.push(Settled {
                    task_id: p.task.id,
                    channel: p.task.channel.clone(),
                    outcome: record,
                    state: transition.state,
                    parked: transition.is_parked(),
                });
            }
            ClaimDecision::Call { action, uncertain, superseded, uncertain_since } => {
                if superseded {
                    expire(&mut expired, &p.task);
                }
                if rules.min_interval > Millis::ZERO {
                    let last = slots.get(p.task.channel.as_str()).copied().flatten();
                    if let EgressDecision::DeferUntil(until) =
                        decide_egress(last, rules.min_interval, rules.egress_guard, now)
                    {
                        // Another claim (or an earlier task of this batch) took the slot. A task that is
                        // due stays as it is — untouched, it keeps its place in the backlog, and the
                        // claim query passes its channel over until the slot is free. Only a task taken
                        // over from an expired holder must be written now: its holder's attempt was just
                        // closed, and the row must stop pointing at it.
                        if superseded {
                            let transition = deferral(&p.task.snapshot, uncertain, uncertain_since, until);
                            writes.transition(&p.task, &transition, None);
                        }
                        batch.deferred.push(Deferred { task_id: p.task.id, channel: p.task.channel.clone() });
                        batch.next_slot = earliest(batch.next_slot, Some(until));
                        continue;
                    }
                    slots.insert(p.task.channel.as_str().to_owned(), Some(now));
                    reserved.push(p.task.channel.as_str().to_owned());
                }
                writes.hold(&p.task, action, uncertain, uncertain_since, now + request.lease);
                calls.push((p, action, uncertain, uncertain_since));
            }
        }
    }

    if !reserved.is_empty() {
        sqlx::query("UPDATE channel_egress SET last_call_at = $2 WHERE channel = ANY($1)")
            .bind(&reserved)
            .bind(to_db(now))
            .execute(&mut *conn)
            .await
            .map_err(store_error)?;
    }
    if !expired.0.is_empty() {
        batch.lease_expired = expire_holders(conn, &expired, now, generation).await?;
    }
    let held =
        if writes.id.is_empty() { Vec::new() } else { write_decisions(conn, &writes, request, generation).await? };
    let held: HashMap<i64, HeldRow> = held.into_iter().map(|h| (h.id, h)).collect();

    for (p, action, uncertain, uncertain_since) in calls {
        let Some(rules) = request.channels.get(&p.task.channel) else { continue };
        let Some(h) = held.get(&p.task.id.0) else {
            return Err(StoreError::Unknown(anyhow::anyhow!("a claimed task row was not written")));
        };
        let (token, attempts_used, attempt_no) = h.parts();
        batch.claimed.push(ClaimedTask {
            task_id: p.task.id,
            reference: p.row.reference,
            notification_id: p.task.notification_id,
            user_id: p.task.user_id.clone(),
            channel: p.task.channel.clone(),
            token,
            attempt_no,
            action,
            finish: FinishContext {
                action,
                prior_uncertain: uncertain,
                uncertain_since,
                attempt_started_at: now,
                expires_at: p.expires_at,
                attempts_used,
                budget: p.task.budget,
                capability: rules.contract.capability,
                retry: rules.retry,
            },
            body: p.row.body,
            expires_at: p.expires_at,
            destination: p.row.destination,
            digest_count: p.task.digest_count,
        });
    }
    Ok(batch)
}

/// Notes the superseded holder's unfinished attempt, to be closed as `LEASE_EXPIRED`.
fn expire(expired: &mut (Vec<String>, Vec<Uuid>, Vec<String>), task: &TaskRow) {
    if let Some(token) = task.token {
        expired.0.push(task.user_id.as_str().to_owned());
        expired.1.push(token);
        expired.2.push(task.channel.as_str().to_owned());
    }
}

/// Runs [`WRITE_DECISIONS`]; answers the holdings taken.
async fn write_decisions(
    conn: &mut PgConnection,
    w: &Writes,
    request: &ClaimRequest,
    generation: u32,
) -> Result<Vec<HeldRow>, StoreError> {
    sqlx::query_as(&planned(WRITE_DECISIONS, generation))
        .bind(&w.user_id)
        .bind(&w.id)
        .bind(&w.state)
        .bind(&w.hold)
        .bind(&w.next_at)
        .bind(&w.d_count)
        .bind(&w.d_no)
        .bind(&w.uncertain)
        .bind(&w.since)
        .bind(&w.review)
        .bind(&w.msg)
        .bind(&w.set_error)
        .bind(&w.error)
        .bind(&w.action)
        .bind(&w.outcome)
        .bind(&request.worker)
        .bind(to_db(request.now))
        .fetch_all(&mut *conn)
        .await
        .map_err(store_error)
}

/// Locks the egress rows of `channels` (sorted, distinct) in that order, creating the missing ones;
/// answers each channel's latest reservation.
async fn lock_egress(
    conn: &mut PgConnection,
    channels: &[&ChannelName],
) -> Result<HashMap<String, Option<Timestamp>>, StoreError> {
    if channels.is_empty() {
        return Ok(HashMap::new());
    }
    let names: Vec<&str> = channels.iter().map(|c| c.as_str()).collect();
    sqlx::query(
        "INSERT INTO channel_egress (channel) SELECT c FROM unnest($1::text[]) AS c ORDER BY c \
         ON CONFLICT (channel) DO NOTHING",
    )
    .bind(&names)
    .execute(&mut *conn)
    .await
    .map_err(store_error)?;
    let rows: Vec<(String, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT channel, last_call_at FROM channel_egress WHERE channel = ANY($1) ORDER BY channel FOR UPDATE",
    )
    .bind(&names)
    .fetch_all(&mut *conn)
    .await
    .map_err(store_error)?;
    Ok(rows.into_iter().map(|(channel, last)| (channel, opt_from_db(last))).collect())
}

/// Marks the superseded holders' unfinished attempts `LEASE_EXPIRED`, in one statement.
async fn expire_holders(
    conn: &mut PgConnection,
    expired: &(Vec<String>, Vec<Uuid>, Vec<String>),
    now: Timestamp,
    generation: u32,
) -> Result<Vec<ChannelName>, StoreError> {
    const EXPIRE: &str = "UPDATE delivery_attempt a SET outcome = 'LEASE_EXPIRED', finished_at = $3 \
         FROM unnest($1::text[], $2::uuid[], $4::text[]) AS e(user_id, token, channel) \
         WHERE a.user_id = e.user_id AND a.attempt_token = e.token AND a.outcome IS NULL \
         RETURNING e.channel";
    let channels: Vec<String> = sqlx::query_scalar(&planned(EXPIRE, generation))
        .bind(&expired.0)
        .bind(&expired.1)
        .bind(to_db(now))
        .bind(&expired.2)
        .fetch_all(&mut *conn)
        .await
        .map_err(store_error)?;
    Ok(channels.into_iter().map(ChannelName).collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_made_again_each_time_the_claimed_rows_double() {
        assert_eq!(plan_generation(0), 0);
        assert_eq!(plan_generation(255), 0);
        assert_eq!(plan_generation(256), 1);
        assert_eq!(plan_generation(511), 1);
        assert_eq!(plan_generation(512), 2);
        assert_eq!(plan_generation(1_000_000), 12);
        assert!(plan_generation(u64::MAX) < 64, "a few dozen generations for any lifetime");
        assert_eq!(planned(CLAIM_QUERY, 0), CLAIM_QUERY, "the first generation is the statement as written");
        assert_ne!(planned(CLAIM_QUERY, 1), planned(CLAIM_QUERY, 2), "each generation is a statement of its own");
        assert!(planned(CLAIM_QUERY, 3).starts_with(CLAIM_QUERY));
    }

    #[test]
    fn the_claim_runs_the_claim_query_with_its_limit_written_in() {
        assert_eq!(claim_text(32).replace("LIMIT 32 ", "LIMIT $3 "), CLAIM_QUERY);
        assert!(claim_text(7).contains("LIMIT 7 FOR NO KEY UPDATE OF q SKIP LOCKED"));
    }
}
