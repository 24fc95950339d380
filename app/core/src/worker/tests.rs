//! Orchestration tests of the worker over mocks of the ports: what it claims, calls, finishes and gives
//! back, in which order. Behaviour against a real PostgreSQL and real channels lives in the workspace's
//! `tests/`.

use super::*;
use herald_domain::classify::Classified;
use herald_domain::finish::FinishContext;
use herald_domain::{AttemptToken, Capability, ChannelName, NotificationId, Outcome, Timestamp, UserId};
use herald_ports::channel::{MockChannel, MockChannelRegistry};
use herald_ports::cipher::MockDestinationCipher;
use herald_ports::clock::MockClock;
use herald_ports::store::{ClaimBatch, MockDeliveryStore, Settled};
use mockall::Sequence;
use secrecy::SecretString;

const NOW: Timestamp = Timestamp(1_700_000_000_000);

use crate::testing::webhook_rules as rules;

/// A registry of one channel, `push`.
fn push_registry(channel: Arc<dyn herald_ports::Channel>) -> MockChannelRegistry {
    let mut registry = MockChannelRegistry::new();
    registry.expect_names().returning(|| vec![ChannelName::from("push")]);
    registry.expect_get().returning(move |_| Some(channel.clone()));
    registry
}

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
    let mut store = MockDeliveryStore::new();
    let mut channel = MockChannel::new();
    channel.expect_rules().returning(rules);
    channel.expect_outbound_text().returning(|body, _| body.to_owned());
    let finishes = batch.claimed.len();
    store.expect_claim().times(1).in_sequence(&mut seq).return_once(move |_| Ok(batch));
    channel.expect_send().times(sends).in_sequence(&mut seq).returning(|message| {
        assert_eq!(message.idempotency_key.as_str(), "ntf-ref-3");
        assert_eq!(message.reference, "ref-3");
        Classified { observation: Observation::Accepted { provider_msg_id: Some("p-1".into()) }, detail: "ok".into() }
    });
    if finishes > 0 {
        store.expect_finish_batch().times(1).in_sequence(&mut seq).returning(move |records| {
            assert_eq!(records.len(), finishes);
            Ok(records
                .iter()
                .map(|record| {
                    assert_eq!(record.transition.state, TaskState::Sent);
                    assert_eq!(record.observation.outcome(), Outcome::Accepted);
                    Ok(FinishResult::Applied)
                })
                .collect())
        });
    }
    let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
    let registry = push_registry(channel);
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

/// A worker whose one call (task 3, with `capability`) is accepted and whose finish is refused as
/// stale: the task had been taken over meanwhile.
fn superseded_worker(capability: Capability) -> Worker {
    let mut task = claimed(3);
    task.finish.capability = capability;
    let batch = ClaimBatch { claimed: vec![task], ..ClaimBatch::default() };
    let mut store = MockDeliveryStore::new();
    store.expect_claim().times(1).return_once(move |_| Ok(batch));
    store
        .expect_finish_batch()
        .times(1)
        .returning(|records| Ok(records.iter().map(|_| Ok(FinishResult::Stale)).collect()));
    let mut channel = MockChannel::new();
    channel.expect_rules().returning(rules);
    channel.expect_outbound_text().returning(|body, _| body.to_owned());
    channel.expect_send().times(1).returning(|_| Classified {
        observation: Observation::Accepted { provider_msg_id: Some("p-2".into()) },
        detail: "ok".into(),
    });
    let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
    let mut cipher = MockDestinationCipher::new();
    cipher.expect_decrypt().returning(|_, _, _| Ok(SecretString::from("dest")));
    let mut clock = MockClock::new();
    clock.expect_now().returning(|| Ok(NOW));
    Worker::new(
        Arc::new(store),
        Arc::new(push_registry(channel)),
        Arc::new(cipher),
        Arc::new(clock),
        WorkerConfig { id: "w1".into(), lease: Millis(60_000), batch: 8, idle_poll: Duration::from_millis(10) },
    )
}

/// A superseded attempt whose call was accepted is counted as a possible duplicate where the channel
/// has no idempotency key — not where the key made any second send a replay.
#[tokio::test]
async fn a_late_acceptance_without_an_idempotency_key_is_counted_as_a_possible_duplicate() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = ::metrics::set_default_local_recorder(&recorder);
    let sms = Capability::Queryable { consistency: herald_domain::QueryConsistency::Immediate };
    for capability in [Capability::Idempotent, sms, Capability::Neither] {
        let cycle = superseded_worker(capability).run_once().await.expect("cycle");
        assert_eq!(cycle, vec![Report::Stale(TaskId(3))]);
    }
    let text = handle.render();
    assert!(text.contains("herald_stale_finishes_total{channel=\"push\"} 3"), "{text}");
    assert!(text.contains("herald_late_acceptances_total{channel=\"push\"} 2"), "{text}");
}

#[tokio::test]
async fn a_call_that_could_outlive_its_lease_is_not_made_and_the_attempt_is_given_back() {
    let mut store = MockDeliveryStore::new();
    let batch = ClaimBatch { claimed: vec![claimed(3)], ..ClaimBatch::default() };
    store.expect_claim().times(1).return_once(move |_| Ok(batch));
    store.expect_finish().times(0);
    store.expect_finish_batch().times(0);
    store.expect_give_back().times(1).returning(|record| {
        assert_eq!(record.transition.state, TaskState::Pending, "nothing was sent");
        Ok(FinishResult::Applied)
    });
    let mut channel = MockChannel::new();
    channel.expect_rules().returning(rules);
    channel.expect_outbound_text().returning(|body, _| body.to_owned());
    channel.expect_send().times(0);
    let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
    let registry = push_registry(channel);
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
    let mut store = MockDeliveryStore::new();
    let counted = Arc::clone(&claims);
    store.expect_claim().returning(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
        Ok(ClaimBatch { claimed: vec![claimed(3)], ..ClaimBatch::default() })
    });
    store.expect_give_back().returning(|_| Ok(FinishResult::Applied));
    store.expect_finish().times(0);
    store.expect_finish_batch().times(0);
    let mut channel = MockChannel::new();
    channel.expect_rules().returning(rules);
    channel.expect_outbound_text().returning(|body, _| body.to_owned());
    channel.expect_send().times(0);
    let channel: Arc<dyn herald_ports::Channel> = Arc::new(channel);
    let registry = push_registry(channel);
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

/// A channel that answers after `delay`, counting the calls it has in progress.
struct SlowChannel {
    name: ChannelName,
    delay: Duration,
    now: AtomicU64,
    most: AtomicU64,
    calls: AtomicU64,
}

#[async_trait::async_trait]
impl herald_ports::Channel for SlowChannel {
    fn name(&self) -> &ChannelName {
        &self.name
    }
    fn rules(&self) -> herald_domain::ChannelRules {
        rules()
    }
    fn outbound_text(&self, body: &str, _: Option<u32>) -> String {
        body.to_owned()
    }
    fn check_destination(&self, _: &str) -> Result<(), &'static str> {
        Ok(())
    }
    async fn send(&self, _: &OutboundMessage) -> Classified {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Classified { observation: Observation::Accepted { provider_msg_id: None }, detail: "ok".into() }
    }
    async fn query(&self, _: &str) -> Classified {
        unreachable!("sends only")
    }
}

/// Every claim's limit, and how many claimed tasks were not finished yet when it was made.
type Claims = Arc<std::sync::Mutex<Vec<(u32, u64)>>>;

/// A worker over `tasks` claimable tasks, a channel answering after `delay`; records every claim's
/// limit and how many claimed tasks were still out (called or about to be) when it was made.
fn pipelined(tasks: i64, delay: Duration) -> (Worker, Arc<SlowChannel>, Claims) {
    let channel = Arc::new(SlowChannel {
        name: ChannelName::from("push"),
        delay,
        now: AtomicU64::new(0),
        most: AtomicU64::new(0),
        calls: AtomicU64::new(0),
    });
    let claims = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Tasks handed out by claims, and tasks whose finish was written: their difference is the work
    // still out when a claim is made.
    let (handed, finished) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut store = MockDeliveryStore::new();
    let (seen, next, done) = (Arc::clone(&claims), Arc::clone(&handed), Arc::clone(&finished));
    store.expect_claim().returning(move |request| {
        let from = next.load(Ordering::SeqCst);
        seen.lock().expect("claims").push((request.limit, from - done.load(Ordering::SeqCst)));
        let claimed: Vec<ClaimedTask> = (from..u64::from(request.limit) + from)
            .filter_map(|n| i64::try_from(n).ok())
            .filter(|n| *n < tasks)
            .map(claimed)
            .collect();
        next.fetch_add(claimed.len() as u64, Ordering::SeqCst);
        Ok(ClaimBatch { claimed, ..ClaimBatch::default() })
    });
    store.expect_finish_batch().returning(move |records| {
        finished.fetch_add(records.len() as u64, Ordering::SeqCst);
        Ok(records.iter().map(|_| Ok(FinishResult::Applied)).collect())
    });
    let registry = push_registry(channel.clone());
    let mut cipher = MockDestinationCipher::new();
    cipher.expect_decrypt().returning(|_, _, _| Ok(SecretString::from("dest")));
    let mut clock = MockClock::new();
    clock.expect_now().returning(|| Ok(NOW));
    let worker = Worker::new(
        Arc::new(store),
        Arc::new(registry),
        Arc::new(cipher),
        Arc::new(clock),
        WorkerConfig { id: "w1".into(), lease: Millis(60_000), batch: 2, idle_poll: Duration::from_secs(3_600) },
    );
    (worker, channel, claims)
}

/// The pipelined loop claims a batch whenever one fits in the free slots, while earlier calls are
/// still out, and never has more than `in_flight` calls going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipelined_loop_claims_while_calls_are_in_flight_and_keeps_to_its_limit() {
    let (worker, channel, claims) = pipelined(12, Duration::from_millis(300));
    let worker = Arc::new(worker);
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn({
        let worker = Arc::clone(&worker);
        async move { worker.run_pipelined(4, stopped, None).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while channel.calls.load(Ordering::SeqCst) < 12 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.send(true).expect("stop");
    running.await.expect("loop");
    assert_eq!(channel.calls.load(Ordering::SeqCst), 12, "every task called once");
    assert_eq!(channel.most.load(Ordering::SeqCst), 4, "never more than 4 calls in flight");
    let claims = claims.lock().expect("claims").clone();
    assert!(claims.iter().all(|(limit, _)| *limit == 2), "claims of one batch each: {claims:?}");
    assert!(
        claims.iter().any(|(_, out)| *out > 0),
        "a claim made while earlier calls were still out (pipelined): {claims:?}"
    );
}

/// Shutdown stops the claims at once and waits for the calls in flight to be finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_calls_in_flight_finish() {
    let (worker, channel, claims) = pipelined(1_000, Duration::from_millis(200));
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn(async move { worker.run_pipelined(4, stopped, None).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while channel.now.load(Ordering::SeqCst) < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).expect("stop");
    running.await.expect("loop");
    let claimed = claims.lock().expect("claims").iter().map(|(limit, _)| u64::from(*limit)).sum::<u64>();
    assert_eq!(channel.now.load(Ordering::SeqCst), 0, "no call still in progress");
    assert_eq!(channel.calls.load(Ordering::SeqCst), claimed, "every claimed task was called, none after");
}

/// The shared clock as the database shows it: wall time.
fn wall_clock() -> MockClock {
    let mut clock = MockClock::new();
    clock.expect_now().returning(|| {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        Ok(Timestamp(i64::try_from(since_epoch.as_millis()).expect("in range")))
    });
    clock
}

/// A worker over `store` and `clock` whose one channel answers at once; polls only every hour.
fn slot_worker(store: MockDeliveryStore, clock: MockClock) -> (Worker, Arc<SlowChannel>) {
    let channel = Arc::new(SlowChannel {
        name: ChannelName::from("push"),
        delay: Duration::ZERO,
        now: AtomicU64::new(0),
        most: AtomicU64::new(0),
        calls: AtomicU64::new(0),
    });
    let registry = push_registry(channel.clone());
    let mut cipher = MockDestinationCipher::new();
    cipher.expect_decrypt().returning(|_, _, _| Ok(SecretString::from("dest")));
    let worker = Worker::new(
        Arc::new(store),
        Arc::new(registry),
        Arc::new(cipher),
        Arc::new(clock),
        WorkerConfig { id: "w1".into(), lease: Millis(60_000), batch: 8, idle_poll: Duration::from_secs(3_600) },
    );
    (worker, channel)
}

/// Runs `worker`'s loop until `done` holds (or a safety limit of 20 s), then stops it.
async fn run_until(worker: Worker, done: impl Fn() -> bool) {
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn(async move { worker.run(stopped, None).await });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).expect("stop");
    running.await.expect("loop");
}

/// Defect: a claim that found a rate-limited channel's slot taken (it deferred the channel's only
/// due task) made the loop wait for the poll interval — an hour here — though the store said when
/// the slot would be free. The next claim now comes at the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_found_the_slot_taken_is_followed_by_one_when_it_is_free_not_at_the_poll() {
    const SLOT_IN: Duration = Duration::from_millis(300);
    let instants = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let mut store = MockDeliveryStore::new();
    let seen = Arc::clone(&instants);
    store.expect_claim().returning(move |request| {
        let mut seen = seen.lock().expect("instants");
        seen.push(Instant::now());
        Ok(if seen.len() == 1 {
            ClaimBatch {
                deferred: vec![herald_ports::Deferred { task_id: TaskId(7), channel: ChannelName::from("push") }],
                next_slot: Some(request.now + Millis(300)),
                ..ClaimBatch::default()
            }
        } else {
            ClaimBatch::default()
        })
    });
    let mut clock = MockClock::new();
    clock.expect_now().returning(|| Ok(NOW));
    let (worker, _) = slot_worker(store, clock);
    let seen = Arc::clone(&instants);
    run_until(worker, move || seen.lock().expect("instants").len() >= 2).await;
    let instants = instants.lock().expect("instants").clone();
    assert!(instants.len() >= 2, "no second claim within 20 s (the poll interval is an hour)");
    let gap = instants[1] - instants[0];
    assert!(gap >= SLOT_IN, "claimed again {gap:?} after, before the slot was free");
    assert!(gap < Duration::from_secs(10), "claimed again only {gap:?} after: not at the slot");
    assert_eq!(instants.len(), 2, "one claim when the slot is free, then idle: {instants:?}");
}

/// A store that behaves like one rate-limited channel with an endless backlog: one call per 40 ms
/// slot, and every claim tells when the next slot is free. Polling every hour, the loop calls at the
/// slots — and claims about once per slot, never in a spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_calls_a_rate_limited_channel_at_its_slots_with_one_claim_per_slot() {
    const SPACING: Millis = Millis(40);
    let claims = Arc::new(AtomicU64::new(0));
    let last_call = Arc::new(std::sync::Mutex::new(None::<Timestamp>));
    let mut store = MockDeliveryStore::new();
    let (counted, last) = (Arc::clone(&claims), Arc::clone(&last_call));
    store.expect_claim().returning(move |request| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let mut last = last.lock().expect("last call");
        match *last {
            Some(at) if request.now < at + SPACING => {
                Ok(ClaimBatch { next_slot: Some(at + SPACING), ..ClaimBatch::default() })
            }
            _ => {
                *last = Some(request.now);
                let task = claimed(i64::try_from(n).expect("small"));
                Ok(ClaimBatch { claimed: vec![task], next_slot: Some(request.now + SPACING), ..ClaimBatch::default() })
            }
        }
    });
    store.expect_finish_batch().returning(|records| Ok(records.iter().map(|_| Ok(FinishResult::Applied)).collect()));
    let (worker, channel) = slot_worker(store, wall_clock());
    let calls = Arc::clone(&channel);
    run_until(worker, move || calls.calls.load(Ordering::SeqCst) >= 10).await;
    let (calls, claims) = (channel.calls.load(Ordering::SeqCst), claims.load(Ordering::SeqCst));
    assert!(calls >= 10, "{calls} calls within 20 s: the loop waited for its hourly poll");
    // Every claim at a slot calls; a claim that came early (a wake-up) only learns the slot.
    assert!(claims <= 2 * calls + 2, "{claims} claims for {calls} calls");
}

/// Other processes take every slot first: a claimer that keeps losing backs off instead of coming at
/// every slot (here 20 ms apart) — and never spins, even on a store that keeps answering that the
/// slot is free right now but never gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_keeps_losing_the_slot_backs_off() {
    const SPACING: i64 = 20;
    for free_now in [false, true] {
        let claims = Arc::new(AtomicU64::new(0));
        let mut store = MockDeliveryStore::new();
        let counted = Arc::clone(&claims);
        store.expect_claim().returning(move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            // Another process reserved a slot on the 20 ms grid; the next one is free after it.
            let next = if free_now { request.now } else { Timestamp((request.now.0 / SPACING + 1) * SPACING) };
            Ok(ClaimBatch { next_slot: Some(next), ..ClaimBatch::default() })
        });
        let (worker, channel) = slot_worker(store, wall_clock());
        let started = Instant::now();
        run_until(worker, || started.elapsed() >= Duration::from_millis(600)).await;
        let claims = claims.load(Ordering::SeqCst);
        assert_eq!(channel.calls.load(Ordering::SeqCst), 0);
        // 30 slots in 600 ms; backing off 5, 10, 20, 40 … ms after each lost one leaves about ten
        // claims. A spin makes thousands.
        assert!((1..=15).contains(&claims), "{claims} claims in 600 ms (slot free now: {free_now})");
    }
}

#[tokio::test]
async fn nothing_to_claim_reports_nothing() {
    let reports = worker(ClaimBatch::default(), 0).run_once().await.expect("cycle");
    assert!(reports.is_empty());
}
