//! The stand-in channels over real HTTP: every scripted step of every kind, seen from a
//! `reqwest` client the way a channel adapter sees it.

use std::time::Duration;

use herald_standin::{
    Chaos, Kind, Script, StandIn, GARBAGE_BODY, MIAO_BAD_PARAMS, MIAO_NOT_FOUND, MIAO_OK, MIAO_SERVICE_FAILED,
};
use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};

const ALL_KINDS: [Kind; 3] = [Kind::Push, Kind::Sms, Kind::Miaotixing];

/// Shorter than every scripted delay below, so "the client timed out" is certain.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(150);

fn client() -> Client {
    Client::new()
}

fn impatient_client() -> Client {
    Client::builder().timeout(CLIENT_TIMEOUT).build().expect("client builds")
}

/// One send in the kind's own wire format. `key` is the ref (push, sms) or code (Miaotixing);
/// push uses `ntf-{key}` as its idempotency key, like the adapter (§12).
async fn send(client: &Client, standin: &StandIn, key: &str) -> reqwest::Result<Response> {
    let base = standin.base_url();
    let request = match standin.kind() {
        Kind::Push => client
            .post(format!("{base}/send"))
            .header("Idempotency-Key", format!("ntf-{key}"))
            .json(&json!({"ref": key, "to": "dest-secret", "text": "hello", "ttl_seconds": 60})),
        Kind::Sms => {
            client.post(format!("{base}/messages")).json(&json!({"ref": key, "to": "dest-secret", "text": "hello"}))
        }
        Kind::Miaotixing => client.post(format!("{base}/trigger")).form(&[("id", key), ("text", "hello")]),
    };
    request.send().await
}

/// Real sends for `key` in the kind's own terms (per ref, or per code for Miaotixing).
fn sends_for_key(standin: &StandIn, key: &str) -> u64 {
    match standin.kind() {
        Kind::Push | Kind::Sms => standin.sends_for(key),
        Kind::Miaotixing => standin.sends_to(key),
    }
}

async fn json_body(response: Response) -> Value {
    let text = response.text().await.expect("body arrives");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

async fn sms_query(client: &Client, standin: &StandIn, reference: &str) -> Response {
    client
        .get(format!("{}/messages", standin.base_url()))
        .query(&[("ref", reference)])
        .send()
        .await
        .expect("query answered")
}

/// Polls a condition the server reaches asynchronously; bounded so a bug fails, not hangs.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..400 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// A dropped connection must look like one to the client: an error with no HTTP status and
/// no timeout, i.e. not a 500 and not a slow answer.
#[track_caller]
fn assert_connection_error(result: reqwest::Result<Response>) {
    match result {
        Ok(response) => panic!("expected a dropped connection, got HTTP {}", response.status()),
        Err(error) => {
            assert!(!error.is_timeout(), "expected a drop, got a timeout: {error:?}");
            assert_eq!(error.status(), None, "a drop carries no status: {error:?}");
            assert!(error.is_request(), "expected a transport error: {error:?}");
            let mut causes = Vec::new();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                causes.push(cause.to_string());
                source = cause.source();
            }
            assert!(
                causes.iter().any(|c| c.contains("connection closed before message completed")),
                "expected the connection to close without a response: {causes:?}"
            );
        }
    }
}

// ---------------------------------------------------------------- push

#[tokio::test]
async fn push_accepts_once_and_replays_the_same_key() {
    let push = StandIn::start(Kind::Push).await;
    let client = client();

    let first = send(&client, &push, "r1").await.expect("answered");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(json_body(first).await, json!({"id": "push-000001", "replayed": false}));

    let again = send(&client, &push, "r1").await.expect("answered");
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(json_body(again).await, json!({"id": "push-000001", "replayed": true}));

    let other = send(&client, &push, "r2").await.expect("answered");
    assert_eq!(json_body(other).await, json!({"id": "push-000002", "replayed": false}));

    assert_eq!(push.requests(), 3);
    assert_eq!(push.sends(), 2);
    assert_eq!(push.requests_for("r1"), 2);
    assert_eq!(push.sends_for("r1"), 1);
    assert_eq!(push.sends_to("dest-secret"), 2);
    assert_eq!(push.idempotency_keys(), ["ntf-r1", "ntf-r1", "ntf-r2"]);

    let messages = push.messages();
    let replays: Vec<bool> = messages.iter().map(|m| m.replayed).collect();
    assert_eq!(replays, [false, true, false]);
    assert_eq!(messages[1].id.as_deref(), Some("push-000001"));
    assert_eq!(messages[0].ttl_seconds, Some(60));
    assert_eq!(messages[0].text, "hello");
    assert!(messages[0].instant <= messages[1].instant);
    push.shutdown().await;
}

#[tokio::test]
async fn push_refuses_requests_without_key_or_json_and_counts_no_send() {
    let push = StandIn::start(Kind::Push).await;
    let client = client();
    let url = format!("{}/send", push.base_url());

    let no_key = client
        .post(&url)
        .json(&json!({"ref": "r1", "to": "d", "text": "t", "ttl_seconds": 5}))
        .send()
        .await
        .expect("answered");
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);

    let not_json = client.post(&url).header("Idempotency-Key", "ntf-r1").body("hello").send().await.expect("answered");
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);

    assert_eq!(push.requests(), 2);
    assert_eq!(push.requests_for("r1"), 1);
    assert_eq!(push.sends(), 0);
    assert!(push.messages().is_empty());
}

#[tokio::test]
async fn push_has_no_query_endpoint() {
    let push = StandIn::start(Kind::Push).await;
    let response = sms_query(&client(), &push, "r1").await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(push.queries(), 1);
    assert_eq!(push.requests(), 0);
}

#[tokio::test]
async fn push_times_out_after_acceptance_and_the_retry_is_a_replay() {
    // Reference case T1 as the stand-in sees it: 2 requests, 1 send.
    let push = StandIn::start(Kind::Push).await;
    push.script(Script::Delay(Duration::from_secs(2)));

    let timed_out = send(&impatient_client(), &push, "r1").await;
    assert!(timed_out.expect_err("client times out").is_timeout());
    assert_eq!(push.sends(), 1);

    let retry = send(&client(), &push, "r1").await.expect("answered");
    assert_eq!(json_body(retry).await, json!({"id": "push-000001", "replayed": true}));
    assert_eq!(push.requests_for("r1"), 2);
    assert_eq!(push.sends_for("r1"), 1);
}

// ---------------------------------------------------------------- sms

#[tokio::test]
async fn sms_counts_every_acceptance_and_answers_queries() {
    let sms = StandIn::start(Kind::Sms).await;
    let client = client();

    for expected in ["sms-000001", "sms-000002"] {
        let response = client
            .post(format!("{}/messages", sms.base_url()))
            .header("Idempotency-Key", "ntf-r1")
            .json(&json!({"ref": "r1", "to": "dest-secret", "text": "hello"}))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(json_body(response).await, json!({"id": expected}));
    }
    // The key is ignored: the same key twice made two real sends.
    assert_eq!(sms.sends(), 2);
    assert_eq!(sms.sends_for("r1"), 2);
    assert_eq!(sms.idempotency_keys(), ["ntf-r1", "ntf-r1"]);

    let found = sms_query(&client, &sms, "r1").await;
    assert_eq!(found.status(), StatusCode::OK);
    assert_eq!(json_body(found).await, json!({"found": 2, "id": "sms-000002"}));

    let missing = sms_query(&client, &sms, "nope").await;
    assert_eq!(json_body(missing).await, json!({"found": 0, "id": null}));

    let no_ref = client.get(format!("{}/messages", sms.base_url())).send().await.expect("answered");
    assert_eq!(no_ref.status(), StatusCode::BAD_REQUEST);

    assert_eq!(sms.queries(), 3);
    assert_eq!(sms.queries_for("r1"), 1);
    assert_eq!(sms.requests(), 2, "queries are not send requests");
}

#[tokio::test]
async fn sms_query_failures_use_their_own_queue() {
    let sms = StandIn::start(Kind::Sms).await;
    let client = client();
    sms.script_all([Script::QueryStatus(503), Script::QueryStatus(503)]);

    // A send in between is untouched by the query steps.
    let sent = send(&client, &sms, "r1").await.expect("answered");
    assert_eq!(sent.status(), StatusCode::OK);

    for _ in 0..2 {
        let failed = sms_query(&client, &sms, "r1").await;
        assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(failed.text().await.expect("body").parse::<Value>().is_err());
    }
    let recovered = sms_query(&client, &sms, "r1").await;
    assert_eq!(json_body(recovered).await, json!({"found": 1, "id": "sms-000001"}));
    assert_eq!(sms.queries_for("r1"), 3);
    assert_eq!(sms.pending_scripts(), 0);
}

#[tokio::test]
async fn sms_query_lag_hides_an_acceptance_until_the_lag_has_passed() {
    let sms = StandIn::start(Kind::Sms).await;
    let client = client();
    let lag = Duration::from_millis(300);
    sms.set_query_lag(lag);

    let sent = send(&client, &sms, "r1").await.expect("answered");
    assert_eq!(sent.status(), StatusCode::OK);
    let accepted_at = std::time::Instant::now();
    // The send is real at once, whatever the query says.
    assert_eq!(sms.sends_for("r1"), 1);

    let early = sms_query(&client, &sms, "r1").await;
    assert_eq!(json_body(early).await, json!({"found": 0, "id": null}));
    assert!(accepted_at.elapsed() < lag, "the early query must have been made inside the lag");

    tokio::time::sleep(lag).await;
    let late = sms_query(&client, &sms, "r1").await;
    assert_eq!(json_body(late).await, json!({"found": 1, "id": "sms-000001"}));

    // A second acceptance is again hidden for the lag while the first stays visible.
    send(&client, &sms, "r1").await.expect("answered");
    let partial = sms_query(&client, &sms, "r1").await;
    assert_eq!(json_body(partial).await, json!({"found": 1, "id": "sms-000001"}));
    assert_eq!(sms.sends_for("r1"), 2);

    // Back to zero lag: everything is visible at once.
    sms.set_query_lag(Duration::ZERO);
    let all = sms_query(&client, &sms, "r1").await;
    assert_eq!(json_body(all).await, json!({"found": 2, "id": "sms-000002"}));
}

#[tokio::test]
async fn sms_timeout_after_acceptance_is_found_by_query() {
    // Reference case T2 as the stand-in sees it: the query finds the one send.
    let sms = StandIn::start(Kind::Sms).await;
    sms.script(Script::Delay(Duration::from_secs(2)));

    let timed_out = send(&impatient_client(), &sms, "r1").await;
    assert!(timed_out.expect_err("client times out").is_timeout());

    let found = sms_query(&client(), &sms, "r1").await;
    assert_eq!(json_body(found).await, json!({"found": 1, "id": "sms-000001"}));
    assert_eq!(sms.sends(), 1);
}

// ---------------------------------------------------------------- miaotixing

#[tokio::test]
async fn miaotixing_answers_plain_text_and_counts_per_code() {
    let miao = StandIn::start(Kind::Miaotixing).await;
    let client = client();

    for (code, text) in [("tA1b2C3", "first"), ("tA1b2C3", "second"), ("tZ9y8X7", "other")] {
        let response = client
            .post(format!("{}/trigger", miao.base_url()))
            .form(&[("id", code), ("text", text)])
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers()["content-type"].to_str().expect("ascii").starts_with("text/plain"));
        assert_eq!(response.text().await.expect("body"), MIAO_OK);
    }
    assert_eq!(miao.sends(), 3);
    assert_eq!(miao.sends_to("tA1b2C3"), 2);
    assert_eq!(miao.sends_to("tZ9y8X7"), 1);
    assert_eq!(miao.texts_to("tA1b2C3"), ["first", "second"]);
    assert_eq!(miao.sends_for("tA1b2C3"), 0, "no ref on the Miaotixing wire");

    let times = miao.request_times();
    assert_eq!(times.len(), 3);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    let accepted: Vec<_> = miao.messages().iter().map(|m| m.instant).collect();
    assert!(accepted.windows(2).all(|w| w[0] <= w[1]));
}

#[tokio::test]
async fn miaotixing_malformed_requests_get_the_parameter_error_without_a_send() {
    let miao = StandIn::start(Kind::Miaotixing).await;
    let client = client();
    let url = format!("{}/trigger", miao.base_url());
    // A scripted step must survive malformed requests: they consume none.
    miao.script(Script::Garbage);

    let malformed = [
        client.post(&url).form(&[("text", "no id")]),
        client.post(&url).form(&[("id", "  "), ("text", "blank id")]),
        client.post(&url).json(&json!({"id": "tA1b2C3", "text": "json"})),
    ];
    for request in malformed {
        let response = request.send().await.expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.text().await.expect("body"), MIAO_BAD_PARAMS);
    }
    assert_eq!(miao.requests(), 3);
    assert_eq!(miao.sends(), 0);
    assert_eq!(miao.pending_scripts(), 1);
}

#[tokio::test]
async fn miaotixing_refusal_texts_and_500_record_nothing() {
    let miao = StandIn::start(Kind::Miaotixing).await;
    let client = client();
    miao.script_all([Script::text(200, MIAO_NOT_FOUND), Script::text(200, MIAO_BAD_PARAMS), Script::status(500)]);

    for (status, body) in [
        (StatusCode::OK, MIAO_NOT_FOUND),
        (StatusCode::OK, MIAO_BAD_PARAMS),
        (StatusCode::INTERNAL_SERVER_ERROR, MIAO_SERVICE_FAILED),
    ] {
        let response = send(&client, &miao, "tA1b2C3").await.expect("answered");
        assert_eq!(response.status(), status);
        assert_eq!(response.text().await.expect("body"), body);
    }
    assert_eq!(miao.requests_to("tA1b2C3"), 3);
    assert_eq!(miao.sends(), 0);
}

#[tokio::test]
async fn miaotixing_one_recipient_fails_while_another_succeeds() {
    let miao = StandIn::start(Kind::Miaotixing).await;
    let client = client();
    miao.script_for("codeAAA", Script::text(200, MIAO_NOT_FOUND));

    let b = send(&client, &miao, "codeBBB").await.expect("answered");
    assert_eq!(b.text().await.expect("body"), MIAO_OK);
    let a = send(&client, &miao, "codeAAA").await.expect("answered");
    assert_eq!(a.text().await.expect("body"), MIAO_NOT_FOUND);
    let a_again = send(&client, &miao, "codeAAA").await.expect("answered");
    assert_eq!(a_again.text().await.expect("body"), MIAO_OK);

    assert_eq!(miao.sends_to("codeAAA"), 1);
    assert_eq!(miao.sends_to("codeBBB"), 1);
}

// ---------------------------------------------------------------- every kind

#[tokio::test]
async fn refusals_are_answered_before_acceptance_and_a_retry_then_succeeds() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        let client = client();
        standin.script_all([
            Script::status(503),
            Script::status(400),
            Script::retry_after(429, 7),
            Script::text(422, "custom refusal"),
        ]);

        let unavailable = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE, "{kind:?}");
        let bad = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "{kind:?}");
        let limited = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS, "{kind:?}");
        assert_eq!(limited.headers()["retry-after"], "7", "{kind:?}");
        let custom = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(custom.status(), StatusCode::UNPROCESSABLE_ENTITY, "{kind:?}");
        assert_eq!(custom.text().await.expect("body"), "custom refusal");

        assert_eq!(standin.requests(), 4, "{kind:?}");
        assert_eq!(standin.sends(), 0, "{kind:?}: refusals record nothing");
        assert!(standin.messages().is_empty(), "{kind:?}");

        let ok = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(ok.status(), StatusCode::OK, "{kind:?}");
        assert_eq!(sends_for_key(&standin, "k1"), 1, "{kind:?}");
        standin.shutdown().await;
    }
}

#[tokio::test]
async fn json_refusals_have_a_json_error_body() {
    for kind in [Kind::Push, Kind::Sms] {
        let standin = StandIn::start(kind).await;
        standin.script(Script::status(503));
        let response = send(&client(), &standin, "k1").await.expect("answered");
        assert_eq!(json_body(response).await, json!({"error": "Service Unavailable"}));
    }
}

#[tokio::test]
async fn delay_accepts_first_so_a_timed_out_client_still_made_a_send() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        standin.script(Script::Delay(Duration::from_millis(600)));

        let result = send(&impatient_client(), &standin, "k1").await;
        assert!(result.expect_err("client times out").is_timeout(), "{kind:?}");
        assert_eq!(standin.sends(), 1, "{kind:?}");
        assert_eq!(sends_for_key(&standin, "k1"), 1, "{kind:?}");

        // A patient client gets the normal answer after the delay.
        standin.script(Script::Delay(Duration::from_millis(50)));
        let patient = send(&client(), &standin, "k2").await.expect("answered");
        assert_eq!(patient.status(), StatusCode::OK, "{kind:?}");
        assert_eq!(standin.sends(), 2, "{kind:?}");
    }
}

#[tokio::test]
async fn hang_after_accept_never_answers_but_counts_the_send() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        standin.script(Script::HangAfterAccept);

        let result = send(&impatient_client(), &standin, "k1").await;
        assert!(result.expect_err("client times out").is_timeout(), "{kind:?}");
        assert_eq!(standin.requests(), 1, "{kind:?}");
        assert_eq!(standin.sends(), 1, "{kind:?}");
        assert_eq!(sends_for_key(&standin, "k1"), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn drop_before_accept_is_a_connection_error_and_no_send() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        let client = client();
        standin.script(Script::DropBeforeAccept);

        assert_connection_error(send(&client, &standin, "k1").await);
        assert_eq!(standin.requests(), 1, "{kind:?}: the client must not retry by itself");
        assert_eq!(standin.sends(), 0, "{kind:?}");

        // The stand-in keeps serving; the client just needs a new connection.
        let next = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(next.status(), StatusCode::OK, "{kind:?}");
        assert_eq!(standin.sends(), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn drop_after_accept_is_a_connection_error_after_a_send() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        let client = client();
        // Warm up a pooled connection so the drop also works on a reused one.
        send(&client, &standin, "warm").await.expect("answered");
        standin.script(Script::DropAfterAccept);

        assert_connection_error(send(&client, &standin, "k1").await);
        assert_eq!(standin.requests(), 2, "{kind:?}");
        assert_eq!(sends_for_key(&standin, "k1"), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn garbage_accepts_and_answers_an_unparseable_body() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        standin.script(Script::Garbage);

        let response = send(&client(), &standin, "k1").await.expect("answered");
        assert_eq!(response.status(), StatusCode::OK, "{kind:?}");
        let body = response.text().await.expect("body");
        assert_eq!(body, GARBAGE_BODY);
        assert!(body.parse::<Value>().is_err());
        assert_ne!(body.trim(), MIAO_OK);
        assert_eq!(sends_for_key(&standin, "k1"), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn steps_scripted_for_one_key_leave_others_alone() {
    for kind in ALL_KINDS {
        let standin = StandIn::start(kind).await;
        let client = client();
        standin.script_for("k1", Script::status(503));
        standin.script(Script::status(400));

        let other = send(&client, &standin, "k2").await.expect("answered");
        assert_eq!(other.status(), StatusCode::BAD_REQUEST, "{kind:?}: global queue");
        let own = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(own.status(), StatusCode::SERVICE_UNAVAILABLE, "{kind:?}: keyed queue");
        let normal = send(&client, &standin, "k1").await.expect("answered");
        assert_eq!(normal.status(), StatusCode::OK, "{kind:?}: both queues empty");
        assert_eq!(standin.sends(), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn concurrent_sends_are_all_counted() {
    let sms = StandIn::start(Kind::Sms).await;
    let client = client();
    let requests = (0..50).map(|i| {
        let client = client.clone();
        let url = format!("{}/messages", sms.base_url());
        async move {
            client
                .post(url)
                .json(&json!({"ref": format!("r{}", i % 5), "to": "d", "text": "t"}))
                .send()
                .await
                .expect("answered")
                .status()
        }
    });
    let handles: Vec<_> = requests.map(tokio::spawn).collect();
    for handle in handles {
        assert_eq!(handle.await.expect("task"), StatusCode::OK);
    }
    assert_eq!(sms.sends(), 50);
    assert!((0..5).all(|i| sms.sends_for(&format!("r{i}")) == 10));
}

#[tokio::test]
async fn shutdown_closes_hung_connections_and_stops_listening() {
    let push = StandIn::start(Kind::Push).await;
    let base = push.base_url();
    push.script(Script::HangAfterAccept);

    let client = client();
    let pending = {
        let client = client.clone();
        let base = base.clone();
        tokio::spawn(async move {
            client
                .post(format!("{base}/send"))
                .header("Idempotency-Key", "ntf-r1")
                .json(&json!({"ref": "r1", "to": "d", "text": "t", "ttl_seconds": 1}))
                .send()
                .await
        })
    };
    eventually("the hung send is accepted", || push.sends() == 1).await;
    push.shutdown().await;

    let result = tokio::time::timeout(Duration::from_secs(2), pending)
        .await
        .expect("shutdown ended the hung request")
        .expect("task");
    assert!(result.is_err(), "a hung request gets no answer");

    let after = client.get(format!("{base}/messages")).send().await;
    assert!(after.expect_err("nobody listens").is_connect());
}

#[tokio::test]
async fn dropping_the_handle_stops_the_server() {
    let sms = StandIn::start(Kind::Sms).await;
    let addr = sms.addr();
    drop(sms);

    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "the port is released after drop");
}

#[tokio::test]
async fn received_messages_never_show_the_destination_in_debug_output() {
    let push = StandIn::start(Kind::Push).await;
    send(&client(), &push, "r1").await.expect("answered");
    let messages = push.messages();
    assert_eq!(messages[0].to, "dest-secret");
    let printed = format!("{messages:?}");
    assert!(!printed.contains("dest-secret"), "{printed}");
    assert!(printed.contains("<redacted>"));
}

// ---------------------------------------------------------------- chaos mode

/// Chaos weights with every behaviour off; tests switch on the ones they look at.
fn quiet_chaos(seed: u64) -> Chaos {
    Chaos {
        seed,
        accept: 0,
        hang: 0,
        hang_for: Duration::from_millis(400),
        unavailable: 0,
        too_many: 0,
        gone: 0,
        drop_before: 0,
        drop_after: 0,
        garbage: 0,
        query_ok: 1,
        query_fail: 0,
    }
}

#[tokio::test]
async fn chaos_refusals_record_nothing_and_acceptances_count_before_misbehaving() {
    let sms = StandIn::start(Kind::Sms).await;
    let client = impatient_client();

    sms.set_chaos(Some(Chaos { unavailable: 1, too_many: 1, drop_before: 1, ..quiet_chaos(7) }));
    for i in 0..12 {
        let answer = send(&client, &sms, &format!("r{i}")).await;
        if let Ok(response) = answer {
            assert!(matches!(response.status().as_u16(), 429 | 503), "a refusal, got {}", response.status());
        }
    }
    assert_eq!(sms.requests(), 12);
    assert_eq!(sms.sends(), 0, "refusals are answered before anything is recorded");

    sms.set_chaos(Some(Chaos { hang: 1, drop_after: 1, garbage: 1, ..quiet_chaos(8) }));
    for i in 0..9 {
        let answer = send(&client, &sms, &format!("a{i}")).await;
        if let Ok(response) = answer {
            assert_eq!(response.text().await.expect("body"), GARBAGE_BODY);
        }
    }
    eventually("every misbehaving acceptance recorded", || sms.sends() == 9).await;
    let draws: u64 = sms.chaos_draws().iter().map(|(_, n)| n).sum();
    assert_eq!(draws, 9);

    // A scripted step still wins over a draw.
    sms.script(Script::Ok);
    let scripted = send(&client, &sms, "scripted").await.expect("answered");
    assert_eq!(scripted.status(), StatusCode::OK);
    assert_eq!(sms.sends_for("scripted"), 1);
    sms.shutdown().await;
}

#[tokio::test]
async fn chaos_query_failures_and_seeded_draws_repeat() {
    let sms = StandIn::start(Kind::Sms).await;
    sms.set_chaos(Some(Chaos { accept: 1, query_ok: 0, query_fail: 1, ..quiet_chaos(1) }));
    send(&client(), &sms, "r1").await.expect("answered");
    let failed = sms_query(&client(), &sms, "r1").await;
    assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
    sms.set_chaos(None);
    let found = sms_query(&client(), &sms, "r1").await;
    assert_eq!(json_body(found).await, json!({"found": 1, "id": "sms-000001"}));

    // The same seed draws the same sequence.
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let push = StandIn::start(Kind::Push).await;
        push.set_chaos(Some(Chaos::mixed(42, Duration::from_millis(400))));
        let client = impatient_client();
        for i in 0..20 {
            let _ = send(&client, &push, &format!("k{i}")).await;
        }
        outcomes.push(push.chaos_draws());
        push.shutdown().await;
    }
    assert_eq!(outcomes[0], outcomes[1]);
}
