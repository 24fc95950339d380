//! Business facts first (SPEC §3, §9): every notification and inbox item is committed before any channel
//! is called; a channel that refuses, is down or is slowed by its egress interval rolls nothing back and
//! blocks no other recipient; a recipient with no enabled channel is in-app only. Also the privacy-safe
//! external text (§8) and the inbox words per channel (§11), each driven for real over HTTP.

use herald_channels::config::{DigestSetting, MIAOTIXING_DEFAULT_TEXT};
use herald_core::worker::Report;
use herald_domain::{Outcome, TaskState};
use herald_standin::{Script, MIAO_BAD_PARAMS};
use herald_tests::api::{Api, SERVICE_TOKEN};
use herald_tests::world::T0;
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::{json, Value};

const SVC: Option<&str> = Some(SERVICE_TOKEN);

/// A loopback URL nobody listens on: calls to it are refused at connect (the channel is down).
async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    url
}

fn notification_of<'a>(answer: &'a Value, user: &str) -> &'a Value {
    answer["notifications"]
        .as_array()
        .expect("notifications")
        .iter()
        .find(|n| n["user_id"] == user)
        .unwrap_or_else(|| panic!("no notification for {user}: {answer}"))
}

async fn ids(world: &World, notification: &Value) -> (herald_domain::NotificationId, Option<herald_domain::TaskId>) {
    (
        world.notification_id(notification["notification_id"].as_str().expect("id")).await.expect("the notification"),
        notification["tasks"][0]["task_id"].as_i64().map(herald_domain::TaskId),
    )
}

/// One `POST /v1/events` for four recipients: A's Miaotixing refuses, B's Miaotixing accepts one egress
/// interval later (10 s, manual clock), C has no channel (in-app only), D's channel is down (connection
/// refused). Every notification and inbox item exists before any call; afterwards A is FAILED, B SENT,
/// D waiting to retry, nothing rolled back, and every recipient sees the item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_or_down_recipient_never_hurts_another() {
    let down = closed_port_url().await;
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = Some(10_000);
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.url = down;
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("a", &["miao"]).await.expect("a");
    world.user("b", &["miao"]).await.expect("b");
    world.user("d", &["push"]).await.expect("d");
    // Miaotixing's documented refusal (HTTP 200, "parameter format error"): a 4xx from Miaotixing proves
    // nothing and would be an unknown outcome (§9).
    world.miao.script_for(&World::destination("a", "miao"), Script::text(200, MIAO_BAD_PARAMS));

    let body = "Your order ord-1001 has shipped";
    let event =
        json!({"event_key": "ord-1001-shipped", "recipients": ["a", "b", "c", "d"], "body": body, "ttl_seconds": 3600});
    let answer = api.post("/v1/events", SVC, &event).await.ok(StatusCode::CREATED);
    assert_eq!((world.miao.requests(), world.push.requests()), (0, 0), "no channel is called by the submit");
    for user in ["a", "b", "c", "d"] {
        let inbox = api.get(&format!("/v1/users/{user}/inbox"), Some(&api.user_token(user))).await.ok(StatusCode::OK);
        assert_eq!(inbox["items"][0]["body"], body, "{user}'s inbox item is committed before any call");
    }
    assert!(notification_of(&answer, "c")["tasks"].as_array().expect("tasks").is_empty(), "c is in-app only");

    let worker = world.worker("w1", 60_000);
    let first = worker.run_once().await.expect("first cycle");
    assert_eq!(world.miao.requests(), 1, "one Miaotixing call per interval: {first:?}");
    assert!(first.iter().any(|r| matches!(r, Report::Deferred(_))), "the other recipient waits: {first:?}");
    let (a, b, d) = (
        ids(&world, notification_of(&answer, "a")).await,
        ids(&world, notification_of(&answer, "b")).await,
        ids(&world, notification_of(&answer, "d")).await,
    );
    let view = |(n, t): (herald_domain::NotificationId, Option<herald_domain::TaskId>)| {
        let world = &world;
        async move { world.task(n, t.expect("a task")).await.expect("view") }
    };
    // Which of A and B the first cycle reached is the database's choice; the other one was deferred by
    // the interval, not failed, with no attempt spent.
    let (a_now, b_now) = (view(a).await, view(b).await);
    let waiting = if a_now.attempt_count == 0 { &a_now } else { &b_now };
    assert_eq!((waiting.state, waiting.attempt_count), (TaskState::Pending, 0), "deferred, not failed: {waiting:?}");
    assert_eq!(waiting.next_attempt_at, Some(T0), "untouched: due, and first in line for the next slot");
    let d_view = view(d).await;
    assert_eq!((d_view.state, d_view.attempt_count), (TaskState::Pending, 1), "the down channel retries later");
    assert_eq!(d_view.attempts[0].outcome, Some(Outcome::RetryableReject));

    world.advance(10_000);
    assert!(
        worker.run_once().await.expect("cycle").iter().all(|r| !matches!(r, Report::Sent(_) | Report::Failed(_))),
        "10 s is not yet interval + guard"
    );
    world.advance(1_000);
    worker.run_once().await.expect("second cycle");
    assert_eq!(world.miao.requests(), 2, "the second Miaotixing call happens 11 s after the first");

    let (a_view, b_view) = (view(a).await, view(b).await);
    assert_eq!((a_view.state, a_view.attempt_count), (TaskState::Failed, 1), "A refused: {a_view:?}");
    assert_eq!((b_view.state, b_view.attempt_count), (TaskState::Sent, 1), "B accepted: {b_view:?}");
    assert_eq!(world.miao.sends_to(&World::destination("b", "miao")), 1);
    assert_eq!(world.miao.sends_to(&World::destination("a", "miao")), 0);
    assert_eq!(world.db.count("SELECT count(*) FROM notification").await.expect("count"), 4, "nothing rolled back");
    assert_eq!(world.db.count("SELECT count(*) FROM inbox_item").await.expect("count"), 4, "nothing rolled back");
    let expect =
        [("a", Some("failed")), ("b", Some("accepted by channel")), ("c", None), ("d", Some("waiting to retry"))];
    for (user, words) in expect {
        let inbox = api.get(&format!("/v1/users/{user}/inbox"), Some(&api.user_token(user))).await.ok(StatusCode::OK);
        let item = &inbox["items"][0];
        assert_eq!(item["body"], body, "{user} sees the item");
        match words {
            Some(words) => assert_eq!(item["channels"][0]["status_text"], words, "{user}: {item}"),
            None => assert_eq!(item["status_text"], "in-app only", "{user}: {item}"),
        }
    }
}

/// The third parties never receive the body: a configured `text` on the webhook and Miaotixing's
/// default text are all they see, while the inbox keeps the full body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_channels_get_the_privacy_safe_text_and_the_inbox_the_body() {
    let world = World::with(ClockMode::Manual, |configs| {
        let push = configs.iter_mut().find(|c| c.name == "push").expect("push");
        push.text = Some("You have a new update".into());
    })
    .await
    .expect("world");
    world.user("p", &["push", "miao"]).await.expect("user");
    let api = Api::start(&world).await.expect("api");
    let body = "Dr. Jane Roe: your test results for case 4711 are ready at 221B Baker Street";
    let submit = json!({"user_id": "p", "event_key": "results-4711", "body": body, "ttl_seconds": 3600});
    api.post("/v1/notifications", SVC, &submit).await.ok(StatusCode::CREATED);
    world.worker("w1", 60_000).drain(5).await.expect("drain");

    assert_eq!(world.push.texts_to(&World::destination("p", "push")), ["You have a new update"]);
    assert_eq!(world.miao.texts_to(&World::destination("p", "miao")), [MIAOTIXING_DEFAULT_TEXT]);
    for message in world.push.messages().iter().chain(world.miao.messages().iter()) {
        for word in ["Jane", "Roe", "4711", "Baker", "results"] {
            assert!(!message.text.contains(word), "a third party received part of the body: {message:?}");
        }
    }
    let inbox = api.get("/v1/users/p/inbox", Some(&api.user_token("p"))).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["body"], body, "the inbox keeps the full body");
}

/// Every word of §11 driven by a real state: accepted, channel off, expired, under review, in-app only,
/// merged into a digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_status_words_for_each_state() {
    let world = World::with(ClockMode::Manual, |configs| {
        let sms = configs.iter_mut().find(|c| c.name == "sms").expect("sms");
        sms.digest = Some(DigestSetting { instant_per_hour: 1, window_secs: None });
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    for (user, channel) in [("s", "push"), ("m", "miao"), ("r", "miao"), ("g", "sms")] {
        world.user(user, &[channel]).await.expect("user");
    }
    let submit = |user: &str, key: &str, ttl: i64, thread: Option<&str>| {
        let body = json!({"user_id": user, "event_key": key, "body": format!("{key} happened"), "ttl_seconds": ttl, "thread_key": thread});
        let api = &api;
        async move { api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED) }
    };
    let worker = world.worker("w1", 60_000);

    submit("s", "accepted", 3600, None).await;
    worker.drain(5).await.expect("drain");
    submit("s", "off", 3600, None).await;
    world.switch("s", "push", false).await.expect("switch off before the claim");
    submit("m", "expired", 1, None).await;
    world.advance(2_000);
    world.miao.script_for(&World::destination("r", "miao"), Script::DropAfterAccept);
    submit("r", "review", 3600, None).await;
    submit("nobody", "alone", 3600, None).await;
    submit("g", "g1", 3600, Some("t")).await;
    submit("g", "g2", 3600, Some("t")).await;
    worker.drain(10).await.expect("drain");

    let words = |user: &'static str| {
        let api = &api;
        async move {
            let inbox =
                api.get(&format!("/v1/users/{user}/inbox"), Some(&api.user_token(user))).await.ok(StatusCode::OK);
            inbox["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|item| match item["channels"].as_array().expect("channels").as_slice() {
                    [] => item["status_text"].as_str().unwrap_or("<none>").to_owned(),
                    channels => channels
                        .iter()
                        .map(|c| c["status_text"].as_str().expect("words"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(words("s").await, ["not sent: channel off", "accepted by channel"], "newest first");
    assert_eq!(words("m").await, ["expired"]);
    assert_eq!(words("r").await, ["outcome unknown — under review"]);
    assert_eq!(words("nobody").await, ["in-app only"]);
    assert_eq!(words("g").await, ["merged into a digest", "accepted by channel"]);
}
