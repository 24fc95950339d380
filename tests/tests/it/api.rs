//! The HTTP API of SPEC §11 over real HTTP and a real PostgreSQL: every endpoint, every error class,
//! authentication, and a concurrent duplicate-submit storm. Every refused request is checked to have
//! written nothing (row counts and task/preference fingerprints before and after).

use herald_standin::Script;
use herald_tests::api::{Answer, Api, Written, ADMIN_TOKEN, SERVICE_TOKEN};
use herald_tests::{ClockMode, World};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const SVC: Option<&str> = Some(SERVICE_TOKEN);
const ADMIN: Option<&str> = Some(ADMIN_TOKEN);
/// Later than every backoff the test channels schedule.
const LATER_MS: u64 = 60_000;

async fn setup() -> (World, Api) {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    (world, api)
}

fn submission(user: &str, key: &str) -> Value {
    json!({"user_id": user, "event_key": key, "body": format!("Your order {key} has shipped"), "ttl_seconds": 3600})
}

/// Runs worker cycles until one finds nothing to do.
async fn drain(world: &World) {
    world.worker("api-w", 60_000).drain(20).await.expect("worker cycles");
}

/// Sends `request`, asserts it was refused with `status` (naming `field` when given) and that nothing
/// was written. Returns the answer for further checks.
async fn refused(
    world: &World,
    status: StatusCode,
    field: Option<&str>,
    request: impl std::future::Future<Output = Answer>,
) -> Answer {
    let before = Written::now(world).await.expect("counts");
    let answer = request.await;
    match field {
        Some(field) => {
            let _ = answer.field_problem(status, field);
        }
        None => {
            let _ = answer.problem(status);
        }
    }
    assert_eq!(Written::now(world).await.expect("counts"), before, "a {status} wrote something: {}", answer.text);
    answer
}

fn task_references(doc: &Value) -> Vec<String> {
    doc["tasks"].as_array().expect("tasks").iter().map(|t| t["reference"].as_str().expect("reference").into()).collect()
}

fn task_ids(doc: &Value) -> Vec<i64> {
    doc["tasks"].as_array().expect("tasks").iter().map(|t| t["task_id"].as_i64().expect("task_id")).collect()
}

#[tokio::test]
async fn submit_creates_once_and_a_duplicate_returns_the_existing_tasks() {
    let (world, api) = setup().await;
    world.user("u1", &["push", "sms"]).await.unwrap();

    let first = api.post("/v1/notifications", SVC, &submission("u1", "ord-1")).await;
    assert!(first.headers.get("x-request-id").is_some(), "every answer carries a request id");
    let doc = first.ok(StatusCode::CREATED);
    assert_eq!(doc["created"], true);
    let id = doc["notification_id"].as_str().map(str::to_owned).expect("notification_id");
    let tasks = doc["tasks"].as_array().unwrap();
    let channels: Vec<&str> = tasks.iter().map(|t| t["channel"].as_str().unwrap()).collect();
    assert_eq!(channels, ["push", "sms"]);
    assert!(tasks.iter().all(|t| t["state"] == "PENDING"), "{doc}");
    let written = Written::now(&world).await.unwrap();
    assert_eq!((written.notification, written.inbox_item, written.delivery_task), (1, 1, 2));

    // Same (user, event key) and the same content: the existing notification, nothing written.
    let dup = api.post("/v1/notifications", SVC, &submission("u1", "ord-1")).await.ok(StatusCode::OK);
    assert_eq!(dup["created"], false);
    assert_eq!(dup["notification_id"], id);
    assert_eq!(task_ids(&dup), task_ids(&doc));
    assert_eq!(Written::now(&world).await.unwrap(), written);
    // With another body it is not a repeat: 409, nothing written (tests/it/idempotency.rs has the rest).
    let mut other = submission("u1", "ord-1");
    other["body"] = json!("a different text");
    let _ = api.post("/v1/notifications", SVC, &other).await.problem(StatusCode::CONFLICT);
    assert_eq!(Written::now(&world).await.unwrap(), written);

    // A duplicate after delivery reports the tasks as they are now.
    drain(&world).await;
    let later = api.post("/v1/notifications", SVC, &submission("u1", "ord-1")).await.ok(StatusCode::OK);
    assert!(later["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "SENT"), "{later}");
    assert_eq!(world.push.sends(), 1);
}

#[tokio::test]
async fn an_event_makes_one_notification_per_recipient() {
    let (world, api) = setup().await;
    world.user("a", &["push"]).await.unwrap();
    world.user("b", &["push", "sms"]).await.unwrap();
    let event =
        json!({"event_key": "sale-7", "recipients": ["a", "b", "solo"], "body": "Sale starts", "ttl_seconds": 600});
    let doc = api.post("/v1/events", SVC, &event).await.ok(StatusCode::CREATED);
    assert_eq!(doc["event_key"], "sale-7");
    let list = doc["notifications"].as_array().expect("notifications");
    let users: Vec<&str> = list.iter().map(|n| n["user_id"].as_str().unwrap()).collect();
    assert_eq!(users, ["a", "b", "solo"]);
    let counts: Vec<usize> = list.iter().map(|n| n["tasks"].as_array().unwrap().len()).collect();
    assert_eq!(counts, [1, 2, 0], "solo has no channel: in-app only");
    assert!(list.iter().all(|n| n["created"] == true));
    let written = Written::now(&world).await.unwrap();
    assert_eq!((written.notification, written.inbox_item, written.delivery_task), (3, 3, 3));

    for user in ["a", "b", "solo"] {
        let inbox = api.get(&format!("/v1/users/{user}/inbox"), Some(&api.user_token(user))).await.ok(StatusCode::OK);
        assert_eq!(inbox["items"].as_array().unwrap().len(), 1, "{user}: {inbox}");
        assert_eq!(inbox["items"][0]["body"], "Sale starts");
    }
    let solo = api.get("/v1/users/solo/inbox", ADMIN).await.ok(StatusCode::OK);
    assert_eq!(solo["items"][0]["status_text"], "in-app only");
    assert_eq!(solo["items"][0]["channels"], json!([]));

    // The same event again: every recipient's notification exists; 200 and nothing written.
    let again = api.post("/v1/events", SVC, &event).await.ok(StatusCode::OK);
    assert!(again["notifications"].as_array().unwrap().iter().all(|n| n["created"] == false), "{again}");
    assert_eq!(Written::now(&world).await.unwrap(), written);
}

#[tokio::test]
async fn notification_view_has_the_spec_fields_and_attempts_oldest_first() {
    let (world, api) = setup().await;
    world.user("u1", &["push"]).await.unwrap();
    let created = api.post("/v1/notifications", SVC, &submission("u1", "ord-2")).await.ok(StatusCode::CREATED);
    let id = created["notification_id"].as_str().map(str::to_owned).unwrap();
    world.push.script(Script::status(503));
    let worker = world.worker("api-w", 60_000);
    worker.run_once().await.unwrap();
    world.advance(LATER_MS);
    worker.run_once().await.unwrap();

    let doc = api.get(&format!("/v1/notifications/{id}"), SVC).await.ok(StatusCode::OK);
    for field in ["notification_id", "user_id", "event_key", "created_at", "expires_at", "tasks"] {
        assert!(doc.get(field).is_some(), "missing {field}: {doc}");
    }
    assert_eq!(
        (doc["notification_id"].as_str().map(str::to_owned), doc["user_id"].as_str()),
        (Some(id.clone()), Some("u1"))
    );
    assert_eq!(doc["event_key"], "ord-2");
    let task = &doc["tasks"][0];
    for field in ["task_id", "channel", "state", "needs_review", "attempt_count", "provider_msg_id", "attempts"] {
        assert!(task.get(field).is_some(), "task without {field}: {task}");
    }
    assert_eq!((task["state"].as_str(), task["needs_review"].as_bool()), (Some("SENT"), Some(false)));
    assert_eq!(task["attempt_count"], 2);
    assert!(task["provider_msg_id"].as_str().is_some_and(|id| !id.is_empty()), "{task}");
    let attempts = task["attempts"].as_array().unwrap();
    for attempt in attempts {
        for field in ["attempt_no", "action", "outcome", "late_outcome", "started_at", "finished_at"] {
            assert!(attempt.get(field).is_some(), "attempt without {field}: {attempt}");
        }
    }
    let seen: Vec<(i64, &str, &str)> = attempts
        .iter()
        .map(|a| (a["attempt_no"].as_i64().unwrap(), a["action"].as_str().unwrap(), a["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, [(1, "SEND", "RETRYABLE_REJECT"), (2, "SEND", "ACCEPTED")]);
    assert!(attempts[0]["started_at"].as_str().unwrap() < attempts[1]["started_at"].as_str().unwrap());
    assert_eq!(attempts[1]["late_outcome"], Value::Null);
    assert!(!doc.to_string().contains(&World::destination("u1", "push")), "no destination in a view");

    // The owner's token reads it too; another user's gets the same 404 as a missing one; unknown and
    // malformed ids are 404.
    api.get(&format!("/v1/notifications/{id}"), Some(&api.user_token("u1"))).await.ok(StatusCode::OK);
    let not_yours =
        api.get(&format!("/v1/notifications/{id}"), Some(&api.user_token("u2"))).await.problem(StatusCode::NOT_FOUND);
    let missing =
        api.get("/v1/notifications/987654321", Some(&api.user_token("u2"))).await.problem(StatusCode::NOT_FOUND);
    assert_eq!(not_yours, missing, "not yours reads exactly as missing");
    let _ = api.get("/v1/notifications/987654321", SVC).await.problem(StatusCode::NOT_FOUND);
    let _ = api.get("/v1/notifications/not-a-number", SVC).await.problem(StatusCode::NOT_FOUND);

    // The id an answer shows is opaque: not the serial key, nothing to count through. The serial, or a
    // well-formed guess, is a 404 like any missing one — for a service token too.
    let serial = world.notification_id(&id).await.expect("the notification").0;
    assert!(herald_domain::NotificationRef::parse(&id).is_some(), "an opaque id: {id}");
    assert_ne!(id, serial.to_string(), "the answer never shows the serial");
    assert!(!doc.to_string().contains(&format!("\"notification_id\":{serial}")), "{doc}");
    let by_serial = api.get(&format!("/v1/notifications/{serial}"), SVC).await.problem(StatusCode::NOT_FOUND);
    let guessed = format!("/v1/notifications/{}", uuid::Uuid::new_v4());
    assert_eq!(api.get(&guessed, SVC).await.problem(StatusCode::NOT_FOUND), by_serial);
    let _ = api.get(&guessed, Some(&api.user_token("u1"))).await.problem(StatusCode::NOT_FOUND);
    let _ = api.get(&format!("/v1/notifications/{}", id.to_uppercase()), SVC).await.problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_destination_is_stored_encrypted_and_never_answered() {
    let (world, api) = setup().await;
    let secret = "https://hooks.example/alice-7f3a9c";
    let token = api.user_token("alice");
    let answer =
        api.put("/v1/users/alice/channels/push", Some(&token), &json!({"destination": secret, "enabled": true})).await;
    let doc = answer.ok(StatusCode::OK);
    assert!(!answer.text.contains(secret) && !answer.text.contains("7f3a9c"), "{}", answer.text);
    assert_eq!((doc["enabled"].as_bool(), doc["has_destination"].as_bool()), (Some(true), Some(true)));
    assert_eq!((doc["user_id"].as_str(), doc["channel"].as_str()), (Some("alice"), Some("push")));
    let version = doc["version"].as_i64().unwrap();

    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT destination FROM channel_pref WHERE user_id = 'alice' AND channel = 'push'")
            .fetch_one(world.db.store.pool())
            .await
            .unwrap();
    assert!(stored.len() > secret.len(), "ciphertext carries key id, nonce and tag");
    assert!(!stored.windows(6).any(|w| w == b"7f3a9c"), "the row holds no part of the destination in clear");
    assert!(!stored.windows(5).any(|w| w == b"hooks"), "the row holds no part of the destination in clear");

    // The worker decrypts it and the channel receives it.
    api.post("/v1/notifications", SVC, &submission("alice", "ord-3")).await.ok(StatusCode::CREATED);
    drain(&world).await;
    assert_eq!(world.push.sends_to(secret), 1);

    // Switching off keeps the destination and bumps the version.
    let off =
        api.put("/v1/users/alice/channels/push", Some(&token), &json!({"enabled": false})).await.ok(StatusCode::OK);
    assert_eq!((off["enabled"].as_bool(), off["has_destination"].as_bool()), (Some(false), Some(true)));
    assert!(off["version"].as_i64().unwrap() > version);

    // Enabling a channel with no stored destination needs one: a refusal that depends on what is stored,
    // so a 409 naming the field (the request itself is valid). A refused change echoes nothing secret.
    let _ = refused(
        &world,
        StatusCode::CONFLICT,
        Some("destination"),
        api.put("/v1/users/alice/channels/sms", Some(&token), &json!({"enabled": true})),
    )
    .await;
    let answer = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("enabled"),
        api.put("/v1/users/alice/channels/sms", Some(&token), &json!({"destination": "+15550001111"})),
    )
    .await;
    assert!(!answer.text.contains("5550001111"), "{}", answer.text);
    let answer = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("destination"),
        api.put(
            "/v1/users/alice/channels/sms",
            Some(&token),
            &json!({"destination": {"n": "+15550001111"}, "enabled": true}),
        ),
    )
    .await;
    assert!(!answer.text.contains("5550001111"), "{}", answer.text);
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("destination"),
        api.put(
            "/v1/users/alice/channels/sms",
            Some(&token),
            &json!({"destination": "x".repeat(1025), "enabled": true}),
        ),
    )
    .await;
    // No channel kind has control characters in a destination; the message does not quote it.
    let answer = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("destination"),
        api.put(
            "/v1/users/alice/channels/sms",
            Some(&token),
            &json!({"destination": "+1555\u{0}0001111", "enabled": true}),
        ),
    )
    .await;
    assert!(!answer.text.contains("0001111"), "{}", answer.text);
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("channel"),
        api.put("/v1/users/alice/channels/fax", Some(&token), &json!({"destination": "+15550001111", "enabled": true})),
    )
    .await;
}

fn item<'a>(inbox: &'a Value, notification: &str) -> &'a Value {
    inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["notification_id"] == notification)
        .unwrap_or_else(|| panic!("no item {notification}: {inbox}"))
}

fn words(item: &Value) -> Vec<(String, String)> {
    item["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["channel"].as_str().unwrap().to_owned(), c["status_text"].as_str().unwrap().to_owned()))
        .collect()
}

fn pair(channel: &str, text: &str) -> (String, String) {
    (channel.to_owned(), text.to_owned())
}

#[tokio::test]
async fn inbox_words_follow_the_task_states() {
    let (world, api) = setup().await;
    world.user("w", &["push", "sms", "miao"]).await.unwrap();
    let token = api.user_token("w");
    let submit = |key: &str, ttl: i64| {
        let mut body = submission("w", key);
        body["ttl_seconds"] = json!(ttl);
        body
    };

    // n1: push accepted; sms switched off before the claim; Miaotixing accepted, then the connection
    // broke: outcome unknown, parked (the channel has neither key nor query).
    let n1 = api.post("/v1/notifications", SVC, &submit("n1", 3600)).await.ok(StatusCode::CREATED);
    api.put("/v1/users/w/channels/sms", Some(&token), &json!({"enabled": false})).await.ok(StatusCode::OK);
    world.miao.script(Script::DropAfterAccept);
    drain(&world).await;

    // n2: expires before any worker gets to it.
    let n2 = api.post("/v1/notifications", SVC, &submit("n2", 1)).await.ok(StatusCode::CREATED);
    world.advance(2_000);
    drain(&world).await;

    // n3: push refuses for good (400); n4: push refuses for now (503), a retry is scheduled.
    api.put("/v1/users/w/channels/miao", Some(&token), &json!({"enabled": false})).await.ok(StatusCode::OK);
    let n3 = api.post("/v1/notifications", SVC, &submit("n3", 3600)).await.ok(StatusCode::CREATED);
    let n4 = api.post("/v1/notifications", SVC, &submit("n4", 3600)).await.ok(StatusCode::CREATED);
    world.push.script_for(&task_references(&n3)[0], Script::status(400));
    world.push.script_for(&task_references(&n4)[0], Script::status(503));
    world.worker("api-w", 60_000).run_once().await.unwrap();

    // n5: not claimed yet.
    let n5 = api.post("/v1/notifications", SVC, &submit("n5", 3600)).await.ok(StatusCode::CREATED);

    let answer = api.get("/v1/users/w/inbox", Some(&token)).await;
    let inbox = answer.ok(StatusCode::OK);
    let id = |doc: &Value| doc["notification_id"].as_str().map(str::to_owned).unwrap();
    assert_eq!(
        words(item(&inbox, &id(&n1))),
        [
            pair("miao", "outcome unknown — under review"),
            pair("push", "accepted by channel"),
            pair("sms", "not sent: channel off")
        ]
    );
    assert_eq!(words(item(&inbox, &id(&n2))), [pair("miao", "expired"), pair("push", "expired")]);
    assert_eq!(words(item(&inbox, &id(&n3))), [pair("push", "failed")]);
    assert_eq!(words(item(&inbox, &id(&n4))), [pair("push", "waiting to retry")]);
    assert_eq!(words(item(&inbox, &id(&n5))), [pair("push", "sending")]);
    let states: Vec<&str> =
        item(&inbox, &id(&n1))["channels"].as_array().unwrap().iter().map(|c| c["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["UNKNOWN", "SENT", "SUPPRESSED"]);
    assert!(inbox["items"].as_array().unwrap().iter().all(|i| i["status_text"].is_null()), "none is in-app only");
    assert!(!answer.text.contains("delivered"), "SENT is never called delivered");

    // Newest first.
    let order: Vec<String> = inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["notification_id"].as_str().map(str::to_owned).unwrap())
        .collect();
    assert_eq!(order, [id(&n5), id(&n4), id(&n3), id(&n2), id(&n1)]);
    let limited = api.get("/v1/users/w/inbox?limit=2", Some(&token)).await.ok(StatusCode::OK);
    assert_eq!(limited["items"].as_array().unwrap().len(), 2);
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("limit"),
        api.get("/v1/users/w/inbox?limit=0", Some(&token)),
    )
    .await;
    // Query parameters that do not parse name the parameter, as body fields do.
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let _ = refused(&world, unprocessable, Some("limit"), api.get("/v1/users/w/inbox?limit=abc", Some(&token))).await;
    let _ = refused(&world, unprocessable, Some("limt"), api.get("/v1/users/w/inbox?limt=5", Some(&token))).await;
    let _ = refused(&world, unprocessable, Some("limit"), api.get("/v1/review?limit=-1", ADMIN)).await;
}

/// Submits for `user` on Miaotixing, whose connection breaks after accepting: a parked task.
async fn parked_task(world: &World, api: &Api, user: &str, key: &str) -> i64 {
    world.user(user, &["miao"]).await.unwrap();
    let created = api.post("/v1/notifications", SVC, &submission(user, key)).await.ok(StatusCode::CREATED);
    world.miao.script(Script::DropAfterAccept);
    drain(world).await;
    task_ids(&created)[0]
}

#[tokio::test]
async fn review_lists_parked_tasks_and_resolve_settles_once() {
    let (world, api) = setup().await;
    let task = parked_task(&world, &api, "p1", "ord-9").await;
    world.user("ok", &["push"]).await.unwrap();
    let sent = api.post("/v1/notifications", SVC, &submission("ok", "ord-10")).await.ok(StatusCode::CREATED);
    drain(&world).await;

    let review = api.get("/v1/review", ADMIN).await.ok(StatusCode::OK);
    let tasks = review["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{review}");
    let t = &tasks[0];
    assert_eq!(
        (t["task_id"].as_i64(), t["user_id"].as_str(), t["channel"].as_str()),
        (Some(task), Some("p1"), Some("miao"))
    );
    assert_eq!((t["state"].as_str(), t["needs_review"].as_bool()), (Some("UNKNOWN"), Some(true)));
    assert!(
        t["notification_id"].as_str().map(str::to_owned).is_some()
            && t["attempts"].as_array().is_some_and(|a| !a.is_empty()),
        "{t}"
    );
    assert!(!review.to_string().contains(&World::destination("p1", "miao")), "no destination in the review list");

    let path = format!("/v1/tasks/{task}/resolve");
    let _ = refused(
        &world,
        StatusCode::FORBIDDEN,
        None,
        api.post(&path, SVC, &json!({"final_state": "SENT", "note": "x"})),
    )
    .await;
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("final_state"),
        api.post(&path, ADMIN, &json!({"final_state": "SUPPRESSED", "note": "x"})),
    )
    .await;
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("note"),
        api.post(&path, ADMIN, &json!({"final_state": "SENT"})),
    )
    .await;

    let done = api
        .post(&path, ADMIN, &json!({"final_state": "FAILED", "note": "user says nothing arrived"}))
        .await
        .ok(StatusCode::OK);
    assert_eq!((done["task_id"].as_i64(), done["state"].as_str()), (Some(task), Some("FAILED")));
    let conflict = refused(
        &world,
        StatusCode::CONFLICT,
        None,
        api.post(&path, ADMIN, &json!({"final_state": "SENT", "note": "again"})),
    )
    .await;
    assert!(conflict.text.contains("nothing changed"), "{}", conflict.text);
    let sent_task = task_ids(&sent)[0];
    let _ = refused(
        &world,
        StatusCode::CONFLICT,
        None,
        api.post(&format!("/v1/tasks/{sent_task}/resolve"), ADMIN, &json!({"final_state": "FAILED", "note": "x"})),
    )
    .await;
    let _ = refused(
        &world,
        StatusCode::NOT_FOUND,
        None,
        api.post("/v1/tasks/987654321/resolve", ADMIN, &json!({"final_state": "SENT", "note": "x"})),
    )
    .await;
    let _ = refused(
        &world,
        StatusCode::NOT_FOUND,
        None,
        api.post("/v1/tasks/abc/resolve", ADMIN, &json!({"final_state": "SENT", "note": "x"})),
    )
    .await;

    let review = api.get("/v1/review", ADMIN).await.ok(StatusCode::OK);
    assert_eq!(review["tasks"], json!([]));
    let inbox = api.get("/v1/users/p1/inbox", ADMIN).await.ok(StatusCode::OK);
    // Issue 15: a human decision reads as one, with its note (it said "failed" before).
    assert_eq!(words(&inbox["items"][0]), [pair("miao", "marked not sent by an operator: user says nothing arrived")]);
}

#[tokio::test]
async fn operations_endpoints() {
    let (world, api) = setup().await;
    assert_eq!(api.get("/healthz", None).await.ok(StatusCode::OK)["status"], "ok");
    assert_eq!(api.get("/readyz", None).await.ok(StatusCode::OK)["status"], "ready");

    world.user("m", &["push"]).await.unwrap();
    api.post("/v1/notifications", SVC, &submission("m", "ord-11")).await.ok(StatusCode::CREATED);
    // On the API listener a scrape needs a metrics or an admin token.
    let _ = api.get("/metrics", None).await.problem(StatusCode::UNAUTHORIZED);
    let _ = api.get("/metrics", SVC).await.problem(StatusCode::UNAUTHORIZED);
    let metrics = api.get("/metrics", ADMIN).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert_eq!(metrics.content_type(), "text/plain");
    assert!(metrics.text.contains("herald_submissions_total{result=\"created\"}"), "{}", metrics.text);

    let doc = api.get("/openapi.json", None).await.ok(StatusCode::OK);
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{doc}");
    let paths = doc["paths"].as_object().expect("paths");
    // Notification ids are documented as opaque, and a submit links to the reads of the id it answers.
    let opaque = json!({"type": "string", "format": "uuid", "pattern": herald_domain::ids::NOTIFICATION_REF_PATTERN});
    let id_param = &doc["paths"]["/v1/notifications/{id}"]["get"]["parameters"][0];
    assert_eq!(id_param["schema"], opaque, "{id_param}");
    assert_eq!(
        doc["components"]["schemas"]["CreatedBody"]["properties"]["notification_id"]["pattern"],
        opaque["pattern"]
    );
    let operation_ids: Vec<&str> = paths
        .values()
        .flat_map(|item| item.as_object().into_iter().flat_map(|ops| ops.values()))
        .filter_map(|op| op["operationId"].as_str())
        .collect();
    let links = doc["paths"]["/v1/notifications"]["post"]["responses"]["201"]["links"].as_object().expect("links");
    for link in links.values() {
        let target = link["operationId"].as_str().expect("operationId");
        assert!(operation_ids.contains(&target), "{target} is not an operation: {operation_ids:?}");
    }
    for path in [
        "/v1/notifications",
        "/v1/events",
        "/v1/notifications/{id}",
        "/v1/users/{user_id}/channels/{channel}",
        "/v1/users/{user_id}/channels/{channel}/test",
        "/v1/users/{user_id}/channels/{channel}/confirm",
        "/v1/users/{user_id}/inbox",
        "/v1/review",
        "/v1/tasks/{task_id}/resolve",
        "/v1/users/{user_id}/erasure",
        "/v1/users/{user_id}/export",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(path), "openapi.json lacks {path}");
    }

    let _ = api.get("/v1/nowhere", SVC).await.problem(StatusCode::NOT_FOUND);
    let _ =
        refused(&world, StatusCode::METHOD_NOT_ALLOWED, None, api.call(Method::DELETE, "/v1/notifications", SVC, None))
            .await;
}

#[tokio::test]
async fn readiness_fails_when_the_database_is_not_migrated_or_gone() {
    let (world, api) = setup().await;
    sqlx::query("DELETE FROM _sqlx_migrations").execute(world.db.store.pool()).await.unwrap();
    let doc = api.get("/readyz", None).await.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert!(doc["detail"].as_str().is_some_and(|d| d.contains("not migrated")), "{doc}");
    world.db.store.pool().close().await;
    let doc = api.get("/readyz", None).await.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert!(!doc.to_string().contains("postgres://"), "no URL in the reason: {doc}");
    assert_eq!(api.get("/healthz", None).await.status, StatusCode::OK, "liveness does not depend on the database");
}

#[tokio::test]
async fn each_error_class_names_its_field_and_writes_nothing() {
    let (world, api) = setup().await;
    world.user("u1", &["push"]).await.unwrap();
    let post = |body: Value| {
        let api = &api;
        async move { api.post("/v1/notifications", SVC, &body).await }
    };
    let without = |field: &str| {
        let mut body = submission("u1", "e-1");
        body.as_object_mut().unwrap().remove(field);
        body
    };
    let with = |field: &str, value: Value| {
        let mut body = submission("u1", "e-1");
        body[field] = value;
        body
    };
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;

    for field in ["user_id", "event_key", "body", "ttl_seconds"] {
        let message =
            refused(&world, unprocessable, None, post(without(field))).await.field_problem(unprocessable, field);
        assert_eq!(message, "is required");
    }
    // Every missing field at once, each named.
    let answer = refused(&world, unprocessable, None, post(json!({}))).await;
    for field in ["user_id", "event_key", "body", "ttl_seconds"] {
        let _ = answer.field_problem(unprocessable, field);
    }
    let _ = refused(&world, unprocessable, Some("user_id"), post(with("user_id", json!("u".repeat(129))))).await;
    let _ = refused(&world, unprocessable, Some("event_key"), post(with("event_key", json!("k".repeat(257))))).await;
    let _ = refused(&world, unprocessable, Some("body"), post(with("body", json!("b".repeat(16 * 1024 + 1))))).await;
    let _ = refused(&world, unprocessable, Some("thread_key"), post(with("thread_key", json!("t".repeat(257))))).await;
    let _ = refused(&world, unprocessable, Some("user_id"), post(with("user_id", json!("   ")))).await;
    let _ = refused(&world, unprocessable, Some("ttl_seconds"), post(with("ttl_seconds", json!(0)))).await;
    let _ = refused(&world, unprocessable, Some("ttl_seconds"), post(with("ttl_seconds", json!(-30)))).await;
    let _ = refused(&world, unprocessable, Some("max_attempts"), post(with("max_attempts", json!(0)))).await;
    // Wrong types name their field too.
    let _ = refused(&world, unprocessable, Some("ttl_seconds"), post(with("ttl_seconds", json!("60")))).await;
    let _ = refused(&world, unprocessable, Some("ttl_seconds"), post(with("ttl_seconds", json!(1.5)))).await;
    let _ = refused(&world, unprocessable, Some("user_id"), post(with("user_id", json!(42)))).await;
    let _ = refused(&world, unprocessable, Some("surprise"), post(with("surprise", json!(true)))).await;
    let _ = refused(&world, unprocessable, Some("$"), post(json!(["u1", "e-1"]))).await;

    // PostgreSQL text cannot hold NUL: refused up front, not a 500 from the store.
    let _ = refused(&world, unprocessable, Some("body"), post(with("body", json!("line one\u{0}line two")))).await;
    // A field given twice is named, not reported at the document root.
    let twice = br#"{"user_id":"u1","user_id":"u2","event_key":"k","body":"b","ttl_seconds":5}"#;

    // Not JSON at all, or not only JSON: 400.
    let raw = |bytes: &[u8], content_type: &'static str| {
        let (api, bytes) = (&api, bytes.to_vec());
        async move { api.raw(Method::POST, "/v1/notifications", SVC, Some((bytes, content_type))).await }
    };
    let _ =
        refused(&world, StatusCode::BAD_REQUEST, None, raw(br#"{"user_id": "u1", "event_key": "#, "application/json"))
            .await;
    let _ = refused(&world, StatusCode::BAD_REQUEST, None, raw(b"user_id=u1", "application/json")).await;
    let _ = refused(&world, StatusCode::BAD_REQUEST, None, raw(b"", "application/json")).await;
    let _ = refused(&world, unprocessable, Some("user_id"), raw(twice, "application/json")).await;
    let trailing = format!("{} {{}}", submission("u1", "e-1"));
    let _ = refused(&world, StatusCode::BAD_REQUEST, None, raw(trailing.as_bytes(), "application/json")).await;

    // Over the body limit (64 KiB by default): 413, even when the JSON would be fine.
    let huge = with("body", json!("b".repeat(70 * 1024))).to_string();
    let _ = refused(&world, StatusCode::PAYLOAD_TOO_LARGE, None, raw(huge.as_bytes(), "application/json")).await;

    // Not JSON by its media type: 415.
    let valid = submission("u1", "e-1").to_string();
    let _ = refused(&world, StatusCode::UNSUPPORTED_MEDIA_TYPE, None, raw(valid.as_bytes(), "text/plain")).await;
    let _ = refused(
        &world,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
        api.raw(Method::POST, "/v1/notifications", SVC, None),
    )
    .await;

    // Events: recipients are checked one by one.
    let event =
        |recipients: Value| json!({"event_key": "ev-1", "recipients": recipients, "body": "b", "ttl_seconds": 60});
    let post_event = |body: Value| {
        let api = &api;
        async move { api.post("/v1/events", SVC, &body).await }
    };
    let _ = refused(
        &world,
        unprocessable,
        Some("recipients"),
        post_event(json!({"event_key": "ev-1", "body": "b", "ttl_seconds": 60})),
    )
    .await;
    let _ = refused(&world, unprocessable, Some("recipients"), post_event(event(json!([])))).await;
    let _ = refused(&world, unprocessable, Some("recipients[1]"), post_event(event(json!(["a", "a"])))).await;
    let _ =
        refused(&world, unprocessable, Some("recipients[2]"), post_event(event(json!(["a", "b", "r".repeat(129)]))))
            .await;
    let _ = refused(&world, unprocessable, Some("recipients[0]"), post_event(event(json!([7])))).await;
    let mut nul_body = event(json!(["a"]));
    nul_body["body"] = json!("\u{0}");
    let _ = refused(&world, unprocessable, Some("body"), post_event(nul_body)).await;
    let mut bad_ttl = event(json!(["a"]));
    bad_ttl["ttl_seconds"] = json!(0);
    let _ = refused(&world, unprocessable, Some("ttl_seconds"), post_event(bad_ttl)).await;

    // The valid request still works afterwards: nothing above left a trace.
    api.post("/v1/notifications", SVC, &submission("u1", "e-1")).await.ok(StatusCode::CREATED);
}

#[tokio::test]
async fn authentication_and_ownership() {
    let (world, api) = setup().await;
    world.user("alice", &["push"]).await.unwrap();
    world.user("bob", &["push"]).await.unwrap();
    let alice = api.user_token("alice");
    let body = submission("alice", "auth-1");

    let answer = refused(&world, StatusCode::UNAUTHORIZED, None, api.post("/v1/notifications", None, &body)).await;
    assert_eq!(answer.headers.get("www-authenticate").and_then(|v| v.to_str().ok()), Some("Bearer"));
    let answer =
        refused(&world, StatusCode::UNAUTHORIZED, None, api.post("/v1/notifications", Some("not-a-token"), &body))
            .await;
    assert_eq!(answer.headers.get("www-authenticate").and_then(|v| v.to_str().ok()), Some("Bearer"));
    assert!(!answer.text.contains("not-a-token"), "a token is never echoed");
    let basic = api
        .client
        .post(format!("{}/v1/notifications", api.base))
        .header("authorization", format!("Basic {SERVICE_TOKEN}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);
    // A user token whose id was swapped does not verify.
    let forged = alice.replacen(".YWxpY2U.", ".Ym9i.", 1);
    assert_ne!(forged, alice);
    let _ = refused(&world, StatusCode::UNAUTHORIZED, None, api.get("/v1/users/bob/inbox", Some(&forged))).await;
    // A token of an earlier format (no expiry, no key id) is not a token any more.
    let old_format = format!("u.YWxpY2U.{}", alice.rsplit('.').next().unwrap());
    let _ = refused(&world, StatusCode::UNAUTHORIZED, None, api.get("/v1/users/alice/inbox", Some(&old_format))).await;

    // Roles: only a service token submits; only an admin token reviews.
    let _ = refused(&world, StatusCode::FORBIDDEN, None, api.post("/v1/notifications", Some(&alice), &body)).await;
    let _ = refused(
        &world,
        StatusCode::FORBIDDEN,
        None,
        api.post(
            "/v1/events",
            Some(&alice),
            &json!({"event_key": "x", "recipients": ["alice"], "body": "b", "ttl_seconds": 60}),
        ),
    )
    .await;
    let _ = refused(&world, StatusCode::FORBIDDEN, None, api.get("/v1/review", SVC)).await;
    let _ = refused(&world, StatusCode::FORBIDDEN, None, api.get("/v1/review", Some(&alice))).await;
    let _ = refused(
        &world,
        StatusCode::FORBIDDEN,
        None,
        api.post("/v1/tasks/1/resolve", Some(&alice), &json!({"final_state": "SENT", "note": "x"})),
    )
    .await;
    api.get("/v1/review", ADMIN).await.ok(StatusCode::OK);

    // A user token reaches that user's inbox and preferences, not another user's.
    api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
    let own = api.get("/v1/users/alice/inbox", Some(&alice)).await.ok(StatusCode::OK);
    assert_eq!(own["items"].as_array().unwrap().len(), 1);
    let _ = refused(&world, StatusCode::FORBIDDEN, None, api.get("/v1/users/bob/inbox", Some(&alice))).await;
    let _ = refused(
        &world,
        StatusCode::FORBIDDEN,
        None,
        api.put(
            "/v1/users/bob/channels/push",
            Some(&alice),
            &json!({"destination": "https://evil.example", "enabled": true}),
        ),
    )
    .await;
    // Access is checked before the body: a refused caller learns nothing from validation.
    let _ = refused(
        &world,
        StatusCode::FORBIDDEN,
        None,
        api.put("/v1/users/bob/channels/fax", Some(&alice), &json!({"enabled": "yes"})),
    )
    .await;
    let _ = refused(&world, StatusCode::FORBIDDEN, None, api.get("/v1/users/alice/inbox", SVC)).await;
    api.put("/v1/users/alice/channels/push", Some(&alice), &json!({"enabled": false})).await.ok(StatusCode::OK);
    api.get("/v1/users/bob/inbox", ADMIN).await.ok(StatusCode::OK);

    // Operations endpoints need no token.
    assert_eq!(api.get("/healthz", None).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_identical_submits_make_one_notification() {
    let (world, api) = setup().await;
    world.user("storm", &["push", "sms"]).await.unwrap();
    world.user("storm", &["miao"]).await.unwrap();
    world.switch("storm", "miao", false).await.unwrap();
    let body = submission("storm", "ord-storm");
    let answers = futures::future::join_all((0..50).map(|_| api.post("/v1/notifications", SVC, &body))).await;

    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    let mut task_sets = std::collections::BTreeSet::new();
    for answer in &answers {
        let doc = match answer.status {
            StatusCode::CREATED => {
                created += 1;
                let doc = answer.ok(StatusCode::CREATED);
                assert_eq!(doc["created"], true);
                doc
            }
            _ => {
                let doc = answer.ok(StatusCode::OK);
                assert_eq!(doc["created"], false);
                doc
            }
        };
        ids.insert(doc["notification_id"].as_str().map(str::to_owned).unwrap());
        task_sets.insert(task_ids(&doc));
    }
    assert_eq!(created, 1, "exactly one 201");
    assert_eq!(ids.len(), 1, "every answer names the same notification");
    assert_eq!(task_sets.len(), 1, "every answer lists the same tasks");
    let written = Written::now(&world).await.unwrap();
    assert_eq!(
        (written.notification, written.inbox_item, written.delivery_task),
        (1, 1, 2),
        "one task per enabled channel"
    );
    assert_eq!(task_sets.first().map(Vec::len), Some(2));
    drain(&world).await;
    assert_eq!((world.push.sends(), world.sms.sends(), world.miao.sends()), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_resolves_of_one_parked_task_settle_it_once() {
    let (world, api) = setup().await;
    let task = parked_task(&world, &api, "p2", "ord-race").await;
    let path = format!("/v1/tasks/{task}/resolve");
    let attempts_before = Written::now(&world).await.unwrap().delivery_attempt;
    let answers =
        futures::future::join_all(
            (0..10).map(|i| {
                let (api, path) = (&api, path.clone());
                let final_state = if i % 2 == 0 { "SENT" } else { "FAILED" };
                async move {
                    api.post(&path, ADMIN, &json!({"final_state": final_state, "note": format!("checker {i}")})).await
                }
            }),
        )
        .await;
    let ok: Vec<&Answer> = answers.iter().filter(|a| a.status == StatusCode::OK).collect();
    assert_eq!(ok.len(), 1, "exactly one resolution wins: {answers:?}");
    for answer in answers.iter().filter(|a| a.status != StatusCode::OK) {
        let _ = answer.problem(StatusCode::CONFLICT);
    }
    let written = Written::now(&world).await.unwrap();
    assert_eq!(written.delivery_attempt, attempts_before + 1, "one manual attempt row");
    let view = api.get("/v1/review", ADMIN).await.ok(StatusCode::OK);
    assert_eq!(view["tasks"], json!([]));
}

#[tokio::test]
async fn an_expired_user_token_or_one_of_a_removed_key_is_a_401_saying_why() {
    let (world, api) = setup().await;
    world.user("alice", &["push"]).await.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();

    // Valid until a second ago: refused, and the problem says it expired (never echoing the token).
    let expired = api.user_token_until("alice", now - 1);
    let answer =
        refused(&world, StatusCode::UNAUTHORIZED, None, api.get("/v1/users/alice/inbox", Some(&expired))).await;
    let doc = answer.problem(StatusCode::UNAUTHORIZED);
    assert!(doc["detail"].as_str().unwrap().contains("expired at"), "{doc}");
    assert!(!answer.text.contains(&expired), "a token is never echoed");
    let put = json!({"destination": "new-phone", "enabled": true});
    let _ =
        refused(&world, StatusCode::UNAUTHORIZED, None, api.put("/v1/users/alice/channels/push", Some(&expired), &put))
            .await;
    // The same user's token valid for another hour is accepted.
    api.get("/v1/users/alice/inbox", Some(&api.user_token_until("alice", now + 3600))).await.ok(StatusCode::OK);

    // Signed by a key the server does not list (removed after a rotation): refused, saying so.
    let removed = herald_core::auth::Authenticator::with_user_keys(
        &[],
        &[],
        vec![herald_core::auth::UserTokenKey {
            id: "k0".into(),
            secret: secrecy::SecretString::from("a key that was rotated out long ago"),
        }],
    );
    let stale = secrecy::ExposeSecret::expose_secret(&removed.user_token("alice")).to_owned();
    let answer = refused(&world, StatusCode::UNAUTHORIZED, None, api.get("/v1/users/alice/inbox", Some(&stale))).await;
    let doc = answer.problem(StatusCode::UNAUTHORIZED);
    assert!(doc["detail"].as_str().unwrap().contains("no longer accepted"), "{doc}");
}

#[tokio::test]
async fn user_ids_outside_the_documented_set_are_refused_naming_the_field() {
    let (world, api) = setup().await;
    for bad in [" alice", "alice ", "ali\u{200b}ce", "alice\u{202e}moc", "al\u{7}ice", "al ice", "a/b", "аlice"] {
        let body = json!({"user_id": bad, "event_key": "k1", "body": "b", "ttl_seconds": 60});
        let answer = refused(
            &world,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("user_id"),
            api.post("/v1/notifications", SVC, &body),
        )
        .await;
        let message = answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "user_id");
        assert!(message.contains("ASCII letters, digits"), "{bad:?}: {message}");
        let event = json!({"event_key": "k1", "recipients": ["ok-user", bad], "body": "b", "ttl_seconds": 60});
        let _ = refused(
            &world,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("recipients[1]"),
            api.post("/v1/events", SVC, &event),
        )
        .await;
    }
    // In a path too (an admin token passes the access check, so validation speaks).
    let put = json!({"destination": "phone", "enabled": true});
    let _ = refused(
        &world,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("user_id"),
        api.put("/v1/users/ali%E2%80%8Bce/channels/push", ADMIN, &put),
    )
    .await;
    // Every character of the set, at the longest length, is accepted.
    let longest = format!("{}a", "Zz09._-@:+".repeat(12)).chars().take(128).collect::<String>();
    let body = json!({"user_id": longest, "event_key": "k1", "body": "b", "ttl_seconds": 60});
    api.post("/v1/notifications", SVC, &body).await.ok(StatusCode::CREATED);
}
