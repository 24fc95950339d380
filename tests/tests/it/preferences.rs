//! One path for a user's channel settings (issue 40, item 8): the API's `PUT …/channels/{channel}` and the
//! console's settings form call the same use case, so the console refuses every destination the API
//! refuses, and neither switches an expired Web Push subscription back on. Before, the console's form
//! skipped the destination check: it stored `not a subscription at all`, an `http://169.254.169.254`
//! subscription and `Bob <bob@x.org>`, and re-enabled an expired subscription.

use herald_channels::config::{ChannelConfig, ConfigSecret, SmtpTls};
use herald_channels::kinds::email::{Email, EmailSettings};
use herald_channels::kinds::webpush::VapidKey;
use herald_channels::kinds::webpush::{Webpush, WebpushSettings};
use herald_domain::{ChannelName, UserId};
use herald_ports::{DestinationCipher, PreferenceStore};
use herald_standin::WebPushService;
use herald_tests::api::Api;
use herald_tests::console::{form_value, Console};
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::json;

fn configs(configs: &mut Vec<ChannelConfig>) {
    let mail = ChannelConfig::with_settings::<Email>(
        "mail",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            port: Some(25),
            tls: Some(SmtpTls::None),
            from: Some("herald@notify.example.org".into()),
            ..EmailSettings::default()
        },
    );
    configs.push(mail);
    let webpush = ChannelConfig::with_settings::<Webpush>(
        "webpush",
        "",
        WebpushSettings {
            vapid_private_key: Some(ConfigSecret::new(VapidKey::generate().0)),
            vapid_subject: Some("mailto:ops@notify.example.org".into()),
            allow_loopback_endpoints: true,
            ..WebpushSettings::default()
        },
    );
    configs.push(webpush);
}

/// The console's settings form for `channel`: `destination` typed, the switch on.
async fn console_save(console: &Console, channel: &str, destination: &str) -> StatusCode {
    let fields = format!("destination={}&enabled=on", form_value(destination));
    console.post(&format!("/console/me/channels/{channel}"), &fields).await.status
}

#[tokio::test]
async fn the_console_refuses_every_destination_the_api_refuses_and_stores_what_it_accepts() {
    let world = World::with(ClockMode::Manual, configs).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let peer = WebPushService::start().await.expect("push service");
    let token = api.user_token("bob");
    let session = Console::user(&api, "bob").await;
    let subscription = |endpoint: &str| {
        let mut value: serde_json::Value = serde_json::from_str(&peer.subscribe()).expect("json");
        value["endpoint"] = json!(endpoint);
        value.to_string()
    };
    let refused = [
        ("webpush", "not a subscription at all".to_owned()),
        ("webpush", subscription("ftp://push.example.org/x")),
        ("webpush", subscription("http://169.254.169.254/latest/meta-data")),
        ("webpush", subscription("https://10.0.0.1:8443/push")),
        ("mail", "Bob <bob@x.org>".to_owned()),
        ("mail", "bob@nodot".to_owned()),
        ("mail", "x".repeat(1025)),
        ("mail", "bob@x.org\r\nBcc: eve@x.org".to_owned()),
    ];
    for (channel, destination) in &refused {
        let path = format!("/v1/users/bob/channels/{channel}");
        let answer = api.put(&path, Some(&token), &json!({"destination": destination, "enabled": true})).await;
        let _ = answer.field_problem(StatusCode::UNPROCESSABLE_ENTITY, "destination");
        assert_eq!(console_save(&session, channel, destination).await, StatusCode::UNPROCESSABLE_ENTITY, "{channel}");
        assert!(
            world.store.get(&UserId::from("bob"), &ChannelName::from(*channel)).await.expect("get").is_none(),
            "{channel}: neither front end stored it"
        );
    }

    // What both accept, both store the same way: encrypted, switched on, unverified.
    let good = peer.subscribe();
    assert_eq!(console_save(&session, "webpush", &good).await, StatusCode::SEE_OTHER);
    let by_console = world.store.get(&UserId::from("bob"), &ChannelName::from("webpush")).await.expect("get");
    let doc = api
        .put(
            "/v1/users/ann/channels/webpush",
            Some(&api.user_token("ann")),
            &json!({"destination": good, "enabled": true}),
        )
        .await
        .ok(StatusCode::OK);
    let by_api = world.store.get(&UserId::from("ann"), &ChannelName::from("webpush")).await.expect("get");
    let shape = |p: Option<herald_ports::ChannelPref>| p.map(|p| (p.enabled, p.has_destination, p.verified, p.version));
    assert_eq!(shape(by_console), shape(by_api), "{doc}");
}

#[tokio::test]
async fn neither_front_end_switches_an_expired_subscription_back_on() {
    let world = World::with(ClockMode::Manual, configs).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let peer = WebPushService::start().await.expect("push service");
    let (user, channel) = (UserId::from("cleo"), ChannelName::from("webpush"));
    let stored = DestinationCipher::encrypt(&*world.cipher, &user, &channel, &SecretString::from(peer.subscribe()))
        .expect("encrypt");
    world.store.put(&user, &channel, true, Some(stored)).await.expect("put");
    // The push service said it is gone (as a delivery's 410 records it).
    sqlx::query("UPDATE channel_pref SET enabled = false, destination_expired_at = now() WHERE user_id = 'cleo'")
        .execute(world.db.store.pool())
        .await
        .expect("mark expired");

    let answer =
        api.put("/v1/users/cleo/channels/webpush", Some(&api.user_token("cleo")), &json!({"enabled": true})).await;
    assert!(answer.field_problem(StatusCode::CONFLICT, "destination").contains("subscribe again"));
    let session = Console::user(&api, "cleo").await;
    let status = session.post("/console/me/channels/webpush", "destination=&enabled=on").await.status;
    assert_eq!(status, StatusCode::CONFLICT);
    let pref = world.store.get(&user, &channel).await.expect("get").expect("stored");
    assert!(!pref.enabled, "still off");
    assert!(world.store.destination_expired(&user, &channel).await.expect("mark"), "still marked expired");
}
