//! The console's audit page (`/console/audit`, issue 43): the trail of human acts, newest first, filtered
//! by actor, action and time, for operators whose role has `view_audit` (admins) — the same use case as
//! `GET /v1/audit`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use herald_domain::operators::AuditAction;
use herald_ports::{AuditEvent, AuditFilter};
use maud::{html, Markup};
use serde::Deserialize;

use super::pages::moment;
use super::roles::RoleWords;
use super::Visit;
use crate::paging::next_page;
use crate::state::ApiState;
use herald_core::usecases::Actor;

const PAGE: u32 = 50;

#[derive(Deserialize, Default)]
pub struct AuditForm {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    before: Option<i64>,
}

fn day(text: &str, end: bool) -> Option<herald_domain::Timestamp> {
    let date = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").ok()?;
    let date = if end { date.succ_opt()? } else { date };
    Some(herald_domain::Timestamp(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis()))
}

pub async fn audit(
    Visit { ctx, who: actor }: Visit<Actor>,
    State(state): State<ApiState>,
    Query(form): Query<AuditForm>,
) -> Response {
    let roles = ctx.lang.roles();
    let action = form.action.trim().parse::<AuditAction>().ok();
    let (since, until) = (day(&form.since, false), day(&form.until, true));
    let bad_day =
        (!form.since.trim().is_empty() && since.is_none()) || (!form.until.trim().is_empty() && until.is_none());
    let filter = AuditFilter {
        actor: Some(form.actor.trim().to_owned()).filter(|a| !a.is_empty()),
        action,
        since,
        until,
        before: form.before,
        limit: PAGE + 1,
    };
    let mut events = match herald_core::usecases::audit_page(&state.services(), &actor, &filter).await {
        Ok(events) => events,
        Err(error) => return ctx.failed(error),
    };
    let next = next_page(&mut events, PAGE, |last| last.id).map(|id| {
        format!(
            "/console/audit?actor={}&action={}&since={}&until={}&before={id}",
            super::encode_path(form.actor.trim()),
            action.map_or("", AuditAction::as_str),
            super::encode_path(form.since.trim()),
            super::encode_path(form.until.trim())
        )
    });
    let flash = bad_day.then(|| super::pages::Flash::Error(roles.audit_bad_day.to_owned()));
    let status = if bad_day { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    ctx.page(status, roles.audit_title, flash, page(roles, &form, action, &events, next))
}

fn page(
    w: &RoleWords,
    form: &AuditForm,
    action: Option<AuditAction>,
    events: &[AuditEvent],
    next: Option<String>,
) -> Markup {
    html! {
        p { (w.audit_intro) }
        form.filters method="get" action="/console/audit" {
            // Each label with its field: they wrap onto the next line together, never apart.
            span.field {
                label for="a-actor" { (w.audit_actor) }
                input #a-actor type="text" name="actor" value=(form.actor.trim()) maxlength="128";
            }
            span.field {
                label for="a-action" { (w.audit_action) }
                select #a-action name="action" {
                    option value="" { (w.audit_any) }
                    @for a in AuditAction::ALL {
                        option value=(a.as_str()) selected[action == Some(a)] { (w.action(a)) }
                    }
                }
            }
            span.field {
                label for="a-since" { (w.audit_since) }
                input #a-since type="date" name="since" value=(form.since.trim());
            }
            span.field {
                label for="a-until" { (w.audit_until) }
                input #a-until type="date" name="until" value=(form.until.trim());
            }
            button type="submit" { (w.audit_filter) }
        }
        @if events.is_empty() {
            p { (w.audit_none) }
        } @else {
            div.scroll { table.audit {
                thead { tr {
                    th scope="col" { (w.audit_when) } th scope="col" { (w.audit_actor) }
                    th scope="col" { (w.audit_role) } th scope="col" { (w.audit_action) }
                    th scope="col" { (w.audit_target) } th scope="col" { (w.audit_detail) }
                } }
                tbody { @for e in events {
                    tr {
                        td { (moment(e.event.at)) }
                        td { (e.event.actor.label()) }
                        td { (w.role(e.event.actor.role)) }
                        td { (w.action(e.event.action)) " " code { (e.event.action) } }
                        td { (e.event.target) }
                        td { (e.event.detail) }
                    }
                } }
            } }
        }
        @if let Some(href) = next { p { a #older href=(href) { (w.audit_older) " →" } } }
    }
}
