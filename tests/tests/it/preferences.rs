//! One path for a user's channel settings (issue 40, item 8): the API's `PUT …/channels/{channel}` and the
//! console's settings form call the same use case, so the console refuses every destination the API
//! refuses, and neither switches an expired Web Push subscription back on. Before, the console's form
//! skipped the destination check: it stored `not a subscription at all`, an `http://169.254.169.254`
//! subscription and `Bob <bob@x.org>`, and re-enabled an expired subscription.

use herald_channels::config::{ChannelConfig, ConfigSecret, SmtpTls};
use herald_channels::kinds::webpush::VapidKey;
use herald_domain::{ChannelKind, ChannelName, UserId};
use herald_ports::{DestinationCipher, PreferenceStore};
use herald_standin::WebPushService;
use herald_tests::api::Api;
use herald_tests::{ClockMode, World};
use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::json;

fn configs(configs: &mut Vec<ChannelConfig>) {
    let mut mail = ChannelConfig::new("mail", ChannelKind::Email, "");
    mail.host = Some("127.0.0.1".into());
    mail.port = Some(25);
    mail.tls = Some(SmtpTls::None);
    mail.from = Some("herald@notify.example.org".into());
    configs.push(mail);
    let mut webpush = ChannelConfig::new("webpush", ChannelKind::Webpush, "");
    webpush.vapid_private_key = Some(ConfigSecret::new(VapidKey::generate().0));
    webpush.vapid_subject = Some("mailto:ops@notify.example.org".into());
    webpush.allow_loopback_endpoints = true;
    configs.push(webpush);
}

/// A console session of `user`, through a one-time link, and the CSRF token of its settings page.
async fn console_session(api: &Api, user: &str) -> (reqwest::Client, String, String) {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let link = api.sign_in_link(user).await;
    let code = link.split_once("code=").expect("a code").1;
    let answer = client
        .post(format!("{}/console/login/user", api.base))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(format!("code={code}"))
        .send()
        .await
        .expect("sign in");
    let cookie = answer.headers()[SET_COOKIE].to_str().expect("cookie").split(';').next().expect("pair").to_owned();
    let page = client
        .get(format!("{}/console/me/channels", api.base))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("settings")
        .text()
        .await
        .expect("page");
    let at = page.find("name=\"csrf\" value=\"").expect("a form");
    let csrf = page[at + 19..at + 19 + 32].to_owned();
    (client, cookie, csrf)
}

fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The console's settings form for `channel`: `destination` typed, the switch on.
async fn console_save(
    api: &Api,
    session: &(reqwest::Client, String, String),
    channel: &str,
    destination: &str,
) -> StatusCode {
    let (client, cookie, csrf) = session;
    let form = format!("csrf={csrf}&destination={}&enabled=on", form_value(destination));
    client
        .post(format!("{}/console/me/channels/{channel}", api.base))
        .header(COOKIE, cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("save")
        .status()
}

#[tokio::test]
async fn the_console_refuses_every_destination_the_api_refuses_and_stores_what_it_accepts() {
    let world = World::with(ClockMode::Manual, configs).await.expect("world");
    let api = Api::start(&world).await.expect("api");
    let peer = WebPushService::start().await.expect("push service");
    let token = api.user_token("bob");
    let session = console_session(&api, "bob").await;
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
        assert_eq!(
            console_save(&api, &session, channel, destination).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{channel}"
        );
        assert!(
            world.store.get(&UserId::from("bob"), &ChannelName::from(*channel)).await.expect("get").is_none(),
            "{channel}: neither front end stored it"
        );
    }

    // What both accept, both store the same way: encrypted, switched on, unverified.
    let good = peer.subscribe();
    assert_eq!(console_save(&api, &session, "webpush", &good).await, StatusCode::SEE_OTHER);
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
    let session = console_session(&api, "cleo").await;
    let (client, cookie, csrf) = &session;
    let status = client
        .post(format!("{}/console/me/channels/webpush", api.base))
        .header(COOKIE, cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&destination=&enabled=on"))
        .send()
        .await
        .expect("save")
        .status();
    assert_eq!(status, StatusCode::CONFLICT);
    let pref = world.store.get(&user, &channel).await.expect("get").expect("stored");
    assert!(!pref.enabled, "still off");
    assert!(world.store.destination_expired(&user, &channel).await.expect("mark"), "still marked expired");
}
