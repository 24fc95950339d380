//! The Miaotixing (喵提醒) stand-in: NEITHER idempotent nor queryable, plain-text answers.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use serde::Deserialize;

use super::run_send;
use super::server::{Arrived, ConnectionAbort};
use super::state::{Incoming, Shared};

/// The success answer; only this exact body (trimmed) means "accepted" (§9).
pub const MIAO_OK: &str = "完成";
/// The real service's HTTP 200 answer to bad parameters (a refusal).
pub const MIAO_BAD_PARAMS: &str = "发送失败：参数格式有误";
/// The real service's HTTP 200 answer to an unknown code (a refusal).
pub const MIAO_NOT_FOUND: &str = "找不到提醒单";
/// The default body of a scripted `Status` step on this stand-in, e.g. with 500.
pub const MIAO_SERVICE_FAILED: &str = "service failed";

/// `POST /trigger` form fields. Both optional so a bad form is answered like the real
/// service (HTTP 200, "parameter format error") rather than with axum's 4xx rejection.
#[derive(Deserialize)]
struct TriggerForm {
    id: Option<String>,
    text: Option<String>,
}

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().route("/trigger", post(trigger)).with_state(shared)
}

async fn trigger(
    State(shared): State<Arc<Shared>>,
    Extension(abort): Extension<ConnectionAbort>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    headers: HeaderMap,
    form: Result<Form<TriggerForm>, FormRejection>,
) -> Response {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (code, text) = match form {
        Ok(Form(form)) => (form.id.filter(|id| !id.trim().is_empty()), form.text),
        Err(_) => (None, None),
    };
    shared.lock().record_request(arrived, None, code.as_deref(), key.as_deref());
    let Some(code) = code else {
        return MIAO_BAD_PARAMS.into_response();
    };
    let incoming = Incoming {
        reference: None,
        to: code.clone(),
        text: text.unwrap_or_default(),
        ttl_seconds: None,
        idempotency_key: key,
    };
    run_send(&shared, &abort, &code, incoming, |_| MIAO_OK.into_response()).await
}
