//! The demo's client side: everything is submitted through the real HTTP API, as a business service
//! and its users would.

use std::collections::BTreeSet;

use anyhow::{ensure, Context as _};
use futures::stream::{self, StreamExt as _, TryStreamExt as _};
use herald_channels::kinds::webpush::topic;
use herald_standin::Script;
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::json;

use super::scenario::{self, Ch, Steps, Then, CASES};
use super::summary::StandIns;
use herald_core::auth::Authenticator;

/// Time to live of every demo notification: long enough never to expire during the run.
const TTL_SECONDS: u64 = 3_600;

#[derive(Debug, Deserialize)]
pub struct TaskBody {
    pub task_id: i64,
    pub reference: String,
    pub channel: String,
}

#[derive(Debug, Deserialize)]
pub struct CreatedBody {
    /// Opaque (a UUID): the API shows no serial id.
    pub notification_id: String,
    pub created: bool,
    pub tasks: Vec<TaskBody>,
}

#[derive(Debug, Deserialize)]
struct EventBody {
    notifications: Vec<CreatedBody>,
}

/// A caller of the demo's API.
pub struct Api<'a> {
    pub http: reqwest::Client,
    pub base: String,
    pub service_token: &'a str,
    pub auth: &'a Authenticator,
}

impl Api<'_> {
    /// `PUT /v1/users/{user}/channels/{channel}` with the user's own token.
    async fn preference(
        &self,
        user: &str,
        channel: Ch,
        destination: Option<&str>,
        enabled: bool,
    ) -> anyhow::Result<()> {
        let mut body = json!({ "enabled": enabled });
        if let Some(destination) = destination {
            body["destination"] = json!(destination);
        }
        let token = self.auth.user_token(user);
        let response = self
            .http
            .put(format!("{}/v1/users/{user}/channels/{}", self.base, channel.name()))
            .bearer_auth(token.expose_secret())
            .json(&body)
            .send()
            .await
            .context("PUT preference")?;
        ensure!(response.status() == 200, "PUT preference of {user}/{} answered {}", channel.name(), response.status());
        Ok(())
    }

    async fn post(&self, path: &str, body: &serde_json::Value) -> anyhow::Result<reqwest::Response> {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(self.service_token)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))
    }

    /// `POST /v1/notifications`; returns the status and the answer.
    async fn notify(
        &self,
        user: &str,
        event_key: &str,
        body: &str,
        max_attempts: Option<u32>,
    ) -> anyhow::Result<(u16, CreatedBody)> {
        let mut request = json!({ "user_id": user, "event_key": event_key, "body": body, "ttl_seconds": TTL_SECONDS });
        if let Some(max) = max_attempts {
            request["max_attempts"] = json!(max);
        }
        let response = self.post("/v1/notifications", &request).await?;
        let status = response.status().as_u16();
        ensure!(matches!(status, 200 | 201), "POST /v1/notifications for {user} answered {status}");
        Ok((status, response.json().await.context("the submit answer")?))
    }
}

/// Everything the submissions produced, for the summary and the checks.
#[derive(Debug, Default)]
pub struct Submitted {
    /// Every notification id seen (created or returned for a duplicate).
    pub notifications: BTreeSet<String>,
    /// The order notification of the first background user (`scenario::user(1)`).
    pub first_order: Option<String>,
    /// Background notifications answered 201.
    pub created: u64,
    /// Submits answered 200 `created: false` (background duplicates and the repeated event).
    pub duplicates: u64,
    /// Duplicates whose answer named the same notification as the first submit (should be all).
    pub duplicates_same_id: u64,
    /// Notifications created by the `/v1/events` fan-out.
    pub fan_out_created: u64,
    /// Status of the repeated event and how many it created.
    pub fan_out_repeat: (u16, u64),
    /// The in-app-only notification and its task count.
    pub in_app: Option<(String, usize)>,
    /// Status of the invalid submit (expected 422).
    pub invalid_status: u16,
    /// Per case, in table order: the notification and its one task.
    pub cases: Vec<(String, i64)>,
    /// Tasks created, all submissions together.
    pub tasks: u64,
}

/// Sets preferences, submits the mix and queues the stand-ins' scripted steps. Nothing runs a worker
/// yet, so the scripts are in place before any task is claimed.
///
/// # Errors
/// An HTTP failure or an answer the demo did not expect.
pub async fn submit_mix(api: &Api<'_>, standins: &StandIns<'_>) -> anyhow::Result<Submitted> {
    let mut out = Submitted::default();

    // Preferences: background users, case users.
    let mut prefs: Vec<(String, Ch)> = Vec::new();
    for i in 1..=scenario::USERS {
        prefs.extend(scenario::channels_of(i).into_iter().map(|ch| (scenario::user(i), ch)));
    }
    prefs.extend(CASES.iter().map(|case| (format!("case-{}", case.id), case.channel)));
    let prefs: Vec<(String, Ch, String)> = prefs
        .into_iter()
        .map(|(user, ch)| {
            // A Web Push subscription is made by the push service, as a browser's would be.
            let destination = scenario::destination(&user, ch).unwrap_or_else(|| standins.webpush.subscribe());
            (user, ch, destination)
        })
        .collect();
    stream::iter(prefs.iter().map(|(user, ch, destination)| api.preference(user, *ch, Some(destination), true)))
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;

    // Miaotixing is scripted by code and e-mail by address, before anything is sent.
    for case in CASES {
        let Some(destination) = scenario::destination(&format!("case-{}", case.id), case.channel) else { continue };
        match (case.channel, case.steps) {
            (Ch::Miao, Steps::Http(steps)) => {
                steps().into_iter().for_each(|s| standins.miao.script_for(&destination, s));
            }
            (Ch::Email, Steps::Smtp(steps)) => {
                steps().into_iter().for_each(|s| standins.email.script_for(&destination, s));
            }
            _ => {}
        }
    }

    // Background: one order notification per user.
    let orders = stream::iter((1..=scenario::USERS).map(|i| async move {
        let user = scenario::user(i);
        let body = format!("Your order ord-{} has shipped", 1000 + i);
        api.notify(&user, &format!("order-{}-shipped", 1000 + i), &body, None).await
    }))
    .buffered(8)
    .try_collect::<Vec<_>>()
    .await?;
    out.first_order = orders.first().map(|(_, created)| created.notification_id.clone());
    for (status, created) in &orders {
        ensure!(*status == 201 && created.created, "a first submit was not created");
        out.created += 1;
        out.tasks += created.tasks.len() as u64;
        out.notifications.insert(created.notification_id.clone());
    }

    // The same submits again, as a business service retrying a call whose answer it lost: the same
    // content (a different body under the same key would be refused with 409).
    for (i, (_, first)) in orders.iter().enumerate().take(scenario::DUPLICATES) {
        let n = i + 1;
        let body = format!("Your order ord-{} has shipped", 1000 + n);
        let (status, again) =
            api.notify(&scenario::user(n), &format!("order-{}-shipped", 1000 + n), &body, None).await?;
        ensure!(status == 200 && !again.created, "a duplicate submit answered {status}");
        out.duplicates += 1;
        if again.notification_id == first.notification_id {
            out.duplicates_same_id += 1;
        }
    }

    // One event for many users, then the same event again.
    let recipients: Vec<String> = (1..=scenario::FAN_OUT).map(scenario::user).collect();
    let event = json!({
        "event_key": "spring-sale-2026",
        "recipients": recipients,
        "body": "The spring sale starts tomorrow",
        "ttl_seconds": TTL_SECONDS,
    });
    let response = api.post("/v1/events", &event).await?;
    ensure!(response.status() == 201, "POST /v1/events answered {}", response.status());
    let fan_out: EventBody = response.json().await.context("the event answer")?;
    for created in &fan_out.notifications {
        out.fan_out_created += u64::from(created.created);
        out.tasks += created.tasks.len() as u64;
        out.notifications.insert(created.notification_id.clone());
    }
    let response = api.post("/v1/events", &event).await?;
    let status = response.status().as_u16();
    let repeat: EventBody = response.json().await.context("the repeated event answer")?;
    out.fan_out_repeat = (status, repeat.notifications.iter().filter(|n| n.created).count() as u64);
    out.duplicates += repeat.notifications.iter().filter(|n| !n.created).count() as u64;
    out.duplicates_same_id += repeat
        .notifications
        .iter()
        .filter(|n| !n.created && fan_out.notifications.iter().any(|f| f.notification_id == n.notification_id))
        .count() as u64;

    // A user with no channel: the notification is in the inbox only.
    let (_, in_app) = api.notify(scenario::IN_APP_USER, "welcome", "Welcome to the shop", None).await?;
    out.notifications.insert(in_app.notification_id.clone());
    out.in_app = Some((in_app.notification_id.clone(), in_app.tasks.len()));

    // Bad input: refused with a problem document naming the field, nothing written.
    let invalid = json!({ "user_id": scenario::user(1), "event_key": "bad", "body": "x", "ttl_seconds": 0 });
    out.invalid_status = api.post("/v1/notifications", &invalid).await?.status().as_u16();

    // The scripted cases.
    for case in CASES {
        let user = format!("case-{}", case.id);
        let (status, created) = api
            .notify(&user, &format!("case-{}", case.id), &format!("Scripted case {}", case.id), case.max_attempts)
            .await?;
        ensure!(status == 201 && created.tasks.len() == 1, "case {} did not create one task", case.id);
        let task = &created.tasks[0];
        ensure!(task.channel == case.channel.name(), "case {} got a task on {}", case.id, task.channel);
        let reference = task.reference.clone();
        let steps = || match case.steps {
            Steps::Http(steps) => steps(),
            Steps::Smtp(_) => Vec::new(),
        };
        match case.channel {
            Ch::Push => steps().into_iter().for_each(|step: Script| standins.push.script_for(&reference, step)),
            Ch::Sms => steps().into_iter().for_each(|step: Script| standins.sms.script_for(&reference, step)),
            Ch::WebPush => {
                steps().into_iter().for_each(|step: Script| standins.webpush.script_for(&topic(&reference), step));
            }
            Ch::Miao | Ch::Email => {}
        }
        if case.then == Then::SwitchOff {
            api.preference(&user, case.channel, None, false).await?;
        }
        out.tasks += 1;
        out.notifications.insert(created.notification_id.clone());
        out.cases.push((created.notification_id.clone(), task.task_id));
    }
    Ok(out)
}
