//! Wake-ups for workers: `create` notifies [`TASKS_CHANNEL`] when it wrote tasks, and a
//! [`TaskListener`] (PostgreSQL `LISTEN` over its own connection) hears it.
//!
//! A notification only says "look now"; it carries nothing and losing one costs at most one poll
//! interval, because workers keep polling. That is why the listener may drop and reconnect freely:
//! [`Wakeup::Reconnected`] tells the caller that notifications may have been missed while it was away,
//! so it should wake the workers once anyway.

use std::time::Duration;

use herald_ports::StoreError;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

use crate::convert::store_error;

/// The `LISTEN`/`NOTIFY` channel on which `create` announces new tasks.
pub const TASKS_CHANNEL: &str = "herald_tasks";

/// Queues a notification in the caller's transaction; PostgreSQL delivers it at commit (and folds
/// identical notifications of one transaction into one).
pub(crate) async fn notify_new_tasks(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, '')").bind(TASKS_CHANNEL).execute(&mut *conn).await.map_err(store_error)?;
    Ok(())
}

/// What a listener heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// `create` committed new tasks.
    Notified,
    /// The connection was lost and has been re-established; notifications sent meanwhile are gone.
    Reconnected,
}

/// A `LISTEN herald_tasks` session on a connection of its own (not one of the store's pool, which it
/// would hold forever).
pub struct TaskListener {
    listener: PgListener,
}

impl std::fmt::Debug for TaskListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskListener").finish_non_exhaustive()
    }
}

impl TaskListener {
    /// Opens a listener to the database of `pool` ([`PgStore::listen`](crate::PgStore::listen)); when this returns, every later
    /// committed `create` with tasks is heard.
    pub(crate) async fn open(pool: &PgPool) -> Result<TaskListener, StoreError> {
        let options = (*pool.connect_options()).clone();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await.map_err(store_error)?;
        // The pool is private to this listener; nobody closes it but the drop.
        listener.ignore_pool_close_event(true);
        listener.listen(TASKS_CHANNEL).await.map_err(store_error)?;
        Ok(TaskListener { listener })
    }

    /// Waits for the next wake-up. A lost connection is re-established once here (reported as
    /// [`Wakeup::Reconnected`]).
    ///
    /// # Errors
    /// `Unavailable` when the connection broke and could not be re-established; the caller should drop
    /// this listener, wait, and [`PgStore::listen`](crate::PgStore::listen) again.
    pub async fn recv(&mut self) -> Result<Wakeup, StoreError> {
        match self.listener.try_recv().await.map_err(store_error)? {
            Some(_) => Ok(Wakeup::Notified),
            None => Ok(Wakeup::Reconnected),
        }
    }
}
