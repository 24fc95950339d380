//! Idempotent submission as mature APIs do it: an identical repeat of `(user_id, event_key)` answers 200
//! with the existing notification; a repeat that says something else (body, TTL, thread, budget) is a
//! 409 problem naming what differs, and writes nothing — for one notification and for an event's
//! recipients alike.

use herald_tests::api::{Api, SERVICE_TOKEN};
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::json;

async fn rows(world: &World) -> (i64, i64, i64) {
    let count = |table: &str| format!("SELECT count(*) FROM {table}");
    (
        world.db.count(&count("notification")).await.expect("notifications"),
        world.db.count(&count("inbox_item")).await.expect("inbox"),
        world.db.count(&count("delivery_task")).await.expect("tasks"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_with_other_content_is_a_conflict_and_writes_nothing() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    world.user("u1", &["push"]).await.expect("user");
    let api = Api::start(&world).await.expect("api");
    let first = json!({"user_id": "u1", "event_key": "order-1", "body": "Your order has shipped", "ttl_seconds": 3600});
    let created = api.post("/v1/notifications", Some(SERVICE_TOKEN), &first).await.ok(StatusCode::CREATED);
    let before = rows(&world).await;

    let again = api.post("/v1/notifications", Some(SERVICE_TOKEN), &first).await.ok(StatusCode::OK);
    assert_eq!(again["notification_id"], created["notification_id"], "an identical repeat is the same notification");

    let mut changed = first.clone();
    changed["body"] = json!("Your order was cancelled");
    changed["ttl_seconds"] = json!(60);
    let answer = api.post("/v1/notifications", Some(SERVICE_TOKEN), &changed).await;
    let problem = answer.problem(StatusCode::CONFLICT);
    let fields: Vec<&str> =
        problem["errors"].as_array().expect("errors").iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, ["body", "ttl_seconds"], "{problem}");
    assert!(!problem.to_string().contains("cancelled"), "the refused content is not echoed: {problem}");
    assert_eq!(rows(&world).await, before, "nothing written");
    let inbox = api.get("/v1/users/u1/inbox", Some(&api.user_token("u1"))).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["body"], "Your order has shipped", "the stored notification is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_repeated_with_other_content_is_refused_for_every_recipient() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let event = json!({"event_key": "sale-1", "recipients": ["a", "b"], "body": "Sale tomorrow", "ttl_seconds": 3600});
    api.post("/v1/events", Some(SERVICE_TOKEN), &event).await.ok(StatusCode::CREATED);
    api.post("/v1/events", Some(SERVICE_TOKEN), &event).await.ok(StatusCode::OK);
    let before = rows(&world).await;

    // A third recipient is new, but the first two would change: nothing is written, not even for "c".
    let changed =
        json!({"event_key": "sale-1", "recipients": ["a", "b", "c"], "body": "Sale today", "ttl_seconds": 3600});
    let problem = api.post("/v1/events", Some(SERVICE_TOKEN), &changed).await.problem(StatusCode::CONFLICT);
    let fields: Vec<&str> =
        problem["errors"].as_array().expect("errors").iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, ["recipients[0].body", "recipients[1].body"], "{problem}");
    assert_eq!(rows(&world).await, before, "nothing written");
}
