//! The worker cycle (SPEC §3 `run_once`): claim → call → finish.
//!
//! A cycle claims a batch in one short transaction (the store commits every claimed task as `SENDING`
//! under a fresh token before returning), then — with no transaction open and no row locked — decrypts
//! each destination and calls the channel, and finally finishes each attempt with a transition computed
//! by the domain. Workers are stateless: any number of cycles may run per process and any number of
//! processes against one database.
//!
//! [`Worker::run`] is the long-running loop around the cycle: it wakes on new work (a wake channel fed
//! by PostgreSQL `NOTIFY`, see `herald-app`'s `wakeups`) or after the poll interval, backs off with jitter while
//! the database is unavailable, and stops claiming at once on shutdown while the cycle in flight
//! finishes — its calls end within the channel timeout, so every attempt it started is finished.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use herald_domain::classify::Classified;
use herald_domain::{give_back, slot_kept, Action, IdempotencyKey, Jitter, Millis, Observation, TaskId, TaskState};
use herald_domain::{Outcome, RetryPolicy, SlotWait, Timestamp, UserId};
use herald_ports::store::{ChannelTable, GiveBack};
use herald_ports::{
    ChannelRegistry, ClaimRequest, ClaimedTask, Clock, DeliveryStore, DestinationCipher, FinishResult, OutboundMessage,
    StoreError,
};
use tokio::sync::watch;

use crate::finisher::{Finisher, PendingFinish};
use crate::metrics;
use crate::report::error_chain;
use crate::user_keys::{open_destination, DataKey, UserKeys};

/// Pause after a failed cycle: doubled per consecutive failure from 100 ms up to 10 s, with equal
/// jitter so that many workers losing one database do not come back in lockstep. Independent of the
/// poll interval, which may be long when wake-ups carry the load.
const OUTAGE_BACKOFF: RetryPolicy = RetryPolicy { max_attempts: u32::MAX, base: Millis(100), cap: Millis(10_000) };

/// The pause after `failures` consecutive failed cycles (at least 1).
#[must_use]
pub fn outage_backoff(failures: u32) -> Duration {
    Duration::from_millis(OUTAGE_BACKOFF.backoff(failures.max(1), Jitter::from_bits(rand::random())).0)
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
    store: Arc<dyn DeliveryStore>,
    channels: Arc<dyn ChannelRegistry>,
    cipher: Arc<dyn DestinationCipher>,
    clock: Arc<dyn Clock>,
    table: ChannelTable,
    config: WorkerConfig,
    /// Cycles [`Worker::run`] has completed, successful or not.
    cycles: AtomicU64,
    /// Call even when the call could outlive the lease (test-only, to reproduce overlap: P2).
    allow_lease_overlap: bool,
    /// Writes the observations of this worker's calls, batched.
    finisher: Finisher,
    /// The users' data keys, when destinations may be sealed under them: read once per claimed batch.
    user_keys: Option<UserKeys>,
}

/// What one claim handed to this worker.
struct Claim {
    /// Settled at the claim (no call) and deferred.
    reports: Cycle,
    /// To call now.
    tasks: Vec<ClaimedTask>,
    /// Taken before the claim's clock read (the egress guard and the lease are measured from here).
    clock_read: Instant,
    /// The claim's `now`, and the instant its reading came back: the shared clock showed at least `now`
    /// then, so `clock_answered + (t − now)` is an instant at which it shows at least `t`.
    now: Timestamp,
    clock_answered: Instant,
    claimed_at: Instant,
    /// Whether the claim took as many tasks as it asked for: there may be more.
    full: bool,
    /// The earliest egress slot of a rate-limited channel with tasks due that the claim found taken.
    next_slot: Option<Timestamp>,
    /// The data keys of the users whose destinations in this batch are sealed under one.
    keys: Arc<HashMap<UserId, DataKey>>,
}

impl Claim {
    /// The instant of this process's monotonic clock by which the shared clock shows at least `at`.
    fn instant_of(&self, at: Timestamp) -> Instant {
        self.clock_answered + Duration::from_millis(at.since(self.now).0)
    }
}

impl Worker {
    pub fn new(
        store: Arc<dyn DeliveryStore>,
        channels: Arc<dyn ChannelRegistry>,
        cipher: Arc<dyn DestinationCipher>,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
    ) -> Self {
        let table = ChannelTable(
            channels.names().into_iter().filter_map(|name| channels.get(&name).map(|ch| (name, ch.rules()))).collect(),
        );
        let finisher = Finisher::new(Arc::clone(&store), Arc::clone(&clock));
        Worker {
            store,
            channels,
            cipher,
            clock,
            table,
            config,
            cycles: AtomicU64::new(0),
            allow_lease_overlap: false,
            finisher,
            user_keys: None,
        }
    }

    /// With the users' data keys: the destinations sealed under them are opened with the keys of a
    /// claimed batch's users, read from the vault in one round trip per batch.
    #[must_use]
    pub fn with_user_keys(mut self, keys: Option<UserKeys>) -> Self {
        self.user_keys = keys;
        self
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
        let claim = self.claim(self.config.batch).await?;
        let mut reports = claim.reports;
        let finished = join_all(
            claim
                .tasks
                .into_iter()
                .map(|task| self.call_and_finish(task, claim.clock_read, claim.claimed_at, Arc::clone(&claim.keys))),
        )
        .await;
        for report in finished {
            reports.push(report?);
        }
        Ok(reports)
    }

    /// Claims up to `limit` tasks in one short transaction; reports what the claim settled or deferred
    /// and hands back the tasks to call.
    async fn claim(&self, limit: u32) -> Result<Claim, StoreError> {
        // Taken before the clock is read, so the time from the claim's `now` to each call is never
        // under-estimated (the egress guard, SPEC §7).
        let clock_read = Instant::now();
        let now = self.clock.now().await?;
        let clock_answered = Instant::now();
        let request = ClaimRequest {
            worker: self.config.id.clone(),
            now,
            lease: self.config.lease,
            limit,
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
        let taken = batch.claimed.len() + batch.settled.len() + batch.deferred.len();
        let mut reports: Cycle = Vec::with_capacity(batch.settled.len() + batch.deferred.len());
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
                // An erased user's uncertain task is closed UNKNOWN: suppressed too, never "failed".
                _ if settled.outcome == Some(herald_domain::Outcome::UserErased) => Report::Suppressed(settled.task_id),
                _ if settled.parked => Report::Parked(settled.task_id),
                _ => Report::Failed(settled.task_id),
            });
        }
        reports.extend(batch.deferred.iter().map(|d| Report::Deferred(d.task_id)));
        let full = taken >= usize::try_from(limit).unwrap_or(usize::MAX);
        let keys = Arc::new(self.batch_keys(&batch.claimed).await);
        Ok(Claim {
            reports,
            tasks: batch.claimed,
            clock_read,
            now,
            clock_answered,
            claimed_at,
            full,
            next_slot: batch.next_slot,
            keys,
        })
    }

    /// The data keys of the users of `tasks` whose destination is sealed under one, in one vault round
    /// trip (none when no destination needs one). A vault that fails leaves them out: those calls are
    /// not made (a retryable refusal, nothing sent), never an uncertain attempt.
    async fn batch_keys(&self, tasks: &[ClaimedTask]) -> HashMap<UserId, DataKey> {
        let Some(keys) = &self.user_keys else { return HashMap::new() };
        let mut users: Vec<UserId> = tasks
            .iter()
            .filter(|t| {
                t.action == Action::Send && t.destination.as_deref().is_some_and(DataKey::is_sealed_under_user_key)
            })
            .map(|t| t.user_id.clone())
            .collect();
        if users.is_empty() {
            return HashMap::new();
        }
        users.sort();
        users.dedup();
        match keys.existing_keys(&users).await {
            Ok(found) => found,
            Err(error) => {
                tracing::error!(error = %error, "cannot read the users' data keys; their destinations are not called");
                HashMap::new()
            }
        }
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

    /// [`Worker::run_pipelined`] with at most `batch` calls in flight.
    pub async fn run(&self, shutdown: watch::Receiver<bool>, wake: Option<watch::Receiver<()>>) {
        self.run_pipelined(self.config.batch as usize, shutdown, wake).await;
    }

    /// Loops until `shutdown` turns true (or its sender is gone), keeping up to `in_flight` calls going:
    /// it claims a batch (up to `batch` tasks) whenever a batch fits in the free slots — or, with
    /// nothing in flight, whatever fits — and starts each claimed call at once, while earlier calls are
    /// still out. On shutdown it stops claiming at once and lets every call in flight finish: a call is
    /// never cancelled half-way, so an attempt whose channel call started is finished before this
    /// returns (unless the database fails, see [`Worker::run_once`]).
    ///
    /// After a claim that came back short (the queue is dry) it waits for whichever comes first: a
    /// wake-up on `wake`, the poll interval, the next free egress slot of a rate-limited channel with
    /// tasks due (when the claim found one taken: [`SlotWait`], later by a backoff while other processes
    /// keep taking it first), or shutdown. After a failed claim or finish it waits
    /// [`outage_backoff`] instead and ignores wake-ups, so a database outage costs a few log lines per
    /// worker and no crash loop. Claims that only deferred, and calls given back unmade, slow the next
    /// claims down ([`stalled_pause`]): a task given back is due again at once, and claiming it back
    /// just as fast would be a spin that sends nothing.
    pub async fn run_pipelined(
        &self,
        in_flight: usize,
        mut shutdown: watch::Receiver<bool>,
        mut wake: Option<watch::Receiver<()>>,
    ) {
        let in_flight = in_flight.max(1);
        let batch = (self.config.batch as usize).clamp(1, in_flight);
        let mut calls = FuturesUnordered::new();
        let mut pacing = Pacing::new(self.config.idle_poll);
        tracing::debug!(worker = %self.config.id, in_flight, "worker loop started");
        while !*shutdown.borrow() {
            let free = in_flight - calls.len();
            let fits = free >= batch || (calls.is_empty() && free > 0);
            if fits && pacing.may_claim(Instant::now()) {
                let limit = u32::try_from(free.min(batch)).unwrap_or(u32::MAX);
                let claim = self.claim(limit);
                tokio::pin!(claim);
                // The calls in flight go on while the claim is out.
                let claimed = loop {
                    tokio::select! {
                        claimed = &mut claim => break claimed,
                        Some(done) = calls.next(), if !calls.is_empty() => self.settle(done, &mut pacing),
                    }
                };
                self.cycles.fetch_add(1, Ordering::Relaxed);
                match claimed {
                    Ok(claim) => {
                        if pacing.failures > 0 {
                            tracing::info!(worker = %self.config.id, failures = pacing.failures, "worker cycles succeed again");
                        }
                        pacing.claimed(&claim, Instant::now());
                        let (clock_read, claimed_at) = (claim.clock_read, claim.claimed_at);
                        for task in claim.tasks {
                            calls.push(self.call_and_finish(task, clock_read, claimed_at, Arc::clone(&claim.keys)));
                        }
                    }
                    Err(error) => self.failed(&error, &mut pacing),
                }
                continue;
            }
            let sleep_until = pacing.next_claim(fits);
            if !pacing.more && pacing.failures == 0 && calls.is_empty() {
                tracing::trace!(worker = %self.config.id, "idle: waiting for a wake-up, the poll interval or shutdown");
            }
            let mut wake_closed = false;
            let woken = async {
                match wake.as_mut() {
                    Some(rx) => wake_closed = rx.changed().await.is_err(),
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                Some(done) = calls.next(), if !calls.is_empty() => self.settle(done, &mut pacing),
                () = sleep_until_or_forever(sleep_until) => pacing.more = true,
                () = woken, if pacing.failures == 0 => pacing.more = true,
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
        while let Some(done) = calls.next().await {
            self.settle(done, &mut pacing);
        }
        tracing::debug!(worker = %self.config.id, "worker loop stopped");
    }

    /// Takes note of a finished call.
    fn settle(&self, done: Result<Report, StoreError>, pacing: &mut Pacing) {
        match done {
            Ok(Report::Deferred(_)) => pacing.stalled = pacing.stalled.saturating_add(1),
            Ok(_) => pacing.stalled = 0,
            Err(error) => self.failed(&error, pacing),
        }
    }

    /// A claim failed, or a finish could not be written while its lease lasted: back off.
    fn failed(&self, error: &StoreError, pacing: &mut Pacing) {
        pacing.failures = pacing.failures.saturating_add(1);
        pacing.not_before = Instant::now() + outage_backoff(pacing.failures);
        pacing.more = true;
        metrics::record_cycle_failure(error);
        let failures = pacing.failures;
        let error = error_chain(error);
        // Every failure is counted; the log gets the first and then every power of two.
        if failures.is_power_of_two() {
            tracing::warn!(worker = %self.config.id, %error, failures, "worker cycle failed; backing off");
        } else {
            tracing::debug!(worker = %self.config.id, %error, failures, "worker cycle failed; backing off");
        }
    }

    #[tracing::instrument(skip_all, fields(task_id = %task.task_id, attempt = task.attempt_no, channel = %task.channel))]
    async fn call_and_finish(
        &self,
        task: ClaimedTask,
        clock_read: Instant,
        claimed_at: Instant,
        keys: Arc<HashMap<UserId, DataKey>>,
    ) -> Result<Report, StoreError> {
        let Some(classified) = self.call(&task, clock_read, keys.get(&task.user_id)).await else {
            return self.give_back(&task).await;
        };
        let outcome = classified.observation.outcome();
        // The observation is written while the lease lasts, however often the database fails meanwhile:
        // dropped, it would turn an answer the channel gave into a lease expiry — an unknown outcome,
        // parked for a human on a channel with neither key nor query even when the channel said yes.
        let lease_end = clock_read + Duration::from_millis(self.config.lease.0);
        let mut failures: u32 = 0;
        let (record, written) = loop {
            let pending = PendingFinish {
                task_id: task.task_id,
                user_id: task.user_id.clone(),
                token: task.token,
                context: task.finish,
                observation: classified.observation.clone(),
                detail: classified.detail.clone(),
            };
            match self.finisher.finish(pending).await {
                Ok(written) => break written,
                Err(error) => {
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
                if herald_domain::finish::late_acceptance_may_duplicate(outcome, task.finish.capability) {
                    // The task was taken over while this call was on its way (a process frozen between its
                    // lease check and its send, ARCHITECTURE "Known limits"), and the takeover may have
                    // sent too: no key lets the channel drop the second message.
                    metrics::record_late_acceptance(&task.channel);
                    tracing::warn!(
                        outcome = %outcome,
                        reference = %task.reference,
                        "the channel accepted this call after its attempt had been superseded; the channel has \
                         no idempotency key, so the message may have reached the user twice (kept as the \
                         attempt's late outcome)"
                    );
                } else {
                    tracing::info!(outcome = %outcome, "attempt superseded; observation kept as late outcome");
                }
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
    async fn call(&self, task: &ClaimedTask, clock_read: Instant, key: Option<&DataKey>) -> Option<Classified> {
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
        let destination = match open_destination(key, self.cipher.as_ref(), &task.user_id, &task.channel, stored) {
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

/// When [`Worker::run_pipelined`] claims next.
#[derive(Debug)]
struct Pacing {
    /// The queue may hold more: the last claim was full, or a wake-up or the poll interval came since.
    more: bool,
    /// No claim before this (after a failure, or while stalled).
    not_before: Instant,
    /// When the last claim returned.
    last_claim: Instant,
    /// Consecutive failed claims or unrecorded finishes.
    failures: u32,
    /// Consecutive claims that only deferred, and calls given back, since the last progress.
    stalled: u32,
    /// The egress slot the claims wait for, and the slots lost to other claimers in a row.
    slot_wait: SlotWait,
    /// When to claim for that slot (with the backoff after losses), on this process's clock.
    slot: Option<Instant>,
    idle_poll: Duration,
}

impl Pacing {
    fn new(idle_poll: Duration) -> Pacing {
        let now = Instant::now();
        Pacing {
            more: true,
            not_before: now,
            last_claim: now,
            failures: 0,
            stalled: 0,
            slot_wait: SlotWait::default(),
            slot: None,
            idle_poll,
        }
    }

    fn may_claim(&self, now: Instant) -> bool {
        let paused = if self.stalled > 0 {
            self.not_before.max(self.last_claim + stalled_pause(self.stalled, self.idle_poll))
        } else {
            self.not_before
        };
        self.more && now >= paused
    }

    fn claimed(&mut self, claim: &Claim, now: Instant) {
        self.failures = 0;
        self.last_claim = now;
        self.more = claim.full;
        if claim.tasks.is_empty() && !claim.reports.is_empty() && !made_progress(&claim.reports) {
            self.stalled = self.stalled.saturating_add(1);
        } else if made_progress(&claim.reports) {
            self.stalled = 0;
        }
        let progress = !claim.tasks.is_empty() || made_progress(&claim.reports);
        self.slot_wait = self.slot_wait.after_claim(claim.now, claim.next_slot, progress);
        let cap = Millis(u64::try_from(self.idle_poll.as_millis()).unwrap_or(u64::MAX));
        self.slot = self.slot_wait.claim_at(cap, Jitter::from_bits(rand::random())).map(|at| claim.instant_of(at));
    }

    /// When to look again if nothing else happens: `None` waits for a call to end, a wake-up or
    /// shutdown (no slot is free, so there is nothing to claim for).
    fn next_claim(&self, fits: bool) -> Option<Instant> {
        if !fits {
            return None;
        }
        if self.failures > 0 {
            return Some(self.not_before);
        }
        if self.more {
            // Paused while stalled; the claim follows the pause.
            let pause = stalled_pause(self.stalled.max(1), self.idle_poll);
            return Some(self.not_before.max(self.last_claim + pause));
        }
        // The queue looked dry, but a rate-limited channel's tasks wait for its slot: claim when it is
        // free rather than at the poll interval (whichever is sooner).
        let poll = self.last_claim + self.idle_poll;
        Some(self.slot.map_or(poll, |slot| slot.min(poll)))
    }
}

async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
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
mod tests;
