//! One PostgreSQL listener per process, fanning "new tasks" wake-ups out to every worker loop.
//!
//! `create` notifies `herald_tasks` when it commits tasks; the listener turns each notification into a
//! bump of a `watch` channel that every `herald_core::worker::Worker::run` selects on, so an
//! idle worker claims new work at once instead of at its next poll. Wake-ups are an optimisation only:
//! when the listener's connection breaks, the workers keep polling while this task reconnects with the
//! same capped, jittered backoff as a failing worker, and it wakes them once after reconnecting because
//! notifications sent meanwhile are lost.

use herald_postgres::{PgStore, TaskListener, Wakeup};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use herald_core::report::error_chain;
use herald_core::worker::outage_backoff;

/// Opens the listener and starts the fan-out task. When this returns with the listener up, every
/// later committed `create` with tasks wakes the receivers; when the database cannot be reached yet,
/// the task keeps trying in the background (the workers poll meanwhile).
///
/// The task ends on `shutdown` (true, or its sender dropped) or when every receiver is gone.
pub async fn start(store: PgStore, shutdown: watch::Receiver<bool>) -> (watch::Receiver<()>, JoinHandle<()>) {
    let listener = match store.listen().await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(error = %error_chain(&error), "cannot listen for new tasks yet; workers poll meanwhile");
            None
        }
    };
    let (tx, rx) = watch::channel(());
    let task = tokio::spawn(fan_out(store, listener, tx, shutdown));
    (rx, task)
}

async fn fan_out(
    store: PgStore,
    mut listener: Option<TaskListener>,
    tx: watch::Sender<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut failures: u32 = u32::from(listener.is_none());
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(active) = listener.as_mut() else {
            tokio::select! {
                () = tokio::time::sleep(outage_backoff(failures)) => {}
                _ = shutdown.changed() => return,
                () = tx.closed() => return,
            }
            match store.listen().await {
                Ok(reopened) => {
                    tracing::info!(failures, "listening for new tasks again");
                    listener = Some(reopened);
                    failures = 0;
                    // Whatever was notified while nobody listened is lost: look once.
                    tx.send_replace(());
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    if failures.is_power_of_two() {
                        tracing::warn!(error = %error_chain(&error), failures, "cannot listen for new tasks; workers poll meanwhile");
                    }
                }
            }
            continue;
        };
        tokio::select! {
            heard = active.recv() => match heard {
                Ok(Wakeup::Notified) => {
                    tx.send_replace(());
                }
                Ok(Wakeup::Reconnected) => {
                    tracing::info!("task listener reconnected; waking the workers in case a notification was missed");
                    tx.send_replace(());
                }
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "task listener lost its connection; workers poll until it is back");
                    listener = None;
                    failures = 1;
                }
            },
            _ = shutdown.changed() => return,
            () = tx.closed() => return,
        }
    }
}
