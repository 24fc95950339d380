//! The reference model: the task store as plain Rust data, every decision taken by the domain.
//!
//! It keeps the same rows the store keeps (a task row, its attempt rows, the notification, the
//! preference switch), writes them the way §2–§6 say they are written, and asks the domain's
//! `decide_claim`, `resolve_manually` and (through the driver) `finish` and `give_back` for every
//! decision, so it follows the domain wherever the domain goes. What it adds is only the bookkeeping:
//! fencing by token, the attempt numbering, `LEASE_EXPIRED`, `late_outcome`, and which row gets which
//! value.

use herald_domain::claim::{decide_claim, ClaimContext, ClaimDecision};
use herald_domain::egress::{decide_egress, deferral, EgressDecision};
use herald_domain::resolve::{resolve_manually_at, FinalState, NotParked};
use herald_domain::{
    Action, ChannelName, ChannelRules, Millis, Outcome, TaskId, TaskSnapshot, TaskState, Timestamp, Transition,
};
use herald_ports::store::FinishRecord;
use uuid::Uuid;

use super::ops::{Setup, CHANNELS, USERS};
use super::rows::{AttemptRow, NotificationRow, TaskRow};

/// `last_error` as the store writes it after a finish: the detail of what went wrong, nothing once sent.
fn finish_last_error(detail: &str, t: &Transition) -> Option<String> {
    match t.state {
        TaskState::Sent => None,
        _ => Some(t.reason.map_or_else(|| detail.to_owned(), |reason| format!("{detail}: {reason}"))),
    }
}

/// What a finish did, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The attempt held the task: the transition is stored.
    Applied,
    /// The attempt's outcome already is this observation: an earlier finish landed; nothing changes.
    Repeated,
    /// Superseded (or finished with another observation): recorded as the late outcome.
    Stale,
    /// No attempt row has this token.
    NoAttempt,
}

#[derive(Clone)]
pub struct Channel {
    pub name: ChannelName,
    pub rules: ChannelRules,
}

#[derive(Clone)]
pub struct Notification {
    pub user: usize,
    pub row: NotificationRow,
    pub tasks: Vec<usize>,
}

#[derive(Clone)]
pub struct Task {
    pub notification: usize,
    pub user: usize,
    pub channel: usize,
    pub row: TaskRow,
}

#[derive(Clone)]
pub struct Model {
    pub now: Timestamp,
    /// Each channel's latest egress reservation (the `channel_egress` row).
    pub last_call: [Option<Timestamp>; CHANNELS],
    pub channels: Vec<Channel>,
    /// `prefs[user][channel]`: no row, or the switch.
    pub prefs: [[Option<bool>; CHANNELS]; USERS as usize],
    pub notifications: Vec<Notification>,
    /// In creation order, which is id order.
    pub tasks: Vec<Task>,
}

pub fn user_name(user: usize) -> String {
    format!("u{user}")
}

impl Model {
    pub fn new(setup: &Setup, channels: Vec<Channel>, now: Timestamp) -> Model {
        Model {
            now,
            last_call: [None; CHANNELS],
            channels,
            prefs: setup.prefs,
            notifications: Vec::new(),
            tasks: Vec::new(),
        }
    }

    pub fn find_notification(&self, user: usize, event_key: &str) -> Option<usize> {
        self.notifications.iter().position(|n| n.user == user && n.row.event_key == event_key)
    }

    /// The channels a new notification of `user` gets a task on, in table order.
    pub fn channels_for_new(&self, user: usize) -> Vec<usize> {
        (0..self.channels.len()).filter(|&c| self.prefs[user][c] == Some(true)).collect()
    }

    pub fn budget(&self, channel: usize, max_attempts: Option<u32>) -> u32 {
        max_attempts.unwrap_or(self.channels[channel].rules.retry.max_attempts).max(1)
    }

    pub fn task_index(&self, id: TaskId) -> Option<usize> {
        self.tasks.iter().position(|t| t.row.id == id.0)
    }

    pub fn snapshot(&self, task: usize) -> TaskSnapshot {
        let row = &self.tasks[task].row;
        TaskSnapshot {
            state: row.state,
            outcome_uncertain: row.outcome_uncertain,
            needs_review: row.needs_review,
            next_attempt_at: row.next_attempt_at,
            lease_until: row.lease_until,
            attempt_count: row.attempt_count,
            uncertain_since: row.uncertain_since,
        }
    }

    /// Whether a call on `channel` may be reserved now (always, without an egress interval).
    pub fn slot_free(&self, channel: usize) -> bool {
        let rules = &self.channels[channel].rules;
        decide_egress(self.last_call[channel], rules.min_interval, rules.egress_guard, self.now) == EgressDecision::Go
    }

    /// Tasks a claim for `channels` at the current time may take: the domain's runnable predicate, on
    /// channels whose egress slot is free.
    pub fn claimable(&self, channels: &[usize]) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&i| {
                let channel = self.tasks[i].channel;
                channels.contains(&channel) && self.slot_free(channel) && self.snapshot(i).is_claimable(self.now)
            })
            .collect()
    }

    /// The egress decision for a call on `channel` now; a `Go` records the reservation.
    pub fn reserve(&mut self, channel: usize) -> EgressDecision {
        let rules = &self.channels[channel].rules;
        let decision = decide_egress(self.last_call[channel], rules.min_interval, rules.egress_guard, self.now);
        if decision == EgressDecision::Go && rules.min_interval > Millis::ZERO {
            self.last_call[channel] = Some(self.now);
        }
        decision
    }

    /// A call decision whose egress slot was taken: the holder of an expired lease is closed and the task
    /// written as `deferral` says; a task that was simply due is left untouched. Returns the number of
    /// holders marked `LEASE_EXPIRED`.
    pub fn apply_deferral(
        &mut self,
        task: usize,
        superseded: bool,
        uncertain: bool,
        uncertain_since: Option<Timestamp>,
        until: Timestamp,
    ) -> u32 {
        if !superseded {
            return 0;
        }
        let snapshot = self.snapshot(task);
        let expired = self.expire_holder(task);
        let transition = deferral(&snapshot, uncertain, uncertain_since, until);
        self.store_transition(task, &transition, transition.reason.map(str::to_owned));
        expired
    }

    /// What the claim transaction knows about one locked task.
    pub fn claim_context(&self, task: usize) -> ClaimContext {
        let t = &self.tasks[task];
        let channel = &self.channels[t.channel];
        ClaimContext {
            task: self.snapshot(task),
            budget: t.row.max_attempts,
            pref_enabled: self.prefs[t.user][t.channel] == Some(true),
            erased: false,
            expires_at: self.notifications[t.notification].row.expires_at,
            capability: channel.rules.contract.capability,
            policy: channel.rules.policy,
        }
    }

    pub fn decide(&self, task: usize) -> ClaimDecision {
        decide_claim(&self.claim_context(task), self.now)
    }

    /// Marks the superseded holder's unfinished attempt `LEASE_EXPIRED`; returns how many rows it marked.
    fn expire_holder(&mut self, task: usize) -> u32 {
        let now = self.now;
        let row = &mut self.tasks[task].row;
        let Some(token) = row.token else { return 0 };
        match row.attempts.iter_mut().find(|a| a.token == Some(token) && a.outcome.is_none()) {
            Some(attempt) => {
                attempt.outcome = Some(Outcome::LeaseExpired);
                attempt.finished_at = Some(now);
                1
            }
            None => 0,
        }
    }

    /// Writes an attempt row that called no channel.
    fn record_decision(&mut self, task: usize, outcome: Outcome, note: Option<String>) {
        let now = self.now;
        let row = &mut self.tasks[task].row;
        row.last_attempt_no += 1;
        row.attempts.push(AttemptRow {
            attempt_no: row.last_attempt_no,
            token: None,
            action: None,
            lease_owner: None,
            outcome: Some(outcome),
            late_outcome: None,
            detail: None,
            late_detail: None,
            note,
            started_at: now,
            finished_at: Some(now),
            late_at: None,
        });
    }

    /// Stores a transition that ends the current holding; `last_error` as given.
    fn store_transition(&mut self, task: usize, t: &Transition, last_error: Option<String>) {
        let row = &mut self.tasks[task].row;
        row.state = t.state;
        row.outcome_uncertain = t.outcome_uncertain;
        row.needs_review = t.needs_review;
        row.next_attempt_at = t.next_attempt_at;
        row.uncertain_since = t.uncertain_since;
        if let Some(id) = &t.provider_msg_id {
            row.provider_msg_id = Some(id.clone());
        }
        row.last_error = last_error;
        row.token = None;
        row.lease_owner = None;
        row.lease_until = None;
    }

    /// Applies a claim's settle decision; returns the number of holders marked `LEASE_EXPIRED`.
    pub fn apply_settle(
        &mut self,
        task: usize,
        superseded: bool,
        record: Option<Outcome>,
        transition: &Transition,
    ) -> u32 {
        let expired = if superseded { self.expire_holder(task) } else { 0 };
        if let Some(outcome) = record {
            self.record_decision(task, outcome, None);
        }
        self.store_transition(task, transition, transition.reason.map(str::to_owned));
        expired
    }

    /// Applies a claim's call decision with the token the store chose; returns the number of holders
    /// marked `LEASE_EXPIRED`.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_call(
        &mut self,
        task: usize,
        superseded: bool,
        action: Action,
        uncertain: bool,
        uncertain_since: Option<Timestamp>,
        worker: &str,
        lease: Millis,
        token: Uuid,
    ) -> u32 {
        let expired = if superseded { self.expire_holder(task) } else { 0 };
        let now = self.now;
        let row = &mut self.tasks[task].row;
        let lease_until = now + lease;
        row.state = TaskState::Sending;
        row.token = Some(token);
        row.lease_owner = Some(worker.to_owned());
        row.lease_until = Some(lease_until);
        row.next_attempt_at = Some(lease_until);
        row.attempt_count += 1;
        row.last_attempt_no += 1;
        row.outcome_uncertain = uncertain;
        row.uncertain_since = uncertain_since;
        row.needs_review = false;
        row.attempts.push(AttemptRow {
            attempt_no: row.last_attempt_no,
            token: Some(token),
            action: Some(action),
            lease_owner: Some(worker.to_owned()),
            outcome: None,
            late_outcome: None,
            detail: None,
            late_detail: None,
            note: None,
            started_at: now,
            finished_at: None,
            late_at: None,
        });
        expired
    }

    /// Whether the attempt `token` still holds the task (the fence of finish and give-back).
    pub fn holds(&self, task: usize, token: Uuid) -> bool {
        let row = &self.tasks[task].row;
        row.state == TaskState::Sending && row.token == Some(token)
    }

    /// The fenced finish: stores the transition while held; a repeat of the finish that already landed
    /// (the attempt's outcome is this observation) changes nothing; otherwise the observation is recorded
    /// as the attempt's late outcome.
    pub fn finish(&mut self, task: usize, record: &FinishRecord) -> Finished {
        let (token, outcome, detail, now) =
            (record.token.0, record.observation.outcome(), record.detail.as_str(), record.now);
        let held = self.holds(task, token);
        if held {
            self.store_transition(task, &record.transition, finish_last_error(detail, &record.transition));
        }
        let row = &mut self.tasks[task].row;
        let Some(attempt) = row.attempts.iter_mut().find(|a| a.token == Some(token)) else {
            return Finished::NoAttempt;
        };
        if held {
            attempt.outcome = Some(outcome);
            attempt.detail = Some(detail.to_owned());
            attempt.finished_at = Some(now);
            Finished::Applied
        } else if attempt.outcome == Some(outcome) {
            Finished::Repeated
        } else {
            attempt.late_outcome = Some(outcome);
            attempt.late_detail = Some(detail.to_owned());
            attempt.late_at = Some(now);
            Finished::Stale
        }
    }

    /// The fenced give-back: while held, the task returns to its claim-time knowledge, the attempt is
    /// undone and its row removed; otherwise nothing changes.
    pub fn give_back(&mut self, task: usize, token: Uuid, transition: &Transition) -> bool {
        if !self.holds(task, token) {
            return false;
        }
        let row = &mut self.tasks[task].row;
        row.state = transition.state;
        row.outcome_uncertain = transition.outcome_uncertain;
        row.needs_review = false;
        row.next_attempt_at = transition.next_attempt_at;
        row.uncertain_since = transition.uncertain_since;
        row.last_error = transition.reason.map(str::to_owned);
        row.token = None;
        row.lease_owner = None;
        row.lease_until = None;
        row.attempt_count -= 1;
        row.last_attempt_no -= 1;
        row.attempts.retain(|a| a.token != Some(token));
        true
    }

    /// The human exit.
    pub fn resolve(&mut self, task: usize, final_state: FinalState, note: &str) -> Result<TaskState, NotParked> {
        let transition = resolve_manually_at(&self.snapshot(task), final_state, self.now)?;
        self.record_decision(task, final_state.outcome(), Some(note.to_owned()));
        self.store_transition(task, &transition, transition.reason.map(str::to_owned));
        if final_state.fresh_budget() {
            self.tasks[task].row.attempt_count = 0;
        }
        Ok(transition.state)
    }

    /// Moments at which something becomes due, a lease ends or a notification expires, after `now`.
    pub fn future_moments(&self) -> Vec<Timestamp> {
        let mut moments: Vec<Timestamp> = self
            .tasks
            .iter()
            .flat_map(|t| [t.row.next_attempt_at, t.row.lease_until])
            .flatten()
            .chain(self.notifications.iter().map(|n| n.row.expires_at))
            .filter(|&m| m > self.now)
            .collect();
        moments.sort_unstable();
        moments.dedup();
        moments
    }
}
