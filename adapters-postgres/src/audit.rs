//! The audit trail (issue 43): `audit_event`, append-only (migration `0032`'s trigger refuses every
//! `UPDATE`, `DELETE` and `TRUNCATE`). Each act's store method writes its event with [`insert`] in the
//! act's own transaction ([`commit_with`] when the events are the act's last writes).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use herald_domain::operators::{Actor, ActorKind, AuditAction, Role};
use herald_ports::audit::{AuditEvent, AuditFilter, AuditStore, NewAuditEvent};
use herald_ports::StoreError;
use sqlx::{PgConnection, Postgres, Transaction};

use crate::convert::{from_db, opt_to_db, store_error, to_db};
use crate::store::PgStore;

/// Writes one event on `conn` (the act's transaction).
pub(crate) async fn insert(conn: &mut PgConnection, event: &NewAuditEvent) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_event (at, actor_kind, actor_name, actor_role, action, target, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(to_db(event.at))
    .bind(event.actor.kind.as_str())
    .bind(&event.actor.name)
    .bind(event.actor.role.as_str())
    .bind(event.action.as_str())
    .bind(&event.target)
    .bind(&event.detail)
    .execute(conn)
    .await
    .map_err(store_error)?;
    Ok(())
}

/// Writes `events` in `tx`, the act's transaction, and commits it: the act and its events stand together
/// or not at all.
pub(crate) async fn commit_with(mut tx: Transaction<'_, Postgres>, events: &[NewAuditEvent]) -> Result<(), StoreError> {
    for event in events {
        insert(&mut tx, event).await?;
    }
    tx.commit().await.map_err(store_error)
}

type Row = (i64, DateTime<Utc>, String, String, String, String, String, String);

fn event(row: Row) -> Result<AuditEvent, StoreError> {
    let (id, at, kind, name, role, action, target, detail) = row;
    let bad =
        |what: &str, value: &str| StoreError::Unknown(anyhow::anyhow!("audit_event {id}: unknown {what} {value}"));
    let kind = kind.parse::<ActorKind>().map_err(|_| bad("actor kind", &kind))?;
    let role = role.parse::<Role>().map_err(|_| bad("role", &role))?;
    let action = action.parse::<AuditAction>().map_err(|_| bad("action", &action))?;
    Ok(AuditEvent {
        id,
        event: NewAuditEvent { actor: Actor { kind, name, role }, action, target, detail, at: from_db(at) },
    })
}

#[async_trait]
impl AuditStore for PgStore {
    async fn record(&self, event: &NewAuditEvent) -> Result<(), StoreError> {
        let mut conn = self.pool().acquire().await.map_err(store_error)?;
        insert(&mut conn, event).await
    }

    async fn audit_page(&self, filter: &AuditFilter) -> Result<Vec<AuditEvent>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, at, actor_kind, actor_name, actor_role, action, target, detail FROM audit_event \
             WHERE ($1::text IS NULL OR actor_name = $1) AND ($2::text IS NULL OR action = $2) \
               AND ($3::timestamptz IS NULL OR at >= $3) AND ($4::timestamptz IS NULL OR at < $4) \
               AND ($5::bigint IS NULL OR id < $5) \
             ORDER BY id DESC LIMIT $6",
        )
        .bind(filter.actor.as_deref())
        .bind(filter.action.map(AuditAction::as_str))
        .bind(opt_to_db(filter.since))
        .bind(opt_to_db(filter.until))
        .bind(filter.before)
        .bind(i64::from(filter.limit))
        .fetch_all(self.pool())
        .await
        .map_err(store_error)?;
        rows.into_iter().map(event).collect()
    }
}
