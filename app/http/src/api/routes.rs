//! The handlers of SPEC §11. Each validates completely before it touches a store, so a 4xx writes nothing.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_domain::{ChannelName, NotificationRef, Outcome, TaskId, TaskState, UserId};
use herald_ports::{InboxChannel, MarkRead, NotificationView};

use super::auth::{Authenticated, Operator, Submitter, UserAccess};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::model::{
    rfc3339, CreatedBody, ErasureBody, Errors, EventCreatedBody, ExportBody, HealthBody, InboxBody, InboxChannelBody,
    InboxItemBody, NotificationBody, PageQuery, PreferenceBody, PutPreference, ReadBody, RecipientCreated,
    ResolveRequest, ResolvedBody, ReviewBody, ReviewTaskBody, SignInLinkBody, SubmitEvent, SubmitNotification,
    TaskBody,
};
use super::problem::{FieldError, Problem};
use crate::paging::next_page;
use crate::state::ApiState;
use herald_core::auth::Caller;
use herald_core::usecases::{self, PreferenceError};

type ApiResult<T> = Result<T, Problem>;

/// Submit one notification.
#[utoipa::path(
    post, path = "/v1/notifications", tag = "submit", request_body = SubmitNotification,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created, with one task per enabled channel", body = CreatedBody),
        (status = 200, description = "Duplicate `(user_id, event_key)`: the existing notification", body = CreatedBody),
        (status = 409, description = "The `(user_id, event_key)` was used before for a notification with another body, TTL, thread or budget; nothing was written",
         body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not a service token", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit_notification(
    State(state): State<ApiState>,
    Submitter(service): Submitter,
    ApiJson(request): ApiJson<SubmitNotification>,
) -> ApiResult<(StatusCode, Json<CreatedBody>)> {
    let mut new = request.validate()?;
    new.submitted_by = Some(service);
    let created = usecases::submit(&state.services, &new).await.map_err(submit_problem)?;
    let status = if created.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(CreatedBody::from(&created))))
}

/// Submit one event for several recipients: one notification each, each deduplicated on its own.
///
/// Every recipient's notification, inbox item and tasks are committed in one transaction before any
/// channel is called (channels are called only by workers): all of the event or, on a failure or a
/// conflict, none of it — repeating the whole request is safe either way.
#[utoipa::path(
    post, path = "/v1/events", tag = "submit", request_body = SubmitEvent,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "At least one notification was created", body = EventCreatedBody),
        (status = 200, description = "Every recipient's notification existed already", body = EventCreatedBody),
        (status = 409, description = "The event key was used before for some recipient with another body, TTL or thread; nothing was written",
         body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "A recipient was erased; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit_event(
    State(state): State<ApiState>,
    Submitter(service): Submitter,
    ApiJson(request): ApiJson<SubmitEvent>,
) -> ApiResult<(StatusCode, Json<EventCreatedBody>)> {
    let mut notifications = request.validate()?;
    for new in &mut notifications {
        new.submitted_by = Some(service.clone());
    }
    let created = usecases::submit_event(&state.services, &notifications).await.map_err(submit_problem)?;
    let mut results = Vec::with_capacity(notifications.len());
    for (new, created) in notifications.iter().zip(&created) {
        results.push(RecipientCreated { user_id: new.user_id.to_string(), notification: CreatedBody::from(created) });
    }
    let any_created = results.iter().any(|r| r.notification.created);
    let event_key = notifications.first().map(|n| n.event_key.to_string()).unwrap_or_default();
    let status = if any_created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(EventCreatedBody { event_key, notifications: results })))
}

/// The problem document of a refused submission: a 409 naming each differing field (`body`, or
/// `recipients[3].body` for an event's recipient).
fn submit_problem(error: usecases::SubmitError) -> Problem {
    match error {
        usecases::SubmitError::Conflict(differences) => Problem::submission_conflict(
            differences
                .iter()
                .map(|d| {
                    let name = match d.recipient {
                        Some(i) => format!("recipients[{i}].{}", d.field),
                        None => d.field.to_owned(),
                    };
                    FieldError::new(name, "differs from the submission stored under this (user_id, event_key)")
                })
                .collect(),
        ),
        usecases::SubmitError::Store(store) => Problem::from_store(&store),
    }
}

fn notification_body(view: &NotificationView) -> NotificationBody {
    NotificationBody {
        notification_id: view.notification_ref.to_string(),
        user_id: view.user_id.to_string(),
        event_key: view.event_key.to_string(),
        thread_key: view.thread_key.as_ref().map(ToString::to_string),
        created_at: rfc3339(view.created_at),
        expires_at: rfc3339(view.expires_at),
        tasks: view.tasks.iter().map(TaskBody::from).collect(),
    }
}

/// One notification with its tasks and every attempt, oldest first. Service and admin tokens see any
/// notification; a user token only that user's.
#[utoipa::path(
    get, path = "/v1/notifications/{id}", tag = "read",
    params(("id" = String, Path, description = "notification id (opaque, as an answer gave it)")),
    security(("bearer" = [])),
    responses(
        (status = 200, body = NotificationBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_notification(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<NotificationBody>> {
    // Not in the documented form: no notification has that id.
    let id = NotificationRef::parse(&id).ok_or_else(Problem::not_found)?;
    let reader = match caller {
        Caller::User(user) => usecases::Reader::User(UserId::new(user)),
        Caller::Operator(actor) => usecases::Reader::Operator(actor),
        Caller::Service(_) => usecases::Reader::Any,
    };
    // Another user's notification is answered exactly like a missing one.
    let view = usecases::notification(&state.services, &reader, id).await?.ok_or_else(Problem::not_found)?;
    Ok(Json(notification_body(&view)))
}

fn check_path_user(errors: &mut Errors, user_id: &str) {
    errors.user_id("user_id", Some(user_id));
}

/// Set a user's switch and destination for one channel. The destination is encrypted before it is
/// stored and is never part of a response.
#[utoipa::path(
    put, path = "/v1/users/{user_id}/channels/{channel}", tag = "preferences", request_body = PutPreference,
    params(("user_id" = String, Path), ("channel" = String, Path, description = "a configured channel name")),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PreferenceBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`enabled: true` without a `destination`, and none is usable in store: none \
         was ever given, or the push service said the stored Web Push subscription expired; nothing was written",
         body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased; nothing was written", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_preference(
    State(state): State<ApiState>,
    UserAccess(operator): UserAccess,
    ApiPath((user_id, channel)): ApiPath<(String, String)>,
    ApiJson(request): ApiJson<PutPreference>,
) -> ApiResult<Json<PreferenceBody>> {
    let services = state.services();
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    let channel = ChannelName::new(channel);
    if services.channels.get(&channel).is_none() {
        errors.add("channel", "is not a configured channel");
    } else if let Some(destination) = &request.destination {
        if let Err(reason) = usecases::check_destination(&services, &channel, &destination.0) {
            errors.add("destination", reason);
        }
    }
    if request.enabled.is_none() {
        errors.add("enabled", "is required");
    }
    errors.finish(|| Some(()))?;
    let enabled = request.enabled.unwrap_or(false);
    let user = UserId::new(user_id);
    let destination = request.destination.as_ref().map(|d| &d.0);
    match usecases::set_preference(&services, &user, operator.as_ref(), &channel, enabled, destination).await {
        Ok(set) => {
            let mut body = PreferenceBody::from(&set.pref);
            if set.subscription_expired {
                body.status = Some(usecases::SUBSCRIPTION_EXPIRED.to_owned());
            }
            Ok(Json(body))
        }
        Err(error) => Err(preference_problem(error)),
    }
}

/// The problem document of a preference the use case refused.
fn preference_problem(error: PreferenceError) -> Problem {
    let conflict = |message: &str| Problem {
        errors: vec![FieldError::new("destination", message)],
        ..Problem::new(
            StatusCode::CONFLICT,
            "preference-conflict",
            "Not possible with what is stored",
            format!("destination: {message}; nothing was written"),
        )
    };
    match error {
        PreferenceError::UnknownChannel => {
            Problem::validation(vec![FieldError::new("channel", "is not a configured channel")])
        }
        PreferenceError::InvalidDestination(reason) => {
            Problem::validation(vec![FieldError::new("destination", reason)])
        }
        PreferenceError::NoDestination => conflict("is required to enable a channel that has no stored destination"),
        PreferenceError::SubscriptionExpired => {
            conflict("is required: the stored subscription expired, the browser must subscribe again")
        }
        PreferenceError::Encryption => Problem::internal(),
        PreferenceError::Forbidden(refused) => refused.into(),
        PreferenceError::Store(store) => Problem::from_store(&store),
    }
}

/// The words a user sees for one channel of an inbox item. SENT is "accepted by channel", never
/// "delivered" (SPEC §1). Everything it needs comes with the inbox row, so listing costs one read.
#[must_use]
pub fn status_text(channel: &InboxChannel) -> &'static str {
    // While the digest waits, the event's prompt is merged; once the digest went out (or could not),
    // its state speaks for every event in it.
    if channel.in_digest && matches!(channel.state, TaskState::Pending | TaskState::Sending) {
        return "merged into a digest";
    }
    if let Some(decision) = channel.last_outcome.and_then(herald_domain::resolve::manual_decision) {
        if channel.state == decision.state() {
            return herald_core::usecases::decision_words(decision);
        }
    }
    if channel.last_outcome == Some(Outcome::UserErased) {
        return match channel.state {
            TaskState::Unknown => "outcome unknown — user erased, not sent again",
            _ => "not sent: user erased",
        };
    }
    match channel.state {
        TaskState::Sent => "accepted by channel",
        TaskState::Suppressed => "not sent: channel off",
        TaskState::Failed if matches!(channel.last_outcome, Some(Outcome::TtlExpired)) => "expired",
        TaskState::Failed if channel.destination_gone => "not sent: subscription expired",
        TaskState::Failed => "failed",
        TaskState::Unknown if channel.needs_review => "outcome unknown — under review",
        TaskState::Unknown => "waiting to retry",
        TaskState::Pending if channel.attempt_count > 0 => "waiting to retry",
        TaskState::Pending | TaskState::Sending => "sending",
    }
}

/// [`status_text`] with the operator's note after a human decision ("marked sent by an operator: {note}").
#[must_use]
pub fn status_words(channel: &InboxChannel) -> String {
    let text = status_text(channel);
    match (&channel.note, channel.last_outcome.is_some_and(Outcome::is_manual)) {
        (Some(note), true) if text.contains("operator") => format!("{text}: {note}"),
        _ => text.to_owned(),
    }
}

/// A user's inbox, newest first, with each channel's state in words, a page at a time (`next_cursor`).
#[utoipa::path(
    get, path = "/v1/users/{user_id}/inbox", tag = "read",
    params(("user_id" = String, Path), PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = InboxBody),
        (status = 400, description = "A cursor this list did not give", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased: nothing of theirs is answered and nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_inbox(
    State(state): State<ApiState>,
    UserAccess(operator): UserAccess,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<InboxBody>> {
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    errors.finish(|| Some(()))?;
    let limit = query.limit(50)?;
    let after = query
        .inbox_position()?
        .map(|(at, notification)| herald_ports::InboxCursor { created_at: herald_domain::Timestamp(at), notification });
    let mut items = herald_core::usecases::inbox_page(
        &state.services(),
        &UserId::new(user_id),
        operator.as_ref(),
        after,
        limit.saturating_add(1),
    )
    .await?;
    let next_cursor =
        next_page(&mut items, limit, |last| super::model::cursor("inbox", last.created_at.0, last.notification_ref));
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        let channels = item
            .channels
            .iter()
            .map(|c| InboxChannelBody {
                channel: c.channel.to_string(),
                state: c.state.to_string(),
                status_text: status_words(c),
            })
            .collect::<Vec<_>>();
        out.push(InboxItemBody {
            notification_id: item.notification_ref.to_string(),
            body: item.body.clone(),
            created_at: rfc3339(item.created_at),
            read_at: item.read_at.map(rfc3339),
            status_text: channels.is_empty().then(|| "in-app only".to_owned()),
            channels,
        });
    }
    Ok(Json(InboxBody { items: out, next_cursor }))
}

/// Parked tasks (outcome unknown, waiting for a human), oldest first, a page at a time (`next_cursor`).
#[utoipa::path(
    get, path = "/v1/review", tag = "review",
    params(PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReviewBody),
        (status = 400, description = "A cursor this list did not give", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_review(
    State(state): State<ApiState>,
    Operator(actor): Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<ReviewBody>> {
    let limit = query.limit(100)?;
    let after = query.position("review")?.map(|(at, id)| (herald_domain::Timestamp(at), TaskId(id)));
    let mut page =
        herald_core::usecases::review_page(&state.services(), &actor, None, None, after, limit.saturating_add(1))
            .await?;
    let next_cursor =
        next_page(&mut page, limit, |last| super::model::cursor("review", last.parked_at.0, last.task.task_id.0));
    let tasks = page
        .iter()
        .map(|parked| &parked.task)
        .map(|t| ReviewTaskBody {
            notification_id: t.notification_ref.to_string(),
            user_id: t.user_id.to_string(),
            task: t.into(),
        })
        .collect();
    Ok(Json(ReviewBody { tasks, next_cursor }))
}

/// Settle a parked task once, after a person checked: `SENT`, `FAILED`, or `RESEND` (back to `PENDING`
/// with a fresh budget; the next send is an ordinary fenced attempt). A second call changes nothing and
/// answers 409.
#[utoipa::path(
    post, path = "/v1/tasks/{task_id}/resolve", tag = "review", request_body = ResolveRequest,
    params(("task_id" = i64, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ResolvedBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not parked (already resolved, or still automatic)", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn resolve_task(
    State(state): State<ApiState>,
    Operator(actor): Operator,
    ApiPath(task_id): ApiPath<i64>,
    ApiJson(request): ApiJson<ResolveRequest>,
) -> ApiResult<Json<ResolvedBody>> {
    let (final_state, note) = request.validate()?;
    let resolved =
        herald_core::usecases::resolve(&state.services(), &actor, TaskId(task_id), final_state, &note).await?;
    Ok(Json(ResolvedBody { task_id: resolved.task_id.0, state: resolved.state.to_string() }))
}

/// Erase a user (SPEC §13): the capability `erase_users` (admin). In one transaction: the erasure is
/// recorded (who, when) with its audit event (`erase_user`, naming the actor), every
/// task of the user not yet handed to a channel is settled (suppressed; "outcome unknown" when an earlier
/// attempt may have been accepted; a parked one leaves the review queue), the user's destinations are
/// destroyed. A call already in flight is not recalled; nothing is sent again. Later submissions and
/// preference changes for the user answer 410 and write nothing. 202 for the erasure (its later
/// boundaries still to come), 200 with the same record for a repeat, which changes nothing.
#[utoipa::path(
    post, path = "/v1/users/{user_id}/erasure", tag = "lifecycle",
    params(("user_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Erased now", body = ErasureBody),
        (status = 200, description = "Erased before; nothing changed", body = ErasureBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin token", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn erase_user(
    State(state): State<ApiState>,
    Operator(actor): Operator,
    ApiPath(user_id): ApiPath<String>,
) -> ApiResult<Response> {
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    errors.finish(|| Some(()))?;
    let erasure = usecases::erase_user(&state.services(), &actor, &UserId::new(user_id)).await?;
    let status = if erasure.first { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok((status, Json(ErasureBody::from(erasure))).into_response())
}

/// Everything Herald holds about a user, in one JSON document (SPEC §13): the user's own token or an
/// admin token. Destinations are shown only as `none`, `set` or `verified`.
#[utoipa::path(
    get, path = "/v1/users/{user_id}/export", tag = "lifecycle",
    params(("user_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ExportBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Another user's token, or a service token", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn export_user(
    State(state): State<ApiState>,
    _: UserAccess,
    ApiPath(user_id): ApiPath<String>,
) -> ApiResult<Json<ExportBody>> {
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    errors.finish(|| Some(()))?;
    let export = usecases::export_user(&state.services(), &UserId::new(user_id)).await?;
    Ok(Json(ExportBody::from(export)))
}

/// Mark an inbox item read. Repeating it changes nothing: the first time stays and `changed` is false.
#[utoipa::path(
    post, path = "/v1/users/{user_id}/inbox/{notification_id}/read", tag = "read",
    params(("user_id" = String, Path), ("notification_id" = String, Path, description = "notification id (opaque, as an answer gave it)")),
    security(("bearer" = [])),
    responses(
        (status = 200, body = ReadBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such item in this user's inbox", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased: nothing of theirs is answered and nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn mark_read(
    State(state): State<ApiState>,
    UserAccess(operator): UserAccess,
    ApiPath((user_id, notification_id)): ApiPath<(String, String)>,
) -> ApiResult<Json<ReadBody>> {
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    errors.finish(|| Some(()))?;
    // Not in the documented form: no item has that id.
    let id = NotificationRef::parse(&notification_id).ok_or_else(Problem::not_found)?;
    let (read_at, changed) = match herald_core::usecases::mark_read(
        &state.services(),
        &UserId::new(user_id),
        operator.as_ref(),
        id,
    )
    .await?
    {
        MarkRead::Marked(at) => (at, true),
        MarkRead::AlreadyRead(at) => (at, false),
        MarkRead::NotFound => return Err(Problem::not_found()),
    };
    Ok(Json(ReadBody { notification_id: id.to_string(), read_at: rfc3339(read_at), changed }))
}

/// A one-time link that signs the user in to the console (their inbox and channel settings), for a
/// business service to send them. It works once, within `console.sign_in_link_minutes`, and carries no
/// token: opening it shows a page whose button signs in. Each call makes a new link.
#[utoipa::path(
    post, path = "/v1/users/{user_id}/sign-in-links", tag = "console",
    params(("user_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 201, body = SignInLinkBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not a service or admin token", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased: nothing of theirs is answered and nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create_sign_in_link(
    State(state): State<ApiState>,
    Authenticated(caller): Authenticated,
    ApiPath(user_id): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<SignInLinkBody>)> {
    let operator = match caller {
        Caller::Service(_) => None,
        Caller::Operator(actor) => Some(actor),
        Caller::User(_) => {
            return Err(Problem::forbidden("sign-in links are made with a service or an admin token"));
        }
    };
    let mut errors = Errors::default();
    check_path_user(&mut errors, &user_id);
    errors.finish(|| Some(()))?;
    let link = herald_core::sessions::create_link(
        &state.services(),
        operator.as_ref(),
        &UserId::new(user_id),
        state.console.sessions.link_ttl,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(SignInLinkBody { path: link.path(), expires_at: rfc3339(link.expires_at) })))
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = HealthBody)))]
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { status: "ok".into() })
}

/// Readiness: the store answers (and, with PostgreSQL, is migrated).
#[utoipa::path(
    get, path = "/readyz", tag = "operations",
    responses((status = 200, body = HealthBody), (status = 503, body = Problem, content_type = "application/problem+json"))
)]
pub async fn readyz(State(state): State<ApiState>) -> ApiResult<Json<HealthBody>> {
    match state.readiness.check().await {
        Ok(()) => Ok(Json(HealthBody { status: "ready".into() })),
        Err(reason) => {
            tracing::warn!(%reason, "not ready");
            Err(Problem::unavailable().with_detail(format!("not ready: {reason}")))
        }
    }
}

/// Prometheus text exposition of the process's metrics. On the API listener it needs a bearer token: one
/// of `auth.metrics_tokens`, or an admin token. A listener of its own (`worker.metrics_listen`) serves it
/// without one: bind that to an address only the scraper reaches.
#[utoipa::path(
    get, path = "/metrics", tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        (status = 401, description = "No metrics or admin token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn metrics(State(state): State<ApiState>, headers: axum::http::HeaderMap) -> Response {
    let allowed = super::auth::bearer(&headers).is_ok_and(|token| state.auth.may_scrape(token));
    if !allowed {
        return Problem::unauthorized("scraping /metrics here needs a metrics token or an admin token").into_response();
    }
    let text = state.metrics.as_ref().map(metrics_exporter_prometheus::PrometheusHandle::render).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// This document: the OpenAPI 3.1 description of the API, generated from the code.
#[utoipa::path(
    get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "OpenAPI document", body = Object))
)]
pub async fn openapi(State(state): State<ApiState>) -> Response {
    Json(super::openapi_json(&state.services.channels)).into_response()
}
