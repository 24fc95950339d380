//! The unsafe variants the negative controls run (SPEC §10 NC1, NC3). Never used by Herald itself:
//! they exist to show, in tests, the damage the real statements prevent.

use herald_ports::store::{ClaimBatch, ClaimRequest, FinishRecord, StoreError};
use sqlx::postgres::PgRow;
use sqlx::FromRow;

use crate::claim::{claim_head, claim_rows, claim_tail, egress_spacing};
use crate::convert::{channel_names, store_error, to_db};
use crate::rows::task_decision_columns;
use crate::rows::ClaimRow;
use crate::store::PgStore;

/// NC1, first half: reads runnable tasks **without locking them** (neither the queue rows nor the tasks:
/// no `FOR NO KEY UPDATE … SKIP LOCKED`).
///
/// # Errors
/// Store failures.
pub async fn select_without_lock(store: &PgStore, request: &ClaimRequest) -> Result<Vec<PgRow>, StoreError> {
    let (limited, spacing) = egress_spacing(&request.channels);
    sqlx::query(UNLOCKED_CLAIM_QUERY)
        .bind(to_db(request.now))
        .bind(channel_names(&request.channels))
        .bind(i64::from(request.limit))
        .bind(limited)
        .bind(spacing)
        .fetch_all(store.pool())
        .await
        .map_err(store_error)
}

/// The claim query with every row lock taken out: the queue rows', the task rows' of the check in `due`,
/// and the task rows' of `picked` — the claim's own parts (`claim_head!`, `claim_tail!`) with no locking
/// clause. One lock left behind is enough to keep two racers apart some of the time, which would make the
/// control's damage depend on timing.
const UNLOCKED_CLAIM_QUERY: &str = concat!(claim_head!(""), "$3", claim_tail!("", ""));

/// NC1, second half: claims the rows read earlier by updating them by id, as if still runnable.
///
/// # Errors
/// Store failures.
pub async fn claim_selected(store: &PgStore, request: &ClaimRequest, rows: &[PgRow]) -> Result<ClaimBatch, StoreError> {
    let mut tx = store.pool().begin().await.map_err(store_error)?;
    let rows = rows.iter().map(ClaimRow::from_row).collect::<Result<Vec<_>, _>>().map_err(store_error)?;
    let batch = claim_rows(&mut tx, rows, request, 0).await?;
    tx.commit().await.map_err(store_error)?;
    Ok(batch)
}

/// The claim's test of an erasure, as [`CLAIM_QUERY`](crate::claim::CLAIM_QUERY) writes it.
const ERASED_COLUMN: &str = "EXISTS (SELECT 1 FROM user_erasure x WHERE x.user_id = t.user_id) AS erased";

/// The claim query with its erasure test replaced by `false`: every other lock and check of the real
/// claim is kept, so what differs is exactly that a task of an erased user is handed to a channel again.
fn claim_query_ignoring_erasure(limit: u32) -> Result<String, StoreError> {
    let text = crate::claim::claim_text(limit);
    if !text.contains(ERASED_COLUMN) {
        return Err(StoreError::Unknown(anyhow::anyhow!("the claim query no longer tests erasure as expected")));
    }
    Ok(text.replace(ERASED_COLUMN, "false AS erased"))
}

/// The planted bug "claim ignores erasure" (issue 42's negative control): the real claim, in one
/// transaction as [`PgStore`]'s, except that it reads every user as not erased.
///
/// # Errors
/// Store failures.
pub async fn claim_ignoring_erasure(store: &PgStore, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
    let (limited, spacing) = egress_spacing(&request.channels);
    let mut tx = store.pool().begin().await.map_err(store_error)?;
    let text = claim_query_ignoring_erasure(request.limit)?;
    let rows = crate::claim::claim_query_rows(&mut tx, &text, request, &limited, &spacing).await?;
    let batch = claim_rows(&mut tx, rows, request, 0).await?;
    tx.commit().await.map_err(store_error)?;
    Ok(batch)
}

/// NC3: finishes **by id only**, without the state and token condition, so a superseded holder's
/// late observation overwrites whatever the task says now.
///
/// # Errors
/// Store failures.
pub async fn finish_by_id_only(store: &PgStore, record: &FinishRecord) -> Result<(), StoreError> {
    let query = sqlx::query(
        "UPDATE delivery_task SET state = $3, outcome_uncertain = $4, needs_review = $5, next_attempt_at = $6, \
         attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = $7 \
         WHERE user_id = $1 AND id = $2",
    )
    .bind(record.user_id.as_str())
    .bind(record.task_id.0);
    crate::transition::bind_transition!(query, &record.transition)
        .bind(to_db(record.now))
        .execute(store.pool())
        .await
        .map_err(store_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::{lock_check, lock_queue, lock_task};

    #[test]
    fn the_unlocked_claim_takes_no_row_lock() {
        let lock = |query: &str| {
            ["FOR UPDATE", "FOR NO KEY UPDATE", "FOR SHARE", "FOR KEY SHARE", "SKIP LOCKED"]
                .into_iter()
                .any(|clause| query.contains(clause))
        };
        assert!(lock(crate::CLAIM_QUERY), "the real claim locks its rows");
        assert!(!lock(UNLOCKED_CLAIM_QUERY), "a lock is left in the negative control's claim: {UNLOCKED_CLAIM_QUERY}");
        // The same text otherwise: the claim query with its locking clauses taken out.
        let stripped = [lock_check!(), lock_queue!(), lock_task!()]
            .iter()
            .fold(crate::CLAIM_QUERY.to_owned(), |query, lock| query.replace(lock, ""));
        assert_eq!(UNLOCKED_CLAIM_QUERY, stripped);
    }

    #[test]
    fn the_planted_claim_differs_from_the_real_one_only_in_its_erasure_test() {
        let planted = claim_query_ignoring_erasure(4).expect("the real claim tests erasure");
        assert!(crate::claim::claim_text(4).contains("user_erasure"));
        assert!(!planted.contains("user_erasure"), "the planted claim still reads erasures");
        assert_eq!(planted.replace("false AS erased", ERASED_COLUMN), crate::claim::claim_text(4));
    }
}
