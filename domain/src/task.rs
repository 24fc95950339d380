//! The task's states, the actions a claim can take, what an attempt can observe, and the snapshot of a
//! task that decisions are made on.

use serde::{Deserialize, Serialize};

use crate::time::{Millis, Timestamp};

/// How much Herald knows about one (notification, channel) delivery (SPEC §2).
///
/// Deliberately exhaustive: adding a state must break every `match` that has to think about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Waiting for its `next_attempt_at`; nothing has been accepted (as far as anyone can tell).
    Pending,
    /// Held by an attempt under a lease; the channel may be being called right now.
    Sending,
    /// The channel accepted the request. Not "the user saw it" (SPEC §1).
    Sent,
    /// Definitely not accepted, and no more attempts will be made.
    Failed,
    /// Not sent because the user switched the channel off before any attempt could have been accepted.
    Suppressed,
    /// An attempt's result never came back. Retried, queried, or parked for a human.
    Unknown,
}

impl TaskState {
    pub const ALL: [TaskState; 6] = [
        TaskState::Pending,
        TaskState::Sending,
        TaskState::Sent,
        TaskState::Failed,
        TaskState::Suppressed,
        TaskState::Unknown,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Sending => "SENDING",
            TaskState::Sent => "SENT",
            TaskState::Failed => "FAILED",
            TaskState::Suppressed => "SUPPRESSED",
            TaskState::Unknown => "UNKNOWN",
        }
    }

    /// Terminal states absorb: no claim, no finish and no manual resolution leaves them.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Sent | TaskState::Failed | TaskState::Suppressed)
    }
}

/// Error for a string that names no known code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} code `{value}`")]
pub struct UnknownCode {
    pub kind: &'static str,
    pub value: String,
}

/// `FromStr` (by the code, among `ALL`) and `Display` (the code) of an enum of stored codes with
/// `ALL: [Self; N]` and `as_str(self)`; a text that names none is an [`UnknownCode`] of `kind`.
macro_rules! code {
    ($ty:ty, $kind:literal) => {
        impl ::std::str::FromStr for $ty {
            type Err = $crate::task::UnknownCode;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty>::ALL
                    .into_iter()
                    .find(|code| code.as_str() == s)
                    .ok_or_else(|| $crate::task::UnknownCode { kind: $kind, value: s.to_owned() })
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use code;

code!(TaskState, "state");

/// What a claimed attempt does with the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    Send,
    Query,
}

impl Action {
    pub const ALL: [Action; 2] = [Action::Send, Action::Query];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Send => "SEND",
            Action::Query => "QUERY",
        }
    }
}

code!(Action, "action");

/// What one attempt observed, as stored in `delivery_attempt.outcome` (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    // Reported by a channel call.
    Accepted,
    AcceptedReplay,
    QueryFound,
    QueryNotFound,
    Timeout,
    IoError,
    QueryFailed,
    RetryableReject,
    Rejected,
    // Decided at claim time, without calling the channel.
    PrefDisabled,
    TtlExpired,
    PrefDisabledUncertain,
    TtlExpiredUncertain,
    LeaseExpired,
    /// The task's user was erased (SPEC §13): settled by the erasure or by the claim that found it.
    UserErased,
    // Written by a human.
    ManualSent,
    ManualFailed,
    /// A person checked that the message did not arrive and asked for it to be sent again (SPEC §6).
    ManualResend,
}

impl Outcome {
    pub const ALL: [Outcome; 18] = [
        Outcome::Accepted,
        Outcome::AcceptedReplay,
        Outcome::QueryFound,
        Outcome::QueryNotFound,
        Outcome::Timeout,
        Outcome::IoError,
        Outcome::QueryFailed,
        Outcome::RetryableReject,
        Outcome::Rejected,
        Outcome::PrefDisabled,
        Outcome::TtlExpired,
        Outcome::PrefDisabledUncertain,
        Outcome::TtlExpiredUncertain,
        Outcome::LeaseExpired,
        Outcome::UserErased,
        Outcome::ManualSent,
        Outcome::ManualFailed,
        Outcome::ManualResend,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "ACCEPTED",
            Outcome::AcceptedReplay => "ACCEPTED_REPLAY",
            Outcome::QueryFound => "QUERY_FOUND",
            Outcome::QueryNotFound => "QUERY_NOT_FOUND",
            Outcome::Timeout => "TIMEOUT",
            Outcome::IoError => "IO_ERROR",
            Outcome::QueryFailed => "QUERY_FAILED",
            Outcome::RetryableReject => "RETRYABLE_REJECT",
            Outcome::Rejected => "REJECTED",
            Outcome::PrefDisabled => "PREF_DISABLED",
            Outcome::TtlExpired => "TTL_EXPIRED",
            Outcome::PrefDisabledUncertain => "PREF_DISABLED_UNCERTAIN",
            Outcome::TtlExpiredUncertain => "TTL_EXPIRED_UNCERTAIN",
            Outcome::LeaseExpired => "LEASE_EXPIRED",
            Outcome::UserErased => "USER_ERASED",
            Outcome::ManualSent => "MANUAL_SENT",
            Outcome::ManualFailed => "MANUAL_FAILED",
            Outcome::ManualResend => "MANUAL_RESEND",
        }
    }

    /// True for the rows a person wrote (a manual resolution), which no channel observed.
    #[must_use]
    pub fn is_manual(self) -> bool {
        matches!(self, Outcome::ManualSent | Outcome::ManualFailed | Outcome::ManualResend)
    }

    /// True for observations that show the channel accepted the request.
    #[must_use]
    pub fn is_acceptance(self) -> bool {
        matches!(self, Outcome::Accepted | Outcome::AcceptedReplay | Outcome::QueryFound)
    }
}

code!(Outcome, "outcome");

/// What a channel adapter reports about one call, with the data that goes with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Observation {
    /// The channel accepted a new request.
    Accepted { provider_msg_id: Option<String> },
    /// The channel recognised the idempotency key and returned the original acceptance.
    AcceptedReplay { provider_msg_id: Option<String> },
    /// A query by reference found an accepted request.
    QueryFound { provider_msg_id: Option<String> },
    /// A query by reference found nothing.
    QueryNotFound,
    /// No answer within the client timeout, after the request may have been written.
    Timeout,
    /// The connection broke, or the answer could not be understood: outcome unknown.
    IoError,
    /// The query itself failed; nothing was learnt.
    QueryFailed,
    /// Refused *before acceptance*, per the channel's contract; may be retried.
    RetryableReject { retry_after: Option<Millis> },
    /// Refused permanently (for example a 400).
    Rejected,
}

impl Observation {
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        match self {
            Observation::Accepted { .. } => Outcome::Accepted,
            Observation::AcceptedReplay { .. } => Outcome::AcceptedReplay,
            Observation::QueryFound { .. } => Outcome::QueryFound,
            Observation::QueryNotFound => Outcome::QueryNotFound,
            Observation::Timeout => Outcome::Timeout,
            Observation::IoError => Outcome::IoError,
            Observation::QueryFailed => Outcome::QueryFailed,
            Observation::RetryableReject { .. } => Outcome::RetryableReject,
            Observation::Rejected => Outcome::Rejected,
        }
    }

    /// The provider's message id, when the observation carries one.
    #[must_use]
    pub fn provider_msg_id(&self) -> Option<&str> {
        match self {
            Observation::Accepted { provider_msg_id }
            | Observation::AcceptedReplay { provider_msg_id }
            | Observation::QueryFound { provider_msg_id } => provider_msg_id.as_deref(),
            _ => None,
        }
    }
}

/// Parked (SPEC §6): the outcome is unknown, a human must decide, and no worker will claim the task
/// again. The one definition; the store's SQL spelling of it is `herald_postgres::PARKED`.
#[must_use]
pub fn is_parked(state: TaskState, needs_review: bool, next_attempt_at: Option<Timestamp>) -> bool {
    state == TaskState::Unknown && needs_review && next_attempt_at.is_none()
}

/// The fields of a task that decisions read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSnapshot {
    pub state: TaskState,
    /// An earlier attempt may have been accepted.
    pub outcome_uncertain: bool,
    /// Automatic scheduling stopped; waiting for a human.
    pub needs_review: bool,
    /// `None` means the task is never picked again automatically.
    pub next_attempt_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    /// Attempts that called the channel so far (the budget counter).
    pub attempt_count: u32,
    /// Start of the latest attempt that may have been accepted; a "not found" answer to a query is only
    /// believed once the channel's consistency delay has passed since then.
    pub uncertain_since: Option<Timestamp>,
}

impl TaskSnapshot {
    /// A freshly created task: pending, due at `due`.
    #[must_use]
    pub fn new_pending(due: Timestamp) -> Self {
        TaskSnapshot {
            state: TaskState::Pending,
            outcome_uncertain: false,
            needs_review: false,
            next_attempt_at: Some(due),
            lease_until: None,
            attempt_count: 0,
            uncertain_since: None,
        }
    }

    /// Parked: uncertain, waiting for a human, and never claimed again (SPEC §6).
    #[must_use]
    pub fn is_parked(&self) -> bool {
        is_parked(self.state, self.needs_review, self.next_attempt_at)
    }

    /// The runnable predicate of the claim query (SPEC §4).
    #[must_use]
    pub fn is_claimable(&self, now: Timestamp) -> bool {
        match self.state {
            TaskState::Pending | TaskState::Unknown => {
                !self.needs_review && self.next_attempt_at.is_some_and(|due| due <= now)
            }
            TaskState::Sending => self.lease_until.is_some_and(|until| until < now),
            TaskState::Sent | TaskState::Failed | TaskState::Suppressed => false,
        }
    }
}

/// The new values of a task's decision fields, as a decision wants them stored.
#[must_use = "a transition does nothing until it is stored"]
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub state: TaskState,
    pub outcome_uncertain: bool,
    pub needs_review: bool,
    pub next_attempt_at: Option<Timestamp>,
    pub uncertain_since: Option<Timestamp>,
    /// The provider's message id to store, when this transition learnt one.
    pub provider_msg_id: Option<String>,
    /// Why, in words for `last_error` and the review list; `None` when nothing went wrong.
    pub reason: Option<&'static str>,
}

impl Transition {
    /// Parked for a human: `UNKNOWN`, uncertain, needs review, never scheduled again.
    pub(crate) fn park(uncertain_since: Option<Timestamp>, reason: &'static str) -> Self {
        Transition {
            state: TaskState::Unknown,
            outcome_uncertain: true,
            needs_review: true,
            next_attempt_at: None,
            uncertain_since,
            provider_msg_id: None,
            reason: Some(reason),
        }
    }

    /// A terminal state without automatic follow-up.
    pub(crate) fn close(state: TaskState, uncertain: bool, reason: Option<&'static str>) -> Self {
        Transition {
            state,
            outcome_uncertain: uncertain,
            needs_review: false,
            next_attempt_at: None,
            uncertain_since: None,
            provider_msg_id: None,
            reason,
        }
    }

    #[must_use]
    pub fn is_parked(&self) -> bool {
        is_parked(self.state, self.needs_review, self.next_attempt_at)
    }

    /// The snapshot a task has after this transition is stored (the lease is released).
    #[must_use]
    pub fn apply_to(&self, before: &TaskSnapshot) -> TaskSnapshot {
        TaskSnapshot {
            state: self.state,
            outcome_uncertain: self.outcome_uncertain,
            needs_review: self.needs_review,
            next_attempt_at: self.next_attempt_at,
            lease_until: None,
            attempt_count: before.attempt_count,
            uncertain_since: self.uncertain_since,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_strings() {
        for state in TaskState::ALL {
            assert_eq!(state.as_str().parse::<TaskState>(), Ok(state));
        }
        for outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
        }
        assert!("DELIVERED".parse::<TaskState>().is_err());
    }

    #[test]
    fn parked_tasks_are_not_claimable() {
        let parked = Transition::park(None, "test").apply_to(&TaskSnapshot::new_pending(Timestamp(0)));
        assert!(parked.is_parked());
        assert!(!parked.is_claimable(Timestamp(i64::MAX)));
    }
}
