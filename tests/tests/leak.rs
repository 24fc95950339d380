//! The secret-leak test of SPEC §8: a planted destination flows through the whole system — the API, the
//! store, the worker, all three adapters and their stand-ins — and is then searched for everywhere it
//! must not be: every log line at TRACE level, every error text, every API response, every row of the
//! database.
//!
//! It is its own test binary because it installs a *global* tracing subscriber: a scoped one
//! (`set_default`) sees only its own thread, and the worker, the API server, sqlx and the HTTP clients run
//! on the runtime's worker threads and in spawned tasks. With the global one, nothing that runs in this
//! process can log past the capture. Events of the `log` crate (used by some dependencies) are bridged
//! into it as well.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use herald_core::auth::Authenticator;
use herald_http::{self as api, ApiState, ClockReadiness, DEFAULT_BODY_LIMIT};
use herald_ports::prelude::*;
use herald_ports::ChannelTable;
use herald_standin::{Script, MIAO_NOT_FOUND};
use herald_tests::{ClockMode, World};
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::{json, Value};
use sqlx::PgPool;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::fmt::MakeWriter;

/// The planted string. Letters, digits and `-` only, so JSON, form and URL encodings leave it as it is
/// and one search finds it in any of them.
const CANARY: &str = "LEAK-canary-7Qz9";

const SERVICE_TOKEN: &str = "svc-leak-test";
const ADMIN_TOKEN: &str = "adm-leak-test";

/// Everything the process logged, in the fmt layer's human format.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;

    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// Installs the global TRACE subscriber once for this binary, with span opening and closing (and their
/// fields) written as lines too.
fn capture() -> Buffer {
    static LOGS: OnceLock<Buffer> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Buffer::default();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
            .with_span_events(FmtSpan::FULL)
            .with_ansi(false)
            .with_thread_ids(true)
            .with_writer(buffer.clone())
            .try_init()
            .expect("no other global subscriber in this binary");
        buffer
    })
    .clone()
}

/// The forms in which a leak could hide: the text itself, and its hex (how PostgreSQL prints bytea).
fn needles() -> Vec<String> {
    let hex: String = CANARY.bytes().map(|b| format!("{b:02x}")).collect();
    vec![CANARY.to_owned(), hex.clone(), hex.to_uppercase()]
}

/// The lines of `haystack` that contain any needle. The one search every check below uses, and the one
/// the negative controls prove able to find something.
fn leaks(haystack: &str) -> Vec<String> {
    let needles = needles();
    haystack.lines().filter(|line| needles.iter().any(|n| line.contains(n.as_str()))).map(str::to_owned).collect()
}

fn destination(user: &str, channel: &str) -> String {
    format!("{CANARY}-{user}-{channel}")
}

/// Every row of every table and view in `public`, as `row::text`, plus every bytea value as hex and as
/// escaped text. Returns the dump and how many bytea values it contained.
async fn dump_database(pool: &PgPool) -> anyhow::Result<(String, usize)> {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    anyhow::ensure!(tables.iter().any(|t| t == "channel_pref"), "the dump sees no channel_pref table");
    let mut dump = String::new();
    for table in &tables {
        let rows: Vec<String> =
            sqlx::query_scalar(&format!("SELECT t::text FROM public.{} t", quote(table))).fetch_all(pool).await?;
        for row in rows {
            dump.push_str(&format!("{table}: {row}\n"));
        }
    }
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND data_type = 'bytea' ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await?;
    let mut bytea_values = 0;
    for (table, column) in &columns {
        let values: Vec<(String, String)> = sqlx::query_as(&format!(
            "SELECT encode({c}, 'hex'), encode({c}, 'escape') FROM public.{t} WHERE {c} IS NOT NULL",
            c = quote(column),
            t = quote(table)
        ))
        .fetch_all(pool)
        .await?;
        for (hex, escaped) in values {
            bytea_values += 1;
            dump.push_str(&format!("{table}.{column} hex: {hex}\n{table}.{column} escape: {escaped}\n"));
        }
    }
    Ok((dump, bytea_values))
}

/// A client of the real API that keeps every response (status line, headers, body) for the search.
struct ApiClient {
    base: String,
    http: reqwest::Client,
    transcript: Vec<String>,
}

impl ApiClient {
    async fn call(&mut self, method: reqwest::Method, path: &str, token: &str, body: Option<&str>) -> (u16, Value) {
        let mut request = self.http.request(method.clone(), format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let mut record = format!("{method} {path} -> {status}\n");
        for (name, value) in response.headers() {
            record.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
        }
        let text = response.text().await.expect("a readable body");
        record.push_str(&text);
        record.push('\n');
        self.transcript.push(record);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// The reference channels know a created notification's task on `channel` by.
fn reference_of(created: &Value, channel: &str) -> String {
    created["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["channel"] == channel))
        .and_then(|t| t["reference"].as_str())
        .unwrap_or_else(|| panic!("no {channel} task in {created}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_destination_appears_in_no_log_error_response_or_row() -> anyhow::Result<()> {
    let logs = capture();
    let world = World::new(ClockMode::Manual).await?;

    // The real API on loopback, over the world's store, registry, keyring and clock.
    let auth = Authenticator::new(
        &[SecretString::from(SERVICE_TOKEN)],
        &[SecretString::from(ADMIN_TOKEN)],
        SecretString::from("user-token-secret-of-the-leak-test"),
    );
    let user_tokens: Vec<(String, String)> = ["leak-a", "leak-b", "leak-c", "leak-d"]
        .iter()
        .map(|u| ((*u).to_owned(), auth.user_token(u).expose_secret().to_owned()))
        .collect();
    let _table: ChannelTable = world.table();
    let state = ApiState {
        // The quota is not what this test is about (it/test_send.rs proves it): no press is refused by it.
        services: world
            .services()
            .with_test_send_quota(herald_domain::TestSendQuota { per_minute: 1000, per_day: 1000 }),
        auth: Arc::new(auth),
        console: herald_http::ConsoleSettings::default(),
        readiness: Arc::new(ClockReadiness(world.clock.clone())),
        metrics: None,
        body_limit: DEFAULT_BODY_LIMIT,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api::serve(
        listener,
        api::router(state),
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(5),
    ));
    let mut client = ApiClient { base, http: reqwest::Client::builder().no_proxy().build()?, transcript: Vec::new() };
    let put = reqwest::Method::PUT;
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    // 1. Destinations for every user on every channel, through the API.
    for (user, token) in &user_tokens {
        for channel in ["push", "sms", "miao"] {
            let body = json!({ "destination": destination(user, channel), "enabled": true }).to_string();
            let (status, answer) =
                client.call(put.clone(), &format!("/v1/users/{user}/channels/{channel}"), token, Some(&body)).await;
            assert_eq!(status, 200, "PUT preference {user}/{channel}: {answer}");
            assert_eq!(answer["has_destination"], true, "{answer}");
        }
    }

    // 2. Bad requests that carry the canary; each must be refused without quoting it and write nothing.
    let (probe_user, probe_token) = ("leak-probe", ADMIN_TOKEN);
    let long = CANARY.repeat(100);
    let bad_bodies = [
        json!({ "destination": destination(probe_user, "push"), "enabled": "yes" }).to_string(),
        json!({ "destination": destination(probe_user, "push"), "enabled": CANARY }).to_string(),
        json!({ "destination": destination(probe_user, "push"), "enabled": true, "note": CANARY }).to_string(),
        json!({ "destination": [destination(probe_user, "push")], "enabled": true }).to_string(),
        json!({ "destination": long, "enabled": true }).to_string(),
        format!(r#"{{"destination": "{}", "enabled": tru"#, destination(probe_user, "push")),
        format!(r#"{{"destination": "{}\q", "enabled": true}}"#, destination(probe_user, "push")),
    ];
    for body in &bad_bodies {
        let (status, answer) =
            client.call(put.clone(), &format!("/v1/users/{probe_user}/channels/push"), probe_token, Some(body)).await;
        assert!((400..500).contains(&status), "refused: {body} -> {status} {answer}");
    }
    let unknown_channel = json!({ "destination": destination(probe_user, "fax"), "enabled": true }).to_string();
    let (status, _) = client
        .call(put.clone(), &format!("/v1/users/{probe_user}/channels/fax"), probe_token, Some(&unknown_channel))
        .await;
    assert_eq!(status, 422, "an unknown channel is refused");
    assert_eq!(
        world.db.count("SELECT count(*) FROM channel_pref WHERE user_id = 'leak-probe'").await?,
        0,
        "refused requests wrote nothing"
    );

    // 3. One notification per user through the API.
    let mut created = Vec::new();
    for (user, _) in &user_tokens {
        let body = json!({ "user_id": user, "event_key": format!("leak-{user}"), "body": format!("Order update for {user}"), "ttl_seconds": 3600 })
            .to_string();
        let (status, answer) = client.call(post.clone(), "/v1/notifications", SERVICE_TOKEN, Some(&body)).await;
        assert_eq!(status, 201, "submit for {user}: {answer}");
        created.push(answer);
    }
    let [a, b, c, d] = [&created[0], &created[1], &created[2], &created[3]];

    // 4. What each channel does: a success, a refusal (400), a timeout, a dropped connection, a 503,
    //    Miaotixing unknowns (parked) and a Miaotixing refusal text.
    // Accepted, then answered after 1 s: beyond the adapters' 300 ms client timeout.
    let slow = Script::Delay(Duration::from_secs(1));
    world.push.script_for(&reference_of(b, "push"), slow.clone());
    world.push.script_for(&reference_of(c, "push"), Script::status(503));
    world.push.script_for(&reference_of(d, "push"), Script::retry_after(429, 1));
    world.sms.script_for(&reference_of(a, "sms"), Script::status(400));
    world.sms.script_for(&reference_of(b, "sms"), Script::DropAfterAccept);
    world.sms.script_for(&reference_of(c, "sms"), slow);
    world.miao.script_for(&destination("leak-b", "miao"), Script::Garbage);
    world.miao.script_for(&destination("leak-c", "miao"), Script::DropAfterAccept);
    world.miao.script_for(&destination("leak-d", "miao"), Script::text(200, MIAO_NOT_FOUND));

    let worker = world.worker("leak-worker", 5_000);
    let mut reports = Vec::new();
    for _ in 0..4 {
        reports.extend(worker.drain(20).await?);
        world.advance(11_000);
    }
    assert!(!reports.is_empty(), "the worker did something");

    // The canary really flowed: every stand-in received it as the destination of every user.
    for (user, _) in &user_tokens {
        assert!(world.push.requests_to(&destination(user, "push")) >= 1, "push got {user}'s destination");
        assert!(world.sms.requests_to(&destination(user, "sms")) >= 1, "sms got {user}'s destination");
        assert!(world.miao.requests_to(&destination(user, "miao")) >= 1, "miao got {user}'s destination");
    }
    assert_eq!(world.push.sends_to(&destination("leak-b", "push")), 1, "timed-out push resent with its key: one send");

    // 5. Read everything back through the API.
    let mut parked = Vec::new();
    for (i, (user, token)) in user_tokens.iter().enumerate() {
        let id = created[i]["notification_id"].as_str().map(str::to_owned).expect("an id");
        let (status, view) = client.call(get.clone(), &format!("/v1/notifications/{id}"), token, None).await;
        assert_eq!(status, 200, "{view}");
        let (status, inbox) = client.call(get.clone(), &format!("/v1/users/{user}/inbox"), token, None).await;
        assert_eq!(status, 200, "{inbox}");
    }
    let (status, review) = client.call(get.clone(), "/v1/review", ADMIN_TOKEN, None).await;
    assert_eq!(status, 200, "{review}");
    for task in review["tasks"].as_array().into_iter().flatten() {
        parked.push(task["task_id"].as_i64().expect("a task id"));
    }
    assert_eq!(parked.len(), 2, "the two Miaotixing unknowns are parked: {review}");
    let resolve = json!({ "final_state": "FAILED", "note": "checked with the user" }).to_string();
    let (status, answer) =
        client.call(post.clone(), &format!("/v1/tasks/{}/resolve", parked[0]), ADMIN_TOKEN, Some(&resolve)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) =
        client.call(post.clone(), &format!("/v1/tasks/{}/resolve", parked[0]), ADMIN_TOKEN, Some(&resolve)).await;
    assert_eq!(status, 409, "a second resolution is refused");

    // What the worker observed covers every failure the brief plants.
    let mut outcomes = Vec::new();
    for answer in &created {
        let id = world.notification_id(answer["notification_id"].as_str().expect("an id")).await?;
        let view = world.store.notification(id).await?.expect("the notification");
        for task in view.tasks {
            outcomes.extend(task.attempts.iter().filter_map(|a| a.outcome.map(|o| o.as_str().to_owned())));
        }
    }
    for expected in
        ["ACCEPTED", "ACCEPTED_REPLAY", "QUERY_FOUND", "TIMEOUT", "IO_ERROR", "REJECTED", "RETRYABLE_REJECT"]
    {
        assert!(outcomes.iter().any(|o| o == expected), "{expected} among {outcomes:?}");
    }

    let _ = stop_tx.send(());
    let _ = server.await;

    // 6. The searches. Error texts first: they exist, and none carries the canary.
    let errors: Vec<String> = sqlx::query_scalar(
        "SELECT last_error FROM delivery_task WHERE last_error IS NOT NULL \
         UNION ALL SELECT detail FROM delivery_attempt WHERE detail IS NOT NULL \
         UNION ALL SELECT late_detail FROM delivery_attempt WHERE late_detail IS NOT NULL",
    )
    .fetch_all(world.store.pool())
    .await?;
    assert!(errors.len() >= 5, "error texts were written: {errors:?}");
    assert_eq!(leaks(&errors.join("\n")), Vec::<String>::new(), "no error text carries the destination");

    let responses = client.transcript.join("\n");
    assert!(client.transcript.len() >= 30, "the API was exercised");
    assert_eq!(leaks(&responses), Vec::<String>::new(), "no API response carries the destination");

    let (dump, bytea_values) = dump_database(world.store.pool()).await?;
    assert!(bytea_values >= 12, "the dump holds the encrypted destinations ({bytea_values})");
    assert!(dump.contains("channel_pref: ") && dump.contains("delivery_attempt: "), "the dump read the rows");
    assert_eq!(leaks(&dump), Vec::<String>::new(), "the database holds no destination in plain text");

    let log = logs.text();
    // The capture really saw the worker, the adapters, the API and the database driver, on any thread.
    for sign in ["call_and_finish{", "send classified", "http{method=", "sqlx::query"] {
        assert!(log.contains(sign), "the log capture saw {sign:?}");
    }
    assert_eq!(leaks(&log), Vec::<String>::new(), "no log line carries the destination");
    eprintln!(
        "searched {} log lines, {} API responses, {} error texts, {} database lines ({bytea_values} bytea values)",
        log.lines().count(),
        client.transcript.len(),
        errors.len(),
        dump.lines().count()
    );

    // 7. Negative controls: the same search does find a leak in each place it looked.
    tokio::spawn(async {
        tracing::trace!(destination = CANARY, "a deliberate leak from another task");
    })
    .await?;
    assert_eq!(leaks(&logs.text()).len(), 1, "a leaked log line is found");
    assert_eq!(leaks(&format!("HTTP 200 {{\"to\":\"{CANARY}\"}}")).len(), 1, "a leaked response is found");
    sqlx::query("UPDATE delivery_task SET last_error = $1 WHERE id = (SELECT min(id) FROM delivery_task)")
        .bind(format!("sent to {CANARY}"))
        .execute(world.store.pool())
        .await?;
    sqlx::query(
        "UPDATE channel_pref SET destination = convert_to($1, 'UTF8') WHERE user_id = 'leak-a' AND channel = 'sms'",
    )
    .bind(format!("{CANARY}\u{1}"))
    .execute(world.store.pool())
    .await?;
    let (dump, _) = dump_database(world.store.pool()).await?;
    let found = leaks(&dump);
    assert!(found.iter().any(|l| l.starts_with("delivery_task: ")), "a plain-text row is found: {found:?}");
    assert!(found.iter().any(|l| l.starts_with("channel_pref: ")), "a plain bytea is found as hex: {found:?}");
    assert!(found.iter().any(|l| l.contains("escape: LEAK")), "a plain bytea is found as text: {found:?}");
    Ok(())
}

/// The canary of the e-mail and Web Push case: another string than [`CANARY`], so this test and the one
/// above (which plants a deliberate log leak of its canary) can share the one global capture.
const CANARY_MAIL_PUSH: &str = "LEAK-mailpush-8Rk2";

fn mail_push_leaks(haystack: &str) -> Vec<String> {
    let hex: String = CANARY_MAIL_PUSH.bytes().map(|b| format!("{b:02x}")).collect();
    let needles = [CANARY_MAIL_PUSH.to_owned(), CANARY_MAIL_PUSH.to_lowercase(), hex.clone(), hex.to_uppercase()];
    haystack.lines().filter(|line| needles.iter().any(|n| line.contains(n.as_str()))).map(str::to_owned).collect()
}

/// Issue 13: an e-mail address and a Web Push subscription (the canary in the address's local part and in
/// the endpoint's path) flow through the API, the store, the worker, the SMTP and Web Push adapters and
/// their real peers — accepted, refused (550; 410, which also switches the channel off), and unanswered —
/// and are then searched for in every log line, error text, API response and database row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_email_and_webpush_destinations_appear_in_no_log_error_response_or_row() -> anyhow::Result<()> {
    use herald_channels::config::{ChannelConfig, ConfigSecret, SmtpTls};
    use herald_channels::kinds::email::{Email, EmailSettings};
    use herald_channels::kinds::webpush::VapidKey;
    use herald_channels::kinds::webpush::{Webpush, WebpushSettings};
    use herald_standin::{Script, WebPushService};
    use herald_tests::peers::smtp::SmtpPeer;

    if !herald_tests::peers::require_python("aiosmtpd") {
        return Ok(());
    }
    let logs = capture();
    let smtp = SmtpPeer::start("accept,rcpt:550,delay:3").await?;
    let push = WebPushService::start().await?;
    push.script([Script::Ok, Script::status(410), Script::HangAfterAccept]);
    let mut mail = ChannelConfig::with_settings::<Email>(
        "mail",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            port: Some(smtp.port()),
            tls: Some(SmtpTls::None),
            from: Some("herald@notify.example.org".into()),
            ..EmailSettings::default()
        },
    );
    mail.timeout_ms = 1_000;
    let mut webpush = ChannelConfig::with_settings::<Webpush>(
        "webpush",
        "",
        WebpushSettings {
            vapid_private_key: Some(ConfigSecret::new(VapidKey::generate().0)),
            vapid_subject: Some("mailto:ops@notify.example.org".into()),
            allow_loopback_endpoints: true,
            ..WebpushSettings::default()
        },
    );
    webpush.timeout_ms = 1_000;
    let world = World::with(ClockMode::Database, |configs| configs.extend([mail, webpush])).await?;

    let auth = Authenticator::new(
        &[SecretString::from(SERVICE_TOKEN)],
        &[SecretString::from(ADMIN_TOKEN)],
        SecretString::from("user-token-secret-of-the-leak-test"),
    );
    let users = ["leak-a", "leak-b", "leak-c"];
    let tokens: Vec<String> = users.iter().map(|u| auth.user_token(u).expose_secret().to_owned()).collect();
    let state = ApiState {
        services: world
            .services()
            .with_test_send_quota(herald_domain::TestSendQuota { per_minute: 1000, per_day: 1000 }),
        auth: Arc::new(auth),
        console: herald_http::ConsoleSettings::default(),
        readiness: Arc::new(ClockReadiness(world.clock.clone())),
        metrics: None,
        body_limit: DEFAULT_BODY_LIMIT,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api::serve(
        listener,
        api::router(state),
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(5),
    ));
    let mut client = ApiClient { base, http: reqwest::Client::builder().no_proxy().build()?, transcript: Vec::new() };
    let (put, post, get) = (reqwest::Method::PUT, reqwest::Method::POST, reqwest::Method::GET);

    // Destinations through the API, and refusals of malformed ones that carry the canary.
    for (user, token) in users.iter().zip(&tokens) {
        let address = format!("{CANARY_MAIL_PUSH}-{user}@mail.example.org");
        let subscription = push.subscribe_tagged(Some(&format!("{CANARY_MAIL_PUSH}-{user}")));
        for (channel, destination) in [("mail", address), ("webpush", subscription)] {
            let body = json!({ "destination": destination, "enabled": true }).to_string();
            let path = format!("/v1/users/{user}/channels/{channel}");
            let (status, answer) = client.call(put.clone(), &path, token, Some(&body)).await;
            assert_eq!(status, 200, "PUT {user}/{channel}: {answer}");
        }
    }
    for (channel, bad) in [
        ("mail", format!("{CANARY_MAIL_PUSH} <{CANARY_MAIL_PUSH}@mail.example.org>")),
        ("webpush", format!(r#"{{"endpoint":"https://push.example/{CANARY_MAIL_PUSH}","keys":{{}}}}"#)),
        ("webpush", format!("{CANARY_MAIL_PUSH}@mail.example.org")),
    ] {
        let body = json!({ "destination": bad, "enabled": true }).to_string();
        let (status, _) = client
            .call(put.clone(), &format!("/v1/users/leak-probe/channels/{channel}"), ADMIN_TOKEN, Some(&body))
            .await;
        assert_eq!(status, 422, "{channel}: {bad}");
    }

    for user in users {
        let body = json!({ "user_id": user, "event_key": format!("leak-{user}"), "body": format!("Order update for {user}"), "ttl_seconds": 3600 })
            .to_string();
        let (status, answer) = client.call(post.clone(), "/v1/notifications", SERVICE_TOKEN, Some(&body)).await;
        assert_eq!(status, 201, "{answer}");
    }
    let worker = world.worker("leak-worker", 5_000);
    for _ in 0..3 {
        worker.drain(20).await?;
    }
    for (user, token) in users.iter().zip(&tokens) {
        let (status, _) = client.call(get.clone(), &format!("/v1/users/{user}/inbox"), token, None).await;
        assert_eq!(status, 200);
        let path = format!("/v1/users/{user}/channels/webpush");
        let (status, _) = client.call(put.clone(), &path, token, Some(r#"{"enabled": false}"#)).await;
        assert_eq!(status, 200);
    }
    assert!(
        client.transcript.iter().any(|r| r.contains("\"status\":\"subscription expired\"")),
        "the 410'd subscription shows as expired"
    );
    let (status, review) = client.call(get.clone(), "/v1/review", ADMIN_TOKEN, None).await;
    assert_eq!(status, 200, "{review}");
    let _ = stop_tx.send(());
    let _ = server.await;

    // The canary really flowed to both peers, and every row of both contracts was seen.
    assert!(smtp.received().iter().any(|m| m.rcpt.contains(CANARY_MAIL_PUSH)), "aiosmtpd got an address");
    assert!(push.requests().len() >= 3, "the push service got every subscription");
    let outcomes: Vec<String> = sqlx::query_scalar(
        "SELECT t.channel || ':' || a.outcome FROM delivery_attempt a JOIN delivery_task t \
         ON t.user_id = a.user_id AND t.id = a.task_id WHERE a.outcome IS NOT NULL",
    )
    .fetch_all(world.store.pool())
    .await?;
    for expected in
        ["mail:ACCEPTED", "mail:REJECTED", "mail:TIMEOUT", "webpush:ACCEPTED", "webpush:REJECTED", "webpush:TIMEOUT"]
    {
        assert!(outcomes.iter().any(|o| o == expected), "{expected} among {outcomes:?}");
    }
    let expired = world.db.count("SELECT count(*) FROM channel_pref WHERE destination_expired_at IS NOT NULL").await?;
    assert_eq!(expired, 1, "the 410 switched one subscription off");

    let errors: Vec<String> = sqlx::query_scalar(
        "SELECT last_error FROM delivery_task WHERE last_error IS NOT NULL \
         UNION ALL SELECT detail FROM delivery_attempt WHERE detail IS NOT NULL",
    )
    .fetch_all(world.store.pool())
    .await?;
    assert!(errors.len() >= 4, "error texts were written: {errors:?}");
    assert_eq!(mail_push_leaks(&errors.join("\n")), Vec::<String>::new(), "no error text carries a destination");
    assert_eq!(mail_push_leaks(&client.transcript.join("\n")), Vec::<String>::new(), "no API response does");
    let (dump, bytea_values) = dump_database(world.store.pool()).await?;
    assert!(bytea_values >= 6, "the dump holds the encrypted destinations ({bytea_values})");
    assert_eq!(mail_push_leaks(&dump), Vec::<String>::new(), "the database holds no destination in plain text");
    let log = logs.text();
    assert!(log.contains("channel=mail") && log.contains("channel=webpush"), "the capture saw both adapters");
    assert_eq!(mail_push_leaks(&log), Vec::<String>::new(), "no log line carries a destination");
    // Negative control: the same search finds the canary where it really is — in what the peers received.
    let received: Vec<String> = smtp.received().iter().map(|m| m.rcpt.clone()).collect();
    assert!(!mail_push_leaks(&received.join("\n")).is_empty(), "the search finds a planted address");
    Ok(())
}
