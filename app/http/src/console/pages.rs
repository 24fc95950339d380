//! The console's HTML, as maud templates compiled into the binary. Every interpolated value is escaped
//! by maud; no page is given a destination (the preference read model has none), a token or a key.
//!
//! Accessibility: every page has a `<title>`, one `<h1>`, a skip link to `<main>`, landmarks (`header`,
//! `nav`, `main`), a label for every input, real `<button>`s and links (so every action is reachable by
//! keyboard in document order), tables with header cells, and status messages in `role="status"` /
//! `role="alert"` regions.

use herald_domain::{Capability, TaskState};
use herald_ports::{AttemptView, ChannelPref, InboxChannel, InboxItem, NotificationView, TaskView};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::i18n::{fill, Lang, Words};
use super::session::{Role, Session};
use crate::api::model::rfc3339;
use herald_core::usecases::ChannelOverview;

/// A message shown at the top of a page.
pub enum Flash {
    Info(String),
    Error(String),
}

/// What every page needs besides its content.
pub struct Frame<'a> {
    pub lang: Lang,
    pub session: Option<&'a Session>,
    /// The current path and query, for the language switch.
    pub here: &'a str,
    pub title: &'a str,
    pub flash: Option<Flash>,
}

fn switch_href(here: &str, to: Lang) -> String {
    let (path, query) = here.split_once('?').unwrap_or((here, ""));
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty() && !p.starts_with("lang=")).collect();
    let lang = format!("lang={}", to.code());
    params.push(&lang);
    format!("{path}?{}", params.join("&"))
}

/// The page around `content`.
pub fn layout(frame: Frame<'_>, content: Markup) -> Markup {
    let w = frame.lang.words();
    let other = if frame.lang == Lang::En { Lang::Zh } else { Lang::En };
    html! {
        (DOCTYPE)
        html lang=(frame.lang.html_lang()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (frame.title) " — " (w.product) }
                link rel="stylesheet" href="/console/static/console.css";
                script src="/console/static/console.js" defer {}
            }
            body {
                a.skip href="#main" { (w.skip) }
                header.top {
                    span.brand { (w.product) }
                    @if let Some(session) = frame.session {
                        nav aria-label=(w.product) {
                            ul {
                                @match &session.role {
                                    Role::Operator => {
                                        li { a href="/console/overview" { (w.nav_overview) } }
                                        li { a href="/console/review" { (w.nav_review) } }
                                        li { a href="/console/log" { (w.nav_log) } }
                                    }
                                    Role::User(_) => {
                                        li { a href="/console/me/inbox" { (w.nav_inbox) } }
                                        li { a href="/console/me/channels" { (w.nav_channels) } }
                                    }
                                }
                                li { a href="/console/me/sessions" { (w.nav_sessions) } }
                            }
                        }
                        span.who {
                            @match &session.role {
                                Role::Operator => { (w.signed_in_as_operator) }
                                Role::User(user) => { (w.signed_in_as_user) " " (user) }
                            }
                        }
                        form.inline method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" { (w.sign_out) }
                        }
                    }
                    a.lang href=(switch_href(frame.here, other)) hreflang=(other.html_lang()) lang=(other.html_lang()) { (w.switch_to) }
                }
                main #main tabindex="-1" {
                    h1 { (frame.title) }
                    @match &frame.flash {
                        Some(Flash::Info(text)) => p.flash.info role="status" { (text) },
                        Some(Flash::Error(text)) => p.flash.error role="alert" { (text) },
                        None => {}
                    }
                    (content)
                }
            }
        }
    }
}

fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// The sign-in form.
pub fn signin(w: &Words) -> Markup {
    html! {
        p { (w.signin_intro) }
        form.card method="post" action="/console/login" {
            label for="token" { (w.signin_token) }
            input #token type="password" name="token" autocomplete="off" required;
            button type="submit" { (w.signin_button) }
        }
    }
}

/// The page a one-time sign-in link opens: one button, whose POST burns the code and signs in.
pub fn link_confirm(w: &Words, code: &str) -> Markup {
    html! {
        p { (w.link_intro) }
        form.card method="post" action="/console/login/user" {
            input type="hidden" name="code" value=(code);
            button type="submit" { (w.link_button) }
        }
    }
}

/// A session's id digest as the sessions page names it.
#[must_use]
pub fn digest_hex(digest: &herald_ports::sessions::Digest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The id digest a sessions form names, if it is 64 hex digits.
#[must_use]
pub fn digest_from_hex(text: &str) -> Option<herald_ports::sessions::Digest> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

/// The signed-in person's open sessions, each with an "End session" button.
pub fn sessions(w: &Words, session: &Session, list: &[herald_ports::StoredSession]) -> Markup {
    use herald_ports::Credential;
    html! {
        p { (w.sessions_intro) }
        table {
            thead { tr {
                th scope="col" { (w.session_started) }
                th scope="col" { (w.session_last_seen) }
                th scope="col" { (w.session_ends) }
                th scope="col" { (w.session_how) }
                th scope="col" { span.visually-hidden { (w.session_end_button) } }
            } }
            tbody {
                @for other in list {
                    tr.current[other.id_digest == session.stored.id_digest] {
                        td {
                            (moment(other.created_at))
                            @if other.id_digest == session.stored.id_digest { " (" (w.session_this) ")" }
                        }
                        td { (moment(other.last_seen_at)) }
                        td { (moment(other.expires_at)) }
                        td { @match other.credential {
                            Credential::AdminToken { .. } => { (w.session_by_admin_token) }
                            Credential::UserToken { .. } => { (w.session_by_user_token) }
                            Credential::SignInLink { .. } => { (w.session_by_link) }
                        } }
                        td {
                            form.inline method="post" action="/console/me/sessions/end" {
                                (csrf(session))
                                input type="hidden" name="session" value=(digest_hex(&other.id_digest));
                                button type="submit" { (w.session_end_button) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A moment as the console shows it, the same in every language: `2026-12-03 20:26:53 UTC`, to the second.
/// The `<time>` element carries the exact instant (RFC 3339, milliseconds) for machines and as its tooltip.
fn moment(at: herald_domain::Timestamp) -> Markup {
    let exact = rfc3339(at);
    html! { time datetime=(exact) title=(exact) { (shown(at)) } }
}

/// The text of [`moment`].
fn shown(at: herald_domain::Timestamp) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at.as_millis())
        .map_or_else(|| rfc3339(at), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

fn millis_words(ms: u64) -> String {
    if ms == 0 {
        "—".into()
    } else if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The operator overview.
pub fn overview(w: &Words, now: herald_domain::Timestamp, channels: &[ChannelOverview]) -> Markup {
    let parked: u64 = channels.iter().flat_map(|c| &c.tasks).filter(|t| t.parked).map(|t| t.count).sum();
    html! {
        p.big { (w.parked_total) ": " strong #parked-total { (parked) } " " a href="/console/review" { (w.nav_review) } }
        div.scroll {
            table {
                caption { (w.nav_channels) }
                thead { tr {
                    th scope="col" { (w.col_channel) } th scope="col" { (w.col_contract) }
                    th scope="col" { (w.col_interval) } th scope="col" { (w.col_next_slot) }
                    th scope="col" { (w.col_tasks) } th scope="col" { (w.col_parked) }
                    th scope="col" { (w.col_last_hour) } th scope="col" { (w.col_last_error) }
                } }
                tbody {
                    @for c in channels {
                        tr {
                            th scope="row" { (c.channel) }
                            td { (w.contract(c.rules.contract.capability)) }
                            td { (millis_words(c.rules.min_interval.0)) }
                            td { @match c.next_slot {
                                Some(at) if at > now => { (moment(at)) },
                                _ => { (w.slot_free) }
                            } }
                            td { @if c.tasks.iter().all(|t| t.parked) { (w.none) } ul.plain { @for t in c.tasks.iter().filter(|t| !t.parked) {
                                li { (w.state(t.state, false)) " (" (t.state) "): " (t.count) }
                            } } }
                            td { (c.tasks.iter().filter(|t| t.parked).map(|t| t.count).sum::<u64>()) }
                            td { @if c.recent.is_empty() { (w.none) } ul.plain { @for o in &c.recent {
                                li { code { (o.outcome) } " " (o.count) }
                            } } }
                            td { @match c.last_error {
                                Some(o) => { code { (o) } " " (w.outcome(o)) },
                                None => { (w.none) }
                            } }
                        }
                    }
                }
            }
        }
    }
}

/// An attempt timeline, oldest first.
pub fn timeline(w: &Words, attempts: &[AttemptView]) -> Markup {
    html! {
        div.scroll { table.timeline {
            thead { tr {
                th scope="col" { (w.col_no) } th scope="col" { (w.col_action) } th scope="col" { (w.col_outcome) }
                th scope="col" { (w.col_late) } th scope="col" { (w.col_started) } th scope="col" { (w.col_finished) }
                th scope="col" { (w.col_detail) }
            } }
            tbody { @for a in attempts {
                tr.manual[a.outcome.is_some_and(herald_domain::Outcome::is_manual)] {
                    td { (a.attempt_no) }
                    td { @if let Some(action) = a.action { code { (action) } } @else { "—" } }
                    td { @if let Some(o) = a.outcome { code { (o) } br; span.words { (w.outcome(o)) } } @else { "…" } }
                    td { @if let Some(o) = a.late_outcome { code { (o) } br; span.words { (w.outcome(o)) } } }
                    td { (moment(a.started_at)) }
                    td { @if let Some(at) = a.finished_at { (moment(at)) } }
                    td {
                        @if let Some(note) = &a.note { span.note { (note) } }
                        @else if let Some(detail) = &a.detail { (detail) }
                    }
                }
            } }
        } }
    }
}

/// One task's state in words, a human decision shown as one.
pub fn task_state(w: &Words, task: &TaskView) -> Markup {
    html! {
        @if let Some((decision, note)) = task.manual_resolution().filter(|(d, _)| d.state() == task.state) {
            span.state.manual { (w.decision(decision)) ": " (note) }
        } @else if task.state == TaskState::Failed
            && task.attempts.last().and_then(|a| a.outcome) == Some(herald_domain::Outcome::TtlExpired)
        {
            span.state { (w.st_expired) }
        } @else {
            span.state { (w.state(task.state, task.is_parked())) }
        }
        " " code { (task.state) }
    }
}

/// The review queue page.
#[allow(clippy::too_many_arguments)]
pub fn review(
    w: &Words,
    session: &Session,
    channels: &[String],
    filter_channel: Option<&str>,
    min_age: Option<u64>,
    tasks: &[(herald_domain::Timestamp, TaskView, Capability)],
    next: Option<String>,
) -> Markup {
    html! {
        p { (w.review_intro) }
        form.filters method="get" action="/console/review" {
            label for="f-channel" { (w.filter_channel) }
            select #f-channel name="channel" {
                option value="" selected[filter_channel.is_none()] { (w.filter_any) }
                @for c in channels {
                    option value=(c) selected[filter_channel == Some(c.as_str())] { (c) }
                }
            }
            label for="f-age" { (w.filter_min_age) }
            input #f-age type="number" name="min_age" min="0" value=[min_age];
            button type="submit" { (w.filter_apply) }
        }
        @if tasks.is_empty() { p #review-empty { (w.review_empty) } }
        @for (parked_at, task, capability) in tasks {
            @let id = task.task_id.0;
            section.task #{"task-" (id)} aria-labelledby={"task-" (id) "-h"} {
                h2 #{"task-" (id) "-h"} { (w.task) " " (id) " · " (task.channel) " · " (w.user) " " (task.user_id) }
                dl {
                    dt { (w.notification) } dd { a href={"/console/notifications/" (task.notification_ref)} { (task.notification_ref) } }
                    dt { (w.reference) } dd { code { (task.reference) } }
                    dt { (w.parked_since) } dd { (moment(*parked_at)) }
                    dt { (w.attempts_spent) } dd { (task.attempt_count) }
                }
                h3 { (w.why_parked) }
                p.reason { (w.park_reason(task.last_error.as_deref().unwrap_or("—"))) }
                h3 { (w.what_to_check) }
                p.check { (fill(w.check(*capability), &[("ref", &task.reference), ("channel", task.channel.as_str())])) }
                (timeline(w, &task.attempts))
                form.resolve method="post" action={"/console/tasks/" (id) "/resolve"} {
                    (csrf(session))
                    label for={"note-" (id)} { (w.note_label) }
                    textarea #{"note-" (id)} name="note" required rows="2" maxlength="2000" {}
                    div.actions {
                        button type="submit" name="decision" value="SENT" { (w.mark_sent) }
                        button type="submit" name="decision" value="FAILED" { (w.mark_failed) }
                        button type="submit" name="decision" value="RESEND" { (w.send_again) }
                    }
                }
            }
        }
        @if let Some(href) = next { p { a #older href=(href) { (w.older) " →" } } }
    }
}

/// The delivery-log search form.
pub fn log_form(w: &Words, q: &str, user: &str, event: &str) -> Markup {
    html! {
        p { (w.log_intro) }
        form.filters method="get" action="/console/log" {
            label for="q" { (w.log_query) }
            input #q type="search" name="q" value=(q);
            label for="user" { (w.log_user) }
            input #user type="text" name="user" value=(user);
            label for="event" { (w.log_event) }
            input #event type="text" name="event" value=(event);
            button type="submit" { (w.log_find) }
        }
    }
}

/// A notification with every task and its timeline.
pub fn notification(w: &Words, view: &NotificationView) -> Markup {
    html! {
        dl {
            dt { (w.user) } dd { a href={"/console/users/" (view.user_id) "/inbox"} { (view.user_id) } }
            dt { (w.event_key) } dd { code { (view.event_key) } }
            dt { (w.body) } dd { (view.body) }
            dt { (w.created) } dd { (moment(view.created_at)) }
            dt { (w.expires) } dd { (moment(view.expires_at)) }
        }
        @if view.tasks.is_empty() { p { (w.in_app_only) } }
        @for task in &view.tasks {
            section.task #{"task-" (task.task_id)} {
                h2 { (w.task) " " (task.task_id) " · " (task.channel) }
                p { (task_state(w, task)) }
                dl {
                    dt { (w.reference) } dd { code { (task.reference) } }
                    dt { (w.attempts_spent) } dd { (task.attempt_count) }
                }
                (timeline(w, &task.attempts))
            }
        }
    }
}

/// The words for one channel of an inbox item (SPEC §1: never "delivered").
#[must_use]
pub fn inbox_words(w: &Words, c: &InboxChannel) -> String {
    if c.in_digest && matches!(c.state, TaskState::Pending | TaskState::Sending) {
        return w.st_digest.to_owned();
    }
    if let Some(decision) = c.last_outcome.and_then(herald_domain::resolve::manual_decision) {
        if decision.state() == c.state && decision != herald_domain::FinalState::Resend {
            return match &c.note {
                Some(note) => format!("{}: {note}", w.decision(decision)),
                None => w.decision(decision).to_owned(),
            };
        }
    }
    match c.state {
        TaskState::Sent => w.st_accepted,
        TaskState::Suppressed => w.st_off,
        TaskState::Failed if matches!(c.last_outcome, Some(herald_domain::Outcome::TtlExpired)) => w.st_expired,
        TaskState::Failed if c.destination_gone => w.st_gone,
        TaskState::Failed => w.st_refused,
        TaskState::Unknown if c.needs_review => w.st_unknown_review,
        TaskState::Unknown => w.st_unknown_checking,
        TaskState::Pending if c.attempt_count > 0 => w.st_retry,
        TaskState::Pending | TaskState::Sending => w.st_sending,
    }
    .to_owned()
}

/// An inbox: the user's own (with mark-as-read) or, for an operator, read-only.
pub fn inbox(w: &Words, session: Option<&Session>, items: &[InboxItem], next: Option<String>) -> Markup {
    html! {
        @if items.is_empty() { p { (w.inbox_empty) } }
        ol.inbox {
            @for item in items {
                li.item.unread[item.read_at.is_none()] #{"n-" (item.notification_ref)} {
                    p.body { (item.body) }
                    p.meta {
                        (moment(item.created_at))
                        " · "
                        @if item.read_at.is_none() { strong.badge { (w.unread) } } @else { span { (w.read) } }
                    }
                    ul.channels {
                        @if item.channels.is_empty() { li { (w.in_app_only) } }
                        @for c in &item.channels {
                            li { span.channel { (c.channel) } ": " span.status { (inbox_words(w, c)) } }
                        }
                    }
                    @if let (Some(session), None) = (session, item.read_at) {
                        form.inline method="post" action={"/console/me/inbox/" (item.notification_ref) "/read"} {
                            (csrf(session))
                            button type="submit" aria-label={(w.mark_read) " " (item.notification_ref)} { (w.mark_read) }
                        }
                    }
                }
            }
        }
        @if let Some(href) = next { p { a #older href=(href) { (w.older) " →" } } }
    }
}

/// The user's channel settings. `pending_confirm`: the channel whose test was just accepted.
pub fn channels(
    w: &Words,
    session: &Session,
    prefs: &[(String, Option<ChannelPref>)],
    pending_confirm: Option<&str>,
) -> Markup {
    html! {
        p { (w.channels_intro) }
        @for (channel, pref) in prefs {
            @let set = pref.as_ref().is_some_and(|p| p.has_destination);
            @let verified = pref.as_ref().is_some_and(|p| p.verified);
            @let enabled = pref.as_ref().is_some_and(|p| p.enabled);
            section.card #{"ch-" (channel)} aria-labelledby={"ch-" (channel) "-h"} {
                h2 #{"ch-" (channel) "-h"} { (channel) }
                p.facts {
                    span.fact { @if set { (w.dest_set) } @else { (w.dest_not_set) } }
                    " · " span.fact { @if verified { (w.verified) } @else { (w.not_verified) } }
                    " · " span.fact { @if enabled { (w.on) } @else { (w.off) } }
                }
                form method="post" action={"/console/me/channels/" (channel)} {
                    (csrf(session))
                    label for={"dest-" (channel)} { (w.destination_label) }
                    input #{"dest-" (channel)} type="text" name="destination" autocomplete="off" spellcheck="false";
                    div.check {
                        input #{"en-" (channel)} type="checkbox" name="enabled" value="on" checked[enabled];
                        label for={"en-" (channel)} { (w.enabled_label) }
                    }
                    button type="submit" { (w.save) }
                }
                form.inline method="post" action={"/console/me/channels/" (channel) "/test"} {
                    (csrf(session))
                    button type="submit" disabled[!set] { (w.send_test) }
                }
                @if pending_confirm == Some(channel.as_str()) {
                    form.inline method="post" action={"/console/me/channels/" (channel) "/confirm"} {
                        (csrf(session))
                        button.primary type="submit" { (w.i_received_it) }
                    }
                }
            }
        }
    }
}

/// A page with only a message (errors).
pub fn message(text: &str, link: Option<(&str, &str)>) -> Markup {
    html! {
        p { (text) }
        @if let Some((href, words)) = link { p { a href=(href) { (words) } } }
        (PreEscaped(""))
    }
}

#[cfg(test)]
mod tests {
    use herald_domain::Timestamp;

    use super::*;

    #[test]
    fn a_moment_reads_to_the_second_in_utc_and_keeps_the_exact_instant_in_its_markup() {
        // 2026-12-03T20:26:53.789Z
        let at = Timestamp(1_796_329_613_789);
        assert_eq!(shown(at), "2026-12-03 20:26:53 UTC");
        assert_eq!(
            moment(at).into_string(),
            "<time datetime=\"2026-12-03T20:26:53.789Z\" title=\"2026-12-03T20:26:53.789Z\">2026-12-03 20:26:53 UTC</time>"
        );
    }
}
