//! Row mapping: the SQL fragments several statements share, and one struct per shape of row the store
//! reads ([`row!`] declares it and makes it a `sqlx::FromRow`), each converted into the domain or port type it stands
//! for.
//!
//! This is the bottom of the crate with `convert`: every other module reads rows through these types,
//! and none of them calls `Row::try_get` column by column.
//!
//! The fragments are macros so that `concat!` can put them into statement constants at compile time;
//! the `const`s next to them are the same text for code that reads it at run time.

use chrono::{DateTime, Utc};
use herald_domain::{
    Action, AttemptToken, ChannelName, EventKey, NotificationId, NotificationRef, TaskId, TaskSnapshot, ThreadKey,
    Timestamp, UserId,
};
use herald_ports::prefs::{ChannelPref, StoredDestination};
use herald_ports::store::{
    AttemptView, EgressSlot, InboxChannel, InboxItem, NotificationView, OutcomeBucket, OutcomeCount, ParkedBucket,
    StoreError, TaskCount, TaskSummary, TaskView,
};
use uuid::Uuid;

use crate::convert::{count_u32, from_db, opt_from_db, parse_code};

/// "Parked" (SPEC §6) in SQL, over `delivery_task` named `t`: uncertain, waiting for a human, never
/// claimed again — the predicate of `TaskSnapshot::is_parked`, and the only place this crate spells it.
/// The migrations spell it once, as the SQL function `herald_task_parked` (`migrations/0010_task_tally.sql`),
/// which the task tally's triggers classify rows with and which defines the generated column `parked_at`
/// (`migrations/0012_task_queue.sql`) the review list reads through its partial indexes. Unit tests below
/// keep both migrations equal to this text.
pub const PARKED: &str = "(t.state = 'UNKNOWN' AND t.needs_review AND t.next_attempt_at IS NULL)";

/// The columns of a task row that decisions read ([`TaskDecisionRow`]), over `delivery_task` named `t`.
macro_rules! task_decision_columns {
    () => {
        "t.id, t.user_id, t.notification_id, t.channel, t.state, \
         t.attempt_token, t.lease_until, t.outcome_uncertain, t.uncertain_since, t.needs_review, t.next_attempt_at, \
         t.attempt_count, t.max_attempts, t.last_attempt_no, t.digest_count"
    };
}
pub(crate) use task_decision_columns;

/// The text of the columns a [`TaskViewRow`] reads, over `delivery_task` named `t`, for `concat!`: the
/// notification's outside name comes from its row, found by primary key.
macro_rules! task_view_columns {
    () => {
        "id, user_id, notification_id, channel, state, outcome_uncertain, needs_review, \
         attempt_count, next_attempt_at, provider_msg_id, last_error, digest_count, reference::text AS reference, \
         (SELECT n.public_id FROM notification n WHERE n.user_id = t.user_id AND n.id = t.notification_id) \
         AS notification_ref"
    };
}
pub(crate) use task_view_columns;

/// A row struct and its `impl sqlx::FromRow`, as `#[derive(sqlx::FromRow)]` would write it, from one list of
/// fields: each read from the column of its name (`Row::try_get`), each `flatten` field from the same row
/// by its own `FromRow`. Written here rather than derived so that the build needs no sqlx proc-macro
/// crate, which compiled sqlx's PostgreSQL driver and tokio a second time for the compiler's host
/// (docs/ARCHITECTURE.md, "Build").
macro_rules! row {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_attr:meta])* $field_vis:vis $field:ident: $ty:ty,)*
        }
        $(flatten {
            $($(#[$flat_attr:meta])* $flat_vis:vis $flat:ident: $flat_ty:ty,)*
        })?
    ) => {
        $(#[$attr])*
        $vis struct $name {
            $($(#[$field_attr])* $field_vis $field: $ty,)*
            $($($(#[$flat_attr])* $flat_vis $flat: $flat_ty,)*)?
        }

        impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for $name {
            fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
                use sqlx::Row as _;
                Ok($name {
                    $($field: row.try_get(stringify!($field))?,)*
                    $($($flat: sqlx::FromRow::from_row(row)?,)*)?
                })
            }
        }
    };
}
pub(crate) use row;

row! {
    /// A task row as decisions read it ([`task_decision_columns!`]).
    #[derive(Clone)]
    pub(crate) struct TaskDecisionRow {
        id: i64,
        user_id: String,
        notification_id: i64,
        channel: String,
        state: String,
        attempt_token: Option<Uuid>,
        lease_until: Option<DateTime<Utc>>,
        outcome_uncertain: bool,
        uncertain_since: Option<DateTime<Utc>>,
        needs_review: bool,
        next_attempt_at: Option<DateTime<Utc>>,
        attempt_count: i32,
        max_attempts: i32,
        last_attempt_no: i32,
        digest_count: Option<i32>,
    }
}

/// A task as the claim and the manual resolution decide on it.
pub(crate) struct TaskRow {
    pub id: TaskId,
    pub user_id: UserId,
    pub notification_id: NotificationId,
    pub channel: ChannelName,
    /// The current holder's token, while `SENDING` (or left by a holder whose lease expired).
    pub token: Option<Uuid>,
    pub snapshot: TaskSnapshot,
    pub budget: u32,
    pub last_attempt_no: i32,
    pub digest_count: Option<u32>,
}

impl TryFrom<TaskDecisionRow> for TaskRow {
    type Error = StoreError;

    fn try_from(row: TaskDecisionRow) -> Result<TaskRow, StoreError> {
        Ok(TaskRow {
            id: TaskId(row.id),
            user_id: UserId(row.user_id),
            notification_id: NotificationId(row.notification_id),
            channel: ChannelName(row.channel),
            token: row.attempt_token,
            snapshot: TaskSnapshot {
                state: parse_code(&row.state)?,
                outcome_uncertain: row.outcome_uncertain,
                needs_review: row.needs_review,
                next_attempt_at: opt_from_db(row.next_attempt_at),
                lease_until: opt_from_db(row.lease_until),
                attempt_count: count_u32(row.attempt_count),
                uncertain_since: opt_from_db(row.uncertain_since),
            },
            budget: count_u32(row.max_attempts),
            last_attempt_no: row.last_attempt_no,
            digest_count: row.digest_count.map(count_u32),
        })
    }
}

row! {
    /// A row of the claim query: the task, and what the claim reads with it in the same transaction.
    pub(crate) struct ClaimRow {
        pub reference: String,
        pub body: String,
        /// The digest's own expiry, else the notification's.
        pub expires_at: DateTime<Utc>,
        pub pref_enabled: bool,
        /// The encrypted destination (never decrypted here).
        pub destination: Option<Vec<u8>>,
        /// The user was erased (SPEC §13): the claim settles the task without a call.
        pub erased: bool,
    } flatten {
        pub task: TaskDecisionRow,
    }
}

impl ClaimRow {
    /// The channel, for ordering a batch before any egress row is locked.
    pub(crate) fn channel(&self) -> &str {
        &self.task.channel
    }
}

row! {
    /// A holding a claim took: what the `UPDATE … RETURNING` of the lease answers for one task.
    pub(crate) struct HeldRow {
        pub id: i64,
        attempt_token: Uuid,
        attempt_count: i32,
        last_attempt_no: i32,
    }
}

impl HeldRow {
    /// The token, the attempts used with this one, and this attempt's number.
    pub(crate) fn parts(&self) -> (AttemptToken, u32, i32) {
        (AttemptToken(self.attempt_token), count_u32(self.attempt_count), self.last_attempt_no)
    }
}

row! {
    /// One task of a notification, as `create` answers it.
    pub(crate) struct TaskSummaryRow {
        id: i64,
        reference: String,
        channel: String,
        state: String,
    }
}

impl TryFrom<TaskSummaryRow> for TaskSummary {
    type Error = StoreError;

    fn try_from(row: TaskSummaryRow) -> Result<TaskSummary, StoreError> {
        Ok(TaskSummary {
            task_id: TaskId(row.id),
            reference: row.reference,
            channel: ChannelName(row.channel),
            state: parse_code(&row.state)?,
        })
    }
}

row! {
    /// A task as the read models show it ([`task_view_columns!`]), attempts loaded separately.
    pub(crate) struct TaskViewRow {
        id: i64,
        user_id: String,
        notification_id: i64,
        channel: String,
        state: String,
        outcome_uncertain: bool,
        needs_review: bool,
        attempt_count: i32,
        next_attempt_at: Option<DateTime<Utc>>,
        provider_msg_id: Option<String>,
        last_error: Option<String>,
        digest_count: Option<i32>,
        reference: String,
        notification_ref: Uuid,
    }
}

impl TryFrom<TaskViewRow> for TaskView {
    type Error = StoreError;

    fn try_from(row: TaskViewRow) -> Result<TaskView, StoreError> {
        Ok(TaskView {
            task_id: TaskId(row.id),
            reference: row.reference,
            notification_id: NotificationId(row.notification_id),
            notification_ref: NotificationRef(row.notification_ref),
            user_id: UserId(row.user_id),
            channel: ChannelName(row.channel),
            state: parse_code(&row.state)?,
            outcome_uncertain: row.outcome_uncertain,
            needs_review: row.needs_review,
            attempt_count: count_u32(row.attempt_count),
            next_attempt_at: opt_from_db(row.next_attempt_at),
            provider_msg_id: row.provider_msg_id,
            last_error: row.last_error,
            digest_count: row.digest_count.map(count_u32),
            attempts: Vec::new(),
        })
    }
}

row! {
    /// One attempt of a task (`ATTEMPTS_OF_TASKS`).
    pub(crate) struct AttemptRow {
        pub task_id: i64,
        attempt_no: i32,
        action: Option<String>,
        outcome: Option<String>,
        late_outcome: Option<String>,
        detail: Option<String>,
        started_at: DateTime<Utc>,
        finished_at: Option<DateTime<Utc>>,
        note: Option<String>,
        decided_by: Option<String>,
    }
}

impl TryFrom<AttemptRow> for AttemptView {
    type Error = StoreError;

    fn try_from(row: AttemptRow) -> Result<AttemptView, StoreError> {
        Ok(AttemptView {
            attempt_no: row.attempt_no,
            action: row.action.as_deref().map(parse_code::<Action>).transpose()?,
            outcome: row.outcome.as_deref().map(parse_code).transpose()?,
            late_outcome: row.late_outcome.as_deref().map(parse_code).transpose()?,
            started_at: from_db(row.started_at),
            finished_at: opt_from_db(row.finished_at),
            detail: row.detail,
            note: row.note,
            decided_by: row.decided_by,
        })
    }
}

row! {
    /// A notification, without its tasks.
    pub(crate) struct NotificationRow {
        id: i64,
        public_id: Uuid,
        pub user_id: String,
        event_key: String,
        body: String,
        thread_key: Option<String>,
        created_at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    }
}

impl NotificationRow {
    /// The view of this notification with its `tasks`.
    pub(crate) fn into_view(self, tasks: Vec<TaskView>) -> NotificationView {
        NotificationView {
            notification_id: NotificationId(self.id),
            notification_ref: NotificationRef(self.public_id),
            user_id: UserId(self.user_id),
            event_key: EventKey(self.event_key),
            body: self.body,
            thread_key: self.thread_key.map(ThreadKey),
            created_at: from_db(self.created_at),
            expires_at: from_db(self.expires_at),
            tasks,
        }
    }
}

row! {
    /// An inbox item, without its channels.
    pub(crate) struct InboxRow {
        notification_id: i64,
        public_id: Uuid,
        body: String,
        created_at: DateTime<Utc>,
        read_at: Option<DateTime<Utc>>,
    }
}

impl From<InboxRow> for InboxItem {
    fn from(row: InboxRow) -> InboxItem {
        InboxItem {
            notification_id: NotificationId(row.notification_id),
            notification_ref: NotificationRef(row.public_id),
            body: row.body,
            created_at: from_db(row.created_at),
            read_at: opt_from_db(row.read_at),
            channels: Vec::new(),
        }
    }
}

row! {
    /// How one channel of an inbox item stands: the event's own task, or the digest task it joined.
    pub(crate) struct InboxChannelRow {
        pub notification_id: i64,
        channel: String,
        state: String,
        needs_review: bool,
        in_digest: bool,
        attempt_count: i32,
        last_outcome: Option<String>,
        last_note: Option<String>,
        destination_gone: bool,
    }
}

impl TryFrom<InboxChannelRow> for InboxChannel {
    type Error = StoreError;

    fn try_from(row: InboxChannelRow) -> Result<InboxChannel, StoreError> {
        Ok(InboxChannel {
            channel: ChannelName(row.channel),
            state: parse_code(&row.state)?,
            needs_review: row.needs_review,
            in_digest: row.in_digest,
            last_outcome: row.last_outcome.as_deref().map(parse_code).transpose()?,
            attempt_count: count_u32(row.attempt_count),
            note: row.last_note,
            destination_gone: row.destination_gone,
        })
    }
}

row! {
    /// A parked task of the review queue: the task's view columns and when it was parked.
    pub(crate) struct ParkedRow {
        pub parked_at: DateTime<Utc>,
    } flatten {
        pub task: TaskViewRow,
    }
}

row! {
    /// A notification id found by a look-up.
    pub(crate) struct IdRow {
        pub id: i64,
    }
}

row! {
    /// When an inbox item was read.
    pub(crate) struct ReadAtRow {
        pub read_at: Option<DateTime<Utc>>,
    }
}

row! {
    /// Attempts of one channel with one outcome (the console's overview).
    pub(crate) struct OutcomeCountRow {
        channel: String,
        outcome: String,
        n: i64,
        latest: DateTime<Utc>,
    }
}

row! {
    pub(crate) struct OutcomeBucketRow {
        start_ms: i64,
        outcome: String,
        n: i64,
    }
}

impl TryFrom<OutcomeBucketRow> for OutcomeBucket {
    type Error = StoreError;

    fn try_from(row: OutcomeBucketRow) -> Result<OutcomeBucket, StoreError> {
        Ok(OutcomeBucket {
            start: Timestamp(row.start_ms),
            outcome: parse_code(&row.outcome)?,
            count: u64::try_from(row.n).unwrap_or(0),
        })
    }
}

row! {
    pub(crate) struct ParkedBucketRow {
        start_ms: i64,
        n: i64,
    }
}

impl From<ParkedBucketRow> for ParkedBucket {
    fn from(row: ParkedBucketRow) -> ParkedBucket {
        ParkedBucket { start: Timestamp(row.start_ms), count: u64::try_from(row.n).unwrap_or(0) }
    }
}

impl TryFrom<OutcomeCountRow> for OutcomeCount {
    type Error = StoreError;

    fn try_from(row: OutcomeCountRow) -> Result<OutcomeCount, StoreError> {
        Ok(OutcomeCount {
            channel: ChannelName(row.channel),
            outcome: parse_code(&row.outcome)?,
            count: u64::try_from(row.n).unwrap_or(0),
            latest: from_db(row.latest),
        })
    }
}

row! {
    /// A channel's egress row.
    pub(crate) struct EgressRow {
        channel: String,
        last_call_at: Option<DateTime<Utc>>,
    }
}

impl From<EgressRow> for EgressSlot {
    fn from(row: EgressRow) -> EgressSlot {
        EgressSlot { channel: ChannelName(row.channel), last_call_at: opt_from_db(row.last_call_at) }
    }
}

row! {
    /// One group of the task gauges, summed from the task tally (`TASK_TALLY` in `views`).
    pub(crate) struct TaskCountRow {
        channel: String,
        state: String,
        parked: bool,
        n: i64,
        /// The tally rows the sum was taken over.
        entries: i64,
    }
}

impl TaskCountRow {
    pub(crate) fn entries(&self) -> i64 {
        self.entries
    }

    /// False for a group whose deltas cancel out: its tasks all moved elsewhere.
    pub(crate) fn has_tasks(&self) -> bool {
        self.n != 0
    }
}

impl TryFrom<TaskCountRow> for TaskCount {
    type Error = StoreError;

    fn try_from(row: TaskCountRow) -> Result<TaskCount, StoreError> {
        Ok(TaskCount {
            channel: ChannelName(row.channel),
            state: parse_code(&row.state)?,
            parked: row.parked,
            count: u64::try_from(row.n).unwrap_or(0),
        })
    }
}

row! {
    /// A preference, as the preference store answers it (`PREF_COLUMNS` in `prefs`).
    pub(crate) struct PrefRow {
        user_id: String,
        channel: String,
        enabled: bool,
        has_destination: bool,
        verified: bool,
        version: i64,
    }
}

impl From<PrefRow> for ChannelPref {
    fn from(row: PrefRow) -> ChannelPref {
        ChannelPref {
            user_id: UserId(row.user_id),
            channel: ChannelName(row.channel),
            enabled: row.enabled,
            has_destination: row.has_destination,
            verified: row.verified,
            version: row.version,
        }
    }
}

row! {
    /// A stored ciphertext with its owner and channel.
    pub(crate) struct DestinationRow {
        user_id: String,
        channel: String,
        destination: Vec<u8>,
    }
}

impl From<DestinationRow> for StoredDestination {
    fn from(row: DestinationRow) -> StoredDestination {
        StoredDestination {
            user_id: UserId(row.user_id),
            channel: ChannelName(row.channel),
            ciphertext: row.destination,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PARKED;

    /// The review list reads `parked_at`, which is set exactly for the rows `herald_task_parked` (checked
    /// against `PARKED` below) calls parked, and its indexes hold those rows and no others.
    #[test]
    fn the_review_list_column_is_parked_by_the_parked_function() {
        let migration = include_str!("../../migrations/0012_task_queue.sql");
        let column = "GENERATED ALWAYS AS (CASE WHEN herald_task_parked(state, needs_review, next_attempt_at) \
                      THEN updated_at END) STORED;";
        assert!(migration.contains(column), "{column}");
        for index in ["delivery_task (parked_at, id)", "delivery_task (channel, parked_at, id)"] {
            let declared = format!("{index} WHERE parked_at IS NOT NULL;");
            assert!(migration.contains(&declared), "{declared}");
        }
    }

    /// The task gauges read the tally the triggers of migration `0010` keep; they tell parked tasks
    /// apart with `herald_task_parked`, which must be `PARKED` (what the gauges counted before, and what
    /// the review list shows). `tests/tests/it/tally.rs` checks the same over rows of every kind.
    #[test]
    fn the_task_tally_classifies_with_the_parked_predicate() {
        let migration = include_str!("../../migrations/0010_task_tally.sql");
        let function = format!("AS $$ SELECT {} $$;", PARKED.replace("t.", ""));
        assert!(migration.contains(&function), "{function}");
        // The function is the migration's only spelling: every classification goes through it.
        assert_eq!(migration.matches("'UNKNOWN'").count(), 1);
    }
}
