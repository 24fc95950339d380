//! Retention and the boundaries after an erasure (SPEC §13), run by the workers: [`purge_once`] takes the
//! purge's lease (one process at a time) and asks the store to remove, in bounded batches, what the
//! windows of [`RetentionPolicy`] say is due at the clock's `now`. Time comes from the clock port, so tests
//! move it past each boundary.

use std::time::Duration;

use herald_domain::{Millis, Timestamp};
use herald_ports::{PurgeCutoffs, PurgeReport, StoreError};

use crate::services::Services;

const DAY: u64 = 86_400_000;

/// The windows (CONCEPTS §13 argues the defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// After an erasure, the user's content — bodies, inbox — is removed (default 24 h).
    pub content_after_erasure: Millis,
    /// After an erasure, the delivery records — notifications, tasks, attempts with provider ids and
    /// error texts — are removed (default 90 d).
    pub records_after_erasure: Millis,
    /// After an erasure, its record no longer names the user (default 180 d).
    pub tombstone_after_erasure: Millis,
    /// Every user's finished notifications older than this are removed with their tasks, attempts and
    /// inbox items (default 90 d).
    pub finished_after: Millis,
    /// Status events delivered longer ago than this are removed (default 7 d); parked ones stay until an
    /// operator handles them.
    pub status_events_after: Millis,
    /// Rows per statement.
    pub batch: u32,
    /// How often a process tries to purge.
    pub interval: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            content_after_erasure: Millis(DAY),
            records_after_erasure: Millis(90 * DAY),
            tombstone_after_erasure: Millis(180 * DAY),
            finished_after: Millis(90 * DAY),
            status_events_after: Millis(7 * DAY),
            batch: 1000,
            interval: Duration::from_secs(60),
        }
    }
}

impl RetentionPolicy {
    /// The instants before which each kind of data is due at `now`.
    #[must_use]
    pub fn cutoffs(&self, now: Timestamp) -> PurgeCutoffs {
        PurgeCutoffs {
            finished_before: now - self.finished_after,
            content_before: now - self.content_after_erasure,
            records_before: now - self.records_after_erasure,
            tombstone_before: now - self.tombstone_after_erasure,
            status_events_before: now - self.status_events_after,
            batch: self.batch.max(1),
            now,
        }
    }
}

/// The purge's lease row.
pub const PURGE_JOB: &str = "purge";

/// One purge run as `holder`: `None` when another process holds the purge's lease. The holder renews the
/// lease at each of its runs, for three intervals (at least 10 s): a holder that dies — a killed worker —
/// leaves retention to another process within three intervals. (With ten minutes, as until 2026-12-08, the
/// soak's first worker kill stopped every purge of its run: a killed holder's lease outlived the run.) A
/// run longer than its lease may meet a second process purging: each batch locks what it removes with
/// `SKIP LOCKED` and a removal is idempotent, so that costs work twice, never a wrong row.
///
/// # Errors
/// Store failures.
pub async fn purge_once(
    services: &Services,
    policy: &RetentionPolicy,
    holder: &str,
) -> Result<Option<PurgeReport>, StoreError> {
    let now = services.clock.now().await?;
    let lease = lease_for(policy);
    if !services.lifecycle.take_lease(PURGE_JOB, holder, now, now + lease).await? {
        return Ok(None);
    }
    let report = services.lifecycle.purge(&policy.cutoffs(now)).await?;
    if report != PurgeReport::default() {
        tracing::info!(
            finished = report.finished_notifications,
            content = report.content_boundaries,
            records = report.records_boundaries,
            tombstones = report.tombstones,
            status_events = report.status_events,
            "purge"
        );
    }
    Ok(Some(report))
}

/// How long a purge holder keeps the lease after taking or renewing it.
#[must_use]
pub fn lease_for(policy: &RetentionPolicy) -> Millis {
    Millis(u64::try_from(policy.interval.as_millis()).unwrap_or(u64::MAX).saturating_mul(3).max(10_000))
}

/// Runs [`purge_once`] every `policy.interval` until `stop` resolves; failures are logged and retried at
/// the next interval.
pub async fn run_purge(
    services: Services,
    policy: RetentionPolicy,
    holder: String,
    stop: impl std::future::Future<Output = ()> + Send,
) {
    tokio::pin!(stop);
    loop {
        if let Err(error) = purge_once(&services, &policy, &holder).await {
            tracing::warn!(error = %crate::report::error_chain(&error), "purge failed; retried at the next interval");
        }
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(policy.interval) => {}
        }
    }
}
