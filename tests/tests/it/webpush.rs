//! `kind = "webpush"` against a push service stand-in that verifies the VAPID signature and decrypts the
//! payload with the subscription's private key (`herald_standin::WebPushService`), plus one cross-check with an
//! independent implementation: Python's `http_ece` (PyPI) decrypts a body Herald encrypted.

use herald_channels::config::{ChannelConfig, ConfigSecret, Urgency, PRIVATE_DEFAULT_TEXT};
use herald_channels::kinds::email::{Email, EmailSettings};
use herald_channels::kinds::webpush::{topic, VapidKey};
use herald_channels::kinds::webpush::{Webpush, WebpushSettings};
use herald_domain::classify::WEBPUSH_SUBSCRIPTION_EXPIRED;
use herald_domain::{ChannelName, OnUnknown, TaskState, UserId};
use herald_ports::store::TaskView;
use herald_ports::{DestinationCipher, PreferenceStore};
use herald_standin::{Script, WebPushService};
use herald_tests::cases::outcomes;
use herald_tests::peers::push::{decrypt_with_http_ece, verify_vapid_with_python};
use herald_tests::{ClockMode, World};
use secrecy::SecretString;

const HOUR: u64 = 3_600_000;
const SUBJECT: &str = "mailto:ops@notify.example.org";

/// The Web Push settings of a channel made by [`webpush_config`].
fn push(config: &mut ChannelConfig) -> &mut WebpushSettings {
    config.settings_mut::<Webpush>().expect("a webpush channel")
}

fn webpush_config(adjust: impl FnOnce(&mut ChannelConfig)) -> ChannelConfig {
    let mut config = ChannelConfig::with_settings::<Webpush>(
        "webpush",
        "",
        WebpushSettings {
            vapid_private_key: Some(ConfigSecret::new(VapidKey::generate().0)),
            vapid_subject: Some(SUBJECT.into()),
            allow_loopback_endpoints: true,
            ..WebpushSettings::default()
        },
    );
    config.timeout_ms = 1_000;
    config.retry_base_ms = 200;
    config.retry_cap_ms = 1_000;
    adjust(&mut config);
    config
}

/// A world (on the database's clock: the subscription-expired mark compares the preference's change
/// time with the attempt's start) with the Web Push channel, and user `u1` subscribed at `peer`.
async fn world(peer: &WebPushService, adjust: impl FnOnce(&mut ChannelConfig)) -> World {
    let config = webpush_config(adjust);
    let world = World::with(ClockMode::Database, |configs| configs.push(config)).await.expect("world");
    subscribe(&world, peer).await;
    world
}

async fn subscribe(world: &World, peer: &WebPushService) {
    let (user, channel) = (UserId::from("u1"), ChannelName::from("webpush"));
    let subscription = SecretString::from(peer.subscribe());
    let stored = DestinationCipher::encrypt(&*world.cipher, &user, &channel, &subscription).expect("encrypt");
    world.store.put(&user, &channel, true, Some(stored)).await.expect("put");
}

/// Submits one notification with `ttl_ms`, runs the worker until the task settles (or 3 s pass).
async fn deliver(world: &World, event: &str, ttl_ms: u64) -> TaskView {
    let created = world.submit("u1", event, ttl_ms, None).await.expect("submit");
    let task = created.tasks.iter().find(|t| t.channel.as_str() == "webpush").expect("webpush task").task_id;
    let worker = world.worker("w1", 60_000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        worker.drain(5).await.expect("drain");
        let view = world.task(created.notification_id, task).await.expect("task");
        if view.state != TaskState::Pending || std::time::Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn accepted_with_vapid_encrypted_payload_ttl_topic_and_urgency() {
    let peer = WebPushService::start().await.expect("push peer");
    let world = world(&peer, |c| push(c).urgency = Some(Urgency::High)).await;
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(task.state, TaskState::Sent);
    assert_eq!(outcomes(&task), ["ACCEPTED"]);
    assert_eq!(task.provider_msg_id.as_deref(), Some("msg1"), "the Location's last segment");

    let requests = peer.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert!(request.vapid_ok, "the VAPID signature verifies against k=");
    assert_eq!(request.vapid_subject.as_deref(), Some(SUBJECT));
    assert_eq!(request.urgency.as_deref(), Some("high"));
    assert_eq!(request.topic.as_deref(), Some(topic(&task.reference).as_str()));
    assert!(request.topic.as_ref().is_some_and(|t| t.len() <= 32));
    let ttl = request.ttl.expect("TTL");
    assert!((3_590..=3_600).contains(&ttl), "TTL is the remaining lifetime: {ttl}");
    let payload: serde_json::Value =
        serde_json::from_str(request.plaintext.as_deref().expect("decrypted")).expect("json");
    assert_eq!(payload["text"], PRIVATE_DEFAULT_TEXT, "only the privacy-safe text, never the body");
    assert_eq!(payload["tag"].as_str(), request.topic.as_deref());
}

#[tokio::test]
async fn python_http_ece_decrypts_and_cryptography_verifies_what_herald_sent() {
    if !herald_tests::peers::require_python("http_ece") {
        return;
    }
    let peer = WebPushService::start().await.expect("push peer");
    let world = world(&peer, |c| push(c).send_body = true).await;
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(task.state, TaskState::Sent);
    let request = &peer.requests()[0];
    let ours = request.plaintext.clone().expect("the stand-in decrypted it");
    let theirs = decrypt_with_http_ece(&peer, request.subscription, &request.body).await.expect("http_ece");
    assert_eq!(theirs, ours, "an independent implementation reads the same payload");
    assert!(theirs.contains("Event e1 for u1"), "send_body = true sends the body: {theirs}");
    let authorization = request.authorization.as_deref().expect("an Authorization header");
    let checked = verify_vapid_with_python(authorization, peer.origin()).await.expect("cryptography verifies VAPID");
    assert_eq!(checked, format!("ok sub={SUBJECT}"));
}

#[tokio::test]
async fn the_ttl_is_the_remaining_lifetime() {
    let peer = WebPushService::start().await.expect("push peer");
    let world = world(&peer, |_| {}).await;
    let task = deliver(&world, "e1", 90_000).await;
    assert_eq!(task.state, TaskState::Sent);
    let ttl = peer.requests()[0].ttl.expect("TTL");
    assert!((85..=90).contains(&ttl), "{ttl}");
}

#[tokio::test]
async fn gone_subscriptions_fail_and_switch_the_channel_off_visibly() {
    for status in [404, 410] {
        let peer = WebPushService::start().await.expect("push peer");
        peer.script([Script::status(status)]);
        let world = world(&peer, |_| {}).await;
        let task = deliver(&world, "e1", HOUR).await;
        assert_eq!(outcomes(&task), ["REJECTED"], "{status}");
        assert_eq!(task.state, TaskState::Failed, "{status}");
        assert!(task.last_error.as_deref().is_some_and(|e| e.starts_with(WEBPUSH_SUBSCRIPTION_EXPIRED)), "{task:?}");
        let (user, channel) = (UserId::from("u1"), ChannelName::from("webpush"));
        let pref = world.store.get(&user, &channel).await.expect("get").expect("pref");
        assert!(!pref.enabled, "{status}: the subscription is disabled for that user and channel");
        assert!(world.store.destination_expired(&user, &channel).await.expect("mark"), "{status}");
        // No further task is made for the switched-off channel.
        let next = world.submit("u1", "e2", HOUR, None).await.expect("submit");
        assert!(next.tasks.iter().all(|t| t.channel.as_str() != "webpush"), "{status}");
        // A new subscription clears the mark.
        subscribe(&world, &peer).await;
        assert!(!world.store.destination_expired(&user, &channel).await.expect("mark"));
        assert_eq!(peer.received(), 0);
    }
}

#[tokio::test]
async fn a_test_send_that_finds_the_subscription_gone_switches_the_channel_off() {
    use herald_tests::api::Api;
    use reqwest::StatusCode;
    use serde_json::json;

    let peer = WebPushService::start().await.expect("push peer");
    let world = world(&peer, |_| {}).await;
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");
    peer.script([Script::status(410)]);
    let answer = api.post("/v1/users/u1/channels/webpush/test", Some(&token), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let (user, channel) = (UserId::from("u1"), ChannelName::from("webpush"));
    let pref = world.store.get(&user, &channel).await.expect("get").expect("pref");
    assert!(!pref.enabled, "as after a delivery, a gone subscription switches the channel off: {}", answer.text);
    assert!(world.store.destination_expired(&user, &channel).await.expect("mark"));
    assert_eq!(peer.received(), 0);
    // A 400 says nothing about the subscription: a new one, refused as malformed, stays on.
    subscribe(&world, &peer).await;
    peer.script([Script::status(400)]);
    let answer = api.post("/v1/users/u1/channels/webpush/test", Some(&token), &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert!(world.store.get(&user, &channel).await.expect("get").expect("pref").enabled);
    assert!(!world.store.destination_expired(&user, &channel).await.expect("mark"));
}

#[tokio::test]
async fn malformed_and_too_large_are_rejected_without_disabling() {
    for status in [400, 413] {
        let peer = WebPushService::start().await.expect("push peer");
        peer.script([Script::status(status)]);
        let world = world(&peer, |_| {}).await;
        let task = deliver(&world, "e1", HOUR).await;
        assert_eq!(outcomes(&task), ["REJECTED"]);
        let pref =
            world.store.get(&UserId::from("u1"), &ChannelName::from("webpush")).await.expect("get").expect("pref");
        assert!(pref.enabled, "{status} says nothing about the subscription");
    }
}

#[tokio::test]
async fn too_many_requests_is_retried_after_retry_after_and_sent_once() {
    let peer = WebPushService::start().await.expect("push peer");
    peer.script([Script::retry_after(429, 1)]);
    let world = world(&peer, |_| {}).await;
    let created = world.submit("u1", "e1", HOUR, None).await.expect("submit");
    let worker = world.worker("w1", 60_000);
    worker.drain(5).await.expect("drain");
    let task = created.tasks.iter().find(|t| t.channel.as_str() == "webpush").expect("task").task_id;
    let first = world.task(created.notification_id, task).await.expect("task");
    assert_eq!(outcomes(&first), ["RETRYABLE_REJECT"]);
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    worker.drain(5).await.expect("drain");
    let view = world.task(created.notification_id, task).await.expect("task");
    assert_eq!(outcomes(&view), ["RETRYABLE_REJECT", "ACCEPTED"]);
    assert_eq!(peer.received(), 1);
    let topics: Vec<_> = peer.requests().iter().map(|r| r.topic.clone()).collect();
    assert_eq!(topics[0], topics[1], "the Topic is stable across attempts");
}

#[tokio::test]
async fn server_errors_follow_refusal_5xx() {
    let peer = WebPushService::start().await.expect("push peer");
    peer.script([Script::status(503)]);
    let world = world(&peer, |c| c.refusal_5xx = herald_domain::RefusalProof::Unknown).await;
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(outcomes(&task), ["IO_ERROR"]);
    assert!(task.is_parked(), "{task:?}");
}

#[tokio::test]
async fn no_answer_is_unknown_and_parked_with_one_message() {
    let peer = WebPushService::start().await.expect("push peer");
    peer.script([Script::HangAfterAccept]);
    let world = world(&peer, |_| {}).await;
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(outcomes(&task), ["TIMEOUT"]);
    assert!(task.is_parked(), "neither key nor query: parked, {task:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    world.worker("w2", 60_000).drain(5).await.expect("drain");
    assert_eq!(peer.requests().len(), 1, "never sent again automatically");
}

#[tokio::test]
async fn the_opt_in_resends_with_the_same_topic() {
    let peer = WebPushService::start().await.expect("push peer");
    peer.script([Script::HangAfterAccept]);
    let world = world(&peer, |c| c.on_unknown = OnUnknown::ResendSameTopic).await;
    let created = world.submit("u1", "e1", HOUR, None).await.expect("submit");
    let task = created.tasks.iter().find(|t| t.channel.as_str() == "webpush").expect("task").task_id;
    let worker = world.worker("w1", 60_000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let view = loop {
        worker.drain(5).await.expect("drain");
        let view = world.task(created.notification_id, task).await.expect("task");
        if view.state == TaskState::Sent || std::time::Instant::now() > deadline {
            break view;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(outcomes(&view), ["TIMEOUT", "ACCEPTED"]);
    let requests = peer.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].topic, requests[1].topic, "the push service replaces it if still outstanding");
}

#[test]
fn the_migration_spells_the_domains_expired_detail() {
    let migration = include_str!("../../../migrations/0006_push_subscription_expired.sql");
    assert!(migration.contains(&format!("LIKE '{WEBPUSH_SUBSCRIPTION_EXPIRED}%'")));
}

#[tokio::test]
async fn the_api_stores_only_a_push_subscription_and_shows_an_expired_one() {
    use herald_tests::api::Api;
    use reqwest::StatusCode;
    use serde_json::json;

    let peer = WebPushService::start().await.expect("push peer");
    let world = World::with(ClockMode::Database, |configs| configs.push(webpush_config(|_| {}))).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("u1");
    let path = "/v1/users/u1/channels/webpush";
    for bad in [
        "zq@zq.example.org".to_owned(),
        r#"{"endpoint":"https://zq.example/p","keys":{"p256dh":"zq","auth":"zq"}}"#.to_owned(),
        r#"{"endpoint":"http://zq.example/p","keys":{}}"#.to_owned(),
    ] {
        let answer = api.put(path, Some(&token), &json!({"destination": bad, "enabled": true})).await;
        let _ = answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "destination");
        assert!(!answer.text.contains("zq"), "the answer never repeats the destination: {}", answer.text);
    }
    let (user, channel) = (UserId::from("u1"), ChannelName::from("webpush"));
    assert!(world.store.get(&user, &channel).await.expect("get").is_none(), "a refused PUT writes nothing");

    let subscription = peer.subscribe();
    let answer = api.put(path, Some(&token), &json!({"destination": subscription, "enabled": true})).await;
    let doc = answer.ok(StatusCode::OK);
    assert!(doc.get("status").is_none(), "{doc}");
    assert!(!answer.text.contains("/push/"), "{}", answer.text);

    peer.script([Script::status(410)]);
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(task.state, TaskState::Failed);
    // The inbox names the reason, not a bare "failed".
    let inbox = api.get("/v1/users/u1/inbox", Some(&token)).await.ok(StatusCode::OK);
    let words: Vec<_> = inbox["items"][0]["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .filter(|c| c["channel"] == "webpush")
        .map(|c| c["status_text"].clone())
        .collect();
    assert_eq!(words, [json!("not sent: subscription expired")], "{inbox}");
    let answer = api.put(path, Some(&token), &json!({"enabled": false})).await;
    let doc = answer.ok(StatusCode::OK);
    assert_eq!(doc["status"], "subscription expired", "{doc}");
    assert_eq!(doc["enabled"], false);
    let answer = api.put(path, Some(&token), &json!({"enabled": true})).await;
    let message = answer.field_problem(StatusCode::CONFLICT, "destination");
    assert!(message.contains("subscribe again"), "an expired subscription is not switched on again: {message}");

    let answer = api.put(path, Some(&token), &json!({"destination": peer.subscribe(), "enabled": true})).await;
    let doc = answer.ok(StatusCode::OK);
    assert!(doc.get("status").is_none(), "a new subscription clears the mark: {doc}");
}

#[test]
fn herald_keys_vapid_prints_a_key_the_channel_accepts() {
    let out = std::process::Command::new(herald_tests::bins::binary("herald"))
        .args(["keys", "vapid"])
        .env_remove("HERALD_CONFIG")
        .output()
        .expect("the herald binary runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let private = text
        .lines()
        .find_map(|line| line.strip_prefix("vapid_private_key = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a vapid_private_key line");
    let key = VapidKey::from_base64(private).expect("a valid key");
    assert!(text.contains(key.public_key()), "the public key is printed for the browsers: {text}");
    let again = std::process::Command::new(herald_tests::bins::binary("herald"))
        .args(["keys", "vapid"])
        .output()
        .expect("runs");
    assert_ne!(String::from_utf8_lossy(&again.stdout), text, "every key is new");
}

/// Both new kinds through `herald worker` as an operator runs it: a configuration file (the VAPID key as a
/// `_file`, the SMTP port as an `HERALD__CHANNEL__…` override), aiosmtpd and the push stand-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_and_webpush_work_through_herald_worker_with_a_configuration_file() {
    use herald_channels::cipher::Keyring;
    use herald_channels::config::SmtpTls;
    use herald_domain::{EventKey, Millis};
    use herald_ports::prelude::*;
    use herald_ports::store::{ChannelTable, NewNotification};
    use herald_ports::Clock as _;
    use herald_tests::peers::smtp::SmtpPeer;
    use herald_tests::wait::wait_until;

    const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    if !herald_tests::peers::require_python("aiosmtpd") {
        return;
    }
    let smtp = SmtpPeer::start("accept").await.expect("aiosmtpd");
    let push = WebPushService::start().await.expect("push peer");
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let store = db.store.clone();
    let keyring = Keyring::new([("k1".to_owned(), SecretString::from(KEY))], "k1").expect("key");
    let user = UserId::from("alice");
    for (channel, destination) in [("mail", "alice@mail.example.org".to_owned()), ("browser", push.subscribe())] {
        let channel = ChannelName::from(channel);
        let stored =
            DestinationCipher::encrypt(&keyring, &user, &channel, &SecretString::from(destination)).expect("encrypt");
        store.put(&user, &channel, true, Some(stored)).await.expect("preference");
    }

    let dir = std::env::temp_dir().join(format!("herald-issue13-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (private, _) = VapidKey::generate();
    std::fs::write(dir.join("vapid-key"), format!("{private}\n")).expect("key file");
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{url}\"\n[keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n\
             [worker]\nconcurrency = 1\nlease_ms = 5000\npoll_ms = 200\n\
             [[channel]]\nname = \"mail\"\nkind = \"email\"\nhost = \"127.0.0.1\"\nport = 1\ntls = \"none\"\n\
             from = \"herald@notify.example.org\"\ntimeout_ms = 2000\n\
             [[channel]]\nname = \"browser\"\nkind = \"webpush\"\nvapid_private_key_file = \"{key}\"\n\
             vapid_subject = \"{SUBJECT}\"\nurgency = \"low\"\ntimeout_ms = 2000\n\
             allow_loopback_endpoints = true\n",
            url = db.url,
            key = dir.join("vapid-key").display(),
        ),
    )
    .expect("config file");
    let _child = tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .arg("worker")
        // The push stand-in is on loopback: `allow_loopback_endpoints`, which only `--stand-ins` lets start.
        .arg("--stand-ins")
        .env_remove("HERALD_CONFIG")
        .env("HERALD__CHANNEL__mail__PORT", smtp.port().to_string())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("herald worker starts");

    let mail = ChannelConfig::with_settings::<Email>(
        "mail",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            tls: Some(SmtpTls::None),
            from: Some("herald@notify.example.org".into()),
            ..EmailSettings::default()
        },
    );
    let browser = webpush_config(|c| c.name = "browser".into());
    let table =
        ChannelTable(vec![(ChannelName::from("mail"), mail.rules()), (ChannelName::from("browser"), browser.rules())]);
    let new = NewNotification {
        user_id: user.clone(),
        event_key: EventKey::from("order-13"),
        body: "Your order has shipped".into(),
        ttl: Millis(600_000),
        max_attempts: None,
        thread_key: None,
        submitted_by: None,
    };
    let now = store.clock().now().await.expect("clock");
    let created = store.create(&new, &table, now).await.expect("create");
    assert_eq!(created.tasks.len(), 2);
    wait_until("both tasks to be SENT by the worker process", || async {
        let view = store.notification(created.notification_id).await.ok().flatten();
        view.is_some_and(|v| v.tasks.iter().all(|t| t.state == TaskState::Sent))
    })
    .await;
    assert_eq!(smtp.received().len(), 1);
    let requests = push.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].vapid_ok && requests[0].plaintext.is_some(), "{:?}", requests[0]);
    assert_eq!(requests[0].urgency.as_deref(), Some("low"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_plain_http_endpoint_is_posted_to_only_when_the_channel_allows_loopback() {
    // A subscription comes from a user: by default Herald does not post to its own machine over http.
    let peer = WebPushService::start().await.expect("push peer");
    let world = world(&peer, |c| push(c).allow_loopback_endpoints = false).await;
    let task = deliver(&world, "e1", HOUR).await;
    assert_eq!(outcomes(&task), ["REJECTED"]);
    assert!(peer.requests().is_empty(), "nothing was posted");
}
