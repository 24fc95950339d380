//! The settings page's test send and confirmation (SPEC §9): `POST /v1/users/{user_id}/channels/{channel}/test`
//! and `POST …/confirm`.
//!
//! A test send goes through the same registry, adapter and classification as a delivery, and through the
//! same egress interval (the per-channel row a claim locks), so a user pressing "test" cannot make Herald
//! call Miaotixing faster than its 10 s. What it proves is told in words a user understands, and never
//! more than it proves: an acceptance only asks the user to confirm the prompt really arrived
//! (verification is the user's confirmation, `…/confirm`); a refusal neither verifies nor deletes the
//! destination; an unanswered call says that we could not tell.

use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_domain::{slot_kept, ChannelName, EgressDecision, IdempotencyKey, Millis, Observation, UserId};
use herald_ports::{Channel, OutboundMessage};
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

use super::auth::UserAccess;
use super::extract::ApiPath;
use super::model::{Errors, PreferenceBody, MAX_USER_ID_CHARS};
use super::problem::Problem;
use super::ApiState;

/// What a test prompt says. Channels configured with a privacy-safe `text` send that text instead.
pub const TEST_TEXT: &str = "Herald test message: if you can read this, notifications on this channel reach you.";

/// The answer to an accepted test send.
pub const ACCEPTED_WORDS: &str = "accepted by the channel — please confirm you received it";
/// The answer when the channel could not be reached at all (nothing was sent).
pub const NOT_SENT_WORDS: &str = "not sent: the channel could not be reached — please try again later";
/// The answer when the call's outcome is unknown.
pub const UNKNOWN_WORDS: &str = "we could not tell whether it arrived";

/// The result of one test send.
#[derive(Debug, Serialize, ToSchema)]
pub struct TestSendBody {
    pub channel: String,
    /// The reference the channel saw (`test-{user}-{channel}-{n}`).
    pub reference: String,
    /// `accepted`, `refused`, `not_sent` (the channel could not be reached) or `unknown`.
    pub outcome: String,
    /// In words: "accepted by the channel — please confirm you received it", "the channel refused: …",
    /// or "we could not tell whether it arrived".
    pub message: String,
    /// `pending` after an acceptance (confirm with `POST …/confirm`), else `not requested`.
    pub confirmation: String,
    /// Whether the destination is verified (a test send never changes it).
    pub verified: bool,
}

/// Validates the path, naming the field; answers the user and the configured channel.
fn path(state: &ApiState, user_id: &str, channel: &str) -> Result<(UserId, ChannelName, Arc<dyn Channel>), Problem> {
    let mut errors = Errors::default();
    errors.text("user_id", Some(user_id), MAX_USER_ID_CHARS);
    let name = ChannelName::new(channel);
    let adapter = state.registry.get(&name).filter(|_| state.channels.get(&name).is_some());
    if adapter.is_none() {
        errors.add("channel", "is not a configured channel");
    }
    let adapter = errors.finish(|| adapter)?;
    Ok((UserId::new(user_id), name, adapter))
}

fn no_destination() -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "no-destination",
        "No destination stored",
        "this channel has no destination stored for the user; set one first",
    )
}

fn nothing_to_confirm() -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "nothing-to-confirm",
        "No accepted test send to confirm",
        "no test prompt to the stored destination was accepted by the channel (or the destination changed \
         since); send a test first",
    )
}

/// 429 with `Retry-After` (whole seconds, rounded up): the channel's egress interval does not allow a
/// call yet.
fn too_soon(wait: Millis) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too-soon",
        "Too soon for this channel",
        format!("this channel allows one call per interval; try again in {seconds} s"),
    )
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// Send a test prompt to the user's stored destination on one channel.
#[utoipa::path(
    post, path = "/v1/users/{user_id}/channels/{channel}/test", tag = "preferences",
    params(("user_id" = String, Path), ("channel" = String, Path, description = "a configured channel name")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The call was made; `outcome` and `message` say what it proved", body = TestSendBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No destination stored", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The channel's egress interval does not allow a call yet; see `Retry-After`",
         body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn test_send(
    State(state): State<ApiState>,
    _: UserAccess,
    ApiPath((user_id, channel)): ApiPath<(String, String)>,
) -> Result<Response, Problem> {
    let (user, name, adapter) = path(&state, &user_id, &channel)?;
    let Some(stored) = state.prefs.destination(&user, &name).await? else {
        return Err(no_destination());
    };
    let rules = adapter.rules();
    // As in the worker: measured from before the clock is read, so the slot's age is never understated.
    let clock_read = Instant::now();
    let now = state.clock.now().await?;
    if let EgressDecision::DeferUntil(until) = state.store.reserve_egress(&name, &rules, now).await? {
        return Ok(too_soon(until.since(now)));
    }
    let destination = state.cipher.decrypt(&user, &name, &stored).map_err(|error| {
        tracing::error!(%error, "test send: destination could not be decrypted");
        Problem::internal()
    })?;
    let reference = format!("test-{user}-{name}-{}", now.as_millis());
    let message = OutboundMessage {
        idempotency_key: IdempotencyKey::for_test_send(&reference),
        reference: reference.clone(),
        destination,
        text: adapter.outbound_text(TEST_TEXT, None),
        ttl_seconds: 300,
    };
    if !slot_kept(rules.min_interval, rules.egress_guard, clock_read.elapsed()) {
        // Too late for the slot just reserved; not called, like a worker that misses it.
        return Ok(too_soon(rules.min_interval + rules.egress_guard));
    }
    let classified = adapter.send(&message).await;
    let (outcome, words) = match classified.observation {
        Observation::Accepted { .. } | Observation::AcceptedReplay { .. } | Observation::QueryFound { .. } => {
            ("accepted", ACCEPTED_WORDS.to_owned())
        }
        // A connection that never opened is not the channel's refusal: nothing reached it.
        Observation::RetryableReject { .. } if classified.detail.starts_with("not sent") => {
            ("not_sent", NOT_SENT_WORDS.to_owned())
        }
        Observation::Rejected | Observation::RetryableReject { .. } => {
            let why = classified.detail.strip_prefix("refused: ").unwrap_or(&classified.detail);
            ("refused", format!("the channel refused: {why}"))
        }
        Observation::Timeout | Observation::IoError | Observation::QueryFailed | Observation::QueryNotFound => {
            ("unknown", UNKNOWN_WORDS.to_owned())
        }
    };
    if outcome == "accepted" {
        // What the user will confirm is this destination; a later change makes the confirmation moot.
        state.prefs.record_test_accepted(&user, &name, &stored).await?;
    }
    tracing::info!(channel = %name, outcome, "test send");
    let verified = state.prefs.get(&user, &name).await?.is_some_and(|p| p.verified);
    let body = TestSendBody {
        channel: name.to_string(),
        reference,
        outcome: outcome.to_owned(),
        message: words,
        confirmation: if outcome == "accepted" { "pending" } else { "not requested" }.to_owned(),
        verified,
    };
    Ok(Json(body).into_response())
}

/// Confirm that a test prompt arrived: marks the stored destination verified.
#[utoipa::path(
    post, path = "/v1/users/{user_id}/channels/{channel}/confirm", tag = "preferences",
    params(("user_id" = String, Path), ("channel" = String, Path, description = "a configured channel name")),
    security(("bearer" = [])),
    responses(
        (status = 200, body = PreferenceBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No destination stored, or no accepted test send to the stored destination",
         body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn confirm(
    State(state): State<ApiState>,
    _: UserAccess,
    ApiPath((user_id, channel)): ApiPath<(String, String)>,
) -> Result<Json<PreferenceBody>, Problem> {
    let (user, name, _) = path(&state, &user_id, &channel)?;
    if !state.prefs.mark_verified(&user, &name).await? {
        let stored = state.prefs.get(&user, &name).await?;
        return Err(if stored.is_some_and(|p| p.has_destination) { nothing_to_confirm() } else { no_destination() });
    }
    let pref = state.prefs.get(&user, &name).await?.ok_or_else(no_destination)?;
    Ok(Json(PreferenceBody::from(&pref)))
}
