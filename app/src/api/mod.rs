//! The HTTP API of SPEC §11, over the ports: axum handlers that validate, authenticate, call a store
//! and answer JSON, or an RFC 9457 problem document for every error.
//!
//! Nothing here knows PostgreSQL or a channel's wire format: the state is built by the composition
//! root (`crate::compose::Services::api_state`), and the use cases a person starts are those of
//! `crate::usecases`, shared with the command line and the console.

pub mod auth;
pub mod extract;
pub mod limits;
pub mod model;
pub mod problem;
pub mod routes;
pub mod test_send;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post, put};
use axum::Router;
use herald_ports::{ChannelTable, Clock};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;

pub use auth::{Authenticator, Caller};
pub use problem::{FieldError, Problem};

/// Answers whether the service can take traffic. Reasons must be free of secrets (no URLs).
#[async_trait]
pub trait Readiness: Send + Sync {
    async fn check(&self) -> Result<(), String>;
}

/// Readiness judged by asking the shared clock, which in production is a database round trip.
pub struct ClockReadiness(pub Arc<dyn Clock>);

#[async_trait]
impl Readiness for ClockReadiness {
    async fn check(&self) -> Result<(), String> {
        self.0.now().await.map(|_| ()).map_err(|error| error.to_string())
    }
}

/// A readiness whose answer is kept for `ttl`: a flood of probes asks the database once per `ttl`, and
/// probes that arrive while a check runs wait for that check instead of starting their own.
pub struct CachedReadiness<R> {
    inner: R,
    ttl: Duration,
    last: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), String>)>>,
}

impl<R: Readiness> CachedReadiness<R> {
    pub fn new(inner: R, ttl: Duration) -> Self {
        CachedReadiness { inner, ttl, last: tokio::sync::Mutex::new(None) }
    }
}

#[async_trait]
impl<R: Readiness> Readiness for CachedReadiness<R> {
    async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref() {
            if at.elapsed() < self.ttl {
                return answer.clone();
            }
        }
        let answer = self.inner.check().await;
        *last = Some((std::time::Instant::now(), answer.clone()));
        answer
    }
}

/// How long `herald serve` keeps a `/readyz` answer.
pub const READINESS_TTL: Duration = Duration::from_secs(1);

/// Everything the handlers use: the services their use cases run on, and what only the HTTP front end
/// knows (tokens, console settings, readiness, metrics, the body limit). Cheap to clone: every field is
/// shared.
#[derive(Clone)]
pub struct ApiState {
    pub services: crate::compose::Services,
    pub auth: Arc<Authenticator>,
    /// The console's sessions, and whether the installation is reached over https.
    pub console: ConsoleSettings,
    pub readiness: Arc<dyn Readiness>,
    /// `None`: `/metrics` answers an empty document.
    pub metrics: Option<PrometheusHandle>,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
}

impl ApiState {
    /// The services the handlers' use cases run on (`crate::usecases`).
    #[must_use]
    pub fn services(&self) -> crate::compose::Services {
        self.services.clone()
    }

    /// With these console settings.
    #[must_use]
    pub fn with_console(mut self, console: ConsoleSettings) -> ApiState {
        self.console = console;
        self
    }
}

/// What the console's sign-in depends on beyond the tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// Session lifetime, idle timeout, sign-in link lifetime (`[console]`).
    pub sessions: crate::sessions::SessionSettings,
    /// `server.https`: the installation is reached over https (a TLS-terminating proxy in front): the
    /// session cookie is `Secure` with the `__Host-` prefix, and every answer carries HSTS.
    pub https: bool,
}

pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

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
        .route("/v1/notifications", post(routes::submit_notification))
        .route("/v1/notifications/{id}", get(routes::get_notification))
        .route("/v1/events", post(routes::submit_event))
        .route("/v1/users/{user_id}/channels/{channel}", put(routes::put_preference))
        .route("/v1/users/{user_id}/channels/{channel}/test", post(test_send::test_send))
        .route("/v1/users/{user_id}/channels/{channel}/confirm", post(test_send::confirm))
        .route("/v1/users/{user_id}/inbox", get(routes::get_inbox))
        .route("/v1/users/{user_id}/inbox/{notification_id}/read", post(routes::mark_read))
        .route("/v1/users/{user_id}/sign-in-links", post(routes::create_sign_in_link))
        .route("/v1/review", get(routes::list_review))
        .route("/v1/tasks/{task_id}/resolve", post(routes::resolve_task))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(routes::openapi))
        // The console's pages, over the same state and use cases (`crate::console`).
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

/// Serves the router until `shutdown` resolves, then lets requests in flight finish (at most `grace`),
/// with the default header-read timeout.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    serve_bounded(listener, router, shutdown, grace, limits::Limits::default().header_read_timeout).await
}

/// As [`serve`]; a connection that has not sent a whole request head within `header_read_timeout` is
/// closed (also between requests of a kept-alive connection), so slow clients hold no connection for
/// long. HTTP/1.1, one hyper connection task per client.
///
/// # Errors
/// Never for a failed `accept` (logged, and the loop goes on); the result is kept for callers.
pub async fn serve_bounded(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
    header_read_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // The peer's address travels with each request (`ConnectInfo`): the limits key anonymous
                // requests and failed sign-ins by it.
                let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                    router.clone(),
                    move |mut request: hyper::Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                        request.map(axum::body::Body::new)
                    },
                ));
                let mut close = close_rx.clone();
                connections.spawn(async move {
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
                    let mut connection = std::pin::pin!(builder.serve_connection(TokioIo::new(stream), service));
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        () = async { let _ = close.wait_for(|closing| *closing).await; } => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    close_tx.send_replace(true);
    let drained = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("requests still running after the shutdown grace period; stopping anyway");
        connections.abort_all();
    }
    Ok(())
}

struct SecurityAddon;

impl utoipa::Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A service token (submit), an admin token (review, resolve, any user) or an expiring user \
                         token `u2.{key id}.{user}.{expiry}.{mac}` (that user's preferences, inbox and \
                         notifications; `herald token user USER_ID --ttl 1h`).",
                    ))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Herald", description = "Notification delivery. SENT means accepted by the channel, never delivered."),
    paths(
        routes::submit_notification,
        routes::submit_event,
        routes::get_notification,
        routes::put_preference,
        test_send::test_send,
        test_send::confirm,
        routes::get_inbox,
        routes::mark_read,
        routes::create_sign_in_link,
        routes::list_review,
        routes::resolve_task,
        routes::healthz,
        routes::readyz,
        routes::metrics,
        routes::openapi,
    ),
    components(schemas(Problem, FieldError)),
    modifiers(&SecurityAddon)
)]
pub struct ApiDoc;

/// The OpenAPI document of the code (without what only the configuration knows).
#[must_use]
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document served at `/openapi.json`: [`openapi_document`] completed with what every `/v1` operation
/// shares — the problem statuses any of them can answer, the user-id rule of every `user_id` in a path or
/// a recipient list (`herald_domain::ids::USER_ID_PATTERN`), and the configured channel names as the
/// `channel` parameter's enum — so a client, or a fuzzer, knows every constraint the server enforces.
#[must_use]
pub fn openapi_json(channels: &ChannelTable) -> serde_json::Value {
    use serde_json::{json, Value};
    let mut doc = serde_json::to_value(openapi_document()).unwrap_or(Value::Null);
    let user_id = json!({"type": "string", "minLength": 1, "maxLength": herald_domain::ids::MAX_USER_ID_CHARS,
        "pattern": herald_domain::ids::USER_ID_PATTERN});
    let notification_id =
        json!({"type": "string", "format": "uuid", "pattern": herald_domain::ids::NOTIFICATION_REF_PATTERN});
    let names: Vec<String> = channels.names().map(ToString::to_string).collect();
    let problem = |words: &str| {
        json!({"description": words,
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}})
    };
    let shared: [(&str, &str); 6] = [
        ("401", "No valid bearer token: missing, malformed, expired, or signed by a key no longer accepted"),
        ("403", "The token's role may not do this, or it is another user's token"),
        ("404", "Not found; another user's notification answers the same"),
        ("422", "Invalid fields or path parameters, each named in `errors`"),
        ("429", "Too many requests; see `Retry-After`"),
        ("503", "The store is unavailable; try again"),
    ];
    let with_body: [(&str, &str); 3] = [
        ("400", "The body is not the JSON document this operation takes"),
        ("413", "The body is larger than the server's limit"),
        ("415", "The body is not `application/json`"),
    ];
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let Some(item) = item.as_object_mut() else { continue };
            for (method, operation) in item.iter_mut() {
                let extra: &[(&str, &str)] = if method == "get" { &[] } else { &with_body };
                if let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) {
                    for (code, words) in shared.iter().chain(extra) {
                        responses.entry((*code).to_owned()).or_insert_with(|| problem(words));
                    }
                }
                let Some(parameters) = operation.get_mut("parameters").and_then(Value::as_array_mut) else {
                    continue;
                };
                for parameter in parameters {
                    match parameter.get("name").and_then(Value::as_str) {
                        Some("user_id") => parameter["schema"] = user_id.clone(),
                        Some("id" | "notification_id") => parameter["schema"] = notification_id.clone(),
                        Some("channel") => parameter["schema"] = json!({"type": "string", "enum": names}),
                        Some("cursor") => {
                            let kind = if path.ends_with("/inbox") { "inbox" } else { "review" };
                            parameter["schema"] = json!({"type": "string", "pattern": model::cursor_pattern(kind)});
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // A submitted notification's id is where its reads start: say so as links, so that a client (or the
    // fuzzer's stateful phase) follows the opaque id instead of guessing one.
    let links = json!({
        "GetNotification": {"operationId": "get_notification",
            "parameters": {"id": "$response.body#/notification_id"}},
        "MarkRead": {"operationId": "mark_read",
            "parameters": {"user_id": "$request.body#/user_id", "notification_id": "$response.body#/notification_id"}},
    });
    for status in ["200", "201"] {
        if let Some(response) = doc.pointer_mut(&format!("/paths/~1v1~1notifications/post/responses/{status}")) {
            response["links"] = links.clone();
        }
    }
    // Every notification id an answer carries is opaque: say its form (what a client passes back).
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for schema in schemas.values_mut() {
            if let Some(property) = schema.pointer_mut("/properties/notification_id") {
                let description = property.get("description").cloned();
                *property = notification_id.clone();
                if let Some(description) = description {
                    property["description"] = description;
                }
            }
        }
    }
    if let Some(recipients) = doc.pointer_mut("/components/schemas/SubmitEvent/properties/recipients") {
        recipients["items"] = user_id;
        recipients["uniqueItems"] = Value::Bool(true);
    }
    doc
}

#[cfg(test)]
mod readiness_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its checks; answers "not ready" from the third on.
    struct Counting(Arc<AtomicUsize>);

    #[async_trait]
    impl Readiness for Counting {
        async fn check(&self) -> Result<(), String> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            if n >= 2 {
                Err("down".into())
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn a_flood_of_probes_checks_once_per_ttl() {
        let checks = Arc::new(AtomicUsize::new(0));
        let cached = Arc::new(CachedReadiness::new(Counting(Arc::clone(&checks)), Duration::from_secs(3600)));
        let probes = (0..50).map(|_| {
            let cached = Arc::clone(&cached);
            tokio::spawn(async move { cached.check().await })
        });
        for probe in futures::future::join_all(probes).await {
            assert_eq!(probe.expect("probe"), Ok(()));
        }
        assert_eq!(checks.load(Ordering::SeqCst), 1, "fifty concurrent probes, one check");

        let fresh = CachedReadiness::new(Counting(Arc::clone(&checks)), Duration::ZERO);
        let _ = fresh.check().await;
        assert_eq!(fresh.check().await, Err("down".into()), "an expired answer is checked again");
        assert_eq!(checks.load(Ordering::SeqCst), 3);
    }
}
