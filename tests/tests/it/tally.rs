//! The task gauges come from the tally the database keeps of `delivery_task` (migration `0010`): one
//! signed delta per group and statement, appended by statement-level triggers, summed by the gauges'
//! read and compacted by it. These tests hold the tally against the exact count the gauges made before
//! (`herald_tests::tally`): after Herald's own writes of every kind, while writers and compactions run
//! at once, and over every combination of the columns "parked" reads. The negative control drops a
//! trigger and sees the comparison fail.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use herald_domain::resolve::FinalState;
use herald_domain::{EventKey, Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::store::NewNotification;
use herald_standin::Script;
use herald_tests::tally::{
    attempts_without_task, derived_differences, exact_task_counts, gauge_differences, groups, queue_differences,
    rows_without_notification, tally_differences, tally_rows,
};
use herald_tests::{ClockMode, World};

/// The gauges' answer equals the exact count, group for group and in the same order, and so does the
/// tally in one snapshot.
async fn assert_gauges_exact(world: &World, when: &str) {
    let differences = gauge_differences(&world.store).await.expect("compare");
    assert_eq!(differences, Vec::<String>::new(), "{when}");
}

/// The tally's groups as the gauges' read sums them: (channel, state, parked, sum, rows).
async fn tally_groups(world: &World) -> Vec<(String, String, bool, i64, i64)> {
    sqlx::query_as(herald_postgres::TASK_TALLY).fetch_all(world.store.pool()).await.expect("tally")
}

/// Herald's writes of every kind, in order: creates (one at a time and a whole event at once), claims
/// and finishes that end SENT, FAILED, UNKNOWN waiting for a query and parked, the three manual
/// resolutions, a statement that changes no group, and a delete (Herald deletes no task; the trigger
/// must still count it).
async fn mixed_workload(world: &World) {
    let users = ["ann", "bob", "cid", "dee"];
    for user in users {
        world.user(user, &["push", "sms", "miao"]).await.expect("user");
    }
    let worker = world.worker("w-tally", 60_000);
    // push accepts; sms refuses (a final failure); Miaotixing accepts and never answers, which cannot be
    // asked about: parked.
    world.sms.script_all(std::iter::repeat_n(Script::status(400), users.len()));
    world.miao.script_all(std::iter::repeat_n(Script::HangAfterAccept, users.len() + 1));
    for (n, user) in users.iter().enumerate() {
        world.submit(user, &format!("order-{n}"), 600_000, None).await.expect("submit");
    }
    worker.drain(20).await.expect("drain");
    // sms accepts and never answers: it can be asked later, so UNKNOWN but not parked.
    world.sms.script(Script::HangAfterAccept);
    world.submit("ann", "order-9", 600_000, None).await.expect("submit");
    worker.drain(20).await.expect("drain");

    // The human exit: each decision once.
    let parked = world.store.parked(10).await.expect("parked");
    assert_eq!(parked.len(), users.len() + 1, "the workload parks every miao task: {parked:?}");
    let now = world.clock.now().await.expect("now");
    for (task, decision) in parked.iter().zip([FinalState::Sent, FinalState::Failed, FinalState::Resend]) {
        world
            .store
            .resolve_manually(
                task.task_id,
                decision,
                "checked",
                &herald_tests::decision_event(task.task_id, decision, "checked", now),
                now,
            )
            .await
            .expect("resolve");
    }

    // One event for every user at once: one INSERT of many task rows.
    let news: Vec<NewNotification> = users
        .iter()
        .map(|user| NewNotification {
            user_id: UserId::from(*user),
            event_key: EventKey::from("release"),
            body: "release".to_owned(),
            ttl: Millis(600_000),
            max_attempts: None,
            thread_key: None,
            submitted_by: None,
        })
        .collect();
    world.store.create_event(&news, &world.table(), now).await.expect("event");

    // A statement over every row that changes no group writes no delta.
    let pool = world.store.pool();
    let before = tally_rows(pool).await.expect("rows");
    sqlx::query("UPDATE delivery_task SET attempt_count = attempt_count").execute(pool).await.expect("update");
    assert_eq!(tally_rows(pool).await.expect("rows"), before, "an update that moves no task writes nothing");

    // A delete, with the attempt rows that reference the task.
    let mut tx = pool.begin().await.expect("begin");
    let (user, id): (String, i64) = sqlx::query_as(
        "SELECT user_id, id FROM delivery_task WHERE channel = 'push' AND state = 'SENT' ORDER BY id LIMIT 1",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("a sent task");
    sqlx::query("DELETE FROM delivery_attempt WHERE user_id = $1 AND task_id = $2")
        .bind(&user)
        .bind(id)
        .execute(&mut *tx)
        .await
        .expect("delete attempts");
    sqlx::query("DELETE FROM delivery_task WHERE user_id = $1 AND id = $2")
        .bind(&user)
        .bind(id)
        .execute(&mut *tx)
        .await
        .expect("delete task");
    tx.commit().await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tally_equals_the_exact_count_after_every_kind_of_write_and_after_compaction() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    mixed_workload(&world).await;
    let pool = world.store.pool();

    // The workload reached every kind of group the gauges show.
    let exact = exact_task_counts(pool).await.expect("exact");
    for (channel, state, parked) in [
        ("push", "SENT", false),
        ("push", "PENDING", false),
        ("sms", "FAILED", false),
        ("sms", "UNKNOWN", false),
        ("miao", "UNKNOWN", true),
        ("miao", "SENT", false),
        ("miao", "FAILED", false),
        ("miao", "PENDING", false),
    ] {
        assert!(
            exact.iter().any(|g| g.0 == channel && g.1 == state && g.2 == parked && g.3 > 0),
            "no {channel} {state} (parked {parked}) task: {exact:?}"
        );
    }
    // Some group emptied again (every claimed task was finished: SENDING has deltas summing to 0): it
    // is left out of the answer, as a group without rows was.
    let emptied = tally_groups(&world).await;
    assert!(emptied.iter().any(|g| g.1 == "SENDING" && g.3 == 0 && g.4 > 0), "{emptied:?}");
    assert_gauges_exact(&world, "after the workload").await;

    // Compaction: one row per group with tasks, the same sums.
    let before = tally_rows(pool).await.expect("rows");
    let removed = world.store.compact_task_tally().await.expect("compact");
    assert_eq!(i64::try_from(removed).expect("removed"), before);
    assert_eq!(tally_rows(pool).await.expect("rows"), i64::try_from(exact.len()).expect("groups"));
    assert_gauges_exact(&world, "after compaction").await;
    // Compacting what is compact changes nothing.
    world.store.compact_task_tally().await.expect("compact again");
    assert_eq!(tally_rows(pool).await.expect("rows"), i64::try_from(exact.len()).expect("groups"));
    assert_gauges_exact(&world, "after a second compaction").await;

    // TRUNCATE (the model test empties the tables between cases) empties the tally.
    sqlx::query("TRUNCATE delivery_task, delivery_attempt, digest_member").execute(pool).await.expect("truncate");
    assert_eq!(tally_rows(pool).await.expect("rows"), 0);
    assert_gauges_exact(&world, "after TRUNCATE").await;
    assert!(world.store.task_counts().await.expect("counts").is_empty());
}

/// The claim's queue (migration `0012`) holds exactly the scheduled tasks after Herald's writes of every
/// kind (the same workload: creates, claims, finishes, retries, parking, the manual resolutions, a
/// delete) and after a TRUNCATE. Negative control: without the update trigger, a task rescheduled by an
/// update keeps its old queue row, and the same comparison names it.
#[tokio::test]
async fn the_claim_queue_holds_exactly_the_scheduled_tasks() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    mixed_workload(&world).await;
    let pool = world.store.pool();
    let queued = world.db.count("SELECT count(*) FROM task_queue").await.expect("count");
    let scheduled =
        world.db.count("SELECT count(*) FROM delivery_task WHERE next_attempt_at IS NOT NULL").await.expect("count");
    assert!(queued > 0 && queued == scheduled, "{queued} queue rows, {scheduled} scheduled tasks");
    assert_eq!(queue_differences(pool).await.expect("compare"), Vec::<String>::new(), "after the workload");

    // The review list reads `parked_at`, set for the parked tasks only.
    let parked = format!("SELECT count(*) FROM delivery_task t WHERE {}", herald_postgres::PARKED);
    let parked = world.db.count(&parked).await.expect("parked");
    let marked =
        world.db.count("SELECT count(*) FROM delivery_task WHERE parked_at IS NOT NULL").await.expect("marked");
    assert!(parked > 0, "the workload parks tasks");
    assert_eq!(parked, marked);

    sqlx::query("DROP TRIGGER delivery_task_queue_update ON delivery_task").execute(pool).await.expect("drop");
    sqlx::query("UPDATE delivery_task SET next_attempt_at = next_attempt_at + interval '1 minute' WHERE next_attempt_at IS NOT NULL")
        .execute(pool)
        .await
        .expect("reschedule");
    let stale = queue_differences(pool).await.expect("compare");
    assert_eq!(i64::try_from(stale.len()).expect("len"), scheduled, "{stale:?}");

    sqlx::query("TRUNCATE delivery_task, delivery_attempt, digest_member").execute(pool).await.expect("truncate");
    assert_eq!(world.db.count("SELECT count(*) FROM task_queue").await.expect("count"), 0);
}

/// Every attempt belongs to a stored task after Herald's writes of every kind (the same workload: claims,
/// finishes, claim-time decisions, the manual resolutions; its delete removes the attempts first). No
/// foreign key holds this since migration `0016`; Herald's statements do. Negative control: the
/// database itself now accepts an attempt for a task that does not exist, and the same comparison
/// names it.
#[tokio::test]
async fn every_attempt_belongs_to_a_stored_task() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    mixed_workload(&world).await;
    let pool = world.store.pool();
    let attempts = world.db.count("SELECT count(*) FROM delivery_attempt").await.expect("count");
    let decisions = world.db.count("SELECT count(*) FROM delivery_attempt WHERE action IS NULL").await.expect("count");
    assert!(attempts > decisions && decisions > 0, "{attempts} attempts, {decisions} without a call");
    assert_eq!(attempts_without_task(pool).await.expect("compare"), Vec::<String>::new(), "after the workload");

    let missing: i64 = world.db.count("SELECT coalesce(max(id), 0) + 1000 FROM delivery_task").await.expect("id");
    sqlx::query(
        "INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, outcome, started_at, finished_at) \
         VALUES ('ann', $1, 1, gen_random_uuid(), 'MANUAL_FAILED', now(), now())",
    )
    .bind(missing)
    .execute(pool)
    .await
    .expect("an attempt without its task is not refused by the database");
    assert_eq!(
        attempts_without_task(pool).await.expect("compare"),
        vec![format!("attempt 1 of task ann/{missing}: no such task")]
    );
    assert_eq!(derived_differences(pool).await.expect("compare").len(), 1);
}

/// Every inbox item and every task belongs to a stored notification after Herald's writes of every kind
/// (the same workload, and an event's submission). No foreign key holds this since migration `0018`;
/// Herald's statements insert them with their notification. Negative control: the database now accepts an
/// inbox item and a task of a notification that does not exist, and the same comparison names both.
#[tokio::test]
async fn every_inbox_item_and_task_belongs_to_a_stored_notification() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    mixed_workload(&world).await;
    let pool = world.store.pool();
    assert!(world.db.count("SELECT count(*) FROM delivery_task").await.expect("count") > 0);
    assert_eq!(rows_without_notification(pool).await.expect("compare"), Vec::<String>::new(), "after the workload");

    let missing: i64 = world.db.count("SELECT coalesce(max(id), 0) + 1000 FROM notification").await.expect("id");
    sqlx::query("INSERT INTO inbox_item (user_id, notification_id, created_at) VALUES ('ann', $1, now())")
        .bind(missing)
        .execute(pool)
        .await
        .expect("an inbox item without its notification is not refused by the database");
    let task: i64 = sqlx::query_scalar(
        "INSERT INTO delivery_task (user_id, notification_id, channel, state, max_attempts, created_at, updated_at) \
         VALUES ('ann', $1, 'push', 'FAILED', 1, now(), now()) RETURNING id",
    )
    .bind(missing)
    .fetch_one(pool)
    .await
    .expect("a task without its notification is not refused by the database");
    assert_eq!(
        rows_without_notification(pool).await.expect("compare"),
        vec![
            format!("inbox item ann/{missing}: no such notification"),
            format!("task ann/{task}: no notification ann/{missing}")
        ]
    );
    assert_eq!(derived_differences(pool).await.expect("compare").len(), 2);
}

/// The gauges' read compacts by itself once the tally has grown, so no other job is needed.
#[tokio::test]
async fn reading_the_gauges_compacts_a_grown_tally() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("ann", &["push"]).await.expect("user");
    world.submit("ann", "order-1", 600_000, None).await.expect("submit");
    let pool = world.store.pool();
    // Each statement moves the task to another group and back: two rows of deltas each.
    for _ in 0..50 {
        sqlx::query("UPDATE delivery_task SET state = CASE state WHEN 'PENDING' THEN 'UNKNOWN' ELSE 'PENDING' END")
            .execute(pool)
            .await
            .expect("update");
    }
    assert!(tally_rows(pool).await.expect("rows") > 100);
    assert_gauges_exact(&world, "grown").await;
    assert_eq!(tally_rows(pool).await.expect("rows"), 1, "the read compacted the tally");
    // A small tally is read as it is: a few deltas do not make the read write.
    sqlx::query("UPDATE delivery_task SET state = 'UNKNOWN'").execute(pool).await.expect("update");
    assert_gauges_exact(&world, "after one more statement").await;
    assert_eq!(tally_rows(pool).await.expect("rows"), 3);
}

/// How the concurrent run compacts.
#[derive(Clone, Copy)]
enum Compaction {
    /// Herald's statement (`COMPACT_TASK_TALLY`).
    Herald,
    /// The negative control: read the sums, then delete every row and write the sums back, in one
    /// READ COMMITTED transaction. The `DELETE` also removes deltas committed after the read.
    ReadThenDelete,
}

async fn compact(world: &World, how: Compaction) {
    match how {
        Compaction::Herald => {
            world.store.compact_task_tally().await.expect("compact");
        }
        Compaction::ReadThenDelete => {
            let mut tx = world.store.pool().begin().await.expect("begin");
            let sums: Vec<(String, String, bool, i64)> =
                sqlx::query_as("SELECT channel, state, parked, sum(n)::bigint FROM task_tally GROUP BY 1, 2, 3")
                    .fetch_all(&mut *tx)
                    .await
                    .expect("sums");
            // Widens the gap between the read and the delete, as a busy server would.
            sqlx::query("SELECT pg_sleep(0.005)").execute(&mut *tx).await.expect("sleep");
            sqlx::query("DELETE FROM task_tally").execute(&mut *tx).await.expect("delete");
            for (channel, state, parked, n) in sums {
                sqlx::query("INSERT INTO task_tally (channel, state, parked, n) VALUES ($1, $2, $3, $4)")
                    .bind(channel)
                    .bind(state)
                    .bind(parked)
                    .bind(n)
                    .execute(&mut *tx)
                    .await
                    .expect("insert");
            }
            tx.commit().await.expect("commit");
        }
    }
}

/// Four writers (creates, claims, finishes), two compactors and a checker at once. Answers what the
/// checker found mid-run (each check reads the tally and the table in one snapshot) and at the end.
async fn concurrent_run(how: Compaction) -> (Vec<String>, Vec<String>) {
    const WRITERS: usize = 4;
    const ROUNDS: usize = 15;
    let world = Arc::new(World::new(ClockMode::Manual).await.expect("world"));
    for w in 0..WRITERS {
        world.user(&format!("u{w}"), &["push", "sms"]).await.expect("user");
    }
    // sms fails now and then with a retryable error: those tasks wait PENDING for a later attempt.
    world.sms.script_all((0..WRITERS * ROUNDS).map(|n| if n % 3 == 0 { Script::status(503) } else { Script::Ok }));
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let world = Arc::clone(&world);
            tokio::spawn(async move {
                let worker = world.worker(&format!("w{w}"), 60_000);
                for round in 0..ROUNDS {
                    world.submit(&format!("u{w}"), &format!("e{round}"), 600_000, None).await.expect("submit");
                    worker.run_once().await.expect("cycle");
                }
            })
        })
        .collect();
    let compactions = Arc::new(AtomicU64::new(0));
    let compactors: Vec<_> = (0..2)
        .map(|_| {
            let (world, done, compactions) = (Arc::clone(&world), Arc::clone(&done), Arc::clone(&compactions));
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    compact(&world, how).await;
                    compactions.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let checker = {
        let (world, done) = (Arc::clone(&world), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut checks, mut found) = (0_u64, Vec::new());
            while !done.load(Ordering::Relaxed) {
                found.extend(derived_differences(world.store.pool()).await.expect("compare"));
                world.store.task_counts().await.expect("gauges");
                checks += 1;
            }
            (checks, found)
        })
    };
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for compactor in compactors {
        compactor.await.expect("compactor");
    }
    let (checks, mid_run) = checker.await.expect("checker");
    assert!(checks > 1 && compactions.load(Ordering::Relaxed) > 1, "the checks and compactions ran alongside");
    let created = world.db.count("SELECT count(*) FROM delivery_task").await.expect("count");
    assert_eq!(created, i64::try_from(WRITERS * ROUNDS * 2).expect("tasks"));
    let exact = exact_task_counts(world.store.pool()).await.expect("exact");
    assert!(exact.iter().any(|g| g.1 == "PENDING") && exact.iter().any(|g| g.1 == "SENT"), "{exact:?}");
    compact(&world, how).await;
    (mid_run, gauge_differences(&world.store).await.expect("compare"))
}

/// Writers, compactions and readers at once: every snapshot the checker takes holds the invariant, and
/// so does the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tally_stays_exact_under_concurrent_writers_and_compactions() {
    let (mid_run, end) = concurrent_run(Compaction::Herald).await;
    assert_eq!(mid_run, Vec::<String>::new(), "while writing");
    assert_eq!(end, Vec::<String>::new(), "at the end");
}

/// Negative control for the run above: a compaction that reads the sums and deletes in separate
/// statements loses the deltas committed in between, and the same run shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_deletes_what_it_did_not_read_loses_counts() {
    let (mid_run, end) = concurrent_run(Compaction::ReadThenDelete).await;
    assert!(!end.is_empty(), "the run ended exact (mid-run: {mid_run:?})");
}

/// "Parked" is `state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL`: the tally's function
/// and `PARKED` must agree on every combination the table allows, including those that are nearly
/// parked.
#[tokio::test]
async fn the_tally_and_the_review_list_agree_on_what_is_parked() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let pool = world.store.pool();
    sqlx::query(
        "INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
         SELECT 'u', 'e' || g, 'b', now(), now() + interval '1 day' FROM generate_series(1, 9) g",
    )
    .execute(pool)
    .await
    .expect("notifications");
    // (state, needs_review, scheduled) for every row the CHECK constraints allow, in one INSERT.
    let combinations = "('UNKNOWN', true, false), ('UNKNOWN', true, true), ('UNKNOWN', false, false), \
         ('UNKNOWN', false, true), ('PENDING', false, true), ('PENDING', false, false), ('SENT', false, false), \
         ('FAILED', false, false), ('SUPPRESSED', false, false)";
    sqlx::query(&format!(
        "INSERT INTO delivery_task (user_id, notification_id, channel, state, needs_review, next_attempt_at, \
           max_attempts, created_at, updated_at) \
         SELECT 'u', n.id, 'push', c.state, c.review, CASE WHEN c.scheduled THEN now() END, 3, now(), now() \
         FROM (SELECT row_number() OVER (ORDER BY id) AS k, id FROM notification) n \
         JOIN (SELECT row_number() OVER () AS k, * FROM (VALUES {combinations}) AS v(state, review, scheduled)) c \
           ON c.k = n.k"
    ))
    .execute(pool)
    .await
    .expect("tasks");
    assert_gauges_exact(&world, "every combination inserted").await;
    let parked = world.store.task_counts().await.expect("counts");
    assert_eq!(parked.iter().filter(|c| c.parked).map(|c| c.count).sum::<u64>(), 1, "{parked:?}");
    assert!(parked.iter().any(|c| c.parked && c.state == TaskState::Unknown));

    // Each column alone moves a task in and out of "parked".
    for update in [
        "UPDATE delivery_task SET next_attempt_at = CASE WHEN next_attempt_at IS NULL THEN now() END \
         WHERE state IN ('UNKNOWN', 'PENDING')",
        "UPDATE delivery_task SET needs_review = NOT needs_review WHERE state = 'UNKNOWN'",
        "UPDATE delivery_task SET state = CASE state WHEN 'UNKNOWN' THEN 'PENDING' ELSE 'UNKNOWN' END, \
           needs_review = false WHERE state IN ('UNKNOWN', 'PENDING')",
        "UPDATE delivery_task SET needs_review = true WHERE state = 'UNKNOWN'",
    ] {
        sqlx::query(update).execute(pool).await.expect("update");
        assert_gauges_exact(&world, update).await;
    }
}

/// The gauges' read and the compaction never touch `delivery_task`: their plans name only the tally.
/// The exact count the gauges made before is the control: its plan reads the task table.
#[tokio::test]
async fn the_gauges_are_read_without_the_task_table() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let plan = |query: String| {
        let pool = world.store.pool().clone();
        async move {
            let lines: Vec<String> =
                sqlx::query_scalar(&format!("EXPLAIN {query}")).fetch_all(&pool).await.expect("plan");
            lines.join("\n")
        }
    };
    for (name, query) in [
        ("gauges' read", herald_postgres::TASK_TALLY.to_owned()),
        ("compaction", herald_postgres::COMPACT_TASK_TALLY.to_owned()),
    ] {
        let text = plan(query).await;
        assert!(text.contains("on task_tally"), "{name} reads the tally:\n{text}");
        assert!(!text.contains("delivery_task"), "{name} reads delivery_task:\n{text}");
    }
    let control = plan(herald_tests::tally::exact_task_counts_query()).await;
    assert!(control.contains("on delivery_task"), "the exact count scans the table:\n{control}");
}

/// Negative control: without the UPDATE trigger (dropped in this test's own database), the same
/// workload leaves the tally and the gauges wrong — claims and finishes go uncounted — and the
/// comparison the tests above rely on says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_update_trigger_the_tally_differs_from_the_exact_count() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let pool = world.store.pool();
    sqlx::query("DROP TRIGGER delivery_task_tally_update ON delivery_task").execute(pool).await.expect("drop");
    mixed_workload(&world).await;
    let differences = tally_differences(pool).await.expect("compare");
    assert!(!differences.is_empty(), "the comparison found nothing");
    let answer = groups(&world.store.task_counts().await.expect("task counts"));
    let exact = exact_task_counts(pool).await.expect("exact");
    assert_ne!(answer, exact);
    // What the gauges would show: tasks were sent, and none is counted as sent.
    assert!(exact.iter().any(|g| g.1 == "SENT" && g.3 > 0), "{exact:?}");
    assert!(!answer.iter().any(|g| g.1 == "SENT" && g.3 > 0), "{answer:?}");
}
