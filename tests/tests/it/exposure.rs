//! Safe to expose (issue 40): anonymous clients cannot take the request slots authenticated ones need,
//! every body read has its timeout, and failed authentication is throttled per client address.
//!
//! The starvation case runs against a real `herald serve` with real sockets: before the two budgets,
//! a slot was taken before authentication and a console form's body was read with no timeout, so a few
//! dozen sockets sending a `POST /console/login` head and never its body held every slot, and an
//! authenticated inbox read was answered 503.

use std::process::Stdio;
use std::time::Duration;

use herald_http as api;
use herald_tests::api::{Api, ADMIN_TOKEN, GENEROUS_QUOTA};
use herald_tests::wait::wait_until;
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const SERVICE: &str = "a-service-token-of-at-least-32-bytes-0001";
const ADMIN: &str = "an-admin-token-of-at-least-32-bytes-00002";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("address").port()
}

/// One socket that sends a whole request head declaring a body, then never sends the body.
async fn stalled_sign_in(port: u16) -> tokio::net::TcpStream {
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    socket
        .write_all(
            b"POST /console/login HTTP/1.1\r\nHost: herald\r\nContent-Type: application/x-www-form-urlencoded\r\n\
              Content-Length: 100\r\n\r\n",
        )
        .await
        .expect("send the head");
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_sockets_that_never_send_their_body_cannot_starve_authenticated_requests() {
    let db = herald_tests::TestDb::fresh().await.expect("a fresh database");
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("herald-exposure-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n\
             [server]\nlisten = \"127.0.0.1:{port}\"\nmax_in_flight = 16\nbody_timeout_ms = 3000\n\
             [auth]\nservice_tokens = [\"{SERVICE}\"]\nadmin_tokens = [\"{ADMIN}\"]\n\
             user_token_secret = \"a-user-token-secret-of-some-length\"\n\
             [keys]\ncurrent = \"k1\"\nk1 = \"{KEY}\"\n\
             [log]\nlevel = \"warn\"\n",
            db.url
        ),
    )
    .expect("config file");
    let _serve = tokio::process::Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .args(["serve", "--migrate"])
        .env_remove("HERALD_CONFIG")
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("herald starts");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    wait_until("herald serve to answer", || async {
        client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;

    // Forty sockets, more than twice every slot there is, each holding a sign-in that never arrives.
    let mut sockets = Vec::new();
    for _ in 0..40 {
        sockets.push(stalled_sign_in(port).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inbox = client.get(format!("{base}/v1/users/alice/inbox")).bearer_auth(ADMIN).send().await.expect("answer");
    assert_eq!(inbox.status(), StatusCode::OK, "an authenticated request is served while anonymous sockets stall");
    let submit = client
        .post(format!("{base}/v1/notifications"))
        .bearer_auth(SERVICE)
        .json(&serde_json::json!({"user_id": "alice", "event_key": "k-1", "body": "b", "ttl_seconds": 60}))
        .send()
        .await
        .expect("answer");
    assert_eq!(submit.status(), StatusCode::CREATED);
    // The anonymous budget is what the stalled sockets hold: another anonymous request waits for none.
    let anonymous = client.get(format!("{base}/console/login")).send().await.expect("answer");
    assert!(
        matches!(anonymous.status(), StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS),
        "{}",
        anonymous.status()
    );
    assert!(anonymous.headers().contains_key("retry-after"));

    // The body timeout applies to console forms too: the sockets that got a slot are answered 408.
    let mut timed_out = 0;
    for socket in &mut sockets {
        let mut answer = vec![0u8; 512];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(8), socket.read(&mut answer)).await {
            if String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 408") {
                timed_out += 1;
            }
        }
    }
    assert!(timed_out >= 1, "a body that never arrives is answered 408 after body_timeout_ms");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn api(world: &World) -> Api {
    Api::start_configured(
        world,
        Api::default_auth(),
        api::ConsoleSettings::default(),
        api::limits::Limits::default(),
        (api::DEFAULT_BODY_LIMIT, GENEROUS_QUOTA),
    )
    .await
    .expect("api")
}

#[tokio::test]
async fn failed_bearer_tokens_are_throttled_per_address_but_a_valid_token_is_not() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = api(&world).await;
    let burst = api::limits::Limits::default().failed_auth_burst;
    for i in 0..burst {
        let answer = api.get("/v1/review", Some(&format!("a-guess-{i}"))).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let throttled = api.get("/v1/review", Some("one-more-guess")).await;
    let _ = throttled.problem(StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = throttled.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=10).contains(&wait), "one failure comes back every ten seconds: {wait}");
    assert_eq!(api.get("/v1/review", Some(ADMIN_TOKEN)).await.status, StatusCode::OK, "a valid token is served");
    // Requests without credentials are not failures.
    assert_eq!(api.get("/v1/review", None).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn failed_console_sign_ins_are_throttled_per_address() {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = api(&world).await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let sign_in = |token: String| {
        client
            .post(format!("{}/console/login", api.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("sec-fetch-site", "same-origin")
            .body(format!("token={token}"))
            .send()
    };
    for i in 0..api::limits::Limits::default().failed_auth_burst {
        let answer = sign_in(format!("guess-{i}")).await.expect("answer");
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "guess {i}");
        assert_eq!(answer.headers()["location"], "/console/login?failed=1");
    }
    let throttled = sign_in("one-more".into()).await.expect("answer");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(throttled.headers().contains_key("retry-after"));
    assert!(throttled.headers().get("set-cookie").is_none());
}
