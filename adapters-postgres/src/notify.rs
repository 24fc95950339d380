//! Wake-ups for workers: the store announces on [`TASKS_CHANNEL`] that creates wrote tasks, and a
//! [`TaskListener`] (PostgreSQL `LISTEN` over its own connection) hears it.
//!
//! A notification only says "look now"; it carries nothing and losing one costs at most one poll
//! interval, because workers keep polling. That is why the listener may drop and reconnect freely:
//! [`Wakeup::Reconnected`] tells the caller that notifications may have been missed while it was away,
//! so it should wake the workers once anyway.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use herald_ports::StoreError;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;

use crate::convert::store_error;

/// The `LISTEN`/`NOTIFY` channel on which `create` announces new tasks.
pub const TASKS_CHANNEL: &str = "herald_tasks";

/// The shortest time between two announcements of one process: commits that come while a `NOTIFY` is
/// fresh share the next one.
pub const WAKEUP_DEBOUNCE: Duration = Duration::from_millis(2);

/// Announces committed tasks on [`TASKS_CHANNEL`]: the first commit at once, then at most once per
/// [`WAKEUP_DEBOUNCE`] per process for as long as commits keep coming.
///
/// The `NOTIFY` is its own statement after the commits it announces, not part of their transactions: a
/// `NOTIFY` in a transaction takes PostgreSQL's global notify lock at commit, which serialises every
/// committing create behind it. Sent after the commit, a wake-up never announces a rolled-back create,
/// and a listener that wakes sees the rows. A lost one (the process dies, the statement fails) costs at
/// most one poll interval, as any lost wake-up.
#[derive(Clone)]
pub(crate) struct Announcer {
    notify: Notify,
    state: Arc<Announcing>,
}

/// Sends one `NOTIFY` (a failure is logged and ends there).
type Notify = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

impl fmt::Debug for Announcer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Announcer").field("state", &self.state).finish_non_exhaustive()
    }
}

/// Shared between the committers and the one announcing task.
#[derive(Debug, Default)]
struct Announcing {
    /// A commit has not been covered by a `NOTIFY` sent after it yet.
    unannounced: AtomicBool,
    /// The announcing task runs (it ends after a quiet [`WAKEUP_DEBOUNCE`]).
    running: AtomicBool,
}

impl Announcer {
    pub(crate) fn new(pool: PgPool) -> Announcer {
        Announcer::sending(Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                if let Err(error) = sqlx::query("SELECT pg_notify($1, '')").bind(TASKS_CHANNEL).execute(&pool).await {
                    // Workers keep polling; a missed wake-up delays new tasks by at most the poll interval.
                    tracing::debug!(%error, "could not announce new tasks; workers will find them by polling");
                }
            })
        }))
    }

    fn sending(notify: Notify) -> Announcer {
        Announcer { notify, state: Arc::new(Announcing::default()) }
    }

    /// Called after a commit that wrote tasks: marks it unannounced, and starts the announcing task
    /// unless it runs. The task clears the mark before each `NOTIFY` (which so covers every commit marked
    /// before), waits [`WAKEUP_DEBOUNCE`], and goes round again while a commit was marked meanwhile. It
    /// stops only after checking the mark once more once it has said it stopped, so a commit that found
    /// it running is always announced, by it or by the task that commit starts.
    pub(crate) fn committed_tasks(&self) {
        self.state.unannounced.store(true, Ordering::SeqCst);
        if self.state.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let (notify, state) = (Arc::clone(&self.notify), Arc::clone(&self.state));
        tokio::spawn(async move {
            loop {
                state.unannounced.store(false, Ordering::SeqCst);
                notify().await;
                tokio::time::sleep(WAKEUP_DEBOUNCE).await;
                if state.unannounced.load(Ordering::SeqCst) {
                    continue;
                }
                state.running.store(false, Ordering::SeqCst);
                // A commit marked between the check and the stop saw the task running and started none.
                if !state.unannounced.load(Ordering::SeqCst) || state.running.swap(true, Ordering::SeqCst) {
                    return;
                }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// An announcer counting its `NOTIFY`s.
    fn counting() -> (Announcer, Arc<AtomicUsize>) {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&sent);
        let announcer = Announcer::sending(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        }));
        (announcer, sent)
    }

    /// Lets the spawned announcing task run as far as it can without the clock moving.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_commit_is_announced_at_once_and_only_once() {
        let (announcer, sent) = counting();
        announcer.committed_tasks();
        settle().await;
        assert_eq!(sent.load(Ordering::SeqCst), 1, "announced before any time passed");
        tokio::time::sleep(WAKEUP_DEBOUNCE * 10).await;
        assert_eq!(sent.load(Ordering::SeqCst), 1, "nothing more without another commit");
        assert!(!announcer.state.running.load(Ordering::SeqCst), "the announcing task ended");
    }

    #[tokio::test(start_paused = true)]
    async fn commits_while_a_notify_is_fresh_share_one_sent_when_the_quiet_time_ends() {
        let (announcer, sent) = counting();
        announcer.committed_tasks();
        settle().await;
        for _ in 0..5 {
            announcer.committed_tasks();
        }
        settle().await;
        assert_eq!(sent.load(Ordering::SeqCst), 1, "the later commits wait for the quiet time");
        tokio::time::sleep(WAKEUP_DEBOUNCE).await;
        settle().await;
        assert_eq!(sent.load(Ordering::SeqCst), 2, "one NOTIFY after the quiet time covers all five");
        tokio::time::sleep(WAKEUP_DEBOUNCE * 10).await;
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_commits_is_announced_once_per_quiet_time() {
        let (announcer, sent) = counting();
        // Five commits every millisecond for 20 ms (the timer's resolution): a NOTIFY at the start and
        // after each quiet time of 2 ms.
        for _ in 0..20 {
            for _ in 0..5 {
                announcer.committed_tasks();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(WAKEUP_DEBOUNCE * 10).await;
        let sent = sent.load(Ordering::SeqCst);
        assert!((10..=11).contains(&sent), "{sent} NOTIFYs for 100 commits over 10 quiet times");
    }

    #[tokio::test(start_paused = true)]
    async fn a_commit_after_the_task_stopped_starts_it_again() {
        let (announcer, sent) = counting();
        announcer.committed_tasks();
        tokio::time::sleep(WAKEUP_DEBOUNCE * 10).await;
        announcer.committed_tasks();
        settle().await;
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }
}
