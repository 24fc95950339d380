//! Concurrency and timing defects of the hot path, each pinned by a test that failed before its fix:
//!
//! 1. the digest limit under concurrent creates (events read their time before the lock);
//! 2. a query's "not found" believed too early when the uncertain call left late;
//! 3. a worker that only gives attempts back must not spin (the configuration side is in
//!    `app/src/config/tests.rs`, the loop's pause in `app/src/worker.rs`);
//! 4. a failed finish write must not drop what the channel answered;
//! 5. scheduling past the deadline, the views' attempt look-up, and a rate-limited backlog kept in order.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald_channels::config::DigestSetting;
use herald_core::worker::{Report, Worker, WorkerConfig};
use herald_domain::classify::Classified;
use herald_domain::{
    finish, ChannelName, ChannelRules, EventKey, Jitter, Millis, Observation, Outcome, QueryConsistency, TaskId,
    TaskState, ThreadKey, Timestamp, UserId,
};
use herald_ports::prelude::*;
use herald_ports::store::{
    ClaimBatch, ClaimRequest, ClaimedTask, FinishRecord, FinishResult, GiveBack, NewNotification, StoreError,
};
use herald_ports::{Channel, ChannelRegistry, OutboundMessage};
use herald_standin::Script;
use herald_tests::clock::ManualClock;
use herald_tests::world::{ClockMode, World, T0};
use sqlx::postgres::PgArguments;
use sqlx::Arguments;

const HOUR: u64 = 3_600_000;

// ---------------------------------------------------------------------------------------------------
// 1. The digest limit under concurrent creates.

async fn digest_world() -> World {
    World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.digest = Some(DigestSetting { instant_per_hour: 3, window_secs: None });
    })
    .await
    .expect("world")
}

fn in_thread(user: &str, event: &str) -> NewNotification {
    NewNotification {
        user_id: UserId::from(user),
        event_key: EventKey::from(event),
        body: format!("Event {event}"),
        ttl: Millis(2 * HOUR),
        max_attempts: None,
        thread_key: Some(ThreadKey::from("order-1")),
        submitted_by: None,
    }
}

/// Instant prompts, digest tasks and their counts for one user's thread on push.
async fn digest_tally(world: &World, user: &str) -> (i64, i64, i64, i64) {
    let (instant, digests, counted): (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE digest_count IS NULL), count(*) FILTER (WHERE digest_count IS NOT NULL), \
         sum(digest_count)::bigint FROM delivery_task WHERE user_id = $1 AND channel = 'push'",
    )
    .bind(user)
    .fetch_one(world.store.pool())
    .await
    .expect("tally");
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM digest_member WHERE user_id = $1")
        .bind(user)
        .fetch_one(world.store.pool())
        .await
        .expect("members");
    (instant, digests, counted.unwrap_or(0), members)
}

/// Events whose times were read in one order and whose decisions are taken in the reverse one: the
/// fourth must not be instant. (Before the fix, a prompt recorded with a later time than the deciding
/// event's was left out of its window, and all four were instant.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_deciding_late_counts_prompts_recorded_with_later_times() {
    let world = digest_world().await;
    world.user("u1", &["push"]).await.expect("user");
    let table = world.table();
    for (n, secs) in [10u64, 9, 8, 7].into_iter().enumerate() {
        let created = world
            .store
            .create(&in_thread("u1", &format!("e{n}")), &table, T0 + Millis::from_secs(secs))
            .await
            .expect("create");
        assert_eq!(created.tasks.len(), 1, "each of the first four has a task (three instant, one digest)");
    }
    let (instant, digests, counted, members) = digest_tally(&world, "u1").await;
    assert_eq!((instant, digests, counted, members), (3, 1, 1, 0), "three instant prompts, then a digest");
}

/// Twenty events of one thread created at once, each with its own clock reading (shuffled, as readings
/// taken before a lock are): at most three instant prompts, every other event counted in exactly one
/// digest, every inbox item kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_never_pass_the_digest_limit() {
    const EVENTS: u64 = 20;
    let world = Arc::new(digest_world().await);
    world.user("u1", &["push"]).await.expect("user");
    let table = world.table();
    // Readings 0..20 s, interleaved so that later readings often decide first.
    let readings: Vec<u64> = (0..EVENTS).map(|i| (i * 7) % EVENTS).collect();
    let creates = readings.into_iter().enumerate().map(|(n, secs)| {
        let (world, table) = (Arc::clone(&world), table.clone());
        tokio::spawn(async move {
            world.store.create(&in_thread("u1", &format!("e{n}")), &table, T0 + Millis::from_secs(secs)).await
        })
    });
    for created in futures::future::join_all(creates).await {
        assert!(created.expect("join").expect("create").created);
    }
    let (instant, digests, counted, members) = digest_tally(&world, "u1").await;
    assert!(instant <= 3, "at most three instant prompts in the window, got {instant}");
    assert_eq!(digests, 1, "one digest takes every event beyond the limit");
    assert_eq!(instant + counted, 20, "every event is an instant prompt or counted in the digest");
    assert_eq!(members + digests, counted, "each counted event is the digest's opener or one member row");
    let inbox = world.store.inbox(&UserId::from("u1"), 100).await.expect("inbox");
    assert_eq!(inbox.len(), 20, "every event keeps its inbox item");
}

// ---------------------------------------------------------------------------------------------------
// 2. "Not found" believed too early.

/// A channel whose calls leave late: the clock moves `by` before the call is made, as when a worker
/// waited for a pool connection or a slow start between its claim and the call.
struct SlowToLeave {
    inner: Arc<dyn Channel>,
    clock: Arc<ManualClock>,
    by: Millis,
}

#[async_trait]
impl Channel for SlowToLeave {
    fn name(&self) -> &ChannelName {
        self.inner.name()
    }

    fn rules(&self) -> ChannelRules {
        self.inner.rules()
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.inner.outbound_text(body, digest_count)
    }

    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        self.inner.check_destination(destination)
    }

    async fn send(&self, message: &OutboundMessage) -> Classified {
        self.clock.advance(self.by);
        self.inner.send(message).await
    }

    async fn query(&self, reference: &str) -> Classified {
        self.inner.query(reference).await
    }
}

struct OneChannel(Arc<dyn Channel>);

impl ChannelRegistry for OneChannel {
    fn get(&self, name: &ChannelName) -> Option<Arc<dyn Channel>> {
        (name == self.0.name()).then(|| Arc::clone(&self.0))
    }

    fn names(&self) -> Vec<ChannelName> {
        vec![self.0.name().clone()]
    }
}

/// The sms gateway needs 5 s before "not found" is true, and its queries see an acceptance only after a
/// lag. The send is claimed at 0 s but leaves at 4 s and times out (accepted). A query at 5.5 s finds
/// nothing: counted from the claim, 5 s have passed and "not found" would be believed and the task sent
/// again; counted from the finish (4 s), it is not believable before 9 s, so the task waits, and the
/// query at 9 s finds the first send. One real send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_believed_only_after_the_consistency_delay_from_the_latest_possible_acceptance() {
    let mut world = World::with(ClockMode::Manual, |configs| {
        let sms = configs.iter_mut().find(|c| c.name == "sms").expect("sms");
        sms.query_consistency = QueryConsistency::After(Millis(5_000));
        sms.max_attempts = 5;
    })
    .await
    .expect("world");
    let sms = world.registry.get(&ChannelName::from("sms")).expect("sms");
    world.set_registry(Arc::new(OneChannel(Arc::new(SlowToLeave {
        inner: sms,
        clock: world.manual.clone(),
        by: Millis(4_000),
    }))));
    world.user("u1", &["sms"]).await.expect("user");
    world.sms.set_query_lag(Duration::from_millis(1_500));
    world.sms.script(Script::Delay(Duration::from_millis(1_000)));
    let created = world.submit("u1", "e1", HOUR, None).await.expect("submit");
    let task = created.tasks[0].task_id;
    let reference = world.reference(task).await.expect("reference");
    let worker = world.worker("w1", 60_000);

    let cycle = worker.run_once().await.expect("send");
    assert_eq!(cycle, vec![Report::Unknown { task, parked: false }], "timed out after the gateway accepted");
    assert_eq!(world.sms.sends_for(&reference), 1);

    world.manual.set(T0 + Millis(5_500));
    let cycle = worker.run_once().await.expect("query");
    assert_eq!(cycle, vec![Report::Unknown { task, parked: false }], "not found, but not yet believable");
    let view = world.task(created.notification_id, task).await.expect("view");
    assert_eq!(view.attempts.last().and_then(|a| a.outcome), Some(Outcome::QueryNotFound));
    assert_eq!(view.next_attempt_at, Some(T0 + Millis(9_000)), "asked again 5 s after the send was given up");
    assert!(worker.run_once().await.expect("cycle").is_empty(), "nothing is sent again meanwhile");
    assert_eq!(world.sms.sends_for(&reference), 1, "no second send");

    tokio::time::sleep(Duration::from_millis(1_600)).await; // the gateway's lag passes
    world.manual.set(T0 + Millis(9_000));
    let cycle = worker.run_once().await.expect("query again");
    assert_eq!(cycle, vec![Report::Sent(task)]);
    assert_eq!(world.sms.sends_for(&reference), 1, "exactly one real send");
}

// ---------------------------------------------------------------------------------------------------
// 4. A failed finish write.

/// How the store wrapped by [`FlakyFinish`] fails its first finishes.
#[derive(Clone, Copy)]
enum FinishFault {
    /// The write never reaches the database.
    Lost,
    /// The write commits, but its answer is lost (the connection broke after the commit).
    AnswerLost,
}

/// The real store, except that its first `failures` finishes fail as `fault` says.
struct FlakyFinish {
    inner: Arc<herald_postgres::PgStore>,
    failures: AtomicU32,
    fault: FinishFault,
}

fn unavailable() -> StoreError {
    StoreError::Unavailable(anyhow::anyhow!("connection reset by the test"))
}

#[async_trait]
impl DeliveryStore for FlakyFinish {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        self.inner.claim(request).await
    }

    async fn finish(&self, record: &FinishRecord) -> Result<FinishResult, StoreError> {
        let fail = self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        match (fail, self.fault) {
            (false, _) => self.inner.finish(record).await,
            (true, FinishFault::Lost) => Err(unavailable()),
            (true, FinishFault::AnswerLost) => {
                self.inner.finish(record).await?;
                Err(unavailable())
            }
        }
    }

    async fn give_back(&self, record: &GiveBack) -> Result<FinishResult, StoreError> {
        self.inner.give_back(record).await
    }
}

/// On Miaotixing (no key, no query) a dropped observation would come back as a lease expiry and park a
/// notification the channel had accepted. The worker writes it again while the lease lasts; a write
/// whose answer was lost is recognised when repeated, so the attempt keeps one outcome and no late one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_finish_write_is_retried_while_the_lease_lasts() {
    for fault in [FinishFault::Lost, FinishFault::AnswerLost] {
        let world = World::new(ClockMode::Manual).await.expect("world");
        world.user("u1", &["miao"]).await.expect("user");
        let created = world.submit("u1", "e1", HOUR, None).await.expect("submit");
        let task = created.tasks[0].task_id;
        let store = Arc::new(FlakyFinish { inner: world.store.clone(), failures: AtomicU32::new(2), fault });
        let worker = Worker::new(
            store,
            world.registry.clone(),
            world.cipher.clone(),
            world.clock.clone(),
            WorkerConfig { id: "w1".into(), lease: Millis(60_000), batch: 8, idle_poll: Duration::from_millis(20) },
        );
        let cycle = worker.run_once().await.expect("the cycle succeeds once the write lands");
        assert_eq!(cycle, vec![Report::Sent(task)]);
        let view = world.task(created.notification_id, task).await.expect("view");
        assert_eq!((view.state, view.needs_review, view.attempt_count), (TaskState::Sent, false, 1));
        assert_eq!(view.attempts.len(), 1);
        assert_eq!(view.attempts[0].outcome, Some(Outcome::Accepted));
        assert_eq!(view.attempts[0].late_outcome, None, "a repeated write is not a late observation");
        assert_eq!(world.miao.sends(), 1);
    }
}

/// Finishes are written in batches, each row fenced by its own token: in one statement, two attempts
/// that still hold their tasks are applied, and the attempt of a holder superseded meanwhile lands as
/// its attempt's late outcome without touching the task its successor holds. Sent again (the answer was
/// lost), the batch is recognised as already written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_finishes_is_fenced_row_by_row() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let mut created = Vec::new();
    for event in ["e1", "e2", "e3"] {
        created.push(world.submit("u1", event, HOUR, None).await.expect("submit"));
    }
    let claim = |worker: &str, lease: u64, limit: u32| ClaimRequest {
        worker: worker.into(),
        now: world.manual.read(),
        lease: Millis(lease),
        limit,
        channels: world.table(),
    };
    let old = world.store.claim(&claim("old", 10_000, 3)).await.expect("claim").claimed;
    assert_eq!(old.len(), 3);
    // The third task's holder stalls past its lease (the other two are made unclaimable by moving
    // their leases on); a newer holder takes the third over.
    let stalled = &old[2];
    world.advance(11_000);
    sqlx::query("UPDATE delivery_task SET lease_until = lease_until + interval '1 hour' WHERE id <> $1")
        .bind(stalled.task_id.0)
        .execute(&world.db.store.pool().clone())
        .await
        .expect("keep two leases");
    let newer = world.store.claim(&claim("new", 60_000, 3)).await.expect("claim").claimed;
    assert_eq!(newer.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![stalled.task_id], "only the expired one");

    let records = accepted_records(&old, Some("p-1"), world.manual.read());
    let results = world.store.finish_batch(&records).await.expect("one statement");
    let results: Vec<FinishResult> = results.into_iter().map(|r| r.expect("row")).collect();
    assert_eq!(results, vec![FinishResult::Applied, FinishResult::Applied, FinishResult::Stale]);
    for (made, held) in created.iter().zip(&old).take(2) {
        let view = world.task(made.notification_id, held.task_id).await.expect("view");
        assert_eq!((view.state, view.attempts[0].outcome), (TaskState::Sent, Some(Outcome::Accepted)));
    }
    let view = world.task(created[2].notification_id, stalled.task_id).await.expect("view");
    assert_eq!(view.state, TaskState::Sending, "the successor still holds it");
    assert_eq!(view.attempts.len(), 2);
    assert_eq!(view.attempts[0].late_outcome, Some(Outcome::Accepted), "the stale row kept as a late outcome");
    assert_eq!(view.attempts[1].outcome, None, "the successor's attempt is untouched");

    let again = world.store.finish_batch(&records).await.expect("repeat");
    let again: Vec<FinishResult> = again.into_iter().map(|r| r.expect("row")).collect();
    assert_eq!(again, vec![FinishResult::Applied, FinishResult::Applied, FinishResult::Stale]);
    let view = world.task(created[0].notification_id, old[0].task_id).await.expect("view");
    assert_eq!((view.attempts.len(), view.attempts[0].late_outcome), (1, None), "a repeat is no late outcome");
}

// ---------------------------------------------------------------------------------------------------
// 5. Scheduling past the deadline, attempts by index, and a backlog kept in order.

/// A 429 asking for an hour on a notification that expires in 5 s: the retry is due at the expiry, when
/// the claim fails it as expired — not an hour later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_never_scheduled_after_the_expiry() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    world.push.script(Script::retry_after(429, 3_600));
    let created = world.submit("u1", "e1", 5_000, None).await.expect("submit");
    let task = created.tasks[0].task_id;
    let worker = world.worker("w1", 60_000);
    assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Retry(task)]);
    let view = world.task(created.notification_id, task).await.expect("view");
    assert_eq!((view.state, view.next_attempt_at), (TaskState::Pending, Some(T0 + Millis(5_000))));

    world.manual.set(T0 + Millis(5_000));
    assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Failed(task)]);
    let view = world.task(created.notification_id, task).await.expect("view");
    assert_eq!(view.attempts.last().and_then(|a| a.outcome), Some(Outcome::TtlExpired));
    assert_eq!(world.push.sends(), 0);
}

/// The attempts of the notification view and the review list are found through the
/// `(user_id, task_id, attempt_no)` key, never by scanning `delivery_attempt` (asked with sequential
/// scans discouraged: a query that cannot use an index still shows one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_loaded_by_index() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let mut conn = world.store.pool().acquire().await.expect("connection");
    sqlx::query("SET enable_seqscan = off").execute(&mut *conn).await.expect("set");
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", herald_postgres::ATTEMPTS_OF_TASKS))
        .bind(vec!["u1".to_owned(), "u2".to_owned()])
        .bind(vec![1_i64, 2])
        .fetch_all(&mut *conn)
        .await
        .expect("explain");
    sqlx::query("RESET enable_seqscan").execute(&mut *conn).await.expect("reset");
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on delivery_attempt"), "{plan}");
    let probe = plan.lines().skip_while(|l| !l.contains("delivery_attempt_pkey")).nth(1).unwrap_or_default();
    assert!(probe.contains("Index Cond") && probe.contains("user_id"), "probed by (user_id, task_id): {plan}");
}

/// Claims up to `limit` push tasks through `store` and finishes them, accepted, in one batched finish.
/// Answers how many were finished.
async fn claim_and_finish(world: &World, store: &herald_postgres::PgStore, limit: u32) -> usize {
    let request = ClaimRequest {
        worker: "w1".into(),
        now: world.manual.read(),
        lease: Millis(60_000),
        limit,
        channels: world.table(),
    };
    let held = store.claim(&request).await.expect("claim").claimed;
    let records = accepted_records(&held, None, request.now);
    let results = store.finish_batch(&records).await.expect("finish");
    assert!(results.iter().all(|r| matches!(r, Ok(FinishResult::Applied))), "{results:?}");
    records.len()
}

/// The finishes of `held` as if every call had been accepted at `now` (with `provider_msg_id`, if any).
fn accepted_records(held: &[ClaimedTask], provider_msg_id: Option<&str>, now: Timestamp) -> Vec<FinishRecord> {
    let accepted = Observation::Accepted { provider_msg_id: provider_msg_id.map(str::to_owned) };
    held.iter()
        .map(|held| FinishRecord {
            task_id: held.task_id,
            user_id: held.user_id.clone(),
            token: held.token,
            transition: finish(&held.finish, &accepted, now, Jitter::NONE),
            observation: accepted.clone(),
            detail: "accepted".into(),
            now,
        })
        .collect()
}

/// A store of one connection, for the plan tests: every statement runs on the backend that cached its
/// plan. Autovacuum is off for `table`, so no analyze but the test's plans the statements again (the
/// negative controls' cached plans included).
///
/// `planning` as the pool the statements under test run on in `herald worker`: `Generic` for the finish
/// pool, `Chosen` for the claims.
async fn one_connection_unanalyzed(
    world: &World,
    table: &str,
    planning: herald_postgres::Planning,
) -> herald_postgres::PgStore {
    sqlx::query(&format!("ALTER TABLE {table} SET (autovacuum_enabled = false)"))
        .execute(world.store.pool())
        .await
        .expect("no autovacuum");
    herald_postgres::PgStore::connect_planned(&world.db.url, 1, planning).await.expect("store")
}

/// `delivery_attempt`'s sequential scans and updated rows as the statistics collector has them, once
/// the counts of `flushed` (whose backend was asked to report at its next idle moment) have arrived.
async fn attempt_scans(world: &World, flushed: &herald_postgres::PgStore, updates_at_least: i64) -> (i64, i64) {
    table_scans(world, flushed, "delivery_attempt", updates_at_least).await
}

/// `table`'s sequential scans and updated rows as the statistics collector has them, once the counts of
/// `flushed` (whose backend was asked to report at its next idle moment) have arrived.
async fn table_scans(
    world: &World,
    flushed: &herald_postgres::PgStore,
    table: &str,
    updates_at_least: i64,
) -> (i64, i64) {
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(flushed.pool()).await.expect("flush");
    for _ in 0..200 {
        let (scans, updates): (i64, i64) =
            sqlx::query_as("SELECT seq_scan, n_tup_upd FROM pg_stat_user_tables WHERE relname = $1")
                .bind(table)
                .fetch_one(world.store.pool())
                .await
                .expect("stats");
        if updates >= updates_at_least {
            return (scans, updates);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the statistics of {table} never arrived");
}

/// The batched finish finds its attempt rows by index however much `delivery_attempt` has grown since
/// the connection first ran it. The statement is kept prepared, and a finish connection plans it once, at
/// its first run: made while the table holds a few rows (here, as in the first seconds of a drain from
/// empty tables), that plan reads the whole table for every flush until the table is analyzed. The
/// statement takes the claim's plan generation (`plan_generation`), so each connection plans it again
/// once the rows claimed through the store have doubled from 256. Here one connection finishes 8 tasks,
/// the table grows by 50,000 unanalyzed rows, and 320 more tasks are finished: the flushes before the
/// generation changes (the negative control: the plan made on the small table) read the table whole, those
/// after it do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batched_finish_finds_attempts_by_index_however_the_table_grew() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    // Every finish below runs on the backend that ran the first ones.
    let store = one_connection_unanalyzed(&world, "delivery_attempt", herald_postgres::Planning::Generic).await;

    // While the table holds a few rows: more finishes than a connection runs before it caches a plan.
    for i in 0..8 {
        world.submit("u1", &format!("small-{i}"), HOUR, None).await.expect("submit");
        assert_eq!(claim_and_finish(&world, &store, 1).await, 1);
    }

    // The table grows by 50,000 rows and is not analyzed (autovacuum is slower than a drain).
    sqlx::query(
        "INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, outcome, started_at, \
           finished_at) \
         SELECT t.user_id, t.id, 100 + g, gen_random_uuid(), 'SEND', 'ACCEPTED', now(), now() \
         FROM (SELECT user_id, id FROM delivery_task ORDER BY id LIMIT 1) t, generate_series(1, 50000) g",
    )
    .execute(world.store.pool())
    .await
    .expect("grow");
    for i in 0..320 {
        world.submit("u1", &format!("large-{i}"), HOUR, None).await.expect("submit");
    }
    // The flush after the seventh claim of 31 below still runs the first generation's plan, the flush
    // after the eighth does not.
    assert_eq!(herald_postgres::plan_generation(8 + 7 * 31), 0);
    assert_eq!(herald_postgres::plan_generation(8 + 8 * 31), 1);

    let (scans_before, updates_before) = attempt_scans(&world, &store, 8).await;
    for _ in 0..7 {
        assert_eq!(claim_and_finish(&world, &store, 31).await, 31);
    }
    let (scans_control, _) = attempt_scans(&world, &store, updates_before + 7 * 31).await;
    assert!(scans_control - scans_before >= 7, "the plan made on a few rows reads the grown table whole");

    // The next flushes (the second generation's first runs, then its cached plan) go by index.
    let mut finished = claim_and_finish(&world, &store, 31).await;
    for _ in 0..8 {
        finished += claim_and_finish(&world, &store, 9).await;
    }
    assert_eq!(finished, 320 - 7 * 31);
    let (scans_after, _) = attempt_scans(&world, &store, updates_before + 320).await;
    assert_eq!(scans_after - scans_control, 0, "a flush read the grown table whole after the generation changed");
}

/// The claim finds due work through the queue's `(due_at, task_id)` index and reaches each task through
/// an index: no scan of `task_queue` or `delivery_task`, whose finished rows grow without bound (asked with
/// sequential scans discouraged, as above; which index of `delivery_task` an empty table's statistics
/// pick is the planner's choice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_reads_the_queue_by_its_due_index() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let mut conn = world.store.pool().acquire().await.expect("connection");
    sqlx::query("SET enable_seqscan = off").execute(&mut *conn).await.expect("set");
    let args = claim_args(T0, &["push", "miao"], 32, &[("miao", 10_000)]);
    let plan: Vec<String> = sqlx::query_scalar_with(&format!("EXPLAIN {}", herald_postgres::CLAIM_QUERY), args)
        .fetch_all(&mut *conn)
        .await
        .expect("explain");
    sqlx::query("RESET enable_seqscan").execute(&mut *conn).await.expect("reset");
    let plan = plan.join("\n");
    for table in ["task_queue", "delivery_task"] {
        assert!(!plan.contains(&format!("Seq Scan on {table}")), "scans {table}:\n{plan}");
    }
    assert!(plan.contains("task_queue_due"), "due work by the queue's index:\n{plan}");
    assert!(plan.contains(" on delivery_task t"), "the tasks are read:\n{plan}");
}

/// A task due the very millisecond of the claim is checked with one index probe, however the statistics
/// stand: `delivery_task` is never read whole. In live traffic a new task is due the millisecond it is
/// created, and the table keeps every finished task. Here the statistics come from 3,000 tasks that were
/// due and are rescheduled since, as in a server whose last `ANALYZE` saw a backlog; the one due task was
/// submitted at the claim's `now`. The negative control runs the earlier text of the same predicate
/// (`NOT EXISTS (… AND s.state = 'SENDING')`): the planner hashes it, and the claim reads the whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_due_at_the_claims_instant_is_checked_without_reading_every_task() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let pool = world.store.pool();
    sqlx::query(
        "WITH n AS (INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
           SELECT 'old', 'old-' || g, 'b', $1 - interval '1 minute', $1 + interval '1 day' \
           FROM generate_series(1, 3000) g RETURNING user_id, id) \
         INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
           created_at, updated_at) \
         SELECT user_id, id, 'push', 'PENDING', $1 - interval '1 minute', 8, $1, $1 FROM n",
    )
    .bind(at(T0))
    .execute(pool)
    .await
    .expect("backlog");
    sqlx::query("ANALYZE delivery_task, task_queue").execute(pool).await.expect("analyze");
    sqlx::query("UPDATE delivery_task SET next_attempt_at = $1 + interval '1 day' WHERE user_id = 'old'")
        .bind(at(T0))
        .execute(pool)
        .await
        .expect("reschedule");
    let due = world.submit("u1", "now", HOUR, None).await.expect("submit").tasks[0].task_id;

    let new_predicate = "(SELECT s.state FROM delivery_task s \
               WHERE s.user_id = q.user_id AND s.id = q.task_id) IS DISTINCT FROM 'SENDING'";
    let old_predicate = "NOT EXISTS (SELECT 1 FROM delivery_task s \
               WHERE s.user_id = q.user_id AND s.id = q.task_id AND s.state = 'SENDING')";
    assert!(herald_postgres::CLAIM_QUERY.contains(new_predicate), "the claim query's text changed");
    let explained = |query: String| async move {
        let mut tx = pool.begin().await.expect("begin");
        let explain = format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {query}");
        let plan: Vec<String> = sqlx::query_scalar_with(&explain, claim_args(T0, &["push"], 32, &[]))
            .fetch_all(&mut *tx)
            .await
            .expect("explain");
        tx.rollback().await.expect("rollback");
        plan.join("\n")
    };
    let plan = explained(herald_postgres::CLAIM_QUERY.to_owned()).await;
    assert!(!plan.contains("Seq Scan on delivery_task"), "the claim read delivery_task whole:\n{plan}");
    // The state is read by a subplan run per row (the channels' egress rows may be hashed: a few rows).
    assert!(plan.contains("(SubPlan 1) IS DISTINCT FROM 'SENDING'"), "one probe per row due now:\n{plan}");

    // Negative control: the earlier text, under the same statistics, hashes every task of the table.
    let earlier = herald_postgres::CLAIM_QUERY.replace(new_predicate, old_predicate);
    let tasks =
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM delivery_task").fetch_one(pool).await.expect("count");
    let control = explained(earlier).await;
    assert!(control.contains("hashed SubPlan"), "{control}");
    let scan =
        control.lines().find(|l| l.contains("Seq Scan on delivery_task s")).unwrap_or_else(|| panic!("{control}"));
    assert!(!scan.contains("never executed"), "the hash was built: {scan}");
    assert!(control.contains(&format!("Rows Removed by Filter: {tasks}")), "every task was read:\n{control}");

    let request =
        ClaimRequest { worker: "w1".into(), now: T0, lease: Millis(60_000), limit: 32, channels: world.table() };
    let claimed = world.store.claim(&request).await.expect("claim").claimed;
    assert_eq!(claimed.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![due], "the task due now is claimed");
}

/// A claim fills its batch past a task whose row a writer holds. Writers (a finish, a resolution) lock
/// the task row first and its queue row after, from the queue's trigger; a claim that locked the queue
/// row in that gap, and only then found the task row taken, used up a place of its `LIMIT` on a task it
/// could not take, and came back short — here empty — while a runnable task waited behind it, so the
/// worker waited for its next wake-up or poll. The writer here holds the older task's row for the whole
/// claim. The negative control runs the claim query without its check of the task row's lock: it takes
/// the queue row and returns nothing. Last, the check locks nothing it passes over: a task waiting for its
/// channel's slot stays unlocked (a plain conjunction, whose order the planner chooses, locked it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_the_next_task_when_a_writer_holds_the_first() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let held = world.submit("u1", "held", HOUR, None).await.expect("submit").tasks[0].task_id;
    let next = world.submit("u1", "next", HOUR, None).await.expect("submit").tasks[0].task_id;
    assert!(held < next, "the held task is the older, first in due order");
    let pool = world.store.pool();

    let mut writer = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM delivery_task WHERE user_id = 'u1' AND id = $1 FOR NO KEY UPDATE")
        .bind(held.0)
        .execute(&mut *writer)
        .await
        .expect("the writer locks the task row");

    let lock_check = "THEN EXISTS (SELECT 1 FROM delivery_task l WHERE l.user_id = q.user_id AND l.id = q.task_id \
               FOR NO KEY UPDATE SKIP LOCKED) ";
    assert!(herald_postgres::CLAIM_QUERY.contains(lock_check), "the claim query's text changed");
    let earlier = herald_postgres::CLAIM_QUERY.replace(lock_check, "THEN true ");
    let mut control = pool.begin().await.expect("begin");
    let rows = sqlx::query_with(&earlier, claim_args(T0, &["push"], 1, &[]))
        .fetch_all(&mut *control)
        .await
        .expect("the earlier claim query");
    control.rollback().await.expect("rollback");
    assert_eq!(rows.len(), 0, "without the check, the held task takes the only place and is then skipped");

    let request =
        ClaimRequest { worker: "w1".into(), now: T0, lease: Millis(60_000), limit: 1, channels: world.table() };
    let claimed = world.store.claim(&request).await.expect("claim").claimed;
    assert_eq!(claimed.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![next], "the next task is claimed");

    writer.rollback().await.expect("the writer lets go");
    let claimed = world.store.claim(&request).await.expect("claim").claimed;
    assert_eq!(claimed.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![held], "then the held one");

    // The lock is taken only for a row that passed every other check: a claim scanning past a task of a
    // rate-limited channel whose slot is taken leaves that task's row unlocked.
    world.user("u2", &["miao"]).await.expect("user");
    let waiting = world.submit("u2", "waiting", HOUR, None).await.expect("submit").tasks[0].task_id;
    sqlx::query("INSERT INTO channel_egress (channel, last_call_at) VALUES ('miao', $1)")
        .bind(at(T0))
        .execute(pool)
        .await
        .expect("the slot is taken");
    let mut claim = pool.begin().await.expect("begin");
    let rows = sqlx::query_with(herald_postgres::CLAIM_QUERY, claim_args(T0, &["miao"], 1, &[("miao", 60_000)]))
        .fetch_all(&mut *claim)
        .await
        .expect("the claim query");
    assert_eq!(rows.len(), 0, "the channel's slot is taken");
    let mut other = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM delivery_task WHERE user_id = 'u2' AND id = $1 FOR NO KEY UPDATE NOWAIT")
        .bind(waiting.0)
        .execute(&mut *other)
        .await
        .expect("the waiting task's row is not locked by the claim that passed it over");
    other.rollback().await.expect("rollback");
    claim.rollback().await.expect("rollback");
}

/// The claim query's five parameters, in its order: the claim's instant, the channels it serves, its
/// limit, and the rate-limited channels among them with their spacing (ms).
fn claim_args(now: Timestamp, channels: &[&str], limit: i64, limited: &[(&str, i64)]) -> PgArguments {
    let mut args = PgArguments::default();
    args.add(at(now)).expect("now");
    args.add(channels.iter().map(|name| (*name).to_owned()).collect::<Vec<String>>()).expect("channels");
    args.add(limit).expect("limit");
    args.add(limited.iter().map(|(name, _)| (*name).to_owned()).collect::<Vec<String>>()).expect("limited");
    args.add(limited.iter().map(|(_, spacing)| *spacing).collect::<Vec<i64>>()).expect("spacing");
    args
}

/// A stored timestamp as the database takes it.
fn at(t: Timestamp) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(t.0).expect("a valid instant")
}

/// A worker started on a new installation does not go on reading `delivery_task` whole as the table
/// grows. Its connection plans the claim's prepared statements once, after their first runs, while the
/// table holds a few rows: a hash join over a sequential scan. The claim's statements change text (a new
/// plan generation) each time the rows claimed through the store have doubled from 256, and each
/// connection then plans them again. Here one connection claims 8 tasks, the table grows by 50,000
/// unanalyzed rows, and 320 more tasks are claimed: the claims before the generation changes (the
/// negative control: the plans made on the small table) read the table whole, those after it do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_plans_are_made_again_as_the_claimed_rows_double() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    // Every claim runs on the backend that cached the first plans.
    let store = one_connection_unanalyzed(&world, "delivery_task", herald_postgres::Planning::Chosen).await;
    for i in 0..8 {
        world.submit("u1", &format!("small-{i}"), HOUR, None).await.expect("submit");
        assert_eq!(claim_and_finish(&world, &store, 1).await, 1);
    }
    sqlx::query(
        "WITH n AS (INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
           SELECT 'old', 'old-' || g, 'b', $1, $1 FROM generate_series(1, 50000) g RETURNING user_id, id) \
         INSERT INTO delivery_task (user_id, notification_id, channel, state, max_attempts, attempt_count, \
           last_attempt_no, created_at, updated_at) \
         SELECT user_id, id, 'push', 'SENT', 8, 1, 1, $1, $1 FROM n",
    )
    .bind(at(T0))
    .execute(world.store.pool())
    .await
    .expect("grow");
    for i in 0..320 {
        world.submit("u1", &format!("large-{i}"), HOUR, None).await.expect("submit");
    }
    // The last of the eight claims of 31 below still runs the first generation's plans, the next does not.
    assert_eq!(herald_postgres::plan_generation(8 + 7 * 31), 0);
    assert_eq!(herald_postgres::plan_generation(8 + 8 * 31), 1);

    // Each task is updated twice, by its claim and by its finish.
    let (scans_before, _) = table_scans(&world, &store, "delivery_task", 2 * 8).await;
    for _ in 0..8 {
        assert_eq!(claim_and_finish(&world, &store, 31).await, 31);
    }
    let (scans_control, _) = table_scans(&world, &store, "delivery_task", 2 * (8 + 8 * 31)).await;
    assert!(scans_control - scans_before >= 8, "the plans made on a few rows read the grown table whole");

    // The next claims (the second generation's first runs, then its cached plans) go by index.
    let mut claimed = 0;
    for _ in 0..9 {
        claimed += claim_and_finish(&world, &store, 8).await;
    }
    assert_eq!(claimed, 320 - 8 * 31);
    let (scans_after, _) = table_scans(&world, &store, "delivery_task", 2 * (8 + 320)).await;
    assert_eq!(scans_after - scans_control, 0, "a claim read the grown table whole after the generation changed");
}

/// Five notifications on a 10 s channel, submitted one second apart: they are called in the order they
/// became due, one per slot, and the waiting ones are not rewritten at every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_backlog_drains_oldest_first_without_being_rewritten() {
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(10_000);
    })
    .await
    .expect("world");
    let users = ["a", "b", "c", "d", "e"];
    let mut tasks = Vec::new();
    for (i, user) in users.iter().enumerate() {
        world.user(user, &["miao"]).await.expect("user");
        world.manual.set(T0 + Millis::from_secs(u64::try_from(i).expect("small")));
        tasks.push(world.submit(user, "e1", HOUR, None).await.expect("submit").tasks[0].task_id);
    }
    let updated = |task: TaskId| {
        let pool = world.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT updated_at::text FROM delivery_task WHERE id = $1")
                .bind(task.0)
                .fetch_one(&pool)
                .await
                .expect("updated_at")
        }
    };
    let before = updated(tasks[4]).await;
    let worker = world.worker("w1", 60_000);
    for slot in 0..5u64 {
        world.manual.set(T0 + Millis::from_secs(5 + slot * 11));
        for _ in 0..3 {
            // Several cycles per slot, as many workers would run: only one call per slot.
            let _ = worker.run_once().await.expect("cycle");
        }
        assert_eq!(world.miao.sends(), slot + 1, "one call per slot");
        if slot < 4 {
            assert_eq!(updated(tasks[4]).await, before, "the youngest waits untouched until its turn");
        }
    }
    let order: Vec<String> = world.miao.messages().into_iter().map(|m| m.to).collect();
    let expected: Vec<String> = users.iter().map(|u| World::destination(u, "miao")).collect();
    assert!(order == expected, "called oldest first (destinations withheld from this message)");
}

/// `PgClock` reads the database at most once a second and carries the reading forward: what it hands
/// out stays between two fresh reads of `clock_timestamp()` taken around it (give or take the
/// milliseconds of a read's own round trip), across a re-read, and never goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_carried_forward_stays_the_databases() {
    use herald_ports::Clock as _;
    let db = herald_tests::db::TestDb::fresh().await.expect("db");
    let clock = db.store.clock();
    let fresh = || async {
        let t: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(db.store.pool()).await.expect("read");
        t.timestamp_millis()
    };
    // A read's round trip on a loaded machine; the reading is anchored within it.
    const SLACK_MS: i64 = 100;
    let started = std::time::Instant::now();
    let mut last = 0;
    let mut checks = 0;
    while started.elapsed() < herald_postgres::PgClock::REREAD * 2 + std::time::Duration::from_millis(200) {
        let before = fresh().await;
        let now = clock.now().await.expect("clock").0;
        let after = fresh().await;
        assert!(before - SLACK_MS <= now && now <= after + SLACK_MS, "{before} ≤ {now} ≤ {after} (± {SLACK_MS} ms)");
        assert!(now >= last, "the clock went back: {last} then {now}");
        last = now;
        checks += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(checks >= 10, "only {checks} checks");
}
