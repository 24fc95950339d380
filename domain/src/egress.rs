//! The global egress interval of a channel (SPEC §7): actual calls at least `min_interval` apart, across
//! all workers and processes.
//!
//! The store keeps each channel's latest *reservation* in a row it locks in the claim transaction; these
//! functions only decide. A reservation is made at the claim's `now`, but the real call leaves a little
//! later (commit, decrypt, connect) by a delay δ that varies from call to call, so reservations spaced by
//! exactly the interval could produce two real calls closer than it by δ₁ − δ₂. Hence two rules that
//! together make the interval hold for the calls themselves:
//!
//! * reservations are spaced `min_interval + guard` apart ([`decide_egress`]);
//! * a holder calls only while `δ ≤ guard`, measured on its own monotonic clock from just before it read
//!   `now` to just before it sends ([`slot_kept`]); a later holder does not call and gives its attempt
//!   back ([`give_back`]), spending no budget.
//!
//! With reservations `r₁ < r₂`, `r₂ − r₁ ≥ I + G` and delays `δᵢ ∈ [0, G]`, the calls `aᵢ = rᵢ + δᵢ` satisfy
//! `a₂ − a₁ ≥ I + G − G = I`. What the guard cannot cover is time spent after the check inside the
//! transport (connecting, a TLS handshake) when it varies between calls.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::retry::{Jitter, RetryPolicy};
use crate::task::{TaskSnapshot, TaskState, Transition};
use crate::time::{Millis, Timestamp};

/// The largest default guard: enough for a slow commit and connect, small next to Miaotixing's 10 s.
pub const MAX_DEFAULT_GUARD: Millis = Millis(1_000);

/// The guard of a channel that configures none: a tenth of the interval, at most one second. Zero for a
/// channel without an interval, which never reserves anything.
#[must_use]
pub fn default_guard(min_interval: Millis) -> Millis {
    Millis((min_interval.0 / 10).min(MAX_DEFAULT_GUARD.0))
}

/// Whether a call may leave now.
#[must_use = "an egress decision does nothing until it is acted on"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EgressDecision {
    /// Call now, and record `now` as the channel's latest reservation.
    Go,
    /// Do not call; move the task's `next_attempt_at` to this time. Spends no attempt.
    DeferUntil(Timestamp),
}

/// Decides whether a call may be reserved at `now`, given the channel's latest reservation: only when
/// `now` is at least `min_interval + guard` after it. A `now` earlier than the latest reservation (a
/// worker that read the clock before another one reserved) also waits, so reservations only move forward.
pub fn decide_egress(
    last_reservation: Option<Timestamp>,
    min_interval: Millis,
    guard: Millis,
    now: Timestamp,
) -> EgressDecision {
    if min_interval == Millis::ZERO {
        return EgressDecision::Go;
    }
    match last_reservation {
        Some(last) if now < last + (min_interval + guard) => EgressDecision::DeferUntil(last + (min_interval + guard)),
        _ => EgressDecision::Go,
    }
}

/// Whether a holder that reserved a slot may still use it, `since_clock_read` after it started reading
/// the `now` its reservation was made at. Channels without an interval always may.
#[must_use]
pub fn slot_kept(min_interval: Millis, guard: Millis, since_clock_read: Duration) -> bool {
    min_interval == Millis::ZERO || since_clock_read <= Duration::from_millis(guard.0)
}

/// The task after a holder missed its egress slot and did not call: due again at once (its next claim
/// reserves a new slot), with the knowledge it had when it was claimed. The store also takes the attempt
/// back, so the budget stays what it was: no call, no attempt.
pub fn give_back(prior_uncertain: bool, uncertain_since: Option<Timestamp>, now: Timestamp) -> Transition {
    Transition {
        state: if prior_uncertain { TaskState::Unknown } else { TaskState::Pending },
        outcome_uncertain: prior_uncertain,
        needs_review: false,
        next_attempt_at: Some(now),
        uncertain_since,
        provider_msg_id: None,
        reason: Some("not sent: claimed too long ago to call safely (egress slot or lease); no attempt spent"),
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

/// The first pause after a slot that another claimer took, doubled with every further loss in a row.
pub const SLOT_BACKOFF_BASE: Millis = Millis(10);

/// A claimer's wait for the next free egress slot of a rate-limited channel with tasks due.
///
/// A claim that finds such a channel's slot taken (it defers the channel's tasks, or passes the channel
/// over) reports when the slot is free again; the claimer claims again at that instant rather than at its
/// poll interval, so one claimer keeps a channel at its configured rate. Every claimer (every process)
/// learns the same slot, and only one of them gets it: a claim made at or after the slot it waited for
/// that called nothing and found the slot taken again *lost* it. Each loss in a row moves the next claim
/// further after the slot ([`SLOT_BACKOFF_BASE`] doubling, equal jitter, at most `cap` — the poll
/// interval), so the claimer that keeps winning claims at every slot while the others fall back to about
/// one claim per `cap`, and a slot reported as already free (a clock that stepped) never turns into a
/// spin. A claim that calls or settles something, or finds no slot to wait for, starts over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotWait {
    /// The slot the last claim reported.
    pub free_at: Option<Timestamp>,
    /// Slots lost in a row.
    pub lost: u32,
}

impl SlotWait {
    /// The wait after a claim made at `now` that reported `next` (the earliest free slot of a channel
    /// with tasks due whose slot it found taken) and did (`progress`) or did not call or settle anything.
    #[must_use]
    pub fn after_claim(self, now: Timestamp, next: Option<Timestamp>, progress: bool) -> SlotWait {
        let Some(next) = next else { return SlotWait::default() };
        let came_for_the_slot = self.free_at.is_some_and(|slot| now >= slot);
        let lost = if progress {
            0
        } else if came_for_the_slot {
            self.lost.saturating_add(1)
        } else {
            // A claim before the slot (a wake-up, the poll): it could not have had the slot.
            self.lost
        };
        SlotWait { free_at: Some(next), lost }
    }

    /// When to claim again for the slot: at the slot itself, or, after slots lost in a row, a jittered
    /// backoff of at most `cap` later. `None`: no slot to wait for.
    #[must_use]
    pub fn claim_at(self, cap: Millis, jitter: Jitter) -> Option<Timestamp> {
        let slot = self.free_at?;
        if self.lost == 0 {
            return Some(slot);
        }
        let backoff = RetryPolicy { max_attempts: u32::MAX, base: SLOT_BACKOFF_BASE, cap }.backoff(self.lost, jitter);
        Some(slot + backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_second_interval_defers_the_second_call_by_interval_plus_guard() {
        let interval = Millis(10_000);
        let guard = default_guard(interval);
        assert_eq!(guard, Millis(1_000));
        assert_eq!(decide_egress(None, interval, guard, Timestamp(0)), EgressDecision::Go);
        assert_eq!(
            decide_egress(Some(Timestamp(0)), interval, guard, Timestamp(9_999)),
            EgressDecision::DeferUntil(Timestamp(11_000))
        );
        assert_eq!(
            decide_egress(Some(Timestamp(0)), interval, guard, Timestamp(10_999)),
            EgressDecision::DeferUntil(Timestamp(11_000))
        );
        assert_eq!(decide_egress(Some(Timestamp(0)), interval, guard, Timestamp(11_000)), EgressDecision::Go);
        assert_eq!(decide_egress(Some(Timestamp(0)), Millis::ZERO, Millis::ZERO, Timestamp(0)), EgressDecision::Go);
    }

    #[test]
    fn a_clock_read_before_the_latest_reservation_waits() {
        let decision = decide_egress(Some(Timestamp(5_000)), Millis(300), Millis(30), Timestamp(4_000));
        assert_eq!(decision, EgressDecision::DeferUntil(Timestamp(5_330)));
    }

    #[test]
    fn default_guard_is_a_tenth_capped_at_one_second() {
        assert_eq!(default_guard(Millis::ZERO), Millis::ZERO);
        assert_eq!(default_guard(Millis(300)), Millis(30));
        assert_eq!(default_guard(Millis(60_000)), Millis(1_000));
    }

    #[test]
    fn slot_is_kept_only_within_the_guard() {
        let (interval, guard) = (Millis(300), Millis(30));
        assert!(slot_kept(interval, guard, Duration::from_millis(30)));
        assert!(!slot_kept(interval, guard, Duration::from_micros(30_001)));
        assert!(slot_kept(Millis::ZERO, Millis::ZERO, Duration::from_secs(60)), "no interval, no guard");
    }

    #[test]
    fn giving_back_keeps_the_knowledge_and_is_due_at_once() {
        let t = give_back(false, None, Timestamp(7));
        assert_eq!(
            (t.state, t.outcome_uncertain, t.needs_review, t.next_attempt_at),
            (TaskState::Pending, false, false, Some(Timestamp(7)))
        );
        let t = give_back(true, Some(Timestamp(3)), Timestamp(7));
        assert_eq!((t.state, t.outcome_uncertain, t.uncertain_since), (TaskState::Unknown, true, Some(Timestamp(3))));
        assert!(!t.is_parked());
    }

    #[test]
    fn a_claimer_that_got_its_slot_or_came_early_claims_at_the_next_slot() {
        let cap = Millis(1_000);
        // A claim that called and found the channel's next slot 25 ms on.
        let wait = SlotWait::default().after_claim(Timestamp(100), Some(Timestamp(125)), true);
        assert_eq!(wait, SlotWait { free_at: Some(Timestamp(125)), lost: 0 });
        assert_eq!(wait.claim_at(cap, Jitter::new(0.9)), Some(Timestamp(125)), "at the slot, no jitter");
        // The claim that follows at once (the last one was full) finds the same slot: not a loss.
        let wait = wait.after_claim(Timestamp(101), Some(Timestamp(125)), false);
        assert_eq!(wait.lost, 0);
        // At the slot it calls again: still no loss.
        let wait = wait.after_claim(Timestamp(125), Some(Timestamp(150)), true);
        assert_eq!(wait, SlotWait { free_at: Some(Timestamp(150)), lost: 0 });
        // Nothing left to wait for.
        assert_eq!(wait.after_claim(Timestamp(150), None, true), SlotWait::default());
        assert_eq!(SlotWait::default().claim_at(cap, Jitter::NONE), None);
    }

    #[test]
    fn a_claimer_that_keeps_losing_the_slot_backs_off_up_to_the_cap() {
        let cap = Millis(1_000);
        let mut wait = SlotWait::default().after_claim(Timestamp(0), Some(Timestamp(25)), false);
        let mut pauses = Vec::new();
        for n in 1..=10_i64 {
            // Each claim comes at (or after) the slot it waited for and finds it taken by someone else.
            let now = wait.claim_at(cap, Jitter::NONE).expect("a slot");
            wait = wait.after_claim(now, Some(now + Millis(25)), false);
            assert_eq!(wait.lost, u32::try_from(n).expect("small"));
            pauses.push(wait.claim_at(cap, Jitter::NONE).expect("a slot").since(now + Millis(25)).0);
        }
        assert_eq!(pauses, vec![5, 10, 20, 40, 80, 160, 320, 500, 500, 500], "equal jitter's lower half, capped");
        let late = wait.claim_at(cap, Jitter::new(0.999)).expect("a slot");
        assert!(late <= wait.free_at.expect("slot") + cap, "never more than the cap after the slot");
        // Winning a slot starts over.
        let wait = wait.after_claim(Timestamp(10_000), Some(Timestamp(10_025)), true);
        assert_eq!(wait.claim_at(cap, Jitter::new(0.5)), Some(Timestamp(10_025)));
    }

    #[test]
    fn a_slot_reported_as_already_free_is_not_a_spin() {
        // A store that keeps answering "free now" but never gives the slot: every claim counts as lost.
        let cap = Millis(1_000);
        let mut wait = SlotWait::default();
        let mut at = Timestamp(0);
        let mut claims = 0;
        while at < Timestamp(1_000) {
            wait = wait.after_claim(at, Some(at), false);
            at = wait.claim_at(cap, Jitter::NONE).expect("a slot").max(at);
            claims += 1;
        }
        assert!(claims <= 12, "{claims} claims in one second");
    }
}
