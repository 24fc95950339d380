//! T1, T2, T3, NC2, B3: the call whose result never came back.

use std::sync::Arc;
use std::time::Duration;

use herald_channels::registry::HttpChannelRegistry;
use herald_domain::resolve::FinalState;
use herald_domain::{Policy, TaskState};
use herald_ports::prelude::*;
use herald_ports::store::ResolveError;
use herald_ports::Channel;
use herald_standin::Script;

use super::{actions, codes, outcomes};
use crate::world::{ClockMode, WithPolicy, World};
use crate::Evidence;

const HOUR: u64 = 3_600_000;
/// Longer than every backoff the reference channels schedule.
const LATER: u64 = 60_000;
/// A stand-in delay that outlasts the client timeout: accepted, but the answer comes too late.
fn accept_then_time_out() -> Script {
    Script::Delay(Duration::from_millis(1_500))
}

/// T1: push times out after the stand-in accepted; the retry carries the same key and is recognised:
/// `[TIMEOUT, ACCEPTED_REPLAY]`, 2 requests, 1 send.
pub async fn t1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("T1", "idempotent channel: timeout, then resend with the same key");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push"]).await?;
    let created = world.submit("u1", "t1", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    let reference = world.reference(task).await?;
    world.push.script(accept_then_time_out());
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    let after_first = world.task(created.notification_id, task).await?;
    ev.eq("after the timeout: state", TaskState::Unknown, after_first.state);
    ev.eq("after the timeout: uncertain", true, after_first.outcome_uncertain);
    ev.that(
        "after the timeout: retry scheduled",
        after_first.next_attempt_at.is_some(),
        "next_attempt_at set",
        after_first.next_attempt_at,
    );
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["TIMEOUT", "ACCEPTED_REPLAY"]), outcomes(&view));
    ev.eq("actions", codes(&["SEND", "SEND"]), actions(&view));
    ev.eq("state", TaskState::Sent, view.state);
    ev.eq("requests at the stand-in", 2, world.push.requests_for(&reference));
    ev.eq("real sends", 1, world.push.sends_for(&reference));
    let key = format!("ntf-{reference}");
    ev.eq("idempotency keys sent", vec![key.clone(), key], world.push.idempotency_keys());
    Ok(ev)
}

/// T2: sms times out after acceptance; the next action is a query: `[TIMEOUT, QUERY_FOUND]`, 1 send.
pub async fn t2() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("T2", "queryable channel: timeout, then query by reference");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["sms"]).await?;
    let created = world.submit("u1", "t2", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    world.sms.script(accept_then_time_out());
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["TIMEOUT", "QUERY_FOUND"]), outcomes(&view));
    ev.eq("actions", codes(&["SEND", "QUERY"]), actions(&view));
    ev.eq("state", TaskState::Sent, view.state);
    ev.eq("real sends", 1, world.sms.sends_for(&world.reference(task).await?));
    ev.eq("queries", 1, world.sms.queries_for(&world.reference(task).await?));
    Ok(ev)
}

/// T3: sms times out, two queries fail (503): `[TIMEOUT, QUERY_FAILED, QUERY_FAILED]`, UNKNOWN, needs
/// review, never picked again, 1 send; a second manual resolution changes nothing.
pub async fn t3() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("T3", "queryable channel: timeout, queries fail, parked for a human");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["sms"]).await?;
    let created = world.submit("u1", "t3", HOUR, Some(3)).await?;
    let task = created.tasks[0].task_id;
    world.sms.script_all([accept_then_time_out(), Script::QueryStatus(503), Script::QueryStatus(503)]);
    let worker = world.worker("w1", 60_000);
    for _ in 0..3 {
        worker.run_once().await?;
        world.advance(LATER);
    }
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["TIMEOUT", "QUERY_FAILED", "QUERY_FAILED"]), outcomes(&view));
    ev.eq("state", TaskState::Unknown, view.state);
    ev.eq("needs_review", true, view.needs_review);
    ev.eq("next_attempt_at", None, view.next_attempt_at);
    world.advance(24 * HOUR);
    let again = worker.run_once().await?;
    ev.eq("a day later, cycles claim nothing", 0, again.len());
    ev.eq("real sends", 1, world.sms.sends_for(&world.reference(task).await?));
    let parked = world.store.parked(100).await?;
    ev.eq("listed for review", vec![task], parked.iter().map(|t| t.task_id).collect::<Vec<_>>());
    let now = world.manual.read();
    let first = world
        .store
        .resolve_manually(
            task,
            FinalState::Sent,
            "user confirmed receipt",
            &crate::decision_event(task, FinalState::Sent, "user confirmed receipt", now),
            now,
        )
        .await;
    ev.eq("first resolution", Some(TaskState::Sent), first.ok().map(|r| r.state));
    let second = world
        .store
        .resolve_manually(
            task,
            FinalState::Failed,
            "second try",
            &crate::decision_event(task, FinalState::Failed, "second try", now),
            now,
        )
        .await;
    ev.that(
        "second resolution refused",
        matches!(second, Err(ResolveError::NotParked { state: TaskState::Sent })),
        "NotParked { state: SENT }",
        second.map(|r| r.state).map_err(|e| e.to_string()),
    );
    let view = world.task(created.notification_id, task).await?;
    ev.eq("after both: state", TaskState::Sent, view.state);
    ev.eq("after both: attempts", codes(&["TIMEOUT", "QUERY_FAILED", "QUERY_FAILED", "MANUAL_SENT"]), outcomes(&view));
    ev.eq("no longer listed for review", 0, world.store.parked(100).await?.len());
    Ok(ev)
}

/// NC2 (negative control): resending blindly on a non-idempotent channel — one logical notification,
/// two real sends.
pub async fn nc2() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("NC2", "negative control: blind resend on a non-idempotent channel");
    let mut world = World::new(ClockMode::Manual).await?;
    let sms = world.registry.get(&"sms".into()).expect("sms");
    let blind: Arc<dyn Channel> = Arc::new(WithPolicy { inner: sms, policy: Policy::Unsafe });
    world.set_registry(Arc::new(HttpChannelRegistry::from_channels([blind])?));
    world.user("u1", &["sms"]).await?;
    let created = world.submit("u1", "nc2", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    world.sms.script(accept_then_time_out());
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("logical notifications", 1, world.db.count("SELECT count(*) FROM notification").await?);
    ev.eq("attempts", codes(&["TIMEOUT", "ACCEPTED"]), outcomes(&view));
    ev.eq("actions (blind resend, no query)", codes(&["SEND", "SEND"]), actions(&view));
    ev.eq("real sends of one notification (damage)", 2, world.sms.sends_for(&world.reference(task).await?));
    Ok(ev)
}

/// B3: push times out (accepted), then a 503 with no budget left: UNKNOWN and parked, not FAILED.
pub async fn b3() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("B3", "a refusal after an uncertain attempt proves nothing about it");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push"]).await?;
    let created = world.submit("u1", "b3", HOUR, Some(2)).await?;
    let task = created.tasks[0].task_id;
    world.push.script_all([accept_then_time_out(), Script::status(503)]);
    let worker = world.worker("w1", 60_000);
    worker.run_once().await?;
    world.advance(LATER);
    worker.run_once().await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["TIMEOUT", "RETRYABLE_REJECT"]), outcomes(&view));
    ev.eq("state (not FAILED)", TaskState::Unknown, view.state);
    ev.eq("still uncertain", true, view.outcome_uncertain);
    ev.eq("needs_review", true, view.needs_review);
    ev.eq("next_attempt_at", None, view.next_attempt_at);
    ev.eq("real sends", 1, world.push.sends_for(&world.reference(task).await?));
    Ok(ev)
}
