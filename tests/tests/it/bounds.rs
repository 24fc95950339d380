//! Bounds on every client, over real HTTP and a real PostgreSQL: a slow client is cut off, a slow body
//! answered 408, a saturated server sheds with 503, a token over its rate gets 429, request ids are
//! capped, user data is not cached, and every list is paged by an opaque cursor.

use std::time::{Duration, Instant};

use herald_http::api::limits::{Limits, MAX_REQUEST_ID_CHARS};
use herald_http::DEFAULT_BODY_LIMIT;
use herald_standin::Script;
use herald_tests::api::{Api, ADMIN_TOKEN, SERVICE_TOKEN};
use herald_tests::wait::wait_until;
use herald_tests::{ClockMode, World};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const SVC: Option<&str> = Some(SERVICE_TOKEN);
const ADMIN: Option<&str> = Some(ADMIN_TOKEN);

async fn bounded(limits: Limits) -> (World, Api) {
    let world = World::new(ClockMode::Manual).await.expect("world");
    let api = Api::start_bounded(&world, DEFAULT_BODY_LIMIT, limits).await.expect("api");
    (world, api)
}

fn address(api: &Api) -> String {
    api.base.trim_start_matches("http://").to_owned()
}

fn submission(user: &str, key: &str) -> Value {
    json!({"user_id": user, "event_key": key, "body": format!("Your order {key} has shipped"), "ttl_seconds": 3600})
}

/// Reads what the server sends until it closes the connection (or 30 s pass: a server that never closes
/// fails the caller's assertion).
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut received)).await;
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_client_that_sends_its_headers_byte_by_byte_is_cut_off() {
    let limits = Limits { header_read_timeout: Duration::from_millis(300), ..Limits::default() };
    let (_world, api) = bounded(limits).await;
    let request = format!("GET /healthz HTTP/1.1\r\nHost: herald\r\nX-Padding: {}\r\n\r\n", "a".repeat(60));
    let mut stream = TcpStream::connect(address(&api)).await.expect("connect");
    let (mut reader, mut writer) = stream.split();
    let mut received = Vec::new();
    let mut sent = 0;
    // One byte every 100 ms: the whole head would take about 9 s; the server closes long before.
    let closed = tokio::select! {
        _ = reader.read_to_end(&mut received) => true,
        () = tokio::time::sleep(Duration::from_secs(30)) => false,
        () = async {
            for byte in request.as_bytes() {
                if writer.write_all(&[*byte]).await.is_err() {
                    break;
                }
                sent += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Written whole: wait for whatever the server answers.
            std::future::pending::<()>().await;
        } => false,
    };
    let answer = String::from_utf8_lossy(&received);
    assert!(closed, "the server closed the connection");
    assert!(sent < request.len(), "cut off after {sent} of {} bytes of the head", request.len());
    assert!(!answer.contains("200 OK"), "no answer to an unfinished head: {answer}");

    // A client that sends its head at once is served as before.
    let ok = api.get("/healthz", None).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_answered_408_and_writes_nothing() {
    let limits = Limits { body_timeout: Duration::from_millis(300), ..Limits::default() };
    let (world, api) = bounded(limits).await;
    world.user("slow", &["push"]).await.expect("user");
    let body = submission("slow", "ord-1").to_string();
    let mut stream = TcpStream::connect(address(&api)).await.expect("connect");
    let head = format!(
        "POST /v1/notifications HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer {SERVICE_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    // Half the body, then nothing.
    stream.write_all(&body.as_bytes()[..body.len() / 2]).await.expect("half a body");
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json") && answer.contains("body-timeout"), "{answer}");
    assert_eq!(world.db.count("SELECT count(*) FROM notification").await.expect("count"), 0);
}

#[tokio::test]
async fn a_saturated_server_sheds_with_503_and_retry_after_but_still_answers_probes() {
    let limits = Limits { max_in_flight: 1, body_timeout: Duration::from_secs(120), ..Limits::default() };
    let (world, api) = bounded(limits).await;
    world.user("busy", &["push"]).await.expect("user");
    // One request in flight: its body never finishes arriving.
    let mut holder = TcpStream::connect(address(&api)).await.expect("connect");
    let head = format!(
        "POST /v1/notifications HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer {SERVICE_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"user_id\":"
    );
    holder.write_all(head.as_bytes()).await.expect("head");
    wait_until("the held request to take the only slot", || async {
        api.get("/v1/review", ADMIN).await.status == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;

    let shed = api.get("/v1/review", ADMIN).await;
    let doc = shed.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(doc["type"], "urn:herald:problem:overloaded", "{doc}");
    let retry = shed.headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After in seconds: {:?}", shed.headers);
    let before = world.db.count("SELECT count(*) FROM notification").await.expect("count");
    let _ =
        api.post("/v1/notifications", SVC, &submission("busy", "ord-2")).await.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        world.db.count("SELECT count(*) FROM notification").await.expect("count"),
        before,
        "shed writes nothing"
    );
    assert_eq!(api.get("/healthz", None).await.status, StatusCode::OK, "liveness is never shed");
    assert_eq!(api.get("/metrics", ADMIN).await.status, StatusCode::OK, "a scrape is never shed");

    // The held request ends; the slot is free again.
    drop(holder);
    wait_until("the slot to be free again", || async { api.get("/v1/review", ADMIN).await.status == StatusCode::OK })
        .await;
}

#[tokio::test]
async fn a_token_over_its_rate_gets_429_with_retry_after_and_other_tokens_do_not() {
    let limits = Limits { rate_per_second: 1, rate_burst: 3, ..Limits::default() };
    let (_world, api) = bounded(limits).await;
    let started = Instant::now();
    let mut answers = Vec::new();
    for _ in 0..20 {
        answers.push(api.get("/v1/review", ADMIN).await);
    }
    let elapsed = started.elapsed();
    let served = answers.iter().filter(|a| a.status == StatusCode::OK).count();
    let limited: Vec<_> = answers.iter().filter(|a| a.status == StatusCode::TOO_MANY_REQUESTS).collect();
    assert_eq!(served + limited.len(), 20, "every answer is 200 or 429");
    // The burst, plus one a second for however long the 20 calls took.
    let allowed = 3 + usize::try_from(elapsed.as_secs()).unwrap_or(usize::MAX) + 1;
    assert!(served <= allowed, "{served} served in {elapsed:?}; at most {allowed}");
    let first = limited.first().expect("some requests were limited");
    let doc = first.problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(doc["type"], "urn:herald:problem:rate-limited", "{doc}");
    let retry = first.headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After in seconds: {:?}", first.headers);
    assert!(!first.text.contains(ADMIN_TOKEN), "the token is never echoed");

    // Another token has a bucket of its own; an invalid token gets its 401, never a bucket.
    let user = api.user_token("rate");
    assert_eq!(api.get("/v1/users/rate/inbox", Some(&user)).await.status, StatusCode::OK);
    for _ in 0..10 {
        let _ = api.get("/v1/review", Some("not-a-valid-token")).await.problem(StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn request_ids_are_echoed_only_when_short_and_printable() {
    let (_world, api) = bounded(Limits::default()).await;
    let with_id = |id: &'static [u8]| {
        let client = api.client.clone();
        let url = format!("{}/healthz", api.base);
        async move {
            let value = reqwest::header::HeaderValue::from_bytes(id).expect("a header value");
            let response = client.get(url).header("x-request-id", value).send().await.expect("answer");
            response.headers().get("x-request-id").expect("a request id").as_bytes().to_vec()
        }
    };
    assert_eq!(with_id(b"order-service-42").await, b"order-service-42");
    let long = [b'a'; MAX_REQUEST_ID_CHARS + 1];
    let long: &'static [u8] = Box::leak(Box::new(long));
    for bad in [long, "caf\u{e9}-\u{202e}id".as_bytes(), b"two words"] {
        let echoed = with_id(bad).await;
        assert_ne!(echoed, bad, "replaced: {}", String::from_utf8_lossy(bad));
        assert!(echoed.len() <= MAX_REQUEST_ID_CHARS && echoed.iter().all(|b| (0x21..=0x7e).contains(b)));
    }
    let exactly = [b'b'; MAX_REQUEST_ID_CHARS];
    let exactly: &'static [u8] = Box::leak(Box::new(exactly));
    assert_eq!(with_id(exactly).await, exactly, "64 characters are kept");
}

#[tokio::test]
async fn answers_with_user_data_are_not_stored_by_caches() {
    let (world, api) = bounded(Limits::default()).await;
    world.user("c", &["push"]).await.expect("user");
    let token = api.user_token("c");
    let created = api.post("/v1/notifications", SVC, &submission("c", "ord-1")).await;
    let id = created.ok(StatusCode::CREATED)["notification_id"].as_str().map(str::to_owned).expect("id");
    let answers = [
        created,
        api.get(&format!("/v1/notifications/{id}"), SVC).await,
        api.get("/v1/users/c/inbox", Some(&token)).await,
        api.put("/v1/users/c/channels/push", Some(&token), &json!({"enabled": false})).await,
        api.get("/v1/users/other/inbox", Some(&token)).await,
    ];
    for answer in &answers {
        let cache = answer.headers.get("cache-control").and_then(|v| v.to_str().ok());
        assert_eq!(cache, Some("no-store"), "{} {}", answer.status, answer.text);
    }
}

/// The ids of a page: task ids (numbers) or notification ids (opaque strings), as text.
fn ids(items: &Value, member: &str, id: &str) -> Vec<String> {
    items[member]
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| i[id].as_i64().map(|n| n.to_string()).or_else(|| i[id].as_str().map(str::to_owned)).expect("an id"))
        .collect()
}

#[tokio::test]
async fn the_inbox_is_paged_by_an_opaque_cursor() {
    let (world, api) = bounded(Limits::default()).await;
    world.user("pager", &[]).await.expect("user");
    for i in 0..5 {
        let _ =
            api.post("/v1/notifications", SVC, &submission("pager", &format!("ord-{i}"))).await.ok(StatusCode::CREATED);
        world.advance(1);
    }
    let token = api.user_token("pager");
    let whole = api.get("/v1/users/pager/inbox", Some(&token)).await.ok(StatusCode::OK);
    assert_eq!(whole["next_cursor"], Value::Null, "one page holds everything: {whole}");
    let everything = ids(&whole, "items", "notification_id");
    assert_eq!(everything.len(), 5);

    let mut paged = Vec::new();
    let mut path = "/v1/users/pager/inbox?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = api.get(&path, Some(&token)).await.ok(StatusCode::OK);
        pages += 1;
        paged.extend(ids(&page, "items", "notification_id"));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/users/pager/inbox?limit=2&cursor={cursor}"),
            None => break,
        }
        assert!(pages < 10, "the pages end");
    }
    assert_eq!((pages, &paged), (3, &everything), "newest first, each item once");

    for bad in ["nonsense", "i12", "r1.1", "i1.", "i1234567890123456.1", "i-1.1"] {
        let answer = api.get(&format!("/v1/users/pager/inbox?cursor={bad}"), Some(&token)).await;
        let message = answer.field_problem(StatusCode::BAD_REQUEST, "cursor");
        assert!(!message.is_empty());
    }
}

#[tokio::test]
async fn the_review_list_is_paged_by_an_opaque_cursor() {
    let (world, api) = bounded(Limits::default()).await;
    for i in 0..3 {
        let user = format!("p{i}");
        world.user(&user, &["miao"]).await.expect("user");
        let _ = api.post("/v1/notifications", SVC, &submission(&user, "ord")).await.ok(StatusCode::CREATED);
        world.miao.script(Script::DropAfterAccept);
        world.worker("bounds-w", 60_000).drain(20).await.expect("worker cycles");
        world.advance(60_000);
    }
    let whole = api.get("/v1/review", ADMIN).await.ok(StatusCode::OK);
    let everything = ids(&whole, "tasks", "task_id");
    assert_eq!((everything.len(), &whole["next_cursor"]), (3, &Value::Null), "{whole}");

    let first = api.get("/v1/review?limit=2", ADMIN).await.ok(StatusCode::OK);
    let cursor = first["next_cursor"].as_str().expect("a next page");
    let second = api.get(&format!("/v1/review?limit=2&cursor={cursor}"), ADMIN).await.ok(StatusCode::OK);
    assert_eq!(second["next_cursor"], Value::Null, "{second}");
    let mut paged = ids(&first, "tasks", "task_id");
    paged.extend(ids(&second, "tasks", "task_id"));
    assert_eq!(paged, everything, "oldest first, each task once");

    // An inbox's cursor is not a review cursor.
    let inbox_cursor = herald_http::api::model::cursor("inbox", 1, 1);
    let answer = api.get(&format!("/v1/review?cursor={inbox_cursor}"), ADMIN).await;
    let _ = answer.field_problem(StatusCode::BAD_REQUEST, "cursor");
}
