//! The HTTP API of SPEC §11, over the ports: axum handlers that validate, authenticate, call a store
//! and answer JSON, or an RFC 9457 problem document for every error.
//!
//! Nothing here knows PostgreSQL or a channel's wire format: the state is built by the composition
//! root (`herald_core::Services::api_state`), and the use cases a person starts are those of
//! `herald_core::usecases`, shared with the command line and the console.

pub mod audit;
pub mod auth;
pub mod extract;
pub mod limits;
pub mod model;
pub mod problem;
pub mod routes;
pub mod test_send;

#[cfg(test)]
mod tests;

use axum::routing::{get, post, put};
use axum::Router;
use herald_ports::ChannelTable;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;

pub use auth::Authenticated;
pub use problem::{FieldError, Problem};

use crate::state::ApiState;

/// The API's routes (SPEC §11) and the operations endpoints, over [`ApiState`].
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/notifications", post(routes::submit_notification))
        .route("/v1/notifications/{id}", get(routes::get_notification))
        .route("/v1/events", post(routes::submit_event))
        .route("/v1/users/{user_id}/channels/{channel}", put(routes::put_preference))
        .route("/v1/users/{user_id}/channels/{channel}/test", post(test_send::test_send))
        .route("/v1/users/{user_id}/channels/{channel}/confirm", post(test_send::confirm))
        .route("/v1/users/{user_id}/inbox", get(routes::get_inbox))
        .route("/v1/users/{user_id}/inbox/{notification_id}/read", post(routes::mark_read))
        .route("/v1/users/{user_id}/sign-in-links", post(routes::create_sign_in_link))
        .route("/v1/users/{user_id}/erasure", post(routes::erase_user))
        .route("/v1/users/{user_id}/export", get(routes::export_user))
        .route("/v1/review", get(routes::list_review))
        .route("/v1/tasks/{task_id}/resolve", post(routes::resolve_task))
        .route("/v1/audit", get(audit::list_audit))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(routes::openapi))
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
                        "A service token (submit), an operator token (`auth.admin_tokens`, `[[operators.tokens]]`: \
                         what its role's capabilities allow — review, resolve, audit, act for a user) or an expiring user \
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
        routes::erase_user,
        routes::export_user,
        audit::list_audit,
        routes::healthz,
        routes::readyz,
        routes::metrics,
        routes::openapi,
    ),
    components(schemas(Problem, FieldError, model::StatusEventBody, model::StatusEventData)),
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
    // What Herald posts to a status subscription's endpoint (issue 46), as an OpenAPI 3.1 webhook.
    let signed = |name: &str, words: &str| json!({"name": name, "in": "header", "required": true, "schema": {"type": "string"}, "description": words});
    doc["webhooks"] = json!({"notificationStatus": {"post": {
        "operationId": "notification_status",
        "summary": "A status event, posted to each [[status_subscription]] that wants its kind",
        "description": "Signed per the Standard Webhooks specification. At least once: a post not answered 2xx \
            is made again with the same `webhook-id` after a backoff (honouring `Retry-After`), and parked after \
            `[status_events] max_posts` posts (listed in the console). Not in order: `data.sequence` orders the \
            events of one delivery (a notification on one channel).",
        "parameters": [
            signed("webhook-id", "The event's id, the same on every post of it: drop repeats by it"),
            signed("webhook-timestamp", "Seconds since the epoch when this post was made"),
            signed("webhook-signature", "`v1,` + base64 of HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}` \
                with the key of the subscription's `whsec_` secret"),
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StatusEventBody"}}}},
        "responses": {"2XX": {"description": "Taken; not posted again"},
            "default": {"description": "Not taken: posted again later with the same webhook-id"}},
    }}});
    if let Some(recipients) = doc.pointer_mut("/components/schemas/SubmitEvent/properties/recipients") {
        recipients["items"] = user_id;
        recipients["uniqueItems"] = Value::Bool(true);
    }
    doc
}
