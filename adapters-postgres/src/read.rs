//! Marking an inbox item read (SPEC §11 `POST /v1/users/{user_id}/inbox/{notification_id}/read`).

use herald_domain::{NotificationRef, Timestamp, UserId};
use herald_ports::store::{MarkRead, StoreError};
use sqlx::PgPool;

use crate::convert::{opt_from_db, store_error, to_db};
use crate::rows::ReadAtRow;

/// Sets `read_at` only where it is still NULL, so a repeat (or a concurrent second press) keeps the first
/// time and says so; a row that did not change is read again to tell "read before" from "no such item".
/// The item is named by its notification's outside name, found by `notification_public_id` together
/// with the user (another user's notification is "no such item"); then both statements use the primary
/// key `(user_id, notification_id)`.
pub(crate) async fn mark_read(
    pool: &PgPool,
    user: &UserId,
    notification: NotificationRef,
    now: Timestamp,
) -> Result<MarkRead, StoreError> {
    let marked: Option<ReadAtRow> = sqlx::query_as(
        "UPDATE inbox_item SET read_at = $3 WHERE user_id = $1 AND read_at IS NULL \
         AND notification_id = (SELECT id FROM notification WHERE public_id = $2 AND user_id = $1) RETURNING read_at",
    )
    .bind(user.as_str())
    .bind(notification.0)
    .bind(to_db(now))
    .fetch_optional(pool)
    .await
    .map_err(store_error)?;
    if let Some(at) = marked.and_then(|row| opt_from_db(row.read_at)) {
        return Ok(MarkRead::Marked(at));
    }
    let existing: Option<ReadAtRow> = sqlx::query_as(
        "SELECT read_at FROM inbox_item WHERE user_id = $1 \
             AND notification_id = (SELECT id FROM notification WHERE public_id = $2 AND user_id = $1)",
    )
    .bind(user.as_str())
    .bind(notification.0)
    .fetch_optional(pool)
    .await
    .map_err(store_error)?;
    Ok(match existing.and_then(|row| opt_from_db(row.read_at)) {
        Some(at) => MarkRead::AlreadyRead(at),
        None => MarkRead::NotFound,
    })
}
