//! The rows that are compared, read from PostgreSQL directly, and a readable diff between the model's
//! rows and the store's.

use std::fmt::Write as _;

use herald_domain::{Action, Outcome, TaskState, Timestamp};
use herald_tests::world::T0;
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// A `delivery_task` row, without the columns no decision reads (timestamps of bookkeeping, thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    pub id: i64,
    pub user: String,
    pub notification_id: i64,
    pub channel: String,
    pub reference: String,
    pub state: TaskState,
    pub outcome_uncertain: bool,
    pub uncertain_since: Option<Timestamp>,
    pub needs_review: bool,
    pub next_attempt_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    pub lease_owner: Option<String>,
    pub token: Option<Uuid>,
    pub attempt_count: u32,
    pub max_attempts: u32,
    pub last_attempt_no: i32,
    pub provider_msg_id: Option<String>,
    pub last_error: Option<String>,
    pub digest_count: Option<i32>,
    /// Oldest first.
    pub attempts: Vec<AttemptRow>,
}

/// A `delivery_attempt` row. `token` is only compared for attempts that called the channel: the rows
/// of claim-time and manual decisions get a random token nobody uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRow {
    pub attempt_no: i32,
    pub token: Option<Uuid>,
    pub action: Option<Action>,
    pub lease_owner: Option<String>,
    pub outcome: Option<Outcome>,
    pub late_outcome: Option<Outcome>,
    pub detail: Option<String>,
    pub late_detail: Option<String>,
    pub note: Option<String>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub late_at: Option<Timestamp>,
}

/// A `notification` row with its inbox item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationRow {
    pub id: i64,
    pub user: String,
    pub event_key: String,
    pub body: String,
    pub expires_at: Timestamp,
    pub max_attempts: Option<i32>,
    pub inbox_items: i64,
}

/// A time relative to the clock's start, e.g. `T+1500`.
pub fn at(t: Timestamp) -> String {
    format!("T+{}", t.as_millis() - T0.as_millis())
}

fn opt<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
    value.map_or_else(|| "-".to_owned(), show)
}

fn code<T: std::fmt::Display>(value: Option<T>) -> String {
    opt(value, |v| v.to_string())
}

fn text(value: Option<&String>) -> String {
    opt(value, |v| format!("{v:?}"))
}

fn short(token: Option<Uuid>) -> String {
    opt(token, |t| t.to_string()[..8].to_owned())
}

impl TaskRow {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.to_string()),
            ("user", self.user.clone()),
            ("notification", self.notification_id.to_string()),
            ("channel", self.channel.clone()),
            ("reference", self.reference.clone()),
            ("state", self.state.to_string()),
            ("outcome_uncertain", self.outcome_uncertain.to_string()),
            ("uncertain_since", opt(self.uncertain_since, at)),
            ("needs_review", self.needs_review.to_string()),
            ("next_attempt_at", opt(self.next_attempt_at, at)),
            ("lease_until", opt(self.lease_until, at)),
            ("lease_owner", text(self.lease_owner.as_ref())),
            ("attempt_token", short(self.token)),
            ("attempt_count", self.attempt_count.to_string()),
            ("max_attempts", self.max_attempts.to_string()),
            ("last_attempt_no", self.last_attempt_no.to_string()),
            ("provider_msg_id", text(self.provider_msg_id.as_ref())),
            ("last_error", text(self.last_error.as_ref())),
            ("digest_count", code(self.digest_count)),
        ]
    }

    /// One line: the fields decisions read.
    pub fn summary(&self) -> String {
        format!(
            "{} uncertain={} review={} next={} count={}/{}",
            self.state,
            self.outcome_uncertain,
            self.needs_review,
            opt(self.next_attempt_at, at),
            self.attempt_count,
            self.max_attempts
        )
    }
}

impl AttemptRow {
    fn fields(&self) -> Vec<(&'static str, String)> {
        let token = if self.action.is_some() { short(self.token) } else { "(decision)".to_owned() };
        vec![
            ("attempt_no", self.attempt_no.to_string()),
            ("attempt_token", token),
            ("action", code(self.action)),
            ("lease_owner", text(self.lease_owner.as_ref())),
            ("outcome", code(self.outcome)),
            ("late_outcome", code(self.late_outcome)),
            ("detail", text(self.detail.as_ref())),
            ("late_detail", text(self.late_detail.as_ref())),
            ("note", text(self.note.as_ref())),
            ("started_at", at(self.started_at)),
            ("finished_at", opt(self.finished_at, at)),
            ("late_at", opt(self.late_at, at)),
        ]
    }

    pub fn summary(&self) -> String {
        format!(
            "#{} {} outcome={} late={} started={} finished={}",
            self.attempt_no,
            self.action.map_or("(no call)", Action::as_str),
            code(self.outcome),
            code(self.late_outcome),
            at(self.started_at),
            opt(self.finished_at, at)
        )
    }
}

impl NotificationRow {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.to_string()),
            ("user", self.user.clone()),
            ("event_key", self.event_key.clone()),
            ("body", self.body.clone()),
            ("expires_at", at(self.expires_at)),
            ("max_attempts", code(self.max_attempts)),
            ("inbox_items", self.inbox_items.to_string()),
        ]
    }
}

fn field_diff(out: &mut String, what: &str, model: &[(&'static str, String)], store: &[(&'static str, String)]) {
    for ((name, m), (_, s)) in model.iter().zip(store) {
        if m != s {
            let _ = writeln!(out, "  {what}: {name}: model {m}, store {s}");
        }
    }
}

/// The differences between the model's rows and the store's, one line each; empty when equal.
pub fn diff(model: &[TaskRow], store: &[TaskRow], model_n: &[NotificationRow], store_n: &[NotificationRow]) -> String {
    let mut out = String::new();
    if model_n.len() != store_n.len() {
        let _ = writeln!(out, "  notifications: model has {}, store has {}", model_n.len(), store_n.len());
    }
    for (m, s) in model_n.iter().zip(store_n) {
        field_diff(&mut out, &format!("notification {}/{}", m.user, m.event_key), &m.fields(), &s.fields());
    }
    if model.len() != store.len() {
        let _ = writeln!(out, "  tasks: model has {}, store has {}", model.len(), store.len());
        for extra in model.iter().skip(store.len()) {
            let _ = writeln!(out, "    only in the model: task {} {} {}", extra.id, extra.channel, extra.summary());
        }
        for extra in store.iter().skip(model.len()) {
            let _ = writeln!(out, "    only in the store: task {} {} {}", extra.id, extra.channel, extra.summary());
        }
    }
    for (m, s) in model.iter().zip(store) {
        let name = format!("task {} ({} {})", m.id, m.user, m.channel);
        let before = out.len();
        field_diff(&mut out, &name, &m.fields(), &s.fields());
        if m.attempts.len() != s.attempts.len() {
            let _ =
                writeln!(out, "  {name}: model has {} attempt rows, store has {}", m.attempts.len(), s.attempts.len());
        }
        for (ma, sa) in m.attempts.iter().zip(&s.attempts) {
            field_diff(&mut out, &format!("{name} attempt #{}", ma.attempt_no), &ma.fields(), &sa.fields());
        }
        if out.len() != before {
            let _ = writeln!(out, "    model: {}", m.summary());
            for a in &m.attempts {
                let _ = writeln!(out, "      {}", a.summary());
            }
            let _ = writeln!(out, "    store: {}", s.summary());
            for a in &s.attempts {
                let _ = writeln!(out, "      {}", a.summary());
            }
        }
    }
    out
}

const MS: &str = "(extract(epoch FROM {}) * 1000)::bigint";

fn ms(column: &str) -> String {
    format!("{} AS {column}", MS.replace("{}", column))
}

fn ts(value: Option<i64>) -> Option<Timestamp> {
    value.map(Timestamp)
}

fn parse<T: std::str::FromStr>(value: Option<String>) -> anyhow::Result<Option<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(value.map(|v| v.parse::<T>()).transpose()?)
}

/// Every task with its attempts, in id order, read directly from the tables.
pub async fn read_tasks(pool: &PgPool) -> anyhow::Result<Vec<TaskRow>> {
    let tasks = sqlx::query(&format!(
        "SELECT id, user_id, notification_id, channel, reference::text AS reference, state, outcome_uncertain, \
         {}, needs_review, {}, {}, lease_owner, attempt_token, attempt_count, max_attempts, last_attempt_no, \
         provider_msg_id, last_error, digest_count FROM delivery_task ORDER BY id",
        ms("uncertain_since"),
        ms("next_attempt_at"),
        ms("lease_until"),
    ))
    .fetch_all(pool)
    .await?;
    let attempts = sqlx::query(&format!(
        "SELECT task_id, attempt_no, attempt_token, action, lease_owner, outcome, late_outcome, detail, \
         late_detail, note, {}, {}, {} FROM delivery_attempt ORDER BY task_id, attempt_no",
        ms("started_at"),
        ms("finished_at"),
        ms("late_at"),
    ))
    .fetch_all(pool)
    .await?;
    let mut rows = Vec::with_capacity(tasks.len());
    for t in &tasks {
        let state: String = t.try_get("state")?;
        let id: i64 = t.try_get("id")?;
        let mut own = Vec::new();
        for a in attempts.iter().filter(|a| a.try_get::<i64, _>("task_id").ok() == Some(id)) {
            own.push(AttemptRow {
                attempt_no: a.try_get("attempt_no")?,
                token: Some(a.try_get("attempt_token")?),
                action: parse(a.try_get("action")?)?,
                lease_owner: a.try_get("lease_owner")?,
                outcome: parse(a.try_get("outcome")?)?,
                late_outcome: parse(a.try_get("late_outcome")?)?,
                detail: a.try_get("detail")?,
                late_detail: a.try_get("late_detail")?,
                note: a.try_get("note")?,
                started_at: Timestamp(a.try_get("started_at")?),
                finished_at: ts(a.try_get("finished_at")?),
                late_at: ts(a.try_get("late_at")?),
            });
        }
        rows.push(TaskRow {
            id,
            user: t.try_get("user_id")?,
            notification_id: t.try_get("notification_id")?,
            channel: t.try_get("channel")?,
            reference: t.try_get("reference")?,
            state: state.parse()?,
            outcome_uncertain: t.try_get("outcome_uncertain")?,
            uncertain_since: ts(t.try_get("uncertain_since")?),
            needs_review: t.try_get("needs_review")?,
            next_attempt_at: ts(t.try_get("next_attempt_at")?),
            lease_until: ts(t.try_get("lease_until")?),
            lease_owner: t.try_get("lease_owner")?,
            token: t.try_get("attempt_token")?,
            attempt_count: u32::try_from(t.try_get::<i32, _>("attempt_count")?)?,
            max_attempts: u32::try_from(t.try_get::<i32, _>("max_attempts")?)?,
            last_attempt_no: t.try_get("last_attempt_no")?,
            provider_msg_id: t.try_get("provider_msg_id")?,
            last_error: t.try_get("last_error")?,
            digest_count: t.try_get("digest_count")?,
            attempts: own,
        });
    }
    Ok(rows)
}

/// The egress reservations (`channel_egress`), by channel name.
pub async fn read_egress(pool: &PgPool) -> anyhow::Result<Vec<(String, Option<Timestamp>)>> {
    let rows = sqlx::query(&format!("SELECT channel, {} FROM channel_egress ORDER BY channel", ms("last_call_at")))
        .fetch_all(pool)
        .await?;
    rows.iter().map(|r| Ok((r.try_get("channel")?, ts(r.try_get("last_call_at")?)))).collect()
}

/// Every notification with the number of its inbox items, in id order.
pub async fn read_notifications(pool: &PgPool) -> anyhow::Result<Vec<NotificationRow>> {
    let rows = sqlx::query(&format!(
        "SELECT n.id, n.user_id, n.event_key, n.body, n.max_attempts, {}, \
         (SELECT count(*) FROM inbox_item i WHERE i.user_id = n.user_id AND i.notification_id = n.id) AS inbox_items \
         FROM notification n ORDER BY n.id",
        ms("n.expires_at").replace("AS n.expires_at", "AS expires_at"),
    ))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(NotificationRow {
                id: r.try_get("id")?,
                user: r.try_get("user_id")?,
                event_key: r.try_get("event_key")?,
                body: r.try_get("body")?,
                expires_at: Timestamp(r.try_get("expires_at")?),
                max_attempts: r.try_get("max_attempts")?,
                inbox_items: r.try_get("inbox_items")?,
            })
        })
        .collect()
}
