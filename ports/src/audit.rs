//! The audit port: the append-only record of every human act (issue 43, SPEC §14).
//!
//! An act's event is written by the store method of the act, in the same transaction (a resolution, a
//! test send's reservation, a session's opening or ending), so an act is never without its record and a
//! record never without its act; [`AuditStore::record`] is for acts that are not one transaction (a key
//! rotation). Events are never changed or removed: the PostgreSQL table refuses `UPDATE`, `DELETE` and
//! `TRUNCATE` with a trigger.

use async_trait::async_trait;
use herald_domain::operators::{Actor, AuditAction};
use herald_domain::Timestamp;

use crate::store::StoreError;

/// One event to record: who did what to which target, with a free detail (a note, counts), when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAuditEvent {
    pub actor: Actor,
    pub action: AuditAction,
    /// What the act was on: `task 42`, `user alice on push`, empty for none.
    pub target: String,
    /// What the actor said or what came of it; never a secret.
    pub detail: String,
    pub at: Timestamp,
}

/// A recorded event, with its place in the trail (ascending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    pub id: i64,
    pub event: NewAuditEvent,
}

/// Which events to list, newest first: by actor name, by action, within `[since, until)`, before the
/// event `before` (the previous page's last), at most `limit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<AuditAction>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub before: Option<i64>,
    pub limit: u32,
}

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Records one event on its own (an act that is not one transaction).
    async fn record(&self, event: &NewAuditEvent) -> Result<(), StoreError>;

    /// A page of the trail, newest first.
    async fn audit_page(&self, filter: &AuditFilter) -> Result<Vec<AuditEvent>, StoreError>;
}
