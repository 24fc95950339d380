//! `kind = "email"` against a real SMTP server nobody here wrote: aiosmtpd, with scripted handlers
//! (`tests/src/peers/smtp_peer.py`). Every row of the SMTP contract that a server can produce is driven
//! through Herald's worker and PostgreSQL, and the server's own record of what it received is the count of
//! messages a user would really have got.

use herald_channels::config::{ChannelConfig, SmtpTls, PRIVATE_DEFAULT_TEXT};
use herald_channels::kinds::email::{Email, EmailSettings};
use herald_domain::{ChannelName, OnUnknown, TaskState, UserId};
use herald_ports::store::TaskView;
use herald_ports::{DestinationCipher, PreferenceStore};
use herald_tests::cases::outcomes;
use herald_tests::peers::smtp::SmtpPeer;
use herald_tests::{ClockMode, World};
use secrecy::SecretString;

const HOUR: u64 = 3_600_000;
const ADDRESS: &str = "alice@mail.example.org";
const FROM: &str = "herald@notify.example.org";

/// The e-mail settings of a channel made by [`email_config`].
fn mail(config: &mut ChannelConfig) -> &mut EmailSettings {
    config.settings_mut::<Email>().expect("an email channel")
}

fn email_config(port: u16, adjust: impl FnOnce(&mut ChannelConfig)) -> ChannelConfig {
    let mut config = ChannelConfig::with_settings::<Email>(
        "mail",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            port: Some(port),
            tls: Some(SmtpTls::None),
            from: Some(FROM.into()),
            ..EmailSettings::default()
        },
    );
    config.timeout_ms = 1_000;
    config.retry_base_ms = 1_000;
    config.retry_cap_ms = 10_000;
    adjust(&mut config);
    config
}

/// A world with the e-mail channel at `peer`, and user `u1` subscribed at [`ADDRESS`].
async fn world(peer: &SmtpPeer, adjust: impl FnOnce(&mut ChannelConfig)) -> World {
    let config = email_config(peer.port(), adjust);
    let world = World::with(ClockMode::Manual, |configs| configs.push(config)).await.expect("world");
    let (user, channel) = (UserId::from("u1"), ChannelName::from("mail"));
    let stored =
        DestinationCipher::encrypt(&*world.cipher, &user, &channel, &SecretString::from(ADDRESS)).expect("encrypt");
    world.store.put(&user, &channel, true, Some(stored)).await.expect("put");
    world
}

/// Submits one notification, runs the worker (twice, a retry apart), and returns its task.
async fn deliver(world: &World, event: &str) -> TaskView {
    let created = world.submit("u1", event, HOUR, None).await.expect("submit");
    let task = created.tasks.iter().find(|t| t.channel.as_str() == "mail").expect("mail task").task_id;
    let worker = world.worker("w1", 60_000);
    worker.drain(5).await.expect("drain");
    world.advance(15_000);
    worker.drain(5).await.expect("drain");
    world.task(created.notification_id, task).await.expect("task")
}

async fn peer(script: &str) -> Option<SmtpPeer> {
    tls_peer(script, "none").await
}

async fn tls_peer(script: &str, tls: &str) -> Option<SmtpPeer> {
    if !herald_tests::peers::require_python("aiosmtpd") {
        return None;
    }
    Some(SmtpPeer::start_with_tls(script, tls).await.expect("aiosmtpd"))
}

#[tokio::test]
async fn accepted_after_the_end_of_data_with_a_stable_message_id_and_only_the_private_text() {
    let Some(peer) = peer("accept").await else { return };
    let world = world(&peer, |_| {}).await;
    let task = deliver(&world, "e1").await;
    assert_eq!(task.state, TaskState::Sent);
    assert_eq!(outcomes(&task), ["ACCEPTED"]);
    assert_eq!(task.provider_msg_id.as_deref(), Some("Q1"), "the server's queue id is kept");

    let received = peer.received();
    assert_eq!(received.len(), 1);
    let mail = &received[0];
    assert_eq!(mail.rcpt, ADDRESS);
    assert_eq!(mail.mail_from, FROM);
    assert_eq!(mail.header("Message-ID"), Some(format!("<ntf-{}@notify.example.org>", task.reference)));
    assert!(mail.header("From").is_some_and(|from| from.contains(FROM)), "{mail:?}");
    assert_eq!(mail.header("Subject").as_deref(), Some("New notification"));
    assert!(mail.body().contains(PRIVATE_DEFAULT_TEXT.split(' ').next().expect("word")), "{}", mail.body());
    // The notification body ("Event e1 for u1") stays in the inbox: nothing of it reached the server.
    assert!(!mail.data.contains("Event e1"), "{}", mail.data);
}

#[tokio::test]
async fn the_body_is_sent_only_when_configured() {
    let Some(peer) = peer("accept").await else { return };
    let world = world(&peer, |c| mail(c).send_body = true).await;
    let task = deliver(&world, "e1").await;
    assert_eq!(task.state, TaskState::Sent);
    assert!(peer.received()[0].body().contains("Event e1 for u1"));
}

#[tokio::test]
async fn no_reply_to_the_final_dot_is_unknown_and_parked_with_exactly_one_message() {
    let Some(peer) = peer("delay:4").await else { return };
    let world = world(&peer, |_| {}).await;
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["TIMEOUT"]);
    assert_eq!(task.state, TaskState::Unknown);
    assert!(task.is_parked(), "neither key nor query: parked for a human, {task:?}");
    assert_eq!(peer.received().len(), 1, "the server has the message; no second one was sent");
}

#[tokio::test]
async fn a_connection_dropped_after_the_end_of_data_is_unknown_and_parked() {
    let Some(peer) = peer("drop").await else { return };
    let world = world(&peer, |_| {}).await;
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["IO_ERROR"]);
    assert!(task.is_parked(), "{task:?}");
    assert_eq!(peer.received().len(), 1);
}

#[tokio::test]
async fn transient_refusals_at_mail_rcpt_and_after_data_are_retried_and_one_message_arrives() {
    for (script, first) in [
        ("mail:421,accept", "RETRYABLE_REJECT"),
        ("rcpt:451,accept", "RETRYABLE_REJECT"),
        ("data:451,accept", "RETRYABLE_REJECT"),
    ] {
        let Some(peer) = peer(script).await else { return };
        let world = world(&peer, |_| {}).await;
        let task = deliver(&world, "e1").await;
        assert_eq!(outcomes(&task), [first, "ACCEPTED"], "{script}");
        assert_eq!(task.state, TaskState::Sent, "{script}");
        assert_eq!(peer.received().len(), 1, "{script}");
    }
}

#[tokio::test]
async fn permanent_refusals_fail_and_nothing_arrives() {
    for script in ["mail:550", "rcpt:550", "data:554"] {
        let Some(peer) = peer(script).await else { return };
        let world = world(&peer, |_| {}).await;
        let task = deliver(&world, "e1").await;
        assert_eq!(outcomes(&task), ["REJECTED"], "{script}");
        assert_eq!(task.state, TaskState::Failed, "{script}");
        assert!(peer.received().is_empty(), "{script}");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_not_sent_and_retried() {
    // Nothing listens on the port any more: connection refused is a refusal before acceptance.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let config = email_config(port, |c| c.max_attempts = 2);
    let world = World::with(ClockMode::Manual, |configs| configs.push(config)).await.expect("world");
    let (user, channel) = (UserId::from("u1"), ChannelName::from("mail"));
    let stored =
        DestinationCipher::encrypt(&*world.cipher, &user, &channel, &SecretString::from(ADDRESS)).expect("encrypt");
    world.store.put(&user, &channel, true, Some(stored)).await.expect("put");
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["RETRYABLE_REJECT", "RETRYABLE_REJECT"]);
    assert_eq!(task.state, TaskState::Failed, "nothing may have been sent: FAILED, not parked");
}

#[tokio::test]
async fn the_opt_in_resends_an_unknown_outcome_with_the_same_message_id() {
    let Some(peer) = peer("delay:4,accept").await else { return };
    let world = world(&peer, |c| c.on_unknown = OnUnknown::ResendSameMessageId).await;
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["TIMEOUT", "ACCEPTED"]);
    assert_eq!(task.state, TaskState::Sent);
    let received = peer.received();
    assert_eq!(received.len(), 2, "a partial guarantee: the server got both");
    let ids: Vec<_> = received.iter().map(|m| m.header("Message-ID")).collect();
    assert_eq!(ids[0], ids[1], "one identity for both copies, so receivers can collapse them");
    assert_eq!(ids[0], Some(format!("<ntf-{}@notify.example.org>", task.reference)));
}

#[tokio::test]
async fn a_test_send_goes_through_the_same_smtp_adapter() {
    let Some(peer) = peer("accept").await else { return };
    let world = world(&peer, |_| {}).await;
    let services = world.services();
    let answer = herald_core::usecases::test_send(&services, &UserId::from("u1"), None, &ChannelName::from("mail"))
        .await
        .expect("test send");
    assert!(format!("{answer:?}").to_lowercase().contains("accept"), "{answer:?}");
    assert_eq!(peer.received().len(), 1);
    assert_eq!(peer.received()[0].rcpt, ADDRESS);
    let pref = world.store.get(&UserId::from("u1"), &ChannelName::from("mail")).await.expect("get").expect("pref");
    assert!(pref.enabled);
}

#[tokio::test]
async fn the_api_stores_only_an_e_mail_address_for_an_email_channel() {
    use herald_tests::api::Api;
    use reqwest::StatusCode;
    use serde_json::json;

    let config = email_config(25, |_| {});
    let world = World::with(ClockMode::Manual, |configs| configs.push(config)).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let token = api.user_token("bob");
    for bad in ["zq-not-an-address", "Zq <zq@zq.example.org>", "zq@zqnodot", r#"{"endpoint":"https://zq.example"}"#] {
        let answer =
            api.put("/v1/users/bob/channels/mail", Some(&token), &json!({"destination": bad, "enabled": true})).await;
        let message = answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "destination");
        assert!(message.contains("e-mail address"), "{message}");
        assert!(!answer.text.contains("zq"), "the answer never repeats the destination: {}", answer.text);
    }
    let (user, channel) = (UserId::from("bob"), ChannelName::from("mail"));
    assert!(world.store.get(&user, &channel).await.expect("get").is_none(), "a refused PUT writes nothing");

    let answer =
        api.put("/v1/users/bob/channels/mail", Some(&token), &json!({"destination": ADDRESS, "enabled": true})).await;
    let doc = answer.ok(StatusCode::OK);
    assert_eq!(doc["has_destination"], true);
    assert!(!answer.text.contains("alice"), "{}", answer.text);
    let stored = world.store.destination(&user, &channel).await.expect("get").expect("stored");
    assert!(!stored.windows(5).any(|w| w == b"alice"), "stored only encrypted");
}

#[tokio::test]
async fn starttls_is_required_never_skipped() {
    // aiosmtpd here offers no STARTTLS: the address must not go out in the clear, so nothing is sent, and
    // that proves non-acceptance (retried within the budget, then FAILED — never parked).
    let Some(peer) = peer("accept").await else { return };
    let world = world(&peer, |c| {
        mail(c).tls = Some(SmtpTls::Starttls);
        c.max_attempts = 2;
    })
    .await;
    let task = deliver(&world, "e1").await;
    assert_eq!(outcomes(&task), ["RETRYABLE_REJECT", "RETRYABLE_REJECT"]);
    assert_eq!(task.state, TaskState::Failed);
    assert!(task.last_error.as_deref().is_some_and(|e| e.contains("STARTTLS")), "{task:?}");
    assert!(peer.received().is_empty());
}

#[tokio::test]
async fn starttls_and_implicit_tls_are_spoken_and_the_certificate_is_checked() {
    for (mode, tls) in [("starttls", SmtpTls::Starttls), ("implicit", SmtpTls::Implicit)] {
        let Some(peer) = tls_peer("accept", mode).await else { return };
        // Trusting the run's certificate authority: the message goes out over TLS.
        let ca = peer.ca_pem();
        let world = world(&peer, |c| {
            mail(c).tls = Some(tls);
            mail(c).tls_ca_file = Some(ca);
        })
        .await;
        let task = deliver(&world, "e1").await;
        assert_eq!(outcomes(&task), ["ACCEPTED"], "{mode}: {task:?}");
        let received = peer.received();
        assert_eq!(received.len(), 1, "{mode}");
        let version = received[0].header("X-Peer-Tls").expect("the peer records the session's TLS");
        assert!(version.starts_with("TLSv1."), "{mode}: sent over {version}");

        // Without it the server's certificate is not trusted: nothing is sent, and that proves
        // non-acceptance (retried, then FAILED — never parked as unknown).
        let world = world_without_ca(&peer, tls).await;
        let task = deliver(&world, "e2").await;
        assert_eq!(outcomes(&task), ["RETRYABLE_REJECT", "RETRYABLE_REJECT"], "{mode}: {task:?}");
        assert_eq!(task.state, TaskState::Failed, "{mode}");
        assert_eq!(peer.received().len(), 1, "{mode}: nothing more reached the server");
    }
}

async fn world_without_ca(peer: &SmtpPeer, tls: SmtpTls) -> World {
    world(peer, |c| {
        mail(c).tls = Some(tls);
        c.max_attempts = 2;
    })
    .await
}

#[test]
fn an_unreadable_or_empty_ca_file_is_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("herald-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").expect("write");
    for path in [dir.join("missing.pem"), empty] {
        let config = email_config(2525, |c| {
            mail(c).tls = Some(SmtpTls::Starttls);
            mail(c).tls_ca_file = Some(path.clone());
        });
        let Err(error) = herald_channels::kinds::email::EmailChannel::new(&config) else {
            panic!("{} was accepted", path.display())
        };
        assert_eq!(error.key, "channel.mail.tls_ca_file", "{error:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Defect (issue 40): with `send_body = true` a bare CR in a notification body reached SMTP DATA unchanged —
/// SMTP smuggling through a relay that takes a bare CR (or LF) for a line end: `<CR>.<CR><LF>` ends the
/// message there, and what follows becomes commands under Herald's name. The body comes through the API as
/// a service submits it; what aiosmtpd received holds no CR that does not start a CRLF and no LF that does
/// not end one, the lines are the body's, and there is one message.
#[tokio::test]
async fn bare_cr_and_lf_in_a_body_reach_data_only_as_crlf() {
    use herald_ports::prelude::*;
    use herald_tests::api::{Api, SERVICE_TOKEN};
    use reqwest::StatusCode;
    use serde_json::json;

    let Some(peer) = peer("accept").await else { return };
    let world = world(&peer, |c| mail(c).send_body = true).await;
    let api = Api::start(&world).await.expect("api");
    let body = "first\rsecond\nthird\r.\r\nMAIL FROM:<mallory@evil.example>\r\nRCPT TO:<victim@example.org>\r\n\
                DATA\r\nsmuggled\n.\nlast\r";
    let created = api
        .post(
            "/v1/notifications",
            Some(SERVICE_TOKEN),
            &json!({"user_id": "u1", "event_key": "smuggle-1", "body": body, "ttl_seconds": 3600}),
        )
        .await
        .ok(StatusCode::CREATED);
    let notification = world.notification_id(created["notification_id"].as_str().expect("id")).await.expect("id");
    world.worker("w1", 60_000).drain(5).await.expect("drain");
    let view = world.store.notification(notification).await.expect("view").expect("notification");
    let task = view.tasks.iter().find(|t| t.channel.as_str() == "mail").expect("mail task");
    assert_eq!(task.state, TaskState::Sent, "{task:?}");

    let received = peer.received();
    assert_eq!(received.len(), 1, "one message; nothing smuggled after it");
    let data = received[0].data.as_bytes();
    for (i, byte) in data.iter().enumerate() {
        match byte {
            b'\r' => assert_eq!(data.get(i + 1), Some(&b'\n'), "a bare CR at {i}: {:?}", received[0].data),
            b'\n' => assert!(i > 0 && data[i - 1] == b'\r', "a bare LF at {i}: {:?}", received[0].data),
            _ => {}
        }
    }
    let lines: Vec<&str> = received[0].body().split("\r\n").collect();
    for line in ["first", "second", "third", ".", "smuggled", "last"] {
        assert!(lines.contains(&line), "{line:?} is a line of its own: {lines:?}");
    }
}
