//! The finish transition (SPEC §5): what one observation means for the task.
//!
//! The left and right columns of the spec's table differ in one idea: a refusal proves only that *this*
//! attempt was not accepted. When an earlier attempt may have been accepted (`prior_uncertain`), a
//! refusal cannot make the task `FAILED` or `PENDING`-as-if-nothing-happened — the uncertainty stays.

use serde::{Deserialize, Serialize};

use crate::contract::{Capability, QueryConsistency};
use crate::retry::{Jitter, RetryPolicy};
use crate::task::{Action, Observation, Outcome, TaskState, Transition};
use crate::time::Timestamp;

/// What the worker knows when it finishes an attempt; all of it came back from the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishContext {
    pub action: Action,
    /// The attempt was uncertain at claim: an earlier attempt may have been accepted.
    pub prior_uncertain: bool,
    /// Start of the latest attempt before this one that may have been accepted.
    pub uncertain_since: Option<Timestamp>,
    /// When this attempt was claimed.
    pub attempt_started_at: Timestamp,
    /// When the notification (or, for a digest, the last of its events) expires. No retry is scheduled
    /// later than this: a task due at its expiry is settled by the next claim (SPEC §4, §6).
    pub expires_at: Timestamp,
    /// Attempts spent, including this one.
    pub attempts_used: u32,
    /// The task's budget (notification's `max_attempts` or the channel's).
    pub budget: u32,
    pub capability: Capability,
    pub retry: RetryPolicy,
}

impl FinishContext {
    fn has_budget(&self) -> bool {
        self.attempts_used < self.budget
    }

    /// The uncertainty mark after this attempt, finished at `now`, turned out uncertain. The mark is the
    /// latest moment an uncertain call could have been accepted: a SEND that got no answer may have been
    /// accepted until the moment it was given up (its finish, not its claim: it may have left late, and
    /// a channel may still take a request from its socket after the client stopped waiting), so it
    /// becomes the mark; a QUERY sends nothing and keeps the old one.
    fn uncertain_since_after_unknown(&self, now: Timestamp) -> Option<Timestamp> {
        match self.action {
            Action::Send => Some(now.max(self.attempt_started_at)),
            Action::Query => self.uncertain_since.or(Some(self.attempt_started_at)),
        }
    }
}

/// The transition for `observation`, finishing at `now`.
///
/// Every retry is scheduled no later than the task's expiry: a backoff or a `Retry-After` that reaches
/// past it would leave the task waiting long after its TTL, so it is due at the expiry instead, when the
/// claim settles it (expired: `FAILED`, or parked when it may have been sent).
pub fn finish(ctx: &FinishContext, observation: &Observation, now: Timestamp, jitter: Jitter) -> Transition {
    let retry_at = |floor: Option<Timestamp>| {
        let backoff = ctx.retry.next_at(now, ctx.attempts_used, jitter);
        let wanted = floor.map_or(backoff, |floor| backoff.max(floor));
        Some(wanted.min(ctx.expires_at.max(now)))
    };
    // Still uncertain: retried later while budget lasts, else parked.
    let stay_unknown = |since: Option<Timestamp>, floor: Option<Timestamp>, reason: &'static str| {
        if ctx.has_budget() {
            Transition {
                state: TaskState::Unknown,
                outcome_uncertain: true,
                needs_review: false,
                next_attempt_at: retry_at(floor),
                uncertain_since: since,
                provider_msg_id: None,
                reason: Some(reason),
            }
        } else {
            Transition::park(since, "attempt budget exhausted while the outcome is unknown")
        }
    };
    let retry_pending = |floor: Option<Timestamp>, reason: &'static str| {
        if ctx.has_budget() {
            Transition {
                state: TaskState::Pending,
                outcome_uncertain: false,
                needs_review: false,
                next_attempt_at: retry_at(floor),
                uncertain_since: None,
                provider_msg_id: None,
                reason: Some(reason),
            }
        } else {
            Transition::close(TaskState::Failed, false, Some("attempt budget exhausted"))
        }
    };

    match observation {
        Observation::Accepted { provider_msg_id }
        | Observation::AcceptedReplay { provider_msg_id }
        | Observation::QueryFound { provider_msg_id } => Transition {
            state: TaskState::Sent,
            outcome_uncertain: ctx.prior_uncertain,
            needs_review: false,
            next_attempt_at: None,
            uncertain_since: None,
            provider_msg_id: provider_msg_id.clone(),
            reason: None,
        },
        Observation::Timeout | Observation::IoError | Observation::QueryFailed => {
            let since = ctx.uncertain_since_after_unknown(now);
            if ctx.capability == Capability::Neither {
                Transition::park(since, "outcome unknown and the channel offers neither idempotency key nor query")
            } else {
                stay_unknown(since, None, "outcome unknown")
            }
        }
        Observation::RetryableReject { retry_after } => {
            let floor = retry_after.map(|wait| now + wait);
            if ctx.prior_uncertain {
                stay_unknown(ctx.uncertain_since, floor, "refused, but an earlier attempt may have been accepted")
            } else {
                retry_pending(floor, "refused before acceptance")
            }
        }
        Observation::Rejected => {
            if ctx.prior_uncertain {
                Transition::park(
                    ctx.uncertain_since,
                    "refused permanently after an attempt that may have been accepted",
                )
            } else {
                Transition::close(TaskState::Failed, false, Some("refused permanently by the channel"))
            }
        }
        Observation::QueryNotFound => {
            let believable_from = match ctx.capability {
                Capability::Queryable { consistency: QueryConsistency::After(delay) } => {
                    ctx.uncertain_since.map(|since| since + delay)
                }
                _ => None,
            };
            // Judged by when the query may have been answered — as early as its claim — never by when its
            // answer is written down: a finish retried after a database fault comes later, and a "not
            // found" given early must not become believable by the delay of its own recording.
            match believable_from {
                Some(from) if ctx.attempt_started_at < from => {
                    stay_unknown(ctx.uncertain_since, Some(from), "not found yet; asking again later")
                }
                // Believed: nothing was accepted. Resend at once — the backoff is for refusals.
                _ if ctx.has_budget() => Transition {
                    state: TaskState::Pending,
                    outcome_uncertain: false,
                    needs_review: false,
                    next_attempt_at: Some(now),
                    uncertain_since: None,
                    provider_msg_id: None,
                    reason: Some("the channel has no record of the earlier attempt"),
                },
                _ => Transition::close(TaskState::Failed, false, Some("not accepted and attempt budget exhausted")),
            }
        }
    }
}

/// Whether the observation of a *superseded* attempt (a late outcome) means the user may have the message
/// twice: the channel accepted the call, and has no idempotency key that would have turned a second send
/// into a replay. The takeover that superseded the attempt may have sent too (it found the attempt's
/// lease over: a queryable channel's "not found" believed after the lease end, or a resend).
#[must_use]
pub fn late_acceptance_may_duplicate(late: Outcome, capability: Capability) -> bool {
    late == Outcome::Accepted && !matches!(capability, Capability::Idempotent)
}

/// One test per row and column of the SPEC §5 mapping table, named after it.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Millis;

    const NOW: Timestamp = Timestamp(10_000_000);
    const SMS: Capability = Capability::Queryable { consistency: QueryConsistency::Immediate };
    const SMS_SLOW: Capability = Capability::Queryable { consistency: QueryConsistency::After(Millis(30_000)) };

    fn ctx(capability: Capability, prior_uncertain: bool, attempts_used: u32, budget: u32) -> FinishContext {
        FinishContext {
            action: if prior_uncertain && matches!(capability, Capability::Queryable { .. }) {
                Action::Query
            } else {
                Action::Send
            },
            prior_uncertain,
            uncertain_since: prior_uncertain.then_some(NOW - Millis(10_000)),
            attempt_started_at: NOW - Millis(400),
            expires_at: NOW + Millis(3_600_000),
            attempts_used,
            budget,
            capability,
            retry: RetryPolicy::new(budget, Millis(500), Millis(60_000)),
        }
    }

    fn run(ctx: &FinishContext, obs: Observation) -> Transition {
        finish(ctx, &obs, NOW, Jitter::NONE)
    }

    #[track_caller]
    fn check(t: &Transition, state: TaskState, uncertain: bool, parked: bool) {
        assert_eq!(t.state, state, "{t:?}");
        assert_eq!(t.outcome_uncertain, uncertain, "uncertain: {t:?}");
        assert_eq!(t.is_parked(), parked, "parked: {t:?}");
        if !parked && !state.is_terminal() {
            assert!(t.next_attempt_at.is_some_and(|at| at >= NOW), "scheduled: {t:?}");
        }
    }

    fn accepted() -> Observation {
        Observation::Accepted { provider_msg_id: Some("m-1".into()) }
    }

    // Row: ACCEPTED / ACCEPTED_REPLAY / QUERY_FOUND.
    #[test]
    fn row_accepted_without_uncertain_history_is_sent_with_provider_id() {
        let t = run(&ctx(Capability::Idempotent, false, 1, 3), accepted());
        check(&t, TaskState::Sent, false, false);
        assert_eq!(t.provider_msg_id.as_deref(), Some("m-1"));
    }

    #[test]
    fn row_accepted_with_uncertain_history_is_sent() {
        for obs in [
            Observation::AcceptedReplay { provider_msg_id: Some("m-1".into()) },
            Observation::QueryFound { provider_msg_id: None },
            accepted(),
        ] {
            let t = run(&ctx(SMS, true, 2, 3), obs);
            assert_eq!(t.state, TaskState::Sent);
            assert!(!t.needs_review);
        }
    }

    // Row: TIMEOUT / IO_ERROR / QUERY_FAILED.
    #[test]
    fn row_timeout_without_uncertain_history_is_unknown_and_retried() {
        for obs in [Observation::Timeout, Observation::IoError] {
            let t = run(&ctx(Capability::Idempotent, false, 1, 3), obs);
            check(&t, TaskState::Unknown, true, false);
            assert_eq!(t.uncertain_since, Some(NOW), "the call may have been accepted until it was given up");
        }
    }

    #[test]
    fn row_timeout_with_uncertain_history_is_unknown_and_retried() {
        let t = run(&ctx(SMS, true, 2, 3), Observation::QueryFailed);
        check(&t, TaskState::Unknown, true, false);
        assert_eq!(t.uncertain_since, Some(NOW - Millis(10_000)), "a failed query keeps the original mark");
    }

    #[test]
    fn row_timeout_without_budget_parks() {
        check(&run(&ctx(Capability::Idempotent, false, 3, 3), Observation::Timeout), TaskState::Unknown, true, true);
        check(&run(&ctx(SMS, true, 3, 3), Observation::QueryFailed), TaskState::Unknown, true, true);
    }

    #[test]
    fn row_timeout_on_a_channel_with_neither_key_nor_query_parks() {
        for obs in [Observation::Timeout, Observation::IoError] {
            check(&run(&ctx(Capability::Neither, false, 1, 3), obs), TaskState::Unknown, true, true);
        }
    }

    // Row: RETRYABLE_REJECT.
    #[test]
    fn row_retryable_reject_without_uncertain_history_is_pending_with_backoff() {
        let t = run(&ctx(Capability::Idempotent, false, 1, 3), Observation::RetryableReject { retry_after: None });
        check(&t, TaskState::Pending, false, false);
        assert!(t.next_attempt_at > Some(NOW), "backoff applies");
    }

    #[test]
    fn row_retryable_reject_without_uncertain_history_and_no_budget_fails() {
        let t = run(&ctx(Capability::Idempotent, false, 3, 3), Observation::RetryableReject { retry_after: None });
        check(&t, TaskState::Failed, false, false);
    }

    #[test]
    fn row_retryable_reject_with_uncertain_history_stays_unknown() {
        let t = run(&ctx(Capability::Idempotent, true, 2, 3), Observation::RetryableReject { retry_after: None });
        check(&t, TaskState::Unknown, true, false);
    }

    #[test]
    fn row_retryable_reject_with_uncertain_history_and_no_budget_parks() {
        // This is B3: push timed out (accepted), then 503 with no budget left. Not FAILED.
        let t = run(&ctx(Capability::Idempotent, true, 2, 2), Observation::RetryableReject { retry_after: None });
        check(&t, TaskState::Unknown, true, true);
    }

    #[test]
    fn row_retryable_reject_honours_retry_after() {
        let wait = Millis(120_000);
        for prior in [false, true] {
            let t = run(
                &ctx(Capability::Idempotent, prior, 1, 3),
                Observation::RetryableReject { retry_after: Some(wait) },
            );
            assert!(t.next_attempt_at >= Some(NOW + wait), "{t:?}");
        }
    }

    // Row: REJECTED.
    #[test]
    fn row_rejected_without_uncertain_history_fails() {
        check(&run(&ctx(Capability::Idempotent, false, 1, 3), Observation::Rejected), TaskState::Failed, false, false);
    }

    #[test]
    fn row_rejected_with_uncertain_history_parks() {
        check(&run(&ctx(Capability::Idempotent, true, 2, 3), Observation::Rejected), TaskState::Unknown, true, true);
    }

    // Row: QUERY_NOT_FOUND.
    #[test]
    fn row_query_not_found_immediately_consistent_clears_uncertainty() {
        let t = run(&ctx(SMS, true, 2, 3), Observation::QueryNotFound);
        check(&t, TaskState::Pending, false, false);
        assert_eq!(t.next_attempt_at, Some(NOW));
        assert_eq!(t.uncertain_since, None);
    }

    #[test]
    fn row_query_not_found_without_budget_fails() {
        check(&run(&ctx(SMS, true, 3, 3), Observation::QueryNotFound), TaskState::Failed, false, false);
    }

    #[test]
    fn row_query_not_found_too_early_stays_unknown_and_asks_later() {
        // The original send started 10 s ago; the channel needs 30 s before "not found" is true.
        let t = run(&ctx(SMS_SLOW, true, 2, 3), Observation::QueryNotFound);
        check(&t, TaskState::Unknown, true, false);
        assert!(t.next_attempt_at >= Some(NOW + Millis(20_000)), "not before the consistency delay: {t:?}");
    }

    #[test]
    fn row_query_not_found_too_early_without_budget_parks() {
        check(&run(&ctx(SMS_SLOW, true, 3, 3), Observation::QueryNotFound), TaskState::Unknown, true, true);
    }

    #[test]
    fn row_query_not_found_after_the_consistency_delay_is_believed() {
        let mut c = ctx(SMS_SLOW, true, 2, 3);
        c.uncertain_since = Some(NOW - Millis(30_400));
        check(&run(&c, Observation::QueryNotFound), TaskState::Pending, false, false);
    }

    // Defect: "not found" was believed counting from the claim of the uncertain SEND, although the call
    // may have left (and been accepted) much later.
    #[test]
    fn an_unknown_send_marks_its_finish_as_the_latest_possible_acceptance() {
        let mut c = ctx(SMS_SLOW, false, 1, 3);
        // Claimed 20 s before it finished: the call left late (pool wait, a slow start).
        c.attempt_started_at = NOW - Millis(20_000);
        let t = run(&c, Observation::Timeout);
        assert_eq!(t.uncertain_since, Some(NOW));
        // 15 s after the finish "not found" is not yet believable (the channel needs 30 s), although it is
        // 35 s after the claim.
        let later = NOW + Millis(15_000);
        let mut q = ctx(SMS_SLOW, true, 2, 3);
        q.uncertain_since = t.uncertain_since;
        q.attempt_started_at = later;
        let t = finish(&q, &Observation::QueryNotFound, later, Jitter::NONE);
        assert_eq!(t.state, TaskState::Unknown, "{t:?}");
        assert_eq!(t.next_attempt_at, Some(NOW + Millis(30_000)), "asked again once believable");
    }

    // Defect: scheduling past the deadline.
    #[test]
    fn no_retry_is_scheduled_after_the_expiry() {
        let mut c = ctx(Capability::Idempotent, false, 1, 3);
        c.expires_at = NOW + Millis(5_000);
        let far = Observation::RetryableReject { retry_after: Some(Millis(3_600_000)) };
        assert_eq!(run(&c, far).next_attempt_at, Some(NOW + Millis(5_000)), "Retry-After capped at the expiry");
        c.retry = RetryPolicy::new(3, Millis(60_000), Millis(60_000));
        let t = run(&c, Observation::RetryableReject { retry_after: None });
        assert_eq!(t.next_attempt_at, Some(NOW + Millis(5_000)), "backoff capped at the expiry");
        let t = run(&c, Observation::Timeout);
        assert_eq!((t.state, t.next_attempt_at), (TaskState::Unknown, Some(NOW + Millis(5_000))));
        // Already expired: due at once, so the claim settles it now.
        c.expires_at = NOW - Millis(1);
        assert_eq!(run(&c, Observation::Timeout).next_attempt_at, Some(NOW));
    }

    // Defect (found by the soak): a "not found" answered early but written down late — its finish retried
    // through database faults — was believed by the time of its writing, and the task was sent again.
    #[test]
    fn not_found_is_judged_by_when_the_query_was_made_not_when_it_was_written_down() {
        let mut q = ctx(SMS_SLOW, true, 2, 3);
        q.uncertain_since = Some(NOW - Millis(20_000));
        // The query was claimed 25 s before the consistency delay had passed, and its finish is written
        // 40 s later, when the delay has long passed.
        q.attempt_started_at = NOW - Millis(30_000);
        let late = NOW + Millis(40_000);
        let t = finish(&q, &Observation::QueryNotFound, late, Jitter::NONE);
        assert_eq!(t.state, TaskState::Unknown, "not believed: {t:?}");
        assert!(t.outcome_uncertain);
    }
    #[test]
    fn only_an_acceptance_on_a_channel_without_a_key_may_be_a_duplicate_when_late() {
        for capability in [Capability::Idempotent, SMS, SMS_SLOW, Capability::Neither] {
            for late in Outcome::ALL {
                let expected = late == Outcome::Accepted && capability != Capability::Idempotent;
                assert_eq!(late_acceptance_may_duplicate(late, capability), expected, "{late:?} on {capability:?}");
            }
        }
    }
}
