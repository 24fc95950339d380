//! One path for every action (issue 41): what a person does in the console and what a client does through
//! the API go through the same use case of `herald-core`, so they store the same thing. Each test takes
//! two subjects in the same state, acts on one through the API and on the other through the console, and
//! compares what was stored. (Setting a preference is compared in `preferences.rs`.)

use herald_domain::{ChannelName, TaskId, UserId};
use herald_ports::prelude::*;
use herald_standin::Script;
use herald_tests::api::{Api, ADMIN_TOKEN};
use herald_tests::console::{form_value, Console};
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::json;

const HOUR: u64 = 3_600_000;

/// A Miaotixing task whose call was accepted but whose answer was lost: parked for a human.
async fn parked(world: &World, user: &str) -> (String, TaskId) {
    world.user(user, &["miao"]).await.expect("user");
    let created = world.submit(user, "order-1", HOUR, None).await.expect("submit");
    world.miao.script_for(&World::destination(user, "miao"), Script::DropAfterAccept);
    world.worker("w", 60_000).drain(5).await.expect("drain");
    (created.notification_ref.to_string(), created.tasks[0].task_id)
}

/// What a task is after a decision, without what differs by nature (ids, times).
async fn decided(world: &World, notification: &str, task: TaskId) -> (String, bool, u32, Vec<String>, Vec<String>) {
    let id = world.notification_id(notification).await.expect("notification");
    let view = world.task(id, task).await.expect("task");
    let outcomes = view.attempts.iter().map(|a| a.outcome.map_or("-".into(), |o| o.as_str().to_owned())).collect();
    let notes = view.attempts.iter().filter_map(|a| a.note.clone()).collect();
    (view.state.to_string(), view.needs_review, view.attempt_count, outcomes, notes)
}

#[tokio::test]
async fn a_decision_on_a_parked_task_stores_the_same_through_the_api_and_the_console() {
    for (api_word, console_word) in [("SENT", "SENT"), ("FAILED", "FAILED"), ("RESEND", "RESEND")] {
        let world = World::new(ClockMode::Manual).await.expect("world");
        let api = Api::start(&world).await.expect("api");
        let (by_api, task_a) = parked(&world, "ada").await;
        let (by_console, task_b) = parked(&world, "bo").await;
        let note = "checked with the channel's dashboard";
        let answer = api
            .post(
                &format!("/v1/tasks/{}/resolve", task_a.0),
                Some(ADMIN_TOKEN),
                &json!({"final_state": api_word, "note": note}),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        let operator = Console::operator(&api, ADMIN_TOKEN).await;
        let fields = format!("decision={console_word}&note={}", form_value(note));
        let page = operator.post(&format!("/console/tasks/{}/resolve", task_b.0), &fields).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        let (a, b) = (decided(&world, &by_api, task_a).await, decided(&world, &by_console, task_b).await);
        assert_eq!(a, b, "{api_word}: the API and the console stored the same decision");
        assert!(a.4.iter().any(|n| n == note), "{api_word}: the note is kept: {a:?}");
    }
}

#[tokio::test]
async fn marking_an_inbox_item_read_stores_the_same_through_the_api_and_the_console() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let a = world.submit("cy", "order-1", HOUR, None).await.expect("submit").notification_ref.to_string();
    let b = world.submit("di", "order-1", HOUR, None).await.expect("submit").notification_ref.to_string();
    let answer = api.post(&format!("/v1/users/cy/inbox/{a}/read"), Some(&api.user_token("cy")), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let console = Console::user(&api, "di").await;
    let page = console.post(&format!("/console/me/inbox/{b}/read"), "").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    let read = |user: &'static str| {
        let world = &world;
        async move {
            let items = world.store.inbox(&UserId::from(user), 10).await.expect("inbox");
            items.iter().map(|i| i.read_at == Some(world.manual.read())).collect::<Vec<_>>()
        }
    };
    assert_eq!(read("cy").await, vec![true]);
    assert_eq!(read("di").await, read("cy").await, "read at the same moment of the manual clock, by either path");
}

#[tokio::test]
async fn a_test_send_and_its_confirmation_store_the_same_through_the_api_and_the_console() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    world.user("eve", &["push"]).await.expect("user");
    world.user("fay", &["push"]).await.expect("user");
    let token = api.user_token("eve");
    let answer = api.post("/v1/users/eve/channels/push/test", Some(&token), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let console = Console::user(&api, "fay").await;
    let page = console.post("/console/me/channels/push/test", "").await;
    assert!(page.status.is_success() || page.status.is_redirection(), "{}: {}", page.status, page.body);
    for user in ["eve", "fay"] {
        assert_eq!(world.push.sends_to(&World::destination(user, "push")), 1, "{user}: one test prompt");
    }
    let pref = |user: &'static str| {
        let world = &world;
        async move { world.store.get(&UserId::from(user), &ChannelName::from("push")).await.expect("get").expect("pref") }
    };
    let shape = |p: herald_ports::ChannelPref| (p.enabled, p.has_destination, p.verified);
    assert_eq!(shape(pref("eve").await), shape(pref("fay").await), "after the test send");
    assert!(!pref("eve").await.verified, "a test send alone verifies nothing");

    let answer = api.post("/v1/users/eve/channels/push/confirm", Some(&token), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let page = console.post("/console/me/channels/push/confirm", "").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(shape(pref("eve").await), shape(pref("fay").await), "after the confirmation");
    assert!(pref("fay").await.verified, "the user's word verifies the destination");
}
