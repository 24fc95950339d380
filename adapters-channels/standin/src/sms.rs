//! The sms stand-in: QUERYABLE, not idempotent.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::server::{Arrived, ConnectionAbort};
use super::state::{Incoming, Shared};
use super::{bad_request, run_send};

/// `POST /messages` body (§12).
#[derive(Deserialize)]
struct SendBody {
    #[serde(rename = "ref")]
    reference: String,
    to: String,
    text: String,
}

/// `GET /messages?ref=` parameters.
#[derive(Deserialize)]
struct QueryParams {
    #[serde(rename = "ref")]
    reference: Option<String>,
}

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().route("/messages", post(send).get(query)).with_state(shared)
}

/// Every acceptance is a new send: the key, if any, is recorded but means nothing here.
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
        return bad_request("body must be JSON {ref, to, text}");
    };
    let reference = body.reference.clone();
    let incoming = Incoming {
        reference: Some(body.reference),
        to: body.to,
        text: body.text,
        ttl_seconds: None,
        idempotency_key: key,
    };
    run_send(&shared, &abort, &reference, incoming, |accepted| {
        Json(serde_json::json!({ "id": accepted.id })).into_response()
    })
    .await
}

/// Answers how many sends were accepted for a ref, unless a `QueryStatus` step says the
/// query endpoint is failing this time.
async fn query(State(shared): State<Arc<Shared>>, params: Result<Query<QueryParams>, QueryRejection>) -> Response {
    let reference = params.ok().and_then(|Query(p)| p.reference);
    let (scripted, found) = {
        let mut state = shared.lock();
        state.record_query(reference.as_deref());
        let scripted = state.scripts.next_query(reference.as_deref());
        let found = reference.as_deref().map(|r| state.lookup(r));
        (scripted, found)
    };
    if let Some(status) = scripted {
        return (status, "query unavailable").into_response();
    }
    match found {
        Some((found, id)) => Json(serde_json::json!({ "found": found, "id": id })).into_response(),
        None => bad_request("missing ref"),
    }
}
