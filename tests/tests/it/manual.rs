//! The human exit's third answer (RESEND), the words of every manual resolution (issue 15 item 1), and
//! mark-as-read — through the real API over real PostgreSQL and the stand-ins.

use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
use herald_tests::world::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::{json, Value};

use herald_standin::Script;

const SVC: Option<&str> = Some(SERVICE_TOKEN);
const ADMIN: Option<&str> = Some(ADMIN_TOKEN);

async fn setup() -> (World, Api) {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    (world, api)
}

async fn drain(world: &World) {
    world.worker("manual-w", 60_000).drain(20).await.expect("worker cycles");
}

/// A Miaotixing notification whose connection breaks after the stand-in accepted: parked (neither key nor
/// query). Returns (notification id, task id).
async fn parked(world: &World, api: &Api, user: &str, key: &str) -> (String, i64) {
    world.user(user, &["miao"]).await.unwrap();
    let body = json!({"user_id": user, "event_key": key, "body": format!("order {key}"), "ttl_seconds": 3600});
    let created = api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
    world.miao.script(Script::DropAfterAccept);
    drain(world).await;
    (created["notification_id"].as_str().map(str::to_owned).unwrap(), created["tasks"][0]["task_id"].as_i64().unwrap())
}

fn task_of(view: &Value) -> &Value {
    &view["tasks"][0]
}

fn outcomes(task: &Value) -> Vec<String> {
    task["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap_or("…").to_owned()).collect()
}

#[tokio::test]
async fn resend_returns_a_parked_task_to_pending_and_the_next_send_is_an_ordinary_fenced_attempt() {
    let (world, api) = setup().await;
    let (notification, task) = parked(&world, &api, "r1", "ord-r1").await;
    // Miaotixing carries no reference on the wire: the stand-in counts its sends as a whole.
    assert_eq!(world.miao.sends(), 1, "the first send was accepted");

    let path = format!("/v1/tasks/{task}/resolve");
    let done = api
        .post(&path, ADMIN, &json!({"final_state": "RESEND", "note": "user checked: nothing arrived"}))
        .await
        .ok(StatusCode::OK);
    assert_eq!(done["state"], "PENDING");
    let view = api.get(&format!("/v1/notifications/{notification}"), ADMIN).await.ok(StatusCode::OK);
    let t = task_of(&view);
    assert_eq!(t["state"], "PENDING");
    assert_eq!(t["outcome_uncertain"], false, "the human's statement cleared the uncertainty");
    assert_eq!(t["needs_review"], false);
    assert_eq!(t["parked"], false);
    assert_eq!(t["attempt_count"], 0, "a fresh budget");
    assert_eq!(t["last_error"], Value::Null, "a human decision is not an error");
    assert_eq!(t["resolution"]["final_state"], "RESEND");
    assert_eq!(t["resolution"]["note"], "user checked: nothing arrived");
    assert_eq!(outcomes(t), ["IO_ERROR", "MANUAL_RESEND"]);
    let manual = &t["attempts"][1];
    assert_eq!(
        (manual["action"].clone(), manual["note"].clone()),
        (Value::Null, json!("user checked: nothing arrived"))
    );

    // A second decision on the same task (another tab) changes nothing.
    let again = api.post(&path, ADMIN, &json!({"final_state": "RESEND", "note": "again"})).await;
    let _ = again.problem(StatusCode::CONFLICT);

    // The next cycle sends again as an ordinary claimed attempt (action SEND, its own token), and it is
    // accepted: the task is SENT by the channel's acceptance, not by the human.
    drain(&world).await;
    let view = api.get(&format!("/v1/notifications/{notification}"), ADMIN).await.ok(StatusCode::OK);
    let t = task_of(&view);
    assert_eq!(outcomes(t), ["IO_ERROR", "MANUAL_RESEND", "ACCEPTED"]);
    assert_eq!(t["attempts"][2]["action"], "SEND");
    assert_eq!((t["state"].as_str(), t["attempt_count"].as_i64()), (Some("SENT"), Some(1)));
    assert_eq!(world.miao.sends(), 2, "the person asked for a second real send");
    let inbox = api.get("/v1/users/r1/inbox", ADMIN).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["channels"][0]["status_text"], "accepted by channel");
    let _ = api.post(&path, ADMIN, &json!({"final_state": "SENT", "note": "late"})).await.problem(StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_manual_resolution_reads_as_one_everywhere() {
    let (world, api) = setup().await;
    let (sent_n, sent_t) = parked(&world, &api, "m1", "ord-m1").await;
    let (failed_n, failed_t) = parked(&world, &api, "m2", "ord-m2").await;
    let note = "user confirmed on the phone";
    api.post(&format!("/v1/tasks/{sent_t}/resolve"), ADMIN, &json!({"final_state": "SENT", "note": note}))
        .await
        .ok(StatusCode::OK);
    api.post(&format!("/v1/tasks/{failed_t}/resolve"), ADMIN, &json!({"final_state": "FAILED", "note": "never came"}))
        .await
        .ok(StatusCode::OK);

    let view = api.get(&format!("/v1/notifications/{sent_n}"), ADMIN).await.ok(StatusCode::OK);
    let t = task_of(&view);
    assert_eq!(t["state"], "SENT");
    assert_eq!(t["outcome_uncertain"], false, "not shown beside SENT as if still uncertain");
    assert_eq!(t["last_error"], Value::Null, "the note is not an error");
    assert_eq!(t["resolution"]["note"], note);
    assert_eq!(t["resolution"]["text"], format!("marked sent by an operator: {note}"));
    assert_eq!(t["attempts"].as_array().unwrap().last().unwrap()["note"], note);

    let inbox = api.get("/v1/users/m1/inbox", ADMIN).await.ok(StatusCode::OK);
    let words = inbox["items"][0]["channels"][0]["status_text"].as_str().unwrap();
    assert_eq!(words, format!("marked sent by an operator: {note}"));
    assert!(!inbox.to_string().contains("accepted by channel"), "a human said so, not the channel");

    let view = api.get(&format!("/v1/notifications/{failed_n}"), ADMIN).await.ok(StatusCode::OK);
    assert_eq!(task_of(&view)["resolution"]["text"], "marked not sent by an operator: never came");
    let inbox = api.get("/v1/users/m2/inbox", ADMIN).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["channels"][0]["status_text"], "marked not sent by an operator: never came");
    assert!(!inbox.to_string().to_lowercase().contains("error"));
}

#[tokio::test]
async fn resend_is_refused_for_a_task_that_is_not_parked_and_for_other_roles() {
    let (world, api) = setup().await;
    world.user("n1", &["push"]).await.unwrap();
    let body = json!({"user_id": "n1", "event_key": "k", "body": "b", "ttl_seconds": 3600});
    let created = api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
    let task = created["tasks"][0]["task_id"].as_i64().unwrap();
    let path = format!("/v1/tasks/{task}/resolve");
    let _ = api.post(&path, ADMIN, &json!({"final_state": "RESEND", "note": "x"})).await.problem(StatusCode::CONFLICT);
    let user = api.user_token("n1");
    let _ = api
        .post(&path, Some(&user), &json!({"final_state": "RESEND", "note": "x"}))
        .await
        .problem(StatusCode::FORBIDDEN);
    let message = api
        .post(&path, ADMIN, &json!({"final_state": "AGAIN", "note": "x"}))
        .await
        .field_problem(StatusCode::UNPROCESSABLE_ENTITY, "final_state");
    assert!(message.contains("RESEND"), "{message}");
}

#[tokio::test]
async fn mark_as_read_sets_read_at_once_and_repeating_changes_nothing() {
    let (world, api) = setup().await;
    world.user("reader", &[]).await.unwrap();
    let body = json!({"user_id": "reader", "event_key": "k1", "body": "hello", "ttl_seconds": 3600});
    let created = api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
    let id = created["notification_id"].as_str().map(str::to_owned).unwrap();
    let token = api.user_token("reader");
    let path = format!("/v1/users/reader/inbox/{id}/read");

    let inbox = api.get("/v1/users/reader/inbox", Some(&token)).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["read_at"], Value::Null);

    let first = api.call(reqwest::Method::POST, &path, Some(&token), None).await.ok(StatusCode::OK);
    assert_eq!(
        (first["notification_id"].as_str().map(str::to_owned), first["changed"].as_bool()),
        (Some(id.clone()), Some(true))
    );
    let read_at = first["read_at"].as_str().unwrap().to_owned();
    world.advance(5_000);
    let second = api.call(reqwest::Method::POST, &path, Some(&token), None).await.ok(StatusCode::OK);
    assert_eq!(second["changed"], false);
    assert_eq!(second["read_at"], read_at.as_str(), "the first time stays");
    let inbox = api.get("/v1/users/reader/inbox", Some(&token)).await.ok(StatusCode::OK);
    assert_eq!(inbox["items"][0]["read_at"], read_at.as_str());

    // Another user's token, a service token, and an item not in this inbox.
    let other = api.user_token("someone-else");
    let _ = api.call(reqwest::Method::POST, &path, Some(&other), None).await.problem(StatusCode::FORBIDDEN);
    let _ = api.call(reqwest::Method::POST, &path, SVC, None).await.problem(StatusCode::FORBIDDEN);
    let _ = api
        .call(reqwest::Method::POST, "/v1/users/reader/inbox/987654/read", Some(&token), None)
        .await
        .problem(StatusCode::NOT_FOUND);
    let _ = api
        .call(reqwest::Method::POST, &format!("/v1/users/someone-else/inbox/{id}/read"), ADMIN, None)
        .await
        .problem(StatusCode::NOT_FOUND);
    // The serial key of the reader's own item names nothing: only the opaque id does.
    let serial = world.notification_id(&id).await.unwrap().0;
    let _ = api
        .call(reqwest::Method::POST, &format!("/v1/users/reader/inbox/{serial}/read"), Some(&token), None)
        .await
        .problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_console_read_models_page_filter_and_find() {
    use herald_domain::{ChannelName, EventKey, Millis, UserId};
    use herald_ports::prelude::*;
    use herald_ports::{InboxCursor, ParkedFilter};

    let (world, api) = setup().await;
    let mut parked_tasks = Vec::new();
    for n in 0..5 {
        parked_tasks.push(parked(&world, &api, &format!("pg{n}"), &format!("ord-{n}")).await.1);
        world.advance(1_000);
    }
    let store = &world.store;
    // Keyset pages of two, oldest first, every parked task once.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .parked_page(&ParkedFilter { channel: None, parked_before: None, after, limit: 2 })
            .await
            .expect("page");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().map(|p| (p.parked_at, p.task.task_id));
        seen.extend(page.iter().map(|p| p.task.task_id.0));
    }
    assert_eq!(seen, parked_tasks);
    // By channel, and by age: parked at or before T0 + 1 s holds the first two.
    let push = ParkedFilter { channel: Some(ChannelName::new("push")), parked_before: None, after: None, limit: 10 };
    assert!(store.parked_page(&push).await.expect("push").is_empty());
    let old = ParkedFilter {
        channel: Some(ChannelName::new("miao")),
        parked_before: Some(herald_tests::world::T0 + Millis(1_000)),
        after: None,
        limit: 10,
    };
    let old: Vec<i64> = store.parked_page(&old).await.expect("old").iter().map(|p| p.task.task_id.0).collect();
    assert_eq!(old, parked_tasks[..2]);

    // Look-ups of the delivery log.
    let user = UserId::new("pg3");
    let id = store.notification_by_event(&user, &EventKey::new("ord-3")).await.expect("by event").expect("found");
    let view = store.notification(id).await.expect("view").expect("exists");
    assert_eq!(view.tasks[0].task_id.0, parked_tasks[3]);
    let by_ref = store.notification_by_reference(&view.tasks[0].reference).await.expect("by ref");
    assert_eq!(by_ref, Some(id));
    assert_eq!(store.notification_by_reference("not-a-uuid").await.expect("no ref"), None);
    assert_eq!(store.notification_by_event(&user, &EventKey::new("nope")).await.expect("none"), None);

    // Overview: this hour's outcomes by channel, the egress rows.
    let counts = store.outcome_counts(herald_tests::world::T0).await.expect("counts");
    assert!(counts.iter().any(|c| c.channel.as_str() == "miao" && c.count == 5), "{counts:?}");
    let _ = store.egress_slots().await.expect("slots");

    // The inbox in pages, newest first, by cursor.
    world.user("many", &[]).await.unwrap();
    for n in 0..5 {
        let body = json!({"user_id": "many", "event_key": format!("m{n}"), "body": format!("m{n}"), "ttl_seconds": 60});
        api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
        world.advance(10);
    }
    let many = UserId::new("many");
    let first = store.inbox_page(&many, None, 3).await.expect("page 1");
    let last = first.last().expect("three");
    let cursor = InboxCursor { created_at: last.created_at, notification: last.notification_ref };
    let second = store.inbox_page(&many, Some(cursor), 3).await.expect("page 2");
    let bodies: Vec<&str> = first.iter().chain(&second).map(|i| i.body.as_str()).collect();
    assert_eq!(bodies, ["m4", "m3", "m2", "m1", "m0"]);
}

/// Every console read is served by its index: with sequential scans priced out (`enable_seqscan = off`,
/// since a tiny test table would otherwise always be scanned), each plan names the index it was written
/// for and scans no table whole.
#[tokio::test]
async fn every_console_query_is_served_by_an_index() {
    use sqlx::Connection as _;
    let world = World::new(ClockMode::Manual).await.expect("world");
    let mut conn = sqlx::PgConnection::connect(&world.db.url).await.expect("connect");
    sqlx::query("SET enable_seqscan = off").execute(&mut conn).await.expect("set");
    let at = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(1_767_225_600_000).expect("time");
    let plans: Vec<(&str, &str, Vec<String>)> = vec![
        ("inbox page", "inbox_item_newest", {
            let q = format!("EXPLAIN {}", herald_postgres::INBOX_PAGE);
            sqlx::query_scalar(&q)
                .bind("u")
                .bind(20_i64)
                .bind(at)
                .bind(uuid::Uuid::new_v4())
                .fetch_all(&mut conn)
                .await
                .expect("plan")
        }),
        ("by opaque id", "notification_public_id", {
            let q = format!("EXPLAIN {}", herald_postgres::NOTIFICATION_BY_REF);
            sqlx::query_scalar(&q).bind(uuid::Uuid::new_v4()).fetch_all(&mut conn).await.expect("plan")
        }),
        ("parked page", "delivery_task_parked_by_channel", {
            let q = format!("EXPLAIN {}", herald_postgres::PARKED_PAGE);
            sqlx::query_scalar(&q)
                .bind("miao")
                .bind(at)
                .bind(at)
                .bind(3_i64)
                .bind(21_i64)
                .fetch_all(&mut conn)
                .await
                .expect("plan")
        }),
        ("by event", "notification_user_event_key", {
            let q = format!("EXPLAIN {}", herald_postgres::NOTIFICATION_BY_EVENT);
            sqlx::query_scalar(&q).bind("u").bind("k").fetch_all(&mut conn).await.expect("plan")
        }),
        ("by reference", "delivery_task_by_reference", {
            let q = format!("EXPLAIN {}", herald_postgres::NOTIFICATION_BY_REFERENCE);
            sqlx::query_scalar(&q).bind(uuid::Uuid::new_v4()).fetch_all(&mut conn).await.expect("plan")
        }),
        ("outcome counts", "delivery_attempt_recent", {
            let q = format!("EXPLAIN {}", herald_postgres::OUTCOME_COUNTS);
            sqlx::query_scalar(&q).bind(at).fetch_all(&mut conn).await.expect("plan")
        }),
        ("outcome buckets", "delivery_attempt_recent", {
            let q = format!("EXPLAIN {}", herald_postgres::OUTCOME_BUCKETS);
            sqlx::query_scalar(&q).bind(at).bind(60_000_i64).fetch_all(&mut conn).await.expect("plan")
        }),
        ("parked buckets", "delivery_task_parked", {
            let q = format!("EXPLAIN {}", herald_postgres::PARKED_BUCKETS);
            sqlx::query_scalar(&q).bind(at).bind(60_000_i64).fetch_all(&mut conn).await.expect("plan")
        }),
        ("decided counts", "delivery_attempt_decided", {
            let q = format!("EXPLAIN {}", herald_postgres::DECIDED_COUNTS);
            sqlx::query_scalar(&q).fetch_all(&mut conn).await.expect("plan")
        }),
    ];
    for (name, index, plan) in plans {
        let text = plan.join("\n");
        assert!(text.contains(index), "{name} does not use {index}:\n{text}");
        for table in ["inbox_item", "notification", "delivery_task", "delivery_attempt"] {
            assert!(!text.contains(&format!("Seq Scan on {table}")), "{name} scans {table}:\n{text}");
        }
    }
}
