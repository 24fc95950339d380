//! Metric names and recording helpers, on the `metrics` facade: the core records, whoever embeds it
//! chooses the recorder (`herald` installs a Prometheus exporter; without one, recording is a no-op).
//! Counters and the latency histogram are recorded by the worker as things happen; the task gauges are
//! set from a store query ([`TaskGauges`]), refreshed periodically by the process, because only the
//! database knows the states of tasks other processes hold.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use herald_domain::{ChannelName, Outcome};
use herald_ports::{ReadModels, StoreError};

/// Counter: channel calls and claim-time settlements, by `channel` and `outcome` (the attempt row's
/// outcome; a call whose finish could not be written is not counted here but in
/// [`UNRECORDED_FINISHES_TOTAL`]).
pub const ATTEMPTS_TOTAL: &str = "herald_attempts_total";
/// Counter: submissions, by `result` = `created` | `duplicate`.
pub const SUBMISSIONS_TOTAL: &str = "herald_submissions_total";
/// Gauge: tasks by `channel` and `state` (set from a store query); parked tasks count as `UNKNOWN`.
pub const TASKS: &str = "herald_tasks";
/// Gauge: parked tasks waiting for a human, by `channel`.
pub const PARKED_TASKS: &str = "herald_parked_tasks";
/// Counter: holders found with an expired lease by a claim (their attempt became `LEASE_EXPIRED`).
pub const LEASE_EXPIRIES_TOTAL: &str = "herald_lease_expiries_total";
/// Counter: finishes refused because a newer claim held the task (`Stale`), by `channel`.
pub const STALE_FINISHES_TOTAL: &str = "herald_stale_finishes_total";
/// Counter: calls the channel accepted after their attempt had been superseded, on a channel without an
/// idempotency key, by `channel`: the message may have reached the user twice (the takeover's send and
/// this one). Each is also the attempt's `late_outcome` and a warning in the worker's log.
pub const LATE_ACCEPTANCES_TOTAL: &str = "herald_late_acceptances_total";
/// Counter: calls postponed by a channel's egress interval (no attempt spent).
pub const DEFERRALS_TOTAL: &str = "herald_deferrals_total";
/// Counter: channel calls whose outcome could not be written (the database failed after the call), by
/// `channel`. Each leaves its task `SENDING` until the lease expires and a later claim takes over.
pub const UNRECORDED_FINISHES_TOTAL: &str = "herald_unrecorded_finishes_total";
/// Counter: finish writes tried again after the database failed, by `channel` (they are retried while
/// the attempt's lease lasts).
pub const FINISH_RETRIES_TOTAL: &str = "herald_finish_retries_total";
/// Histogram (seconds): from the claim's commit to the finish's, by `channel`.
pub const CLAIM_TO_FINISH_SECONDS: &str = "herald_claim_to_finish_seconds";
/// Counter: worker cycles that failed, by `error` = `unavailable` | `unknown`.
pub const CYCLE_FAILURES_TOTAL: &str = "herald_worker_cycle_failures_total";

/// Bucket bounds of [`CLAIM_TO_FINISH_SECONDS`]: channel timeouts are hundreds of milliseconds to a few
/// seconds, leases up to minutes.
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Describes every metric to the installed recorder (its help text and unit).
pub fn describe() {
    metrics::describe_counter!(ATTEMPTS_TOTAL, "Attempts by channel and observed outcome");
    metrics::describe_counter!(SUBMISSIONS_TOTAL, "Notifications submitted, created or duplicate");
    metrics::describe_gauge!(TASKS, "Delivery tasks by channel and state");
    metrics::describe_gauge!(PARKED_TASKS, "Tasks whose outcome is unknown, waiting for a human");
    metrics::describe_counter!(LEASE_EXPIRIES_TOTAL, "Attempts superseded because their lease expired");
    metrics::describe_counter!(STALE_FINISHES_TOTAL, "Finishes refused because a newer attempt held the task");
    metrics::describe_counter!(
        LATE_ACCEPTANCES_TOTAL,
        "Calls accepted after their attempt was superseded, on channels without an idempotency key: possible duplicates"
    );
    metrics::describe_counter!(DEFERRALS_TOTAL, "Calls postponed by a channel's egress interval");
    metrics::describe_counter!(
        UNRECORDED_FINISHES_TOTAL,
        "Channel calls whose outcome could not be stored; recovered at lease expiry"
    );
    metrics::describe_histogram!(
        CLAIM_TO_FINISH_SECONDS,
        metrics::Unit::Seconds,
        "Time from claim commit to finish commit"
    );
    metrics::describe_counter!(CYCLE_FAILURES_TOTAL, "Worker cycles that failed and backed off");
    metrics::describe_counter!(FINISH_RETRIES_TOTAL, "Finish writes tried again while the lease lasts");
}

/// Counts one attempt's outcome (for the worker).
pub fn record_attempt(channel: &ChannelName, outcome: Outcome) {
    metrics::counter!(ATTEMPTS_TOTAL, "channel" => channel.to_string(), "outcome" => outcome.as_str()).increment(1);
}

pub fn record_submission(created: bool) {
    metrics::counter!(SUBMISSIONS_TOTAL, "result" => if created { "created" } else { "duplicate" }).increment(1);
}

pub fn record_lease_expiry(channel: &ChannelName) {
    metrics::counter!(LEASE_EXPIRIES_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_deferral(channel: &ChannelName) {
    metrics::counter!(DEFERRALS_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_stale(channel: &ChannelName) {
    metrics::counter!(STALE_FINISHES_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_late_acceptance(channel: &ChannelName) {
    metrics::counter!(LATE_ACCEPTANCES_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_unrecorded_finish(channel: &ChannelName) {
    metrics::counter!(UNRECORDED_FINISHES_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_finish_retry(channel: &ChannelName) {
    metrics::counter!(FINISH_RETRIES_TOTAL, "channel" => channel.to_string()).increment(1);
}

pub fn record_claim_to_finish(channel: &ChannelName, elapsed: Duration) {
    metrics::histogram!(CLAIM_TO_FINISH_SECONDS, "channel" => channel.to_string()).record(elapsed.as_secs_f64());
}

pub fn record_cycle_failure(error: &StoreError) {
    let kind = match error {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Unknown(_) => "unknown",
        StoreError::UserErased => "user_erased",
    };
    metrics::counter!(CYCLE_FAILURES_TOTAL, "error" => kind).increment(1);
}

/// The task gauges, set from [`ReadModels::task_counts`]. Remembers which label sets it has set
/// so that a state that emptied reads 0 instead of keeping its last value.
#[derive(Debug, Default)]
pub struct TaskGauges {
    seen_tasks: Mutex<BTreeSet<(String, &'static str)>>,
    seen_parked: Mutex<BTreeSet<String>>,
}

impl TaskGauges {
    /// Queries the store once and sets [`TASKS`] and [`PARKED_TASKS`].
    ///
    /// # Errors
    /// The store failure; the gauges keep their previous values.
    pub async fn refresh(&self, store: &dyn ReadModels) -> Result<(), StoreError> {
        let counts = store.task_counts().await?;
        let mut tasks: std::collections::BTreeMap<(String, &'static str), u64> = Default::default();
        let mut parked: std::collections::BTreeMap<String, u64> = Default::default();
        for row in &counts {
            *tasks.entry((row.channel.to_string(), row.state.as_str())).or_default() += row.count;
            if row.parked {
                *parked.entry(row.channel.to_string()).or_default() += row.count;
            }
            // Every channel with tasks shows a parked gauge, 0 when nothing waits.
            parked.entry(row.channel.to_string()).or_default();
        }
        {
            let mut seen = self.seen_tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for gone in seen.iter().filter(|key| !tasks.contains_key(*key)) {
                metrics::gauge!(TASKS, "channel" => gone.0.clone(), "state" => gone.1).set(0.0);
            }
            for ((channel, state), n) in &tasks {
                metrics::gauge!(TASKS, "channel" => channel.clone(), "state" => *state).set(*n as f64);
                seen.insert((channel.clone(), state));
            }
        }
        let mut seen = self.seen_parked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for gone in seen.iter().filter(|key| !parked.contains_key(*key)) {
            metrics::gauge!(PARKED_TASKS, "channel" => gone.clone()).set(0.0);
        }
        for (channel, n) in &parked {
            metrics::gauge!(PARKED_TASKS, "channel" => channel.clone()).set(*n as f64);
            seen.insert(channel.clone());
        }
        Ok(())
    }
}
