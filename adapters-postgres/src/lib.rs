//! Herald's PostgreSQL adapter.
//!
//! [`PgStore`] implements the store ports with sqlx and bound parameters only. The domain decides and
//! SQL stores the decision: `claim` runs `herald_domain::decide_claim` on each row it locked inside the
//! claim transaction; `finish` writes a transition the worker computed, fenced by state and token.
//! Connection trouble maps to [`StoreError::Unavailable`](herald_ports::StoreError::Unavailable), so
//! workers back off instead of crashing; no sqlx type crosses a port.
//!
//! One module per path; each uses only modules listed before it:
//!
//! * `convert` — domain ↔ database values, error classification;
//! * `rows` — the `FromRow` structs and their conversions, and the shared SQL fragments ([`PARKED`]);
//! * `clock` — [`PgClock`]; `notify` — the wake-up `create` sends, and the [`TaskListener`];
//! * `transition` — the two writes the claim and the manual resolution share;
//! * `create`, `claim`, `finish`, `resolve`, `read` — the write paths; `views` — the read models;
//! * `store` — [`PgStore`] and its implementation of every store role, delegating to the above;
//! * `prefs` — the `PreferenceStore` implementation; `sessions` — the `SessionStore` implementation (the
//!   console's sessions and sign-in links); `negative` — the test-only unsafe variants.

mod claim;
mod clock;
mod convert;
mod create;
mod create_batch;
mod finish;
mod notify;
mod prefs;
mod read;
mod resolve;
mod rows;
mod sessions;
mod store;
mod test_send;
mod transition;
mod views;

#[cfg(feature = "negative-controls")]
pub mod negative;

pub use claim::{plan_generation, CLAIM_QUERY};
pub use clock::PgClock;
pub use finish::FINISH_BATCH_QUERY;
pub use notify::{TaskListener, Wakeup, TASKS_CHANNEL};
pub use rows::PARKED;
pub use store::{create_database_if_missing, database_of, DatabaseReady, PgStore, Planning};
pub use views::{
    ATTEMPTS_OF_TASKS, COMPACT_TASK_TALLY, INBOX_PAGE, NOTIFICATION_BY_EVENT, NOTIFICATION_BY_REF,
    NOTIFICATION_BY_REFERENCE, OUTCOME_COUNTS, PARKED_PAGE, TASK_TALLY,
};

/// The embedded migrations (folder `migrations/` at the workspace root).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");
