//! Digests (SPEC §7) with the manual clock: per (user, thread, channel) three instant prompts per rolling
//! hour, then one digest task at the end of the window that later events join; the digest is delivered
//! through the ordinary task/attempt machinery with the count in the text. No event loses its inbox item.

use herald_channels::config::DigestSetting;
use herald_core::worker::Report;
use herald_domain::{Millis, TaskState, UserId};
use herald_ports::prelude::*;
use herald_tests::world::{ClockMode, World, T0};

const TWO_HOURS: u64 = 7_200_000;

async fn world() -> World {
    World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.digest = Some(DigestSetting { instant_per_hour: 3, window_secs: None });
    })
    .await
    .expect("world")
}

/// The reference example: events at 0, 10, 20 s are sent; at 30 s no channel call and a digest task
/// exists; the 5th event is merged and the count becomes 2; all five inbox items are there. At the end
/// of the window the digest goes out once, through a task and an attempt, saying "2 new updates".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instant_prompts_then_one_digest_sent_at_the_end_of_the_window() {
    let world = world().await;
    world.user("u1", &["push"]).await.expect("user");
    let worker = world.worker("w1", 60_000);
    let dest = World::destination("u1", "push");

    for (n, at) in [0u64, 10, 20].into_iter().enumerate() {
        world.manual.set(T0 + Millis::from_secs(at));
        let created = world.submit_in_thread("u1", &format!("e{n}"), TWO_HOURS, "order-1").await.expect("submit");
        assert_eq!(created.tasks.len(), 1, "an instant task at {at} s");
        let cycle = worker.run_once().await.expect("cycle");
        assert_eq!(cycle, vec![Report::Sent(created.tasks[0].task_id)], "sent at {at} s");
    }
    assert_eq!(world.push.sends_to(&dest), 3);

    world.manual.set(T0 + Millis::from_secs(30));
    let fourth = world.submit_in_thread("u1", "e3", TWO_HOURS, "order-1").await.expect("4th");
    assert_eq!(fourth.tasks.len(), 1, "the 4th opens a digest task");
    let digest = fourth.tasks[0].task_id;
    assert!(worker.run_once().await.expect("cycle").is_empty(), "the digest is not due yet");
    assert_eq!(world.push.requests(), 3, "no channel call at 30 s");
    let view = world.task(fourth.notification_id, digest).await.expect("digest");
    assert_eq!((view.state, view.digest_count), (TaskState::Pending, Some(1)));
    assert_eq!(view.next_attempt_at, Some(T0 + Millis::from_secs(3_600)), "due when the 0 s prompt leaves the window");

    world.manual.set(T0 + Millis::from_secs(40));
    let fifth = world.submit_in_thread("u1", "e4", TWO_HOURS, "order-1").await.expect("5th");
    assert!(fifth.created && fifth.tasks.is_empty(), "the 5th joins the digest instead of getting a task");
    assert!(worker.run_once().await.expect("cycle").is_empty());
    assert_eq!(world.push.requests(), 3, "no channel call at 40 s");
    assert_eq!(world.task(fourth.notification_id, digest).await.expect("digest").digest_count, Some(2));

    let inbox = world.store.inbox(&UserId::from("u1"), 50).await.expect("inbox");
    assert_eq!(inbox.len(), 5, "every event keeps its inbox item");
    let merged: Vec<bool> = inbox.iter().map(|i| i.channels.iter().any(|c| c.in_digest)).collect();
    assert_eq!(merged, vec![true, true, false, false, false], "newest first: the 5th and 4th are in the digest");

    world.manual.set(T0 + Millis::from_secs(3_599));
    assert!(worker.run_once().await.expect("cycle").is_empty(), "not before the end of the window");
    world.manual.set(T0 + Millis::from_secs(3_600));
    let cycle = worker.run_once().await.expect("cycle");
    assert_eq!(cycle, vec![Report::Sent(digest)], "the digest is delivered by the ordinary cycle");
    let view = world.task(fourth.notification_id, digest).await.expect("digest");
    assert_eq!((view.state, view.attempt_count, view.attempts.len()), (TaskState::Sent, 1, 1));
    assert_eq!(world.push.sends_to(&dest), 4, "three instant prompts and one digest");
    let texts = world.push.texts_to(&dest);
    assert_eq!(texts.last().map(String::as_str), Some("2 new updates"), "the count is in the text: {texts:?}");
    assert_eq!(world.push.sends_for(&view.reference), 1, "sent once, under the digest task's reference");
}

/// Threads and users are separate digests: a fourth event in another thread is an instant prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_are_per_thread() {
    let world = world().await;
    world.user("u1", &["push"]).await.expect("user");
    for n in 0..3 {
        world.advance(1_000);
        world.submit_in_thread("u1", &format!("a{n}"), TWO_HOURS, "order-1").await.expect("submit");
    }
    world.advance(1_000);
    let other = world.submit_in_thread("u1", "b0", TWO_HOURS, "order-2").await.expect("other thread");
    let in_thread = world.submit_in_thread("u1", "a3", TWO_HOURS, "order-1").await.expect("same thread");
    let other_view = world.task(other.notification_id, other.tasks[0].task_id).await.expect("view");
    let digest_view = world.task(in_thread.notification_id, in_thread.tasks[0].task_id).await.expect("view");
    assert_eq!(other_view.digest_count, None, "another thread prompts at once");
    assert_eq!(digest_view.digest_count, Some(1), "the 4th in the thread opens a digest");
}

/// A digest expires with the last of its events, not with the one that opened it: opened by an event
/// that lives one minute and joined by one that lives two hours, it is still delivered at the end of the
/// window. A digest whose events have all expired is not sent, and its events say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_lives_as_long_as_its_longest_lived_event() {
    let world = world().await;
    world.user("u1", &["push"]).await.expect("user");
    let worker = world.worker("w1", 60_000);
    for (n, at) in [0u64, 10, 20].into_iter().enumerate() {
        world.manual.set(T0 + Millis::from_secs(at));
        world.submit_in_thread("u1", &format!("e{n}"), TWO_HOURS, "order-1").await.expect("submit");
        worker.run_once().await.expect("cycle");
    }
    world.manual.set(T0 + Millis::from_secs(30));
    let opener = world.submit_in_thread("u1", "short", 60_000, "order-1").await.expect("opener");
    let digest = opener.tasks[0].task_id;
    world.manual.set(T0 + Millis::from_secs(40));
    world.submit_in_thread("u1", "long", TWO_HOURS, "order-1").await.expect("joiner");

    world.manual.set(T0 + Millis::from_secs(3_600));
    assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Sent(digest)], "delivered, not expired");
    assert_eq!(
        world.push.texts_to(&World::destination("u1", "push")).last().map(String::as_str),
        Some("2 new updates")
    );

    // Another thread: every event of the digest expires before it is due.
    for (n, at) in [4_000u64, 4_010, 4_020].into_iter().enumerate() {
        world.manual.set(T0 + Millis::from_secs(at));
        world.submit_in_thread("u1", &format!("f{n}"), TWO_HOURS, "order-2").await.expect("submit");
        worker.run_once().await.expect("cycle");
    }
    world.manual.set(T0 + Millis::from_secs(4_030));
    let stale = world.submit_in_thread("u1", "f-short", 60_000, "order-2").await.expect("opener");
    world.submit_in_thread("u1", "f-short-2", 60_000, "order-2").await.expect("joiner");
    world.manual.set(T0 + Millis::from_secs(7_600));
    assert_eq!(worker.run_once().await.expect("cycle"), vec![Report::Failed(stale.tasks[0].task_id)]);
    let view = world.task(stale.notification_id, stale.tasks[0].task_id).await.expect("digest");
    assert_eq!(herald_tests::cases::outcomes(&view), ["TTL_EXPIRED"], "expired events are not prompted");
    let inbox = world.store.inbox(&UserId::from("u1"), 50).await.expect("inbox");
    let joined = inbox.iter().find(|i| i.body.contains("f-short-2")).expect("the joined event");
    let words: Vec<_> = joined.channels.iter().map(herald_http::api::routes::status_text).collect();
    assert_eq!(words, ["expired"], "the merged event says what happened to its digest");
}

/// The answer to a submit whose prompt joined a digest says so: no task of its own, and the digest task
/// that carries it under `merged` — distinguishable from an in-app-only notification. A repeated submit
/// answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_event_says_so_in_the_submit_answer() {
    use herald_tests::api::{Api, SERVICE_TOKEN};
    use reqwest::StatusCode;
    use serde_json::json;

    let world = world().await;
    world.user("u1", &["push"]).await.expect("user");
    let api = Api::start(&world).await.expect("api");
    let submit = |n: u32| {
        json!({"user_id": "u1", "event_key": format!("e{n}"), "body": "Update", "ttl_seconds": 7200,
               "thread_key": "order-1"})
    };
    let mut answers = Vec::new();
    for n in 0..5 {
        answers.push(api.post("/v1/notifications", Some(SERVICE_TOKEN), &submit(n)).await.ok(StatusCode::CREATED));
    }
    let digest = answers[3]["tasks"][0]["task_id"].as_i64().expect("the 4th opens the digest");
    assert!(answers[3].get("merged").is_none(), "nothing merged: {}", answers[3]);
    assert_eq!(answers[4]["tasks"], json!([]), "no task of its own");
    assert_eq!(answers[4]["merged"], json!([{"channel": "push", "digest_task_id": digest}]));
    let again = api.post("/v1/notifications", Some(SERVICE_TOKEN), &submit(4)).await.ok(StatusCode::OK);
    assert_eq!(again["merged"], answers[4]["merged"], "a repeated submit answers the same");
}
