//! `GET /v1/audit`: the audit trail (issue 43), newest first, filtered by actor, action and time, a page
//! at a time. Reading it needs the capability `view_audit` (admins).

use axum::extract::State;
use axum::Json;
use chrono::DateTime;
use herald_domain::operators::AuditAction;
use herald_domain::Timestamp;
use herald_ports::{AuditEvent, AuditFilter};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Operator;
use super::extract::ApiQuery;
use super::model::{rfc3339, Errors};
use super::problem::Problem;
use crate::paging::next_page;
use crate::state::ApiState;

/// The filters of the audit trail.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this actor's events: an operator's name, or a token's or the command line's name (empty or
    /// blank: any actor).
    #[param(pattern = r"^[^\u0000-\u001F\u007F-\u009F]{0,128}$")]
    pub actor: Option<String>,
    /// Only this action: `mark_sent`, `mark_not_sent`, `send_again`, `test_send`, `rotate_keys`,
    /// `erase_user`, `sign_in`, `sign_out` (empty: any action).
    #[param(pattern = "^(|mark_sent|mark_not_sent|send_again|test_send|rotate_keys|erase_user|sign_in|sign_out)$")]
    pub action: Option<String>,
    /// Only events at or after this time (RFC 3339).
    #[param(format = DateTime)]
    pub since: Option<String>,
    /// Only events before this time (RFC 3339).
    #[param(format = DateTime)]
    pub until: Option<String>,
    /// Only events before this one: the `next_before` of the previous page.
    #[param(minimum = 1)]
    pub before: Option<i64>,
    /// How many events at most (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// One human act.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEventBody {
    /// Its place in the trail (ascending with time).
    pub id: i64,
    pub at: String,
    /// How the actor signed in: `operator` (the identity provider), `token` (a named operator token) or
    /// `cli` (the command line).
    pub actor_kind: String,
    pub actor: String,
    /// The actor's role when it acted.
    pub role: String,
    pub action: String,
    /// What it acted on (`task 42`, `user alice on push`); empty when nothing in particular.
    pub target: String,
    /// The note, or what came of it.
    pub detail: String,
}

/// A page of the trail, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditBody {
    pub events: Vec<AuditEventBody>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    pub next_before: Option<i64>,
}

fn time(errors: &mut Errors, field: &str, value: Option<&str>) -> Option<Timestamp> {
    let text = value?;
    match DateTime::parse_from_rfc3339(text.trim()) {
        Ok(at) => Some(Timestamp(at.timestamp_millis())),
        Err(_) => {
            errors.add(field, "must be an RFC 3339 time, such as 2026-01-31T08:00:00Z");
            None
        }
    }
}

impl AuditQuery {
    /// The store's filter, or a 422 naming every field that is not acceptable.
    ///
    /// # Errors
    /// The problem naming each bad field.
    pub fn filter(&self) -> Result<AuditFilter, Problem> {
        let mut errors = Errors::default();
        let action = match self.action.as_deref().filter(|a| !a.is_empty()) {
            Some(text) => match text.parse::<AuditAction>() {
                Ok(action) => Some(action),
                Err(_) => {
                    let known: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
                    errors.add("action", format!("must be one of {}", known.join(", ")));
                    None
                }
            },
            None => None,
        };
        let given = self.actor.as_deref().filter(|a| !a.trim().is_empty());
        if given.is_some_and(|a| !herald_domain::operators::valid_name(a)) {
            errors.add("actor", "must be 1 to 128 characters, without control characters");
        }
        let since = time(&mut errors, "since", self.since.as_deref());
        let until = time(&mut errors, "until", self.until.as_deref());
        if self.before.is_some_and(|b| b < 1) {
            errors.add("before", "must be at least 1");
        }
        let limit = self.limit.unwrap_or(50);
        if !(1..=herald_core::usecases::MAX_AUDIT_PAGE).contains(&limit) {
            errors.add("limit", format!("must be between 1 and {}", herald_core::usecases::MAX_AUDIT_PAGE));
        }
        errors.finish(|| {
            Some(AuditFilter {
                actor: given.map(|a| a.trim().to_owned()),
                action,
                since,
                until,
                before: self.before,
                limit,
            })
        })
    }
}

impl From<&AuditEvent> for AuditEventBody {
    fn from(e: &AuditEvent) -> Self {
        AuditEventBody {
            id: e.id,
            at: rfc3339(e.event.at),
            actor_kind: e.event.actor.kind.as_str().to_owned(),
            actor: e.event.actor.name.clone(),
            role: e.event.actor.role.as_str().to_owned(),
            action: e.event.action.as_str().to_owned(),
            target: e.event.target.clone(),
            detail: e.event.detail.clone(),
        }
    }
}

/// The audit trail: every human act (decisions on parked tasks, test sends on a user's behalf, key
/// rotations, operators' sign-ins and sign-outs), newest first. Append-only: nothing here is ever
/// changed or removed.
#[utoipa::path(
    get, path = "/v1/audit", tag = "audit",
    params(AuditQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AuditBody),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an operator token, or its role lacks `view_audit` (named in `capability`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_audit(
    State(state): State<ApiState>,
    Operator(actor): Operator,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditBody>, Problem> {
    let filter = query.filter()?;
    let more = AuditFilter { limit: filter.limit.saturating_add(1), ..filter.clone() };
    let mut events = herald_core::usecases::audit_page(&state.services(), &actor, &more).await?;
    let next_before = next_page(&mut events, filter.limit, |last| last.id);
    Ok(Json(AuditBody { events: events.iter().map(AuditEventBody::from).collect(), next_before }))
}
