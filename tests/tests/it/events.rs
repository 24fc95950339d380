//! `POST /v1/events` in one transaction (`NotificationStore::create_event`): a thousand recipients get
//! exactly what a thousand single submits would give them — dedup by (user, event key), instant tasks,
//! digests opened and joined, in-app only — and one recipient's conflict writes nothing for anyone.

use std::time::{Duration, Instant};

use herald_channels::config::DigestSetting;
use herald_domain::{EventKey, Millis, ThreadKey, UserId};
use herald_ports::prelude::*;
use herald_ports::{Created, NewNotification};
use herald_tests::api::Written;
use herald_tests::world::{ClockMode, World};

const RECIPIENTS: usize = 1000;
/// Recipients whose notification of the event exists before it is submitted.
const BEFORE: usize = 100;

async fn world() -> World {
    World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.digest = Some(DigestSetting { instant_per_hour: 3, window_secs: None });
    })
    .await
    .expect("world")
}

fn user(n: usize) -> String {
    format!("u{n:04}")
}

fn event(users: impl Iterator<Item = String>, key: &str, body: &str) -> Vec<NewNotification> {
    users
        .map(|user| NewNotification {
            user_id: UserId::new(user),
            event_key: EventKey::from(key),
            body: body.to_owned(),
            ttl: Millis(3_600_000),
            max_attempts: None,
            thread_key: Some(ThreadKey::from("sale")),
            submitted_by: None,
        })
        .collect()
}

/// The same users, channels and history in `world`: every user has push (with a digest rule), every
/// third also sms, every tenth none; the first [`BEFORE`] already have the event; ten more had three
/// prompts in the thread (the event opens a digest), five more four (the event joins it).
async fn prepare(world: &World) -> Vec<NewNotification> {
    for n in 0..RECIPIENTS {
        let channels: &[&str] = match n % 10 {
            9 => &[],
            _ if n % 3 == 0 => &["push", "sms"],
            _ => &["push"],
        };
        world.user(&user(n), channels).await.expect("user");
    }
    let news = event((0..RECIPIENTS).map(user), "sale-1", "The sale starts");
    let now = world.clock.now().await.expect("now");
    for new in &news[..BEFORE] {
        world.store.create(new, &world.table(), now).await.expect("before");
    }
    for (n, prompts) in (BEFORE..BEFORE + 10).map(|n| (n, 3)).chain((BEFORE + 10..BEFORE + 15).map(|n| (n, 4))) {
        for p in 0..prompts {
            world.submit_in_thread(&user(n), &format!("earlier-{p}"), 3_600_000, "sale").await.expect("earlier");
        }
    }
    news
}

/// What an answer says, without ids: created, task channels, merged channels.
fn shape(created: &Created) -> (bool, Vec<String>, Vec<String>) {
    (
        created.created,
        created.tasks.iter().map(|t| t.channel.to_string()).collect(),
        created.merged.iter().map(|m| m.channel.to_string()).collect(),
    )
}

/// Tasks by channel and kind (instant or digest) with their digest counts, and the digest members.
async fn task_table(world: &World) -> Vec<(String, bool, i64, i64)> {
    sqlx::query_as(
        "SELECT channel, digest_count IS NOT NULL, count(*), COALESCE(sum(digest_count), 0)::bigint \
         FROM delivery_task GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(world.store.pool())
    .await
    .expect("tasks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_recipients_get_what_a_thousand_single_submits_give_in_one_transaction() {
    let (single, batched) = (world().await, world().await);
    let news = prepare(&single).await;
    assert_eq!(prepare(&batched).await, news);
    let table = single.table();

    // Before: one `create` (one transaction) per recipient, as the event route did.
    let now = single.clock.now().await.expect("now");
    let started = Instant::now();
    let mut one_by_one = Vec::with_capacity(news.len());
    for new in &news {
        one_by_one.push(single.store.create(new, &table, now).await.expect("create"));
    }
    let per_recipient = started.elapsed();

    // Now: one transaction for the event.
    let now = batched.clock.now().await.expect("now");
    let listener = batched.store.listen().await.expect("listen");
    let started = Instant::now();
    let at_once = batched.store.create_event(&news, &table, now).await.expect("create_event");
    let one_transaction = started.elapsed();
    println!(
        "{RECIPIENTS} recipients ({BEFORE} existing): one transaction per recipient {per_recipient:?}, \
         one transaction for the event {one_transaction:?}"
    );

    assert_eq!(at_once.len(), news.len());
    let shapes = |answers: &[Created]| answers.iter().map(shape).collect::<Vec<_>>();
    assert_eq!(shapes(&at_once), shapes(&one_by_one), "the same answer, recipient by recipient");
    assert!(at_once[..BEFORE].iter().all(|c| !c.created) && at_once[BEFORE..].iter().all(|c| c.created));
    assert_eq!(at_once.iter().filter(|c| !c.merged.is_empty()).count(), 5, "five joined a digest");
    assert!(at_once.iter().all(|c| c.differs.is_empty()));
    // Each recipient's answer names its own notification: the existing one for a repeat.
    for (answer, new) in at_once.iter().zip(&news) {
        let id = batched.notification_id(&answer.notification_ref.to_string()).await.expect("id");
        assert_eq!(id, answer.notification_id);
        let view = batched.store.notification(id).await.expect("view").expect("exists");
        assert_eq!((&view.user_id, &view.event_key), (&new.user_id, &new.event_key));
        let mut own: Vec<_> = view.tasks.iter().map(|t| t.task_id).collect();
        let mut answered: Vec<_> = answer.tasks.iter().map(|t| t.task_id).collect();
        own.sort();
        answered.sort();
        assert_eq!(own, answered, "{}: the answer lists the notification's own tasks", new.user_id);
    }
    let (a, b) = (Written::now(&single).await.expect("counts"), Written::now(&batched).await.expect("counts"));
    assert_eq!((a.notification, a.inbox_item, a.delivery_task), (b.notification, b.inbox_item, b.delivery_task));
    assert_eq!(task_table(&single).await, task_table(&batched).await, "the same instant and digest tasks");
    let members = |world: &World| {
        let pool = world.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM digest_member").fetch_one(&pool).await.expect("members")
        }
    };
    assert_eq!(members(&single).await, members(&batched).await);
    // Workers hear about the new tasks when the transaction commits.
    let mut listener = listener;
    let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await;
    assert!(matches!(heard, Ok(Ok(_))), "a wake-up for the new tasks: {heard:?}");

    // The same event again: every notification exists, nothing is written.
    let before = Written::now(&batched).await.expect("counts");
    let again = batched.store.create_event(&news, &table, now).await.expect("again");
    assert!(again.iter().all(|c| !c.created));
    assert_eq!(
        again.iter().map(|c| c.notification_ref).collect::<Vec<_>>(),
        at_once.iter().map(|c| c.notification_ref).collect::<Vec<_>>()
    );
    assert_eq!(Written::now(&batched).await.expect("counts"), before);

    // An event without a thread (no digest decision to make): every statement is one for all.
    let plain: Vec<NewNotification> = news
        .iter()
        .map(|n| NewNotification { thread_key: None, event_key: EventKey::from("news-1"), ..n.clone() })
        .collect();
    let started = Instant::now();
    let mut one_by_one = Vec::with_capacity(plain.len());
    for new in &plain {
        one_by_one.push(single.store.create(new, &table, now).await.expect("create"));
    }
    let per_recipient = started.elapsed();
    let started = Instant::now();
    let at_once = batched.store.create_event(&plain, &table, now).await.expect("create_event");
    let one_transaction = started.elapsed();
    println!(
        "{RECIPIENTS} recipients, no thread: one transaction per recipient {per_recipient:?}, \
         one transaction for the event {one_transaction:?}"
    );
    assert_eq!(shapes(&at_once), shapes(&one_by_one));
    assert_eq!(task_table(&single).await, task_table(&batched).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_recipients_conflict_writes_nothing_for_any_recipient() {
    let world = world().await;
    for u in ["a", "b", "x"] {
        world.user(u, &["push", "sms"]).await.expect("user");
    }
    let now = world.clock.now().await.expect("now");
    let stored = event(["x".to_owned()].into_iter(), "sale-2", "The old text");
    world.store.create(&stored[0], &world.table(), now).await.expect("x before");
    let before = Written::now(&world).await.expect("counts");

    let news = event(["a", "x", "b"].into_iter().map(str::to_owned), "sale-2", "The new text");
    let answer = world.store.create_event(&news, &world.table(), now).await.expect("answer");
    assert_eq!(answer.len(), 1, "only the conflicting recipient is answered: {answer:?}");
    assert_eq!(answer[0].differs, ["body"]);
    assert_eq!(Written::now(&world).await.expect("counts"), before, "nothing written for a or b");
    for u in ["a", "b"] {
        let found = world.store.notification_by_event(&UserId::from(u), &EventKey::from("sale-2")).await;
        assert_eq!(found.expect("lookup"), None, "{u} has no notification");
    }
}
