//! Herald's PostgreSQL adapter.
//!
//! [`PgStore`] implements the store ports with sqlx and bound parameters only. The domain decides and
//! SQL stores the decision: `claim` runs `herald_domain::decide_claim` on each row it locked inside the
//! claim transaction; `finish` writes a transition the worker computed, fenced by state and token.
//! Connection trouble maps to [`StoreError::Unavailable`](herald_ports::StoreError::Unavailable), so
//! workers back off instead of crashing; no sqlx type crosses a port.

mod clock;
mod convert;
mod notify;
mod prefs;
mod store;
mod views;

#[cfg(feature = "negative-controls")]
pub mod negative;

pub use clock::PgClock;
pub use notify::{TaskListener, Wakeup, TASKS_CHANNEL};
pub use store::PgStore;
pub use views::ATTEMPTS_OF_TASKS;

/// The embedded migrations (folder `migrations/` at the workspace root).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");
