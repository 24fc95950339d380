//! The whole HTTP front end as one router: the API's routes and the console's, with the limits every
//! client is held to, request ids, tracing, problem documents for every failure and the headers every
//! answer carries — and the lone `/metrics` of a process without the API.

use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::api::limits;
use crate::api::problem::Problem;
use crate::state::ApiState;

async fn not_found() -> Problem {
    Problem::not_found()
}

async fn method_not_allowed() -> Problem {
    Problem::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "Method not allowed", "method not allowed here")
}

fn panic_problem(_: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    tracing::error!("request handler panicked");
    axum::response::IntoResponse::into_response(Problem::internal())
}

/// The API router with request ids, tracing, the body limit and problem documents for every failure,
/// under the default [`limits::Limits`].
pub fn router(state: ApiState) -> Router {
    router_with(state, limits::Limits::default())
}

/// As [`router`], with these bounds on every client (request timeout, load shedding, rate per token).
pub fn router_with(state: ApiState, limits: limits::Limits) -> Router {
    let body_limit = state.body_limit;
    let https = state.console.https;
    let limited = state.clone();
    let trace = TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
        let request_id =
            request.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok()).unwrap_or("-");
        // The path only: no query string, no headers, so no token can reach the logs.
        tracing::info_span!("http", method = %request.method(), path = %request.uri().path(), request_id)
    });
    let router = Router::new()
        .merge(crate::api::routes())
        // The console's pages, over the same state and use cases.
        .merge(crate::console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::custom(panic_problem));
    limits::apply(router, limits, limited)
        // Outside the limits: their own answers (429, 503, 408) carry the headers too.
        .layer(axum::middleware::from_fn_with_state(https, limits::response_headers))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(trace)
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        // Outermost: a client's id that is too long or unprintable is dropped before it is taken.
        .layer(axum::middleware::from_fn(limits::sane_request_id))
}

/// `/metrics` (and `/healthz`) alone, for a process without the API: `herald worker` serves it on
/// `worker.metrics_listen`, so its counters are scraped too.
pub fn metrics_router(handle: PrometheusHandle) -> axum::Router {
    use axum::http::header::CONTENT_TYPE;
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let text = handle.render();
                async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text) }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
}
