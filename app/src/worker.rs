//! The worker cycle (SPEC §3 `run_once`): claim → call → finish.
//!
//! A cycle claims a batch in one short transaction (the store commits every claimed task as `SENDING`
//! under a fresh token before returning), then — with no transaction open and no row locked — decrypts
//! each destination and calls the channel, and finally finishes each attempt with a transition computed
//! by the domain. Workers are stateless: any number of cycles may run per process and any number of
//! processes against one database.
//!
//! [`Worker::run`] is the long-running loop around the cycle: it wakes on new work (a wake channel fed
//! by PostgreSQL `NOTIFY`, see `crate::wakeups`) or after the poll interval, backs off with jitter while
//! the database is unavailable, and stops claiming at once on shutdown while the cycle in flight
//! finishes — its calls end within the channel timeout, so every attempt it started is finished.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use herald_domain::classify::Classified;
use herald_domain::{
    finish, give_back, slot_kept, Action, IdempotencyKey, Jitter, Millis, Observation, TaskId, TaskState,
};
use herald_domain::{Outcome, RetryPolicy};
use herald_ports::store::{ChannelTable, GiveBack};
use herald_ports::{
    ChannelRegistry, ClaimRequest, ClaimedTask, Clock, DestinationCipher, FinishRecord, FinishResult,
    NotificationStore, OutboundMessage, StoreError,
};
use tokio::sync::watch;

use crate::metrics;

/// Pause after a failed cycle: doubled per consecutive failure from 100 ms up to 10 s, with equal
/// jitter so that many workers losing one database do not come back in lockstep. Independent of the
/// poll interval, which may be long when wake-ups carry the load.
const OUTAGE_BACKOFF: RetryPolicy = RetryPolicy { max_attempts: u32::MAX, base: Millis(100), cap: Millis(10_000) };

/// The pause after `failures` consecutive failed cycles (at least 1).
#[must_use]
pub fn outage_backoff(failures: u32) -> Duration {
    Duration::from_millis(OUTAGE_BACKOFF.backoff(failures.max(1), Jitter::from_bits(rand::random())).0)
}

/// An error and its causes on one line (store errors keep the database's message in their source).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How one worker claims.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Recorded as `lease_owner` on claimed tasks.
    pub id: String,
    pub lease: Millis,
    /// Tasks claimed per transaction.
    pub batch: u32,
    /// Pause between polls when there was nothing to do.
    pub idle_poll: Duration,
}

/// What a cycle did with one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The channel accepted.
    Sent(TaskId),
    /// The outcome is unknown; `parked` when no worker will try again.
    Unknown {
        task: TaskId,
        parked: bool,
    },
    /// Refused before acceptance (or "not found" believed); retried later.
    Retry(TaskId),
    Failed(TaskId),
    Suppressed(TaskId),
    /// Settled at claim without a call: parked because it may already have been sent.
    Parked(TaskId),
    /// The egress interval moved it to later; no attempt spent.
    Deferred(TaskId),
    /// The attempt had been superseded; its observation went to `late_outcome`.
    Stale(TaskId),
}

/// One cycle's reports. Empty means there was nothing to do.
pub type Cycle = Vec<Report>;

pub struct Worker {
    store: Arc<dyn NotificationStore>,
    channels: Arc<dyn ChannelRegistry>,
    cipher: Arc<dyn DestinationCipher>,
    clock: Arc<dyn Clock>,
    table: ChannelTable,
    config: WorkerConfig,
    /// Cycles [`Worker::run`] has completed, successful or not.
    cycles: AtomicU64,
    /// Call even when the call could outlive the lease (test-only, to reproduce overlap: P2).
    allow_lease_overlap: bool,
}

impl Worker {
    pub fn new(
        store: Arc<dyn NotificationStore>,
        channels: Arc<dyn ChannelRegistry>,
        cipher: Arc<dyn DestinationCipher>,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
    ) -> Self {
        let table = ChannelTable(
            channels.names().into_iter().filter_map(|name| channels.get(&name).map(|ch| (name, ch.rules()))).collect(),
        );
        Worker { store, channels, cipher, clock, table, config, cycles: AtomicU64::new(0), allow_lease_overlap: false }
    }

    /// Lets this worker call even when the call could outlive its lease. Only for reproducing the
    /// overlap of two holders in tests (SPEC §4, case P2); `herald` refuses such a configuration.
    #[must_use]
    pub fn allowing_lease_overlap(mut self) -> Self {
        self.allow_lease_overlap = true;
        self
    }

    /// Whether a call may still start, `since_clock_read` after the claim read its `now`: the egress
    /// slot it reserved is still good, and the call can end and be finished before the lease does.
    fn may_call(&self, rules: &herald_domain::ChannelRules, since_clock_read: std::time::Duration) -> bool {
        slot_kept(rules.min_interval, rules.egress_guard, since_clock_read)
            && (self.allow_lease_overlap
                || herald_domain::call_fits_lease(self.config.lease, rules.client_timeout, since_clock_read))
    }

    /// How many cycles [`Worker::run`] has completed so far (successful or failed). Lets an observer
    /// tell that the loop has been through a cycle since some event, without timing it.
    #[must_use]
    pub fn cycles_run(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    /// The channel table this worker claims for.
    #[must_use]
    pub fn channel_table(&self) -> &ChannelTable {
        &self.table
    }

    /// One claim → call → finish cycle over up to `batch` tasks.
    ///
    /// # Errors
    /// Store failures; a failure after the claim leaves the task `SENDING` until its lease expires,
    /// when another claim takes over and treats the attempt as uncertain — nothing is lost.
    #[tracing::instrument(skip_all, fields(worker = %self.config.id))]
    pub async fn run_once(&self) -> Result<Cycle, StoreError> {
        // Taken before the clock is read, so the time from the claim's `now` to each call is never
        // under-estimated (the egress guard, SPEC §7).
        let clock_read = Instant::now();
        let now = self.clock.now().await?;
        let request = ClaimRequest {
            worker: self.config.id.clone(),
            now,
            lease: self.config.lease,
            limit: self.config.batch,
            channels: self.table.clone(),
        };
        let batch = self.store.claim(&request).await?;
        let claimed_at = Instant::now();
        for channel in &batch.lease_expired {
            metrics::record_lease_expiry(channel);
        }
        for deferred in &batch.deferred {
            metrics::record_deferral(&deferred.channel);
        }
        if !batch.lease_expired.is_empty() {
            tracing::warn!(
                count = batch.lease_expired.len(),
                "found attempts whose lease expired (their worker stopped or lost the database); they are \
                 LEASE_EXPIRED and the tasks continue as uncertain"
            );
        }
        let mut reports: Cycle = Vec::with_capacity(batch.claimed.len() + batch.settled.len());
        for settled in &batch.settled {
            if let Some(outcome) = settled.outcome {
                metrics::record_attempt(&settled.channel, outcome);
            }
            if settled.parked {
                tracing::warn!(
                    task_id = %settled.task_id,
                    channel = %settled.channel,
                    outcome = settled.outcome.map_or("-", |o| o.as_str()),
                    "task parked at claim: it may already have been sent, and no automatic action is safe; \
                     it waits for a human (herald review list)"
                );
            }
            reports.push(match settled.state {
                TaskState::Suppressed => Report::Suppressed(settled.task_id),
                _ if settled.parked => Report::Parked(settled.task_id),
                _ => Report::Failed(settled.task_id),
            });
        }
        reports.extend(batch.deferred.iter().map(|d| Report::Deferred(d.task_id)));
        let finished =
            join_all(batch.claimed.into_iter().map(|task| self.call_and_finish(task, clock_read, claimed_at))).await;
        for report in finished {
            reports.push(report?);
        }
        Ok(reports)
    }

    /// Runs cycles until nothing is left to do or `max_cycles` have run; returns every report.
    ///
    /// # Errors
    /// The first store failure.
    pub async fn drain(&self, max_cycles: usize) -> Result<Vec<Report>, StoreError> {
        let mut all = Vec::new();
        for _ in 0..max_cycles {
            let cycle = self.run_once().await?;
            if cycle.is_empty() {
                break;
            }
            all.extend(cycle);
        }
        Ok(all)
    }

    /// Loops until `shutdown` turns true (or its sender is gone): stops claiming at once and lets the
    /// cycle in flight finish — a cycle is never cancelled half-way, so an attempt whose channel call
    /// started is finished before this returns (unless the database fails, see [`Worker::run_once`]).
    ///
    /// Between cycles it waits for whichever comes first: a wake-up on `wake`, the poll interval, or
    /// shutdown. After a failed cycle it waits [`outage_backoff`] instead and ignores wake-ups, so a
    /// database outage costs a few log lines per worker and no crash loop.
    pub async fn run(&self, mut shutdown: watch::Receiver<bool>, mut wake: Option<watch::Receiver<()>>) {
        let mut failures: u32 = 0;
        // Consecutive cycles that claimed something but only deferred it or gave it back.
        let mut stalled: u32 = 0;
        tracing::debug!(worker = %self.config.id, "worker loop started");
        while !*shutdown.borrow() {
            let result = self.run_once().await;
            self.cycles.fetch_add(1, Ordering::Relaxed);
            let busy = match result {
                Ok(cycle) => {
                    if failures > 0 {
                        tracing::info!(worker = %self.config.id, failures, "worker cycles succeed again");
                    }
                    failures = 0;
                    if made_progress(&cycle) {
                        stalled = 0;
                        true
                    } else {
                        // Nothing, or only deferrals and give-backs: a task given back is due again at
                        // once, and an immediate new cycle could take it back just as fast — a spin
                        // that sends nothing. Wait, a little longer each time, as when idle.
                        stalled = stalled.saturating_add(u32::from(!cycle.is_empty()));
                        false
                    }
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    metrics::record_cycle_failure(&error);
                    let error = error_chain(&error);
                    // Every failure is counted; the log gets the first and then every power of two.
                    if failures.is_power_of_two() {
                        tracing::warn!(worker = %self.config.id, %error, failures, "worker cycle failed; backing off");
                    } else {
                        tracing::debug!(worker = %self.config.id, %error, failures, "worker cycle failed; backing off");
                    }
                    false
                }
            };
            if busy {
                continue;
            }
            let pause = if failures > 0 {
                outage_backoff(failures)
            } else if stalled > 0 {
                stalled_pause(stalled, self.config.idle_poll)
            } else {
                tracing::trace!(worker = %self.config.id, "idle: waiting for a wake-up, the poll interval or shutdown");
                self.config.idle_poll
            };
            let mut wake_closed = false;
            let woken = async {
                match wake.as_mut() {
                    Some(rx) => wake_closed = rx.changed().await.is_err(),
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = woken, if failures == 0 => {}
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
            if wake_closed {
                // The wake-up source is gone; polling alone carries on.
                wake = None;
            }
        }
        tracing::debug!(worker = %self.config.id, "worker loop stopped");
    }

    #[tracing::instrument(skip_all, fields(task_id = %task.task_id, attempt = task.attempt_no, channel = %task.channel))]
    async fn call_and_finish(
        &self,
        task: ClaimedTask,
        clock_read: Instant,
        claimed_at: Instant,
    ) -> Result<Report, StoreError> {
        let Some(classified) = self.call(&task, clock_read).await else {
            return self.give_back(&task).await;
        };
        let outcome = classified.observation.outcome();
        // The observation is written while the lease lasts, however often the database fails meanwhile:
        // dropped, it would turn an answer the channel gave into a lease expiry — an unknown outcome,
        // parked for a human on a channel with neither key nor query even when the channel said yes.
        let lease_end = clock_read + Duration::from_millis(self.config.lease.0);
        let mut failures: u32 = 0;
        let (record, written) = loop {
            let written = match self.clock.now().await {
                Ok(now) => {
                    let transition =
                        finish(&task.finish, &classified.observation, now, Jitter::from_bits(rand::random()));
                    let record = FinishRecord {
                        task_id: task.task_id,
                        user_id: task.user_id.clone(),
                        token: task.token,
                        observation: classified.observation.clone(),
                        detail: classified.detail.clone(),
                        transition,
                        now,
                    };
                    let written = self.store.finish(&record).await;
                    (Some(record), written)
                }
                Err(error) => (None, Err(error)),
            };
            match written {
                (Some(record), Ok(result)) => break (record, result),
                (_, Err(error)) => {
                    failures += 1;
                    let pause = finish_retry_pause(failures);
                    if Instant::now() + pause >= lease_end {
                        return Err(self.unrecorded(&task, outcome, error));
                    }
                    metrics::record_finish_retry(&task.channel);
                    tracing::warn!(
                        outcome = %outcome,
                        error = %error_chain(&error),
                        failures,
                        "could not store the outcome yet; trying again while the lease lasts"
                    );
                    tokio::time::sleep(pause).await;
                }
                (None, Ok(_)) => unreachable!("a store result always comes with its record"),
            }
        };
        let report = report_for(task.task_id, &record.transition);
        match written {
            FinishResult::Applied => {
                metrics::record_attempt(&task.channel, outcome);
                if record.transition.is_parked() {
                    tracing::warn!(
                        outcome = %outcome,
                        reason = record.transition.reason.unwrap_or("-"),
                        "task parked: the outcome is unknown and no automatic action is safe; it waits for a \
                         human (herald review list)"
                    );
                }
                metrics::record_claim_to_finish(&task.channel, claimed_at.elapsed());
                tracing::debug!(outcome = %outcome, state = %record.transition.state, "attempt finished");
                Ok(report)
            }
            FinishResult::Stale => {
                metrics::record_stale(&task.channel);
                tracing::info!(outcome = %outcome, "attempt superseded; observation kept as late outcome");
                Ok(Report::Stale(task.task_id))
            }
        }
    }

    /// The channel was called but the outcome could not be stored before the lease ended, however often
    /// it was tried: the task stays `SENDING` under this attempt's lease, and the first claim after the
    /// lease records `LEASE_EXPIRED` and continues as uncertain (resend with the same key, query, or
    /// park), so this observation is lost but the task is not.
    fn unrecorded(&self, task: &ClaimedTask, outcome: Outcome, error: StoreError) -> StoreError {
        metrics::record_unrecorded_finish(&task.channel);
        tracing::error!(
            outcome = %outcome,
            error = %error_chain(&error),
            lease_ms = self.config.lease.0,
            "channel called but its outcome could not be stored; the task stays SENDING until its lease \
             expires, then the next claim records LEASE_EXPIRED and treats this attempt as uncertain"
        );
        error
    }

    /// The attempt of a holder that did not call — its egress slot or its lease would not hold — goes
    /// back to the task unspent (SPEC §4, §7).
    async fn give_back(&self, task: &ClaimedTask) -> Result<Report, StoreError> {
        let now = self.clock.now().await?;
        let record = GiveBack {
            task_id: task.task_id,
            user_id: task.user_id.clone(),
            token: task.token,
            transition: give_back(task.finish.prior_uncertain, task.finish.uncertain_since, now),
            now,
        };
        match self.store.give_back(&record).await? {
            FinishResult::Applied => {
                tracing::info!(
                    "claimed too long ago to call safely (egress slot or lease); not called, attempt given back"
                );
                Ok(Report::Deferred(task.task_id))
            }
            FinishResult::Stale => Ok(Report::Stale(task.task_id)),
        }
    }

    /// Calls the channel; never fails — problems before the call are observations too. `None`: not
    /// called because too much has passed since `clock_read` — more than the channel's egress guard (the
    /// claim's egress reservation is only good for that long), or so much that the call could outlive
    /// the lease. The attempt is then given back.
    async fn call(&self, task: &ClaimedTask, clock_read: Instant) -> Option<Classified> {
        let Some(channel) = self.channels.get(&task.channel) else {
            // Only configured channels are claimed; a registry without it is a wiring bug. Nothing was sent.
            return Some(Classified {
                observation: Observation::RetryableReject { retry_after: None },
                detail: "channel not configured in this worker".into(),
            });
        };
        let rules = channel.rules();
        let reference = task.reference.clone();
        if task.action == Action::Query {
            if !self.may_call(&rules, clock_read.elapsed()) {
                return None;
            }
            return Some(channel.query(&reference).await);
        }
        let Some(stored) = task.destination.as_deref() else {
            return Some(Classified { observation: Observation::Rejected, detail: "no destination configured".into() });
        };
        let destination = match self.cipher.decrypt(&task.user_id, &task.channel, stored) {
            Ok(destination) => destination,
            Err(error) => {
                // Not sent. Retryable: loading the missing key fixes it.
                tracing::error!(error = %error, "cannot decrypt destination");
                return Some(Classified {
                    observation: Observation::RetryableReject { retry_after: None },
                    detail: format!("not sent: {error}"),
                });
            }
        };
        let ttl_left = task.expires_at.since(task.finish.attempt_started_at);
        let message = OutboundMessage {
            reference,
            idempotency_key: IdempotencyKey::for_task(&task.reference),
            destination,
            text: channel.outbound_text(&task.body, task.digest_count),
            ttl_seconds: ttl_left.as_millis().div_ceil(1000).max(1),
        };
        if !self.may_call(&rules, clock_read.elapsed()) {
            return None;
        }
        Some(channel.send(&message).await)
    }
}

/// Whether a cycle moved anything forward: a call was made and finished, or a task was settled. A cycle
/// that only deferred tasks or gave attempts back did not, and is not followed at once by the next.
#[must_use]
pub fn made_progress(cycle: &[Report]) -> bool {
    cycle.iter().any(|report| !matches!(report, Report::Deferred(_)))
}

/// The pause after `stalled` consecutive cycles that only deferred or gave back: 10 ms doubling, at most
/// the idle poll interval.
#[must_use]
pub fn stalled_pause(stalled: u32, idle_poll: Duration) -> Duration {
    let exponent = stalled.saturating_sub(1).min(16);
    Duration::from_millis(10u64 << exponent).min(idle_poll)
}

/// The pause before the `failures`-th new try of a finish: 50 ms doubling up to 1 s, with equal jitter.
fn finish_retry_pause(failures: u32) -> Duration {
    const POLICY: RetryPolicy = RetryPolicy { max_attempts: u32::MAX, base: Millis(50), cap: Millis(1_000) };
    Duration::from_millis(POLICY.backoff(failures.max(1), Jitter::from_bits(rand::random())).0)
}

fn report_for(task: TaskId, transition: &herald_domain::Transition) -> Report {
    match transition.state {
        TaskState::Sent => Report::Sent(task),
        TaskState::Unknown => Report::Unknown { task, parked: transition.is_parked() },
        TaskState::Pending | TaskState::Sending => Report::Retry(task),
        TaskState::Failed => Report::Failed(task),
        TaskState::Suppressed => Report::Suppressed(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_domain::classify::Classified;
    use herald_domain::finish::FinishContext;
    use herald_domain::{AttemptToken, Capability, ChannelName, NotificationId, Outcome, Timestamp, UserId};
    use herald_ports::channel::{MockChannel, MockChannelRegistry};
    use herald_ports::cipher::MockDestinationCipher;
    use herald_ports::clock::MockClock;
    use herald_ports::store::{ClaimBatch, MockNotificationStore, Settled};
    use mockall::Sequence;
    use secrecy::SecretString;

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    use crate::test_support::webhook_rules as rules;

    fn claimed(task: i64) -> ClaimedTask {
        ClaimedTask {
            task_id: TaskId(task),
            reference: format!("ref-{task}"),
            notification_id: NotificationId(1),
            user_id: UserId::from("u1"),
            channel: ChannelName::from("push"),
            token: AttemptToken(uuid::Uuid::from_u128(7)),
            attempt_no: 1,
            action: Action::Send,
            finish: FinishContext {
                action: Action::Send,
                prior_uncertain: false,
                uncertain_since: None,
                attempt_started_at: NOW,
                expires_at: NOW + Millis(60_000),
                attempts_used: 1,
                budget: 3,
                capability: Capability::Idempotent,
                retry: rules().retry,
            },
            body: "Order shipped".into(),
            expires_at: NOW + Millis(60_000),
            destination: Some(b"ciphertext".to_vec()),
            digest_count: None,
        }
    }

    fn settled(task: i64, state: TaskState, parked: bool) -> Settled {
        Settled { task_id: TaskId(task), channel: ChannelName::from("push"), outcome: None, state, parked }
    }

    /// Builds a worker whose channel expects `sends` calls, in the order claim → send → finish.
    fn worker(batch: ClaimBatch, sends: usize) -> Worker {
        let mut seq = Sequence::new();
        let mut store = MockNotificationStore::new();
        let mut channel = MockChannel::new();
        channel.expect_rules().returning(rules);
        channel.expect_outbound_text().returning(|body, _| body.to_owned());
        let finishes = batch.claimed.len();
        store.expect_claim().times(1).in_sequence(&mut seq).return_once(move |_| Ok(batch));
        channel.expect_send().times(sends).in_sequence(&mut seq).returning(|message| {
            assert_eq!(message.idempotency_key.as_str(), "ntf-ref-3");
            assert_eq!(message.reference, "ref-3");
            Classified {
                observation: Observation::Accepted { provider_msg_id: Some("p-1".into()) },
                detail: "ok".into(),
            }
        });
        store.expect_finish().times(finishes).in_sequence(&mut seq).returning(|record| {
            assert_eq!(record.transition.state, TaskState::Sent);
            assert_eq!(record.observation.outcome(), Outcome::Accepted);
            Ok(FinishResult::Applied)
        });
        let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
        let mut registry = MockChannelRegistry::new();
        registry.expect_names().returning(|| vec![ChannelName::from("push")]);
        registry.expect_get().returning(move |_| Some(channel.clone()));
        let mut cipher = MockDestinationCipher::new();
        cipher.expect_decrypt().times(sends).returning(|_, _, _| Ok(SecretString::from("dest")));
        let mut clock = MockClock::new();
        clock.expect_now().returning(|| Ok(NOW));
        Worker::new(
            Arc::new(store),
            Arc::new(registry),
            Arc::new(cipher),
            Arc::new(clock),
            WorkerConfig { id: "w1".into(), lease: Millis(60_000), batch: 8, idle_poll: Duration::from_millis(10) },
        )
    }

    #[tokio::test]
    async fn a_call_that_could_outlive_its_lease_is_not_made_and_the_attempt_is_given_back() {
        let mut store = MockNotificationStore::new();
        let batch = ClaimBatch { claimed: vec![claimed(3)], ..ClaimBatch::default() };
        store.expect_claim().times(1).return_once(move |_| Ok(batch));
        store.expect_finish().times(0);
        store.expect_give_back().times(1).returning(|record| {
            assert_eq!(record.transition.state, TaskState::Pending, "nothing was sent");
            Ok(FinishResult::Applied)
        });
        let mut channel = MockChannel::new();
        channel.expect_rules().returning(rules);
        channel.expect_outbound_text().returning(|body, _| body.to_owned());
        channel.expect_send().times(0);
        let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
        let mut registry = MockChannelRegistry::new();
        registry.expect_names().returning(|| vec![ChannelName::from("push")]);
        registry.expect_get().returning(move |_| Some(channel.clone()));
        let mut cipher = MockDestinationCipher::new();
        cipher.expect_decrypt().returning(|_, _, _| Ok(SecretString::from("dest")));
        // A slow clock read (say, a long wait for a pool connection) spends the lease before the call.
        let mut clock = MockClock::new();
        clock.expect_now().returning(|| {
            std::thread::sleep(Duration::from_millis(150));
            Ok(NOW)
        });
        // 5 s client timeout + 1 s finish margin leaves 100 ms of this lease to start the call in.
        let lease = rules().client_timeout + herald_domain::claim::FINISH_MARGIN + Millis(100);
        let worker = Worker::new(
            Arc::new(store),
            Arc::new(registry),
            Arc::new(cipher),
            Arc::new(clock),
            WorkerConfig { id: "w1".into(), lease, batch: 8, idle_poll: Duration::from_millis(10) },
        );
        assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Deferred(TaskId(3))]);
    }

    #[tokio::test]
    async fn channel_is_called_only_after_the_claim_and_before_the_finish() {
        let batch = ClaimBatch { claimed: vec![claimed(3)], ..ClaimBatch::default() };
        let reports = worker(batch, 1).run_once().await.expect("cycle");
        assert_eq!(reports, vec![Report::Sent(TaskId(3))]);
    }

    #[tokio::test]
    async fn suppressed_failed_and_parked_tasks_never_call_the_channel() {
        let batch = ClaimBatch {
            settled: vec![
                settled(4, TaskState::Suppressed, false),
                settled(5, TaskState::Failed, false),
                settled(6, TaskState::Unknown, true),
            ],
            deferred: vec![herald_ports::Deferred { task_id: TaskId(7), channel: ChannelName::from("push") }],
            ..ClaimBatch::default()
        };
        let reports = worker(batch, 0).run_once().await.expect("cycle");
        assert_eq!(
            reports,
            vec![
                Report::Suppressed(TaskId(4)),
                Report::Failed(TaskId(5)),
                Report::Parked(TaskId(6)),
                Report::Deferred(TaskId(7))
            ]
        );
    }

    #[test]
    fn only_deferrals_and_give_backs_are_no_progress() {
        assert!(!made_progress(&[]));
        assert!(!made_progress(&[Report::Deferred(TaskId(1)), Report::Deferred(TaskId(2))]));
        assert!(made_progress(&[Report::Deferred(TaskId(1)), Report::Sent(TaskId(2))]));
        let poll = Duration::from_millis(1_000);
        assert_eq!(stalled_pause(1, poll), Duration::from_millis(10));
        assert_eq!(stalled_pause(3, poll), Duration::from_millis(40));
        assert_eq!(stalled_pause(30, poll), poll, "never longer than the idle poll");
    }

    /// Defect: a worker whose every claim is given back (here: a lease too short for any call, which
    /// configuration refuses but a slow pool can produce) claimed again at once, forever — a spin that
    /// sent nothing. A cycle that only gave back now backs off.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_that_only_gives_back_does_not_spin() {
        let claims = Arc::new(AtomicU64::new(0));
        let mut store = MockNotificationStore::new();
        let counted = Arc::clone(&claims);
        store.expect_claim().returning(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(ClaimBatch { claimed: vec![claimed(3)], ..ClaimBatch::default() })
        });
        store.expect_give_back().returning(|_| Ok(FinishResult::Applied));
        store.expect_finish().times(0);
        let mut channel = MockChannel::new();
        channel.expect_rules().returning(rules);
        channel.expect_outbound_text().returning(|body, _| body.to_owned());
        channel.expect_send().times(0);
        let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
        let mut registry = MockChannelRegistry::new();
        registry.expect_names().returning(|| vec![ChannelName::from("push")]);
        registry.expect_get().returning(move |_| Some(channel.clone()));
        let mut cipher = MockDestinationCipher::new();
        cipher.expect_decrypt().returning(|_, _, _| Ok(SecretString::from("dest")));
        let mut clock = MockClock::new();
        clock.expect_now().returning(|| Ok(NOW));
        let worker = Worker::new(
            Arc::new(store),
            Arc::new(registry),
            Arc::new(cipher),
            Arc::new(clock),
            WorkerConfig { id: "w1".into(), lease: Millis(1), batch: 8, idle_poll: Duration::from_millis(1_000) },
        );
        let (stop, stopped) = watch::channel(false);
        let running = tokio::spawn(async move { worker.run(stopped, None).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.send(true).expect("stop");
        running.await.expect("loop");
        // Backing off 10, 20, 40, 80, 160 ms allows about six claims in 300 ms; a spin makes thousands.
        let claims = claims.load(Ordering::Relaxed);
        assert!((1..=12).contains(&claims), "{claims} claims in 300 ms");
    }

    #[tokio::test]
    async fn nothing_to_claim_reports_nothing() {
        let reports = worker(ClaimBatch::default(), 0).run_once().await.expect("cycle");
        assert!(reports.is_empty());
    }
}
