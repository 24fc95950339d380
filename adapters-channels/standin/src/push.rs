//! The push (webhook) stand-in: IDEMPOTENT by `Idempotency-Key`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::server::{Arrived, ConnectionAbort};
use super::state::{Incoming, Shared};
use super::{bad_request, run_send};

/// `POST /send` body (§12).
#[derive(Deserialize)]
struct SendBody {
    #[serde(rename = "ref")]
    reference: String,
    to: String,
    text: String,
    /// Optional here so the stand-in records what the adapter sent instead of refusing it;
    /// tests assert its value through [`Received::ttl_seconds`](super::Received::ttl_seconds).
    #[serde(default)]
    ttl_seconds: Option<u64>,
}

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().route("/send", post(send)).route("/messages", get(no_query)).with_state(shared)
}

/// A webhook that promises idempotency needs the key: a request without it is a client bug
/// (400), not a send, so an adapter that forgets the header fails its tests.
async fn send(
    State(shared): State<Arc<Shared>>,
    Extension(abort): Extension<ConnectionAbort>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let parsed = serde_json::from_slice::<SendBody>(&body).ok();
    shared.lock().record_request(
        arrived,
        parsed.as_ref().map(|b| b.reference.as_str()),
        parsed.as_ref().map(|b| b.to.as_str()),
        key.as_deref(),
    );
    let Some(body) = parsed else {
        return bad_request("body must be JSON {ref, to, text, ttl_seconds}");
    };
    if key.is_none() {
        return bad_request("missing Idempotency-Key header");
    }
    let reference = body.reference.clone();
    let incoming = Incoming {
        reference: Some(body.reference),
        to: body.to,
        text: body.text,
        ttl_seconds: body.ttl_seconds,
        idempotency_key: key,
    };
    run_send(&shared, &abort, &reference, incoming, |accepted| {
        Json(serde_json::json!({ "id": accepted.id, "replayed": accepted.replayed })).into_response()
    })
    .await
}

/// The push contract has no query (§9); counted so a test can prove none was attempted.
async fn no_query(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.lock().record_query(None);
    StatusCode::METHOD_NOT_ALLOWED
}
