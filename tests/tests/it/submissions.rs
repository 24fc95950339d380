//! Concurrent submissions share statements (`adapters-postgres/src/create_batch.rs`): whatever batch a
//! submission lands in, it is stored once, answered with its own notification and tasks, and a
//! submission the database refuses fails alone.

use std::collections::HashMap;
use std::sync::Arc;

use herald_domain::{EventKey, Millis, NotificationId, UserId};
use herald_ports::prelude::*;
use herald_ports::store::{ChannelTable, Created, NewNotification, StoreError};
use herald_postgres::PgStore;
use herald_tests::wait::wait_until;
use herald_tests::world::T0;
use herald_tests::{ClockMode, World};
use sqlx::{Connection as _, Row as _};

const USERS: usize = 8;

fn new(user: &str, key: &str, body: &str) -> NewNotification {
    NewNotification {
        user_id: UserId::from(user),
        event_key: EventKey::from(key),
        body: body.to_owned(),
        ttl: Millis(3_600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    }
}

async fn world() -> World {
    let world = World::new(ClockMode::Manual).await.expect("world");
    for u in 0..USERS {
        world.user(&format!("u{u}"), &["push", "sms"]).await.expect("user");
    }
    world
}

/// Submits every `news` at once, each from its own task; the answers in the order of `news`.
async fn submit_all(
    store: &Arc<PgStore>,
    table: &ChannelTable,
    news: Vec<NewNotification>,
) -> Vec<Result<Created, StoreError>> {
    let handles: Vec<_> = news
        .into_iter()
        .map(|new| {
            let (store, table) = (Arc::clone(store), table.clone());
            tokio::spawn(async move { store.create(&new, &table, T0).await })
        })
        .collect();
    let mut answers = Vec::new();
    for handle in handles {
        answers.push(handle.await.expect("the submission's task"));
    }
    answers
}

/// The stored tasks of a notification: (id, channel), by id.
async fn stored_tasks(world: &World, id: NotificationId) -> Vec<(i64, String)> {
    let mut conn = sqlx::PgConnection::connect(&world.db.url).await.expect("connect");
    sqlx::query("SELECT id, channel FROM delivery_task WHERE notification_id = $1 ORDER BY id")
        .bind(id.0)
        .fetch_all(&mut conn)
        .await
        .expect("tasks")
        .into_iter()
        .map(|row| (row.get("id"), row.get("channel")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submissions_are_each_stored_once_and_answered_with_their_own_rows() {
    let world = world().await;
    let table = world.table();
    // 48 distinct keys, and a second, identical submission of the first 12 among them.
    let mut news: Vec<NewNotification> =
        (0..48).map(|i| new(&format!("u{}", i % USERS), &format!("order-{i}"), &format!("Order {i}"))).collect();
    news.extend((0..12).map(|i| new(&format!("u{}", i % USERS), &format!("order-{i}"), &format!("Order {i}"))));
    let answers = submit_all(&world.store, &table, news.clone()).await;

    let count = |table: &str| format!("SELECT count(*) FROM {table}");
    assert_eq!(world.db.count(&count("notification")).await.expect("count"), 48, "one notification per key");
    assert_eq!(world.db.count(&count("inbox_item")).await.expect("count"), 48, "one inbox item per key");
    assert_eq!(world.db.count(&count("delivery_task")).await.expect("count"), 96, "a task per enabled channel");

    let mut by_key: HashMap<String, Vec<&Created>> = HashMap::new();
    for (new, answer) in news.iter().zip(&answers) {
        let created = answer.as_ref().expect("every submission is answered");
        by_key.entry(new.event_key.as_str().to_owned()).or_default().push(created);
    }
    for (key, answers) in &by_key {
        let ids: Vec<NotificationId> = answers.iter().map(|c| c.notification_id).collect();
        assert!(ids.windows(2).all(|w| w[0] == w[1]), "{key}: one notification for all its submissions: {ids:?}");
        assert_eq!(answers.iter().filter(|c| c.created).count(), 1, "{key}: exactly one submission created it");
        for created in answers {
            let stored = stored_tasks(&world, created.notification_id).await;
            let answered: Vec<(i64, String)> =
                created.tasks.iter().map(|t| (t.task_id.0, t.channel.as_str().to_owned())).collect();
            let mut sorted = answered.clone();
            sorted.sort();
            assert_eq!(sorted, stored, "{key}: the answer names the stored tasks");
            let channels: Vec<&str> = answered.iter().map(|(_, c)| c.as_str()).collect();
            assert_eq!(channels, ["push", "sms"], "{key}: tasks in channel order");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_the_database_refuses_fails_alone_and_the_ones_written_with_it_succeed() {
    let world = world().await;
    let table = world.table();
    // Hold every flusher: each writes a key this transaction has inserted and not committed, and waits.
    let mut holder = sqlx::PgConnection::connect(&world.db.url).await.expect("connect");
    sqlx::query("BEGIN").execute(&mut holder).await.expect("begin");
    for i in 0..4 {
        sqlx::query(
            "INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
             VALUES ('u0', $1, 'held', now(), now() + interval '1 hour')",
        )
        .bind(format!("held-{i}"))
        .execute(&mut holder)
        .await
        .expect("held key");
    }
    // One at a time, so that each takes a flusher of its own.
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let mut held = Vec::new();
    for i in 0..4 {
        let (store, table) = (Arc::clone(&world.store), table.clone());
        let submission = new("u0", &format!("held-{i}"), "Held");
        held.push(tokio::spawn(async move { store.create(&submission, &table, T0).await }));
        wait_until("one more statement waiting for a held key", || async {
            world.db.count(waiting).await.is_ok_and(|n| n == i + 1)
        })
        .await;
    }

    // These queue up behind the held flushers and are taken together once they are free. PostgreSQL
    // refuses a NUL character in text: that one submission's statement fails.
    let mut news: Vec<NewNotification> =
        (0..10).map(|i| new(&format!("u{}", i % USERS), &format!("order-{i}"), "Your order has shipped")).collect();
    news.insert(5, new("u1", "poison", "a NUL \0 character"));
    let queued = tokio::spawn({
        let (store, table) = (Arc::clone(&world.store), table.clone());
        async move { submit_all(&store, &table, news).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.expect("rollback");

    for answer in held {
        assert!(answer.await.expect("held").expect("a held submission is written once its key is free").created);
    }
    let answers = queued.await.expect("queued");
    for (i, answer) in answers.iter().enumerate() {
        if i == 5 {
            assert!(answer.is_err(), "the refused submission fails: {answer:?}");
        } else {
            let created = answer.as_ref().expect("the others are written");
            assert!(created.created && created.tasks.len() == 2, "submission {i}: {created:?}");
        }
    }
    let db = &world.db;
    assert_eq!(db.count("SELECT count(*) FROM notification").await.expect("count"), 14, "4 held and 10 queued");
    assert_eq!(db.count("SELECT count(*) FROM notification WHERE event_key = 'poison'").await.expect("count"), 0);
    assert_eq!(db.count("SELECT count(*) FROM delivery_task").await.expect("count"), 28);
}
