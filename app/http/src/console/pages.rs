//! The console's HTML, as maud templates compiled into the binary. Every interpolated value is escaped
//! by maud; no page is given a destination (the preference read model has none), a token or a key.
//!
//! Accessibility: every page has a `<title>`, one `<h1>`, a skip link to `<main>`, landmarks (`header`,
//! `nav`, `main`), a label for every input, real `<button>`s and links (so every action is reachable by
//! keyboard in document order), tables with header cells, and status messages in `role="status"` /
//! `role="alert"` regions.

use herald_domain::operators::Capability as OpCapability;
use herald_domain::{Capability, TaskState};
use herald_ports::{AttemptView, ChannelPref, InboxChannel, InboxItem, NotificationView, TaskView};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::i18n::{fill, split_last_error, Lang, Words};
use super::roles::RoleWords;
use super::session::{Role, Session};
use crate::api::model::rfc3339;
use crate::state::ChannelNames;
use herald_core::usecases::{Chart, Overview};

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
                                    Role::Operator(_) => {
                                        li { a href="/console/overview" { (w.nav_overview) } }
                                        li { a href="/console/review" { (w.nav_review) } }
                                        li { a href="/console/log" { (w.nav_log) } }
                                        @if session.actor().is_some_and(|a| a.role.may(OpCapability::ViewAudit)) {
                                            li { a href="/console/audit" { (frame.lang.roles().audit_title) } }
                                        }
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
                                Role::Operator(actor) => {
                                    (w.signed_in_as_user) strong #operator-name { (actor.name) }
                                    " · " (fill(w.signed_in_as_operator, &[("role", frame.lang.roles().role(actor.role))]))
                                }
                                Role::User(user) => { (w.signed_in_as_user) (user) }
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
/// The sign-in page: the identity provider's button (`provider`: its words) when one is configured, and
/// the token form.
pub fn signin(w: &Words, provider: Option<&str>, or_token: &str) -> Markup {
    html! {
        @if let Some(button) = provider {
            p { a.button #oidc-sign-in href="/console/oidc/start" { (button) } }
            p { (or_token) }
        }
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
                            Credential::Oidc { .. } => { (w.session_by_provider) }
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
pub(crate) fn moment(at: herald_domain::Timestamp) -> Markup {
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

/// The operator overview: the parked count, the last hour and day as charts, and every channel.
pub fn overview(w: &Words, names: &ChannelNames, ov: &Overview) -> Markup {
    let parked: u64 = ov.channels.iter().flat_map(|c| &c.tasks).filter(|t| t.parked).map(|t| t.count).sum();
    html! {
        p.big { (w.parked_total) (w.colon) strong #parked-total { (parked) } " " a href="/console/review" { (w.nav_review) } }
        p { (w.status_events_parked) (w.colon) strong #status-events-parked { (ov.status_events_parked) } " "
            a href="/console/status-events" { (w.status_events_title) } }
        (chart(w, "chart-hour", w.chart_hour, w.chart_hour_ago, &ov.hour))
        (chart(w, "chart-day", w.chart_day, w.chart_day_ago, &ov.day))
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
                    @for c in &ov.channels {
                        tr {
                            th scope="row" { (names.shown(c.channel.as_str())) }
                            td { (w.contract(c.rules.contract.capability)) }
                            td { (millis_words(c.rules.min_interval.0)) }
                            td { @match c.next_slot {
                                Some(at) if at > ov.now => { (moment(at)) },
                                _ => { (w.slot_free) }
                            } }
                            td { @if c.tasks.iter().all(|t| t.parked) { (w.none) } ul.plain { @for t in c.tasks.iter().filter(|t| !t.parked) {
                                @let decided = c.decided_in(t.state).min(t.count);
                                @if t.count > decided {
                                    li { (w.state(t.state, false)) " (" (t.state) ")" (w.colon) (t.count - decided) }
                                }
                                @if decided > 0 {
                                    @let words = if t.state == TaskState::Sent { w.by_operator_sent } else { w.by_operator_failed };
                                    li.manual { (words) " (" (t.state) ")" (w.colon) (decided) }
                                }
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

/// The chart's plot area inside its `viewBox`.
const PLOT: (f64, f64, f64, f64) = (44.0, 12.0, 704.0, 150.0);
/// The colours of the classes (each at least 3:1 against white, as graphics must be), in stacking order.
const CLASS_COLOURS: [&str; 4] = ["#2e7d32", "#c62828", "#b26a00", "#5e35b1"];

/// One chart of the overview, drawn on the server as SVG: a stacked bar per bucket (accepted, refused or
/// not sent, unknown, decided by an operator), the parked tasks as a line of dots, its title and a
/// description with the totals for screen readers, axis labels, a legend, and the numbers in a table.
fn chart(w: &Words, id: &str, title: &str, ago: &str, chart: &Chart) -> Markup {
    let total = chart.total();
    let desc = fill(
        w.chart_desc,
        &[
            ("accepted", &total.accepted.to_string()),
            ("refused", &total.refused.to_string()),
            ("unknown", &total.unknown.to_string()),
            ("decided", &total.decided.to_string()),
            ("parked", &total.parked.to_string()),
        ],
    );
    let top = chart.bars.iter().map(|b| b.attempts().max(b.parked)).max().unwrap_or(0).max(1);
    let (x0, y0, x1, y1) = PLOT;
    let (slot, scale) = ((x1 - x0) / count_f64(chart.bars.len().max(1)), (y1 - y0) / count_f64(top));
    let mut rects = Vec::new();
    let mut dots = Vec::new();
    for (i, bar) in chart.bars.iter().enumerate() {
        let x = x0 + slot * count_f64(i) + slot * 0.1;
        let mut base = y1;
        for (k, count) in [bar.accepted, bar.refused, bar.unknown, bar.decided].into_iter().enumerate() {
            if count > 0 {
                let h = count_f64(count) * scale;
                base -= h;
                rects.push((fmt(x), fmt(base), fmt(slot * 0.8), fmt(h), CLASS_COLOURS[k]));
            }
        }
        if bar.parked > 0 {
            dots.push((fmt(x + slot * 0.4), fmt(y1 - count_f64(bar.parked) * scale)));
        }
    }
    let classes = [w.ch_accepted, w.ch_refused, w.ch_unknown, w.ch_decided];
    html! {
        section.chart #(id) aria-labelledby={(id) "-h"} {
            h2 #{(id) "-h"} { (title) }
            svg role="img" aria-labelledby={(id) "-t " (id) "-d"} viewBox="0 0 720 175" width="100%" xmlns="http://www.w3.org/2000/svg" {
                title #{(id) "-t"} { (title) }
                desc #{(id) "-d"} { (desc) }
                line x1=(x0) y1=(y1) x2=(x1) y2=(y1) stroke="#4a5563" {}
                line x1=(x0) y1=(y0) x2=(x0) y2=(y1) stroke="#4a5563" {}
                text x=(x0 - 4.0) y=(y1) text-anchor="end" font-size="13" fill="#1b1f24" { "0" }
                text x=(x0 - 4.0) y=(y0 + 8.0) text-anchor="end" font-size="13" fill="#1b1f24" { (top) }
                text x="12" y=((y0 + y1) / 2.0) font-size="13" fill="#1b1f24" transform={"rotate(-90 12 " ((y0 + y1) / 2.0) ")"} text-anchor="middle" { (w.chart_axis) }
                text x=(x0) y=(y1 + 14.0) font-size="13" fill="#1b1f24" { (ago) }
                text x=(x1) y=(y1 + 14.0) font-size="13" fill="#1b1f24" text-anchor="end" { (w.chart_now) }
                @for (x, y, width, height, colour) in &rects {
                    rect x=(x) y=(y) width=(width) height=(height) fill=(colour) {}
                }
                @for (cx, cy) in &dots {
                    circle cx=(cx) cy=(cy) r="3" fill="#1b1f24" {}
                }
            }
            ul.legend aria-hidden="true" {
                @for (k, label) in classes.iter().enumerate() {
                    li { span class={"swatch c" (k)} {} (label) }
                }
                li { span.dot {} (w.ch_parked) }
            }
            p.chart-desc { (desc) }
            details {
                summary { (w.chart_numbers) }
                div.scroll { table {
                    caption { (title) }
                    thead { tr {
                        th scope="col" { (w.chart_from) }
                        @for label in classes { th scope="col" { (label) } }
                        th scope="col" { (w.ch_parked) }
                    } }
                    tbody {
                        @let shown: Vec<_> = chart.bars.iter().filter(|b| b.attempts() + b.parked > 0).collect();
                        @if shown.is_empty() { tr { td colspan="6" { (w.none) } } }
                        @for bar in shown {
                            tr {
                                th scope="row" { (moment(bar.start)) }
                                td { (bar.accepted) } td { (bar.refused) } td { (bar.unknown) } td { (bar.decided) } td { (bar.parked) }
                            }
                        }
                    }
                } }
            }
        }
    }
}

/// A count as a coordinate factor (counts on a page are far below 2^52).
#[allow(clippy::cast_precision_loss)]
fn count_f64(n: impl TryInto<u64>) -> f64 {
    n.try_into().unwrap_or(u64::MAX) as f64
}

/// A coordinate with one decimal.
fn fmt(v: f64) -> String {
    format!("{v:.1}")
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
                        @if let Some(note) = &a.note {
                            // Who decided, on the decision's own row: "marked sent by Li Wei: …".
                            @if let (Some(by), Some(decision)) =
                                (&a.decided_by, a.outcome.and_then(herald_domain::resolve::manual_decision))
                            {
                                span.by { (w.roles().decided_by(decision, by)) } (w.colon)
                            }
                            span.note { (note) }
                        }
                        @else if let Some(detail) = &a.detail { (w.detail(detail)) }
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
            span.state.manual { (w.decision(decision)) (w.colon) (note) }
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
    roles: &RoleWords,
    names: &ChannelNames,
    session: &Session,
    now: herald_domain::Timestamp,
    channels: &[String],
    filter_channel: Option<&str>,
    min_age: Option<u64>,
    tasks: &[(herald_domain::Timestamp, TaskView, Capability)],
    next: Option<String>,
) -> Markup {
    // A viewer reads the queue; the decisions shown are those the operator's role allows.
    let may = |capability: OpCapability| session.actor().is_some_and(|actor| actor.role.may(capability));
    html! {
        p { (w.review_intro) }
        form.filters method="get" action="/console/review" {
            label for="f-channel" { (w.filter_channel) }
            select #f-channel name="channel" {
                option value="" selected[filter_channel.is_none()] { (w.filter_any) }
                @for c in channels {
                    option value=(c) selected[filter_channel == Some(c.as_str())] { (names.shown(c)) }
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
                h2 #{"task-" (id) "-h"} { (w.task) " " (id) " · " (names.shown(task.channel.as_str())) " · " (w.user) " " (task.user_id) }
                dl {
                    dt { (w.notification) } dd { a href={"/console/notifications/" (task.notification_ref)} { (task.notification_ref) } }
                    dt { (w.reference) } dd { code { (task.reference) } }
                    dt { (w.parked_since) } dd { (moment(*parked_at)) " · " span.age { (w.age(now, *parked_at)) } }
                    dt { (w.attempts_spent) } dd { (task.attempt_count) }
                }
                @let (happened, reason) = split_last_error(task.last_error.as_deref().unwrap_or(""));
                @if let Some(happened) = happened.filter(|h| !h.is_empty()) {
                    h3 { (w.what_happened) }
                    p.detail { (w.detail(happened)) }
                }
                h3 { (w.why_parked) }
                p.reason { (w.park_reason(reason.unwrap_or("—"))) }
                h3 { (w.what_to_check) }
                p.check { (fill(w.check(*capability), &[("ref", &task.reference), ("channel", names.shown(task.channel.as_str()))])) }
                (timeline(w, &task.attempts))
                @if may(OpCapability::ResolveTasks) || may(OpCapability::SendAgain) {
                    form.resolve method="post" action={"/console/tasks/" (id) "/resolve"} {
                        (csrf(session))
                        label for={"note-" (id)} { (w.note_label) }
                        textarea #{"note-" (id)} name="note" required rows="2" maxlength="2000" {}
                        div.actions {
                            // No decision is the default by its place: each says something only the
                            // operator's check can establish. Send again is the one that cannot lose a
                            // prompt (at worst the person gets it twice), so it is the primary-looking one.
                            // A role shows only the decisions it may take.
                            @if may(OpCapability::ResolveTasks) {
                                button type="submit" name="decision" value="SENT" { (w.mark_sent) }
                                button type="submit" name="decision" value="FAILED" { (w.mark_failed) }
                            }
                            @if may(OpCapability::SendAgain) {
                                button.primary type="submit" name="decision" value="RESEND" { (w.send_again) }
                            }
                        }
                    }
                } @else {
                    p.readonly { (roles.read_only) }
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
pub fn notification(w: &Words, names: &ChannelNames, view: &NotificationView) -> Markup {
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
                h2 { (w.task) " " (task.task_id) " · " (names.shown(task.channel.as_str())) }
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
                Some(note) => format!("{}{}{note}", w.decision(decision), w.colon),
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

/// The operator's erasure form under a user's inbox (SPEC §13): the id must be typed again.
pub fn erase_form(w: &Words, session: &Session, user_id: &str) -> Markup {
    html! {
        section.erase {
            h2 { (w.erase_title) }
            p { (w.erase_explain) }
            form method="post" action={"/console/users/" (user_id) "/erasure"} {
                (csrf(session))
                label { (w.erase_confirm) " " input type="text" name="confirm" autocomplete="off" required; }
                " "
                button.danger type="submit" { (w.erase_button) }
            }
        }
    }
}

/// An inbox: the user's own (with mark-as-read) or, for an operator, read-only.
pub fn inbox(
    w: &Words,
    names: &ChannelNames,
    session: Option<&Session>,
    items: &[InboxItem],
    next: Option<String>,
) -> Markup {
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
                            li { span.channel { (names.shown(c.channel.as_str())) } (w.colon) span.status { (inbox_words(w, c)) } }
                        }
                    }
                    @if session.is_none() {
                        p { a href={"/console/notifications/" (item.notification_ref)} { (w.open_notification) " " (item.notification_ref) } }
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
    names: &ChannelNames,
    session: &Session,
    prefs: &[(String, Option<ChannelPref>)],
    tested: Option<(&str, &Flash)>,
    pending_confirm: Option<&str>,
) -> Markup {
    html! {
        p { (w.channels_intro) }
        @for (channel, pref) in prefs {
            @let set = pref.as_ref().is_some_and(|p| p.has_destination);
            @let verified = pref.as_ref().is_some_and(|p| p.verified);
            @let enabled = pref.as_ref().is_some_and(|p| p.enabled);
            section.card #{"ch-" (channel)} aria-labelledby={"ch-" (channel) "-h"} {
                h2 #{"ch-" (channel) "-h"} { (names.shown(channel)) }
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
                @if let Some((_, result)) = tested.filter(|(c, _)| *c == channel.as_str()) {
                    @match result {
                        Flash::Info(text) => p.flash.info role="status" { strong { (w.test_result_label) (w.colon) } (text) },
                        Flash::Error(text) => p.flash.error role="alert" { strong { (w.test_result_label) (w.colon) } (text) },
                    }
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

/// The parked status events (issue 46): what the calling service was not told, and why.
#[must_use]
pub fn status_events(w: &Words, events: &[herald_ports::ParkedStatusEvent]) -> Markup {
    html! {
        p { (w.status_events_intro) }
        @if events.is_empty() {
            p #status-events-none { (w.none) }
        } @else {
            div.scroll {
                table #status-events {
                    caption { (w.status_events_title) }
                    thead { tr {
                        th scope="col" { (w.col_subscription) } th scope="col" { (w.col_event) }
                        th scope="col" { (w.col_notification) } th scope="col" { (w.col_channel) }
                        th scope="col" { (w.col_posts) } th scope="col" { (w.col_last_error) }
                        th scope="col" { (w.col_parked_at) }
                    } }
                    tbody {
                        @for e in events {
                            tr {
                                td { (e.subscription) }
                                td { code { "notification." (e.kind.as_str()) } }
                                td { a href={ "/console/notifications/" (e.notification.0) } { (e.notification.0) } }
                                td { (e.channel) }
                                td { (e.tries) }
                                td { (e.last_error.as_deref().unwrap_or("")) }
                                td { (moment(e.parked_at)) }
                            }
                        }
                    }
                }
            }
        }
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
