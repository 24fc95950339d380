//! Status events (issue 46): the reference runs' kinds of outcome reach a real receiver that verifies
//! every request with the official `standardwebhooks` package, exactly as documented (README, "Status
//! events"); tampered or stale requests fail that verification; an endpoint that refuses gets the event
//! again with the same id, and one that keeps refusing parks it while deliveries go on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use herald_channels::egress::Egress;
use herald_channels::status::{sign, signing_key, HttpStatusSink, StatusEndpoint, Url};
use herald_core::status::{DispatchSettings, Dispatcher, Subscriptions};
use herald_domain::resolve::FinalState;
use herald_domain::{Millis, RetryPolicy, StatusKind, TaskState};
use herald_ports::prelude::*;
use herald_ports::SubscriptionFilter;
use herald_standin::Script;
use herald_tests::peers::require_python;
use herald_tests::peers::status::{verify, StatusReceiver, TEST_SECRET};
use herald_tests::world::{ClockMode, World};
use secrecy::{ExposeSecret as _, SecretBox};
use serde_json::Value;

const HOUR: u64 = 3_600_000;
const LATER: u64 = 60_000;

/// A dispatcher of one subscription `name` to `receiver`, over the world's store and clock, after
/// telling the store which kinds the subscription wants.
async fn dispatcher(
    world: &World,
    receiver: &StatusReceiver,
    kinds: &[StatusKind],
    include_body: bool,
    max_posts: u32,
) -> anyhow::Result<Dispatcher> {
    let svc = Subscription { name: "svc", receiver, service_tokens: None, include_body };
    dispatcher_of(world, &[svc], kinds, max_posts).await
}

/// One subscription of a test: its name, its receiver, whose notifications it wants.
struct Subscription<'a> {
    name: &'a str,
    receiver: &'a StatusReceiver,
    service_tokens: Option<Vec<String>>,
    include_body: bool,
}

/// A dispatcher of these subscriptions (each wanting `kinds`), recorded in the store first.
async fn dispatcher_of(
    world: &World,
    subscriptions: &[Subscription<'_>],
    kinds: &[StatusKind],
    max_posts: u32,
) -> anyhow::Result<Dispatcher> {
    let filters: Vec<SubscriptionFilter> = subscriptions
        .iter()
        .map(|s| SubscriptionFilter {
            name: s.name.to_owned(),
            kinds: kinds.to_vec(),
            service_tokens: s.service_tokens.clone(),
        })
        .collect();
    world.store.set_subscriptions(&filters).await?;
    let mut endpoints = Vec::new();
    for s in subscriptions {
        endpoints.push(StatusEndpoint {
            name: s.name.to_owned(),
            url: Url::parse(&s.receiver.url())?,
            secret: SecretBox::new(Box::new(TEST_SECRET.to_owned())),
            timeout_ms: 2_000,
            allow_loopback: true,
        });
    }
    let sink = HttpStatusSink::new(endpoints, &Egress::default()).map_err(|(n, r)| anyhow::anyhow!("{n}: {r}"))?;
    let names = subscriptions.iter().map(|s| s.name.to_owned()).collect();
    let with_body = subscriptions.iter().filter(|s| s.include_body).map(|s| s.name.to_owned()).collect();
    Ok(Dispatcher::new(
        world.store.clone(),
        Arc::new(sink),
        world.clock.clone(),
        Subscriptions { names, with_body },
        DispatchSettings {
            batch: 16,
            hold: Millis(30_000),
            poll: Duration::from_millis(20),
            retry: RetryPolicy::new(max_posts, Millis(1_000), Millis(10_000)),
        },
    ))
}

/// Runs rounds until one posts nothing.
async fn dispatch_all(dispatcher: &Dispatcher) -> anyhow::Result<()> {
    while dispatcher.run_once().await?.posts() > 0 {}
    Ok(())
}

/// The verified events of the receiver's records, by notification id, each list in sequence order, as
/// `type/attempt[/reason or decision][/actor][/message id]`.
fn events_by_notification(records: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for record in records.iter().filter(|r| r["verified"] == true) {
        let p = &record["payload"];
        let d = &p["data"];
        let mut word = format!("{}/{}", p["type"].as_str().unwrap_or("?"), d["attempt"]);
        for extra in ["reason", "decision", "actor"] {
            if let Some(value) = d[extra].as_str() {
                word.push_str(&format!("/{value}"));
            }
        }
        if d["channel_message_id"].is_string() {
            word.push_str("/with-message-id");
        }
        by.entry(d["notification_id"].as_str().unwrap_or("?").to_owned())
            .or_default()
            .push((d["sequence"].as_i64().unwrap_or(-1), word));
    }
    by.into_iter()
        .map(|(id, mut list)| {
            list.sort();
            (id, list.into_iter().map(|(_, word)| word).collect())
        })
        .collect()
}

/// What a test of a `herald` process with a subscription starts from: alice with the push channel, a
/// receiver, and a scratch folder holding the subscription's secret file (`status.secret`). `None` when the
/// Python peer is missing (the skip is recorded, or the test fails: never a pass).
async fn herald_process_setup(tag: &str) -> anyhow::Result<Option<(World, StatusReceiver, std::path::PathBuf)>> {
    if !require_python("standardwebhooks") {
        return Ok(None);
    }
    let world = World::new(ClockMode::Database).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    world.user("alice", &["push"]).await?;
    let dir = std::env::temp_dir().join(format!("herald-status-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("status.secret"), format!("{TEST_SECRET}\n"))?;
    Ok(Some((world, receiver, dir)))
}

/// The one notification the process tests create for alice.
fn alices_order() -> herald_ports::store::NewNotification {
    herald_ports::store::NewNotification {
        user_id: "alice".into(),
        event_key: "order-1".into(),
        body: "Your order has shipped".into(),
        ttl: Millis(600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    }
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn the_reference_runs_produce_exactly_the_documented_events() -> anyhow::Result<()> {
    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = dispatcher(&world, &receiver, &StatusKind::ALL, false, 5).await?;
    world.user("u1", &["push", "miao"]).await?;
    world.user("u2", &["push"]).await?;
    let worker = world.worker("w1", 60_000);
    let services = world.services();
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let public = |created: &herald_ports::Created| created.notification_ref.0.to_string();

    // Accepted at once (N1).
    let accepted = world.submit("u2", "accepted", HOUR, None).await?;
    worker.run_once().await?;
    expected.insert(public(&accepted), words(&["notification.accepted/1/with-message-id"]));

    // Refused (400: nothing was accepted).
    let refused = world.submit("u2", "refused", HOUR, None).await?;
    world.push.script(Script::status(400));
    worker.run_once().await?;
    expected.insert(public(&refused), words(&["notification.refused/1/rejected"]));

    // Timed out after acceptance, sent again with the same key, recognised (T1).
    let again = world.submit("u2", "again", HOUR, None).await?;
    world.push.script(Script::Delay(Duration::from_millis(1_500)));
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    expected.insert(public(&again), words(&["notification.sent_again/2", "notification.accepted/2/with-message-id"]));

    // Unknown on a channel with neither key nor query: parked, then resolved by an operator (T3, B2).
    let created = world.submit("u1", "parked", HOUR, None).await?;
    let miao_task = created.tasks.iter().find(|t| t.channel.as_str() == "miao").map(|t| t.task_id).unwrap();
    world.miao.script(Script::Delay(Duration::from_millis(1_500)));
    world.push.script(Script::Ok);
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(created.notification_id, miao_task).await?;
    assert!(view.needs_review, "the miao task is parked: {view:?}");
    herald_core::usecases::resolve(
        &services,
        &herald_core::usecases::Actor::command_line("test"),
        miao_task,
        FinalState::Sent,
        "the user saw it",
    )
    .await?;
    // This notification went to two channels: its push task's events are in the same list, by sequence.
    expected.insert(
        public(&created),
        words(&[
            "notification.accepted/1/with-message-id",
            "notification.parked/1",
            "notification.resolved/2/marked_sent/cli test",
        ]),
    );

    // Suppressed: the user switched the channel off before the claim.
    let suppressed = world.submit("u2", "suppressed", HOUR, None).await?;
    world.switch("u2", "push", false).await?;
    worker.run_once().await?;
    world.switch("u2", "push", true).await?;
    expected.insert(public(&suppressed), words(&["notification.suppressed/1/preference_off"]));

    // Erased: the user's erasure settles the task before any claim.
    world.user("u3", &["push"]).await?;
    let erased = world.submit("u3", "erased", HOUR, None).await?;
    let eraser = herald_core::usecases::Actor::command_line("test");
    herald_core::usecases::erase_user(&services, &eraser, &"u3".into()).await?;
    expected.insert(public(&erased), words(&["notification.suppressed/1/erased"]));

    // Erased while the outcome of a call was unknown and a resend with the same key was scheduled (not
    // parked): the erasure closes it (UNKNOWN, never sent again), and tells it like a parked one.
    world.user("u4", &["push"]).await?;
    let erased_unknown = world.submit("u4", "erased-unknown", HOUR, None).await?;
    world.push.script(Script::Delay(Duration::from_millis(1_500)));
    worker.run_once().await?;
    let task = world.task(erased_unknown.notification_id, erased_unknown.tasks[0].task_id).await?;
    assert!(task.state == TaskState::Unknown && !task.needs_review, "due again, not parked: {task:?}");
    herald_core::usecases::erase_user(&services, &eraser, &"u4".into()).await?;
    expected.insert(public(&erased_unknown), words(&["notification.suppressed/2/erased_outcome_unknown"]));

    // Erased while parked.
    world.user("u5", &["miao"]).await?;
    let erased_parked = world.submit("u5", "erased-parked", HOUR, None).await?;
    world.miao.script(Script::Delay(Duration::from_millis(1_500)));
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    assert!(world.task(erased_parked.notification_id, erased_parked.tasks[0].task_id).await?.needs_review);
    herald_core::usecases::erase_user(&services, &eraser, &"u5".into()).await?;
    expected.insert(
        public(&erased_parked),
        words(&["notification.parked/1", "notification.suppressed/2/erased_outcome_unknown"]),
    );

    // Expired before any claim.
    let expired = world.submit("u2", "expired", 1_000, None).await?;
    world.advance(2_000);
    worker.run_once().await?;
    expected.insert(public(&expired), words(&["notification.expired/1"]));

    // Sent again at an operator's request: parked, resolved with RESEND, sent.
    let resend = world.submit("u1", "resend", HOUR, None).await?;
    let resend_task = resend.tasks.iter().find(|t| t.channel.as_str() == "miao").map(|t| t.task_id).unwrap();
    world.miao.script(Script::Delay(Duration::from_millis(1_500)));
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    herald_core::usecases::resolve(
        &services,
        &herald_core::usecases::Actor::command_line("test"),
        resend_task,
        FinalState::Resend,
        "try once more",
    )
    .await?;
    worker.run_once().await?;
    expected.insert(
        public(&resend),
        words(&[
            "notification.accepted/1/with-message-id",
            "notification.parked/1",
            "notification.resolved/2/send_again/cli test",
            "notification.sent_again/3",
            // Miaotixing gives no message id.
            "notification.accepted/3",
        ]),
    );

    dispatch_all(&dispatcher).await?;
    let records = receiver.records();
    assert!(records.iter().all(|r| r["verified"] == true), "every request verifies: {records:#?}");
    let got = events_by_notification(&records);
    // The push tasks of the two-channel notifications may be accepted in either order relative to the
    // miao task's events; the sequence still orders each task's own events. Compare per task instead
    // where two tasks share a notification: split by channel.
    let mut by_task: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for record in &records {
        let d = &record["payload"]["data"];
        by_task
            .entry((d["notification_id"].as_str().unwrap().to_owned(), d["channel"].as_str().unwrap().to_owned()))
            .or_default()
            .push(format!("{}#{}", d["sequence"], record["payload"]["type"].as_str().unwrap()));
    }
    for list in by_task.values_mut() {
        list.sort_by_key(|entry| entry.split('#').next().unwrap().parse::<i64>().unwrap());
    }
    assert_eq!(got.len(), expected.len(), "one list per notification that changed: {got:#?}");
    for (id, want) in &expected {
        let mut have = got.get(id).cloned().unwrap_or_default();
        let mut want = want.clone();
        have.sort();
        want.sort();
        assert_eq!(have, want, "the events of notification {id}");
    }
    // Within each task the order is the order of the changes, by sequence.
    let order = |id: &str, channel: &str| -> Vec<String> {
        by_task[&(id.to_owned(), channel.to_owned())].iter().map(|e| e.split('#').nth(1).unwrap().to_owned()).collect()
    };
    assert_eq!(order(&public(&again), "push"), words(&["notification.sent_again", "notification.accepted"]));
    assert_eq!(
        order(&public(&resend), "miao"),
        words(&["notification.parked", "notification.resolved", "notification.sent_again", "notification.accepted"])
    );
    // Every event names the caller's event key and its channel, never a destination, never the body.
    for record in &records {
        let d = &record["payload"]["data"];
        assert!(d["event_key"].is_string() && d["channel"].is_string() && d["occurred_at"].is_string());
        assert!(d.get("body").is_none(), "no body unless asked: {record}");
        let body = record["body"].as_str().unwrap();
        assert!(!body.contains("dest-"), "no destination in an event: {body}");
        assert!(!body.contains("delivered") && !body.contains("failed"), "Herald's words only: {body}");
    }
    // Every field sent is one the OpenAPI document's webhook describes.
    let doc = herald_http::api::openapi_json(&world.table());
    let schema = |name: &str| doc["components"]["schemas"][name]["properties"].as_object().cloned().unwrap();
    assert_eq!(
        doc["webhooks"]["notificationStatus"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/StatusEventBody"
    );
    for record in &records {
        let payload = record["payload"].as_object().unwrap();
        assert!(payload.keys().all(|k| schema("StatusEventBody").contains_key(k)), "{record}");
        let data = payload["data"].as_object().unwrap();
        assert!(data.keys().all(|k| schema("StatusEventData").contains_key(k)), "{record}");
    }
    // Each event once: every post was answered 2xx, so no id repeats.
    let mut ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), records.len());
    Ok(())
}

#[tokio::test]
async fn a_subscription_gets_only_its_kinds_and_the_body_when_it_asks() -> anyhow::Result<()> {
    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = dispatcher(&world, &receiver, &[StatusKind::Accepted], true, 5).await?;
    world.user("u1", &["push"]).await?;
    let worker = world.worker("w1", 60_000);
    let refused = world.submit("u1", "refused", HOUR, None).await?;
    world.push.script(Script::status(400));
    worker.run_once().await?;
    let accepted = world.submit("u1", "accepted", HOUR, None).await?;
    worker.run_once().await?;
    assert_eq!(world.task(refused.notification_id, refused.tasks[0].task_id).await?.state, TaskState::Failed);
    dispatch_all(&dispatcher).await?;
    let records = receiver.records();
    assert_eq!(records.len(), 1, "only the accepted event: {records:#?}");
    let data = &records[0]["payload"]["data"];
    assert_eq!(data["notification_id"], accepted.notification_ref.0.to_string());
    assert_eq!(data["event_key"], "accepted");
    assert_eq!(data["body"], "Event accepted for u1");
    Ok(())
}

#[tokio::test]
async fn a_tampered_body_or_an_old_timestamp_fails_verification() -> anyhow::Result<()> {
    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = dispatcher(&world, &receiver, &StatusKind::ALL, false, 5).await?;
    world.user("u1", &["push"]).await?;
    world.submit("u1", "e1", HOUR, None).await?;
    world.worker("w1", 60_000).run_once().await?;
    dispatch_all(&dispatcher).await?;
    let records = receiver.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    let (id, timestamp, body) =
        (record["id"].as_str().unwrap(), record["timestamp"].as_str().unwrap(), record["body"].as_str().unwrap());
    let headers = |timestamp: &str, signature: &str| serde_json::json!({"webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature});
    let signature = record["signature"].as_str().unwrap();
    // The request as Herald sent it verifies (the control of the two below).
    assert_eq!(verify(TEST_SECRET, &headers(timestamp, signature), body).await?, "ok");
    // One character of the body changed.
    let tampered = body.replacen("accepted", "acceptee", 1);
    assert_ne!(tampered, body);
    let answer = verify(TEST_SECRET, &headers(timestamp, signature), &tampered).await?;
    assert!(answer.starts_with("refused: No matching signature"), "{answer}");
    // Correctly signed, but ten minutes old.
    let old = timestamp.parse::<i64>()? - 600;
    let key = signing_key(TEST_SECRET).map_err(anyhow::Error::msg)?;
    let old_signature = sign(key.expose_secret(), id, old, body);
    let answer = verify(TEST_SECRET, &headers(&old.to_string(), &old_signature), body).await?;
    assert!(answer.starts_with("refused: Message timestamp too old"), "{answer}");
    // Another secret.
    let other = "whsec_b3RoZXItc2VjcmV0LW9mLXRoaXJ0eS10d28tYnl0ZXMhIQ==";
    let answer = verify(other, &headers(timestamp, signature), body).await?;
    assert!(answer.starts_with("refused:"), "{answer}");
    Ok(())
}

#[tokio::test]
async fn a_refused_post_is_made_again_with_the_same_id() -> anyhow::Result<()> {
    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = dispatcher(&world, &receiver, &StatusKind::ALL, false, 5).await?;
    world.user("u1", &["push"]).await?;
    world.submit("u1", "e1", HOUR, None).await?;
    world.worker("w1", 60_000).run_once().await?;
    receiver.answer("503").await?;
    let first = dispatcher.run_once().await?;
    assert_eq!((first.delivered, first.retried), (0, 1));
    // Not due again before its backoff.
    assert_eq!(dispatcher.run_once().await?.posts(), 0);
    world.advance(LATER);
    let second = dispatcher.run_once().await?;
    assert_eq!(second.delivered, 1);
    let records = receiver.records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["answered"], 503);
    assert_eq!(records[1]["answered"], 204);
    assert_eq!(records[0]["id"], records[1]["id"], "the same webhook-id: the receiver can drop a repeat");
    assert_eq!(records[0]["body"], records[1]["body"]);
    let (tries, delivered): (i32, bool) = sqlx::query_as("SELECT tries, delivered_at IS NOT NULL FROM status_event")
        .fetch_one(world.store.pool())
        .await?;
    assert_eq!((tries, delivered), (2, true));
    Ok(())
}

#[tokio::test]
async fn an_endpoint_that_keeps_refusing_parks_its_events_and_deliveries_go_on() -> anyhow::Result<()> {
    if !require_python("standardwebhooks") {
        return Ok(());
    }
    // A generous client timeout: the deliveries here must not depend on how loaded the machine is.
    let world = World::with(ClockMode::Manual, |configs| configs[0].timeout_ms = 5_000).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = Arc::new(dispatcher(&world, &receiver, &[StatusKind::Accepted], false, 3).await?);
    receiver.answer("always:503").await?;
    world.user("u1", &["push"]).await?;
    let worker = world.worker("w1", 60_000);
    // The dispatcher runs on its own loop beside the worker, as in `herald serve`.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn({
        let dispatcher = Arc::clone(&dispatcher);
        async move { dispatcher.run(stop_rx).await }
    });
    let mut created = Vec::new();
    for i in 0..20 {
        created.push(world.submit("u1", &format!("e{i}"), HOUR, None).await?);
        worker.run_once().await?;
    }
    for c in &created {
        assert_eq!(world.task(c.notification_id, c.tasks[0].task_id).await?.state, TaskState::Sent);
    }
    // Let the refusals run out: three posts each, the clock moved past every backoff while waiting.
    herald_tests::wait::wait_until("every event parked after its posts", || async {
        world.advance(LATER);
        tokio::time::sleep(Duration::from_millis(20)).await;
        world.store.parked_status_event_count().await.unwrap_or(0) == 20
    })
    .await;
    stop_tx.send_replace(true);
    running.await?;
    let parked = world.store.parked_status_events(100).await?;
    assert_eq!(parked.len(), 20);
    assert!(parked.iter().all(|p| p.tries == 3 && p.last_error.as_deref() == Some("HTTP 503")));
    let records = receiver.records();
    assert_eq!(records.len(), 60, "three posts per event, then none");
    // The console shows them: a count on the overview, the list on their page.
    let api = herald_tests::api::Api::start(&world).await?;
    let operator = herald_tests::console::Console::operator(&api, herald_tests::api::ADMIN_TOKEN).await;
    let overview = operator.get("/console/overview").await;
    assert!(overview.body.contains(r#"<strong id="status-events-parked">20</strong>"#), "{}", overview.body);
    let page = operator.get("/console/status-events").await;
    assert_eq!(page.body.matches("notification.accepted").count(), 20);
    assert!(page.body.contains(&created[0].notification_ref.0.to_string()));
    assert!(page.body.contains("HTTP 503"));
    Ok(())
}

/// `herald worker` as an operator runs it: the subscription from the configuration file (its secret from
/// a file), the events posted by the process's own dispatcher; without `--stand-ins` a loopback endpoint
/// is refused at start, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_worker_posts_the_events_its_configuration_subscribes() -> anyhow::Result<()> {
    use herald_ports::store::ChannelTable;
    use herald_ports::Clock as _;

    let Some((world, receiver, dir)) = herald_process_setup("cli").await? else {
        return Ok(());
    };
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[keys]\ncurrent = \"{}\"\n{} = \"{}\"\n\
             [worker]\nconcurrency = 1\nlease_ms = 5000\n\
             [[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"{}\"\ntimeout_ms = 1000\n\
             [[status_subscription]]\nname = \"svc\"\nurl = \"{}\"\nsecret_file = \"status.secret\"\n\
             events = [\"accepted\", \"refused\"]\nallow_loopback_endpoint = true\n",
            world.db.url,
            herald_tests::world::TEST_KEY_ID,
            herald_tests::world::TEST_KEY_ID,
            herald_tests::world::TEST_KEY,
            world.push.base_url(),
            receiver.url(),
        ),
    )?;
    let herald = |stand_ins: bool| {
        let mut command = tokio::process::Command::new(herald_tests::bins::binary("herald"));
        command.arg("--config").arg(&config).arg("worker").env_remove("HERALD_CONFIG").kill_on_drop(true);
        if stand_ins {
            command.arg("--stand-ins");
        }
        command
    };
    let refused = herald(false).output().await?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("status_subscription.svc.allow_loopback_endpoint"), "{stderr}");

    let mut child = herald(true).stderr(std::process::Stdio::null()).spawn()?;
    let new = alices_order();
    let table = ChannelTable(vec![("push".into(), world.configs[0].rules())]);
    // The process records its subscriptions at start: wait for them before creating the notification.
    herald_tests::wait::wait_until("the subscription recorded", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM status_subscription")
            .fetch_one(world.store.pool())
            .await
            .unwrap_or(0)
            == 1
    })
    .await;
    let now = world.store.clock().now().await?;
    let created = world.store.create(&new, &table, now).await?;
    herald_tests::wait::wait_until("the accepted event at the receiver", || async { !receiver.records().is_empty() })
        .await;
    child.kill().await?;
    let records = receiver.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["verified"], true);
    assert_eq!(records[0]["payload"]["type"], "notification.accepted");
    assert_eq!(records[0]["payload"]["data"]["notification_id"], created.notification_ref.0.to_string());
    assert_eq!(records[0]["payload"]["data"]["event_key"], "order-1");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Item 1 of issue 46: a subscription names the service tokens whose notifications it is told about. Two
/// services submit through the API with their own tokens (one named in `[[services.tokens]]`, one of
/// `auth.service_tokens`, named `service`); each subscription's receiver gets exactly its own service's
/// events, and a subscription without `service_tokens` gets both.
#[tokio::test]
async fn each_service_hears_only_of_its_own_notifications() -> anyhow::Result<()> {
    use herald_core::auth::{Authenticator, ServiceToken};
    use herald_tests::api::{Api, ADMIN_TOKEN, GENEROUS_QUOTA, SERVICE_TOKEN};

    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let (billing, shipping, everything) = (
        StatusReceiver::start(TEST_SECRET).await?,
        StatusReceiver::start(TEST_SECRET).await?,
        StatusReceiver::start(TEST_SECRET).await?,
    );
    let only = |name: &str| Some(vec![name.to_owned()]);
    let dispatcher = dispatcher_of(
        &world,
        &[
            Subscription {
                name: "billing-hook",
                receiver: &billing,
                service_tokens: only("billing"),
                include_body: false,
            },
            Subscription {
                name: "shipping-hook",
                receiver: &shipping,
                service_tokens: only("service"),
                include_body: false,
            },
            Subscription { name: "all", receiver: &everything, service_tokens: None, include_body: false },
        ],
        &StatusKind::ALL,
        5,
    )
    .await?;
    let auth = Authenticator::new(
        &[secrecy::SecretString::from(SERVICE_TOKEN)],
        &[secrecy::SecretString::from(ADMIN_TOKEN)],
        secrecy::SecretString::from("a user token secret of some length"),
    )
    .with_service_tokens(&[ServiceToken { name: "billing".into(), token: "billing-token-0123456789".into() }]);
    let api = Api::start_configured(
        &world,
        auth,
        herald_http::ConsoleSettings::default(),
        herald_http::limits::Limits::default(),
        (herald_http::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
    )
    .await?;
    world.user("u1", &["push"]).await?;
    world.user("u2", &["push"]).await?;
    let submit = |token: &'static str, user: &'static str, key: &'static str| {
        let api = &api;
        async move {
            let answer = api
                .post(
                    "/v1/notifications",
                    Some(token),
                    &serde_json::json!({"user_id": user, "event_key": key, "body": "hello", "ttl_seconds": 3600}),
                )
                .await;
            assert_eq!(answer.status, 201, "{}", answer.text);
            answer.json()["notification_id"].as_str().unwrap().to_owned()
        }
    };
    let invoice = submit("billing-token-0123456789", "u1", "invoice-1").await;
    let parcel = submit(SERVICE_TOKEN, "u1", "parcel-1").await;
    // An event (several recipients) records its service too.
    let answer = api
        .post(
            "/v1/events",
            Some("billing-token-0123456789"),
            &serde_json::json!({"event_key": "invoice-2", "body": "hello", "ttl_seconds": 3600, "recipients": ["u1", "u2"]}),
        )
        .await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    let invoices2: Vec<String> = answer.json()["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["notification_id"].as_str().unwrap().to_owned())
        .collect();
    let submitted: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT event_key, submitted_by FROM notification ORDER BY id")
            .fetch_all(world.store.pool())
            .await?;
    assert_eq!(
        submitted,
        [("invoice-1", "billing"), ("parcel-1", "service"), ("invoice-2", "billing"), ("invoice-2", "billing")]
            .map(|(k, s)| (k.to_owned(), Some(s.to_owned())))
    );
    let worker = world.worker("w1", 60_000);
    while !worker.run_once().await?.is_empty() {}
    dispatch_all(&dispatcher).await?;
    let heard = |receiver: &StatusReceiver| -> Vec<String> {
        let mut ids: Vec<String> = receiver
            .records()
            .iter()
            .filter(|r| r["verified"] == true && r["payload"]["type"] == "notification.accepted")
            .map(|r| r["payload"]["data"]["notification_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(heard(&billing), sorted([vec![invoice.clone()], invoices2.clone()].concat()));
    assert_eq!(heard(&shipping), vec![parcel.clone()]);
    assert_eq!(heard(&everything), sorted([vec![invoice, parcel], invoices2].concat()));
    assert_eq!(billing.records().len() + shipping.records().len(), 4, "one event each, nothing else");
    Ok(())
}

/// Item 4 of issue 46: the purge removes the events delivered longer ago than the window, in batches;
/// a pending event and a parked one stay.
#[tokio::test]
async fn the_purge_removes_delivered_events_after_their_window_and_keeps_parked_ones() -> anyhow::Result<()> {
    use herald_core::retention::{purge_once, RetentionPolicy};

    if !require_python("standardwebhooks") {
        return Ok(());
    }
    let world = World::new(ClockMode::Manual).await?;
    let receiver = StatusReceiver::start(TEST_SECRET).await?;
    let dispatcher = dispatcher(&world, &receiver, &[StatusKind::Accepted], false, 1).await?;
    world.user("u1", &["push"]).await?;
    let worker = world.worker("w1", 60_000);
    for i in 0..5 {
        world.submit("u1", &format!("e{i}"), 30 * 86_400_000, None).await?;
    }
    while !worker.run_once().await?.is_empty() {}
    dispatch_all(&dispatcher).await?;
    // One more event that its endpoint refuses: parked after its one post.
    world.submit("u1", "refused-post", 30 * 86_400_000, None).await?;
    worker.run_once().await?;
    receiver.answer("always:503").await?;
    dispatch_all(&dispatcher).await?;
    // And one not posted yet.
    world.submit("u1", "pending", 30 * 86_400_000, None).await?;
    worker.run_once().await?;
    let counts = || async {
        sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT count(delivered_at), count(parked_at), count(*) FILTER (WHERE delivered_at IS NULL AND parked_at IS NULL) \
             FROM status_event",
        )
        .fetch_one(world.store.pool())
        .await
    };
    assert_eq!(counts().await?, (5, 1, 1));
    let policy = RetentionPolicy { batch: 2, ..RetentionPolicy::default() };
    // Within the window (the control): nothing removed.
    world.advance(6 * 86_400_000);
    let report = purge_once(&world.services(), &policy, "p1").await?.expect("the lease");
    assert_eq!(report.status_events, 0);
    assert_eq!(counts().await?, (5, 1, 1));
    // Past it: the five delivered ones, in batches of two; the parked and the pending one stay.
    world.advance(2 * 86_400_000);
    let report = purge_once(&world.services(), &policy, "p1").await?.expect("the lease");
    assert_eq!(report.status_events, 5);
    assert_eq!(counts().await?, (0, 1, 1));
    Ok(())
}

/// Item 5 of issue 46: delivery belongs to the workers, status events included. `herald serve --no-worker`
/// (API only) with a subscription in its configuration neither records it nor posts an event, while one
/// is due for it; a `herald worker` with the same configuration posts it (the control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_only_process_posts_no_status_events_and_a_worker_does() -> anyhow::Result<()> {
    use herald_ports::store::ChannelTable;
    use herald_ports::Clock as _;

    let Some((world, receiver, dir)) = herald_process_setup("api-only").await? else {
        return Ok(());
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[server]\nlisten = \"127.0.0.1:{port}\"\n\
             [auth]\nservice_tokens = [\"svc-token-0123456789-0123456789-0123456789\"]\nuser_token_secret = \"a-user-token-secret-of-some-length\"\n\
             [keys]\ncurrent = \"{}\"\n{} = \"{}\"\n\
             [worker]\nconcurrency = 1\nlease_ms = 5000\npoll_ms = 100\n\
             [[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"{}\"\ntimeout_ms = 1000\n\
             [[status_subscription]]\nname = \"svc\"\nurl = \"{}\"\nsecret_file = \"status.secret\"\n\
             events = [\"accepted\"]\nallow_loopback_endpoint = true\n\
             [status_events]\npoll_ms = 50\n",
            world.db.url,
            herald_tests::world::TEST_KEY_ID,
            herald_tests::world::TEST_KEY_ID,
            herald_tests::world::TEST_KEY,
            world.push.base_url(),
            receiver.url(),
        ),
    )?;
    let herald = |args: &[&str]| {
        let mut command = tokio::process::Command::new(herald_tests::bins::binary("herald"));
        command
            .arg("--config")
            .arg(&config)
            .args(args)
            .env_remove("HERALD_CONFIG")
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    };
    let subscriptions = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM status_subscription")
            .fetch_one(world.store.pool())
            .await
            .unwrap_or(-1)
    };
    let mut api_only = herald(&["serve", "--no-worker", "--stand-ins"]).spawn()?;
    herald_tests::wait::wait_until("herald serve --no-worker to answer", || async {
        reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await.is_ok_and(|r| r.status().is_success())
    })
    .await;
    assert_eq!(subscriptions().await, 0, "an API-only process records no subscription");
    // An event due for the subscription, as a worker's process would have recorded it.
    world
        .store
        .set_subscriptions(&[SubscriptionFilter {
            name: "svc".into(),
            kinds: vec![StatusKind::Accepted],
            service_tokens: None,
        }])
        .await?;
    let new = alices_order();
    let table = ChannelTable(vec![("push".into(), world.configs[0].rules())]);
    let now = world.store.clock().now().await?;
    world.store.create(&new, &table, now).await?;
    world.worker("w1", 60_000).run_once().await?;
    let (due,): (i64,) = sqlx::query_as("SELECT count(*) FROM status_event WHERE delivered_at IS NULL")
        .fetch_one(world.store.pool())
        .await?;
    assert_eq!(due, 1);
    // Thirty of its dispatcher's polls, had it one.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(receiver.records().is_empty(), "the API-only process posted: {:#?}", receiver.records());
    api_only.kill().await?;

    let mut worker = herald(&["worker", "--stand-ins"]).spawn()?;
    herald_tests::wait::wait_until("the worker's process to post the event", || async {
        !receiver.records().is_empty()
    })
    .await;
    worker.kill().await?;
    assert_eq!(receiver.records()[0]["payload"]["data"]["event_key"], "order-1");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
