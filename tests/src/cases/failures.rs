//! F1, B1, B2: refusals, switched-off preferences and expiry.

use herald_domain::TaskState;
use herald_standin::Script;

use super::{codes, outcomes};
use crate::world::{ClockMode, World};
use crate::Evidence;

const HOUR: u64 = 3_600_000;
const LATER: u64 = 60_000;

/// F1: a 503 before acceptance is retried safely and then succeeds; a 400 fails at once.
pub async fn f1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("F1", "503 then success; 400 fails");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push"]).await?;
    let retried = world.submit("u1", "f1-503", HOUR, None).await?;
    let task = retried.tasks[0].task_id;
    world.push.script(Script::status(503));
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    let between = world.task(retried.notification_id, task).await?;
    ev.eq("after the 503: state", TaskState::Pending, between.state);
    ev.eq("after the 503: not uncertain", false, between.outcome_uncertain);
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(retried.notification_id, task).await?;
    ev.eq("503 case: attempts", codes(&["RETRYABLE_REJECT", "ACCEPTED"]), outcomes(&view));
    ev.eq("503 case: state", TaskState::Sent, view.state);
    ev.eq("503 case: requests", 2, world.push.requests_for(&world.reference(task).await?));
    ev.eq("503 case: real sends", 1, world.push.sends_for(&world.reference(task).await?));

    let rejected = world.submit("u1", "f1-400", HOUR, None).await?;
    let task = rejected.tasks[0].task_id;
    world.push.script(Script::status(400));
    worker.run_once().await?;
    let view = world.task(rejected.notification_id, task).await?;
    ev.eq("400 case: attempts", codes(&["REJECTED"]), outcomes(&view));
    ev.eq("400 case: state", TaskState::Failed, view.state);
    ev.eq("400 case: next_attempt_at", None, view.next_attempt_at);
    ev.eq("400 case: real sends", 0, world.push.sends_for(&world.reference(task).await?));
    world.advance(LATER);
    ev.eq("400 case: never retried", 0, worker.run_once().await?.len());
    Ok(ev)
}

/// B1: preference switched off before the claim -> SUPPRESSED, no call; expired before the claim ->
/// FAILED, no call.
pub async fn b1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("B1", "switched off or expired before the claim: no call");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push"]).await?;
    let off = world.submit("u1", "b1-off", HOUR, None).await?;
    world.switch("u1", "push", false).await?;
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    let view = world.task(off.notification_id, off.tasks[0].task_id).await?;
    ev.eq("switched off: state", TaskState::Suppressed, view.state);
    ev.eq("switched off: attempts", codes(&["PREF_DISABLED"]), outcomes(&view));
    ev.eq("switched off: attempt budget spent", 0, view.attempt_count);

    world.switch("u1", "push", true).await?;
    let expired = world.submit("u1", "b1-expired", 2_000, None).await?;
    world.advance(3_000);
    worker.run_once().await?;
    let view = world.task(expired.notification_id, expired.tasks[0].task_id).await?;
    ev.eq("expired: state", TaskState::Failed, view.state);
    ev.eq("expired: attempts", codes(&["TTL_EXPIRED"]), outcomes(&view));
    ev.eq("requests at the channel for both", 0, world.push.requests());
    let inbox = world.store_inbox_len("u1").await?;
    ev.eq("both still in the inbox", 2, inbox);
    Ok(ev)
}

/// B2: sms with a 2 s TTL; the first call times out after acceptance, the retry comes after expiry:
/// `[TIMEOUT, TTL_EXPIRED_UNCERTAIN]`, UNKNOWN, needs review, no further call, 1 send.
pub async fn b2() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("B2", "expired after an uncertain attempt: parked, never FAILED");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["sms"]).await?;
    let created = world.submit("u1", "b2", 2_000, None).await?;
    let task = created.tasks[0].task_id;
    world.sms.script(Script::Delay(std::time::Duration::from_millis(1_500)));
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    world.advance(3_000);
    worker.run_once().await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["TIMEOUT", "TTL_EXPIRED_UNCERTAIN"]), outcomes(&view));
    ev.eq("state", TaskState::Unknown, view.state);
    ev.eq("needs_review", true, view.needs_review);
    ev.eq("next_attempt_at", None, view.next_attempt_at);
    world.advance(LATER);
    ev.eq("no further cycle claims it", 0, worker.run_once().await?.len());
    ev.eq("real sends", 1, world.sms.sends_for(&world.reference(task).await?));
    ev.eq("queries (none after expiry)", 0, world.sms.queries());
    Ok(ev)
}

impl World {
    async fn store_inbox_len(&self, user: &str) -> anyhow::Result<usize> {
        use herald_ports::prelude::*;
        Ok(self.store.inbox(&user.into(), 100).await?.len())
    }
}
