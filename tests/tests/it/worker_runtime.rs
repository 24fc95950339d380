//! The worker runtime around the cycle (issue 5): wake-ups through LISTEN/NOTIFY, graceful shutdown
//! mid-call, surviving killed database connections, and the Prometheus metrics. Real PostgreSQL (the
//! database clock, so leases expire in real time), real stand-in channels, Herald's own worker loops.
//!
//! Waiting loops carry a generous safety timeout so a broken build fails instead of hanging; none of
//! them asserts how fast anything happened.

use std::sync::Arc;
use std::time::Duration;

use herald_core::worker::{Worker, WorkerConfig};
use herald_domain::{Millis, NotificationId, TaskId, TaskState};
use herald_ports::TaskView;
use herald_postgres::PgStore;
use herald_standin::Script;
use herald_tests::wait::wait_until;
use herald_tests::{ClockMode, World};
use sqlx::Connection as _;
use tokio::sync::watch;

/// Long enough that a loop woken within a test can only have been woken by a notification.
const HOUR: Duration = Duration::from_secs(3600);

fn worker(world: &World, id: &str, lease_ms: u64, batch: u32, idle_poll: Duration) -> Worker {
    worker_on(world, world.store.clone(), id, lease_ms, batch, idle_poll)
}

/// [`worker`] over another store than the world's (its channels, keys and clock all the same).
fn worker_on(world: &World, store: Arc<PgStore>, id: &str, lease_ms: u64, batch: u32, idle_poll: Duration) -> Worker {
    Worker::new(
        store,
        world.registry.clone(),
        world.cipher.clone(),
        world.clock.clone(),
        WorkerConfig { id: id.to_owned(), lease: Millis(lease_ms), batch, idle_poll },
    )
}

async fn task(world: &World, notification: NotificationId, task: TaskId) -> TaskView {
    world.task(notification, task).await.expect("task view")
}

fn is_settled(view: &TaskView) -> bool {
    matches!(view.state, TaskState::Sent | TaskState::Failed | TaskState::Suppressed) || view.is_parked()
}

/// Tasks that are neither final nor parked: still owed work by some worker.
fn unsettled() -> String {
    format!(
        "SELECT count(*) FROM delivery_task t WHERE NOT (t.state IN ('SENT', 'FAILED', 'SUPPRESSED') OR {})",
        herald_postgres::PARKED
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_wakes_an_idle_worker_through_notify() {
    let world = World::new(ClockMode::Database).await.expect("world");
    world.user("alice", &["push"]).await.expect("user");
    let (stop_tx, stop_rx) = watch::channel(false);
    let (wake, listener) = herald_app::wakeups::start((*world.store).clone(), stop_rx.clone()).await;
    let worker = Arc::new(worker(&world, "w-wake", 60_000, 8, HOUR));
    let running = tokio::spawn({
        let (worker, stop) = (Arc::clone(&worker), stop_rx.clone());
        async move { worker.run(stop, Some(wake)).await }
    });
    // The first cycle finds nothing; from then on the loop waits for an hour or a wake-up.
    wait_until("the first, empty cycle", || async { worker.cycles_run() >= 1 }).await;
    let idle_after = worker.cycles_run();

    let created = world.submit("alice", "order-1", 60_000, None).await.expect("submit");
    let (id, task_id) = (created.notification_id, created.tasks[0].task_id);
    wait_until("the woken loop to send the task", || async {
        task(&world, id, task_id).await.state == TaskState::Sent
    })
    .await;

    assert!(worker.cycles_run() > idle_after, "the loop ran a cycle after the notification");
    assert_eq!(world.push.sends_for(&task(&world, id, task_id).await.reference), 1);
    stop_tx.send_replace(true);
    running.await.expect("the loop returns on shutdown");
    listener.await.expect("the listener task returns on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_call_lets_the_call_finish_and_leaves_nothing_sending() {
    // Push answers after 1 s, within its 5 s timeout (→ SENT); sms accepts and never answers, so its
    // 300 ms timeout ends the call (→ UNKNOWN). Both calls are in flight when shutdown is requested.
    let world = World::with(ClockMode::Database, |configs| {
        configs.iter_mut().find(|c| c.name == "push").expect("push").timeout_ms = 5_000;
    })
    .await
    .expect("world");
    world.user("bob", &["push", "sms"]).await.expect("user");
    world.push.script(Script::Delay(Duration::from_secs(1)));
    world.sms.script(Script::HangAfterAccept);
    let created = world.submit("bob", "order-2", 60_000, None).await.expect("submit");
    let id = created.notification_id;

    let (stop_tx, stop_rx) = watch::channel(false);
    let worker = worker(&world, "w-stop", 60_000, 8, Duration::from_millis(20));
    let running = tokio::spawn(async move { worker.run(stop_rx, None).await });
    wait_until("both channels to have accepted", || async { world.push.sends() == 1 && world.sms.sends() == 1 }).await;
    let push_task = created.tasks.iter().find(|t| t.channel.as_str() == "push").expect("push task").task_id;
    assert_eq!(task(&world, id, push_task).await.state, TaskState::Sending, "the push call is still in flight");

    stop_tx.send_replace(true);
    running.await.expect("the loop returns after the cycle in flight");

    let sending = world.db.count("SELECT count(*) FROM delivery_task WHERE state = 'SENDING'").await.expect("count");
    assert_eq!(sending, 0, "no task is left SENDING after a graceful exit");
    for summary in &created.tasks {
        let view = task(&world, id, summary.task_id).await;
        let expected = if summary.channel.as_str() == "push" { TaskState::Sent } else { TaskState::Unknown };
        assert_eq!(view.state, expected, "{} ended {}", summary.channel, view.state);
        assert!(view.attempts.iter().all(|a| a.outcome.is_some()), "every attempt of {} is finished", summary.channel);
    }
}

/// Terminates every other backend of the test's database; returns how many it hit.
async fn kill_connections(url: &str) -> i64 {
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else { return 0 };
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    let _ = conn.close().await;
    killed.into_iter().filter(|k| *k).count() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_killed_database_connections_and_lose_nothing() {
    const USERS: usize = 50;
    let t0 = std::time::Instant::now();
    let world = World::new(ClockMode::Database).await.expect("world");
    let mut created = Vec::new();
    for u in 0..USERS {
        let user = format!("user-{u}");
        world.user(&user, &["push", "sms"]).await.expect("user");
    }
    for u in 0..USERS {
        created.push(world.submit(&format!("user-{u}"), "order-kill", 600_000, None).await.expect("submit"));
    }
    // Calls take a moment, so kills land between claim and finish too.
    world.push.script_all(std::iter::repeat_n(Script::Delay(Duration::from_millis(150)), USERS));
    world.sms.script_all(std::iter::repeat_n(Script::Delay(Duration::from_millis(150)), USERS));

    let t_setup = t0.elapsed();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (wake, listener) = herald_app::wakeups::start((*world.store).clone(), stop_rx.clone()).await;
    let mut loops = Vec::new();
    let mut workers = Vec::new();
    for i in 0..4 {
        // Lease 2.5 s > client timeout 300 ms + finish margin: an unrecorded finish is taken over after it.
        let worker = Arc::new(worker(&world, &format!("w-kill-{i}"), 2_500, 4, Duration::from_millis(50)));
        let (stop, wake, running) = (stop_rx.clone(), wake.clone(), Arc::clone(&worker));
        loops.push(tokio::spawn(async move { running.run(stop, Some(wake)).await }));
        workers.push(worker);
    }

    let mut killed = 0;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        killed += kill_connections(&world.db.url).await;
    }
    assert!(killed > 0, "the kills hit the workers' connections");
    for running in &loops {
        assert!(!running.is_finished(), "every worker loop is still running after the kills");
    }
    let cycles_after_kills: Vec<u64> = workers.iter().map(|w| w.cycles_run()).collect();

    let t_kills = t0.elapsed();
    wait_until("every task to settle", || async { matches!(world.db.count(&unsettled()).await, Ok(0)) }).await;
    let t_settled = t0.elapsed();
    for (worker, before) in workers.iter().zip(cycles_after_kills) {
        // Idle loops poll every 50 ms, so a live loop keeps counting cycles.
        wait_until("a loop to run a cycle after the kills", || async { worker.cycles_run() > before }).await;
    }
    stop_tx.send_replace(true);
    for running in loops {
        running.await.expect("a worker loop never panics");
    }
    listener.await.expect("listener task");

    let tasks = world.db.count("SELECT count(*) FROM delivery_task").await.expect("count");
    assert_eq!(tasks, (USERS * 2) as i64, "no task lost");
    let mut sent = 0;
    for c in &created {
        for summary in &c.tasks {
            let view = task(&world, c.notification_id, summary.task_id).await;
            assert!(is_settled(&view), "task {} ended {} (parked: {})", view.task_id, view.state, view.is_parked());
            let stand_in = if summary.channel.as_str() == "push" { &world.push } else { &world.sms };
            let sends = stand_in.sends_for(&view.reference);
            // Push resends with the same key (replays are no send); sms queries before resending.
            assert!(sends <= 1, "task {} on {} was really sent {sends} times", view.task_id, summary.channel);
            if view.state == TaskState::Sent {
                assert_eq!(sends, 1, "task {} is SENT, so the channel accepted it once", view.task_id);
                sent += 1;
            }
        }
    }
    let expired =
        world.db.count("SELECT count(*) FROM delivery_attempt WHERE outcome = 'LEASE_EXPIRED'").await.expect("count");
    let parked = world.db.count("SELECT count(*) FROM delivery_task WHERE state = 'UNKNOWN'").await.expect("count");
    println!(
        "{killed} connections killed; {sent} of {tasks} tasks SENT, {parked} parked; {expired} attempts taken \
         over after their lease (finish or claim lost to a kill); setup {t_setup:?}, kills until {t_kills:?}, \
         settled at {t_settled:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_attempts_by_channel_and_outcome_and_the_task_gauges() {
    let handle = herald_app::metrics::install().expect("recorder");
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("carol", &["push", "miao"]).await.expect("user");
    world.miao.script(Script::HangAfterAccept);
    world.submit("carol", "order-3", 60_000, None).await.expect("submit");
    let reports = worker(&world, "w-metrics", 60_000, 8, Duration::from_millis(20)).drain(5).await.expect("drain");
    assert_eq!(reports.len(), 2, "one push send, one Miaotixing timeout: {reports:?}");

    herald_core::metrics::TaskGauges::default().refresh(&*world.store).await.expect("gauges");
    let text = handle.render();
    let value = |series: &str| -> Option<f64> {
        text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
    };
    // Counters are process-wide (other tests add to them), so these are lower bounds.
    assert!(value(r#"herald_attempts_total{channel="push",outcome="ACCEPTED"}"#) >= Some(1.0), "{text}");
    assert!(value(r#"herald_attempts_total{channel="miao",outcome="TIMEOUT"}"#) >= Some(1.0), "{text}");
    assert!(value(r#"herald_claim_to_finish_seconds_count{channel="push"}"#) >= Some(1.0), "{text}");
    // Gauges come from this test's database.
    assert_eq!(value(r#"herald_tasks{channel="push",state="SENT"}"#), Some(1.0), "{text}");
    assert_eq!(value(r#"herald_tasks{channel="miao",state="UNKNOWN"}"#), Some(1.0), "{text}");
    assert_eq!(value(r#"herald_parked_tasks{channel="miao"}"#), Some(1.0), "{text}");
    assert_eq!(value(r#"herald_parked_tasks{channel="push"}"#), Some(0.0), "{text}");
}

/// Plans used so far by the statements prepared on `pool`'s one connection whose text starts with
/// `start`: (generic, custom), summed.
async fn plans_used(pool: &sqlx::PgPool, start: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT COALESCE(sum(generic_plans), 0)::bigint, COALESCE(sum(custom_plans), 0)::bigint \
         FROM pg_prepared_statements WHERE starts_with(statement, $1)",
    )
    .bind(start)
    .fetch_one(pool)
    .await
    .expect("pg_prepared_statements")
}

/// Delivers `count` notifications to alice's push, one task per cycle, through a worker over `store`.
async fn deliver(world: &World, store: &Arc<PgStore>, tag: &str, count: usize) {
    for i in 0..count {
        world.submit("alice", &format!("{tag}-{i}"), 60_000, None).await.expect("submit");
    }
    let worker = worker_on(world, store.clone(), &format!("w-{tag}"), 60_000, 1, HOUR);
    let reports = worker.drain(count + 5).await.expect("drain");
    assert_eq!(reports.len(), count, "one send per notification: {reports:?}");
}

const CLAIM: &str = "WITH due AS MATERIALIZED";
const CLAIM_WRITE: &str = "WITH arrays AS MATERIALIZED (";
const FINISH_BATCH: &str = "WITH input AS (";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_write_keeps_one_plan_for_batches_of_any_size() {
    let world = World::new(ClockMode::Database).await.expect("world");
    world.user("alice", &["push"]).await.expect("user");
    let store = Arc::new(PgStore::connect(&world.db.url, 1).await.expect("store"));
    // Tables large enough, and analyzed, for every plan to find rows by key: the choice between a plan
    // made for the parameters and the generic one then turns on how many rows each expects.
    sqlx::query(
        "WITH n AS (INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
           SELECT 'old', 'old-' || g, 'b', now(), now() FROM generate_series(1, 5000) g RETURNING user_id, id) \
         INSERT INTO delivery_task (user_id, notification_id, channel, state, max_attempts, attempt_count, \
           last_attempt_no, created_at, updated_at) \
         SELECT user_id, id, 'push', 'SENT', 8, 1, 1, now(), now() FROM n",
    )
    .execute(store.pool())
    .await
    .expect("grow");
    sqlx::query("ANALYZE notification, delivery_task, task_queue").execute(store.pool()).await.expect("analyze");

    // Eight claims of one task each on one connection left to PostgreSQL's choice, as `herald worker`
    // claims: PostgreSQL plans the first five runs for their parameters, then keeps the generic plan.
    deliver(&world, &store, "write", 8).await;
    let (generic, custom) = plans_used(store.pool(), CLAIM_WRITE).await;
    assert!(custom <= 5, "planned for its parameters only while PostgreSQL compares: {custom} times");
    assert!(generic >= 3, "the later claims' writes ran the generic plan: {generic} times");

    // The control: a statement of the same shape with its arrays unnested directly — a plan made for a
    // one-row array looks cheaper than the generic one (ten rows), so it is planned on every run.
    let (user_ids, task_ids): (Vec<String>, Vec<i64>) = sqlx::query_as(
        "SELECT array_agg(user_id), array_agg(id) FROM (SELECT user_id, id FROM delivery_task WHERE user_id = 'alice' LIMIT 1) t",
    )
    .fetch_one(store.pool())
    .await
    .expect("a task");
    let direct = "WITH u AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS u(user_id, id)) \
                  SELECT count(*) FROM u JOIN delivery_task t ON t.user_id = u.user_id AND t.id = u.id";
    for _ in 0..8 {
        let found: i64 =
            sqlx::query_scalar(direct).bind(&user_ids).bind(&task_ids).fetch_one(store.pool()).await.expect("query");
        assert_eq!(found, 1);
    }
    let (generic, custom) = plans_used(store.pool(), direct).await;
    assert_eq!((generic, custom), (0, 8), "unnested directly, every run was planned for its parameters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_connections_plan_the_batched_finish_once() {
    let world = World::new(ClockMode::Database).await.expect("world");
    world.user("alice", &["push"]).await.expect("user");
    let url = world.db.url.clone();

    // As `herald worker` connects: claims on a pool left to PostgreSQL's choice, finishes on a pool of
    // their own that plans each statement once.
    let worker_store =
        PgStore::connect(&url, 1).await.expect("claim pool").with_finish_pool(&url, 1).await.expect("finish pool");
    let worker_store = Arc::new(worker_store);
    deliver(&world, &worker_store, "worker", 3).await;
    let (planned_once, planned_again) = plans_used(worker_store.finish_pool(), FINISH_BATCH).await;
    assert!(planned_once >= 1, "the batched finish ran on its finish connection with the generic plan");
    assert_eq!(planned_again, 0, "the batched finish was never planned for its parameters");
    let (_, claims_planned) = plans_used(worker_store.pool(), CLAIM).await;
    assert!(claims_planned >= 1, "the claims are planned as PostgreSQL chooses: the first runs for their parameters");

    // The control: finishes on a pool left to PostgreSQL's choice are planned for their parameters.
    let one_pool = Arc::new(PgStore::connect(&url, 1).await.expect("store"));
    deliver(&world, &one_pool, "one-pool", 3).await;
    let (_, planned_again) = plans_used(one_pool.pool(), FINISH_BATCH).await;
    assert!(planned_again >= 1, "without the setting the batched finish was planned for its parameters");
    assert_eq!(world.push.messages().len(), 6, "every notification delivered once, whatever the plans");
}
