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
//! * `rows` — the row structs (declared with their `FromRow` by `rows::row!`) and their conversions, and the shared SQL fragments ([`PARKED`]);
//! * `clock` — [`PgClock`]; `notify` — the wake-up `create` sends, and the [`TaskListener`];
//! * `transition` — the two writes the claim and the manual resolution share;
//! * `create`, `claim`, `finish`, `resolve`, `read` — the write paths; `views` — the read models;
//! * `lifecycle` — erasure of a user (SPEC §13);
//! * `status` — the status events' outbox (its events are written by a trigger);
//! * `store` — [`PgStore`] and its implementation of every store role, delegating to the above;
//! * `vault` — [`PgVault`], the user-key vault on a database of its own (uses `store`'s connection);
//! * `prefs` — the `PreferenceStore` implementation; `sessions` — the `SessionStore` implementation (the
//!   console's sessions and sign-in links); `negative` — the test-only unsafe variants.

mod audit;
mod claim;
mod clock;
mod convert;
mod create;
mod create_batch;
mod finish;
mod lifecycle;
mod notify;
mod prefs;
mod read;
mod resolve;
mod rows;
mod sessions;
mod status;
mod store;
mod test_send;
mod transition;
mod vault;
mod views;

#[cfg(feature = "negative-controls")]
pub mod negative;

pub use claim::{claim_text, plan_generation, CLAIM_QUERY, WRITE_DECISIONS_WITH};
pub use clock::PgClock;
pub use finish::FINISH_BATCH_QUERY;
pub use notify::{TaskListener, Wakeup, TASKS_CHANNEL};
pub use rows::PARKED;
pub use store::{create_database_if_missing, database_of, DatabaseReady, PgStore, Planning};
pub use vault::PgVault;
pub use views::{
    ATTEMPTS_OF_TASKS, COMPACT_TASK_TALLY, DECIDED_COUNTS, INBOX_PAGE, NOTIFICATION_BY_EVENT, NOTIFICATION_BY_REF,
    NOTIFICATION_BY_REFERENCE, OUTCOME_BUCKETS, OUTCOME_COUNTS, PARKED_BUCKETS, PARKED_PAGE, TASK_TALLY,
};

/// The embedded migrations (folder `migrations/` at the workspace root), as `sqlx::migrate!` would embed
/// them: version and description from each file's name (`0001_core.sql`: 1, "core"), the text verbatim,
/// so the checksums recorded in `_sqlx_migrations` are the same. `build.rs` lists the files; sqlx's
/// proc-macro crate is not built (see `rows::row!`).
pub static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> = std::sync::LazyLock::new(|| {
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    use std::borrow::Cow;
    let migrations = EMBEDDED_MIGRATIONS
        .iter()
        .map(|&(version, description, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(description),
                MigrationType::Simple,
                Cow::Borrowed(sql),
                sql.starts_with("-- no-transaction"),
            )
        })
        .collect::<Vec<_>>();
    Migrator { migrations: Cow::Owned(migrations), ..Migrator::DEFAULT }
});

/// `(version, description, SQL)` of every file in `migrations/`, by version (written by `build.rs`).
const EMBEDDED_MIGRATIONS: &[(i64, &str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

#[cfg(test)]
mod tests {
    /// The embedded list is the folder as sqlx itself reads it (what `sqlx::migrate!` embedded before):
    /// the same versions, descriptions, kinds and checksums, so a database migrated by an earlier Herald
    /// is migrated for this one.
    #[tokio::test]
    async fn the_embedded_migrations_are_the_folder_as_sqlx_reads_it() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        let read = sqlx::migrate::Migrator::new(folder).await.expect("sqlx reads the folder");
        let shape = |m: &sqlx::migrate::Migration| {
            (m.version, m.description.to_string(), m.migration_type, m.checksum.to_vec(), m.no_tx)
        };
        let ours: Vec<_> = super::MIGRATOR.iter().map(shape).collect();
        let theirs: Vec<_> = read.iter().map(shape).collect();
        assert!(ours.len() >= 16, "{} migrations", ours.len());
        assert_eq!(ours, theirs);
        assert_eq!(ours[0].1, "core");
    }
}
