//! The process's metrics: the Prometheus exporter `herald` installs for the core's metrics
//! (`herald_core::metrics`), and the periodic refresh of the task gauges.
//!
//! The recorder is installed once per process ([`install`]); `/metrics` renders its handle. Recording
//! before installation (in tests, say) is a no-op.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_core::metrics::{TaskGauges, CLAIM_TO_FINISH_SECONDS, LATENCY_BUCKETS};
use herald_ports::ReadModels;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Installs the process-wide Prometheus recorder, or returns the handle of the one this function
/// installed before (several servers or tests in one process share it).
///
/// # Errors
/// When a different recorder is installed already.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let mut installed = HANDLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(CLAIM_TO_FINISH_SECONDS.into()), &LATENCY_BUCKETS)?
        .install_recorder()?;
    herald_core::metrics::describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// Refreshes the task gauges (when `store` is given) and runs the exporter's upkeep every `every` until
/// `shutdown` turns true. A failed refresh is logged and retried at the next tick; it never stops the
/// process.
pub async fn refresh_every(
    store: Option<Arc<dyn ReadModels>>,
    handle: PrometheusHandle,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let gauges = TaskGauges::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !*shutdown.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        if let Some(store) = &store {
            if let Err(error) = gauges.refresh(&**store).await {
                tracing::warn!(error = %error, "cannot refresh the task gauges; keeping the last values");
            }
        }
        handle.run_upkeep();
    }
}
