//! The end of an attempt (SPEC §5, §7): the fenced finish statement, and the fenced give-back of an
//! attempt whose holder missed its egress slot. Both run on the store's finish pool.

use herald_domain::TaskState;
use herald_ports::store::{FinishRecord, FinishResult, GiveBack, StoreError};
use sqlx::PgPool;

use crate::claim::planned;
use crate::convert::{opt_to_db, store_error, to_db};

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

/// [`FINISH_QUERY`] for many attempts in one statement (SPEC §5): the same fence, row by row. Each input
/// row changes its task only while its own token holds it; a superseded row lands as its attempt's late
/// outcome and does not affect the others. Rows are taken in (user, task) order, so two batches that
/// wait on one another lock in the same order. Answers one row per input attempt: its token and
/// `applied`, `repeated` or `stale`.
///
/// Planned once per finish connection and plan generation (see [`finish_batch`]).
pub const FINISH_BATCH_QUERY: &str = "WITH input AS ( \
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::bool[], $6::bool[], \
         $7::timestamptz[], $8::timestamptz[], $9::text[], $10::text[], $11::timestamptz[], $12::text[], $13::text[]) \
         AS i(user_id, task_id, token, state, uncertain, review, next_at, uncertain_since, provider_msg_id, \
              last_error, now, outcome, detail)), \
     held AS ( \
       UPDATE delivery_task t SET state = i.state, outcome_uncertain = i.uncertain, needs_review = i.review, \
         next_attempt_at = i.next_at, uncertain_since = i.uncertain_since, \
         provider_msg_id = COALESCE(i.provider_msg_id, t.provider_msg_id), last_error = i.last_error, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = i.now \
       FROM (SELECT * FROM input ORDER BY user_id, task_id) i \
       WHERE t.user_id = i.user_id AND t.id = i.task_id AND t.state = 'SENDING' AND t.attempt_token = i.token \
       RETURNING i.token) \
     UPDATE delivery_attempt a SET \
       outcome = CASE WHEN h.token IS NOT NULL THEN i.outcome ELSE a.outcome END, \
       detail = CASE WHEN h.token IS NOT NULL THEN i.detail ELSE a.detail END, \
       finished_at = CASE WHEN h.token IS NOT NULL THEN i.now ELSE a.finished_at END, \
       late_outcome = CASE WHEN h.token IS NOT NULL OR a.outcome IS NOT DISTINCT FROM i.outcome \
         THEN a.late_outcome ELSE i.outcome END, \
       late_detail = CASE WHEN h.token IS NOT NULL OR a.outcome IS NOT DISTINCT FROM i.outcome \
         THEN a.late_detail ELSE i.detail END, \
       late_at = CASE WHEN h.token IS NOT NULL OR a.outcome IS NOT DISTINCT FROM i.outcome \
         THEN a.late_at ELSE i.now END \
     FROM input i LEFT JOIN held h ON h.token = i.token \
     WHERE a.user_id = i.user_id AND a.attempt_token = i.token \
     RETURNING a.attempt_token, CASE WHEN h.token IS NOT NULL THEN 'applied' \
       WHEN a.outcome IS NOT DISTINCT FROM i.outcome THEN 'repeated' ELSE 'stale' END";

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
       RETURNING attempt_no) \
     SELECT EXISTS (SELECT 1 FROM held)";

/// Runs [`FINISH_QUERY`] for `record`.
pub(crate) async fn finish(pool: &PgPool, record: &FinishRecord) -> Result<FinishResult, StoreError> {
    let t = &record.transition;
    let query =
        sqlx::query_scalar(FINISH_QUERY).bind(record.user_id.as_str()).bind(record.task_id.0).bind(record.token.0);
    let result: Option<String> = crate::transition::bind_transition!(query, t)
        .bind(opt_to_db(t.uncertain_since))
        .bind(t.provider_msg_id.as_deref())
        .bind(last_error(record))
        .bind(to_db(record.now))
        .bind(record.observation.outcome().as_str())
        .bind(&record.detail)
        .fetch_optional(pool)
        .await
        .map_err(store_error)?;
    match result.as_deref() {
        Some("applied" | "repeated") => Ok(FinishResult::Applied),
        Some(_) => Ok(FinishResult::Stale),
        None => Err(StoreError::Unknown(anyhow::anyhow!("no attempt row for the finishing token"))),
    }
}

/// Runs [`FINISH_BATCH_QUERY`] for `records`; the results are in the order of `records`.
///
/// The statement is kept prepared under the claim's plan generation (`claim::plan_generation`): a
/// finish connection plans it once, at its first run ([`Planning::Generic`](crate::Planning)), and keeps
/// that plan until the tables are analyzed again. Planned while `delivery_attempt` held a few hundred rows — the first seconds
/// of a drain from empty tables — the plan hashes the batch and reads the whole table for it, and would go
/// on doing so as the table grows by every attempt (in the benchmark's drain, 7.7 ms of a flush's run
/// instead of 3.0). The generation changes each time the rows claimed through the store double, so each
/// connection plans the statement again from the table as it is then, and the attempts are found through
/// `delivery_attempt_token` as soon as the table is worth it. Planning at every run instead would cost
/// 0.3–0.5 ms of the database's CPU per flush.
pub(crate) async fn finish_batch(
    pool: &PgPool,
    records: &[FinishRecord],
    generation: u32,
) -> Result<Vec<Result<FinishResult, StoreError>>, StoreError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let column = |f: &dyn Fn(&FinishRecord) -> String| records.iter().map(f).collect::<Vec<_>>();
    let transitions = records.iter().map(|r| &r.transition);
    let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(&planned(FINISH_BATCH_QUERY, generation))
        .bind(column(&|r| r.user_id.as_str().to_owned()))
        .bind(records.iter().map(|r| r.task_id.0).collect::<Vec<_>>())
        .bind(records.iter().map(|r| r.token.0).collect::<Vec<_>>())
        .bind(column(&|r| r.transition.state.as_str().to_owned()))
        .bind(transitions.clone().map(|t| t.outcome_uncertain).collect::<Vec<_>>())
        .bind(transitions.clone().map(|t| t.needs_review).collect::<Vec<_>>())
        .bind(transitions.clone().map(|t| opt_to_db(t.next_attempt_at)).collect::<Vec<_>>())
        .bind(transitions.clone().map(|t| opt_to_db(t.uncertain_since)).collect::<Vec<_>>())
        .bind(transitions.map(|t| t.provider_msg_id.clone()).collect::<Vec<_>>())
        .bind(records.iter().map(last_error).collect::<Vec<_>>())
        .bind(records.iter().map(|r| to_db(r.now)).collect::<Vec<_>>())
        .bind(column(&|r| r.observation.outcome().as_str().to_owned()))
        .bind(column(&|r| r.detail.clone()))
        .fetch_all(pool)
        .await
        .map_err(store_error)?;
    let answers: std::collections::HashMap<uuid::Uuid, String> = rows.into_iter().collect();
    Ok(records
        .iter()
        .map(|record| match answers.get(&record.token.0).map(String::as_str) {
            Some("applied" | "repeated") => Ok(FinishResult::Applied),
            Some(_) => Ok(FinishResult::Stale),
            None => Err(StoreError::Unknown(anyhow::anyhow!("no attempt row for the finishing token"))),
        })
        .collect())
}

/// Runs [`GIVE_BACK_QUERY`] for `record`.
pub(crate) async fn give_back(pool: &PgPool, record: &GiveBack) -> Result<FinishResult, StoreError> {
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
        .fetch_one(pool)
        .await
        .map_err(store_error)?;
    Ok(if held { FinishResult::Applied } else { FinishResult::Stale })
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
