//! The human exit (SPEC §3, §6): a parked task is settled once, by a person who checked.

use serde::{Deserialize, Serialize};

use crate::task::{Outcome, TaskSnapshot, TaskState, Transition};

/// What the human found out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FinalState {
    Sent,
    Failed,
}

impl FinalState {
    #[must_use]
    pub fn state(self) -> TaskState {
        match self {
            FinalState::Sent => TaskState::Sent,
            FinalState::Failed => TaskState::Failed,
        }
    }

    /// The outcome recorded as the manual attempt row.
    #[must_use]
    pub fn outcome(self) -> Outcome {
        match self {
            FinalState::Sent => Outcome::ManualSent,
            FinalState::Failed => Outcome::ManualFailed,
        }
    }
}

/// Refusal of a manual resolution: the task is not parked (already resolved, or still automatic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("task is {state} and not waiting for review; nothing changed")]
pub struct NotParked {
    pub state: TaskState,
}

/// Resolves a parked task; anything else is refused and left as it is, so a second call changes nothing.
pub fn resolve_manually(task: &TaskSnapshot, final_state: FinalState) -> Result<Transition, NotParked> {
    if !task.is_parked() {
        return Err(NotParked { state: task.state });
    }
    Ok(Transition {
        state: final_state.state(),
        outcome_uncertain: task.outcome_uncertain,
        needs_review: false,
        next_attempt_at: None,
        uncertain_since: task.uncertain_since,
        provider_msg_id: None,
        reason: Some("resolved by a human"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

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
        assert!(resolve_manually(&task, FinalState::Sent).is_err());
    }
}
