//! The wire types of the API and the validation that turns a request into domain values.
//!
//! Required fields are `Option` on the wire so that a missing field is reported by our validation, with
//! every other problem of the same request, instead of serde stopping at the first one.

use std::collections::HashSet;

use chrono::{DateTime, SecondsFormat, Utc};
use herald_domain::resolve::FinalState;
use herald_domain::{EventKey, Millis, ThreadKey, Timestamp, UserId};
use herald_ports::{AttemptView, ChannelPref, Created, NewNotification, TaskSummary, TaskView};
use secrecy::SecretString;
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use super::problem::{FieldError, Problem};

pub use herald_domain::ids::MAX_USER_ID_CHARS;
pub const MAX_EVENT_KEY_CHARS: usize = 256;
pub const MAX_THREAD_KEY_CHARS: usize = 256;
/// The longest body, in characters (as JSON Schema's `maxLength` counts them, so the document can state it).
pub const MAX_BODY_CHARS: usize = 16 * 1024;
pub const MAX_TTL_SECONDS: i64 = 30 * 24 * 3600;
pub const MAX_ATTEMPTS: i64 = 20;
pub const MAX_RECIPIENTS: usize = 1000;
pub const MAX_NOTE_CHARS: usize = 2000;
pub use herald_core::usecases::MAX_DESTINATION_CHARS;

/// An RFC 3339 UTC timestamp with milliseconds.
#[must_use]
pub fn rfc3339(at: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_millis(at.as_millis())
        .map_or_else(|| at.as_millis().to_string(), |t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// Collects every field problem of one request.
#[derive(Debug, Default)]
pub struct Errors(Vec<FieldError>);

impl Errors {
    pub fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(field, message));
    }

    /// A required, non-empty text of at most `max` characters without control characters.
    pub fn text<'a>(&mut self, field: &str, value: Option<&'a str>, max: usize) -> Option<&'a str> {
        let Some(value) = value else {
            self.add(field, "is required");
            return None;
        };
        self.optional_text(field, Some(value), max)
    }

    /// A required user id of the documented set (`herald_domain::check_user_id`).
    pub fn user_id<'a>(&mut self, field: &str, value: Option<&'a str>) -> Option<&'a str> {
        let Some(value) = value else {
            self.add(field, "is required");
            return None;
        };
        match herald_domain::check_user_id(value) {
            Ok(()) => Some(value),
            Err(problem) => {
                self.add(field, problem.to_string());
                None
            }
        }
    }

    pub fn optional_text<'a>(&mut self, field: &str, value: Option<&'a str>, max: usize) -> Option<&'a str> {
        let value = value?;
        if value.trim().is_empty() {
            self.add(field, "must not be empty");
            None
        } else if value.chars().count() > max {
            self.add(field, format!("must be at most {max} characters"));
            None
        } else if value.chars().any(char::is_control) {
            self.add(field, "must not contain control characters");
            None
        } else {
            Some(value)
        }
    }

    fn body<'a>(&mut self, value: Option<&'a str>) -> Option<&'a str> {
        match value {
            None => {
                self.add("body", "is required");
                None
            }
            Some(body) if body.trim().is_empty() => {
                self.add("body", "must not be empty");
                None
            }
            Some(body) if body.chars().count() > MAX_BODY_CHARS => {
                self.add("body", format!("must be at most {MAX_BODY_CHARS} characters"));
                None
            }
            // Line breaks are fine in a body; NUL is not storable as PostgreSQL text.
            Some(body) if body.contains('\0') => {
                self.add("body", "must not contain NUL characters");
                None
            }
            Some(body) => Some(body),
        }
    }

    fn ttl(&mut self, value: Option<i64>) -> Option<Millis> {
        match value {
            None => {
                self.add("ttl_seconds", "is required");
                None
            }
            Some(ttl) if !(1..=MAX_TTL_SECONDS).contains(&ttl) => {
                self.add("ttl_seconds", format!("must be between 1 and {MAX_TTL_SECONDS} (30 days)"));
                None
            }
            Some(ttl) => Some(Millis::from_secs(ttl.unsigned_abs())),
        }
    }

    fn max_attempts(&mut self, value: Option<i64>) -> Option<u32> {
        let value = value?;
        if (1..=MAX_ATTEMPTS).contains(&value) {
            u32::try_from(value).ok()
        } else {
            self.add("max_attempts", format!("must be between 1 and {MAX_ATTEMPTS}"));
            None
        }
    }

    /// `Ok(value)` when nothing was added, else the 422 problem naming every field.
    pub fn finish<T>(self, value: impl FnOnce() -> Option<T>) -> Result<T, Problem> {
        if self.0.is_empty() {
            value().ok_or_else(Problem::internal)
        } else {
            Err(Problem::validation(self.0))
        }
    }
}

/// A whole number, also when written with a zero fraction (`3600.0`): JSON Schema's `integer` admits
/// it, so the server does too. Anything else is refused with the field named (400).
fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else { return Ok(None) };
    if let Some(n) = number.as_i64() {
        return Ok(Some(n));
    }
    match number.as_f64() {
        // Beyond ±2^53 a float is not an exact integer any more; such values are out of every range here.
        Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 =>
        {
            #[allow(clippy::cast_possible_truncation)]
            Ok(Some(f as i64))
        }
        _ => Err(serde::de::Error::custom(format!("invalid value: {number}, expected a whole number"))),
    }
}

/// `POST /v1/notifications`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitNotification {
    /// The business service's id of the user, at most 128 characters.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9._@:+-]{1,128}$",
        example = "user-42"
    )]
    pub user_id: Option<String>,
    /// The business key of the event; `(user_id, event_key)` is deduplicated. At most 256 characters.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$",
        example = "order-1001-shipped"
    )]
    pub event_key: Option<String>,
    /// The text shown in the inbox: 1 to 16384 characters, not blank, no NUL.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 16384,
        pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$",
        example = "Your order ord-1001 has shipped"
    )]
    pub body: Option<String>,
    /// Time to live; an attempt after it is not made. 1 second to 30 days.
    #[schema(required = true, nullable = false, minimum = 1, maximum = 2592000, example = 3600)]
    #[serde(default, deserialize_with = "whole_number")]
    pub ttl_seconds: Option<i64>,
    /// Overrides the channels' attempt budgets, 1 to 20.
    #[schema(minimum = 1, maximum = 20)]
    #[serde(default, deserialize_with = "whole_number")]
    pub max_attempts: Option<i64>,
    /// Groups notifications of one subject for digests, at most 256 characters.
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub thread_key: Option<String>,
}

impl SubmitNotification {
    pub fn validate(&self) -> Result<NewNotification, Problem> {
        let mut errors = Errors::default();
        let user = errors.user_id("user_id", self.user_id.as_deref());
        let key = errors.text("event_key", self.event_key.as_deref(), MAX_EVENT_KEY_CHARS);
        let body = errors.body(self.body.as_deref());
        let ttl = errors.ttl(self.ttl_seconds);
        let max_attempts = errors.max_attempts(self.max_attempts);
        let thread = errors.optional_text("thread_key", self.thread_key.as_deref(), MAX_THREAD_KEY_CHARS);
        errors.finish(|| {
            Some(NewNotification {
                user_id: UserId::new(user?),
                event_key: EventKey::new(key?),
                body: body?.to_owned(),
                ttl: ttl?,
                max_attempts,
                thread_key: thread.map(ThreadKey::new),
                submitted_by: None,
            })
        })
    }
}

/// `POST /v1/events`: one notification per recipient, each deduplicated on `(recipient, event_key)`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitEvent {
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$",
        example = "order-1001-shipped"
    )]
    pub event_key: Option<String>,
    /// 1 to 1000 distinct user ids (each as `user_id` of a notification).
    #[schema(required = true, nullable = false, min_items = 1, max_items = 1000)]
    pub recipients: Option<Vec<String>>,
    /// As a notification's `body`.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 16384,
        pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
    )]
    pub body: Option<String>,
    #[schema(required = true, nullable = false, minimum = 1, maximum = 2592000)]
    #[serde(default, deserialize_with = "whole_number")]
    pub ttl_seconds: Option<i64>,
    #[schema(minimum = 1, maximum = 20)]
    #[serde(default, deserialize_with = "whole_number")]
    pub max_attempts: Option<i64>,
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub thread_key: Option<String>,
}

impl SubmitEvent {
    pub fn validate(&self) -> Result<Vec<NewNotification>, Problem> {
        let mut errors = Errors::default();
        let key = errors.text("event_key", self.event_key.as_deref(), MAX_EVENT_KEY_CHARS);
        let mut users = Vec::new();
        match &self.recipients {
            None => errors.add("recipients", "is required"),
            Some(list) if list.is_empty() => errors.add("recipients", "must name at least one user"),
            Some(list) if list.len() > MAX_RECIPIENTS => {
                errors.add("recipients", format!("must name at most {MAX_RECIPIENTS} users"));
            }
            Some(list) => {
                let mut seen = HashSet::new();
                for (i, user) in list.iter().enumerate() {
                    let field = format!("recipients[{i}]");
                    if let Some(user) = errors.user_id(&field, Some(user)) {
                        if seen.insert(user) {
                            users.push(user);
                        } else {
                            errors.add(field, "is named twice");
                        }
                    }
                }
            }
        }
        let body = errors.body(self.body.as_deref());
        let ttl = errors.ttl(self.ttl_seconds);
        let max_attempts = errors.max_attempts(self.max_attempts);
        let thread = errors.optional_text("thread_key", self.thread_key.as_deref(), MAX_THREAD_KEY_CHARS);
        errors.finish(|| {
            let (key, body, ttl) = (key?, body?, ttl?);
            Some(
                users
                    .iter()
                    .map(|user| NewNotification {
                        user_id: UserId::new(*user),
                        event_key: EventKey::new(key),
                        body: body.to_owned(),
                        ttl,
                        max_attempts,
                        thread_key: thread.map(ThreadKey::new),
                        submitted_by: None,
                    })
                    .collect(),
            )
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskSummaryBody {
    pub task_id: i64,
    /// The reference channels know the task by: `ref` on the wire, `ntf-{reference}` as idempotency key.
    pub reference: String,
    pub channel: String,
    /// `PENDING`, `SENDING`, `SENT`, `FAILED`, `SUPPRESSED` or `UNKNOWN`.
    pub state: String,
}

impl From<&TaskSummary> for TaskSummaryBody {
    fn from(task: &TaskSummary) -> Self {
        TaskSummaryBody {
            task_id: task.task_id.0,
            reference: task.reference.clone(),
            channel: task.channel.to_string(),
            state: task.state.to_string(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedBody {
    /// The notification's id: opaque (a random UUID), never a count.
    #[schema(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub notification_id: String,
    /// False when the `(user_id, event_key)` was submitted before; the existing tasks are returned.
    pub created: bool,
    /// One task per enabled channel whose prompt is this notification's own. Empty for an in-app-only
    /// notification — and for one whose every prompt was merged into a digest (see `merged`).
    pub tasks: Vec<TaskSummaryBody>,
    /// Channels on which the prompt was merged into another notification's digest task (SPEC §7): no
    /// task of its own; the digest will mention it. The inbox item is kept either way. Absent when no
    /// prompt was merged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<MergedBody>,
}

/// A prompt merged into a digest.
#[derive(Debug, Serialize, ToSchema)]
pub struct MergedBody {
    pub channel: String,
    /// The digest task that carries this event's prompt.
    pub digest_task_id: i64,
}

impl From<&Created> for CreatedBody {
    fn from(created: &Created) -> Self {
        CreatedBody {
            notification_id: created.notification_ref.to_string(),
            created: created.created,
            tasks: created.tasks.iter().map(TaskSummaryBody::from).collect(),
            merged: created
                .merged
                .iter()
                .map(|m| MergedBody { channel: m.channel.to_string(), digest_task_id: m.digest_task_id.0 })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RecipientCreated {
    pub user_id: String,
    #[serde(flatten)]
    pub notification: CreatedBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventCreatedBody {
    pub event_key: String,
    /// In the order of `recipients`.
    pub notifications: Vec<RecipientCreated>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptBody {
    pub attempt_no: i32,
    /// `SEND` or `QUERY`; null for claim-time and manual rows, which call no channel.
    pub action: Option<String>,
    /// What this attempt observed (`ACCEPTED`, `TIMEOUT`, …); null while it is running.
    pub outcome: Option<String>,
    /// An observation that arrived after the attempt had been superseded.
    pub late_outcome: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub detail: Option<String>,
    /// The note a person wrote with a manual resolution (`MANUAL_*` rows); not an error.
    pub note: Option<String>,
}

impl From<&AttemptView> for AttemptBody {
    fn from(a: &AttemptView) -> Self {
        AttemptBody {
            attempt_no: a.attempt_no,
            action: a.action.map(|x| x.to_string()),
            outcome: a.outcome.map(|x| x.to_string()),
            late_outcome: a.late_outcome.map(|x| x.to_string()),
            started_at: rfc3339(a.started_at),
            finished_at: a.finished_at.map(rfc3339),
            detail: a.detail.clone(),
            note: a.note.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskBody {
    pub task_id: i64,
    /// The reference channels know the task by: `ref` on the wire, `ntf-{reference}` as idempotency key.
    pub reference: String,
    pub channel: String,
    pub state: String,
    pub needs_review: bool,
    /// An earlier attempt may have been accepted.
    pub outcome_uncertain: bool,
    /// `UNKNOWN`, needing review and never scheduled again: waiting for a human (SPEC §6).
    pub parked: bool,
    pub attempt_count: u32,
    pub next_attempt_at: Option<String>,
    pub provider_msg_id: Option<String>,
    pub last_error: Option<String>,
    pub digest_count: Option<u32>,
    /// How a person settled the task, when one did: shown as a human decision, never as the channel's
    /// acceptance.
    pub resolution: Option<ResolutionBody>,
    /// Oldest first.
    pub attempts: Vec<AttemptBody>,
}

/// A manual resolution as views show it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResolutionBody {
    /// `SENT`, `FAILED` or `RESEND`.
    pub final_state: String,
    /// The operator's note.
    pub note: String,
    /// Who decided: an operator's name, `token NAME` or `cli USER` (absent for decisions recorded before
    /// operators had names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// In words: "marked sent by an operator: {note}" (the words every view shares, a user's inbox
    /// included, which names no operator; `by` says who).
    pub text: String,
}

impl From<&TaskView> for TaskBody {
    fn from(t: &TaskView) -> Self {
        TaskBody {
            task_id: t.task_id.0,
            reference: t.reference.clone(),
            channel: t.channel.to_string(),
            state: t.state.to_string(),
            needs_review: t.needs_review,
            outcome_uncertain: t.outcome_uncertain,
            parked: t.is_parked(),
            attempt_count: t.attempt_count,
            next_attempt_at: t.next_attempt_at.map(rfc3339),
            provider_msg_id: t.provider_msg_id.clone(),
            last_error: t.last_error.clone(),
            digest_count: t.digest_count,
            resolution: t.manual_resolution().map(|(decision, note)| ResolutionBody {
                final_state: decision.as_str().to_owned(),
                note: note.to_owned(),
                by: t.resolution_by().map(str::to_owned),
                text: format!("{}: {note}", herald_core::usecases::decision_words(decision)),
            }),
            attempts: t.attempts.iter().map(AttemptBody::from).collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationBody {
    /// The notification's id: opaque (a random UUID), never a count.
    #[schema(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub notification_id: String,
    pub user_id: String,
    pub event_key: String,
    pub thread_key: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub tasks: Vec<TaskBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewTaskBody {
    /// The notification's id: opaque (a random UUID), never a count.
    #[schema(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub notification_id: String,
    pub user_id: String,
    #[serde(flatten)]
    pub task: TaskBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewBody {
    /// Parked tasks, oldest first.
    pub tasks: Vec<ReviewTaskBody>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A channel destination as sent by the client; held as a secret from the moment it is decoded.
pub struct Destination(pub SecretString);

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Destination([redacted])")
    }
}

impl<'de> Deserialize<'de> for Destination {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|s| Destination(SecretString::from(s)))
    }
}

/// `PUT /v1/users/{user_id}/channels/{channel}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPreference {
    /// The address or channel code. Stored only encrypted and never returned. Absent: keep the stored one.
    #[schema(value_type = Option<String>, min_length = 1, max_length = 1024, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$")]
    pub destination: Option<Destination>,
    #[schema(required = true, nullable = false)]
    pub enabled: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PreferenceBody {
    pub user_id: String,
    pub channel: String,
    pub enabled: bool,
    /// Whether a destination is stored; the destination itself is never returned.
    pub has_destination: bool,
    pub verified: bool,
    pub version: i64,
    /// `"subscription expired"` when the push service said the stored Web Push subscription is gone
    /// (404/410): the channel was switched off until a new subscription is given. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl From<&ChannelPref> for PreferenceBody {
    fn from(p: &ChannelPref) -> Self {
        PreferenceBody {
            user_id: p.user_id.to_string(),
            channel: p.channel.to_string(),
            enabled: p.enabled,
            has_destination: p.has_destination,
            verified: p.verified,
            version: p.version,
            status: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InboxChannelBody {
    pub channel: String,
    pub state: String,
    /// In words: "accepted by channel" (never "delivered"), "not sent: channel off", "failed", "expired",
    /// "outcome unknown — under review", "sending", "waiting to retry", "merged into a digest", and after
    /// a person's decision "marked sent by an operator: {note}" / "marked not sent by an operator: {note}".
    pub status_text: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InboxItemBody {
    /// The notification's id: opaque (a random UUID), never a count.
    #[schema(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub notification_id: String,
    pub body: String,
    pub created_at: String,
    pub read_at: Option<String>,
    /// "in-app only" when no channel was enabled; null otherwise.
    pub status_text: Option<String>,
    pub channels: Vec<InboxChannelBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InboxBody {
    /// Newest first.
    pub items: Vec<InboxItemBody>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// `POST /v1/tasks/{task_id}/resolve`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// What the person checking found out: `SENT` (it arrived), `FAILED` (it did not, do not send it
    /// again) or `RESEND` (it did not, send it again: the task returns to `PENDING` with a fresh budget).
    #[schema(required = true, nullable = false, pattern = "^(SENT|FAILED|RESEND)$", example = "FAILED")]
    pub final_state: Option<String>,
    /// Why; recorded with the manual attempt row.
    #[schema(
        required = true,
        nullable = false,
        min_length = 1,
        max_length = 2000,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub note: Option<String>,
}

impl ResolveRequest {
    pub fn validate(&self) -> Result<(FinalState, String), Problem> {
        let mut errors = Errors::default();
        let state = match self.final_state.as_deref() {
            None => {
                errors.add("final_state", "is required");
                None
            }
            Some(code) => match code.parse::<FinalState>() {
                Ok(state) => Some(state),
                Err(_) => {
                    errors.add("final_state", "must be \"SENT\", \"FAILED\" or \"RESEND\"");
                    None
                }
            },
        };
        let note = errors.text("note", self.note.as_deref(), MAX_NOTE_CHARS);
        errors.finish(|| Some((state?, note?.to_owned())))
    }
}

/// `POST /v1/users/{user_id}/sign-in-links`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignInLinkBody {
    /// The link's path and query, to be put after the installation's address:
    /// `/console/login/user?code=…`. The code is a one-time secret: send it only to the user.
    pub path: String,
    /// When the link stops working if it was not used.
    pub expires_at: String,
}

/// `POST /v1/users/{user_id}/inbox/{notification_id}/read`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadBody {
    /// The notification's id: opaque (a random UUID), never a count.
    #[schema(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub notification_id: String,
    /// When the item was first marked read.
    pub read_at: String,
    /// False when it had been read before (nothing changed).
    pub changed: bool,
}

/// The record of a user's erasure (SPEC §13): who asked, when, and what was removed. It holds none of
/// the user's content.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasureBody {
    /// The erased user; absent once the record is a pseudonymous tombstone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    pub requested_at: String,
    pub requested_by: String,
    /// True when this request erased the user; false for a repeat, which changed nothing.
    pub erased_now: bool,
    /// Tasks the erasure settled: suppressed, or closed as "outcome unknown" when an earlier attempt may
    /// have been accepted. None of them is handed to a channel again.
    pub settled_tasks: u32,
    /// Of those, tasks that were waiting for review and left the queue.
    pub released_reviews: u32,
    /// Channel preferences destroyed with their destinations.
    pub destroyed_destinations: u32,
    /// When the user's content (bodies, inbox) was removed, if it has been.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_removed_at: Option<String>,
    /// When the delivery records were removed, if they have been.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_removed_at: Option<String>,
    /// When the record became a tombstone, if it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tombstoned_at: Option<String>,
}

impl From<herald_ports::Erasure> for ErasureBody {
    fn from(e: herald_ports::Erasure) -> Self {
        let r = e.record;
        ErasureBody {
            user_id: r.user_id.map(|u| u.to_string()),
            requested_at: rfc3339(r.requested_at),
            requested_by: r.requested_by,
            erased_now: e.first,
            settled_tasks: r.settled_tasks,
            released_reviews: r.released_reviews,
            destroyed_destinations: r.destroyed_destinations,
            content_removed_at: r.content_removed.map(|(at, _)| rfc3339(at)),
            records_removed_at: r.records_removed.map(|(at, _)| rfc3339(at)),
            tombstoned_at: r.tombstoned_at.map(rfc3339),
        }
    }
}

/// Everything Herald holds about one user (SPEC §13), in one document. Destinations are never shown:
/// only whether one is set and whether the user verified it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExportBody {
    pub user_id: String,
    pub exported_at: String,
    /// The erasure record, when the user was erased.
    pub erasure: Option<ErasureBody>,
    pub channels: Vec<ExportChannelBody>,
    /// Every notification in the inbox, newest first.
    pub notifications: Vec<ExportNotificationBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExportChannelBody {
    pub channel: String,
    pub enabled: bool,
    /// `none`, `set` or `verified` — never the destination itself.
    pub destination: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExportNotificationBody {
    /// The notification's id: opaque (a random UUID), never a count.
    pub notification_id: String,
    pub event_key: Option<String>,
    pub body: String,
    pub thread_key: Option<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub read_at: Option<String>,
    pub tasks: Vec<TaskBody>,
}

impl From<herald_core::usecases::UserExport> for ExportBody {
    fn from(e: herald_core::usecases::UserExport) -> Self {
        ExportBody {
            user_id: e.user.to_string(),
            exported_at: rfc3339(e.exported_at),
            erasure: e.erasure.map(|record| herald_ports::Erasure { record, first: false }.into()),
            channels: e
                .channels
                .into_iter()
                .map(|p| ExportChannelBody {
                    channel: p.channel.to_string(),
                    enabled: p.enabled,
                    destination: match (p.has_destination, p.verified) {
                        (false, _) => "none",
                        (true, false) => "set",
                        (true, true) => "verified",
                    }
                    .to_owned(),
                })
                .collect(),
            notifications: e
                .notifications
                .into_iter()
                .map(|(item, view)| ExportNotificationBody {
                    notification_id: item.notification_ref.to_string(),
                    event_key: view.as_ref().map(|v| v.event_key.to_string()),
                    body: item.body,
                    thread_key: view.as_ref().and_then(|v| v.thread_key.as_ref().map(ToString::to_string)),
                    created_at: rfc3339(item.created_at),
                    expires_at: view.as_ref().map(|v| rfc3339(v.expires_at)),
                    read_at: item.read_at.map(rfc3339),
                    tasks: view.map(|v| v.tasks.iter().map(TaskBody::from).collect()).unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResolvedBody {
    pub task_id: i64,
    pub state: String,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LimitQuery {
    /// How many entries at most (default 50, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl LimitQuery {
    pub fn limit(&self, default: u32) -> Result<u32, Problem> {
        match self.limit {
            None => Ok(default),
            Some(n @ 1..=1000) => Ok(n),
            Some(_) => Err(Problem::validation(vec![FieldError::new("limit", "must be between 1 and 1000")])),
        }
    }
}

/// `?limit=&cursor=` of a paged list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// How many entries at most (default 50 for an inbox, 100 for the review list; at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Where the page starts: the `next_cursor` of the previous page, as it was given (opaque).
    pub cursor: Option<String>,
}

impl PageQuery {
    pub fn limit(&self, default: u32) -> Result<u32, Problem> {
        LimitQuery { limit: self.limit }.limit(default)
    }

    /// The position a cursor of list `kind` holds: `(time in ms, id)`, or `None` for the first page.
    ///
    /// # Errors
    /// A 400 problem naming `cursor` when it is not one this list gave.
    pub fn position(&self, kind: &str) -> Result<Option<(i64, i64)>, Problem> {
        let Some(text) = &self.cursor else { return Ok(None) };
        cursor_position(kind, text).map(Some).ok_or_else(bad_cursor)
    }

    /// The position an inbox cursor names: a time and a notification's opaque id.
    ///
    /// # Errors
    /// A 400 problem for a text that is not an inbox cursor.
    pub fn inbox_position(&self) -> Result<Option<(i64, herald_domain::NotificationRef)>, Problem> {
        let Some(text) = &self.cursor else { return Ok(None) };
        cursor_parts("inbox", text)
            .and_then(|(at, id)| Some((at, herald_domain::NotificationRef::parse(id)?)))
            .map(Some)
            .ok_or_else(bad_cursor)
    }
}

/// The answer to a cursor this list did not give.
fn bad_cursor() -> Problem {
    Problem {
        errors: vec![FieldError::new("cursor", "is not a cursor of this list; pass next_cursor as it was given")],
        ..Problem::new(
            axum::http::StatusCode::BAD_REQUEST,
            "bad-cursor",
            "Invalid cursor",
            "cursor: is not a cursor of this list",
        )
    }
}

/// The page cursor of list `kind`: its letter, then `{time in ms}.{id}` of the last entry shown — for the
/// inbox the notification's opaque id, for the review (operators only) the task id. Clients treat it as
/// opaque and pass it back as given; its pattern ([`cursor_pattern`]) is documented so that a
/// well-formed one is never refused.
#[must_use]
pub fn cursor(kind: &str, at_ms: i64, id: impl std::fmt::Display) -> String {
    format!("{}{at_ms}.{id}", cursor_letter(kind))
}

fn cursor_parts<'a>(kind: &str, text: &'a str) -> Option<(i64, &'a str)> {
    let rest = text.strip_prefix(cursor_letter(kind))?;
    let (at, id) = rest.split_once('.')?;
    if !(1..=15).contains(&at.len()) || !at.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((at.parse().ok()?, id))
}

fn cursor_position(kind: &str, text: &str) -> Option<(i64, i64)> {
    let (at, id) = cursor_parts(kind, text)?;
    if !(1..=18).contains(&id.len()) || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((at, id.parse().ok()?))
}

/// The letter a cursor of list `kind` starts with, so that one list's cursor is refused by another.
fn cursor_letter(kind: &str) -> char {
    if kind == "inbox" {
        'i'
    } else {
        'r'
    }
}

/// The pattern every cursor of list `kind` matches — and every string matching it is a position the list
/// accepts (a time in ms and an id, each within what the store holds), so `/openapi.json` can state it.
#[must_use]
pub fn cursor_pattern(kind: &str) -> String {
    if kind == "inbox" {
        let id = herald_domain::ids::NOTIFICATION_REF_PATTERN.trim_start_matches('^');
        format!(r"^{}[0-9]{{1,15}}\.{id}", cursor_letter(kind))
    } else {
        format!(r"^{}[0-9]{{1,15}}\.[0-9]{{1,18}}$", cursor_letter(kind))
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    pub status: String,
}

/// A status event (issue 46), as Herald posts it to a `[[status_subscription]]` endpoint — the body of the
/// `notificationStatus` webhook of the OpenAPI document. Only documented here: the HTTP sink of
/// `herald-channels` writes it, and `tests/tests/it/status_events.rs` checks every field it sends is one
/// of these.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusEventBody {
    /// `notification.` + the kind: `accepted` (the channel accepted the message, or a query found it — not
    /// "delivered"), `refused` (nothing was accepted), `parked` (the outcome of a call is unknown and a
    /// person must decide), `resolved` (a person decided), `sent_again` (Herald called the channel again
    /// for this delivery), `suppressed` (the user switched the channel off), `expired` (the notification
    /// expired before it could be sent).
    #[schema(example = "notification.accepted")]
    #[serde(rename = "type")]
    pub kind: String,
    /// When the change happened (RFC 3339, UTC), as `data.occurred_at`.
    pub timestamp: String,
    pub data: StatusEventData,
}

/// What a status event says. Never a destination; the notification's body only for a subscription with
/// `include_body = true`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusEventData {
    /// The notification's id, as `POST /v1/notifications` answered it.
    pub notification_id: String,
    /// The caller's event key.
    pub event_key: String,
    /// The channel of the delivery.
    pub channel: String,
    /// The number of the delivery attempt the event is about, as in the notification's attempts.
    pub attempt: u32,
    /// Larger for every later event of the same delivery (this notification on this channel): events may
    /// arrive out of order, and one may arrive more than once (same `webhook-id`); order by this. Two
    /// channels of one notification change independently: their events follow the moments they were written.
    pub sequence: i64,
    /// When the change happened (RFC 3339, UTC).
    pub occurred_at: String,
    /// `refused`: `rejected` (the channel refused it) or `attempts_exhausted` (every attempt the budget
    /// allowed was refused); `suppressed`: `preference_off`, `erased`, or `erased_outcome_unknown` (a delivery
    /// whose outcome was unknown — parked, or waiting for a retry or a query — closed by the user's erasure:
    /// it may have been accepted).
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// `resolved`: `marked_sent`, `marked_not_sent` or `send_again`.
    #[schema(nullable = false)]
    pub decision: Option<String>,
    /// `resolved`: who decided, as the audit trail names them — an operator's name, `token NAME` for an
    /// operator token, `cli NAME` for `herald resolve`.
    #[schema(nullable = false)]
    pub actor: Option<String>,
    /// `accepted`: the channel's id of the message, when it gave one.
    #[schema(nullable = false)]
    pub channel_message_id: Option<String>,
    /// The notification's body, only for a subscription with `include_body = true`.
    #[schema(nullable = false)]
    pub body: Option<String>,
}
