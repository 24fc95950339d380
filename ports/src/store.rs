//! The notification store ports, one per role ([`prelude`] lists them): creating notifications, claiming
//! and finishing delivery tasks, test sends, the human exit, the inbox, and the read models.
//!
//! The store keeps decisions, it does not make them: `claim` calls `herald_domain::decide_claim` on every
//! locked row inside its transaction and stores the result; `finish` stores a `Transition` the caller
//! computed with `herald_domain::finish`, fenced by the attempt token.

use async_trait::async_trait;
use herald_domain::egress::EgressDecision;
use herald_domain::finish::FinishContext;
use herald_domain::resolve::FinalState;
use herald_domain::{
    Action, AttemptToken, ChannelName, ChannelRules, EventKey, Millis, NotificationId, NotificationRef, Observation,
    Outcome, TaskId, TaskState, ThreadKey, Timestamp, Transition, UserId,
};

/// Failures of the store, classified so callers know whether waiting helps.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or the connection broke; retry after a pause. Nothing was
    /// committed by the failed call unless the caller can see it afterwards.
    #[error("database unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// Anything else: a bug or an unexpected database state.
    #[error("store failure")]
    Unknown(#[source] anyhow::Error),
    /// The write was for a user who has been erased (SPEC §13): nothing was written.
    #[error("the user is erased")]
    UserErased,
}

/// A submission of one logical notification (SPEC §3 `create`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNotification {
    pub user_id: UserId,
    pub event_key: EventKey,
    pub body: String,
    pub ttl: Millis,
    /// Overrides the channel's budget when given.
    pub max_attempts: Option<u32>,
    pub thread_key: Option<ThreadKey>,
    /// The name of the service token that submitted it (the status subscriptions of that token are told
    /// about it); `None` when no service token did.
    pub submitted_by: Option<String>,
}

/// The channels a store call may create or claim tasks for, with their rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelTable(pub Vec<(ChannelName, ChannelRules)>);

impl ChannelTable {
    #[must_use]
    pub fn get(&self, name: &ChannelName) -> Option<&ChannelRules> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, rules)| rules)
    }

    pub fn names(&self) -> impl Iterator<Item = &ChannelName> {
        self.0.iter().map(|(name, _)| name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSummary {
    pub task_id: TaskId,
    /// The reference channels know the task by.
    pub reference: String,
    pub channel: ChannelName,
    pub state: TaskState,
}

/// The answer to `create`: the notification, whether this call created it, and its tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    pub notification_id: NotificationId,
    /// The name the notification is known by outside (the only id an answer shows).
    pub notification_ref: NotificationRef,
    pub created: bool,
    pub tasks: Vec<TaskSummary>,
    /// Channels on which this event's external prompt was merged into a digest (SPEC §7) instead of
    /// getting a task of its own: the digest task that will carry it.
    pub merged: Vec<Merged>,
    /// For a repeat (`created = false`): the fields in which this submission differs from the one stored
    /// (`herald_domain::submission::differences`); empty for a true repeat, and for a new notification.
    pub differs: Vec<&'static str>,
}

/// A submission stored before under `(user_id, event_key)`, as the repeat rule compares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSubmission {
    pub user_id: UserId,
    pub body: String,
    pub ttl: Millis,
    pub thread_key: Option<ThreadKey>,
    pub max_attempts: Option<u32>,
}

impl StoredSubmission {
    /// The fields in which `new` differs from this stored submission.
    #[must_use]
    pub fn differences(&self, new: &NewNotification) -> Vec<&'static str> {
        herald_domain::submission::differences(&self.as_submission(), &new.as_submission())
    }

    fn as_submission(&self) -> herald_domain::submission::Submission<'_> {
        herald_domain::submission::Submission {
            body: &self.body,
            ttl: self.ttl,
            thread_key: self.thread_key.as_ref().map(ThreadKey::as_str),
            max_attempts: self.max_attempts,
        }
    }
}

impl NewNotification {
    /// What this submission asks for, as the repeat rule compares it.
    #[must_use]
    pub fn as_submission(&self) -> herald_domain::submission::Submission<'_> {
        herald_domain::submission::Submission {
            body: &self.body,
            ttl: self.ttl,
            thread_key: self.thread_key.as_ref().map(ThreadKey::as_str),
            max_attempts: self.max_attempts,
        }
    }
}

/// An event's prompt on one channel, merged into another notification's digest task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    pub channel: ChannelName,
    pub digest_task_id: TaskId,
}

/// One claim cycle's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Recorded as `lease_owner`.
    pub worker: String,
    pub now: Timestamp,
    pub lease: Millis,
    /// At most this many tasks are claimed in one transaction.
    pub limit: u32,
    pub channels: ChannelTable,
}

/// The answer to a test send's reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestSendGrant {
    /// The slot is taken and the press recorded: call the channel.
    Go,
    /// The (user, channel) quota is spent; it allows another press after this long.
    QuotaExceeded(Millis),
    /// Real deliveries come first: one is due on this rate-limited channel, or its next slot is not free;
    /// try again after this long.
    ChannelBusy(Millis),
}

/// A task the caller now holds and must call the channel for, then finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedTask {
    pub task_id: TaskId,
    /// The task's reference: sent to channels (`ref`, and in the idempotency key), unique beyond this
    /// database.
    pub reference: String,
    pub notification_id: NotificationId,
    pub user_id: UserId,
    pub channel: ChannelName,
    pub token: AttemptToken,
    pub attempt_no: i32,
    pub action: Action,
    /// Everything `herald_domain::finish` needs, as known at claim.
    pub finish: FinishContext,
    pub body: String,
    pub expires_at: Timestamp,
    /// The encrypted destination, read in the claim transaction; decrypted only by the worker.
    pub destination: Option<Vec<u8>>,
    /// For a digest task: how many events it stands for.
    pub digest_count: Option<u32>,
}

/// A task the claim settled without calling the channel (suppressed, failed or parked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    pub task_id: TaskId,
    pub channel: ChannelName,
    pub outcome: Option<Outcome>,
    pub state: TaskState,
    pub parked: bool,
}

/// What one claim transaction did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimBatch {
    pub claimed: Vec<ClaimedTask>,
    pub settled: Vec<Settled>,
    /// Tasks passed over (or moved to a later `next_attempt_at`) by an egress interval: no attempt spent.
    pub deferred: Vec<Deferred>,
    /// The channel of each attempt found holding an expired lease and marked `LEASE_EXPIRED`.
    pub lease_expired: Vec<ChannelName>,
    /// When the claim found the egress slot of a rate-limited channel taken while tasks of it are due —
    /// it deferred them, or passed the channel over — the earliest instant such a slot is free again
    /// (`herald_domain::decide_egress`'s `DeferUntil`): a claim then may call the channel, one before
    /// it may not, so the worker claims again at that instant rather than at its poll interval. `None`
    /// when no channel with tasks due waits for its slot. A claim that came back full need not look
    /// for channels it passed over: the next claim follows at once and tells.
    pub next_slot: Option<Timestamp>,
}

/// A task a claim deferred because its channel's egress slot was not free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred {
    pub task_id: TaskId,
    pub channel: ChannelName,
}

/// What the worker observed, and the transition it computed, for one claimed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishRecord {
    pub task_id: TaskId,
    pub user_id: UserId,
    pub token: AttemptToken,
    pub observation: Observation,
    /// A short, secret-free explanation.
    pub detail: String,
    pub transition: Transition,
    pub now: Timestamp,
}

/// A claimed attempt whose holder did not call because it missed its egress slot (SPEC §7): the store
/// takes the attempt back and stores `transition` (from `herald_domain::give_back`), fenced by the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GiveBack {
    pub task_id: TaskId,
    pub user_id: UserId,
    pub token: AttemptToken,
    pub transition: Transition,
    pub now: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishResult {
    /// The attempt still held the task; the transition is stored.
    Applied,
    /// A newer claim superseded the attempt: the observation went to its `late_outcome`, the task is
    /// untouched.
    Stale,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    pub attempt_no: i32,
    /// `None` for claim-time and manual rows, which call no channel.
    pub action: Option<Action>,
    pub outcome: Option<Outcome>,
    pub late_outcome: Option<Outcome>,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub detail: Option<String>,
    /// The note a person wrote with a manual resolution (`MANUAL_*` rows only). Not an error.
    pub note: Option<String>,
    /// Who made the manual resolution (`MANUAL_*` rows written since the audit trail; else `None`).
    pub decided_by: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskView {
    pub task_id: TaskId,
    /// The reference channels know the task by (`ref`, and `ntf-{reference}` as idempotency key).
    pub reference: String,
    pub notification_id: NotificationId,
    /// The notification's outside name (what views show and link to).
    pub notification_ref: NotificationRef,
    pub user_id: UserId,
    pub channel: ChannelName,
    pub state: TaskState,
    pub outcome_uncertain: bool,
    pub needs_review: bool,
    pub attempt_count: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub provider_msg_id: Option<String>,
    pub last_error: Option<String>,
    pub digest_count: Option<u32>,
    /// Oldest first.
    pub attempts: Vec<AttemptView>,
}

impl TaskView {
    #[must_use]
    pub fn is_parked(&self) -> bool {
        herald_domain::task::is_parked(self.state, self.needs_review, self.next_attempt_at)
    }

    /// The manual resolution that settled this task, with its note, when a person did (the latest manual
    /// attempt row). Views show it as a human decision, never as the channel's acceptance.
    #[must_use]
    pub fn manual_resolution(&self) -> Option<(FinalState, &str)> {
        self.attempts.iter().rev().find_map(|a| {
            let decision = herald_domain::resolve::manual_decision(a.outcome?)?;
            Some((decision, a.note.as_deref().unwrap_or("")))
        })
    }

    /// Who made the manual resolution of [`TaskView::manual_resolution`], when it was recorded.
    #[must_use]
    pub fn resolution_by(&self) -> Option<&str> {
        self.attempts
            .iter()
            .rev()
            .find(|a| a.outcome.and_then(herald_domain::resolve::manual_decision).is_some())
            .and_then(|a| a.decided_by.as_deref())
    }

    /// The outcome sequence of the attempts, oldest first (what the reference cases assert).
    #[must_use]
    pub fn outcomes(&self) -> Vec<Option<Outcome>> {
        self.attempts.iter().map(|a| a.outcome).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationView {
    pub notification_id: NotificationId,
    /// The outside name: the only id a view shows.
    pub notification_ref: NotificationRef,
    pub user_id: UserId,
    pub event_key: EventKey,
    pub body: String,
    pub thread_key: Option<ThreadKey>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub tasks: Vec<TaskView>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxChannel {
    pub channel: ChannelName,
    pub state: TaskState,
    pub needs_review: bool,
    /// The event's external prompt was merged into a digest task.
    pub in_digest: bool,
    /// What the task's latest attempt observed; the inbox words for FAILED ("expired" or "failed") and
    /// PENDING ("waiting to retry") depend on it, and carrying it here spares a read per item.
    pub last_outcome: Option<Outcome>,
    /// Attempts spent so far (a PENDING task with none is still "sending").
    pub attempt_count: u32,
    /// The note of the latest attempt when a person wrote it (a manual resolution), for the words
    /// "marked sent by an operator: {note}".
    pub note: Option<String>,
    /// The latest attempt found the destination gone for good (a Web Push subscription answered 404 or
    /// 410): the words are "not sent: subscription expired", not a bare "failed".
    pub destination_gone: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxItem {
    pub notification_id: NotificationId,
    /// The outside name: the only id the inbox shows and accepts.
    pub notification_ref: NotificationRef,
    pub body: String,
    pub created_at: Timestamp,
    pub read_at: Option<Timestamp>,
    /// Empty: in-app only.
    pub channels: Vec<InboxChannel>,
}

/// Where a page of the inbox starts: after the item with this `created_at` and notification (newest
/// first, so the next page holds older items). The notification is named by its outside name, so a
/// cursor shows no serial id; the store finds the position by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboxCursor {
    pub created_at: Timestamp,
    pub notification: NotificationRef,
}

/// What marking an inbox item read did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkRead {
    /// Marked now.
    Marked(Timestamp),
    /// It was read before, at this time; nothing changed.
    AlreadyRead(Timestamp),
    /// No such item in this user's inbox.
    NotFound,
}

/// A page of the review queue: parked tasks, oldest first, optionally of one channel and parked before a
/// time, starting after a task already shown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParkedFilter {
    pub channel: Option<ChannelName>,
    /// Only tasks parked (last changed) at or before this time: "older than" an age.
    pub parked_before: Option<Timestamp>,
    /// Continue after this task (its `updated_at`, id), as the previous page ended.
    pub after: Option<(Timestamp, TaskId)>,
    pub limit: u32,
}

/// One parked task of the review queue, with when it was parked (for its age and the next page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedTask {
    pub parked_at: Timestamp,
    pub task: TaskView,
}

/// How many attempts of one channel observed one outcome since a time, and when the latest did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeCount {
    pub channel: ChannelName,
    pub outcome: Outcome,
    pub count: u64,
    pub latest: Timestamp,
}

/// How many attempts observed one outcome in one time bucket (the overview's chart), all channels together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeBucket {
    /// The bucket's first millisecond: a multiple of the bucket's width since the Unix epoch.
    pub start: Timestamp,
    pub outcome: Outcome,
    pub count: u64,
}

/// How many tasks still parked parked in one time bucket (the overview's chart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedBucket {
    pub start: Timestamp,
    pub count: u64,
}

/// A channel's latest egress reservation (SPEC §7): its next call may leave one interval (plus guard)
/// later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressSlot {
    pub channel: ChannelName,
    pub last_call_at: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub task_id: TaskId,
    pub state: TaskState,
}

/// How many tasks of one channel are in one state, for the operations gauges. Parked tasks (state
/// `UNKNOWN`, waiting for a human) are counted in their own row with `parked = true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCount {
    pub channel: ChannelName,
    pub state: TaskState,
    pub parked: bool,
    pub count: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("no such task")]
    NotFound,
    #[error("task is {state} and not waiting for review; nothing changed")]
    NotParked { state: TaskState },
    /// The actor's role lacks the decision's capability; nothing was read or written.
    #[error(transparent)]
    Forbidden(#[from] herald_domain::operators::Forbidden),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The store, split by who uses it. Each role is a port of its own, so a wrapper (a fault injector, a
/// team's own store) implements what its user needs and nothing else, and no method answers "not
/// supported" at run time. `PgStore` implements every role; [`prelude`] brings them all into scope.
///
/// | role | used by |
/// |---|---|
/// | [`SubmissionStore`] | the submit use cases (API, events) |
/// | [`DeliveryStore`] | the worker and its finisher: claim, finish, give back |
/// | [`EgressStore`] | the test send: its quota and the channel's egress slot |
/// | [`ReviewStore`] | the human exit and the review queue |
/// | [`InboxStore`] | a user's inbox and mark-as-read |
/// | [`ReadModels`] | notification views, look-ups for the delivery log, the overview's counts |
/// | [`LifecycleStore`] | erasure of a user, retention, export (SPEC §13) |
pub mod prelude {
    pub use super::{DeliveryStore, EgressStore, InboxStore, LifecycleStore, ReadModels, ReviewStore, SubmissionStore};
}

/// Submissions (SPEC §3 `create`).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait SubmissionStore: Send + Sync {
    /// SPEC §3: in one transaction, inserts the notification unless `(user_id, event_key)` exists; when
    /// inserted, also the inbox item and one task per enabled channel of `channels`. For a duplicate it
    /// MUST return the existing notification with `created = false` and write nothing.
    async fn create(
        &self,
        new: &NewNotification,
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Created, StoreError>;

    /// SPEC §3 for every recipient of one event (each user once), in **one transaction**: each `new` as
    /// [`create`] would store it (its own dedup, inbox item, tasks and digest decisions), the answers in
    /// the order of `news`. When any recipient's stored submission differs from its `new`, nothing at all
    /// is written and the answer holds only those recipients' repeats (`differs` not empty).
    ///
    /// [`create`]: SubmissionStore::create
    async fn create_event(
        &self,
        news: &[NewNotification],
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Vec<Created>, StoreError>;

    /// The submissions stored before under `event_key` for any of `users` (SPEC §3): what a repeat is
    /// compared with before anything is written.
    async fn submitted(&self, event_key: &EventKey, users: &[UserId]) -> Result<Vec<StoredSubmission>, StoreError>;
}

/// The delivery path (SPEC §4, §5, §7): what a worker and its finisher need, and nothing else.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// SPEC §4: claims up to `limit` runnable tasks with `FOR UPDATE … SKIP LOCKED` in one short
    /// transaction. Every returned [`ClaimedTask`] is committed as `SENDING` under a fresh token before
    /// this returns; the caller calls the channel only afterwards.
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError>;

    /// SPEC §5: stores the transition only while the attempt still holds the task (state `SENDING`,
    /// same token); otherwise records the observation as the attempt's `late_outcome` and returns
    /// [`FinishResult::Stale`] without touching the task.
    async fn finish(&self, record: &FinishRecord) -> Result<FinishResult, StoreError>;

    /// [`DeliveryStore::finish`] for many attempts at once, each fenced by its own token: a stale record
    /// lands as its attempt's late outcome and does not affect the others. The inner results are in the
    /// order of `records`; the outer error means nothing was written.
    ///
    /// The default finishes one record after the other (a wrapper that changes how one finish behaves
    /// gets the same for batches); `PgStore` writes the whole batch in one statement.
    async fn finish_batch(
        &self,
        records: &[FinishRecord],
    ) -> Result<Vec<Result<FinishResult, StoreError>>, StoreError> {
        let mut results = Vec::with_capacity(records.len());
        for record in records {
            results.push(self.finish(record).await);
        }
        Ok(results)
    }

    /// SPEC §7: while the attempt still holds the task, stores the give-back transition and removes the
    /// attempt (no call was made, so no budget is spent and no attempt row stays); otherwise changes
    /// nothing and returns [`FinishResult::Stale`].
    async fn give_back(&self, record: &GiveBack) -> Result<FinishResult, StoreError>;
}

/// Calls that belong to no task (SPEC §7, §9): the settings page's test send.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait EgressStore: Send + Sync {
    /// Reserves an egress slot of `channel` at `now`, through the same per-channel row and decision as a
    /// claim.
    async fn reserve_egress(
        &self,
        channel: &ChannelName,
        rules: &ChannelRules,
        now: Timestamp,
    ) -> Result<EgressDecision, StoreError>;

    /// Reserves one test send of `user` on `channel` at `now`: the per-(user, channel) `quota` first
    /// (refused: nothing written), then, on a channel with an egress interval, behind every real delivery
    /// — a delivery due on the channel, or a slot not free yet, refuses it (nothing written, the press does
    /// not count) — else the slot is taken and the press recorded.
    async fn reserve_test_send(
        &self,
        user: &UserId,
        channel: &ChannelName,
        rules: &ChannelRules,
        quota: herald_domain::quota::TestSendQuota,
        audit: &[crate::audit::NewAuditEvent],
        now: Timestamp,
    ) -> Result<TestSendGrant, StoreError>;
}

/// The human exit (SPEC §3, §6) and the queue it works from.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ReviewStore: Send + Sync {
    /// Succeeds only from parked, once; writes `audit` (and its actor on the decision's attempt row) in
    /// the same transaction, and nothing when it is refused.
    async fn resolve_manually(
        &self,
        task: TaskId,
        final_state: FinalState,
        note: &str,
        audit: &crate::audit::NewAuditEvent,
        now: Timestamp,
    ) -> Result<Resolved, ResolveError>;

    /// Parked tasks, oldest first.
    async fn parked(&self, limit: u32) -> Result<Vec<TaskView>, StoreError>;

    /// A page of the review queue (the console's filters and pagination).
    async fn parked_page(&self, filter: &ParkedFilter) -> Result<Vec<ParkedTask>, StoreError>;
}

/// A user's in-app inbox (SPEC §11).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait InboxStore: Send + Sync {
    /// A user's inbox, newest first.
    async fn inbox(&self, user: &UserId, limit: u32) -> Result<Vec<InboxItem>, StoreError>;

    /// A page of a user's inbox, newest first, after `cursor`.
    async fn inbox_page(
        &self,
        user: &UserId,
        cursor: Option<InboxCursor>,
        limit: u32,
    ) -> Result<Vec<InboxItem>, StoreError>;

    /// Marks a user's inbox item read at `now`; repeating it changes nothing (the first time stays).
    /// Another user's notification is [`MarkRead::NotFound`], like a missing one.
    async fn mark_read(
        &self,
        user: &UserId,
        notification: NotificationRef,
        now: Timestamp,
    ) -> Result<MarkRead, StoreError>;
}

/// Read models: a notification with its tasks and attempts, the delivery log's look-ups, and the counts
/// of the gauges and the overview.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ReadModels: Send + Sync {
    async fn notification(&self, id: NotificationId) -> Result<Option<NotificationView>, StoreError>;

    /// The notification known outside by `notification`, if any.
    async fn notification_by_ref(&self, notification: NotificationRef) -> Result<Option<NotificationId>, StoreError>;

    /// The notification of `(user, event_key)`, if any.
    async fn notification_by_event(
        &self,
        user: &UserId,
        event_key: &EventKey,
    ) -> Result<Option<NotificationId>, StoreError>;

    /// The notification whose task has this reference, if any.
    async fn notification_by_reference(&self, reference: &str) -> Result<Option<NotificationId>, StoreError>;

    /// Tasks counted by channel, state and parked, for the `/metrics` gauges, ordered by channel, state
    /// and parked; a group without tasks is left out. The caller decides how often it runs; the
    /// PostgreSQL store answers from a tally its triggers keep, without reading the task table.
    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError>;

    /// Attempts counted by channel and outcome since `since` (the console's overview).
    async fn outcome_counts(&self, since: Timestamp) -> Result<Vec<OutcomeCount>, StoreError>;

    /// Every channel's latest egress reservation (the console's overview).
    async fn egress_slots(&self) -> Result<Vec<EgressSlot>, StoreError>;

    /// Tasks whose final state a person decided and that still hold it, by channel and decision
    /// (`MANUAL_SENT` with the task SENT, `MANUAL_FAILED` with the task FAILED): the overview tells them
    /// from the channel's own answers. `latest` is the latest such decision.
    async fn decided_counts(&self) -> Result<Vec<OutcomeCount>, StoreError>;

    /// Attempts since `since` counted by outcome in buckets `width` wide (aligned to the Unix epoch),
    /// ordered by bucket and outcome; empty buckets are left out (the overview's chart).
    async fn outcome_buckets(&self, since: Timestamp, width: Millis) -> Result<Vec<OutcomeBucket>, StoreError>;

    /// Tasks parked now, counted by the bucket (as [`ReadModels::outcome_buckets`]) in which they parked,
    /// for those that parked since `since`.
    async fn parked_buckets(&self, since: Timestamp, width: Millis) -> Result<Vec<ParkedBucket>, StoreError>;
}

/// The record of one user's erasure (SPEC §13): who asked, when, what the erasure and each boundary
/// removed. It holds none of the user's content; after the tombstone boundary not even the user's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErasureRecord {
    /// `None` once the record is a tombstone.
    pub user_id: Option<UserId>,
    pub requested_at: Timestamp,
    /// The actor who asked (an admin token's name, an operator).
    pub requested_by: String,
    /// Tasks the erasure settled (suppressed, or closed as unknown) in its own transaction.
    pub settled_tasks: u32,
    /// Of those, tasks that were parked and left the review queue.
    pub released_reviews: u32,
    /// Channel preferences (with their destinations) destroyed.
    pub destroyed_destinations: u32,
    /// The content boundary: when it ran and how many notifications' texts it removed.
    pub content_removed: Option<(Timestamp, u32)>,
    /// The records boundary: when it ran and how many rows it removed.
    pub records_removed: Option<(Timestamp, u32)>,
    pub tombstoned_at: Option<Timestamp>,
}

/// What asking for an erasure did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Erasure {
    pub record: ErasureRecord,
    /// This call recorded the erasure; `false`: it existed before and nothing changed.
    pub first: bool,
}

/// Erasure of a user, retention and export (SPEC §13).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait LifecycleStore: Send + Sync {
    /// Erases `user` at `now` on `audit.actor`'s request, in one transaction: records the erasure and its
    /// audit event; settles every
    /// task of the user not handed to a channel (`herald_domain::claim::erased`: `SUPPRESSED`, or closed
    /// `UNKNOWN` when an earlier attempt may have been accepted — a parked one leaves the review queue),
    /// each with a `USER_ERASED` attempt row; destroys the user's channel preferences with their
    /// destinations; ends the user's console sessions. A task in `SENDING` is left to its holder: its
    /// finish is recorded, and the next claim settles it. Waits for a submission for the user in flight
    /// and settles what it wrote; a submission after the commit is refused. A second erasure changes
    /// nothing and answers the first record (`first = false`) and writes nothing, not even `audit`.
    /// `audit` (its actor is the record's `requested_by`) is written in the erasure's transaction.
    async fn erase(
        &self,
        user: &UserId,
        audit: &crate::audit::NewAuditEvent,
        now: Timestamp,
    ) -> Result<Erasure, StoreError>;

    /// The erasure record of `user`, if the user was erased.
    async fn erasure(&self, user: &UserId) -> Result<Option<ErasureRecord>, StoreError>;

    /// Takes (or keeps) the lease of the periodic `job` for `holder` until `until`, when it is free or
    /// already `holder`'s; `false` when another holder's lease still runs at `now`.
    async fn take_lease(&self, job: &str, holder: &str, now: Timestamp, until: Timestamp) -> Result<bool, StoreError>;

    /// One purge run over `cutoffs` (SPEC §13), in bounded batches, each its own short transaction that
    /// locks no row a claim needs: finished notifications of every user older than the window (a
    /// notification with a task parked for a person, or still due, is never removed), and the three
    /// boundaries of each erasure in turn — content, then records, then the tombstone.
    async fn purge(&self, cutoffs: &PurgeCutoffs) -> Result<PurgeReport, StoreError>;
}

/// What one purge run removed (SPEC §13), for the logs and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Finished notifications older than the retention window, removed with their tasks, attempts and
    /// inbox items.
    pub finished_notifications: u32,
    /// Erasures whose content boundary ran: bodies blanked, inbox items removed.
    pub content_boundaries: u32,
    /// Erasures whose records boundary ran: notifications, tasks and attempts removed.
    pub records_boundaries: u32,
    /// Erasure records reduced to tombstones.
    pub tombstones: u32,
    /// Delivered status events removed.
    pub status_events: u32,
}

/// The windows of one purge run, as instants: everything older than each is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgeCutoffs {
    /// Finished notifications created before this are removed (every user).
    pub finished_before: Timestamp,
    /// Erasures requested before this lose their content (bodies, inbox).
    pub content_before: Timestamp,
    /// Erasures requested before this lose their delivery records.
    pub records_before: Timestamp,
    /// Erasures requested before this become tombstones.
    pub tombstone_before: Timestamp,
    /// Status events delivered before this are removed (parked ones stay until handled).
    pub status_events_before: Timestamp,
    /// Rows per statement (each in its own short transaction).
    pub batch: u32,
    pub now: Timestamp,
}
