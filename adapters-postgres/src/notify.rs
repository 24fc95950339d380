//! Wake-ups for workers: the store announces on [`TASKS_CHANNEL`] that creates wrote tasks, and a
//! [`TaskListener`] (PostgreSQL `LISTEN` over its own connection) hears it.
//!
//! A notification only says "look now"; it carries nothing and losing one costs at most one poll
//! interval, because workers keep polling. That is why the listener may drop and reconnect freely:
//! [`Wakeup::Reconnected`] tells the caller that notifications may have been missed while it was away,
//! so it should wake the workers once anyway.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use herald_ports::StoreError;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;

use crate::convert::store_error;

/// The `LISTEN`/`NOTIFY` channel on which `create` announces new tasks.
pub const TASKS_CHANNEL: &str = "herald_tasks";

/// How long a process gathers commits before it announces them: every create that wrote tasks within
/// this window shares one `NOTIFY`.
pub const WAKEUP_DEBOUNCE: Duration = Duration::from_millis(2);

/// Announces committed tasks on [`TASKS_CHANNEL`], at most once per [`WAKEUP_DEBOUNCE`] per process.
///
/// The `NOTIFY` is its own statement after the commits it announces, not part of their transactions: a
/// `NOTIFY` in a transaction takes PostgreSQL's global notify lock at commit, which serialises every
/// committing create behind it. Sent after the commit, a wake-up never announces a rolled-back create,
/// and a listener that wakes sees the rows. A lost one (the process dies, the statement fails) costs at
/// most one poll interval, as any lost wake-up.
#[derive(Clone, Debug)]
pub(crate) struct Announcer {
    pool: PgPool,
    pending: Arc<AtomicBool>,
}

impl Announcer {
    pub(crate) fn new(pool: PgPool) -> Announcer {
        Announcer { pool, pending: Arc::new(AtomicBool::new(false)) }
    }

    /// Called after a commit that wrote tasks. The first call of a window schedules the `NOTIFY`; the
    /// flag is cleared before it is sent, so a commit after the clearing schedules the next one and no
    /// commit goes unannounced.
    pub(crate) fn committed_tasks(&self) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pool, pending) = (self.pool.clone(), Arc::clone(&self.pending));
        tokio::spawn(async move {
            tokio::time::sleep(WAKEUP_DEBOUNCE).await;
            pending.store(false, Ordering::Release);
            if let Err(error) = sqlx::query("SELECT pg_notify($1, '')").bind(TASKS_CHANNEL).execute(&pool).await {
                // Workers keep polling; a missed wake-up delays new tasks by at most the poll interval.
                tracing::debug!(%error, "could not announce new tasks; workers will find them by polling");
            }
        });
    }
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
