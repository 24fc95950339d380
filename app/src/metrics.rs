//! Metric names and recording helpers, on the `metrics` facade with a Prometheus exporter.
//!
//! The recorder is installed once per process ([`install`]); `/metrics` renders its handle. Recording
//! before installation (in tests, say) is a no-op.

use herald_domain::{ChannelName, Outcome};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Counter: channel calls and claim-time settlements, by `channel` and `outcome`.
pub const ATTEMPTS_TOTAL: &str = "herald_attempts_total";
/// Counter: submissions, by `result` = `created` | `duplicate`.
pub const SUBMISSIONS_TOTAL: &str = "herald_submissions_total";
/// Gauge: tasks by `state` (set from a store query).
pub const TASKS: &str = "herald_tasks";
/// Gauge: parked tasks waiting for a human.
pub const PARKED_TASKS: &str = "herald_parked_tasks";

/// Installs the process-wide Prometheus recorder.
///
/// # Errors
/// When a recorder is installed already.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    metrics::describe_counter!(ATTEMPTS_TOTAL, "Attempts by channel and observed outcome");
    metrics::describe_counter!(SUBMISSIONS_TOTAL, "Notifications submitted, created or duplicate");
    metrics::describe_gauge!(TASKS, "Delivery tasks by state");
    metrics::describe_gauge!(PARKED_TASKS, "Tasks whose outcome is unknown, waiting for a human");
    Ok(handle)
}

/// Counts one attempt's outcome (for the worker).
pub fn record_attempt(channel: &ChannelName, outcome: Outcome) {
    metrics::counter!(ATTEMPTS_TOTAL, "channel" => channel.to_string(), "outcome" => outcome.as_str()).increment(1);
}

pub(crate) fn record_submission(created: bool) {
    metrics::counter!(SUBMISSIONS_TOTAL, "result" => if created { "created" } else { "duplicate" }).increment(1);
}
