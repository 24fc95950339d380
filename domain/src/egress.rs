//! The global egress interval of a channel (SPEC §7): at most one actual call per interval, across all
//! workers and processes. The store keeps the last call time of each channel in a row it locks in the
//! claim transaction; this function only decides.

use serde::{Deserialize, Serialize};

use crate::task::{TaskSnapshot, TaskState, Transition};
use crate::time::{Millis, Timestamp};

/// Whether a call may leave now.
#[must_use = "an egress decision does nothing until it is acted on"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EgressDecision {
    /// Call now, and record `now` as the channel's last call.
    Go,
    /// Do not call; move the task's `next_attempt_at` to this time. Spends no attempt.
    DeferUntil(Timestamp),
}

/// Decides whether a call may happen at `now`, given the channel's last call time.
pub fn decide_egress(last_call_at: Option<Timestamp>, min_interval: Millis, now: Timestamp) -> EgressDecision {
    match last_call_at {
        Some(last) if min_interval > Millis::ZERO && now < last + min_interval => {
            EgressDecision::DeferUntil(last + min_interval)
        }
        _ => EgressDecision::Go,
    }
}

/// The task after a deferred claim: same knowledge, due again at `until`, no attempt spent. When the
/// claim superseded an expired lease the task becomes `UNKNOWN`, since that holder's call may have been
/// accepted.
pub fn deferral(
    task: &TaskSnapshot,
    uncertain: bool,
    uncertain_since: Option<Timestamp>,
    until: Timestamp,
) -> Transition {
    let state = if uncertain { TaskState::Unknown } else { task.state };
    let state = if state == TaskState::Sending { TaskState::Pending } else { state };
    Transition {
        state,
        outcome_uncertain: uncertain,
        needs_review: false,
        next_attempt_at: Some(until),
        uncertain_since,
        provider_msg_id: None,
        reason: Some("waiting for the channel's egress interval"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_second_interval_defers_the_second_call() {
        let interval = Millis(10_000);
        assert_eq!(decide_egress(None, interval, Timestamp(0)), EgressDecision::Go);
        assert_eq!(
            decide_egress(Some(Timestamp(0)), interval, Timestamp(9_999)),
            EgressDecision::DeferUntil(Timestamp(10_000))
        );
        assert_eq!(decide_egress(Some(Timestamp(0)), interval, Timestamp(10_000)), EgressDecision::Go);
        assert_eq!(decide_egress(Some(Timestamp(0)), Millis::ZERO, Timestamp(0)), EgressDecision::Go);
    }
}
