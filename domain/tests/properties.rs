//! Property tests over generated histories.
//!
//! A small simulated world drives the domain functions exactly as the store and worker do: claims
//! (with the preference switch and expiry read at claim), channel calls whose *real* effect is tracked
//! separately from what the worker observes, crashes and pauses that let a lease expire, late finishes
//! from superseded holders (fenced by token, as the finish statement is), egress deferrals, manual
//! resolutions and clock steps. Each property is checked after every step.
//!
//! Cases default to 256 per property; `PROPTEST_CASES` raises it.

use herald_domain::claim::{decide_claim, ClaimContext, ClaimDecision};
use herald_domain::contract::{Capability, Policy, QueryConsistency};
use herald_domain::digest::{decide_digest, DigestDecision, DigestRule, OpenDigest};
use herald_domain::egress::{decide_egress, default_guard, deferral, give_back, slot_kept, EgressDecision};
use herald_domain::finish::{finish, FinishContext};
use herald_domain::ids::TaskId;
use herald_domain::resolve::{resolve_manually, FinalState};
use herald_domain::retry::{Jitter, RetryPolicy};
use herald_domain::task::{Action, Observation, Outcome, TaskSnapshot, TaskState, Transition};
use herald_domain::time::{Millis, Timestamp};
use std::time::Duration;

use proptest::prelude::*;

const LEASE: Millis = Millis(1_000);
const CONSISTENCY_DELAY: Millis = Millis(3_000);

/// What the simulated channel does with one call.
#[derive(Clone, Copy, Debug)]
enum Behaviour {
    Accept,
    AcceptThenTimeout,
    AcceptThenBreak,
    TimeoutBeforeAccept,
    Refuse { retry_after: Option<u16> },
    Reject,
    QueryFails,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Tick(u16),
    /// A worker polls; with `when_due` it polls exactly when the task becomes runnable.
    Claim {
        pref_enabled: bool,
        egress_wait: Option<u16>,
        when_due: bool,
    },
    Reply(Behaviour),
    /// The holder stops (SIGKILL or SIGSTOP) after its request did or did not reach the channel.
    Vanish {
        accepted: bool,
    },
    /// A vanished holder comes back and tries to finish.
    Return(Behaviour),
    Resolve(bool),
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        3 => Just(Behaviour::Accept),
        2 => Just(Behaviour::AcceptThenTimeout),
        1 => Just(Behaviour::AcceptThenBreak),
        2 => Just(Behaviour::TimeoutBeforeAccept),
        2 => proptest::option::of(0u16..5).prop_map(|retry_after| Behaviour::Refuse { retry_after }),
        1 => Just(Behaviour::Reject),
        1 => Just(Behaviour::QueryFails),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u16..5_000).prop_map(Step::Tick),
        5 => (prop::bool::weighted(0.9), proptest::option::weighted(0.15, 1u16..3_000), prop::bool::weighted(0.7))
            .prop_map(|(pref_enabled, egress_wait, when_due)| Step::Claim { pref_enabled, egress_wait, when_due }),
        4 => behaviour().prop_map(Step::Reply),
        1 => any::<bool>().prop_map(|accepted| Step::Vanish { accepted }),
        1 => behaviour().prop_map(Step::Return),
        1 => any::<bool>().prop_map(Step::Resolve),
    ]
}

fn capability() -> impl Strategy<Value = Capability> {
    prop_oneof![
        Just(Capability::Idempotent),
        Just(Capability::Queryable { consistency: QueryConsistency::Immediate }),
        Just(Capability::Queryable { consistency: QueryConsistency::After(CONSISTENCY_DELAY) }),
        Just(Capability::Neither),
    ]
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    token: u32,
    ctx: FinishContext,
    /// The holder vanished or was superseded; its call is over, with `accepted` as its real effect.
    gone: bool,
    accepted: bool,
}

/// One task and the channel it is delivered on.
struct World {
    capability: Capability,
    budget: u32,
    expires_at: Timestamp,
    retry: RetryPolicy,
    now: Timestamp,
    task: TaskSnapshot,
    token: u32,
    next_token: u32,
    holder: Option<Holder>,
    vanished: Vec<Holder>,
    /// Real acceptances that created a new send, and when each became visible to queries.
    real_sends: Vec<Timestamp>,
    /// True once any attempt's outcome was uncertain (for P-neither).
    had_uncertain_attempt: bool,
    sends_after_uncertain: u32,
    manual_resolutions: u32,
    /// Every stored (cause, transition) pair, for the assertions.
    log: Vec<(Cause, Transition)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cause {
    Claim(Option<Outcome>),
    Finish(Outcome),
    Defer,
    Manual,
}

impl World {
    fn new(capability: Capability, budget: u32, ttl: Millis) -> Self {
        let now = Timestamp(1_000_000);
        World {
            capability,
            budget,
            expires_at: now + ttl,
            retry: RetryPolicy::new(budget, Millis(200), Millis(5_000)),
            now,
            task: TaskSnapshot::new_pending(now),
            token: 0,
            next_token: 1,
            holder: None,
            vanished: Vec::new(),
            real_sends: Vec::new(),
            had_uncertain_attempt: false,
            sends_after_uncertain: 0,
            manual_resolutions: 0,
            log: Vec::new(),
        }
    }

    fn store(&mut self, cause: Cause, transition: Transition) {
        self.task = transition.apply_to(&self.task);
        self.token = 0;
        self.log.push((cause, transition));
    }

    /// The sends a query made at `at` can see.
    fn visible_sends(&self, at: Timestamp) -> usize {
        let delay = match self.capability {
            Capability::Queryable { consistency: QueryConsistency::After(delay) } => delay,
            _ => Millis::ZERO,
        };
        self.real_sends.iter().filter(|&&sent| sent + delay <= at).count()
    }

    /// The real effect of a call reaching the channel, and what it would answer on success.
    fn deliver(&mut self, action: Action, started_at: Timestamp) -> Observation {
        match action {
            Action::Query => unreachable!("queries do not deliver"),
            Action::Send if self.capability == Capability::Idempotent && !self.real_sends.is_empty() => {
                Observation::AcceptedReplay { provider_msg_id: Some("m-1".into()) }
            }
            Action::Send => {
                self.real_sends.push(started_at);
                Observation::Accepted { provider_msg_id: Some(format!("m-{}", self.real_sends.len())) }
            }
        }
    }

    fn observe(&mut self, holder: &Holder, behaviour: Behaviour) -> Observation {
        if holder.ctx.action == Action::Query {
            return match behaviour {
                Behaviour::QueryFails | Behaviour::TimeoutBeforeAccept => Observation::QueryFailed,
                // The query may have been answered as early as its claim; its answer is written down now.
                _ if self.visible_sends(holder.ctx.attempt_started_at) > 0 => {
                    Observation::QueryFound { provider_msg_id: None }
                }
                _ => Observation::QueryNotFound,
            };
        }
        if holder.gone {
            // Its call ended before the lease did (lease > client timeout + finish, SPEC §4); it can
            // only report what it saw then. A process frozen between claim and send for longer than
            // its lease is the documented limit of §4 and is not generated here.
            if !holder.accepted {
                return Observation::Timeout;
            }
            return match behaviour {
                Behaviour::Accept => Observation::Accepted { provider_msg_id: None },
                _ => Observation::Timeout,
            };
        }
        match behaviour {
            // The call may have left (and been accepted) at any moment up to its answer; the latest is the
            // hardest case for a later query, so the acceptance is recorded at the answer.
            Behaviour::Accept => self.deliver(Action::Send, self.now),
            Behaviour::AcceptThenTimeout => {
                let _ = self.deliver(Action::Send, self.now);
                Observation::Timeout
            }
            Behaviour::AcceptThenBreak => {
                let _ = self.deliver(Action::Send, self.now);
                Observation::IoError
            }
            Behaviour::TimeoutBeforeAccept | Behaviour::QueryFails => Observation::Timeout,
            Behaviour::Refuse { retry_after } => {
                Observation::RetryableReject { retry_after: retry_after.map(|s| Millis::from_secs(s.into())) }
            }
            Behaviour::Reject => Observation::Rejected,
        }
    }

    /// The fenced finish: applies only while the holder's token still holds the task.
    fn finish_as(&mut self, holder: Holder, behaviour: Behaviour, jitter: u64) {
        let observation = self.observe(&holder, behaviour);
        if matches!(observation, Observation::Timeout | Observation::IoError | Observation::QueryFailed) {
            self.had_uncertain_attempt = true;
        }
        if self.task.state == TaskState::Sending && self.token == holder.token {
            let t = finish(&holder.ctx, &observation, self.now, Jitter::from_bits(jitter));
            self.store(Cause::Finish(observation.outcome()), t);
        }
    }

    fn run(&mut self, step: Step, jitter: u64) {
        match step {
            Step::Tick(ms) => self.now = self.now + Millis(ms.into()),
            Step::Claim { pref_enabled, egress_wait, when_due } => {
                if when_due {
                    let due = match self.task.state {
                        TaskState::Sending => self.task.lease_until.map(|until| until + Millis(1)),
                        _ => self.task.next_attempt_at,
                    };
                    self.now = self.now.max(due.unwrap_or(self.now));
                }
                self.claim(pref_enabled, egress_wait, jitter);
            }
            Step::Reply(behaviour) => {
                if let Some(holder) = self.holder.take() {
                    self.finish_as(holder, behaviour, jitter);
                }
            }
            Step::Vanish { accepted } => self.vanish(accepted),
            Step::Return(behaviour) => {
                if let Some(holder) = self.vanished.pop() {
                    self.finish_as(holder, behaviour, jitter);
                }
            }
            Step::Resolve(sent) => {
                let final_state = if sent { FinalState::Sent } else { FinalState::Failed };
                let was_parked = self.task.is_parked();
                match resolve_manually(&self.task, final_state) {
                    Ok(t) => {
                        assert!(was_parked, "P-parked: resolution only from parked");
                        self.manual_resolutions += 1;
                        self.store(Cause::Manual, t);
                    }
                    Err(_) => assert!(!was_parked, "a parked task must be resolvable"),
                }
            }
        }
    }

    /// The current holder stops; its call did or did not reach the channel.
    fn vanish(&mut self, accepted: bool) {
        if let Some(mut holder) = self.holder.take() {
            holder.gone = true;
            if accepted && holder.ctx.action == Action::Send {
                // A holder may call until its lease ends (and no later, SPEC §4): the latest moment.
                let at = self.now.min(holder.ctx.attempt_started_at + LEASE);
                let _ = self.deliver(Action::Send, at);
                holder.accepted = true;
                self.had_uncertain_attempt = true;
            }
            self.vanished.push(holder);
        }
    }

    fn claim(&mut self, pref_enabled: bool, egress_wait: Option<u16>, jitter: u64) {
        let ctx = ClaimContext {
            task: self.task.clone(),
            budget: self.budget,
            pref_enabled,
            erased: false,
            expires_at: self.expires_at,
            capability: self.capability,
            policy: Policy::Safe,
        };
        // A holder still in flight when its lease expired has finished its call by now.
        let superseded_holder = |world: &mut World| world.vanish(jitter & 1 == 1);
        match decide_claim(&ctx, self.now) {
            ClaimDecision::Skip => {}
            ClaimDecision::Settle { superseded, record, transition } => {
                if superseded {
                    superseded_holder(self);
                }
                self.store(Cause::Claim(record), transition);
            }
            ClaimDecision::Call { action, uncertain, superseded, uncertain_since } => {
                if superseded {
                    superseded_holder(self);
                    self.had_uncertain_attempt = true;
                }
                if let Some(wait) = egress_wait {
                    let until = self.now + Millis(wait.into());
                    let t = deferral(&self.task, uncertain, uncertain_since, until);
                    self.store(Cause::Defer, t);
                    return;
                }
                if self.had_uncertain_attempt && action == Action::Send && self.capability == Capability::Neither {
                    self.sends_after_uncertain += 1;
                }
                self.task.state = TaskState::Sending;
                self.task.attempt_count += 1;
                self.task.lease_until = Some(self.now + LEASE);
                self.task.next_attempt_at = None;
                self.token = self.next_token;
                self.next_token += 1;
                self.holder = Some(Holder {
                    token: self.token,
                    ctx: FinishContext {
                        action,
                        prior_uncertain: uncertain,
                        uncertain_since,
                        attempt_started_at: self.now,
                        expires_at: self.expires_at,
                        attempts_used: self.task.attempt_count,
                        budget: self.budget,
                        capability: self.capability,
                        retry: self.retry,
                    },
                    gone: false,
                    accepted: false,
                });
            }
        }
    }
}

fn history() -> impl Strategy<Value = (Capability, u32, u32, Vec<(Step, u64)>)> {
    (capability(), 1u32..6, 500u32..30_000, prop::collection::vec((step(), any::<u64>()), 1..80))
}

/// Runs a history, calling `check(world, task before the step, transition stored by the step)`.
fn simulate(
    capability: Capability,
    budget: u32,
    ttl: u32,
    steps: &[(Step, u64)],
    mut check: impl FnMut(&World, &TaskSnapshot, Option<&(Cause, Transition)>),
) -> World {
    let mut world = World::new(capability, budget, Millis(ttl.into()));
    for &(step, jitter) in steps {
        let before = world.task.clone();
        let logged = world.log.len();
        world.run(step, jitter);
        check(&world, &before, world.log.get(logged));
    }
    world
}

proptest! {
    /// P-uncertain: a task whose history may contain an acceptance never reaches FAILED or SUPPRESSED
    /// automatically; only a human can write FAILED for it. Once a task is uncertain, only a believed
    /// QUERY_NOT_FOUND (or SENT, or a human) clears that — a refusal proves nothing about earlier attempts.
    #[test]
    fn p_uncertain_possible_acceptance_is_never_failed_automatically((cap, budget, ttl, steps) in history()) {
        simulate(cap, budget, ttl, &steps, |world, before, stored| {
            if let Some((cause, t)) = stored {
                let cleared = before.outcome_uncertain && !t.outcome_uncertain;
                if cleared && t.state != TaskState::Sent {
                    assert!(
                        matches!(cause, Cause::Finish(Outcome::QueryNotFound) | Cause::Manual),
                        "{cause:?} cleared the uncertainty"
                    );
                }
                if *cause != Cause::Manual && !world.real_sends.is_empty() {
                    assert!(
                        !matches!(t.state, TaskState::Failed | TaskState::Suppressed),
                        "{cause:?} wrote {:?} although the channel accepted {} time(s)", t.state, world.real_sends.len()
                    );
                }
            }
        });
    }

    /// P-sent: SENT only follows ACCEPTED, ACCEPTED_REPLAY, QUERY_FOUND or a manual resolution, and an
    /// automatic SENT is only ever written when the channel really accepted.
    #[test]
    fn p_sent_only_after_an_acceptance((cap, budget, ttl, steps) in history()) {
        simulate(cap, budget, ttl, &steps, |world, before, stored| {
            if before.state != TaskState::Sent && world.task.state == TaskState::Sent {
                let (cause, _) = stored.expect("a stored transition");
                match cause {
                    Cause::Finish(outcome) => {
                        assert!(outcome.is_acceptance(), "SENT after {outcome:?}");
                        assert!(!world.real_sends.is_empty(), "SENT but the channel never accepted");
                    }
                    Cause::Manual => {}
                    other => panic!("SENT written by {other:?}"),
                }
            }
        });
    }

    /// P-neither: a channel with neither key nor query gets no automatic SEND after an uncertain attempt.
    #[test]
    fn p_neither_no_automatic_send_after_uncertainty((budget, ttl, steps) in (1u32..6, 500u32..30_000, prop::collection::vec((step(), any::<u64>()), 1..80))) {
        let world = simulate(Capability::Neither, budget, ttl, &steps, |_, _, _| {});
        prop_assert_eq!(world.sends_after_uncertain, 0);
        prop_assert!(world.real_sends.len() <= 1);
    }

    /// P-once: under the safe policy no capability ever produces a second real send for one task —
    /// idempotent channels replay, queryable ones are queried first, the others are parked.
    #[test]
    fn p_once_safe_policy_never_sends_twice((cap, budget, ttl, steps) in history()) {
        let world = simulate(cap, budget, ttl, &steps, |_, _, _| {});
        prop_assert!(world.real_sends.len() <= 1, "{} real sends", world.real_sends.len());
    }

    /// P-parked: parked tasks are never claimable, whatever the preference, expiry or time; terminal
    /// states absorb; a manual resolution succeeds at most once and only from parked.
    #[test]
    fn p_parked_terminal_and_resolution_rules((cap, budget, ttl, steps) in history()) {
        let world = simulate(cap, budget, ttl, &steps, |world, before, _| {
            if before.state.is_terminal() {
                assert_eq!(world.task.state, before.state, "terminal state left");
            }
            if world.task.is_parked() {
                for pref_enabled in [true, false] {
                    for later in [Millis::ZERO, Millis(1_000_000_000)] {
                        let ctx = ClaimContext {
                            task: world.task.clone(),
                            budget: world.budget,
                            pref_enabled,
                            erased: false,
                            expires_at: world.expires_at,
                            capability: world.capability,
                            policy: Policy::Safe,
                        };
                        assert_eq!(decide_claim(&ctx, world.now + later), ClaimDecision::Skip);
                    }
                }
            }
        });
        prop_assert!(world.manual_resolutions <= 1);
    }

    /// P-budget: attempts never exceed the budget; deferrals spend none.
    #[test]
    fn p_budget_never_exceeded_and_deferrals_are_free((cap, budget, ttl, steps) in history()) {
        simulate(cap, budget, ttl, &steps, |world, before, stored| {
            assert!(world.task.attempt_count <= world.budget, "{} > {}", world.task.attempt_count, world.budget);
            if let Some((Cause::Defer, _)) = stored {
                assert_eq!(world.task.attempt_count, before.attempt_count, "a deferral spent an attempt");
            }
        });
    }

    /// P-digest: for any event sequence, instant prompts per (user, thread, channel) in any rolling window
    /// are at most the limit, and every event is either an instant prompt or counted in exactly one digest.
    #[test]
    fn p_digest_rate_and_conservation(limit in 1u32..5, window_s in 1u64..3_600, gaps in prop::collection::vec(0u64..600_000, 1..60)) {
        let rule = DigestRule { instant_per_window: limit, window: Millis::from_secs(window_s) };
        let mut now = Timestamp(0);
        let mut instants: Vec<Timestamp> = Vec::new();
        let mut digests: Vec<(OpenDigest, u32)> = Vec::new();
        for (n, gap) in gaps.iter().enumerate() {
            now = now + Millis(*gap);
            let open = digests.last().map(|(d, _)| *d).filter(|d| d.due_at > now);
            match decide_digest(rule, &instants, open, now) {
                DigestDecision::SendNow => instants.push(now),
                DigestDecision::Open { due_at } => {
                    prop_assert!(due_at > now, "a digest is due later");
                    digests.push((OpenDigest { task: TaskId(n as i64), due_at }, 1));
                }
                DigestDecision::Join { task } => {
                    let entry = digests.iter_mut().find(|(d, _)| d.task == task).expect("joined digest exists");
                    prop_assert!(entry.0.due_at > now, "joined an open digest");
                    entry.1 += 1;
                }
            }
        }
        for (i, &start) in instants.iter().enumerate() {
            let in_window = instants[i..].iter().filter(|&&t| t < start + rule.window).count();
            prop_assert!(in_window <= limit as usize, "{in_window} instant prompts within one window");
        }
        let counted: u32 = digests.iter().map(|(_, c)| c).sum();
        prop_assert_eq!(instants.len() + counted as usize, gaps.len());
    }

    /// P-egress (decision): for any schedule of workers wanting to call, two reservations on one channel
    /// are never closer than interval + guard; deferred calls happen later, none is lost.
    #[test]
    fn p_egress_calls_keep_the_interval(interval in 0u64..20_000, wants in prop::collection::vec(0i64..120_000, 1..40)) {
        let interval = Millis(interval);
        let guard = default_guard(interval);
        let mut queue: Vec<Timestamp> = wants.iter().map(|&t| Timestamp(t)).collect();
        let mut calls: Vec<Timestamp> = Vec::new();
        let mut last = None;
        let mut rounds = 0;
        while !queue.is_empty() {
            rounds += 1;
            prop_assert!(rounds < 10_000, "deferrals must converge");
            queue.sort();
            let now = queue.remove(0);
            match decide_egress(last, interval, guard, now) {
                EgressDecision::Go => {
                    calls.push(now);
                    last = Some(now);
                }
                EgressDecision::DeferUntil(until) => {
                    prop_assert!(until > now);
                    queue.push(until);
                }
            }
        }
        prop_assert_eq!(calls.len(), wants.len());
        for pair in calls.windows(2) {
            prop_assert!(pair[1].since(pair[0]) >= interval, "{:?} then {:?}", pair[0], pair[1]);
        }
    }

    /// P-egress (actual calls): workers read the clock, claim in any order (a later reader may lock the
    /// egress row first), and send after a variable delay; a holder later than the guard does not call
    /// and gives its attempt back. Then the *actual* call times are never closer than the interval, no
    /// call is lost, and a given-back attempt spends no budget.
    #[test]
    fn p_egress_actual_calls_keep_the_interval_despite_delays(
        interval in 1u64..20_000,
        guard_override in prop::option::of(1u64..2_000),
        wants in prop::collection::vec((0i64..120_000, 0u64..3_000, 0u64..3_000), 1..40),
    ) {
        let interval = Millis(interval);
        let guard = guard_override.map_or_else(|| default_guard(interval), Millis).max(Millis(1));
        // (commit time of the claim, the `now` it read, delay read→claim, delay claim→send, attempts spent)
        let mut claims: Vec<(Timestamp, Timestamp, u64, u64, u32)> =
            wants.iter().map(|&(t, to_claim, to_send)| (Timestamp(t) + Millis(to_claim), Timestamp(t), to_claim, to_send, 0)).collect();
        let mut calls: Vec<Timestamp> = Vec::new();
        let mut last = None;
        let mut rounds = 0;
        while !claims.is_empty() {
            rounds += 1;
            prop_assert!(rounds < 100_000, "deferrals and give-backs must converge");
            claims.sort_by_key(|c| c.0);
            let (_, now, to_claim, to_send, spent) = claims.remove(0);
            match decide_egress(last, interval, guard, now) {
                EgressDecision::Go => {
                    last = Some(now);
                    let delay = to_claim + to_send;
                    let sent_at = now + Millis(delay);
                    // The worker measures from just before reading `now` to just before sending.
                    if slot_kept(interval, guard, Duration::from_millis(delay)) {
                        calls.push(sent_at);
                        prop_assert_eq!(spent, 0, "a given-back attempt spent budget");
                    } else {
                        // Given back: due at once, read again later; slower processes eventually keep up.
                        let t = give_back(false, None, sent_at);
                        prop_assert_eq!(t.next_attempt_at, Some(sent_at));
                        claims.push((sent_at + Millis(to_claim / 2), sent_at, to_claim / 2, to_send / 2, spent));
                    }
                }
                EgressDecision::DeferUntil(until) => {
                    prop_assert!(until > now);
                    claims.push((until + Millis(to_claim), until, to_claim, to_send, spent));
                }
            }
        }
        prop_assert_eq!(calls.len(), wants.len());
        calls.sort();
        for pair in calls.windows(2) {
            prop_assert!(pair[1].since(pair[0]) >= interval, "actual calls {:?} then {:?}", pair[0], pair[1]);
        }
    }
}
