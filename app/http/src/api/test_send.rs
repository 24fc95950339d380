//! The settings page's test send and confirmation (SPEC §9): `POST /v1/users/{user_id}/channels/{channel}/test`
//! and `POST …/confirm`.
//!
//! A test send goes through the same registry, adapter and classification as a delivery, and through the
//! same egress interval (the per-channel row a claim locks), so a user pressing "test" cannot make Herald
//! call Miaotixing faster than its 10 s. What it proves is told in words a user understands, and never
//! more than it proves: an acceptance only asks the user to confirm the prompt really arrived
//! (verification is the user's confirmation, `…/confirm`); a refusal neither verifies nor deletes the
//! destination; an unanswered call says that we could not tell.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_domain::{ChannelName, Millis, UserId};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::UserAccess;
use super::extract::ApiPath;
use super::model::{Errors, PreferenceBody};
use super::problem::Problem;
use crate::state::ApiState;
use herald_core::usecases::{self, TestOutcome, TestSendError};

pub use herald_core::usecases::TEST_TEXT;

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
    /// The reference the channel saw: `test-` and a random UUID (nothing of the user in it).
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

/// Validates the path, naming the field.
fn path(state: &ApiState, user_id: &str, channel: &str) -> Result<(UserId, ChannelName), Problem> {
    let mut errors = Errors::default();
    errors.user_id("user_id", Some(user_id));
    let name = ChannelName::new(channel);
    if !usecases::is_configured(&state.services(), &name) {
        errors.add("channel", "is not a configured channel");
    }
    errors.finish(|| Some(()))?;
    Ok((UserId::new(user_id), name))
}

impl From<TestSendError> for Problem {
    fn from(error: TestSendError) -> Self {
        match error {
            TestSendError::UnknownChannel => {
                Problem::validation(vec![super::FieldError::new("channel", "is not a configured channel")])
            }
            TestSendError::NoDestination => no_destination(),
            TestSendError::NothingToConfirm => nothing_to_confirm(),
            TestSendError::TooSoon(_) | TestSendError::QuotaExceeded(_) | TestSendError::Undecryptable => {
                Problem::internal()
            }
            TestSendError::Forbidden(refused) => refused.into(),
            TestSendError::Store(store) => Problem::from_store(&store),
        }
    }
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

/// 429 with `Retry-After` (whole seconds, rounded up): real deliveries come first — one is due on this
/// rate-limited channel, or its egress interval does not allow a call yet.
fn too_soon(wait: Millis) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    with_retry_after(
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-soon",
            "Too soon for this channel",
            format!("this channel allows one call per interval and deliveries go first; try again in {seconds} s"),
        ),
        seconds,
    )
}

/// 429 with `Retry-After`: this user's test sends on this channel are spent (`[test_send]`).
fn quota_spent(wait: Millis, quota: herald_domain::TestSendQuota) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    with_retry_after(
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "test-send-quota",
            "Test-send quota spent",
            format!(
                "at most {} test send(s) a minute and {} a day per user and channel; try again in {seconds} s",
                quota.per_minute, quota.per_day
            ),
        ),
        seconds,
    )
}

fn with_retry_after(problem: Problem, seconds: u64) -> Response {
    let mut response = problem.into_response();
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
        (status = 429, description = "The user's test-send quota on this channel is spent (`test-send-quota`), or real deliveries come first on this rate-limited channel (`too-soon`); see `Retry-After`",
         body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The user was erased: nothing of theirs is answered and nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn test_send(
    State(state): State<ApiState>,
    UserAccess(operator): UserAccess,
    ApiPath((user_id, channel)): ApiPath<(String, String)>,
) -> Result<Response, Problem> {
    let (user, name) = path(&state, &user_id, &channel)?;
    let sent = match usecases::test_send(&state.services(), &user, operator.as_ref(), &name).await {
        Ok(sent) => sent,
        Err(TestSendError::TooSoon(wait)) => return Ok(too_soon(wait)),
        Err(TestSendError::QuotaExceeded(wait)) => return Ok(quota_spent(wait, state.services.test_send_quota)),
        Err(error) => return Err(error.into()),
    };
    let (outcome, words) = match &sent.outcome {
        TestOutcome::Accepted => ("accepted", ACCEPTED_WORDS.to_owned()),
        TestOutcome::NotSent => ("not_sent", NOT_SENT_WORDS.to_owned()),
        TestOutcome::Refused { why } => ("refused", format!("the channel refused: {why}")),
        TestOutcome::Unknown => ("unknown", UNKNOWN_WORDS.to_owned()),
    };
    let body = TestSendBody {
        channel: name.to_string(),
        reference: sent.reference,
        outcome: outcome.to_owned(),
        message: words,
        confirmation: if outcome == "accepted" { "pending" } else { "not requested" }.to_owned(),
        verified: sent.verified,
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
        (status = 410, description = "The user was erased: nothing of theirs is answered and nothing was written", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn confirm(
    State(state): State<ApiState>,
    UserAccess(operator): UserAccess,
    ApiPath((user_id, channel)): ApiPath<(String, String)>,
) -> Result<Json<PreferenceBody>, Problem> {
    let (user, name) = path(&state, &user_id, &channel)?;
    let pref = usecases::confirm(&state.services(), &user, operator.as_ref(), &name).await?;
    Ok(Json(PreferenceBody::from(&pref)))
}
