//! The claim decision (SPEC §4, §6): what a worker that has just locked a runnable task does with it.
//!
//! The claim transaction reads the task, the user's preference switch and the notification's expiry,
//! calls [`decide_claim`], and stores the result before committing. Only a [`ClaimDecision::Call`] leads
//! to a channel call, and only after that commit.

use serde::{Deserialize, Serialize};

use crate::contract::{Capability, Policy};
use crate::task::{Action, Outcome, TaskSnapshot, TaskState, Transition};
use crate::time::{Millis, Timestamp};

/// Everything the claim transaction knows about one locked task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimContext {
    pub task: TaskSnapshot,
    /// The notification's `max_attempts` when given, else the channel's.
    pub budget: u32,
    /// The user's switch for this channel, read in the claim transaction.
    pub pref_enabled: bool,
    /// The user was erased (SPEC §13), read in the claim transaction: nothing is handed to a channel.
    #[serde(default)]
    pub erased: bool,
    pub expires_at: Timestamp,
    pub capability: Capability,
    pub policy: Policy,
}

/// Why a claim parked a task instead of calling the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParkReason {
    /// The preference was switched off after an attempt that may have been accepted.
    PrefDisabledUncertain,
    /// The notification expired after an attempt that may have been accepted.
    TtlExpiredUncertain,
    /// No attempt is left in the budget and an earlier attempt may have been accepted.
    BudgetExhausted,
    /// The channel has neither an idempotency key nor a query, so nothing can be done safely.
    NoSafeAction,
}

impl ParkReason {
    #[must_use]
    pub fn text(self) -> &'static str {
        match self {
            ParkReason::PrefDisabledUncertain => "channel switched off after an attempt that may have been accepted",
            ParkReason::TtlExpiredUncertain => "expired after an attempt that may have been accepted",
            ParkReason::BudgetExhausted => "attempt budget exhausted while the outcome is unknown",
            ParkReason::NoSafeAction => "outcome unknown and the channel offers neither idempotency key nor query",
        }
    }

    /// The attempt row a claim-time park writes, if any.
    #[must_use]
    pub fn outcome(self) -> Option<Outcome> {
        match self {
            ParkReason::PrefDisabledUncertain => Some(Outcome::PrefDisabledUncertain),
            ParkReason::TtlExpiredUncertain => Some(Outcome::TtlExpiredUncertain),
            ParkReason::BudgetExhausted | ParkReason::NoSafeAction => None,
        }
    }
}

/// What the claim does. `superseded` in every variant says that the task was found `SENDING` with an
/// expired lease: the previous holder's attempt is marked `LEASE_EXPIRED`, and its call may have been
/// accepted, so this claim is uncertain.
#[must_use = "a claim decision does nothing until it is stored"]
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ClaimDecision {
    /// Not runnable at `now`; leave it alone.
    Skip,
    /// Take the lease, spend one attempt, and call the channel after commit.
    Call {
        action: Action,
        /// An earlier attempt may have been accepted (the `prior` of the §5 table).
        uncertain: bool,
        superseded: bool,
        uncertain_since: Option<Timestamp>,
    },
    /// Settle without calling: suppressed, failed, or parked. `record` is the claim-time outcome written
    /// as an attempt row (no budget is spent).
    Settle { superseded: bool, record: Option<Outcome>, transition: Transition },
}

impl ClaimDecision {
    #[must_use]
    pub fn calls_channel(&self) -> bool {
        matches!(self, ClaimDecision::Call { .. })
    }
}

/// The action for an attempt (SPEC §5): `QUERY` when the attempt is uncertain, the channel is queryable
/// and not idempotent, and the policy is `Safe`; otherwise `SEND` — except that under `Safe` an uncertain
/// attempt on a channel with neither key nor query has no safe action at all (`None`: park it).
#[must_use]
pub fn choose_action(uncertain: bool, capability: Capability, policy: Policy) -> Option<Action> {
    if !uncertain || policy == Policy::Unsafe {
        return Some(Action::Send);
    }
    match capability {
        Capability::Idempotent => Some(Action::Send),
        Capability::Queryable { .. } => Some(Action::Query),
        Capability::Neither => None,
    }
}

/// Decides a claim (SPEC §4, §6).
///
/// Order matters and follows the spec: a task that may have been sent is never written down as
/// `SUPPRESSED` or `FAILED`; without uncertain history, a switched-off preference suppresses and an
/// expired notification fails, neither calling the channel; an exhausted budget or an uncertain task on
/// a channel without key or query is parked.
pub fn decide_claim(ctx: &ClaimContext, now: Timestamp) -> ClaimDecision {
    let task = &ctx.task;
    if !task.is_claimable(now) {
        return ClaimDecision::Skip;
    }
    let superseded = task.state == TaskState::Sending;
    let uncertain = task.outcome_uncertain || superseded;
    // A superseded holder may legally have called until its lease ended (a call starts only while it can
    // end within the lease), so that is the latest moment its call could have been accepted: the mark a
    // query's "not found" is measured from (SPEC §5), never the holder's start.
    let uncertain_since = if superseded { task.lease_until.or(task.uncertain_since) } else { task.uncertain_since };
    let park = |reason: ParkReason| ClaimDecision::Settle {
        superseded,
        record: reason.outcome(),
        transition: Transition::park(uncertain_since, reason.text()),
    };

    if ctx.erased {
        return ClaimDecision::Settle { superseded, record: Some(Outcome::UserErased), transition: erased(uncertain) };
    }
    if !ctx.pref_enabled {
        return if uncertain {
            park(ParkReason::PrefDisabledUncertain)
        } else {
            ClaimDecision::Settle {
                superseded,
                record: Some(Outcome::PrefDisabled),
                transition: Transition::close(TaskState::Suppressed, false, Some("channel switched off")),
            }
        };
    }
    if now >= ctx.expires_at {
        return if uncertain {
            park(ParkReason::TtlExpiredUncertain)
        } else {
            ClaimDecision::Settle {
                superseded,
                record: Some(Outcome::TtlExpired),
                transition: Transition::close(TaskState::Failed, false, Some("expired before it could be sent")),
            }
        };
    }
    if task.attempt_count >= ctx.budget {
        return if uncertain {
            park(ParkReason::BudgetExhausted)
        } else {
            ClaimDecision::Settle {
                superseded,
                record: None,
                transition: Transition::close(TaskState::Failed, false, Some("attempt budget exhausted")),
            }
        };
    }
    match choose_action(uncertain, ctx.capability, ctx.policy) {
        Some(action) => ClaimDecision::Call { action, uncertain, superseded, uncertain_since },
        None => park(ParkReason::NoSafeAction),
    }
}

/// How a task of an erased user is settled (SPEC §13), at its erasure or at the claim that finds the
/// erasure: never handed to a channel again. Without uncertain history it is `SUPPRESSED`; a task whose
/// earlier attempt may have been accepted is never written down as not sent (§6), so it stays `UNKNOWN`
/// and uncertain — but no longer waits for a person (there is no one left to prompt, and a resend is
/// exactly what erasure forbids): not parked, never scheduled again, closed with the reason.
pub fn erased(uncertain: bool) -> Transition {
    if uncertain {
        Transition::close(TaskState::Unknown, true, Some(ERASED_UNCERTAIN))
    } else {
        Transition::close(TaskState::Suppressed, false, Some(ERASED))
    }
}

/// The reason an erasure writes on a task it suppressed.
pub const ERASED: &str = "user erased";
/// The reason an erasure writes on an uncertain task it closed (a parked one leaves the review queue).
pub const ERASED_UNCERTAIN: &str = "user erased: an earlier attempt may have been accepted";

/// Time a worker needs after a call to store its outcome. The lease must cover the client timeout plus
/// this (SPEC §4); configuration is checked against it at start-up.
pub const FINISH_MARGIN: Millis = Millis(1_000);

/// Time allowed between reading the clock for a claim and starting the call: waiting for a pool
/// connection, the claim transaction, decryption.
pub const START_SLACK: Millis = Millis(1_000);

/// The shortest lease that lets a call on a channel with this client timeout start and be finished in
/// time: what configuration is checked against at start-up.
#[must_use]
pub fn min_lease(client_timeout: Millis) -> Millis {
    client_timeout + START_SLACK + FINISH_MARGIN
}

/// Whether a call starting `since_clock_read` after the claim read its `now` still ends — within the
/// client timeout, and finished within [`FINISH_MARGIN`] — before the lease taken at that `now` ends.
///
/// The lease is measured from the clock read before the claim, not from the call: waiting for a pool
/// connection, the claim transaction and decryption all spend it. A holder whose call could outlive its
/// lease must not call, or the next holder could query, find nothing yet, and send a second time.
#[must_use]
pub fn call_fits_lease(lease: Millis, client_timeout: Millis, since_clock_read: std::time::Duration) -> bool {
    let spent = u64::try_from(since_clock_read.as_millis()).unwrap_or(u64::MAX);
    spent.saturating_add(client_timeout.0).saturating_add(FINISH_MARGIN.0) < lease.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::QueryConsistency;

    const NOW: Timestamp = Timestamp(1_000_000);

    fn ctx(state: TaskState, uncertain: bool, capability: Capability) -> ClaimContext {
        let mut task = TaskSnapshot::new_pending(NOW);
        task.state = state;
        task.outcome_uncertain = uncertain;
        if state == TaskState::Sending {
            task.next_attempt_at = None;
            task.lease_until = Some(NOW - Millis(1));
        }
        ClaimContext {
            task,
            budget: 3,
            pref_enabled: true,
            erased: false,
            expires_at: NOW + Millis(60_000),
            capability,
            policy: Policy::Safe,
        }
    }

    const SMS: Capability = Capability::Queryable { consistency: QueryConsistency::Immediate };

    #[track_caller]
    fn check_settle(decision: &ClaimDecision, record: Option<Outcome>, state: TaskState, parked: bool) {
        match decision {
            ClaimDecision::Settle { record: r, transition, .. } => {
                assert_eq!(*r, record);
                assert_eq!(transition.state, state);
                assert_eq!(transition.is_parked(), parked);
            }
            other => panic!("expected a settle, got {other:?}"),
        }
    }

    #[test]
    fn pref_off_without_uncertain_history_suppresses() {
        let mut c = ctx(TaskState::Pending, false, SMS);
        c.pref_enabled = false;
        check_settle(&decide_claim(&c, NOW), Some(Outcome::PrefDisabled), TaskState::Suppressed, false);
    }

    #[test]
    fn pref_off_with_uncertain_history_parks() {
        let mut c = ctx(TaskState::Unknown, true, SMS);
        c.pref_enabled = false;
        check_settle(&decide_claim(&c, NOW), Some(Outcome::PrefDisabledUncertain), TaskState::Unknown, true);
    }

    #[test]
    fn expired_without_uncertain_history_fails() {
        let mut c = ctx(TaskState::Pending, false, SMS);
        c.expires_at = NOW;
        check_settle(&decide_claim(&c, NOW), Some(Outcome::TtlExpired), TaskState::Failed, false);
    }

    #[test]
    fn expired_with_uncertain_history_parks() {
        let mut c = ctx(TaskState::Unknown, true, SMS);
        c.expires_at = NOW - Millis(1);
        check_settle(&decide_claim(&c, NOW), Some(Outcome::TtlExpiredUncertain), TaskState::Unknown, true);
    }

    #[test]
    fn exhausted_budget_while_uncertain_parks() {
        let mut c = ctx(TaskState::Unknown, true, Capability::Idempotent);
        c.task.attempt_count = 3;
        check_settle(&decide_claim(&c, NOW), None, TaskState::Unknown, true);
    }

    #[test]
    fn expired_lease_supersedes_and_makes_the_claim_uncertain() {
        let c = ctx(TaskState::Sending, false, Capability::Idempotent);
        assert_eq!(
            decide_claim(&c, NOW),
            ClaimDecision::Call {
                action: Action::Send,
                uncertain: true,
                superseded: true,
                // The superseded holder may have called until its lease ended.
                uncertain_since: Some(NOW - Millis(1)),
            }
        );
    }

    #[test]
    fn expired_lease_with_no_budget_parks_instead_of_calling() {
        let mut c = ctx(TaskState::Sending, false, Capability::Idempotent);
        c.task.attempt_count = 3;
        let decision = decide_claim(&c, NOW);
        check_settle(&decision, None, TaskState::Unknown, true);
        assert!(matches!(decision, ClaimDecision::Settle { superseded: true, .. }));
    }

    #[test]
    fn expired_lease_on_a_channel_with_neither_parks() {
        let c = ctx(TaskState::Sending, false, Capability::Neither);
        check_settle(&decide_claim(&c, NOW), None, TaskState::Unknown, true);
    }

    #[test]
    fn live_lease_is_not_claimable() {
        let mut c = ctx(TaskState::Sending, false, Capability::Idempotent);
        c.task.lease_until = Some(NOW);
        assert_eq!(decide_claim(&c, NOW), ClaimDecision::Skip);
    }

    #[test]
    fn uncertain_queryable_task_is_queried_and_idempotent_one_resent() {
        assert_eq!(choose_action(true, SMS, Policy::Safe), Some(Action::Query));
        assert_eq!(choose_action(true, Capability::Idempotent, Policy::Safe), Some(Action::Send));
        assert_eq!(choose_action(true, Capability::Neither, Policy::Safe), None);
        assert_eq!(choose_action(false, Capability::Neither, Policy::Safe), Some(Action::Send));
        assert_eq!(choose_action(true, SMS, Policy::Unsafe), Some(Action::Send));
    }

    #[test]
    fn a_call_starts_only_while_it_can_end_before_the_lease() {
        use std::time::Duration;
        let (lease, timeout) = (Millis(60_000), Millis(5_000));
        assert!(call_fits_lease(lease, timeout, Duration::ZERO));
        assert!(call_fits_lease(lease, timeout, Duration::from_millis(53_999)));
        assert!(!call_fits_lease(lease, timeout, Duration::from_millis(54_000)));
        assert!(!call_fits_lease(Millis(5_500), timeout, Duration::ZERO), "lease shorter than timeout + margin");
        assert!(!call_fits_lease(lease, timeout, Duration::MAX));
        // The shortest lease configuration accepts leaves the whole start slack for the claim.
        let shortest = min_lease(timeout);
        assert!(call_fits_lease(shortest, timeout, Duration::from_millis(START_SLACK.0 - 1)));
        assert!(!call_fits_lease(shortest, timeout, Duration::from_millis(START_SLACK.0)));
    }

    #[test]
    fn an_erased_users_task_is_never_called_and_never_parked() {
        for capability in [Capability::Idempotent, Capability::Neither] {
            for state in [TaskState::Pending, TaskState::Unknown, TaskState::Sending] {
                for uncertain in [false, true] {
                    let mut c = ctx(state, uncertain, capability);
                    c.erased = true;
                    // Even with the switch off and the notification expired, the erasure is the reason.
                    c.pref_enabled = false;
                    c.expires_at = NOW;
                    let ClaimDecision::Settle { record, transition, .. } = decide_claim(&c, NOW) else {
                        panic!("an erased user's task was not settled: {state:?} {uncertain}");
                    };
                    assert_eq!(record, Some(Outcome::UserErased));
                    assert!(!transition.is_parked() && transition.next_attempt_at.is_none());
                    let may_have_been_sent = uncertain || state == TaskState::Sending;
                    let expected = if may_have_been_sent { TaskState::Unknown } else { TaskState::Suppressed };
                    assert_eq!(transition.state, expected, "{state:?} uncertain={uncertain}");
                    assert_eq!(transition.outcome_uncertain, may_have_been_sent);
                }
            }
        }
    }
}
