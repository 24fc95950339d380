//! The settings page's test send (SPEC §9) over real HTTP and the stand-ins: the same registry and
//! classification as a delivery, answers in words, a refusal that neither verifies nor deletes, the
//! user's confirmation as verification, and the egress interval (429 with `Retry-After`).

use herald_domain::TestSendQuota;
use herald_domain::{ChannelName, UserId};
use herald_ports::PreferenceStore;
use herald_standin::{Script, MIAO_NOT_FOUND};
use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
use herald_tests::{ClockMode, World};
use reqwest::header::RETRY_AFTER;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A world whose Miaotixing channel keeps its real 10 s interval (default guard 1 s).
async fn setup() -> (World, Api) {
    let world = World::with(ClockMode::Manual, |configs| {
        let miao = configs.iter_mut().find(|c| c.name == "miao").expect("miao");
        miao.min_interval_ms = None;
    })
    .await
    .expect("world");
    let api = Api::start(&world).await.expect("api");
    (world, api)
}

async fn test_send(api: &Api, user: &str, channel: &str, token: Option<&str>) -> herald_tests::api::Answer {
    api.post(&format!("/v1/users/{user}/channels/{channel}/test"), token, &json!({})).await
}

async fn pref(world: &World, user: &str, channel: &str) -> herald_ports::ChannelPref {
    world.store.get(&UserId::from(user), &ChannelName::from(channel)).await.expect("get").expect("pref")
}

async fn stored(world: &World, user: &str, channel: &str) -> Option<Vec<u8>> {
    world.store.destination(&UserId::from(user), &ChannelName::from(channel)).await.expect("destination")
}

fn assert_no_destination(answer: &str, user: &str, channel: &str) {
    assert!(!answer.contains(&World::destination(user, channel)), "the destination leaked: {answer}");
}

/// Accepted: the user is asked to confirm; only the confirmation verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_asks_for_confirmation_and_confirm_verifies() {
    let (world, api) = setup().await;
    let token = api.user_token("t1");
    let put = json!({"destination": World::destination("t1", "push"), "enabled": true});
    api.put("/v1/users/t1/channels/push", Some(&token), &put).await.ok(StatusCode::OK);

    let answer = test_send(&api, "t1", "push", Some(&token)).await;
    assert_no_destination(&answer.text, "t1", "push");
    let doc: Value = answer.ok(StatusCode::OK);
    assert_eq!(doc["outcome"], "accepted");
    assert_eq!(doc["message"], "accepted by the channel — please confirm you received it");
    assert_eq!(doc["confirmation"], "pending");
    assert_eq!(doc["verified"], false, "an acceptance alone does not verify");
    let reference = doc["reference"].as_str().expect("reference");
    assert!(reference.starts_with("test-"), "{reference}");
    assert!(!reference.contains("t1") && !reference.contains("push"), "random, nothing of the user: {reference}");
    assert_eq!(world.push.sends_to(&World::destination("t1", "push")), 1, "a real call through the adapter");
    assert_eq!(world.push.sends_for(reference), 1);
    assert!(!pref(&world, "t1", "push").await.verified);

    let confirmed = api.post("/v1/users/t1/channels/push/confirm", Some(&token), &json!({})).await.ok(StatusCode::OK);
    assert_eq!(confirmed["verified"], true);
    assert!(pref(&world, "t1", "push").await.verified);
}

/// Refused: told in words, and the destination is neither verified nor deleted. Unknown: told as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_neither_verifies_nor_deletes_and_unknown_says_so() {
    let (world, api) = setup().await;
    world.user("t2", &["miao", "push"]).await.expect("user");
    let before = stored(&world, "t2", "miao").await;
    world.miao.script_for(&World::destination("t2", "miao"), Script::text(200, MIAO_NOT_FOUND));

    let answer = test_send(&api, "t2", "miao", Some(ADMIN_TOKEN)).await;
    assert_no_destination(&answer.text, "t2", "miao");
    let doc = answer.ok(StatusCode::OK);
    assert_eq!(doc["outcome"], "refused");
    assert_eq!(doc["message"], "the channel refused: 找不到提醒单");
    assert_eq!(doc["confirmation"], "not requested");
    let after = pref(&world, "t2", "miao").await;
    assert!(!after.verified, "a refusal does not verify");
    assert!(after.has_destination && after.enabled, "a refusal does not delete or switch off");
    assert_eq!(stored(&world, "t2", "miao").await, before, "the stored destination is untouched");

    world.push.script(Script::DropAfterAccept);
    let doc = test_send(&api, "t2", "push", Some(&api.user_token("t2"))).await.ok(StatusCode::OK);
    assert_eq!(doc["outcome"], "unknown");
    assert_eq!(doc["message"], "we could not tell whether it arrived");
    assert_eq!(doc["confirmation"], "not requested");
}

/// The test send shares the channel's egress interval with the workers: a second Miaotixing call within
/// interval + guard is refused with 429 and `Retry-After`, and no call is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_too_soon_is_429_with_retry_after() {
    let (world, api) = setup().await;
    world.user("t3", &["miao"]).await.expect("user");
    let token = api.user_token("t3");
    test_send(&api, "t3", "miao", Some(&token)).await.ok(StatusCode::OK);
    assert_eq!(world.miao.requests(), 1);

    world.advance(5_000);
    let answer = test_send(&api, "t3", "miao", Some(&token)).await;
    let _ = answer.problem(StatusCode::TOO_MANY_REQUESTS);
    let retry_after = answer.headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(retry_after.as_deref(), Some("6"), "10 s interval + 1 s guard, 5 s already passed");
    assert_eq!(world.miao.requests(), 1, "no call when too soon");

    // A worker's delivery is held by the same row: a notification now waits for the same slot.
    let created = world.submit("t3", "e1", 3_600_000, None).await.expect("submit");
    let cycle = world.worker("w1", 60_000).run_once().await.expect("cycle");
    assert!(cycle.is_empty(), "the task waits for the slot the test send took: {cycle:?}");
    let view = world.task(created.notification_id, created.tasks[0].task_id).await.expect("view");
    assert_eq!((view.attempt_count, view.attempts.len()), (0, 0), "no attempt spent while waiting");

    // Once the slot is free, the waiting delivery goes first: a test press is refused while it is due.
    world.advance(6_000);
    let _ = test_send(&api, "t3", "miao", Some(&token)).await.problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(world.miao.requests(), 1, "the test press did not take the delivery's slot");
    let cycle = world.worker("w1", 60_000).run_once().await.expect("cycle");
    assert!(!cycle.is_empty(), "the delivery took the slot");
    assert_eq!(world.miao.requests(), 2);
}

/// Who may test, and what cannot be tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_send_access_and_bad_requests() {
    let (world, api) = setup().await;
    world.user("t4", &["push"]).await.expect("user");
    let other = api.user_token("someone-else");
    let _ = test_send(&api, "t4", "push", Some(&other)).await.problem(StatusCode::FORBIDDEN);
    let _ = test_send(&api, "t4", "push", Some(SERVICE_TOKEN)).await.problem(StatusCode::FORBIDDEN);
    let _ = test_send(&api, "t4", "push", None).await.problem(StatusCode::UNAUTHORIZED);
    let _ =
        api.post("/v1/users/t4/channels/push/confirm", Some(&other), &json!({})).await.problem(StatusCode::FORBIDDEN);
    let message = test_send(&api, "t4", "fax", Some(ADMIN_TOKEN))
        .await
        .field_problem(StatusCode::UNPROCESSABLE_ENTITY, "channel");
    assert_eq!(message, "is not a configured channel");
    let _ = test_send(&api, "t4", "sms", Some(ADMIN_TOKEN)).await.problem(StatusCode::CONFLICT);
    let _ = api
        .post("/v1/users/t4/channels/sms/confirm", Some(ADMIN_TOKEN), &json!({}))
        .await
        .problem(StatusCode::CONFLICT);
    assert_eq!(world.push.requests() + world.sms.requests(), 0, "no refused request called a channel");
    assert!(!pref(&world, "t4", "push").await.verified);
}

/// A confirmation verifies only the destination a test prompt was accepted for: not without a test, not
/// after a refused one, and not after the destination was changed in between. Sending the same
/// destination again keeps the verification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_verifies_only_the_destination_a_test_reached() {
    let (world, api) = setup().await;
    let token = api.user_token("t5");
    let confirm = || confirm_push(&api, &token);
    let put = |destination: &str| put_push(&api, &token, destination.to_owned());
    put(&World::destination("t5", "push")).await.ok(StatusCode::OK);

    confirm().await.problem(StatusCode::CONFLICT);
    assert!(!pref(&world, "t5", "push").await.verified, "no test yet: nothing to confirm");

    world.push.script(Script::status(400));
    test_send(&api, "t5", "push", Some(&token)).await.ok(StatusCode::OK);
    confirm().await.problem(StatusCode::CONFLICT);
    assert!(!pref(&world, "t5", "push").await.verified, "a refused test is not confirmable");

    assert_eq!(test_send(&api, "t5", "push", Some(&token)).await.ok(StatusCode::OK)["outcome"], "accepted");
    put("another-address").await.ok(StatusCode::OK);
    confirm().await.problem(StatusCode::CONFLICT);
    assert!(!pref(&world, "t5", "push").await.verified, "the tested destination was replaced");

    assert_eq!(test_send(&api, "t5", "push", Some(&token)).await.ok(StatusCode::OK)["outcome"], "accepted");
    confirm().await.ok(StatusCode::OK);
    assert!(pref(&world, "t5", "push").await.verified);
    put("another-address").await.ok(StatusCode::OK);
    assert!(pref(&world, "t5", "push").await.verified, "the same destination again keeps the verification");
    put(&World::destination("t5", "push")).await.ok(StatusCode::OK);
    assert!(!pref(&world, "t5", "push").await.verified, "a new destination is unverified");
}

async fn confirm_push(api: &Api, token: &str) -> herald_tests::api::Answer {
    api.post("/v1/users/t5/channels/push/confirm", Some(token), &json!({})).await
}

async fn put_push(api: &Api, token: &str, destination: String) -> herald_tests::api::Answer {
    api.put("/v1/users/t5/channels/push", Some(token), &json!({"destination": destination, "enabled": true})).await
}

/// The quota per (user, channel), with production's defaults (1 a minute, 10 a day): the second press
/// within a minute is a 429 with `Retry-After` and calls nothing; another user or channel is not held back;
/// the eleventh of a day waits for the oldest to leave the day. References are random.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_send_quota_is_per_user_and_channel_and_answers_retry_after() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start_with_quota(&world, TestSendQuota::default()).await.expect("api");
    world.user("q1", &["push", "sms"]).await.expect("user");
    world.user("q2", &["push"]).await.expect("user");
    let token = api.user_token("q1");

    let first = test_send(&api, "q1", "push", Some(&token)).await.ok(StatusCode::OK);
    world.advance(20_000);
    let answer = test_send(&api, "q1", "push", Some(&token)).await;
    let doc = answer.problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(doc["type"], "urn:herald:problem:test-send-quota", "{doc}");
    let retry_after = answer.headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(retry_after.as_deref(), Some("40"), "a minute after the first press");
    assert_eq!(world.push.requests(), 1, "a refused press calls nothing");
    // Another channel of the same user, and another user on the same channel, have quotas of their own.
    let other_channel = test_send(&api, "q1", "sms", Some(&token)).await.ok(StatusCode::OK);
    let other_user = test_send(&api, "q2", "push", Some(&api.user_token("q2"))).await.ok(StatusCode::OK);
    let references = [&first, &other_channel, &other_user].map(|d| d["reference"].as_str().unwrap().to_owned());
    assert!(
        references.iter().all(|r| r.starts_with("test-") && !r.contains("q1") && !r.contains("q2")),
        "{references:?}"
    );
    assert_ne!(references[0], references[1]);

    // Nine more, a minute apart, fill the day; the eleventh waits until the first leaves the day.
    for _ in 0..9 {
        world.advance(60_000);
        test_send(&api, "q1", "push", Some(&token)).await.ok(StatusCode::OK);
    }
    world.advance(60_000);
    let answer = test_send(&api, "q1", "push", Some(&token)).await;
    let _ = answer.problem(StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = answer.headers.get(RETRY_AFTER).unwrap().to_str().unwrap().parse().unwrap();
    // The first press was 20 s + 10 minutes ago.
    assert_eq!(retry_after, 86_400 - 620, "until the first press leaves the day");
    assert_eq!(world.push.sends_to(&World::destination("q1", "push")), 10);
}

/// Test sends come after real deliveries on a rate-limited channel: while a delivery is due, a test press
/// is refused (429, `Retry-After`) and neither takes the slot nor counts against the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_never_takes_the_slot_a_due_delivery_needs() {
    let (world, api) = setup().await;
    world.user("p1", &["miao"]).await.expect("user");
    let token = api.user_token("p1");
    let created = world.submit("p1", "e1", 3_600_000, None).await.expect("submit");

    let answer = test_send(&api, "p1", "miao", Some(&token)).await;
    let doc = answer.problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(doc["type"], "urn:herald:problem:too-soon", "{doc}");
    assert!(answer.headers.get(RETRY_AFTER).is_some());
    assert_eq!(world.miao.requests(), 0, "the test press called nothing");

    // The delivery takes the slot at once.
    let cycle = world.worker("w1", 60_000).run_once().await.expect("cycle");
    assert!(!cycle.is_empty(), "the delivery was not held back by the test press");
    let view = world.task(created.notification_id, created.tasks[0].task_id).await.expect("view");
    assert_eq!(view.state.to_string(), "SENT");
    assert_eq!(world.miao.requests(), 1);

    // Once the slot is free and nothing is due, the test goes (the refused press did not count).
    world.advance(11_000);
    assert_eq!(test_send(&api, "p1", "miao", Some(&token)).await.ok(StatusCode::OK)["outcome"], "accepted");
    assert_eq!(world.miao.requests(), 2);
}
