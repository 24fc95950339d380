//! Orchestration tests of the API over mocks of the ports: validation, authentication and problem
//! documents. A request refused with a 4xx must not reach a store, which the `.times(0)` expectations
//! prove. Behaviour against a real PostgreSQL lives in the workspace's `tests/`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use herald_domain::{ChannelName, Millis, NotificationId, NotificationRef, TaskId, TaskState, Timestamp, UserId};
use herald_ports::channel::MockChannelRegistry;
use herald_ports::cipher::MockDestinationCipher;
use herald_ports::clock::MockClock;
use herald_ports::prefs::MockPreferenceStore;
use herald_ports::store::{
    MockDeliveryStore, MockEgressStore, MockInboxStore, MockReadModels, MockReviewStore, MockSubmissionStore,
};
use herald_ports::{ChannelPref, ChannelTable, Created, InboxChannel, ResolveError, StoreError, TaskSummary};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::*;
use crate::router::router;
use crate::state::{ApiState, ClockReadiness, ConsoleSettings};
use herald_core::auth::Authenticator;
use herald_ports::Clock;

const SERVICE: &str = "service-token-for-tests";
const ADMIN: &str = "admin-token-for-tests";

use herald_core::testing::webhook_rules as rules;

/// The mocks a test configures before the router is built.
#[derive(Default)]
struct Mocks {
    submissions: MockSubmissionStore,
    review: MockReviewStore,
    inbox: MockInboxStore,
    reads: MockReadModels,
    prefs: MockPreferenceStore,
    lifecycle: herald_ports::store::MockLifecycleStore,
    cipher: MockDestinationCipher,
    clock: MockClock,
}

impl Mocks {
    /// Every store, preference, cipher and clock call is refused: for requests that must write nothing.
    fn untouched() -> Self {
        let mut m = Mocks::default();
        m.submissions.expect_create().times(0);
        m.review.expect_resolve_manually().times(0);
        m.reads.expect_notification().times(0);
        m.inbox.expect_inbox().times(0);
        m.review.expect_parked().times(0);
        m.prefs.expect_put().times(0);
        m.prefs.expect_get().times(0);
        m.cipher.expect_encrypt().times(0);
        m.clock.expect_now().times(0);
        m
    }

    fn with_clock(mut self) -> Self {
        self.clock.expect_now().returning(|| Ok(Timestamp(1_700_000_000_000)));
        self
    }

    fn state(self) -> ApiState {
        let auth = Authenticator::new(
            &[SecretString::from(SERVICE)],
            &[SecretString::from(ADMIN)],
            SecretString::from("user token secret for the tests"),
        );
        let clock: Arc<dyn Clock> = Arc::new(self.clock);
        let services = herald_core::Services {
            submissions: Arc::new(self.submissions),
            delivery: Arc::new(MockDeliveryStore::new()),
            egress: Arc::new(MockEgressStore::new()),
            review: Arc::new(self.review),
            inbox: Arc::new(self.inbox),
            reads: Arc::new(self.reads),
            lifecycle: Arc::new(self.lifecycle),
            prefs: Arc::new(self.prefs),
            sessions: Arc::new(herald_ports::sessions::MockSessionStore::new()),
            status: Arc::new(herald_ports::status::MockStatusEventStore::new()),
            audit: Arc::new(herald_ports::audit::MockAuditStore::new()),
            registry: Arc::new(webhook_registry()),
            cipher: Arc::new(self.cipher),
            clock: Arc::clone(&clock),
            channels: Arc::new(ChannelTable(vec![(ChannelName::new("push"), rules())])),
            test_send_quota: herald_domain::TestSendQuota::default(),
            oidc: None,
            user_keys: None,
        };
        ApiState {
            services,
            auth: Arc::new(auth),
            console: ConsoleSettings::default(),
            readiness: Arc::new(ClockReadiness(clock)),
            metrics: None,
            body_limit: 4096,
        }
    }
}

/// The API asks the configured channel to check a destination before storing it: `push` takes any text
/// (as a webhook channel does).
fn webhook_registry() -> MockChannelRegistry {
    let mut registry = MockChannelRegistry::new();
    registry.expect_get().returning(|name| {
        let mut push = herald_ports::channel::MockChannel::new();
        push.expect_check_destination().returning(|_| Ok(()));
        (name.as_str() == "push").then(|| Arc::new(push) as Arc<dyn herald_ports::Channel>)
    });
    registry
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {}", self.text))
    }

    #[track_caller]
    fn problem(&self, status: StatusCode) -> Value {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.headers[header::CONTENT_TYPE], "application/problem+json");
        let doc = self.json();
        for member in ["type", "title", "status", "detail"] {
            assert!(doc.get(member).is_some(), "problem lacks `{member}`: {doc}");
        }
        assert_eq!(doc["status"], status.as_u16());
        doc
    }

    #[track_caller]
    fn fields(&self) -> Vec<String> {
        let doc = self.problem(StatusCode::UNPROCESSABLE_ENTITY);
        doc["errors"].as_array().expect("errors").iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect()
    }
}

fn user_token(state: &ApiState, user: &str) -> String {
    state.auth.user_token(user).expose_secret().to_owned()
}

async fn send(state: ApiState, method: &str, uri: &str, token: Option<&str>, body: Option<&str>) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let body = match body {
        Some(body) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(body.to_owned())
        }
        None => Body::empty(),
    };
    let response = router(state).oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    Answer { status, headers, text: String::from_utf8(bytes.to_vec()).unwrap() }
}

fn valid_submission() -> Value {
    json!({"user_id": "u1", "event_key": "order-1-shipped", "body": "Shipped", "ttl_seconds": 3600})
}

fn created(created: bool) -> Created {
    Created {
        notification_id: NotificationId(7),
        notification_ref: NotificationRef(uuid::Uuid::from_u128(7)),
        created,
        tasks: vec![TaskSummary {
            task_id: TaskId(70),
            reference: "ref-70".into(),
            channel: ChannelName::new("push"),
            state: TaskState::Pending,
        }],
        merged: Vec::new(),
        differs: Vec::new(),
    }
}

#[tokio::test]
async fn submit_creates_with_201_and_a_duplicate_answers_200() {
    for (is_new, status) in [(true, StatusCode::CREATED), (false, StatusCode::OK)] {
        let mut mocks = Mocks::default().with_clock();
        mocks
            .submissions
            .expect_create()
            .withf(|new, channels, _| {
                new.user_id == UserId::new("u1") && new.ttl == Millis(3_600_000) && channels.0.len() == 1
            })
            .times(1)
            .returning(move |_, _, _| Ok(created(is_new)));
        let answer =
            send(mocks.state(), "POST", "/v1/notifications", Some(SERVICE), Some(&valid_submission().to_string()))
                .await;
        assert_eq!(answer.status, status, "{}", answer.text);
        assert_eq!(
            answer.json(),
            json!({
                "notification_id": "00000000-0000-0000-0000-000000000007",
                "created": is_new,
                "tasks": [{"task_id": 70, "reference": "ref-70", "channel": "push", "state": "PENDING"}]
            })
        );
    }
}

#[tokio::test]
async fn missing_fields_are_all_named_and_nothing_is_written() {
    let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some("{}")).await;
    assert_eq!(answer.fields(), ["user_id", "event_key", "body", "ttl_seconds"]);
}

#[tokio::test]
async fn out_of_range_fields_are_refused() {
    let cases = [
        (json!({"user_id": "x".repeat(129)}), "user_id"),
        (json!({"user_id": ""}), "user_id"),
        (json!({"event_key": "k".repeat(257)}), "event_key"),
        (json!({"body": "b".repeat(16 * 1024 + 1)}), "body"),
        (json!({"ttl_seconds": 0}), "ttl_seconds"),
        (json!({"ttl_seconds": -5}), "ttl_seconds"),
        (json!({"ttl_seconds": 30 * 24 * 3600 + 1}), "ttl_seconds"),
        (json!({"max_attempts": 0}), "max_attempts"),
        (json!({"max_attempts": 21}), "max_attempts"),
        (json!({"thread_key": ""}), "thread_key"),
    ];
    for (patch, field) in cases {
        let mut body = valid_submission();
        body.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
        let mut state = Mocks::untouched().state();
        state.body_limit = 64 * 1024;
        let answer = send(state, "POST", "/v1/notifications", Some(SERVICE), Some(&body.to_string())).await;
        assert_eq!(answer.fields(), [field], "{patch}");
    }
}

#[tokio::test]
async fn limits_at_the_boundary_are_accepted() {
    let mut mocks = Mocks::default().with_clock();
    mocks.submissions.expect_create().times(1).returning(|_, _, _| Ok(created(true)));
    let body = json!({
        "user_id": "x".repeat(128), "event_key": "k".repeat(256), "body": "b".repeat(16 * 1024),
        "ttl_seconds": 30 * 24 * 3600, "max_attempts": 20, "thread_key": "t"
    });
    let mut state = mocks.state();
    state.body_limit = 64 * 1024;
    let answer = send(state, "POST", "/v1/notifications", Some(SERVICE), Some(&body.to_string())).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
}

#[tokio::test]
async fn wrong_json_is_a_problem_document_not_plain_text() {
    let answer =
        send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some("{\"user_id\":")).await;
    answer.problem(StatusCode::BAD_REQUEST);

    let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some("[1,2]")).await;
    assert_eq!(answer.fields(), ["$"]);

    let mut body = valid_submission();
    body["ttl_seconds"] = json!("soon");
    let answer =
        send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(&body.to_string())).await;
    assert_eq!(answer.fields(), ["ttl_seconds"]);

    let mut body = valid_submission();
    body["ttl"] = json!(5);
    let answer =
        send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(&body.to_string())).await;
    assert_eq!(answer.fields(), ["ttl"]);

    let answer =
        send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some("{} trailing")).await;
    answer.problem(StatusCode::BAD_REQUEST);
}

/// A misspelt field is answered with the near name it may have meant, in the problem document's entry for
/// that field, and nothing is written (the mocks expect no call).
#[tokio::test]
async fn an_unknown_field_near_a_known_one_suggests_it() {
    let body = r#"{"userid":"alice","event_key":"e1","body":"Hello","ttl_seconds":60}"#;
    let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(body)).await;
    let doc = answer.problem(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(doc["errors"], json!([{"field": "userid", "message": "is not a known field; did you mean `user_id`?"}]));

    let body = r#"{"user_id":"alice","event_key":"e1","body":"Hello","ttl_seconds":60,"colour":"red"}"#;
    let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(body)).await;
    let doc = answer.problem(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(doc["errors"], json!([{"field": "colour", "message": "is not a known field"}]));
}

#[tokio::test]
async fn a_body_that_is_not_json_is_unsupported() {
    let request = Request::post("/v1/notifications")
        .header(header::AUTHORIZATION, format!("Bearer {SERVICE}"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(valid_submission().to_string()))
        .unwrap();
    let response = router(Mocks::untouched().state()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
}

#[tokio::test]
async fn an_oversized_body_is_a_413_problem() {
    let body = json!({"user_id": "u1", "body": "b".repeat(5000)}).to_string();
    let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(&body)).await;
    let doc = answer.problem(StatusCode::PAYLOAD_TOO_LARGE);
    assert!(doc["detail"].as_str().unwrap().contains("4096"));
}

#[tokio::test]
async fn missing_or_wrong_tokens_are_401_with_a_bearer_challenge() {
    let body = valid_submission().to_string();
    for token in [None, Some("not-a-token"), Some("u.dTE.AAAA")] {
        let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", token, Some(&body)).await;
        answer.problem(StatusCode::UNAUTHORIZED);
        assert_eq!(answer.headers[header::WWW_AUTHENTICATE], "Bearer");
        assert!(!answer.text.contains("not-a-token"));
    }
    // A non-bearer scheme is refused the same way.
    let request = Request::post("/v1/notifications")
        .header(header::AUTHORIZATION, format!("Basic {SERVICE}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router(Mocks::untouched().state()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn roles_are_enforced_before_the_body_is_read() {
    let state = Mocks::untouched().state();
    let alice = user_token(&state, "alice");
    // Admin and user tokens may not submit, even with an invalid body.
    for token in [ADMIN, alice.as_str()] {
        let answer = send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(token), Some("{")).await;
        answer.problem(StatusCode::FORBIDDEN);
        let answer = send(Mocks::untouched().state(), "POST", "/v1/events", Some(token), Some("{}")).await;
        answer.problem(StatusCode::FORBIDDEN);
    }
    // Service and user tokens may not review or resolve.
    for token in [SERVICE, alice.as_str()] {
        send(Mocks::untouched().state(), "GET", "/v1/review", Some(token), None).await.problem(StatusCode::FORBIDDEN);
        send(Mocks::untouched().state(), "POST", "/v1/tasks/1/resolve", Some(token), Some("{}"))
            .await
            .problem(StatusCode::FORBIDDEN);
    }
}

#[tokio::test]
async fn a_user_token_reaches_only_its_own_user() {
    let state = Mocks::untouched().state();
    let alice = user_token(&state, "alice");
    let body = json!({"enabled": true, "destination": "alice@example.test"}).to_string();
    send(Mocks::untouched().state(), "PUT", "/v1/users/bob/channels/push", Some(&alice), Some(&body))
        .await
        .problem(StatusCode::FORBIDDEN);
    send(Mocks::untouched().state(), "GET", "/v1/users/bob/inbox", Some(&alice), None)
        .await
        .problem(StatusCode::FORBIDDEN);
    send(Mocks::untouched().state(), "GET", "/v1/users/bob/inbox", Some(SERVICE), None)
        .await
        .problem(StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_user_token_sees_only_its_own_notification() {
    let mut mocks = Mocks::default();
    let five = NotificationRef(uuid::Uuid::from_u128(5));
    mocks.reads.expect_notification_by_ref().returning(move |r| Ok((r == five).then_some(NotificationId(5))));
    mocks.reads.expect_notification().returning(|id| {
        Ok(Some(herald_ports::NotificationView {
            notification_id: id,
            notification_ref: NotificationRef(uuid::Uuid::from_u128(5)),
            user_id: UserId::new("bob"),
            event_key: "e".into(),
            body: "secret body".into(),
            thread_key: None,
            created_at: Timestamp(0),
            expires_at: Timestamp(1000),
            tasks: vec![],
        }))
    });
    let state = mocks.state();
    let alice = user_token(&state, "alice");
    let bob = user_token(&state, "bob");
    let path = format!("/v1/notifications/{five}");
    send(state.clone(), "GET", &path, Some(&alice), None).await.problem(StatusCode::NOT_FOUND);
    // The serial id, or any text not in the opaque form, names nothing.
    send(state.clone(), "GET", "/v1/notifications/5", Some(&bob), None).await.problem(StatusCode::NOT_FOUND);
    let other = format!("/v1/notifications/{}", NotificationRef(uuid::Uuid::from_u128(6)));
    send(state.clone(), "GET", &other, Some(&bob), None).await.problem(StatusCode::NOT_FOUND);
    let answer = send(state, "GET", &path, Some(&bob), None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["created_at"], "1970-01-01T00:00:00.000Z");
    assert_eq!(answer.json()["notification_id"], five.to_string(), "the opaque id, never the serial");
}

#[tokio::test]
async fn events_validate_recipients_without_writing() {
    let base = json!({"event_key": "e1", "body": "hello", "ttl_seconds": 60});
    let cases = [
        (json!({"recipients": []}), vec!["recipients"]),
        (json!({"recipients": vec!["u"; 1001]}), vec!["recipients"]),
        (json!({"recipients": ["a", "", "a"]}), vec!["recipients[1]", "recipients[2]"]),
        (json!({"recipients": ["a", "x".repeat(129)]}), vec!["recipients[1]"]),
    ];
    for (patch, fields) in cases {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
        let mut state = Mocks::untouched().state();
        state.body_limit = 64 * 1024;
        let answer = send(state, "POST", "/v1/events", Some(SERVICE), Some(&body.to_string())).await;
        assert_eq!(answer.fields(), fields);
    }
}

#[tokio::test]
async fn events_create_one_notification_per_recipient() {
    let mut mocks = Mocks::default().with_clock();
    mocks.submissions.expect_submitted().times(1).returning(|_, _| Ok(Vec::new()));
    // One store call for the whole event.
    mocks
        .submissions
        .expect_create_event()
        .times(1)
        .returning(|news, _, _| Ok(news.iter().map(|new| created(new.user_id.as_str() != "b")).collect()));
    let body = json!({"event_key": "e1", "recipients": ["a", "b", "c"], "body": "hello", "ttl_seconds": 60});
    let answer = send(mocks.state(), "POST", "/v1/events", Some(SERVICE), Some(&body.to_string())).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    let doc = answer.json();
    let users: Vec<_> = doc["notifications"].as_array().unwrap().iter().map(|n| n["user_id"].clone()).collect();
    assert_eq!(users, [json!("a"), json!("b"), json!("c")]);
    assert_eq!(doc["notifications"][1]["created"], false);
}

#[tokio::test]
async fn preference_is_encrypted_and_never_answered() {
    let destination = "alice-secret-destination@example.test";
    let mut mocks = Mocks::default();
    mocks
        .cipher
        .expect_encrypt()
        .withf(move |user, channel, plain| {
            user.as_str() == "alice" && channel.as_str() == "push" && plain.expose_secret() == destination
        })
        .times(1)
        .returning(|_, _, _| Ok(b"ciphertext".to_vec()));
    // Nothing stored yet, so the destination is new, and no channel found it gone.
    mocks.prefs.expect_destination().times(1).returning(|_, _| Ok(None));
    mocks.prefs.expect_destination_expired().returning(|_, _| Ok(false));
    mocks
        .prefs
        .expect_put()
        .withf(|_, _, enabled, stored| *enabled && stored.as_deref() == Some(b"ciphertext".as_slice()))
        .times(1)
        .returning(|user, channel, enabled, _| {
            Ok(ChannelPref {
                user_id: user.clone(),
                channel: channel.clone(),
                enabled,
                has_destination: true,
                verified: false,
                version: 1,
            })
        });
    let state = mocks.state();
    let alice = user_token(&state, "alice");
    let body = json!({"enabled": true, "destination": destination}).to_string();
    let answer = send(state, "PUT", "/v1/users/alice/channels/push", Some(&alice), Some(&body)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert!(!answer.text.contains(destination));
    assert_eq!(answer.json()["has_destination"], true);
}

#[tokio::test]
async fn preference_validation_names_channel_and_destination() {
    let state = Mocks::untouched().state();
    let alice = user_token(&state, "alice");
    let body = json!({"enabled": true, "destination": "x"}).to_string();
    let answer = send(state, "PUT", "/v1/users/alice/channels/pager", Some(&alice), Some(&body)).await;
    assert_eq!(answer.fields(), ["channel"]);

    let answer =
        send(Mocks::untouched().state(), "PUT", "/v1/users/alice/channels/push", Some(ADMIN), Some("{}")).await;
    assert_eq!(answer.fields(), ["enabled"]);

    // A wrongly typed destination is refused without quoting it.
    let body = json!({"enabled": true, "destination": {"code": "hidden-code-123"}}).to_string();
    let answer =
        send(Mocks::untouched().state(), "PUT", "/v1/users/alice/channels/push", Some(ADMIN), Some(&body)).await;
    assert_eq!(answer.fields(), ["destination"]);
    assert!(!answer.text.contains("hidden-code-123"));
}

#[tokio::test]
async fn enabling_without_any_destination_is_a_conflict_with_what_is_stored() {
    let mut mocks = Mocks::default();
    mocks.prefs.expect_destination().times(1).returning(|_, _| Ok(None));
    mocks.prefs.expect_put().times(0);
    let body = json!({"enabled": true}).to_string();
    let answer = send(mocks.state(), "PUT", "/v1/users/alice/channels/push", Some(ADMIN), Some(&body)).await;
    // A schema-valid request refused for what is (not) stored is a 409 that names the field, not a 422.
    let doc = answer.problem(StatusCode::CONFLICT);
    assert_eq!(doc["errors"][0]["field"], "destination", "{doc}");
}

#[tokio::test]
async fn resolve_validates_and_maps_not_parked_to_409() {
    let answer = send(
        Mocks::untouched().state(),
        "POST",
        "/v1/tasks/9/resolve",
        Some(ADMIN),
        Some(&json!({"final_state": "DELIVERED", "note": ""}).to_string()),
    )
    .await;
    assert_eq!(answer.fields(), ["final_state", "note"]);

    let mut mocks = Mocks::default().with_clock();
    mocks
        .review
        .expect_resolve_manually()
        .times(1)
        .returning(|_, _, _, _, _| Err(ResolveError::NotParked { state: TaskState::Sent }));
    let body = json!({"final_state": "SENT", "note": "checked the provider console"}).to_string();
    let answer = send(mocks.state(), "POST", "/v1/tasks/9/resolve", Some(ADMIN), Some(&body)).await;
    let doc = answer.problem(StatusCode::CONFLICT);
    assert!(doc["detail"].as_str().unwrap().contains("nothing changed"));

    let mut mocks = Mocks::default().with_clock();
    mocks.review.expect_resolve_manually().returning(|_, _, _, _, _| Err(ResolveError::NotFound));
    send(mocks.state(), "POST", "/v1/tasks/9/resolve", Some(ADMIN), Some(&body)).await.problem(StatusCode::NOT_FOUND);

    send(Mocks::untouched().state(), "POST", "/v1/tasks/nine/resolve", Some(ADMIN), Some(&body))
        .await
        .problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn store_failures_are_opaque_500s() {
    let mut mocks = Mocks::default().with_clock();
    mocks
        .submissions
        .expect_create()
        .returning(|_, _, _| Err(StoreError::Unknown(anyhow::anyhow!("relation delivery_task password=hunter2"))));
    let answer =
        send(mocks.state(), "POST", "/v1/notifications", Some(SERVICE), Some(&valid_submission().to_string())).await;
    answer.problem(StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!answer.text.contains("hunter2") && !answer.text.contains("delivery_task"));

    let mut mocks = Mocks::default().with_clock();
    mocks.submissions.expect_create().returning(|_, _, _| Err(StoreError::Unavailable(anyhow::anyhow!("refused"))));
    let answer =
        send(mocks.state(), "POST", "/v1/notifications", Some(SERVICE), Some(&valid_submission().to_string())).await;
    answer.problem(StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn inbox_words_and_in_app_only() {
    let mut mocks = Mocks::default();
    // An erased user's inbox answers 410; alice is not erased.
    mocks.lifecycle.expect_erasure().times(1).returning(|_| Ok(None));
    // The default page is 50 items; the page is read one past it, to know whether a next one exists.
    mocks.inbox.expect_inbox_page().times(1).returning(|_, cursor, limit| {
        assert_eq!((cursor, limit), (None, 51));
        Ok(vec![
            herald_ports::InboxItem {
                notification_id: NotificationId(2),
                notification_ref: NotificationRef(uuid::Uuid::from_u128(2)),
                body: "two".into(),
                created_at: Timestamp(2000),
                read_at: None,
                channels: vec![InboxChannel {
                    channel: ChannelName::new("push"),
                    state: TaskState::Sent,
                    needs_review: false,
                    in_digest: false,
                    last_outcome: Some(herald_domain::Outcome::Accepted),
                    attempt_count: 1,
                    note: None,
                    destination_gone: false,
                }],
            },
            herald_ports::InboxItem {
                notification_id: NotificationId(1),
                notification_ref: NotificationRef(uuid::Uuid::from_u128(1)),
                body: "one".into(),
                created_at: Timestamp(1000),
                read_at: None,
                channels: vec![],
            },
        ])
    });
    let answer = send(mocks.state(), "GET", "/v1/users/alice/inbox", Some(ADMIN), None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let doc = answer.json();
    assert_eq!(doc["items"][0]["channels"][0]["status_text"], "accepted by channel");
    assert_eq!(doc["items"][1]["status_text"], "in-app only");
    assert!(!answer.text.contains("delivered"));
}

#[test]
fn status_texts() {
    use herald_domain::Outcome;
    let ch = |state, needs_review, in_digest, last_outcome, attempt_count| InboxChannel {
        channel: "push".into(),
        state,
        needs_review,
        in_digest,
        last_outcome,
        attempt_count,
        note: None,
        destination_gone: false,
    };
    let cases = [
        (ch(TaskState::Sent, false, false, Some(Outcome::Accepted), 1), "accepted by channel"),
        (ch(TaskState::Suppressed, false, false, Some(Outcome::PrefDisabled), 0), "not sent: channel off"),
        (ch(TaskState::Failed, false, false, Some(Outcome::Rejected), 1), "failed"),
        (ch(TaskState::Failed, false, false, Some(Outcome::TtlExpired), 0), "expired"),
        (ch(TaskState::Unknown, true, false, Some(Outcome::Timeout), 1), "outcome unknown — under review"),
        (ch(TaskState::Unknown, false, false, Some(Outcome::Timeout), 1), "waiting to retry"),
        (ch(TaskState::Pending, false, false, Some(Outcome::RetryableReject), 1), "waiting to retry"),
        (ch(TaskState::Pending, false, false, None, 0), "sending"),
        (ch(TaskState::Sending, false, false, None, 1), "sending"),
        (ch(TaskState::Pending, false, true, None, 0), "merged into a digest"),
    ];
    for (channel, text) in cases {
        assert_eq!(routes::status_text(&channel), text, "{channel:?}");
    }
    let gone =
        InboxChannel { destination_gone: true, ..ch(TaskState::Failed, false, false, Some(Outcome::Rejected), 1) };
    assert_eq!(routes::status_text(&gone), "not sent: subscription expired");
}

#[tokio::test]
async fn operations_endpoints_and_request_ids() {
    let answer = send(Mocks::default().state(), "GET", "/healthz", None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.headers.get("x-request-id").is_some(), "a request id is generated");

    let request = Request::get("/healthz").header("x-request-id", "req-123").body(Body::empty()).unwrap();
    let response = router(Mocks::default().state()).oneshot(request).await.unwrap();
    assert_eq!(response.headers()["x-request-id"], "req-123");

    let answer = send(Mocks::default().with_clock().state(), "GET", "/readyz", None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    let mut mocks = Mocks::default();
    mocks.clock.expect_now().returning(|| Err(StoreError::Unavailable(anyhow::anyhow!("down"))));
    send(mocks.state(), "GET", "/readyz", None, None).await.problem(StatusCode::SERVICE_UNAVAILABLE);

    send(Mocks::default().state(), "GET", "/nowhere", None, None).await.problem(StatusCode::NOT_FOUND);
    send(Mocks::default().state(), "DELETE", "/healthz", None, None).await.problem(StatusCode::METHOD_NOT_ALLOWED);

    // On the API listener, a scrape needs a metrics or an admin token.
    send(Mocks::default().state(), "GET", "/metrics", None, None).await.problem(StatusCode::UNAUTHORIZED);
    send(Mocks::default().state(), "GET", "/metrics", Some(SERVICE), None).await.problem(StatusCode::UNAUTHORIZED);
    let answer = send(Mocks::default().state(), "GET", "/metrics", Some(ADMIN), None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["x-content-type-options"], "nosniff", "every answer says nosniff");
}

#[tokio::test]
async fn metrics_render_recorded_counters() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        herald_core::metrics::record_attempt(&ChannelName::new("push"), herald_domain::Outcome::Accepted);
    });
    let mut state = Mocks::default().state();
    state.metrics = Some(handle);
    let answer = send(state, "GET", "/metrics", Some(ADMIN), None).await;
    assert!(answer.text.contains("herald_attempts_total{channel=\"push\",outcome=\"ACCEPTED\"} 1"), "{}", answer.text);
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let answer = send(Mocks::default().state(), "GET", "/openapi.json", None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = answer.json();
    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        "/v1/notifications",
        "/v1/events",
        "/v1/notifications/{id}",
        "/v1/users/{user_id}/channels/{channel}",
        "/v1/users/{user_id}/inbox",
        "/v1/users/{user_id}/inbox/{notification_id}/read",
        "/v1/users/{user_id}/sign-in-links",
        "/v1/review",
        "/v1/tasks/{task_id}/resolve",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let required = doc["components"]["schemas"]["SubmitNotification"]["required"].as_array().expect("required");
    assert!(required.contains(&json!("user_id")));
}

#[tokio::test]
async fn the_served_document_states_the_user_id_rule_the_channels_and_every_problem_status() {
    let answer = send(Mocks::default().state(), "GET", "/openapi.json", None, None).await;
    let doc = answer.json();
    let put = &doc["paths"]["/v1/users/{user_id}/channels/{channel}"]["put"];
    let param = |name: &str| put["parameters"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap();
    assert_eq!(param("user_id")["schema"]["pattern"], herald_domain::ids::USER_ID_PATTERN);
    assert_eq!(param("channel")["schema"]["enum"], serde_json::json!(["push"]), "the configured channels");
    for status in ["400", "401", "403", "404", "413", "415", "422", "429", "503"] {
        assert!(put["responses"].get(status).is_some(), "PUT preference lacks {status}");
    }
    let get = &doc["paths"]["/v1/review"]["get"];
    let limit = get["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "limit").cloned().unwrap();
    assert_eq!((limit["in"].as_str(), limit["schema"]["minimum"].as_i64()), (Some("query"), Some(1)));
    let event = &doc["components"]["schemas"]["SubmitEvent"]["properties"]["recipients"];
    assert_eq!(event["items"]["pattern"], herald_domain::ids::USER_ID_PATTERN);
    assert_eq!(event["uniqueItems"], true);
    let submit = &doc["components"]["schemas"]["SubmitNotification"]["properties"];
    assert!(submit["body"]["pattern"].is_string() && submit["event_key"]["maxLength"] == 256, "{submit}");
}

#[tokio::test]
async fn a_whole_number_written_with_a_zero_fraction_is_a_whole_number() {
    let mut mocks = Mocks::default().with_clock();
    mocks.submissions.expect_create().times(1).returning(|new, _, _| {
        assert_eq!((new.ttl, new.max_attempts), (herald_domain::Millis::from_secs(3600), Some(3)));
        Ok(created(true))
    });
    let body =
        serde_json::json!({"user_id": "u1", "event_key": "k", "body": "b", "ttl_seconds": 3600.0, "max_attempts": 3.0});
    let answer = send(mocks.state(), "POST", "/v1/notifications", Some(SERVICE), Some(&body.to_string())).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    let half = serde_json::json!({"user_id": "u1", "event_key": "k", "body": "b", "ttl_seconds": 1.5});
    let answer =
        send(Mocks::untouched().state(), "POST", "/v1/notifications", Some(SERVICE), Some(&half.to_string())).await;
    assert!(answer.text.contains("ttl_seconds"), "{}", answer.text);
    assert!(answer.status.is_client_error());
}

#[test]
fn a_cursor_returns_the_position_it_was_made_from_and_only_on_its_own_list() {
    use super::model::{cursor, cursor_pattern, PageQuery};
    let page = |text: String| PageQuery { limit: None, cursor: Some(text) };
    for (at, id) in [(0, 1), (1_733_230_000_123, 42), (999_999_999_999_999, 999_999_999_999_999_999)] {
        assert_eq!(page(cursor("review", at, id)).position("review").unwrap(), Some((at, id)));
        assert!(page(cursor("review", at, id)).inbox_position().is_err(), "a review cursor is not an inbox cursor");
        // The inbox's cursor names its notification by the opaque id, never by the serial.
        let notification = NotificationRef(uuid::Uuid::from_u128(u128::from(id.unsigned_abs()) << 64 | 0xabc));
        let inbox = cursor("inbox", at, notification);
        assert_eq!(page(inbox.clone()).inbox_position().unwrap(), Some((at, notification)));
        assert!(!inbox.ends_with(&format!(".{id}")), "{inbox}");
        assert!(page(inbox).position("review").is_err(), "an inbox cursor is not a review cursor");
        assert!(page(cursor("inbox", at, id)).inbox_position().is_err(), "a serial is no inbox position");
    }
    assert_eq!(
        cursor_pattern("inbox"),
        r"^i[0-9]{1,15}\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    );
    assert_eq!(cursor_pattern("review"), r"^r[0-9]{1,15}\.[0-9]{1,18}$");
}
