//! The human exit (SPEC §6): manual resolution of a parked task.

use herald_domain::resolve::{resolve_manually_at as decide_resolution, FinalState};
use herald_domain::{TaskId, Timestamp};
use herald_ports::store::{ResolveError, Resolved};
use sqlx::PgPool;

use crate::convert::store_error;
use crate::rows::{task_decision_columns, TaskDecisionRow, TaskRow};
use crate::transition::{record_decision, store_transition};

/// Locks the task for the resolution.
const LOCK_TASK: &str =
    concat!("SELECT ", task_decision_columns!(), " FROM delivery_task t WHERE t.id = $1 FOR UPDATE");

/// Locks the task, asks the domain (only a parked task may be resolved), and writes the `MANUAL_SENT` /
/// `MANUAL_FAILED` / `MANUAL_RESEND` attempt row with the note and the transition, in one transaction.
///
/// The note lives on the attempt row only (`delivery_attempt.note`): a human decision is not an error, so
/// `last_error` is cleared. `RESEND` also gives the task a fresh budget (`attempt_count = 0`); the attempt
/// rows keep the whole history, so nothing about the earlier attempts is lost.
pub(crate) async fn resolve_manually(
    pool: &PgPool,
    task: TaskId,
    final_state: FinalState,
    note: &str,
    audit: &herald_ports::NewAuditEvent,
    now: Timestamp,
) -> Result<Resolved, ResolveError> {
    let mut tx = pool.begin().await.map_err(store_error)?;
    let locked: Option<TaskDecisionRow> =
        sqlx::query_as(LOCK_TASK).bind(task.0).fetch_optional(&mut *tx).await.map_err(store_error)?;
    // A refusal releases the row lock at once: dropped, the transaction would keep it until the pool
    // rolls the connection back, and a claim's SKIP LOCKED would pass the task over meanwhile.
    let Some(locked) = locked else {
        tx.rollback().await.map_err(store_error)?;
        return Err(ResolveError::NotFound);
    };
    let row = TaskRow::try_from(locked)?;
    let transition = match decide_resolution(&row.snapshot, final_state, now) {
        Ok(transition) => transition,
        Err(refused) => {
            tx.rollback().await.map_err(store_error)?;
            return Err(ResolveError::NotParked { state: refused.state });
        }
    };
    let by = audit.actor.label();
    record_decision(&mut tx, &row, row.last_attempt_no + 1, final_state.outcome(), Some(note), Some(&by), now).await?;
    crate::audit::insert(&mut tx, audit).await?;
    store_transition(&mut tx, &row, &transition, None, now).await?;
    if final_state.fresh_budget() {
        sqlx::query("UPDATE delivery_task SET attempt_count = 0 WHERE user_id = $1 AND id = $2")
            .bind(row.user_id.as_str())
            .bind(task.0)
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
    }
    tx.commit().await.map_err(store_error)?;
    Ok(Resolved { task_id: task, state: transition.state })
}
