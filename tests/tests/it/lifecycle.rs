//! A person's data has an end (SPEC §13): erasure of a user against real PostgreSQL and real stand-ins —
//! racing submissions, a worker, and a call in flight.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use herald_core::worker::Report;
use herald_domain::{ChannelName, Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::StoreError;
use herald_standin::Script;
use herald_tests::wait::wait_until;
use herald_tests::world::{ClockMode, World};

const HOUR: u64 = 3_600_000;

/// Counts rows of `sql` (one `$1`: the user).
async fn count(world: &World, sql: &str, user: &str) -> i64 {
    sqlx::query_scalar(sql).bind(user).fetch_one(world.store.pool()).await.expect(sql)
}

/// Attempts of `user` that called a channel (SEND or QUERY).
async fn calls_claimed(world: &World, user: &str) -> i64 {
    count(world, "SELECT count(*) FROM delivery_attempt WHERE user_id = $1 AND action IS NOT NULL", user).await
}

/// Tasks of `user` a worker could still pick up or a person could still be asked about.
async fn open_tasks(world: &World, user: &str) -> i64 {
    count(
        world,
        "SELECT count(*) FROM delivery_task WHERE user_id = $1 \
         AND (state IN ('PENDING', 'SENDING') OR needs_review OR next_attempt_at IS NOT NULL)",
        user,
    )
    .await
}

/// Every stand-in request addressed to one of `user`'s destinations.
fn requests_to(world: &World, user: &str) -> u64 {
    ["push", "sms", "miao"]
        .iter()
        .zip([&world.push, &world.sms, &world.miao])
        .map(|(channel, standin)| standin.requests_to(&World::destination(user, channel)))
        .sum()
}

/// The erasure settles what is not in a holder's hands (pending → SUPPRESSED, parked → out of the review
/// queue), destroys the destinations, leaves the call in flight alone — its outcome (no answer) is
/// recorded — and the claim that would have retried it settles it instead: the stand-in never hears of
/// the user again. Later submissions, repeats and preference changes are refused and write nothing; a
/// second erasure changes nothing; another user is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_settles_every_task_and_the_call_in_flight_is_never_repeated() {
    let world = World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.timeout_ms = 1_500;
    })
    .await
    .expect("world");
    world.user("u1", &["push", "sms", "miao"]).await.expect("u1");
    world.user("u2", &["push"]).await.expect("u2");
    let worker = world.worker("w1", 60_000);
    let services = world.services();

    // A parked task: Miaotixing gives no answer (neither key nor query: parked at once).
    let first = world.submit("u1", "e0", HOUR, None).await.expect("e0");
    world.miao.script(Script::Delay(Duration::from_secs(1)));
    worker.drain(5).await.expect("drain e0");
    let parked_before = services.review.parked(100).await.expect("review");
    assert_eq!(parked_before.len(), 1, "the Miaotixing task waits for a person");

    // A call in flight: push accepts and holds its answer past the client's timeout.
    let in_flight = world.submit("u1", "e1", HOUR, None).await.expect("e1");
    let push_task = in_flight.tasks.iter().find(|t| t.channel.as_str() == "push").expect("push task").clone();
    world.push.script(Script::Delay(Duration::from_secs(3)));
    let cycle = {
        let worker = world.worker("w2", 60_000);
        tokio::spawn(async move { worker.run_once().await })
    };
    let push_ref = push_task.reference.clone();
    wait_until("the push call arrived", || async { world.push.requests_for(&push_ref) == 1 }).await;

    // Tasks not yet claimed, of u1 and of u2.
    let pending = world.submit("u1", "e2", HOUR, None).await.expect("e2");
    let other = world.submit("u2", "e2", HOUR, None).await.expect("u2 e2");
    let calls_before = calls_claimed(&world, "u1").await;

    let erased = herald_core::usecases::erase_user(
        &services,
        &herald_core::usecases::Actor::command_line("test"),
        &UserId::from("u1"),
    )
    .await
    .expect("erase");
    assert!(erased.first);
    assert_eq!(erased.record.requested_by, "cli test");
    assert_eq!(erased.record.settled_tasks, 4, "e2's three tasks and the parked one: {:?}", erased.record);
    assert_eq!(erased.record.released_reviews, 1);
    assert_eq!(erased.record.destroyed_destinations, 3);
    assert!(services.review.parked(100).await.expect("review").is_empty(), "nothing of u1 is left for review");
    assert_eq!(count(&world, "SELECT count(*) FROM channel_pref WHERE user_id = $1", "u1").await, 0);
    let pending_view = services.reads.notification(pending.notification_id).await.expect("view").expect("e2");
    for task in &pending_view.tasks {
        assert_eq!(task.state, TaskState::Suppressed, "{task:?}");
        assert_eq!(task.last_error.as_deref(), Some("user erased"));
        assert_eq!(task.outcomes(), vec![Some(herald_domain::Outcome::UserErased)], "no call was made");
    }
    let released = world.task(first.notification_id, parked_before[0].task_id).await.expect("released");
    assert!(!released.is_parked() && !released.needs_review);
    assert_eq!(released.state, TaskState::Unknown, "it may have been sent: never written down as not sent");
    assert_eq!(released.last_error.as_deref(), Some(herald_domain::claim::ERASED_UNCERTAIN));

    // The call in flight finishes as usual: no answer within the timeout, a retry would be due.
    let reports = cycle.await.expect("join").expect("cycle");
    assert!(reports.contains(&Report::Unknown { task: push_task.task_id, parked: false }), "{reports:?}");
    let after_finish = world.task(in_flight.notification_id, push_task.task_id).await.expect("push task");
    assert_eq!(after_finish.state, TaskState::Unknown);

    // The claim that would resend it finds the erasure and settles it: no second call.
    world.advance(60_000);
    let reports = worker.drain(5).await.expect("drain after erasure");
    assert!(reports.contains(&Report::Suppressed(push_task.task_id)), "{reports:?}");
    let settled = world.task(in_flight.notification_id, push_task.task_id).await.expect("push task");
    assert_eq!(settled.state, TaskState::Unknown, "its first call may have been accepted");
    assert!(!settled.is_parked() && settled.next_attempt_at.is_none());
    assert_eq!(settled.outcomes().last(), Some(&Some(herald_domain::Outcome::UserErased)));
    assert_eq!(world.push.requests_for(&push_ref), 1, "the call in flight was the last one");
    assert_eq!(calls_claimed(&world, "u1").await, calls_before, "no claim called a channel for u1 after the erasure");
    assert_eq!(open_tasks(&world, "u1").await, 0, "every task of u1 is settled");

    // Refusals that write nothing.
    let notifications = count(&world, "SELECT count(*) FROM notification WHERE user_id = $1", "u1").await;
    assert!(matches!(
        world.submit("u1", "e3", HOUR, None).await.map_err(|e| e.downcast::<StoreError>()),
        Err(Ok(StoreError::UserErased))
    ));
    assert!(
        matches!(
            world.submit("u1", "e0", HOUR, None).await.map_err(|e| e.downcast::<StoreError>()),
            Err(Ok(StoreError::UserErased))
        ),
        "a repeat too"
    );
    let put = world.store.put(&UserId::from("u1"), &ChannelName::from("push"), true, Some(vec![1, 2, 3])).await;
    assert!(put.is_err(), "a destination for an erased user is refused");
    assert_eq!(count(&world, "SELECT count(*) FROM notification WHERE user_id = $1", "u1").await, notifications);
    assert_eq!(count(&world, "SELECT count(*) FROM channel_pref WHERE user_id = $1", "u1").await, 0);

    // Idempotent.
    let again = herald_core::usecases::erase_user(
        &services,
        &herald_core::usecases::Actor::command_line("someone else"),
        &UserId::from("u1"),
    )
    .await
    .expect("again");
    assert!(!again.first);
    assert_eq!(again.record, erased.record, "the second erasure answers the first record and changes nothing");

    // Another user is untouched.
    let other_task = world.task(other.notification_id, other.tasks[0].task_id).await.expect("u2 task");
    assert_eq!(other_task.state, TaskState::Sent, "u2's notification went out as usual");
    assert_eq!(world.push.sends_to(&World::destination("u2", "push")), 1);
    let _ = Millis::ZERO;
}

/// Submissions racing the erasure, and a worker draining meanwhile: each submission is either stored
/// before the erasure (and then settled by it) or refused; after the erasure commits no claim calls a
/// channel for the user, every call a stand-in received for the user belongs to an attempt claimed
/// before, and nothing of the user is open or parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn erasure_racing_submissions_and_a_worker_stops_every_disclosure_at_its_commit() {
    let world = Arc::new(World::new(ClockMode::Database).await.expect("world"));
    world.user("u1", &["push", "sms"]).await.expect("u1");
    let stop = Arc::new(AtomicBool::new(false));
    let mut submitters = Vec::new();
    for s in 0..4 {
        let (world, stop) = (Arc::clone(&world), Arc::clone(&stop));
        submitters.push(tokio::spawn(async move {
            let (mut stored, mut refused, mut n) = (0u32, 0u32, 0u32);
            while !stop.load(Ordering::Relaxed) {
                match world.submit("u1", &format!("race-{s}-{n}"), HOUR, None).await {
                    Ok(_) => stored += 1,
                    Err(e) => match e.downcast::<StoreError>() {
                        Ok(StoreError::UserErased) => refused += 1,
                        other => panic!("a submission failed otherwise: {other:?}"),
                    },
                }
                n += 1;
            }
            (stored, refused)
        }));
    }
    let draining = {
        let (world, stop) = (Arc::clone(&world), Arc::clone(&stop));
        tokio::spawn(async move {
            let worker = world.worker("w1", 60_000);
            while !stop.load(Ordering::Relaxed) {
                worker.run_once().await.expect("cycle");
            }
        })
    };
    wait_until("some deliveries for u1", || async { requests_to(&world, "u1") >= 10 }).await;

    let erased = herald_core::usecases::erase_user(
        &world.services(),
        &herald_core::usecases::Actor::command_line("test"),
        &UserId::from("u1"),
    )
    .await
    .expect("erase");
    let claimed_at_erasure = calls_claimed(&world, "u1").await;
    let notifications_at_erasure = count(&world, "SELECT count(*) FROM notification WHERE user_id = $1", "u1").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut stored, mut refused) = (0, 0);
    for s in submitters {
        let (a, b) = s.await.expect("submitter");
        stored += a;
        refused += b;
    }
    draining.await.expect("worker");
    // What was in flight at the erasure finishes; the erasure's own record counts what it settled.
    wait_until("no call in flight", || async {
        count(&world, "SELECT count(*) FROM delivery_task WHERE user_id = $1 AND state = 'SENDING'", "u1").await == 0
    })
    .await;
    world.worker("w2", 60_000).drain(20).await.expect("drain");

    assert!(refused > 0, "submissions after the erasure were refused (stored {stored})");
    assert_eq!(
        count(&world, "SELECT count(*) FROM notification WHERE user_id = $1", "u1").await,
        notifications_at_erasure,
        "no submission was stored after the erasure committed"
    );
    assert_eq!(calls_claimed(&world, "u1").await, claimed_at_erasure, "no claim called a channel after the erasure");
    let requests = i64::try_from(requests_to(&world, "u1")).expect("count");
    assert!(requests <= claimed_at_erasure, "every call a stand-in received was claimed before the erasure");
    assert_eq!(open_tasks(&world, "u1").await, 0, "every task settled, nothing parked");
    assert!(erased.record.settled_tasks > 0 || stored > 0);
    println!(
        "erasure race: {stored} stored, {refused} refused, {requests} calls, {} tasks settled by the erasure",
        erased.record.settled_tasks
    );
}

/// The API, the command line and the console's action call one use case. The API is admin only (a
/// service token and the user's own token are refused and write nothing), answers 202 with the record,
/// 200 with the same record on a repeat; a submission for the erased user is then 410 and writes
/// nothing. The command line erases another user and says so; repeating it says nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_command_line_erase_through_one_use_case_and_only_for_an_admin() {
    use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
    use reqwest::StatusCode;
    let world = World::new(ClockMode::Database).await.expect("world");
    world.user("u1", &["push"]).await.expect("u1");
    world.user("u2", &["push"]).await.expect("u2");
    world.submit("u1", "before", HOUR, None).await.expect("submit");
    let api = Api::start(&world).await.expect("api");
    let path = "/v1/users/u1/erasure";
    let empty = serde_json::json!({});

    for token in [SERVICE_TOKEN.to_owned(), api.user_token("u1")] {
        let refused = api.post(path, Some(&token), &empty).await;
        refused.problem(StatusCode::FORBIDDEN);
    }
    api.post(path, None, &empty).await.problem(StatusCode::UNAUTHORIZED);
    assert_eq!(
        count(&world, "SELECT count(*) FROM user_erasure WHERE user_id = $1", "u1").await,
        0,
        "a refusal writes nothing"
    );
    api.post("/v1/users/bad%20id/erasure", Some(ADMIN_TOKEN), &empty).await.problem(StatusCode::UNPROCESSABLE_ENTITY);

    let first = api.post(path, Some(ADMIN_TOKEN), &empty).await.ok(StatusCode::ACCEPTED);
    assert_eq!(first["user_id"], "u1");
    assert_eq!(first["erased_now"], true);
    assert_eq!(first["settled_tasks"], 1);
    assert_eq!(first["destroyed_destinations"], 1);
    let admin = format!("token {}", herald_core::auth::LEGACY_ADMIN_TOKEN_NAME);
    assert_eq!(first["requested_by"], admin.as_str());
    let again = api.post(path, Some(ADMIN_TOKEN), &empty).await.ok(StatusCode::OK);
    assert_eq!(again["erased_now"], false);
    assert_eq!(again["requested_at"], first["requested_at"], "the repeat answers the first record");
    assert_eq!(
        erasure_audit(&world, "u1").await,
        vec![(herald_core::auth::LEGACY_ADMIN_TOKEN_NAME.to_owned(), "token".to_owned(), "admin".to_owned())],
        "one audit event for the erasure, naming the token; the repeat writes none"
    );

    let submit = serde_json::json!({"user_id": "u1", "event_key": "after", "body": "late", "ttl_seconds": 60});
    let gone = api.post("/v1/notifications", Some(SERVICE_TOKEN), &submit).await.problem(StatusCode::GONE);
    assert_eq!(gone["type"], "urn:herald:problem:user-erased");
    let put = serde_json::json!({"destination": "https://example.org/hook", "enabled": true});
    api.put("/v1/users/u1/channels/push", Some(ADMIN_TOKEN), &put).await.problem(StatusCode::GONE);
    assert_eq!(
        count(&world, "SELECT count(*) FROM notification WHERE user_id = $1 AND event_key = 'after'", "u1").await,
        0
    );

    let herald = |args: &[&str]| {
        std::process::Command::new(herald_tests::bins::binary("herald"))
            .args(args)
            .env("HERALD__DATABASE__URL", &world.db.url)
            .env_remove("HERALD_CONFIG")
            .output()
            .expect("herald runs")
    };
    let out = herald(&["users", "erase", "u2", "--by", "ops-alice"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("user erased") && text.contains("ops-alice") && text.contains("1 destination(s) destroyed"),
        "{text}"
    );
    let out = herald(&["users", "erase", "u2"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed"));
    let out = herald(&["users", "erase", "bad id"]);
    assert_eq!(out.status.code(), Some(2), "a bad user id is a usage error naming the argument");
    assert!(String::from_utf8_lossy(&out.stderr).contains("USER"));
}

/// The database's data as `pg_dump --data-only` writes it.
fn dump(world: &World) -> String {
    // The URL without sqlx's own query parameters, which pg_dump does not know.
    let url = world.db.url.split('?').next().expect("a URL");
    let out =
        std::process::Command::new("pg_dump").args(["--data-only", "--no-owner", url]).output().expect("pg_dump runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Rows naming `user` in every table that has a `user_id` column, by table (empty tables left out).
async fn rows_of(world: &World, user: &str) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND column_name = 'user_id' ORDER BY 1",
    )
    .fetch_all(world.store.pool())
    .await
    .expect("tables");
    let mut found = Vec::new();
    for table in tables {
        let n = count(world, &format!("SELECT count(*) FROM {table} WHERE user_id = $1"), user).await;
        if n > 0 {
            found.push((table, n));
        }
    }
    found
}

/// The three boundaries after an erasure and retention for everyone, with the clock moved past each: the
/// database holds exactly what CONCEPTS §13 says it keeps — checked in `pg_dump`'s output and by a count
/// over every table with a `user_id`. Retention removes old finished notifications, keeps young ones, and
/// never removes one with a task parked for a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_boundary_leaves_exactly_what_the_documentation_says_and_retention_keeps_the_parked() {
    use herald_core::retention::{purge_once, RetentionPolicy};
    let world = World::new(ClockMode::Manual).await.expect("world");
    let services = world.services();
    let policy = RetentionPolicy::default();
    let day = 86_400_000;
    let (gone, stay) = ("erased-person-7", "staying-person-3");
    world.user(gone, &["push"]).await.expect("gone");
    world.user(stay, &["push", "miao"]).await.expect("stay");
    let worker = world.worker("w1", 60_000);

    world.submit(gone, "g1", HOUR, None).await.expect("g1");
    world.submit(stay, "old", 200 * day, None).await.expect("old");
    world.miao.script(Script::Delay(Duration::from_secs(1)));
    worker.drain(5).await.expect("drain");
    world.submit(gone, "g2", 200 * day, None).await.expect("g2 stays pending");
    let parked = services.review.parked(10).await.expect("review");
    assert_eq!(parked.len(), 1, "stay's Miaotixing task waits for a person");
    let body_of = |user: &str, key: &str| format!("Event {key} for {user}");

    herald_core::usecases::erase_user(
        &services,
        &herald_core::usecases::Actor::command_line("test"),
        &UserId::from(gone),
    )
    .await
    .expect("erase");
    let at_erasure = dump(&world);
    assert!(at_erasure.contains(&body_of(gone, "g1")), "before the content boundary the bodies are kept");
    assert!(!rows_of(&world, gone).await.iter().any(|(t, _)| t == "channel_pref"), "destinations go at once");

    // Not yet: an hour later nothing more is removed.
    world.advance(HOUR);
    let report = purge_once(&services, &policy, "p1").await.expect("purge").expect("lease");
    assert_eq!(report, herald_ports::PurgeReport::default());

    // The content boundary (24 h): no body, no inbox item; the delivery records stay.
    world.advance(day);
    let report = purge_once(&services, &policy, "p1").await.expect("purge").expect("lease");
    assert_eq!(report.content_boundaries, 1, "{report:?}");
    let text = dump(&world);
    for key in ["g1", "g2"] {
        assert!(!text.contains(&body_of(gone, key)), "a body of the erased user is still in the dump");
    }
    let kept: Vec<String> = rows_of(&world, gone).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(kept, ["delivery_attempt", "delivery_task", "notification", "user_erasure"], "after 24 h");
    assert!(text.contains(&body_of(stay, "old")), "another user's content is untouched");

    // A young notification of the staying user, then the records boundary and retention (90 d).
    world.advance(88 * day);
    let young = world.submit(stay, "young", HOUR, None).await.expect("young");
    worker.drain(5).await.expect("drain young");
    world.advance(2 * day);
    let report = purge_once(&services, &policy, "p1").await.expect("purge").expect("lease");
    assert_eq!(report.records_boundaries, 1, "{report:?}");
    let kept: Vec<String> = rows_of(&world, gone).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(kept, ["user_erasure"], "after 90 d only the erasure record names the user");
    let stay_keys: Vec<String> =
        sqlx::query_scalar("SELECT event_key FROM notification WHERE user_id = $1 ORDER BY event_key")
            .bind(stay)
            .fetch_all(world.store.pool())
            .await
            .expect("keys");
    assert_eq!(stay_keys, ["old", "young"], "old stays: its Miaotixing task waits for a person; young is young");
    let old_push = count(&world, "SELECT count(*) FROM delivery_task WHERE user_id = $1", stay).await;
    assert_eq!(old_push, 4, "the parked notification keeps both its tasks, young has its two");
    assert!(world.task(young.notification_id, young.tasks[0].task_id).await.is_ok());

    // Once the person decided, the old notification is finished and goes at the next run.
    let now = world.clock.now().await.expect("now");
    services
        .review
        .resolve_manually(
            parked[0].task_id,
            herald_domain::resolve::FinalState::Failed,
            "checked",
            &herald_tests::decision_event(
                parked[0].task_id,
                herald_domain::resolve::FinalState::Failed,
                "checked",
                now,
            ),
            now,
        )
        .await
        .expect("resolve");
    let report = purge_once(&services, &policy, "p1").await.expect("purge").expect("lease");
    assert_eq!(report.finished_notifications, 1, "{report:?}");

    // The tombstone (180 d): nothing in the database names the erased user any more.
    world.advance(90 * day);
    let report = purge_once(&services, &policy, "p1").await.expect("purge").expect("lease");
    assert_eq!(report.tombstones, 1, "{report:?}");
    assert!(rows_of(&world, gone).await.is_empty());
    assert!(!dump(&world).contains(gone), "the tombstone does not name the user");
    let record = services.lifecycle.erasure(&UserId::from(gone)).await.expect("record").expect("by digest");
    assert!(record.user_id.is_none() && record.tombstoned_at.is_some() && record.records_removed.is_some());
    assert!(
        matches!(
            world.submit(gone, "back", HOUR, None).await.map_err(|e| e.downcast::<StoreError>()),
            Err(Ok(StoreError::UserErased))
        ),
        "a tombstone still refuses a submission: the data does not come back"
    );
}

/// The purge's lease: of two processes one purges; the other takes over once the lease ends.
#[tokio::test]
async fn one_process_purges_at_a_time() {
    use herald_core::retention::{purge_once, RetentionPolicy};
    let world = World::new(ClockMode::Manual).await.expect("world");
    let services = world.services();
    let policy = RetentionPolicy::default();
    assert!(purge_once(&services, &policy, "p1").await.expect("p1").is_some());
    assert!(purge_once(&services, &policy, "p2").await.expect("p2").is_none(), "p1 holds the lease");
    assert!(purge_once(&services, &policy, "p1").await.expect("p1 again").is_some(), "its holder keeps it");
    let lease = herald_core::retention::lease_for(&policy).0;
    world.advance(lease - 1_000);
    assert!(purge_once(&services, &policy, "p2").await.expect("p2 early").is_none(), "the lease has not ended");
    world.advance(2_000);
    assert!(purge_once(&services, &policy, "p2").await.expect("p2 later").is_some(), "taken over after it ended");
}

/// The export: the user's own token or an admin token, one JSON document with every notification (body,
/// tasks, attempts) and each channel's preference; a destination appears only as "set"/"verified", never
/// itself. Another user's token and a service token are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_holds_everything_about_the_user_and_no_destination() {
    use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
    use reqwest::StatusCode;
    let world = World::new(ClockMode::Database).await.expect("world");
    world.user("u1", &["push", "sms"]).await.expect("u1");
    world.user("u2", &["push"]).await.expect("u2");
    // As after a test send the user confirmed.
    sqlx::query("UPDATE channel_pref SET verified_at = now() WHERE user_id = 'u1' AND channel = 'sms'")
        .execute(world.store.pool())
        .await
        .expect("verify");
    let first = world.submit("u1", "e1", HOUR, None).await.expect("e1");
    world.submit("u1", "e2", HOUR, None).await.expect("e2");
    world.submit("u2", "e1", HOUR, None).await.expect("u2");
    world.worker("w1", 60_000).drain(5).await.expect("drain");
    let api = Api::start(&world).await.expect("api");

    let own = api.get("/v1/users/u1/export", Some(&api.user_token("u1"))).await.ok(StatusCode::OK);
    let admin = api.get("/v1/users/u1/export", Some(ADMIN_TOKEN)).await.ok(StatusCode::OK);
    assert_eq!(own["notifications"], admin["notifications"]);
    assert_eq!(own["user_id"], "u1");
    assert!(own["erasure"].is_null());
    let notifications = own["notifications"].as_array().expect("notifications");
    assert_eq!(notifications.len(), 2, "u1's two, not u2's");
    assert_eq!(notifications[1]["body"], "Event e1 for u1", "oldest last");
    assert_eq!(notifications[1]["notification_id"], first.notification_ref.to_string());
    let tasks = notifications[1]["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t["state"] == "SENT" && t["attempts"].as_array().is_some_and(|a| a.len() == 1)));
    let channels: Vec<(String, String)> = own["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|c| (c["channel"].as_str().unwrap_or("").to_owned(), c["destination"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(channels, [("push".to_owned(), "set".to_owned()), ("sms".to_owned(), "verified".to_owned())]);
    let text = own.to_string();
    for channel in ["push", "sms"] {
        assert!(!text.contains(&World::destination("u1", channel)), "a destination leaked into the export");
    }

    api.get("/v1/users/u1/export", Some(&api.user_token("u2"))).await.problem(StatusCode::FORBIDDEN);
    api.get("/v1/users/u1/export", Some(SERVICE_TOKEN)).await.problem(StatusCode::FORBIDDEN);

    // After an erasure the export shows the record, and no channel.
    herald_core::usecases::erase_user(
        &world.services(),
        &herald_core::usecases::Actor::command_line("test"),
        &UserId::from("u1"),
    )
    .await
    .expect("erase");
    let after = api.get("/v1/users/u1/export", Some(ADMIN_TOKEN)).await.ok(StatusCode::OK);
    assert_eq!(after["erasure"]["requested_by"], "cli test");
    assert_eq!(after["channels"], serde_json::json!([]));
}

/// The console's erasure (an operator, the form under a user's inbox) is the API's: the same record and
/// the same settled tasks. The id must be typed again; a user's session cannot erase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_erases_as_the_api_does_and_only_for_an_operator() {
    use herald_tests::api::{Api, ADMIN_TOKEN};
    use herald_tests::console::Console;
    use reqwest::StatusCode;
    let world = World::new(ClockMode::Manual).await.expect("world");
    for user in ["ann", "bob"] {
        world.user(user, &["push", "sms"]).await.expect("user");
        world.submit(user, "e1", HOUR, None).await.expect("submit");
    }
    let api = Api::start(&world).await.expect("api");
    let by_api =
        api.post("/v1/users/ann/erasure", Some(ADMIN_TOKEN), &serde_json::json!({})).await.ok(StatusCode::ACCEPTED);

    let user_session = Console::user(&api, "bob").await;
    let refused = user_session.post("/console/users/bob/erasure", "confirm=bob").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "a user cannot erase");
    let operator = Console::operator(&api, ADMIN_TOKEN).await;
    let page = operator.get("/console/users/bob/inbox").await;
    assert!(page.body.contains("/console/users/bob/erasure"), "the inbox offers the erasure form");
    let mismatch = operator.post("/console/users/bob/erasure", "confirm=bo").await;
    assert_eq!(mismatch.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(services_record(&world, "bob").await.is_none(), "a mistyped id erases nothing");
    let done = operator.post("/console/users/bob/erasure", "confirm=bob").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("The user was erased"), "{}", done.body);
    let again = operator.post("/console/users/bob/erasure", "confirm=bob").await;
    assert!(again.body.contains("erased before"), "{}", again.body);

    let (ann, bob) =
        (services_record(&world, "ann").await.expect("ann"), services_record(&world, "bob").await.expect("bob"));
    assert_eq!(by_api["settled_tasks"], 2);
    assert_eq!((ann.settled_tasks, ann.destroyed_destinations), (bob.settled_tasks, bob.destroyed_destinations));
    assert!(bob.requested_by.starts_with("token "), "the console's operator is named: {}", bob.requested_by);
    let audited = erasure_audit(&world, "bob").await;
    assert_eq!(audited.len(), 1, "one audit event for the console's erasure and none for its repeat: {audited:?}");
    assert_eq!(format!("token {}", audited[0].0), bob.requested_by, "the record and the audit name one actor");
    assert_eq!(open_tasks(&world, "bob").await, 0);
}

/// The audit events of `user`'s erasure, oldest first: (actor name, actor kind, role). The trail names the
/// user only by the digest the tombstone keeps.
async fn erasure_audit(world: &World, user: &str) -> Vec<(String, String, String)> {
    let target = herald_core::usecases::erasure_target(&UserId::from(user));
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor_name, actor_kind, actor_role FROM audit_event WHERE action = 'erase_user' AND target = $1 ORDER BY id",
    )
    .bind(&target)
    .fetch_all(world.store.pool())
    .await
    .expect("audit");
    let naming: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_event WHERE target LIKE '%' || $1 || '%' OR detail LIKE '%' || $1 || '%'",
    )
    .bind(user)
    .fetch_one(world.store.pool())
    .await
    .expect("audit");
    assert_eq!(naming, 0, "no audit event names the erased user {user} by id");
    rows
}

/// The capability is the core's: a viewer's or a resolver's erasure, however it arrives, is refused by
/// the use case naming `erase_users`, and writes nothing — no erasure record, no audit event, no settled
/// task, no destroyed destination. An admin's goes through with one audit event naming the admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_refuses_an_erasure_without_the_capability_and_audits_the_one_it_does() {
    use herald_core::usecases::{AccessError, Actor};
    use herald_domain::operators::{ActorKind, Capability, Role};
    use herald_tests::api::Written;
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push", "sms"]).await.expect("u1");
    world.submit("u1", "e1", HOUR, None).await.expect("submit");
    let services = world.services();
    let user = UserId::from("u1");
    for role in [Role::Viewer, Role::Resolver] {
        let before = Written::now(&world).await.expect("counts");
        let actor = Actor::new(ActorKind::Operator, "Li Wei", role);
        let refused = herald_core::usecases::erase_user(&services, &actor, &user).await;
        match refused {
            Err(AccessError::Forbidden(forbidden)) => {
                assert_eq!(forbidden.capability, Capability::EraseUsers);
                assert!(forbidden.to_string().contains("erase_users"), "{forbidden}");
            }
            other => panic!("{role}: expected a refusal, got {other:?}"),
        }
        assert_eq!(Written::now(&world).await.expect("counts"), before, "{role}: nothing written");
        assert!(services_record(&world, "u1").await.is_none(), "{role}: no erasure record");
        assert_eq!(
            count(&world, "SELECT count(*) FROM audit_event WHERE $1 <> ''", "x").await,
            0,
            "{role}: no audit event"
        );
    }
    let admin = Actor::new(ActorKind::Operator, "Li Wei", Role::Admin);
    let erased = herald_core::usecases::erase_user(&services, &admin, &user).await.expect("erase");
    assert!(erased.first);
    assert_eq!(erased.record.requested_by, "Li Wei");
    assert_eq!(erased.record.settled_tasks, 2);
    assert_eq!(
        erasure_audit(&world, "u1").await,
        vec![("Li Wei".to_owned(), "operator".to_owned(), "admin".to_owned())]
    );
}

async fn services_record(world: &World, user: &str) -> Option<herald_ports::ErasureRecord> {
    world.services().lifecycle.erasure(&UserId::from(user)).await.expect("record")
}

/// After the erasure commits, what still holds the user's data until the content boundary answers with
/// none of it: the inbox (API, user's token or admin's) and marking read, the test send and its
/// confirmation, new sign-in links, a link made before the erasure, and the console sign-in with the
/// user's token all answer 410 ("user erased"), and nothing is written. Another user is untouched — the
/// same requests succeed for them, so each 410 is the erasure's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_users_inbox_test_send_and_sign_in_answer_gone() {
    use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
    use herald_tests::console::form_value;
    use reqwest::{Method, StatusCode};
    let world = World::new(ClockMode::Manual).await.expect("world");
    for user in ["ann", "bob"] {
        world.user(user, &["push"]).await.expect("user");
        world.submit(user, "e1", HOUR, None).await.expect("submit");
    }
    let api = Api::start(&world).await.expect("api");
    let old_link = api.sign_in_link("ann").await;
    let inbox = api.get("/v1/users/ann/inbox", Some(&api.user_token("ann"))).await.ok(StatusCode::OK);
    let notification = inbox["items"][0]["notification_id"].as_str().expect("an inbox item").to_owned();
    api.post("/v1/users/ann/erasure", Some(ADMIN_TOKEN), &serde_json::json!({})).await.ok(StatusCode::ACCEPTED);
    assert_eq!(
        count(&world, "SELECT count(*) FROM inbox_item WHERE user_id = $1", "ann").await,
        1,
        "kept until the boundary"
    );

    let empty = serde_json::json!({});
    for user in ["ann", "bob"] {
        let expect = if user == "ann" { StatusCode::GONE } else { StatusCode::OK };
        for token in [api.user_token(user), ADMIN_TOKEN.to_owned()] {
            let answer = api.get(&format!("/v1/users/{user}/inbox"), Some(&token)).await;
            assert_eq!(answer.status, expect, "{user}'s inbox: {}", answer.text);
            if user == "ann" {
                assert_eq!(answer.problem(StatusCode::GONE)["type"], "urn:herald:problem:user-erased");
                assert!(!answer.text.contains("Event e1"), "no body in the answer");
            }
        }
    }
    let read = format!("/v1/users/ann/inbox/{notification}/read");
    api.post(&read, Some(&api.user_token("ann")), &empty).await.problem(StatusCode::GONE);
    assert_eq!(
        count(&world, "SELECT count(*) FROM inbox_item WHERE user_id = $1 AND read_at IS NOT NULL", "ann").await,
        0
    );
    for path in ["/v1/users/ann/channels/push/test", "/v1/users/ann/channels/push/confirm"] {
        api.post(path, Some(ADMIN_TOKEN), &empty).await.problem(StatusCode::GONE);
    }
    api.post("/v1/users/bob/channels/push/test", Some(ADMIN_TOKEN), &empty).await.ok(StatusCode::OK);
    assert_eq!(world.push.requests_to(&World::destination("ann", "push")), 0, "no test send reached ann's channel");
    api.call(Method::POST, "/v1/users/ann/sign-in-links", Some(SERVICE_TOKEN), None).await.problem(StatusCode::GONE);
    assert_eq!(count(&world, "SELECT count(*) FROM console_sign_in_link WHERE user_id = $1", "ann").await, 0);
    api.sign_in_link("bob").await;

    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let form = |path: &str, body: String| {
        client
            .post(format!("{}{path}", api.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(body)
            .send()
    };
    let code = old_link.split_once("code=").expect("a code").1;
    let link = form("/console/login/user", format!("code={code}")).await.expect("answer");
    assert_eq!(link.status(), StatusCode::UNAUTHORIZED, "the erasure destroyed the link");
    for (user, expect) in [("ann", StatusCode::GONE), ("bob", StatusCode::SEE_OTHER)] {
        let answer =
            form("/console/login", format!("token={}", form_value(&api.user_token(user)))).await.expect("answer");
        assert_eq!(answer.status(), expect, "{user}'s console sign-in");
        let cookies: Vec<_> = answer.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).collect();
        assert_eq!(cookies.iter().any(|c| c.starts_with("herald_session=")), user == "bob", "{cookies:?}");
    }
    assert_eq!(
        count(&world, "SELECT count(*) FROM console_session WHERE user_id = $1 AND ended_at IS NULL", "ann").await,
        0
    );
}
