//! The two writes the claim and the manual resolution share: storing a transition that ends or pauses
//! the current holding, and writing an attempt row that called no channel.

use herald_domain::{Outcome, Timestamp, Transition};
use herald_ports::StoreError;
use sqlx::PgConnection;

use crate::convert::{opt_to_db, store_error, to_db};
use crate::rows::TaskRow;

/// Binds, in this order, the four columns every write of a [`Transition`] sets — `state`,
/// `outcome_uncertain`, `needs_review`, `next_attempt_at` — to the next four parameters of `query`.
macro_rules! bind_transition {
    ($query:expr, $transition:expr) => {{
        let t: &herald_domain::Transition = $transition;
        $query
            .bind(t.state.as_str())
            .bind(t.outcome_uncertain)
            .bind(t.needs_review)
            .bind($crate::convert::opt_to_db(t.next_attempt_at))
    }};
}
pub(crate) use bind_transition;

/// Stores a transition that ends or pauses the current holding (no lease, no token).
pub(crate) async fn store_transition(
    conn: &mut PgConnection,
    task: &TaskRow,
    t: &Transition,
    detail: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let query = sqlx::query(
        "UPDATE delivery_task SET state = $3, outcome_uncertain = $4, needs_review = $5, next_attempt_at = $6, \
         uncertain_since = $7, provider_msg_id = COALESCE($8, provider_msg_id), last_error = $9, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = $10 \
         WHERE user_id = $1 AND id = $2",
    )
    .bind(task.user_id.as_str())
    .bind(task.id.0);
    bind_transition!(query, t)
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
///
/// The attempt is inserted from the task row the same statement updates, so it is written only with its
/// task (no foreign key checks that, migration `0016`): for a task that is not there, nothing is written
/// and this fails.
pub(crate) async fn record_decision(
    conn: &mut PgConnection,
    task: &TaskRow,
    attempt_no: i32,
    outcome: Outcome,
    note: Option<&str>,
    decided_by: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let written = sqlx::query(
        "WITH bump AS (UPDATE delivery_task SET last_attempt_no = $3 WHERE user_id = $1 AND id = $2 \
                       RETURNING user_id, id) \
         INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, outcome, note, decided_by, \
             started_at, finished_at) \
         SELECT user_id, id, $3, herald_uuid_v7(), $4, $5, $7, $6, $6 FROM bump",
    )
    .bind(task.user_id.as_str())
    .bind(task.id.0)
    .bind(attempt_no)
    .bind(outcome.as_str())
    .bind(note)
    .bind(to_db(now))
    .bind(decided_by)
    .execute(&mut *conn)
    .await
    .map_err(store_error)?;
    if written.rows_affected() != 1 {
        return Err(StoreError::Unknown(anyhow::anyhow!("no task row for the decision's attempt")));
    }
    Ok(())
}
