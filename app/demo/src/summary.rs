//! What the run did, counted twice: by Herald (task states, from the store's views) and by the channels
//! (real sends, from the stand-ins' counters). The point of the table is the comparison.

use std::collections::HashMap;
use std::fmt::Write as _;

use herald_channels::kinds::webpush::topic;
use herald_domain::{ChannelName, NotificationRef, TaskState, UserId};
use herald_ports::prelude::*;
use herald_ports::{PreferenceStore, StoreError, TaskView};
use herald_standin::{SmtpStandIn, StandIn, WebPushService};

use super::scenario::{self, Ch, End, CASES};
use super::submit::Submitted;

/// One channel's line of the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelSummary {
    pub channel: &'static str,
    /// Logical deliveries: one task per (notification, channel).
    pub tasks: u64,
    pub sent: u64,
    /// UNKNOWN, waiting for a human.
    pub parked: u64,
    pub failed: u64,
    pub suppressed: u64,
    /// Anything else (still PENDING, SENDING, or UNKNOWN and scheduled): 0 once drained.
    pub unsettled: u64,
    /// What the stand-in counted: acceptances that would have prompted a user (push replays excluded).
    pub real_sends: u64,
    /// Requests on the send endpoint, whatever their answer.
    pub requests: u64,
    /// Status queries (sms only).
    /// (For e-mail, `requests` counts mail transactions begun.)
    pub queries: u64,
    /// Real sends beyond one per task: a user prompted twice for one notification.
    pub extra_sends: u64,
}

/// How one scripted case ended, next to what the table expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    pub id: &'static str,
    pub task_id: i64,
    pub end: Option<End>,
    pub outcomes: Vec<String>,
    pub sends: u64,
    /// The user's channel is switched off and marked "subscription expired".
    pub expired: bool,
    /// End, outcomes, sends and the expiry mark all as expected.
    pub ok: bool,
}

fn end_of(task: &TaskView) -> Option<End> {
    match task.state {
        TaskState::Sent => Some(End::Sent),
        TaskState::Failed => Some(End::Failed),
        TaskState::Suppressed => Some(End::Suppressed),
        TaskState::Unknown if task.is_parked() => Some(End::Parked),
        _ => None,
    }
}

fn outcomes(task: &TaskView) -> Vec<String> {
    task.attempts.iter().map(|a| a.outcome.map_or_else(|| "…".to_owned(), |o| o.as_str().to_owned())).collect()
}

/// The five stand-ins, by channel.
pub struct StandIns<'a> {
    pub push: &'a StandIn,
    pub sms: &'a StandIn,
    pub miao: &'a StandIn,
    pub email: &'a SmtpStandIn,
    pub webpush: &'a WebPushService,
}

impl StandIns<'_> {
    /// Real sends, requests (e-mail: mail transactions) and queries one stand-in counted.
    fn counters(&self, ch: Ch) -> (u64, u64, u64) {
        match ch {
            Ch::Push | Ch::Sms | Ch::Miao => {
                let standin = match ch {
                    Ch::Push => self.push,
                    Ch::Sms => self.sms,
                    _ => self.miao,
                };
                (standin.sends(), standin.requests(), standin.queries())
            }
            Ch::Email => (self.email.sends(), self.email.transactions(), 0),
            Ch::WebPush => (self.webpush.received() as u64, self.webpush.requests().len() as u64, 0),
        }
    }

    /// Real sends for one task: by reference for push and sms, by the reference in the Message-ID for
    /// e-mail, by the `Topic` derived from it for Web Push; Miaotixing has no reference on the wire, so
    /// by destination (each case user has one task).
    fn sends_for(&self, ch: Ch, task: &TaskView) -> u64 {
        match ch {
            Ch::Push => self.push.sends_for(&task.reference),
            Ch::Sms => self.sms.sends_for(&task.reference),
            Ch::Email => self.email.sends_for(&task.reference),
            Ch::WebPush => self.webpush.sends_for(&topic(&task.reference)),
            Ch::Miao => {
                scenario::destination(task.user_id.as_str(), Ch::Miao).map_or(0, |code| self.miao.sends_to(&code))
            }
        }
    }
}

/// Reads every submitted notification back and counts.
///
/// # Errors
/// Store failures.
pub async fn count(
    store: &dyn ReadModels,
    prefs: &dyn PreferenceStore,
    submitted: &Submitted,
    standins: &StandIns<'_>,
) -> Result<(Vec<ChannelSummary>, Vec<CaseResult>), StoreError> {
    let mut lines: Vec<ChannelSummary> =
        Ch::ALL.iter().map(|ch| ChannelSummary { channel: ch.name(), ..ChannelSummary::default() }).collect();
    let mut tasks_by_id: HashMap<i64, TaskView> = HashMap::new();
    // Miaotixing tasks per user, to compare with sends per destination.
    let mut miao_tasks: HashMap<String, u64> = HashMap::new();
    for id in &submitted.notifications {
        let Some(id) = NotificationRef::parse(id) else { continue };
        let Some(id) = store.notification_by_ref(id).await? else { continue };
        let Some(view) = store.notification(id).await? else { continue };
        for task in view.tasks {
            let Some(ch) = Ch::from_name(task.channel.as_str()) else { continue };
            let line = &mut lines[Ch::ALL.iter().position(|c| *c == ch).unwrap_or(0)];
            line.tasks += 1;
            match end_of(&task) {
                Some(End::Sent) => line.sent += 1,
                Some(End::Parked) => line.parked += 1,
                Some(End::Failed) => line.failed += 1,
                Some(End::Suppressed) => line.suppressed += 1,
                None => line.unsettled += 1,
            }
            match ch {
                Ch::Miao => *miao_tasks.entry(task.user_id.to_string()).or_default() += 1,
                _ => line.extra_sends += standins.sends_for(ch, &task).saturating_sub(1),
            }
            tasks_by_id.insert(task.task_id.0, task);
        }
    }
    let miao = Ch::ALL.iter().position(|c| *c == Ch::Miao).unwrap_or(0);
    for (user, tasks) in &miao_tasks {
        let sends = scenario::destination(user, Ch::Miao).map_or(0, |code| standins.miao.sends_to(&code));
        lines[miao].extra_sends += sends.saturating_sub(*tasks);
    }
    for (line, ch) in lines.iter_mut().zip(Ch::ALL) {
        (line.real_sends, line.requests, line.queries) = standins.counters(ch);
    }

    let mut cases = Vec::with_capacity(CASES.len());
    for (case, &(_, task_id)) in CASES.iter().zip(&submitted.cases) {
        let (end, outcomes, sends) = match tasks_by_id.get(&task_id) {
            Some(task) => (end_of(task), outcomes(task), standins.sends_for(case.channel, task)),
            None => (None, Vec::new(), 0),
        };
        let (user, channel) =
            (UserId::from(format!("case-{}", case.id).as_str()), ChannelName::from(case.channel.name()));
        let switched_off = prefs.get(&user, &channel).await?.is_some_and(|p| !p.enabled);
        let expired = switched_off && prefs.destination_expired(&user, &channel).await?;
        let ok = end == Some(case.end) && outcomes == case.outcomes && sends == case.sends && expired == case.expires;
        cases.push(CaseResult { id: case.id, task_id, end, outcomes, sends, expired, ok });
    }
    Ok((lines, cases))
}

/// The per-channel table, with a total line.
#[must_use]
pub fn channel_table(lines: &[ChannelSummary]) -> String {
    let total =
        lines.iter().fold(ChannelSummary { channel: "total", ..ChannelSummary::default() }, |t, l| ChannelSummary {
            channel: t.channel,
            tasks: t.tasks + l.tasks,
            sent: t.sent + l.sent,
            parked: t.parked + l.parked,
            failed: t.failed + l.failed,
            suppressed: t.suppressed + l.suppressed,
            unsettled: t.unsettled + l.unsettled,
            real_sends: t.real_sends + l.real_sends,
            requests: t.requests + l.requests,
            queries: t.queries + l.queries,
            extra_sends: t.extra_sends + l.extra_sends,
        });
    let mut out = format!(
        "  {:<8} {:>6} {:>6} {:>15} {:>7} {:>11} {:>10} | {:>10} {:>9} {:>8} {:>12}\n",
        "channel",
        "tasks",
        "SENT",
        "UNKNOWN parked",
        "FAILED",
        "SUPPRESSED",
        "unsettled",
        "real sends",
        "requests",
        "queries",
        "extra sends"
    );
    for line in lines.iter().chain(std::iter::once(&total)) {
        let _ = writeln!(
            out,
            "  {:<8} {:>6} {:>6} {:>15} {:>7} {:>11} {:>10} | {:>10} {:>9} {:>8} {:>12}",
            line.channel,
            line.tasks,
            line.sent,
            line.parked,
            line.failed,
            line.suppressed,
            line.unsettled,
            line.real_sends,
            line.requests,
            line.queries,
            line.extra_sends
        );
    }
    out
}

/// The scripted cases with what was expected and what happened.
#[must_use]
pub fn case_table(results: &[CaseResult]) -> String {
    let mut out = String::new();
    for (case, result) in CASES.iter().zip(results) {
        let mark = if result.ok { "ok" } else { "UNEXPECTED" };
        let end = result.end.map_or("not settled", End::label);
        let _ = writeln!(
            out,
            "  {mark:<3} {:<20} {:<7} {} -> {:<16} [{}], {} real send{}{}",
            case.id,
            case.channel.name(),
            pad(case.scripted, 44),
            end,
            result.outcomes.join(", "),
            result.sends,
            if result.sends == 1 { "" } else { "s" },
            if result.expired { ", subscription expired" } else { "" }
        );
        if result.ok {
            let _ = writeln!(out, "      {}", case.why);
        } else {
            let _ = writeln!(
                out,
                "      expected {} [{}], {} real sends{}",
                case.end.label(),
                case.outcomes.join(", "),
                case.sends,
                if case.expires { ", subscription expired" } else { "" }
            );
        }
    }
    out
}

/// `text` followed by spaces up to `width` terminal columns. `format!`'s `{:<N}` counts characters, and a
/// Chinese character takes two columns (`参数格式有误` is 6 characters, 12 columns), which would push the
/// rest of its row out of line.
#[must_use]
pub fn pad(text: &str, width: usize) -> String {
    let used = unicode_width::UnicodeWidthStr::width(text);
    format!("{text}{}", " ".repeat(width.saturating_sub(used)))
}
