//! The global egress interval (SPEC §7): held by the `channel_egress` row across workers and processes;
//! a task that may not be called yet is left as it is — due, in its place in the backlog — and the
//! claim passes its channel over until the slot is free; a holder that missed its slot (more than the
//! guard after its claim's `now`) does not call and gives its attempt back; no budget is spent.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald_core::worker::{Report, Worker, WorkerConfig};
use herald_domain::{Millis, TaskState, Timestamp};
use herald_ports::{Clock, StoreError};
use herald_tests::clock::ManualClock;
use herald_tests::wait::wait_until;
use herald_tests::world::{ClockMode, World, T0};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const HOUR: u64 = 3_600_000;

/// A world on the manual clock whose Miaotixing channel may be called once every 10 s (plus the default
/// guard).
async fn miao_every_ten_seconds() -> World {
    World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(10_000);
    })
    .await
    .expect("world")
}

/// Two recipients on a 10 s channel: the second call waits for interval + guard (11 s), with no attempt
/// spent and its row untouched (still due: it keeps its place), and happens once the clock gets there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_task_waits_untouched_for_the_next_slot() {
    let world = miao_every_ten_seconds().await;
    world.user("a", &["miao"]).await.expect("a");
    world.user("b", &["miao"]).await.expect("b");
    let first = world.submit("a", "e1", HOUR, None).await.expect("submit a");
    let second = world.submit("b", "e1", HOUR, None).await.expect("submit b");
    let worker = world.worker("w1", 60_000);

    let cycle = worker.run_once().await.expect("cycle");
    assert_eq!(world.miao.requests(), 1, "one call in the first interval: {cycle:?}");
    assert_eq!(cycle.iter().filter(|r| matches!(r, Report::Deferred(_))).count(), 1, "{cycle:?}");
    let mut views = Vec::new();
    for created in [&first, &second] {
        views.push(world.task(created.notification_id, created.tasks[0].task_id).await.expect("view"));
    }
    let deferred = views.iter().find(|v| v.state == TaskState::Pending).expect("one deferred task");
    assert_eq!(deferred.attempt_count, 0, "a deferral spends no budget");
    assert!(deferred.attempts.is_empty(), "a deferral writes no attempt");
    assert_eq!(deferred.next_attempt_at, Some(T0), "left as it was: due, and first in line for the next slot");

    world.advance(10_999);
    assert!(worker.run_once().await.expect("cycle").is_empty(), "not taken before interval 10 s + guard 1 s");
    world.advance(1);
    let cycle = worker.run_once().await.expect("cycle");
    assert!(matches!(cycle.as_slice(), [Report::Sent(_)]), "{cycle:?}");
    assert_eq!(world.miao.requests(), 2);
    for created in [&first, &second] {
        let view = world.task(created.notification_id, created.tasks[0].task_id).await.expect("view");
        assert_eq!((view.state, view.attempt_count), (TaskState::Sent, 1));
    }
}

/// A clock whose reading takes `delay` to come back, like a database clock under load: the worker's
/// measurement starts before the read, so the slot is already older than the guard when it would send.
struct SlowClock {
    inner: Arc<ManualClock>,
    delay: Duration,
}

#[async_trait]
impl Clock for SlowClock {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        let now = self.inner.read();
        tokio::time::sleep(self.delay).await;
        Ok(now)
    }
}

/// A holder later than the guard does not call: the attempt is given back (no attempt row, no budget
/// spent, task due again), and a timely holder then sends once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_missed_its_slot_does_not_call_and_spends_nothing() {
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(10_000);
        miao.egress_guard_ms = Some(100);
    })
    .await
    .expect("world");
    world.user("a", &["miao"]).await.expect("a");
    let created = world.submit("a", "e1", HOUR, None).await.expect("submit");
    let task = created.tasks[0].task_id;
    let slow = Worker::new(
        world.store.clone(),
        world.registry.clone(),
        world.cipher.clone(),
        Arc::new(SlowClock { inner: world.manual.clone(), delay: Duration::from_millis(250) }),
        WorkerConfig { id: "slow".into(), lease: Millis(60_000), batch: 8, idle_poll: Duration::from_millis(20) },
    );

    let cycle = slow.run_once().await.expect("cycle");
    assert_eq!(cycle, vec![Report::Deferred(task)], "given back, not called");
    assert_eq!(world.miao.requests(), 0, "the channel was not called");
    let view = world.task(created.notification_id, task).await.expect("view");
    assert_eq!((view.state, view.attempt_count), (TaskState::Pending, 0), "no budget spent");
    assert!(view.attempts.is_empty(), "no attempt row stays for a call that was not made");
    assert_eq!(view.next_attempt_at, Some(T0), "due again at once");
    assert!(view.last_error.as_deref().is_some_and(|e| e.contains("egress slot or lease")), "{:?}", view.last_error);

    // The slot the slow holder reserved is spent: the next call waits for interval + guard after it.
    let timely = world.worker("timely", 60_000);
    let cycle = timely.run_once().await.expect("cycle");
    assert!(cycle.is_empty(), "the missed slot still counts: nothing is taken before the next one: {cycle:?}");
    world.advance(10_100);
    let cycle = timely.run_once().await.expect("cycle");
    assert_eq!(cycle, vec![Report::Sent(task)]);
    let view = world.task(created.notification_id, task).await.expect("view");
    assert_eq!((view.state, view.attempt_count, view.attempts.len()), (TaskState::Sent, 1, 1));
    assert_eq!(world.miao.sends(), 1);
}

/// Several worker processes drain eight tasks on a Miaotixing-kind channel with a 300 ms interval
/// (default guard 30 ms), all judged by the database clock. The actual calls, as the stand-in saw them
/// arrive on its monotonic clock, are never closer than the interval, and no deferral or give-back
/// spent budget: every task is SENT with exactly one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_interval_holds_across_worker_processes() {
    const INTERVAL_MS: u64 = 300;
    const TASKS: usize = 8;
    const PROCESSES: usize = 3;
    let world = World::with(ClockMode::Database, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(INTERVAL_MS);
    })
    .await
    .expect("world");
    let mut created = Vec::new();
    for n in 0..TASKS {
        let user = format!("u{n}");
        world.user(&user, &["miao"]).await.expect("user");
        created.push(world.submit(&user, "e1", HOUR, None).await.expect("submit"));
    }

    let mut children = Vec::new();
    for p in 0..PROCESSES {
        let child = Command::new(herald_tests::bins::binary("herald-test-worker"))
            .args([
                world.db.url.as_str(),
                &world.push.base_url(),
                &world.sms.base_url(),
                &format!("process-{p}"),
                "10000",
                "1000",
                "--miao",
                &world.miao.base_url(),
                "--miao-interval-ms",
                &INTERVAL_MS.to_string(),
                "--loop-ms",
                "60000",
                "--batch",
                "2",
            ])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("worker process");
        children.push(child);
    }
    let mut reports = Vec::new();
    for mut child in children {
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut done = false;
        while let Some(line) = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("worker process answers")
            .expect("read")
        {
            done |= line == "DONE";
            reports.push(line);
        }
        let status = child.wait().await.expect("exit");
        assert!(status.success() && done, "worker process failed: {status:?}");
    }

    let mut times = world.miao.request_times();
    times.sort();
    assert_eq!(times.len(), TASKS, "one call per task: {reports:?}");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let min_gap = gaps.iter().min().copied().expect("gaps");
    let deferrals = reports.iter().filter(|r| r.contains("Deferred")).count();
    println!(
        "egress across {PROCESSES} processes: {TASKS} calls, interval {INTERVAL_MS} ms, minimum gap {:.1} ms, \
         {deferrals} deferrals or give-backs",
        min_gap.as_secs_f64() * 1000.0
    );
    assert!(min_gap >= Duration::from_millis(INTERVAL_MS), "calls closer than the interval: {gaps:?}");
    for c in &created {
        let view = world.task(c.notification_id, c.tasks[0].task_id).await.expect("view");
        assert_eq!((view.state, view.attempt_count), (TaskState::Sent, 1), "{view:?}");
    }
    assert_eq!(world.miao.sends(), TASKS as u64);
}

/// The deferral and lease-expiry counters carry the channel: an operator sees which channel waits for
/// its slot and which one lost a holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferrals_and_lease_expiries_are_counted_per_channel() {
    use herald_ports::store::ClaimRequest;

    let metrics = herald_tests::api::metrics_handle();
    let world = miao_every_ten_seconds().await;
    world.user("c", &["push"]).await.expect("c");
    world.submit("c", "e1", HOUR, None).await.expect("submit c");
    // A holder that takes the push task and is never heard of again.
    let services = world.services();
    let request = ClaimRequest {
        worker: "gone".into(),
        now: services.clock.now().await.expect("now"),
        lease: Millis(1_000),
        limit: 10,
        channels: world.table(),
    };
    assert_eq!(services.delivery.claim(&request).await.expect("claim").claimed.len(), 1);
    world.user("a", &["miao"]).await.expect("a");
    world.user("b", &["miao"]).await.expect("b");
    world.submit("a", "e1", HOUR, None).await.expect("submit a");
    world.submit("b", "e1", HOUR, None).await.expect("submit b");
    world.advance(2_000);

    let cycle = world.worker("w1", 60_000).run_once().await.expect("cycle");
    assert_eq!(cycle.iter().filter(|r| matches!(r, Report::Deferred(_))).count(), 1, "{cycle:?}");
    let text = metrics.render();
    assert!(text.contains("herald_deferrals_total{channel=\"miao\"}"), "{text}");
    assert!(text.contains("herald_lease_expiries_total{channel=\"push\"}"), "{text}");
}

/// A claim that finds a rate-limited channel's slot taken while tasks of it are due tells when the slot
/// is free again — whether it deferred the tasks or passed the channel over — and tells nothing once no
/// task of the channel waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_tells_when_the_slot_of_a_channel_with_tasks_due_is_free() {
    use herald_ports::store::ClaimRequest;

    let world = miao_every_ten_seconds().await;
    world.user("a", &["miao"]).await.expect("a");
    world.user("b", &["miao"]).await.expect("b");
    world.user("c", &["push"]).await.expect("c");
    world.submit("a", "e1", HOUR, None).await.expect("submit a");
    world.submit("b", "e1", HOUR, None).await.expect("submit b");
    world.submit("c", "e1", HOUR, None).await.expect("submit c");
    let services = world.services();
    let claim = |limit| {
        let (store, clock, table) = (services.delivery.clone(), services.clock.clone(), world.table());
        async move {
            let now = clock.now().await.expect("now");
            let request = ClaimRequest { worker: "w".into(), now, lease: Millis(60_000), limit, channels: table };
            store.claim(&request).await.expect("claim")
        }
    };
    // Interval 10 s + default guard 1 s.
    let slot = T0 + Millis(11_000);

    let batch = claim(10).await;
    assert_eq!((batch.claimed.len(), batch.deferred.len()), (2, 1), "push and one miao call; one deferred");
    assert_eq!(batch.next_slot, Some(slot), "the deferred task's slot");

    world.advance(5_000);
    let batch = claim(10).await;
    assert!(batch.claimed.is_empty() && batch.deferred.is_empty(), "miao is passed over: {batch:?}");
    assert_eq!(batch.next_slot, Some(slot), "passed over, and told when its slot is free");

    world.advance(6_000);
    let batch = claim(10).await;
    assert_eq!(batch.claimed.len(), 1, "the second miao task at its slot: {batch:?}");
    assert_eq!(batch.next_slot, None, "no miao task waits for the next slot (the others are being sent)");
}

/// The Miaotixing channel's slots in the two tests below, and the tasks due on it.
const SLOT_INTERVAL_MS: u64 = 100;
const SLOT_GUARD_MS: u64 = 200;
const SLOT_TASKS: usize = 6;

/// A world whose Miaotixing channel is rate-limited (`SLOT_INTERVAL_MS` + `SLOT_GUARD_MS`: generous, so that a slow
/// claim on a loaded machine does not give its call back), with `SLOT_TASKS` users each owing one call on it.
async fn slotted_miao_backlog() -> World {
    let world = World::with(ClockMode::Database, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(SLOT_INTERVAL_MS);
        miao.egress_guard_ms = Some(SLOT_GUARD_MS);
    })
    .await
    .expect("world");
    for n in 0..SLOT_TASKS {
        let user = format!("u{n}");
        world.user(&user, &["miao"]).await.expect("user");
        world.submit(&user, "e1", HOUR, None).await.expect("submit");
    }
    world
}

/// One worker, polling only every hour and woken by nothing, drains a backlog on a channel with a 100 ms
/// interval at the channel's slots: it claims again when the slot is free, once per slot, instead of
/// waiting for its poll. (Before, it made one call and then waited the hour: the wait below, which is a
/// safety limit and not a timing assertion, gave up.) The guard is generous so that a slow claim on a
/// loaded machine does not give its call back (each give-back costs a slot and a claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_claims_a_rate_limited_channel_at_its_slots_not_at_its_poll() {
    let world = slotted_miao_backlog().await;
    let worker = Arc::new(world.services().worker(WorkerConfig {
        id: "w1".into(),
        lease: Millis(60_000),
        batch: 8,
        idle_poll: Duration::from_secs(3_600),
    }));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn({
        let worker = Arc::clone(&worker);
        async move { worker.run(stopped, None).await }
    });
    wait_until("every task sent without a poll", || async { world.miao.sends() == SLOT_TASKS as u64 }).await;
    stop.send(true).expect("stop");
    running.await.expect("loop");

    let claims = worker.cycles_run();
    let mut times = world.miao.request_times();
    times.sort();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<Duration>() / u32::try_from(gaps.len()).expect("few");
    println!(
        "{SLOT_TASKS} calls at a {SLOT_INTERVAL_MS} ms interval (+{SLOT_GUARD_MS} ms guard) by one worker: {claims} claims, mean gap \
         {:.1} ms",
        mean.as_secs_f64() * 1000.0
    );
    assert!(gaps.iter().all(|g| *g >= Duration::from_millis(SLOT_INTERVAL_MS)), "the interval holds: {gaps:?}");
    // One claim per slot: each takes the slot it woke for, and the last finds nothing more to wait for.
    // Claims made in a hurry (a spin) would be hundreds.
    assert!(claims <= 2 * SLOT_TASKS as u64, "{claims} claims for {SLOT_TASKS} calls");
}

/// Three worker loops (as three processes would) compete for one channel's slots: each learns the same
/// slot and only one gets it. Every loop claims at most about once per slot — the ones that keep losing
/// back off — and the channel still runs at its slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_workers_claim_at_most_once_per_slot_each() {
    const LOOPS: usize = 3;
    let world = slotted_miao_backlog().await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    let mut running = Vec::new();
    for n in 0..LOOPS {
        let worker = Arc::new(world.services().worker(WorkerConfig {
            id: format!("w{n}"),
            lease: Millis(60_000),
            batch: 8,
            idle_poll: Duration::from_secs(3_600),
        }));
        let (worker_in_loop, stopped) = (Arc::clone(&worker), stopped.clone());
        running.push(tokio::spawn(async move { worker_in_loop.run(stopped, None).await }));
        workers.push(worker);
    }
    wait_until("every task sent without a poll", || async { world.miao.sends() == SLOT_TASKS as u64 }).await;
    stop.send(true).expect("stop");
    for loop_ in running {
        loop_.await.expect("loop");
    }

    let claims: Vec<u64> = workers.iter().map(|w| w.cycles_run()).collect();
    let mut times = world.miao.request_times();
    times.sort();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    println!("{SLOT_TASKS} calls, {SLOT_INTERVAL_MS} ms + {SLOT_GUARD_MS} ms, {LOOPS} competing loops: claims per loop {claims:?}");
    assert!(gaps.iter().all(|g| *g >= Duration::from_millis(SLOT_INTERVAL_MS)), "the interval holds: {gaps:?}");
    // About one slot per task (a call given back costs one more): no loop claims more often than that,
    // plus the claim that learns the first slot and one that finds nothing left.
    for (n, c) in claims.iter().enumerate() {
        assert!(*c <= 2 * SLOT_TASKS as u64, "loop {n} made {c} claims for {SLOT_TASKS} slots: {claims:?}");
    }
}
