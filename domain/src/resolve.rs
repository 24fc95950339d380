//! The human exit (SPEC §3, §6): a parked task is settled once, by a person who checked.
//!
//! Three answers are possible. `SENT`: the person confirmed the message arrived. `FAILED`: it did not,
//! and it must not be sent again. `RESEND`: it did not arrive and should be sent again — the task goes
//! back to `PENDING`, due at once, with a fresh attempt budget and its uncertainty cleared *by the
//! person's statement* (nothing a channel said); the next send is an ordinary claimed, fenced attempt.
//!
//! Whatever the answer, the uncertainty is settled by the person's word: the task no longer says
//! "uncertain" beside its new state, and the reason is not written down as an error. Every view shows
//! the decision as a human one ("marked sent by an operator: {note}"), never as the channel's
//! acceptance: the attempt row's outcome (`MANUAL_SENT`, `MANUAL_FAILED`, `MANUAL_RESEND`) says so.

use serde::{Deserialize, Serialize};

use crate::task::{Outcome, TaskSnapshot, TaskState, Transition};
use crate::time::Timestamp;

/// What the human found out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FinalState {
    /// It arrived: the task becomes `SENT`.
    Sent,
    /// It did not arrive and must not be sent again: `FAILED`.
    Failed,
    /// It did not arrive and should be sent again: `PENDING` with a fresh budget.
    Resend,
}

impl FinalState {
    pub const ALL: [FinalState; 3] = [FinalState::Sent, FinalState::Failed, FinalState::Resend];

    /// The state the task has after the resolution.
    #[must_use]
    pub fn state(self) -> TaskState {
        match self {
            FinalState::Sent => TaskState::Sent,
            FinalState::Failed => TaskState::Failed,
            FinalState::Resend => TaskState::Pending,
        }
    }

    /// The outcome recorded as the manual attempt row.
    #[must_use]
    pub fn outcome(self) -> Outcome {
        match self {
            FinalState::Sent => Outcome::ManualSent,
            FinalState::Failed => Outcome::ManualFailed,
            FinalState::Resend => Outcome::ManualResend,
        }
    }

    /// Whether the task's attempt budget starts again (the store sets `attempt_count` to zero).
    #[must_use]
    pub fn fresh_budget(self) -> bool {
        matches!(self, FinalState::Resend)
    }

    /// The code on the wire (`SENT`, `FAILED`, `RESEND`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FinalState::Sent => "SENT",
            FinalState::Failed => "FAILED",
            FinalState::Resend => "RESEND",
        }
    }
}

crate::task::code!(FinalState, "final state");

/// Which manual decision a manual attempt row records, if it is one.
#[must_use]
pub fn manual_decision(outcome: Outcome) -> Option<FinalState> {
    match outcome {
        Outcome::ManualSent => Some(FinalState::Sent),
        Outcome::ManualFailed => Some(FinalState::Failed),
        Outcome::ManualResend => Some(FinalState::Resend),
        _ => None,
    }
}

/// Refusal of a manual resolution: the task is not parked (already resolved, or still automatic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("task is {state} and not waiting for review; nothing changed")]
pub struct NotParked {
    pub state: TaskState,
}

/// Resolves a parked task at `now`; anything else is refused and left as it is, so a second call changes
/// nothing. `RESEND` makes the task due at `now`; the caller also resets its budget
/// ([`FinalState::fresh_budget`]).
pub fn resolve_manually_at(
    task: &TaskSnapshot,
    final_state: FinalState,
    now: Timestamp,
) -> Result<Transition, NotParked> {
    if !task.is_parked() {
        return Err(NotParked { state: task.state });
    }
    Ok(Transition {
        state: final_state.state(),
        // The person's statement settles what the channel could not tell.
        outcome_uncertain: false,
        needs_review: false,
        next_attempt_at: (final_state == FinalState::Resend).then_some(now),
        uncertain_since: None,
        provider_msg_id: None,
        // A human decision is not an error: nothing goes to `last_error`.
        reason: None,
    })
}

/// [`resolve_manually_at`] for callers without a clock at hand: a `RESEND` is due from the epoch on,
/// that is at once.
pub fn resolve_manually(task: &TaskSnapshot, final_state: FinalState) -> Result<Transition, NotParked> {
    resolve_manually_at(task, final_state, Timestamp(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked() -> TaskSnapshot {
        TaskSnapshot {
            state: TaskState::Unknown,
            outcome_uncertain: true,
            needs_review: true,
            next_attempt_at: None,
            lease_until: None,
            attempt_count: 3,
            uncertain_since: Some(Timestamp(5)),
        }
    }

    #[test]
    fn parked_task_resolves_once() {
        let t = resolve_manually(&parked(), FinalState::Failed).expect("parked");
        assert_eq!(t.state, TaskState::Failed);
        let after = t.apply_to(&parked());
        assert_eq!(resolve_manually(&after, FinalState::Sent), Err(NotParked { state: TaskState::Failed }));
    }

    #[test]
    fn unknown_task_still_scheduled_is_not_resolvable() {
        let mut task = parked();
        task.needs_review = false;
        task.next_attempt_at = Some(Timestamp(10));
        for final_state in FinalState::ALL {
            assert!(resolve_manually(&task, final_state).is_err());
        }
    }

    #[test]
    fn a_human_decision_settles_the_uncertainty_and_is_no_error() {
        for final_state in FinalState::ALL {
            let t = resolve_manually_at(&parked(), final_state, Timestamp(100)).expect("parked");
            assert!(!t.outcome_uncertain, "{final_state:?}");
            assert_eq!(t.uncertain_since, None);
            assert_eq!(t.reason, None, "{final_state:?}: a human decision is not an error");
            assert!(!t.needs_review);
            assert_eq!(manual_decision(final_state.outcome()), Some(final_state));
            assert!(final_state.outcome().is_manual());
            assert_eq!(final_state.as_str().parse::<FinalState>(), Ok(final_state));
        }
        assert_eq!(manual_decision(Outcome::Accepted), None);
    }

    #[test]
    fn resend_returns_the_task_to_pending_due_now_with_a_fresh_budget() {
        let t = resolve_manually_at(&parked(), FinalState::Resend, Timestamp(100)).expect("parked");
        assert_eq!(t.state, TaskState::Pending);
        assert_eq!(t.next_attempt_at, Some(Timestamp(100)));
        assert!(!t.is_parked());
        let mut after = t.apply_to(&parked());
        assert!(FinalState::Resend.fresh_budget());
        assert!(!FinalState::Sent.fresh_budget() && !FinalState::Failed.fresh_budget());
        after.attempt_count = 0;
        // An ordinary pending task: claimable at once, and a second resolution is refused.
        assert!(after.is_claimable(Timestamp(100)));
        assert_eq!(
            resolve_manually_at(&after, FinalState::Resend, Timestamp(101)),
            Err(NotParked { state: TaskState::Pending })
        );
    }
}
