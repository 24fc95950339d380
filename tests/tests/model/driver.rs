//! Runs one operation on the real store and on the model, checks that the store's answer is one the
//! model allows, moves the model along, and compares every row.

use herald_channels::config::ChannelConfig;
use herald_domain::claim::ClaimDecision;
use herald_domain::egress::EgressDecision;
use herald_domain::resolve::FinalState;
use herald_domain::{
    finish, give_back, ChannelKind, ChannelName, EventKey, Millis, NotificationId, QueryConsistency, TaskId, TaskState,
    Timestamp, UserId,
};
use herald_ports::prelude::*;
use herald_ports::store::{
    ChannelTable, ClaimBatch, ClaimRequest, ClaimedTask, FinishRecord, FinishResult, GiveBack, NewNotification,
    ResolveError,
};
use herald_ports::PreferenceStore;
use herald_postgres::PgStore;
use herald_tests::world::T0;

use super::ops::{final_state, jitter, ClaimArgs, Obs, Op, ResolvePick, Setup, CHANNELS, USERS};
use super::reference::{user_name, Channel, Finished, Model, Notification, Task};
use super::rows::{at, diff, read_egress, read_notifications, read_tasks, NotificationRow, TaskRow};

type Step = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn store_err(what: &str) -> impl Fn(herald_ports::StoreError) -> String + '_ {
    move |e| format!("{what} failed: {:#}", anyhow::Error::from(e))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum HolderState {
    /// Claimed and not finished yet (possibly superseded meanwhile).
    Open,
    Finished,
    GivenBack,
}

#[derive(Clone)]
struct Holder {
    claimed: ClaimedTask,
    task: usize,
    state: HolderState,
    /// The finish sent last for this attempt, to send again.
    sent: Option<FinishRecord>,
}

pub struct Harness {
    store: PgStore,
    model: Model,
    holders: Vec<Holder>,
    observations: usize,
    pub stats: Stats,
}

/// How often each interesting situation came up, to show the cases are not vacuous.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub created: u32,
    pub duplicates: u32,
    pub calls: u32,
    pub settled: u32,
    pub parked_at_claim: u32,
    pub lease_expired: u32,
    pub applied: u32,
    pub stale: u32,
    pub repeated: u32,
    pub given_back: u32,
    pub resolved: u32,
    pub refused: u32,
    pub races_finish_first: u32,
    pub races_claim_first: u32,
    pub pairs_both_took: u32,
    pub deferred: u32,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        let fields = [
            (&mut self.created, o.created),
            (&mut self.duplicates, o.duplicates),
            (&mut self.calls, o.calls),
            (&mut self.settled, o.settled),
            (&mut self.parked_at_claim, o.parked_at_claim),
            (&mut self.lease_expired, o.lease_expired),
            (&mut self.applied, o.applied),
            (&mut self.stale, o.stale),
            (&mut self.repeated, o.repeated),
            (&mut self.given_back, o.given_back),
            (&mut self.resolved, o.resolved),
            (&mut self.refused, o.refused),
            (&mut self.races_finish_first, o.races_finish_first),
            (&mut self.races_claim_first, o.races_claim_first),
            (&mut self.pairs_both_took, o.pairs_both_took),
            (&mut self.deferred, o.deferred),
        ];
        for (mine, theirs) in fields {
            *mine += theirs;
        }
    }
}

/// The three channels of every case: one of each capability, no egress interval and no digest.
fn channels(setup: &Setup) -> Vec<Channel> {
    let kinds = [("push", ChannelKind::Webhook), ("sms", ChannelKind::Queryable), ("miao", ChannelKind::Miaotixing)];
    kinds
        .iter()
        .enumerate()
        .map(|(i, (name, kind))| {
            let mut cfg = ChannelConfig::new(*name, *kind, "http://127.0.0.1:9");
            cfg.timeout_ms = 300;
            cfg.max_attempts = setup.budgets[i];
            cfg.retry_base_ms = setup.retry_base_ms[i];
            cfg.retry_cap_ms = setup.retry_base_ms[i] * 8;
            cfg.min_interval_ms = Some(setup.intervals_ms[i].unwrap_or(0));
            if *kind == ChannelKind::Queryable {
                cfg.query_consistency = setup
                    .sms_consistency_ms
                    .map_or(QueryConsistency::Immediate, |ms| QueryConsistency::After(Millis(ms)));
            }
            Channel { name: ChannelName::from(*name), rules: cfg.rules() }
        })
        .collect()
}

fn destination(user: usize, channel: usize) -> Vec<u8> {
    format!("dest-u{user}-c{channel}").into_bytes()
}

/// Checks that `selected` is what one claim of `limit` rows may lock, oldest due first (ties by id),
/// from `candidates` (the runnable tasks, as the model has them before the claim). A task in `loose`
/// was changed by a concurrent transaction: the claim may have skipped it (`SKIP LOCKED`, or not in its
/// snapshot) or taken it in the place its old due time gave it (PostgreSQL sorts before it locks and
/// re-checks), so it is left out of the order check.
fn check_selection(
    model: &Model,
    what: &str,
    selected: &[usize],
    candidates: &[usize],
    limit: u8,
    loose: &[usize],
) -> Step {
    let due = |i: usize| model.tasks[i].row.next_attempt_at;
    // The claim query's order: oldest due first, ties by id.
    let rank = |i: usize| (due(i), model.tasks[i].row.id);
    let name = |set: &[usize]| -> String {
        let ids: Vec<String> =
            set.iter().map(|&i| format!("{}@{}", model.tasks[i].row.id, due(i).map_or("-".into(), at))).collect();
        format!("[{}]", ids.join(", "))
    };
    for &s in selected {
        ensure!(
            candidates.contains(&s),
            "{what} took task {} which the model does not consider runnable at {} (runnable: {})",
            model.tasks[s].row.id,
            at(model.now),
            name(candidates)
        );
    }
    let pool: Vec<usize> = candidates.iter().copied().filter(|c| selected.contains(c) || !loose.contains(c)).collect();
    let left: Vec<usize> = pool.iter().copied().filter(|c| !selected.contains(c)).collect();
    let expected = usize::from(limit).min(pool.len());
    let latest = selected.iter().filter(|s| !loose.contains(s)).map(|&s| rank(s)).max();
    let earliest_left = left.iter().map(|&l| rank(l)).min();
    ensure!(
        selected.len() == expected && (latest.is_none() || earliest_left.is_none() || latest < earliest_left),
        "{what} (limit {limit}) took {} but the runnable tasks in due order are {}",
        name(selected),
        name(&pool)
    );
    Ok(())
}

impl Harness {
    /// Empties the database and sets up the case's preferences.
    pub async fn start(store: PgStore, setup: &Setup) -> Result<Harness, String> {
        reset(&store).await.map_err(|e| format!("reset failed: {e:#}"))?;
        let model = Model::new(setup, channels(setup), T0);
        for user in 0..usize::from(USERS) {
            for channel in 0..CHANNELS {
                if let Some(enabled) = setup.prefs[user][channel] {
                    store
                        .put(
                            &UserId::from(user_name(user).as_str()),
                            &model.channels[channel].name,
                            enabled,
                            Some(destination(user, channel)),
                        )
                        .await
                        .map_err(store_err("put preference"))?;
                }
            }
        }
        Ok(Harness { store, model, holders: Vec::new(), observations: 0, stats: Stats::default() })
    }

    fn table(&self, channels: &[usize]) -> ChannelTable {
        ChannelTable(
            channels.iter().map(|&c| (self.model.channels[c].name.clone(), self.model.channels[c].rules)).collect(),
        )
    }

    fn request(&self, args: ClaimArgs) -> ClaimRequest {
        ClaimRequest {
            worker: format!("w{}", args.worker),
            now: self.model.now,
            lease: Millis(u64::from(args.lease_ms)),
            limit: u32::from(args.limit),
            channels: self.table(&args.channel_set()),
        }
    }

    fn pick_holder(&self, pick: u8, state: HolderState) -> Option<usize> {
        let open: Vec<usize> = (0..self.holders.len()).filter(|&i| self.holders[i].state == state).collect();
        (!open.is_empty()).then(|| open[usize::from(pick) % open.len()])
    }

    /// Runs one operation on both sides and checks the store's answer.
    pub async fn step(&mut self, op: &Op, step: usize) -> Step {
        match *op {
            Op::Create { user, event, ttl_ms, max_attempts } => {
                self.create(usize::from(user % USERS), event, ttl_ms, max_attempts).await
            }
            Op::Claim(args) => {
                let request = self.request(args);
                let batch = self.store.claim(&request).await.map_err(store_err("claim"))?;
                let selected = self.selected(&batch)?;
                let candidates = self.model.claimable(&args.channel_set());
                check_selection(&self.model, "the claim", &selected, &candidates, args.limit, &[])?;
                self.apply_batch(&request, &batch, &selected)
            }
            Op::ClaimPair(a, b) => {
                let (ra, rb) = (self.request(a), self.request(b));
                let (ba, bb) = tokio::join!(self.store.claim(&ra), self.store.claim(&rb));
                let (ba, bb) = (ba.map_err(store_err("claim A"))?, bb.map_err(store_err("claim B"))?);
                let (sa, sb) = (self.selected(&ba)?, self.selected(&bb)?);
                // A task either claim wrote (claimed or settled) the other must not have touched. A due
                // task deferred untouched on a rate-limited channel may be deferred by both.
                let (wa, wb) = (self.written(&ba), self.written(&bb));
                for s in sa.iter().filter(|s| wb.contains(s)).chain(sb.iter().filter(|s| wa.contains(s))) {
                    ensure!(false, "both concurrent claims took task {}", self.model.tasks[*s].row.id);
                }
                let ca: Vec<usize> =
                    self.model.claimable(&a.channel_set()).into_iter().filter(|c| !wb.contains(c)).collect();
                let cb: Vec<usize> =
                    self.model.claimable(&b.channel_set()).into_iter().filter(|c| !wa.contains(c)).collect();
                // A claim skips the rows the other one holds locked (it may defer them untouched), and one
                // that ran after the other had reserved a rate-limited channel's slot does not select that
                // channel's tasks at all.
                let mut la = self.slot_taken_by(&bb, &ca);
                la.extend(sb.iter().filter(|s| !wb.contains(s)));
                let mut lb = self.slot_taken_by(&ba, &cb);
                lb.extend(sa.iter().filter(|s| !wa.contains(s)));
                let ids = |set: &[usize]| -> Vec<i64> { set.iter().map(|&i| self.model.tasks[i].row.id).collect() };
                let (what_a, what_b) = (
                    format!("claim A (B took tasks {:?})", ids(&sb)),
                    format!("claim B (A took tasks {:?})", ids(&sa)),
                );
                check_selection(&self.model, &what_a, &sa, &ca, a.limit, &la)?;
                check_selection(&self.model, &what_b, &sb, &cb, b.limit, &lb)?;
                if !sa.is_empty() && !sb.is_empty() {
                    self.stats.pairs_both_took += 1;
                }
                // The egress rows are locked in channel order, so the two claims are equivalent to one
                // after the other; which one came first shows only in who got an egress slot.
                let (model, holders, stats) = (self.model.clone(), self.holders.clone(), self.stats);
                let Err(first) = self.apply_batch(&ra, &ba, &sa).and_then(|()| self.apply_batch(&rb, &bb, &sb)) else {
                    return Ok(());
                };
                (self.model, self.holders, self.stats) = (model, holders, stats);
                self.apply_batch(&rb, &bb, &sb).and_then(|()| self.apply_batch(&ra, &ba, &sa)).map_err(|second| {
                    format!("neither order explains the two claims:\n  A then B: {first}\n  B then A: {second}")
                })
            }
            Op::Finish { holder, obs, jitter: bits } => {
                let Some(h) = self.pick_holder(holder, HolderState::Open) else { return Ok(()) };
                let record = self.finish_record(h, obs, bits);
                let got = self.store.finish(&record).await.map_err(store_err("finish"))?;
                self.apply_finish(h, &record, got)
            }
            Op::FinishAgain { holder, obs, same } => {
                let Some(h) = self.pick_holder(holder, HolderState::Finished) else { return Ok(()) };
                let record = match (&self.holders[h].sent, same) {
                    (Some(sent), true) => sent.clone(),
                    _ => self.finish_record(h, obs, None),
                };
                let got = self.store.finish(&record).await.map_err(store_err("finish"))?;
                self.apply_finish(h, &record, got)
            }
            Op::Race { holder, obs, claim } => self.race(holder, obs, claim).await,
            Op::GiveBack { holder } => self.give_back(holder).await,
            Op::Tick { ms } => {
                self.model.now = self.model.now + Millis(u64::from(ms));
                Ok(())
            }
            Op::Jump { pick, offset } => {
                let moments = self.model.future_moments();
                if let Some(&moment) = moments.get(usize::from(pick) % moments.len().max(1)) {
                    let target = Timestamp(moment.as_millis() + i64::from(offset));
                    if target > self.model.now {
                        self.model.now = target;
                    }
                }
                Ok(())
            }
            Op::Resolve { task, answer, pick } => self.resolve(task, final_state(answer), pick, step).await,
            Op::SetPref { user, channel, enabled } => {
                let (user, channel) = (usize::from(user % USERS), usize::from(channel) % CHANNELS);
                self.store
                    .put(
                        &UserId::from(user_name(user).as_str()),
                        &self.model.channels[channel].name,
                        enabled,
                        Some(destination(user, channel)),
                    )
                    .await
                    .map_err(store_err("put preference"))?;
                self.model.prefs[user][channel] = Some(enabled);
                Ok(())
            }
        }
    }

    async fn create(&mut self, user: usize, event: u8, ttl_ms: u32, max_attempts: Option<u8>) -> Step {
        let now = self.model.now;
        let event_key = format!("e{event}");
        let new = NewNotification {
            user_id: UserId::from(user_name(user).as_str()),
            event_key: EventKey::from(event_key.as_str()),
            body: format!("event {event_key} for u{user} at {}", at(now)),
            ttl: Millis(u64::from(ttl_ms)),
            max_attempts: max_attempts.map(u32::from),
            thread_key: None,
            submitted_by: None,
        };
        let all: Vec<usize> = (0..CHANNELS).collect();
        let got = self.store.create(&new, &self.table(&all), now).await.map_err(store_err("create"))?;
        if let Some(n) = self.model.find_notification(user, &event_key) {
            let n = &self.model.notifications[n];
            ensure!(!got.created, "a duplicate (u{user}, {event_key}) was created again");
            ensure!(
                got.notification_id == NotificationId(n.row.id),
                "a duplicate answered notification {} instead of {}",
                got.notification_id,
                n.row.id
            );
            let expected: Vec<(i64, String, TaskState)> = n
                .tasks
                .iter()
                .map(|&t| {
                    let row = &self.model.tasks[t].row;
                    (row.id, row.reference.clone(), row.state)
                })
                .collect();
            let answered: Vec<(i64, String, TaskState)> =
                got.tasks.iter().map(|t| (t.task_id.0, t.reference.clone(), t.state)).collect();
            ensure!(answered == expected, "a duplicate answered tasks {answered:?}, the model has {expected:?}");
            self.stats.duplicates += 1;
            return Ok(());
        }
        ensure!(got.created, "a new (u{user}, {event_key}) was answered as a duplicate");
        self.stats.created += 1;
        let expected: Vec<&str> =
            self.model.channels_for_new(user).iter().map(|&c| self.model.channels[c].name.as_str()).collect();
        let answered: Vec<&str> = got.tasks.iter().map(|t| t.channel.as_str()).collect();
        ensure!(answered == expected, "create wrote tasks on {answered:?}, the enabled channels are {expected:?}");
        let notification = self.model.notifications.len();
        let mut tasks = Vec::new();
        for summary in &got.tasks {
            ensure!(summary.state == TaskState::Pending, "a new task is {}", summary.state);
            let channel = self.model.channels.iter().position(|c| c.name == summary.channel).unwrap_or(0);
            tasks.push(self.model.tasks.len());
            self.model.tasks.push(Task {
                notification,
                user,
                channel,
                row: TaskRow {
                    id: summary.task_id.0,
                    user: user_name(user),
                    notification_id: got.notification_id.0,
                    channel: summary.channel.as_str().to_owned(),
                    reference: summary.reference.clone(),
                    state: TaskState::Pending,
                    outcome_uncertain: false,
                    uncertain_since: None,
                    needs_review: false,
                    next_attempt_at: Some(now),
                    lease_until: None,
                    lease_owner: None,
                    token: None,
                    attempt_count: 0,
                    max_attempts: self.model.budget(channel, new.max_attempts),
                    last_attempt_no: 0,
                    provider_msg_id: None,
                    last_error: None,
                    digest_count: None,
                    attempts: Vec::new(),
                },
            });
        }
        self.model.notifications.push(Notification {
            user,
            tasks,
            row: NotificationRow {
                id: got.notification_id.0,
                user: user_name(user),
                event_key,
                body: new.body,
                expires_at: now + new.ttl,
                max_attempts: max_attempts.map(i32::from),
                inbox_items: 1,
            },
        });
        Ok(())
    }

    /// The model's indices of the tasks a claim batch wrote: claimed or settled.
    fn written(&self, batch: &ClaimBatch) -> Vec<usize> {
        let ids = batch.claimed.iter().map(|c| c.task_id).chain(batch.settled.iter().map(|s| s.task_id));
        ids.filter_map(|id| self.model.task_index(id)).collect()
    }

    /// The tasks among `candidates` on a rate-limited channel whose egress slot `batch` reserved.
    fn slot_taken_by(&self, batch: &ClaimBatch, candidates: &[usize]) -> Vec<usize> {
        let reserved: Vec<&ChannelName> = batch
            .claimed
            .iter()
            .map(|c| &c.channel)
            .filter(|name| self.model.channels.iter().any(|c| &&c.name == name && c.rules.min_interval > Millis::ZERO))
            .collect();
        candidates
            .iter()
            .copied()
            .filter(|&i| reserved.contains(&&self.model.channels[self.model.tasks[i].channel].name))
            .collect()
    }

    /// The model's indices of the tasks a claim batch claimed, settled or deferred.
    fn selected(&self, batch: &ClaimBatch) -> Result<Vec<usize>, String> {
        let ids = batch
            .claimed
            .iter()
            .map(|c| c.task_id)
            .chain(batch.settled.iter().map(|s| s.task_id))
            .chain(batch.deferred.iter().map(|d| d.task_id));
        let mut selected = Vec::new();
        for id in ids {
            let Some(i) = self.model.task_index(id) else { return Err(format!("a claim returned unknown task {id}")) };
            ensure!(!selected.contains(&i), "a claim returned task {id} twice");
            selected.push(i);
        }
        Ok(selected)
    }

    /// Asks the domain about every task the claim took, checks the store did the same, applies it. The
    /// rows are decided in the store's order — by channel name, then oldest due first — because on a
    /// rate-limited channel the first call takes the egress slot and the others are deferred.
    fn apply_batch(&mut self, request: &ClaimRequest, batch: &ClaimBatch, selected: &[usize]) -> Step {
        let mut expired = 0;
        let mut order = selected.to_vec();
        order.sort_by_key(|&i| {
            let t = &self.model.tasks[i];
            (self.model.channels[t.channel].name.clone(), t.row.next_attempt_at, t.row.id)
        });
        for i in order {
            let id = TaskId(self.model.tasks[i].row.id);
            let claimed = batch.claimed.iter().find(|c| c.task_id == id);
            let settled = batch.settled.iter().find(|s| s.task_id == id);
            let deferred = batch.deferred.iter().any(|d| d.task_id == id);
            match self.model.decide(i) {
                ClaimDecision::Skip => return Err(format!("the claim took task {id}, which the domain skips")),
                ClaimDecision::Call { action, uncertain, superseded, uncertain_since, .. } => {
                    let channel = self.model.tasks[i].channel;
                    if let EgressDecision::DeferUntil(until) = self.model.reserve(channel) {
                        ensure!(
                            deferred,
                            "task {id}: the egress slot of {} is taken until {}, but the claim did not defer it \
                             (claimed: {}, settled: {settled:?})",
                            self.model.channels[channel].name,
                            at(until),
                            claimed.is_some()
                        );
                        expired += self.model.apply_deferral(i, superseded, uncertain, uncertain_since, until);
                        self.stats.deferred += 1;
                        continue;
                    }
                    let Some(c) = claimed else {
                        return Err(format!(
                            "task {id}: the domain calls ({action}, uncertain {uncertain}), the claim {}",
                            if deferred { "deferred it".to_owned() } else { format!("settled it: {settled:?}") }
                        ));
                    };
                    self.check_claimed(i, c, request, action, uncertain, uncertain_since)?;
                    expired += self.model.apply_call(
                        i,
                        superseded,
                        action,
                        uncertain,
                        uncertain_since,
                        &request.worker,
                        request.lease,
                        c.token.0,
                    );
                    self.stats.calls += 1;
                    self.holders.push(Holder { claimed: c.clone(), task: i, state: HolderState::Open, sent: None });
                }
                ClaimDecision::Settle { superseded, record, transition, .. } => {
                    let Some(s) = settled else {
                        return Err(format!(
                            "task {id}: the domain settles it ({} {record:?}), the claim {}",
                            transition.state,
                            if deferred { "deferred it".to_owned() } else { format!("called: {claimed:?}") }
                        ));
                    };
                    let got = (s.outcome, s.state, s.parked, s.channel.as_str());
                    let channel = self.model.channels[self.model.tasks[i].channel].name.as_str();
                    let want = (record, transition.state, transition.is_parked(), channel);
                    ensure!(got == want, "task {id} settled as {got:?}, the domain says {want:?}");
                    expired += self.model.apply_settle(i, superseded, record, &transition);
                    self.stats.settled += 1;
                    self.stats.parked_at_claim += u32::from(transition.is_parked());
                }
            }
        }
        ensure!(
            batch.lease_expired.len() == expired as usize,
            "the claim reports {} expired leases, the model {expired}",
            batch.lease_expired.len()
        );
        self.stats.lease_expired += expired;
        Ok(())
    }

    fn check_claimed(
        &self,
        i: usize,
        c: &ClaimedTask,
        request: &ClaimRequest,
        action: herald_domain::Action,
        uncertain: bool,
        uncertain_since: Option<Timestamp>,
    ) -> Step {
        let task = &self.model.tasks[i];
        let n = &self.model.notifications[task.notification];
        let rules = &self.model.channels[task.channel].rules;
        let ctx = &c.finish;
        let mut wrong = Vec::new();
        let mut check = |name: &str, ok: bool, got: String, want: String| {
            if !ok {
                wrong.push(format!("{name}: store {got}, model {want}"));
            }
        };
        let id = task.row.id;
        check(
            "attempt_no",
            c.attempt_no == task.row.last_attempt_no + 1,
            c.attempt_no.to_string(),
            (task.row.last_attempt_no + 1).to_string(),
        );
        check("action", c.action == action, c.action.to_string(), action.to_string());
        check("finish.action", ctx.action == action, ctx.action.to_string(), action.to_string());
        check(
            "finish.prior_uncertain",
            ctx.prior_uncertain == uncertain,
            ctx.prior_uncertain.to_string(),
            uncertain.to_string(),
        );
        let show = |t: Option<Timestamp>| t.map_or("-".to_owned(), at);
        check(
            "finish.uncertain_since",
            ctx.uncertain_since == uncertain_since,
            show(ctx.uncertain_since),
            show(uncertain_since),
        );
        check("finish.expires_at", ctx.expires_at == n.row.expires_at, at(ctx.expires_at), at(n.row.expires_at));
        check(
            "finish.attempt_started_at",
            ctx.attempt_started_at == request.now,
            at(ctx.attempt_started_at),
            at(request.now),
        );
        let used = task.row.attempt_count + 1;
        check("finish.attempts_used", ctx.attempts_used == used, ctx.attempts_used.to_string(), used.to_string());
        check(
            "finish.budget",
            ctx.budget == task.row.max_attempts,
            ctx.budget.to_string(),
            task.row.max_attempts.to_string(),
        );
        check(
            "finish.capability",
            ctx.capability == rules.contract.capability,
            format!("{:?}", ctx.capability),
            format!("{:?}", rules.contract.capability),
        );
        check("finish.retry", ctx.retry == rules.retry, format!("{:?}", ctx.retry), format!("{:?}", rules.retry));
        check("notification_id", c.notification_id.0 == n.row.id, c.notification_id.to_string(), n.row.id.to_string());
        check("user_id", c.user_id.as_str() == task.row.user, c.user_id.to_string(), task.row.user.clone());
        check("channel", c.channel.as_str() == task.row.channel, c.channel.to_string(), task.row.channel.clone());
        check("reference", c.reference == task.row.reference, c.reference.clone(), task.row.reference.clone());
        check("body", c.body == n.row.body, c.body.clone(), n.row.body.clone());
        check("expires_at", c.expires_at == n.row.expires_at, at(c.expires_at), at(n.row.expires_at));
        let dest = destination(task.user, task.channel);
        check(
            "destination",
            c.destination.as_deref() == Some(dest.as_slice()),
            format!("{:?}", c.destination.as_ref().map(|d| String::from_utf8_lossy(d).into_owned())),
            String::from_utf8_lossy(&dest).into_owned(),
        );
        check("digest_count", c.digest_count.is_none(), format!("{:?}", c.digest_count), "None".into());
        ensure!(wrong.is_empty(), "the claimed task {id} differs:\n    {}", wrong.join("\n    "));
        Ok(())
    }

    fn finish_record(&mut self, h: usize, obs: Obs, bits: Option<u64>) -> FinishRecord {
        self.observations += 1;
        let claimed = &self.holders[h].claimed;
        let observation = obs.observation(self.observations);
        let now = self.model.now;
        let transition = finish(&claimed.finish, &observation, now, jitter(bits));
        FinishRecord {
            task_id: claimed.task_id,
            user_id: claimed.user_id.clone(),
            token: claimed.token,
            detail: format!("{} seen on attempt {}", observation.outcome(), claimed.attempt_no),
            observation,
            transition,
            now,
        }
    }

    fn apply_finish(&mut self, h: usize, record: &FinishRecord, got: FinishResult) -> Step {
        let task = self.holders[h].task;
        let held = self.model.finish(task, record);
        let want = match held {
            Finished::Applied | Finished::Repeated => FinishResult::Applied,
            Finished::Stale => FinishResult::Stale,
            Finished::NoAttempt => {
                return Err(format!("finish of task {}: the model has no such attempt", record.task_id))
            }
        };
        ensure!(
            got == want,
            "finish of task {} attempt #{} answered {got:?}, the model says {want:?} ({held:?})",
            record.task_id,
            self.holders[h].claimed.attempt_no
        );
        match held {
            Finished::Applied => self.stats.applied += 1,
            Finished::Repeated => self.stats.repeated += 1,
            _ => self.stats.stale += 1,
        }
        self.holders[h].state = HolderState::Finished;
        self.holders[h].sent = Some(record.clone());
        Ok(())
    }

    /// A finish and a claim at once. Whichever order the database chose, the result must be one of the
    /// two sequential orders — except that the claim may skip the task row the finish has locked.
    async fn race(&mut self, holder: u8, obs: Obs, args: ClaimArgs) -> Step {
        let Some(h) = self.pick_holder(holder, HolderState::Open) else { return Ok(()) };
        let record = self.finish_record(h, obs, None);
        let request = self.request(args);
        let (finished, batch) = tokio::join!(self.store.finish(&record), self.store.claim(&request));
        let finished = finished.map_err(store_err("finish"))?;
        let batch = batch.map_err(store_err("claim"))?;
        let task = self.holders[h].task;
        let selected = self.selected(&batch)?;
        let held_before = self.model.holds(task, record.token.0);
        match finished {
            FinishResult::Applied => {
                // The finish came first (or the claim did not touch the task).
                ensure!(held_before, "a finish by a token that no longer holds task {} was applied", record.task_id);
                self.stats.races_finish_first += 1;
                self.apply_finish(h, &record, finished)?;
                let candidates = self.model.claimable(&args.channel_set());
                check_selection(&self.model, "the racing claim", &selected, &candidates, args.limit, &[task])?;
                self.apply_batch(&request, &batch, &selected)
            }
            FinishResult::Stale => {
                // The claim came first: if the finish's token held the task, the claim superseded it.
                ensure!(
                    !held_before || selected.contains(&task),
                    "the finish of task {} was stale although its token held the task and the claim did not take it",
                    record.task_id
                );
                if held_before {
                    self.stats.races_claim_first += 1;
                }
                let candidates = self.model.claimable(&args.channel_set());
                check_selection(&self.model, "the racing claim", &selected, &candidates, args.limit, &[task])?;
                self.apply_batch(&request, &batch, &selected)?;
                self.apply_finish(h, &record, finished)
            }
        }
    }

    async fn give_back(&mut self, holder: u8) -> Step {
        let Some(h) = self.pick_holder(holder, HolderState::Open) else { return Ok(()) };
        let claimed = &self.holders[h].claimed;
        let now = self.model.now;
        let record = GiveBack {
            task_id: claimed.task_id,
            user_id: claimed.user_id.clone(),
            token: claimed.token,
            transition: give_back(claimed.finish.prior_uncertain, claimed.finish.uncertain_since, now),
            now,
        };
        let got = self.store.give_back(&record).await.map_err(store_err("give back"))?;
        let held = self.model.give_back(self.holders[h].task, record.token.0, &record.transition);
        let want = if held { FinishResult::Applied } else { FinishResult::Stale };
        ensure!(got == want, "give-back of task {} answered {got:?}, the model says {want:?}", record.task_id);
        self.stats.given_back += u32::from(held);
        self.holders[h].state = HolderState::GivenBack;
        Ok(())
    }

    async fn resolve(&mut self, pick: u8, final_state: FinalState, kind: ResolvePick, step: usize) -> Step {
        let of_kind = |i: usize| match kind {
            ResolvePick::Parked => self.model.snapshot(i).is_parked(),
            ResolvePick::ResolvedBefore => self.model.tasks[i].row.attempts.iter().any(|a| a.note.is_some()),
            ResolvePick::Any => true,
        };
        let mut pool: Vec<usize> = (0..self.model.tasks.len()).filter(|&i| of_kind(i)).collect();
        if pool.is_empty() {
            pool = (0..self.model.tasks.len()).collect();
        }
        let Some(&task) = pool.get(usize::from(pick) % pool.len().max(1)) else { return Ok(()) };
        let note = format!("checked by an operator at step {step}");
        let id = TaskId(self.model.tasks[task].row.id);
        let got = self
            .store
            .resolve_manually(
                id,
                final_state,
                &note,
                &herald_tests::decision_event(id, final_state, &note, self.model.now),
                self.model.now,
            )
            .await;
        let want = self.model.resolve(task, final_state, &note);
        match (got, want) {
            (Ok(resolved), Ok(state)) => {
                ensure!(
                    resolved.task_id == id && resolved.state == state,
                    "resolution of task {id} answered {resolved:?}, the model says {state}"
                );
                self.stats.resolved += 1;
            }
            (Err(ResolveError::NotParked { state: got }), Err(refused)) => {
                ensure!(
                    got == refused.state,
                    "resolution of task {id} refused as {got}, the model says {}",
                    refused.state
                );
                self.stats.refused += 1;
                self.assert_row_unlocked(id).await?;
            }
            (got, want) => {
                return Err(format!(
                    "resolution of task {id} as {final_state:?} answered {}, the model says {}",
                    got.map_or_else(|e| format!("error: {e}"), |r| format!("{r:?}")),
                    want.map_or_else(|e| format!("refused ({e})"), |s| format!("resolved to {s}"))
                ));
            }
        }
        Ok(())
    }

    /// A refused resolution holds no lock on its task afterwards: a claim right after it must be able
    /// to take the task (the store rolls its transaction back explicitly before answering).
    async fn assert_row_unlocked(&mut self, id: TaskId) -> Step {
        let free: Option<i64> = sqlx::query_scalar("SELECT id FROM delivery_task WHERE id = $1 FOR UPDATE SKIP LOCKED")
            .bind(id.0)
            .fetch_optional(self.store.pool())
            .await
            .map_err(|e| format!("probing the lock of task {id} failed: {e}"))?;
        ensure!(free.is_some(), "task {id} is still locked after its manual resolution was refused");
        Ok(())
    }

    /// Compares every row of the model with the store's.
    pub async fn compare(&self) -> Step {
        let pool = self.store.pool();
        let tasks = read_tasks(pool).await.map_err(|e| format!("reading tasks failed: {e:#}"))?;
        let notifications =
            read_notifications(pool).await.map_err(|e| format!("reading notifications failed: {e:#}"))?;
        let model_tasks: Vec<TaskRow> = self.model.tasks.iter().map(|t| t.row.clone()).collect();
        let model_notifications: Vec<NotificationRow> =
            self.model.notifications.iter().map(|n| n.row.clone()).collect();
        let mut differences = diff(&model_tasks, &tasks, &model_notifications, &notifications);
        let egress = read_egress(pool).await.map_err(|e| format!("reading channel_egress failed: {e:#}"))?;
        let mut model_egress: Vec<(String, Option<Timestamp>)> = (0..CHANNELS)
            .filter_map(|c| self.model.last_call[c].map(|t| (self.model.channels[c].name.as_str().to_owned(), Some(t))))
            .collect();
        model_egress.sort();
        if egress != model_egress {
            let show = |rows: &[(String, Option<Timestamp>)]| -> String {
                let rows: Vec<String> =
                    rows.iter().map(|(c, t)| format!("{c} {}", t.map_or_else(|| "-".to_owned(), at))).collect();
                rows.join(", ")
            };
            differences.push_str(&format!(
                "  egress reservations: model [{}], store [{}]\n",
                show(&model_egress),
                show(&egress)
            ));
        }
        // The task gauges' tally (migration 0010) against the exact count of these rows (the gauges' answer
        // itself is compared at the end of the case, `run_case`).
        let tally = herald_tests::tally::tally_differences(pool)
            .await
            .map_err(|e| format!("reading the task tally failed: {e:#}"))?;
        for line in tally {
            differences.push_str(&format!("  task tally: {line}\n"));
        }
        // The claim queue (migration 0012) against the tasks' schedule.
        let queue = herald_tests::tally::queue_differences(pool)
            .await
            .map_err(|e| format!("reading the claim queue failed: {e:#}"))?;
        for line in queue {
            differences.push_str(&format!("  claim queue: {line}\n"));
        }
        ensure!(differences.is_empty(), "rows differ (model vs store) at {}:\n{differences}", at(self.model.now));
        Ok(())
    }
}

/// Empties every table of the schema (the migrations stay applied), so a case starts from nothing — but
/// the audit trail, which refuses TRUNCATE (append-only) and which the model does not compare.
async fn reset(store: &PgStore) -> anyhow::Result<()> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE '\\_sqlx%' \
           AND tablename <> 'audit_event'",
    )
    .fetch_all(store.pool())
    .await?;
    sqlx::query(&format!("TRUNCATE {} RESTART IDENTITY", tables.join(", "))).execute(store.pool()).await?;
    Ok(())
}
