//! The use cases a person starts — list and resolve parked tasks, send a test prompt and confirm it,
//! rotate destination keys — written once over [`Services`] and called by every front end: the HTTP API,
//! the command line and the console. Front ends only translate: arguments and forms in, words, problem
//! documents or pages out.

use std::time::Instant;

use herald_domain::resolve::FinalState;
use herald_domain::{
    slot_kept, ChannelName, IdempotencyKey, Millis, NotificationRef, Observation, Outcome, TaskId, Timestamp, UserId,
};
use herald_ports::{
    Channel, ChannelPref, Created, DestinationCipher, InboxCursor, InboxItem, MarkRead, NewNotification,
    NotificationView, OutboundMessage, OutcomeCount, ParkedFilter, ParkedTask, PreferenceStore, ResolveError, Resolved,
    StoreError, TaskCount, TaskView, TestSendGrant,
};
use std::sync::Arc;

use crate::services::Services;

pub use herald_domain::operators::{Actor, AuditAction, Capability, Forbidden};
use herald_ports::{AuditEvent, AuditFilter, AuditStore, NewAuditEvent};

/// The longest page of the audit trail.
pub const MAX_AUDIT_PAGE: u32 = 200;

/// A page of the audit trail, newest first, filtered (`herald_ports::AuditFilter`).
///
/// # Errors
/// An actor without [`Capability::ViewAudit`], or a store failure.
pub async fn audit_page(
    services: &Services,
    actor: &Actor,
    filter: &AuditFilter,
) -> Result<Vec<AuditEvent>, AccessError> {
    actor.require(Capability::ViewAudit)?;
    // One more than the largest page: a front end reads one more to know whether an older page exists.
    let filter = AuditFilter { limit: filter.limit.clamp(1, MAX_AUDIT_PAGE + 1), ..filter.clone() };
    Ok(services.audit.audit_page(&filter).await?)
}

/// Why a use case an operator may be refused did not answer. A refusal reads and writes nothing.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The actor's role lacks the capability named.
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `Ok` when nobody acts for the user (the user themselves, as the front end authenticated them), or
/// when the operator acting for them has `capability`.
///
/// # Errors
/// [`Forbidden`], naming the capability.
pub fn for_user(operator: Option<&Actor>, capability: Capability) -> Result<(), Forbidden> {
    operator.map_or(Ok(()), |actor| actor.require(capability))
}

/// One field in which a submission differs from the one stored under the same (user, event key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The recipient's position in an event; `None` for a single submission.
    pub recipient: Option<usize>,
    /// The field that differs (`body`, `ttl_seconds`, `thread_key`, `max_attempts`).
    pub field: &'static str,
}

/// Why a submission was not stored. Nothing was written in either case.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The (user, event key) was used before for a notification that said something else: a caller's
    /// mistake, not a repeat. Empty when another submission stored a different one meanwhile and the
    /// fields could not be named.
    #[error("the event key was used before for a different notification")]
    Conflict(Vec<Difference>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Submits one notification (SPEC §3): stored once per (user, event key), with its inbox item and a task
/// per enabled channel, before any channel is called. A repeat answers the stored one (`created =
/// false`) and writes nothing; a repeat that says something else is a [`SubmitError::Conflict`].
///
/// # Errors
/// A conflict or a store failure.
pub async fn submit(services: &Services, new: &NewNotification) -> Result<Created, SubmitError> {
    let now = services.clock.now().await?;
    let created = services.submissions.create(new, &services.channels, now).await?;
    if !created.differs.is_empty() {
        let differences = created.differs.iter().map(|field| Difference { recipient: None, field }).collect();
        return Err(SubmitError::Conflict(differences));
    }
    crate::metrics::record_submission(created.created);
    Ok(created)
}

/// Submits one event for several recipients, each as [`submit`] would, in one transaction: all of it or,
/// on a conflict or a failure, none of it. A repeat must say the same thing for every recipient; that is
/// checked before anything is written.
///
/// # Errors
/// A conflict (naming each recipient's differing fields) or a store failure.
pub async fn submit_event(services: &Services, news: &[NewNotification]) -> Result<Vec<Created>, SubmitError> {
    event_conflicts(services, news).await?;
    let now = services.clock.now().await?;
    let created = services.submissions.create_event(news, &services.channels, now).await?;
    if created.iter().any(|c| !c.differs.is_empty()) {
        // Another submission stored a different one meanwhile; nothing of this event was written. Its
        // fields are named as the check above names them.
        event_conflicts(services, news).await?;
        return Err(SubmitError::Conflict(Vec::new()));
    }
    for one in &created {
        crate::metrics::record_submission(one.created);
    }
    Ok(created)
}

/// Every recipient field in which `news` differ from what is stored under the same (user, event key).
async fn event_conflicts(services: &Services, news: &[NewNotification]) -> Result<(), SubmitError> {
    let Some(first) = news.first() else { return Ok(()) };
    let users: Vec<_> = news.iter().map(|n| n.user_id.clone()).collect();
    let stored = services.submissions.submitted(&first.event_key, &users).await?;
    let mut differences = Vec::new();
    for (i, new) in news.iter().enumerate() {
        if let Some(before) = stored.iter().find(|s| s.user_id == new.user_id) {
            differences
                .extend(before.differences(new).into_iter().map(|field| Difference { recipient: Some(i), field }));
        }
    }
    if differences.is_empty() {
        Ok(())
    } else {
        Err(SubmitError::Conflict(differences))
    }
}

/// Who reads a notification: a calling service (any), an operator (any, with
/// [`Capability::ViewOperations`]), or one user, who sees only their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reader {
    Any,
    Operator(Actor),
    User(UserId),
}

/// One notification with its tasks and every attempt, oldest first — `None` when there is none, and
/// likewise for another user's: a user learns nothing about notifications that are not their own, not
/// even that they exist.
///
/// # Errors
/// An operator without [`Capability::ViewOperations`], or a store failure.
pub async fn notification(
    services: &Services,
    reader: &Reader,
    id: NotificationRef,
) -> Result<Option<NotificationView>, AccessError> {
    if let Reader::Operator(actor) = reader {
        actor.require(Capability::ViewOperations)?;
    }
    let Some(id) = services.reads.notification_by_ref(id).await? else { return Ok(None) };
    let view = services.reads.notification(id).await?;
    Ok(view.filter(|view| match reader {
        Reader::Any | Reader::Operator(_) => true,
        Reader::User(user) => user == &view.user_id,
    }))
}

/// The parked tasks, oldest first, at most `limit`.
///
/// # Errors
/// An actor without [`Capability::ViewOperations`], or a store failure.
pub async fn review_list(services: &Services, actor: &Actor, limit: u32) -> Result<Vec<TaskView>, AccessError> {
    actor.require(Capability::ViewOperations)?;
    Ok(services.review.parked(limit).await?)
}

/// The capability a decision needs: sending again is apart from marking sent or not sent.
#[must_use]
pub fn decision_capability(final_state: FinalState) -> Capability {
    match final_state {
        FinalState::Sent | FinalState::Failed => Capability::ResolveTasks,
        FinalState::Resend => Capability::SendAgain,
    }
}

/// Settles one parked task as a person decided, once: a task that is not parked (already resolved, or
/// still automatic) is refused and nothing changes.
///
/// # Errors
/// An actor without the decision's capability ([`decision_capability`]), not found, not parked, or a
/// store failure.
pub async fn resolve(
    services: &Services,
    actor: &Actor,
    task: TaskId,
    final_state: FinalState,
    note: &str,
) -> Result<Resolved, ResolveError> {
    actor.require(decision_capability(final_state))?;
    let now = services.clock.now().await?;
    let audit = NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::of_decision(final_state),
        target: format!("task {task}"),
        detail: note.to_owned(),
        at: now,
    };
    let resolved = services.review.resolve_manually(task, final_state, note, &audit, now).await?;
    // The note is the operator's text: it is not logged (it may quote a user), only the decision.
    tracing::info!(task_id = %task, state = %resolved.state, decision = final_state.as_str(), "task resolved by a human");
    metrics::counter!("herald_manual_resolutions_total", "decision" => final_state.as_str()).increment(1);
    Ok(resolved)
}

/// The words of a human decision, the same in every view (SPEC §6, issue 15): a decision is never shown
/// as the channel's acceptance, and its note is not an error.
#[must_use]
pub fn decision_words(final_state: FinalState) -> &'static str {
    match final_state {
        FinalState::Sent => "marked sent by an operator",
        FinalState::Failed => "marked not sent by an operator",
        FinalState::Resend => "sent again at an operator's request",
    }
}

/// Marks a user's inbox item read (SPEC §11). Repeating it changes nothing and says when it was read.
///
/// `operator`: who marks it for the user ([`Capability::ActForUsers`]); `None` when the user does.
///
/// # Errors
/// An operator without the capability, or a store failure.
pub async fn mark_read(
    services: &Services,
    user: &UserId,
    operator: Option<&Actor>,
    notification: NotificationRef,
) -> Result<MarkRead, AccessError> {
    for_user(operator, Capability::ActForUsers)?;
    refuse_erased(services, user).await?;
    let now = services.clock.now().await?;
    Ok(services.inbox.mark_read(user, notification, now).await?)
}

/// `Err(StoreError::UserErased)` when `user` was erased (SPEC §13). The inbox, the test send, sign-in
/// links and the user's console sign-in answer with it (410 on the API and the console) from the
/// erasure's commit on: the rows that remain until the content boundary — bodies, inbox items — are kept
/// for that boundary's purge, not for anyone to read. One look-up by the id's digest (the erasure record's
/// key), so a tombstone still refuses.
///
/// # Errors
/// [`StoreError::UserErased`], or the look-up's failure.
pub async fn refuse_erased(services: &Services, user: &UserId) -> Result<(), StoreError> {
    if services.lifecycle.erasure(user).await?.is_some() {
        return Err(StoreError::UserErased);
    }
    Ok(())
}

/// A page of a user's inbox, newest first, after `cursor`.
///
/// `operator`: who reads it for the user ([`Capability::ViewOperations`]); `None` when the user does.
///
/// # Errors
/// An operator without the capability, or a store failure.
pub async fn inbox_page(
    services: &Services,
    user: &UserId,
    operator: Option<&Actor>,
    cursor: Option<InboxCursor>,
    limit: u32,
) -> Result<Vec<InboxItem>, AccessError> {
    for_user(operator, Capability::ViewOperations)?;
    refuse_erased(services, user).await?;
    Ok(services.inbox.inbox_page(user, cursor, limit).await?)
}

/// A page of the review queue with the console's filters (channel, parked for at least `min_age`).
///
/// # Errors
/// An actor without [`Capability::ViewOperations`], or a store failure.
pub async fn review_page(
    services: &Services,
    actor: &Actor,
    channel: Option<ChannelName>,
    min_age: Option<Millis>,
    after: Option<(Timestamp, TaskId)>,
    limit: u32,
) -> Result<Vec<ParkedTask>, AccessError> {
    review_queue(services, actor, channel, min_age, after, limit).await.map(|(_, tasks)| tasks)
}

/// As [`review_page`], with the moment the page was read (the console shows each task's age).
///
/// # Errors
/// An actor without [`Capability::ViewOperations`], or a store failure.
pub async fn review_queue(
    services: &Services,
    actor: &Actor,
    channel: Option<ChannelName>,
    min_age: Option<Millis>,
    after: Option<(Timestamp, TaskId)>,
    limit: u32,
) -> Result<(Timestamp, Vec<ParkedTask>), AccessError> {
    actor.require(Capability::ViewOperations)?;
    let now = services.clock.now().await?;
    let parked_before = min_age.map(|age| now - age);
    let tasks = services.review.parked_page(&ParkedFilter { channel, parked_before, after, limit }).await?;
    Ok((now, tasks))
}

/// What the delivery log can be asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogQuery {
    /// A notification's opaque id.
    NotificationRef(NotificationRef),
    /// A task reference (the `ref` a channel saw).
    Reference(String),
    /// A user's event.
    Event(UserId, herald_domain::EventKey),
}

/// The notification a delivery-log query names, with its tasks and every attempt.
///
/// # Errors
/// An actor without [`Capability::ViewOperations`], or a store failure.
pub async fn find_notification(
    services: &Services,
    actor: &Actor,
    query: &LogQuery,
) -> Result<Option<NotificationView>, AccessError> {
    actor.require(Capability::ViewOperations)?;
    let id = match query {
        LogQuery::NotificationRef(id) => match services.reads.notification_by_ref(*id).await? {
            // A task reference is a UUID too: a text that names no notification may name a task.
            None => services.reads.notification_by_reference(&id.to_string()).await?,
            found => found,
        },
        LogQuery::Reference(reference) => services.reads.notification_by_reference(reference).await?,
        LogQuery::Event(user, key) => services.reads.notification_by_event(user, key).await?,
    };
    match id {
        Some(id) => Ok(services.reads.notification(id).await?),
        None => Ok(None),
    }
}

/// One channel as the operator overview shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelOverview {
    pub channel: ChannelName,
    pub rules: herald_domain::ChannelRules,
    /// Tasks by state (parked ones counted apart).
    pub tasks: Vec<TaskCount>,
    /// Of those, the tasks whose SENT or FAILED a person decided (`MANUAL_SENT`, `MANUAL_FAILED`): the
    /// overview shows them apart from the channel's own answers.
    pub decided: Vec<OutcomeCount>,
    /// Attempts of the last hour by outcome.
    pub recent: Vec<OutcomeCount>,
    /// The earliest time the next call may leave (SPEC §7), when the channel has an interval.
    pub next_slot: Option<Timestamp>,
    /// The latest failing outcome of the last hour.
    pub last_error: Option<Outcome>,
}

impl ChannelOverview {
    /// How many tasks of `state` a person decided (SENT and FAILED; zero for the other states).
    #[must_use]
    pub fn decided_in(&self, state: herald_domain::TaskState) -> u64 {
        let outcome = match state {
            herald_domain::TaskState::Sent => Outcome::ManualSent,
            herald_domain::TaskState::Failed => Outcome::ManualFailed,
            _ => return 0,
        };
        self.decided.iter().filter(|d| d.outcome == outcome).map(|d| d.count).sum()
    }
}

/// What the overview's chart groups the outcomes of attempts into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChartClass {
    /// The channel accepted (`ACCEPTED`, `ACCEPTED_REPLAY`, `QUERY_FOUND`).
    Accepted,
    /// The channel refused, or nothing was sent (`REJECTED`, `RETRYABLE_REJECT`, `PREF_DISABLED`,
    /// `TTL_EXPIRED`, `QUERY_NOT_FOUND`, `USER_ERASED`).
    Refused,
    /// Nobody knows whether the channel accepted (`TIMEOUT`, `IO_ERROR`, `LEASE_EXPIRED`, `QUERY_FAILED`,
    /// the `…_UNCERTAIN` ends).
    Unknown,
    /// A person decided (`MANUAL_SENT`, `MANUAL_FAILED`, `MANUAL_RESEND`).
    Decided,
}

impl ChartClass {
    /// The class of an outcome: every outcome has exactly one.
    #[must_use]
    pub fn of(outcome: Outcome) -> ChartClass {
        match outcome {
            Outcome::Accepted | Outcome::AcceptedReplay | Outcome::QueryFound => ChartClass::Accepted,
            Outcome::Rejected
            | Outcome::RetryableReject
            | Outcome::PrefDisabled
            | Outcome::TtlExpired
            | Outcome::QueryNotFound
            | Outcome::UserErased => ChartClass::Refused,
            Outcome::Timeout
            | Outcome::IoError
            | Outcome::LeaseExpired
            | Outcome::QueryFailed
            | Outcome::PrefDisabledUncertain
            | Outcome::TtlExpiredUncertain => ChartClass::Unknown,
            Outcome::ManualSent | Outcome::ManualFailed | Outcome::ManualResend => ChartClass::Decided,
        }
    }
}

/// One bar of the chart: the attempts that started in `[start, start + width)`, by class, and the tasks
/// that parked in it and still wait for a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChartBar {
    pub start: Timestamp,
    pub accepted: u64,
    pub refused: u64,
    pub unknown: u64,
    pub decided: u64,
    pub parked: u64,
}

impl ChartBar {
    /// An empty bar starting at `start`.
    #[must_use]
    pub fn empty(start: Timestamp) -> ChartBar {
        ChartBar { start, accepted: 0, refused: 0, unknown: 0, decided: 0, parked: 0 }
    }

    /// The attempts of the bar (parked tasks are not attempts).
    #[must_use]
    pub fn attempts(&self) -> u64 {
        self.accepted + self.refused + self.unknown + self.decided
    }
}

/// A span of time in equal buckets, every bucket present (empty ones with zeros), oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chart {
    pub width: Millis,
    pub bars: Vec<ChartBar>,
}

impl Chart {
    /// The sums over every bar.
    #[must_use]
    pub fn total(&self) -> ChartBar {
        self.bars.iter().fold(ChartBar::empty(self.bars.first().map_or(Timestamp(0), |b| b.start)), |sum, b| ChartBar {
            start: sum.start,
            accepted: sum.accepted + b.accepted,
            refused: sum.refused + b.refused,
            unknown: sum.unknown + b.unknown,
            decided: sum.decided + b.decided,
            parked: sum.parked + b.parked,
        })
    }
}

/// The operator overview: every configured channel, and the last hour and day in buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    pub now: Timestamp,
    pub channels: Vec<ChannelOverview>,
    /// The last hour, a bar per minute.
    pub hour: Chart,
    /// The last day, a bar per hour.
    pub day: Chart,
    /// Status events no longer posted: their endpoint kept refusing them.
    pub status_events_parked: u64,
}

/// `count` buckets of `width` ending with the one that holds `now`, filled from the store's counts.
async fn chart(services: &Services, now: Timestamp, width: Millis, count: i64) -> Result<Chart, StoreError> {
    let w = i64::try_from(width.0.max(1)).unwrap_or(i64::MAX);
    let last = now.as_millis().div_euclid(w) * w;
    let first = Timestamp(last - (count - 1) * w);
    let mut bars: Vec<ChartBar> = (0..count).map(|i| ChartBar::empty(Timestamp(first.as_millis() + i * w))).collect();
    let index = |start: Timestamp| usize::try_from((start.as_millis() - first.as_millis()).div_euclid(w)).ok();
    for b in services.reads.outcome_buckets(first, width).await? {
        if let Some(bar) = index(b.start).and_then(|i| bars.get_mut(i)) {
            match ChartClass::of(b.outcome) {
                ChartClass::Accepted => bar.accepted += b.count,
                ChartClass::Refused => bar.refused += b.count,
                ChartClass::Unknown => bar.unknown += b.count,
                ChartClass::Decided => bar.decided += b.count,
            }
        }
    }
    for p in services.reads.parked_buckets(first, width).await? {
        if let Some(bar) = index(p.start).and_then(|i| bars.get_mut(i)) {
            bar.parked += p.count;
        }
    }
    Ok(Chart { width, bars })
}

/// The operator overview: every configured channel's counts, outcome mix, egress slot and last error, and
/// the chart of the last hour (per minute) and the last day (per hour).
///
/// # Errors
/// An actor without [`Capability::ViewOperations`], or a store failure.
pub async fn overview(services: &Services, actor: &Actor) -> Result<Overview, AccessError> {
    actor.require(Capability::ViewOperations)?;
    let now = services.clock.now().await?;
    let counts = services.reads.task_counts().await?;
    let decided = services.reads.decided_counts().await?;
    let recent = services.reads.outcome_counts(now - Millis::from_secs(3600)).await?;
    let slots = services.reads.egress_slots().await?;
    let channels = services
        .channels
        .0
        .iter()
        .map(|(channel, rules)| {
            let recent: Vec<OutcomeCount> = recent.iter().filter(|c| &c.channel == channel).cloned().collect();
            let last_error = recent
                .iter()
                .filter(|c| !c.outcome.is_acceptance() && !c.outcome.is_manual())
                .max_by_key(|c| c.latest)
                .map(|c| c.outcome);
            let next_slot = slots
                .iter()
                .find(|s| &s.channel == channel)
                .and_then(|s| s.last_call_at)
                .filter(|_| rules.min_interval.0 > 0)
                .map(|at| at + rules.min_interval + rules.egress_guard);
            ChannelOverview {
                channel: channel.clone(),
                rules: *rules,
                tasks: counts.iter().filter(|c| &c.channel == channel).cloned().collect(),
                decided: decided.iter().filter(|c| &c.channel == channel).cloned().collect(),
                recent,
                next_slot,
                last_error,
            }
        })
        .collect();
    let hour = chart(services, now, Millis::from_secs(60), 60).await?;
    let day = chart(services, now, Millis::from_secs(3600), 24).await?;
    let status_events_parked = services.status.parked_status_event_count().await?;
    Ok(Overview { now, channels, hour, day, status_events_parked })
}

/// The parked status events, newest first, at most `limit` (issue 46).
///
/// # Errors
/// Store failures.
pub async fn parked_status_events(
    services: &Services,
    limit: u32,
) -> Result<Vec<herald_ports::ParkedStatusEvent>, StoreError> {
    services.status.parked_status_events(limit).await
}

/// The preferences a user has set, one per configured channel (`None` where nothing is stored).
///
/// # Errors
/// Store failures.
pub async fn user_channels(
    services: &Services,
    user: &UserId,
) -> Result<Vec<(ChannelName, Option<ChannelPref>)>, StoreError> {
    let mut out = Vec::new();
    for channel in services.channels.names() {
        out.push((channel.clone(), services.prefs.get(user, channel).await?));
    }
    Ok(out)
}

/// The longest destination stored (an address, a number, a channel code, a Web Push subscription).
pub const MAX_DESTINATION_CHARS: usize = 1024;

/// What the channel says of a stored Web Push subscription the push service called gone.
pub const SUBSCRIPTION_EXPIRED: &str = "subscription expired";

/// Why a preference was not set. Nothing was written in every case.
#[derive(Debug, thiserror::Error)]
pub enum PreferenceError {
    #[error("the channel is not configured")]
    UnknownChannel,
    /// The destination given cannot be one of this channel's. The reason never repeats it.
    #[error("destination {0}")]
    InvalidDestination(String),
    /// Enabling needs a destination and none is stored: a refusal that depends on what is stored, not on
    /// the request alone.
    #[error("a destination is required to enable a channel that has none stored")]
    NoDestination,
    /// Enabling a channel whose stored Web Push subscription the push service said is gone (404/410):
    /// switching it on again would only fail, the browser must subscribe again.
    #[error("the stored subscription expired; the browser must subscribe again")]
    SubscriptionExpired,
    #[error("the destination could not be encrypted")]
    Encryption,
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A preference as stored, with what the channel knows of its destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreferenceSet {
    pub pref: ChannelPref,
    /// The push service said the stored subscription is gone: the channel stays off until a new one.
    pub subscription_expired: bool,
}

/// Checks a destination a person typed or sent for `channel`, before anything is stored: not empty, not
/// too long, no control character, and the channel kind's own rule (an e-mail address, a Web Push
/// subscription whose endpoint passes the egress guard, …).
///
/// # Errors
/// A short reason that never repeats the destination.
pub fn check_destination(
    services: &Services,
    channel: &ChannelName,
    destination: &secrecy::SecretString,
) -> Result<(), String> {
    use secrecy::ExposeSecret as _;
    let text = destination.expose_secret();
    if text.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    if text.chars().count() > MAX_DESTINATION_CHARS {
        return Err(format!("must be at most {MAX_DESTINATION_CHARS} characters"));
    }
    if text.chars().any(char::is_control) {
        // No address, number or channel code has one; a stray one would only fail at the channel.
        return Err("must not contain control characters".to_owned());
    }
    // The channel's own check, with its settings (the egress guard of a Web Push channel).
    let Ok(adapter) = adapter(services, channel) else { return Ok(()) };
    adapter.check_destination(text).map_err(str::to_owned)
}

/// Sets a user's switch and, when given, a new destination — the one path of the API, the console and
/// the command line. The destination is checked ([`check_destination`]) and encrypted here; the same
/// destination again keeps the stored ciphertext, and with it a verification or a pending test
/// confirmation (encryption uses a fresh nonce, so new bytes would look like a change). A stored value
/// that cannot be decrypted (its key is gone) counts as different, so the new one replaces it.
///
/// # Errors
/// Unknown channel, an invalid destination, enabling without a stored destination or with an expired
/// subscription, an operator (`operator`, `None` when the user acts) without
/// [`Capability::ActForUsers`], or a store failure. Nothing is written when it fails.
pub async fn set_preference(
    services: &Services,
    user: &UserId,
    operator: Option<&Actor>,
    channel: &ChannelName,
    enabled: bool,
    destination: Option<&secrecy::SecretString>,
) -> Result<PreferenceSet, PreferenceError> {
    use secrecy::ExposeSecret as _;
    for_user(operator, Capability::ActForUsers)?;
    services.channels.get(channel).ok_or(PreferenceError::UnknownChannel)?;
    if let Some(destination) = destination {
        check_destination(services, channel, destination).map_err(PreferenceError::InvalidDestination)?;
    }
    let stored = services.prefs.destination(user, channel).await?;
    if enabled && destination.is_none() {
        if stored.is_none() {
            return Err(PreferenceError::NoDestination);
        }
        // The channel found the stored destination gone for good (only a Web Push subscription can be,
        // today): switching it on again would only fail.
        if services.prefs.destination_expired(user, channel).await? {
            return Err(PreferenceError::SubscriptionExpired);
        }
    }
    let keys = services.user_keys.as_ref();
    let ciphertext = match destination {
        Some(new) => {
            let same = match stored.as_ref() {
                Some(bytes) => {
                    crate::user_keys::open_destination_now(keys, services.cipher.as_ref(), user, channel, bytes)
                        .await
                        .is_ok_and(|old| old.expose_secret() == new.expose_secret())
                }
                None => false,
            };
            if same {
                None
            } else {
                match crate::user_keys::seal_destination(keys, services.cipher.as_ref(), user, channel, new).await {
                    Ok(sealed) => Some(sealed),
                    Err(crate::user_keys::KeyError::Vault(error)) => return Err(PreferenceError::Store(error)),
                    Err(error) => {
                        tracing::error!(%error, "destination could not be encrypted");
                        return Err(PreferenceError::Encryption);
                    }
                }
            }
        }
        None => None,
    };
    let pref = services.prefs.put(user, channel, enabled, ciphertext).await?;
    let subscription_expired = services.prefs.destination_expired(user, channel).await?;
    Ok(PreferenceSet { pref, subscription_expired })
}

/// What a test prompt proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TestOutcome {
    /// The channel accepted it; only the user can say whether it arrived (confirm).
    Accepted,
    /// The channel refused it; `why` is a short, secret-free reason.
    Refused { why: String },
    /// The connection never opened: nothing reached the channel.
    NotSent,
    /// No usable answer: we cannot tell whether it arrived.
    Unknown,
}

/// One test send's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestSend {
    /// The reference the channel saw.
    pub reference: String,
    pub outcome: TestOutcome,
    /// Whether the stored destination is verified (a test send never changes it).
    pub verified: bool,
}

/// Why a test send or a confirmation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum TestSendError {
    #[error("the channel is not configured")]
    UnknownChannel,
    #[error("no destination is stored for this channel")]
    NoDestination,
    /// Real deliveries come first: the channel's egress interval does not allow a test call for this long
    /// (a delivery is due, or the next slot is not free).
    #[error("too soon for this channel")]
    TooSoon(Millis),
    /// The user's test sends on this channel are spent for this long (`[test_send]`).
    #[error("the test-send quota is spent")]
    QuotaExceeded(Millis),
    #[error("no accepted test send to the stored destination")]
    NothingToConfirm,
    #[error("the stored destination cannot be decrypted")]
    Undecryptable,
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a test prompt says. Channels configured with a privacy-safe `text` send that text instead.
pub const TEST_TEXT: &str = "Herald test message: if you can read this, notifications on this channel reach you.";

fn adapter(services: &Services, channel: &ChannelName) -> Result<Arc<dyn Channel>, TestSendError> {
    services
        .registry
        .get(channel)
        .filter(|_| services.channels.get(channel).is_some())
        .ok_or(TestSendError::UnknownChannel)
}

/// Whether `channel` is a configured channel (for front ends that validate before acting).
#[must_use]
pub fn is_configured(services: &Services, channel: &ChannelName) -> bool {
    adapter(services, channel).is_ok()
}

/// Sends a test prompt to the user's stored destination (SPEC §9), through the same registry, adapter,
/// classification and egress interval as a delivery — so a user pressing "test" cannot make Herald call
/// a channel faster than its interval. It proves no more than it proves: an acceptance asks the user to
/// confirm; a refusal neither verifies nor deletes the destination.
///
/// `operator`: who sends it on the user's behalf ([`Capability::TestSendForUser`]); `None` when the user
/// does.
///
/// # Errors
/// An operator without the capability, unknown channel, no destination, too soon, undecryptable, or a
/// store failure.
pub async fn test_send(
    services: &Services,
    user: &UserId,
    operator: Option<&Actor>,
    channel: &ChannelName,
) -> Result<TestSend, TestSendError> {
    for_user(operator, Capability::TestSendForUser)?;
    refuse_erased(services, user).await?;
    let adapter = adapter(services, channel)?;
    let Some(stored) = services.prefs.destination(user, channel).await? else {
        return Err(TestSendError::NoDestination);
    };
    let rules = adapter.rules();
    // As in the worker: measured from before the clock is read, so the slot's age is never understated.
    let clock_read = Instant::now();
    let now = services.clock.now().await?;
    let audit = operator.map(|actor| NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::TestSend,
        target: format!("user {user} on {channel}"),
        detail: String::new(),
        at: now,
    });
    match services
        .egress
        .reserve_test_send(user, channel, &rules, services.test_send_quota, audit.as_slice(), now)
        .await?
    {
        TestSendGrant::Go => {}
        TestSendGrant::QuotaExceeded(wait) => return Err(TestSendError::QuotaExceeded(wait)),
        TestSendGrant::ChannelBusy(wait) => return Err(TestSendError::TooSoon(wait)),
    }
    let destination = crate::user_keys::open_destination_now(
        services.user_keys.as_ref(),
        services.cipher.as_ref(),
        user,
        channel,
        &stored,
    )
    .await
    .map_err(|error| {
        tracing::error!(%error, "test send: destination could not be decrypted");
        TestSendError::Undecryptable
    })?;
    // Random: a reference made of the user id and the time would tell the channel (and anyone reading
    // its logs) who pressed "test" and when.
    let reference = format!("test-{}", uuid::Uuid::new_v4());
    let message = OutboundMessage {
        idempotency_key: IdempotencyKey::for_test_send(&reference),
        reference: reference.clone(),
        destination,
        text: adapter.outbound_text(TEST_TEXT, None),
        ttl_seconds: 300,
    };
    if !slot_kept(rules.min_interval, rules.egress_guard, clock_read.elapsed()) {
        // Too late for the slot just reserved; not called, like a worker that misses it.
        return Err(TestSendError::TooSoon(rules.min_interval + rules.egress_guard));
    }
    let classified = adapter.send(&message).await;
    let outcome = match classified.observation {
        Observation::Accepted { .. } | Observation::AcceptedReplay { .. } | Observation::QueryFound { .. } => {
            TestOutcome::Accepted
        }
        // A connection that never opened is not the channel's refusal: nothing reached it.
        Observation::RetryableReject { .. } if classified.detail.starts_with("not sent") => TestOutcome::NotSent,
        Observation::Rejected | Observation::RetryableReject { .. } => {
            let why = classified.detail.strip_prefix("refused: ").unwrap_or(&classified.detail);
            TestOutcome::Refused { why: why.to_owned() }
        }
        Observation::Timeout | Observation::IoError | Observation::QueryFailed | Observation::QueryNotFound => {
            TestOutcome::Unknown
        }
    };
    if outcome == TestOutcome::Accepted {
        // What the user will confirm is this destination; a later change makes the confirmation moot.
        services.prefs.record_test_accepted(user, channel, &stored).await?;
    }
    if herald_domain::classify::destination_gone(&classified) {
        // Gone for good, as a delivery would have found it: the channel goes off, marked, until the user
        // subscribes again.
        services.prefs.record_destination_gone(user, channel, &stored).await?;
    }
    tracing::info!(%channel, outcome = ?std::mem::discriminant(&outcome), "test send");
    let verified = services.prefs.get(user, channel).await?.is_some_and(|p| p.verified);
    Ok(TestSend { reference, outcome, verified })
}

/// The user confirms that a test prompt arrived: the stored destination becomes verified — only when a
/// test send to that very destination was accepted.
///
/// `operator`: who confirms for the user ([`Capability::ActForUsers`]); `None` when the user does.
///
/// # Errors
/// An operator without the capability, unknown channel, no destination, nothing to confirm, or a store
/// failure.
pub async fn confirm(
    services: &Services,
    user: &UserId,
    operator: Option<&Actor>,
    channel: &ChannelName,
) -> Result<ChannelPref, TestSendError> {
    for_user(operator, Capability::ActForUsers)?;
    refuse_erased(services, user).await?;
    adapter(services, channel)?;
    if !services.prefs.mark_verified(user, channel).await? {
        let stored = services.prefs.get(user, channel).await?;
        return Err(if stored.is_some_and(|p| p.has_destination) {
            TestSendError::NothingToConfirm
        } else {
            TestSendError::NoDestination
        });
    }
    services.prefs.get(user, channel).await?.ok_or(TestSendError::NoDestination)
}

/// What a key rotation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RotationReport {
    pub examined: u64,
    pub rotated: u64,
    /// Changed by someone else between read and write; the new value is theirs, under the current key.
    pub skipped: u64,
    /// Rows that could not be decrypted (their key is not loaded, or they are damaged), left as they are:
    /// "user U on channel C: why", never the value.
    pub unreadable: Vec<String>,
}

impl std::fmt::Display for RotationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} destinations examined, {} re-encrypted under the current key, {} changed concurrently (left as they are)",
            self.examined, self.rotated, self.skipped
        )?;
        if !self.unreadable.is_empty() {
            write!(f, ", {} could not be decrypted (left as they are):", self.unreadable.len())?;
            for row in &self.unreadable {
                write!(f, "\n  {row}")?;
            }
        }
        Ok(())
    }
}

/// Re-encrypts every destination not under the current key, row by row, never overwriting a
/// concurrent change (the replacement is conditional on the old ciphertext). A row it cannot decrypt —
/// its key is not loaded, or it is damaged — is skipped and reported (user, channel and why; never the
/// value), and the rotation goes on with the others.
///
/// # Errors
/// An actor without [`Capability::RotateKeys`] (nothing is read), or a store failure.
pub async fn rotate_keys(
    actor: &Actor,
    prefs: &dyn PreferenceStore,
    cipher: &dyn DestinationCipher,
    audit: (&dyn AuditStore, &dyn herald_ports::Clock),
    batch: u32,
) -> anyhow::Result<RotationReport> {
    use anyhow::Context as _;
    actor.require(Capability::RotateKeys)?;
    let report = rotate_rows(prefs, cipher, batch).await?;
    // A rotation is many transactions: its event is written once it is done, with what it did.
    let (trail, clock) = audit;
    let event = NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::RotateKeys,
        target: String::new(),
        detail: format!(
            "{} examined, {} re-encrypted, {} changed concurrently, {} unreadable",
            report.examined,
            report.rotated,
            report.skipped,
            report.unreadable.len()
        ),
        at: clock.now().await.context("cannot read the clock")?,
    };
    trail.record(&event).await.context("cannot record the rotation in the audit trail")?;
    Ok(report)
}

async fn rotate_rows(
    prefs: &dyn PreferenceStore,
    cipher: &dyn DestinationCipher,
    batch: u32,
) -> anyhow::Result<RotationReport> {
    use anyhow::Context as _;
    let mut report = RotationReport::default();
    let mut after: Option<(UserId, ChannelName)> = None;
    loop {
        let rows = prefs.destinations_after(after.clone(), batch.max(1)).await.context("cannot read destinations")?;
        let Some(last) = rows.last() else { break };
        after = Some((last.user_id.clone(), last.channel.clone()));
        for row in &rows {
            report.examined += 1;
            // A destination sealed under its user's data key is rotated by re-wrapping that key
            // (`UserKeys::rewrap`), not here.
            if crate::user_keys::DataKey::is_sealed_under_user_key(&row.ciphertext)
                || !cipher.needs_rotation(&row.ciphertext)
            {
                continue;
            }
            let plain = match cipher.decrypt(&row.user_id, &row.channel, &row.ciphertext) {
                Ok(plain) => plain,
                Err(error) => {
                    report.unreadable.push(format!("user {} on channel {}: {error}", row.user_id, row.channel));
                    continue;
                }
            };
            let new = cipher.encrypt(&row.user_id, &row.channel, &plain).context("cannot encrypt a destination")?;
            if prefs.replace_destination(&row.user_id, &row.channel, &row.ciphertext, &new).await? {
                report.rotated += 1;
            } else {
                report.skipped += 1;
            }
        }
    }
    Ok(report)
}

/// How the audit trail names an erased user: `user sha256:HEX`, the SHA-256 of the id, as the erasure's
/// tombstone keeps it (`user_erasure.user_digest`). The audit trail is append-only and outlives every
/// boundary, so it never holds the erased user's id: whoever knows the id can recognise the row, nobody
/// can read the id from it.
#[must_use]
pub fn erasure_target(user: &UserId) -> String {
    use sha2::{Digest as _, Sha256};
    use std::fmt::Write as _;
    let digest = Sha256::digest(user.as_str().as_bytes());
    digest.iter().fold(String::from("user sha256:"), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// Erases a user (SPEC §13), once, if `actor` may ([`Capability::EraseUsers`]; refused, it reads and
/// writes nothing): from the commit no task of theirs is handed to a channel — every task
/// not in a holder's hands is settled (`SUPPRESSED`, or closed `UNKNOWN` with the reason when an earlier
/// attempt may have been accepted; a parked one leaves the review queue), the destinations are destroyed,
/// later submissions and preference changes for the user are refused (`StoreError::UserErased`, writing
/// nothing). A call already in flight is not recalled: its outcome is recorded, and the claim that would
/// retry it settles it instead. When a user-key vault is configured, the user's data key is destroyed
/// first, before the erasure's transaction. The erasure's record names the actor (`Actor::label`) and its audit event
/// ([`AuditAction::EraseUser`], target [`erasure_target`]) is written in the same transaction. A second
/// erasure changes nothing, writes no audit event and answers the first record.
///
/// # Errors
/// [`AccessError::Forbidden`] naming the capability; store failures.
pub async fn erase_user(
    services: &Services,
    actor: &Actor,
    user: &UserId,
) -> Result<herald_ports::Erasure, AccessError> {
    actor.require(Capability::EraseUsers)?;
    // The user's data key goes first, in the vault (a database of its own, so not in the erasure's
    // transaction): should the erasure below fail, the key is gone already and a retry finishes the
    // erasure; never the other way round, an erased user whose key survives.
    if let Some(keys) = &services.user_keys {
        keys.destroy(user).await?;
    }
    let now = services.clock.now().await?;
    let audit = NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::EraseUser,
        target: erasure_target(user),
        detail: String::new(),
        at: now,
    };
    let erasure = services.lifecycle.erase(user, &audit, now).await?;
    if erasure.first {
        // The user's id is not logged: the log is a copy the erasure cannot reach.
        tracing::info!(
            settled = erasure.record.settled_tasks,
            released_reviews = erasure.record.released_reviews,
            destroyed_destinations = erasure.record.destroyed_destinations,
            actor = %actor.label(),
            "user erased"
        );
        metrics::counter!("herald_erasures_total").increment(1);
    }
    Ok(erasure)
}

/// Everything Herald holds about one user (SPEC §13), for the export: the erasure record if any, each
/// configured channel's preference (never a destination: only whether one is set and verified), and every
/// notification in the inbox, newest first, with its tasks and attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserExport {
    pub user: UserId,
    pub exported_at: Timestamp,
    pub erasure: Option<herald_ports::ErasureRecord>,
    pub channels: Vec<ChannelPref>,
    pub notifications: Vec<(InboxItem, Option<NotificationView>)>,
}

/// Gathers a [`UserExport`], reading the inbox in pages.
///
/// # Errors
/// Store failures.
pub async fn export_user(services: &Services, user: &UserId) -> Result<UserExport, StoreError> {
    let exported_at = services.clock.now().await?;
    let erasure = services.lifecycle.erasure(user).await?;
    let mut channels = Vec::new();
    for name in services.channels.names() {
        if let Some(pref) = services.prefs.get(user, name).await? {
            channels.push(pref);
        }
    }
    let mut notifications = Vec::new();
    let mut cursor = None;
    loop {
        let page = services.inbox.inbox_page(user, cursor, 200).await?;
        let Some(last) = page.last() else { break };
        cursor = Some(InboxCursor { created_at: last.created_at, notification: last.notification_ref });
        let full = page.len() == 200;
        for item in page {
            let view = services.reads.notification(item.notification_id).await?;
            notifications.push((item, view));
        }
        if !full {
            break;
        }
    }
    Ok(UserExport { user: user.clone(), exported_at, erasure, channels, notifications })
}

#[cfg(test)]
mod tests {
    use herald_ports::cipher::MockDestinationCipher;
    use herald_ports::prefs::MockPreferenceStore;
    use herald_ports::StoredDestination;
    use secrecy::SecretString;

    use super::*;

    #[tokio::test]
    async fn rotation_re_encrypts_only_old_rows_and_never_overwrites_a_concurrent_change() {
        let rows = vec![
            StoredDestination { user_id: "a".into(), channel: "push".into(), ciphertext: b"old-1".to_vec() },
            StoredDestination { user_id: "b".into(), channel: "push".into(), ciphertext: b"new-1".to_vec() },
            StoredDestination { user_id: "c".into(), channel: "push".into(), ciphertext: b"old-2".to_vec() },
        ];
        let mut prefs = MockPreferenceStore::new();
        prefs
            .expect_destinations_after()
            .returning(move |after, _| Ok(if after.is_none() { rows.clone() } else { Vec::new() }));
        prefs
            .expect_replace_destination()
            .times(2)
            .returning(|user, _, old, new| Ok(user.as_str() == "a" && old == b"old-1" && new == b"fresh"));
        let mut cipher = MockDestinationCipher::new();
        cipher.expect_needs_rotation().returning(|bytes| bytes.starts_with(b"old"));
        cipher.expect_decrypt().times(2).returning(|_, _, _| Ok(SecretString::from("dest")));
        cipher.expect_encrypt().times(2).returning(|_, _, _| Ok(b"fresh".to_vec()));
        let report = rotate_rows(&prefs, &cipher, 10).await.expect("rotates");
        assert_eq!(report, RotationReport { examined: 3, rotated: 1, skipped: 1, ..RotationReport::default() });
    }
}
