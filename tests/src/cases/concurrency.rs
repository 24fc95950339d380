//! N1, N2, C1, NC1: logical dedup, normal delivery, and the claim under concurrency.

use std::sync::Arc;

use futures::future::join_all;
use herald_domain::{Action, IdempotencyKey, Millis, TaskState};
use herald_ports::prelude::*;
use herald_ports::store::ClaimRequest;
use herald_ports::OutboundMessage;
use secrecy::SecretString;
use tokio::sync::Barrier;

use super::{codes, outcomes};
use crate::world::{ClockMode, World};
use crate::Evidence;

const HOUR: u64 = 3_600_000;

/// N1: concurrent `create` of the same (user, event_key) gives one notification row and exactly one
/// call answered `created = true`.
pub async fn n1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("N1", "concurrent create of one (user, event key)");
    let world = Arc::new(World::new(ClockMode::Manual).await?);
    world.user("u1", &["push", "sms"]).await?;
    let calls = 16;
    let barrier = Arc::new(Barrier::new(calls));
    let results = join_all((0..calls).map(|_| {
        let (world, barrier) = (world.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            world.submit("u1", "ord-1001-shipped", HOUR, None).await
        })
    }))
    .await;
    let created: Vec<_> = results.into_iter().map(|r| r.expect("task").expect("create")).collect();
    let rows = world.db.count("SELECT count(*) FROM notification").await?;
    ev.eq("notification rows", 1, rows);
    ev.eq("calls answered created=true", 1, created.iter().filter(|c| c.created).count());
    let first = created[0].notification_id;
    ev.eq("every call names the same notification", true, created.iter().all(|c| c.notification_id == first));
    ev.eq("inbox items", 1, world.db.count("SELECT count(*) FROM inbox_item").await?);
    ev.eq("tasks (one per enabled channel)", 2, world.db.count("SELECT count(*) FROM delivery_task").await?);
    ev.eq("duplicates see the tasks too", true, created.iter().all(|c| c.tasks.len() == 2));
    Ok(ev)
}

/// N2: normal delivery on both channels.
pub async fn n2() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("N2", "normal delivery on push and sms");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push", "sms"]).await?;
    let created = world.submit("u1", "ord-1002-shipped", HOUR, None).await?;
    let reports = world.worker("w1", 60_000).drain(10).await?;
    ev.eq("reports", 2, reports.len());
    for task in &created.tasks {
        let view = world.task(created.notification_id, task.task_id).await?;
        let name = task.channel.as_str();
        ev.eq(&format!("{name}: state"), TaskState::Sent, view.state);
        ev.eq(&format!("{name}: attempts"), codes(&["ACCEPTED"]), outcomes(&view));
        ev.eq(&format!("{name}: attempt_count"), 1, view.attempt_count);
        ev.that(
            &format!("{name}: provider message id stored"),
            view.provider_msg_id.is_some(),
            "some id",
            &view.provider_msg_id,
        );
        let stand_in = if name == "push" { &world.push } else { &world.sms };
        ev.eq(&format!("{name}: real sends"), 1, stand_in.sends_for(&view.reference));
        let expected = World::destination("u1", name);
        let got = stand_in.messages().first().map(|m| m.to.clone());
        ev.eq(&format!("{name}: decrypted destination reached the channel"), Some(expected), got);
    }
    let inbox = world.store.inbox(&"u1".into(), 10).await?;
    ev.eq("inbox items", 1, inbox.len());
    Ok(ev)
}

/// C1: 8 concurrent claimers on one task — exactly one wins; then 4 workers drain 20 tasks: 20 attempts,
/// 20 sends, every attempt_count = 1.
pub async fn c1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("C1", "claim under concurrency (FOR UPDATE SKIP LOCKED)");
    let world = Arc::new(World::new(ClockMode::Manual).await?);
    world.user("solo", &["push"]).await?;
    world.submit("solo", "one-task", HOUR, None).await?;
    let barrier = Arc::new(Barrier::new(8));
    let now = world.clock.now().await?;
    let claims = join_all((0..8).map(|i| {
        let (world, barrier) = (world.clone(), barrier.clone());
        tokio::spawn(async move {
            let request = ClaimRequest {
                worker: format!("claimer-{i}"),
                now,
                lease: Millis(60_000),
                limit: 1,
                channels: world.table(),
            };
            barrier.wait().await;
            world.store.claim(&request).await
        })
    }))
    .await;
    let winners: usize = claims.into_iter().map(|c| c.expect("task").expect("claim").claimed.len()).sum();
    ev.eq("claimers that won the single task", 1, winners);

    let world = Arc::new(World::new(ClockMode::Manual).await?);
    for u in 0..20 {
        let user = format!("user-{u}");
        world.user(&user, &["push"]).await?;
        world.submit(&user, "bulk", HOUR, None).await?;
    }
    let workers = join_all((0..4).map(|i| {
        let world = world.clone();
        tokio::spawn(async move { world.worker(&format!("w{i}"), 60_000).drain(100).await })
    }))
    .await;
    let reports: usize = workers.into_iter().map(|w| w.expect("task").expect("drain").len()).sum();
    ev.eq("reports across 4 workers", 20, reports);
    ev.eq("attempt rows", 20, world.db.count("SELECT count(*) FROM delivery_attempt").await?);
    ev.eq("real sends at the stand-in", 20, world.push.sends());
    ev.eq("requests at the stand-in", 20, world.push.requests());
    ev.eq(
        "tasks with attempt_count = 1",
        20,
        world.db.count("SELECT count(*) FROM delivery_task WHERE attempt_count = 1").await?,
    );
    ev.eq("tasks SENT", 20, world.db.count("SELECT count(*) FROM delivery_task WHERE state = 'SENT'").await?);
    Ok(ev)
}

/// NC1 (negative control): claiming without a lock — SELECT, then UPDATE by id — lets two claimers
/// win the same task, and a non-idempotent channel sends it twice.
pub async fn nc1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("NC1", "negative control: claim without lock gives two winners");
    let world = Arc::new(World::new(ClockMode::Manual).await?);
    world.user("u1", &["sms"]).await?;
    let created = world.submit("u1", "no-lock", HOUR, None).await?;
    let now = world.clock.now().await?;
    let barrier = Arc::new(Barrier::new(2));
    let claims = join_all((0..2).map(|i| {
        let (world, barrier) = (world.clone(), barrier.clone());
        tokio::spawn(async move {
            let request = ClaimRequest {
                worker: format!("racer-{i}"),
                now,
                lease: Millis(60_000),
                limit: 1,
                channels: world.table(),
            };
            let rows = herald_postgres::negative::select_without_lock(&world.store, &request).await?;
            // Both have read the task as runnable before either writes.
            barrier.wait().await;
            herald_postgres::negative::claim_selected(&world.store, &request, &rows).await
        })
    }))
    .await;
    let batches: Vec<_> = claims.into_iter().map(|c| c.expect("task").expect("claim")).collect();
    let winners: Vec<_> = batches.iter().flat_map(|b| b.claimed.iter()).collect();
    ev.eq("claimers that believe they hold the task (damage)", 2, winners.len());
    let channel = world.registry.get(&"sms".into()).expect("sms");
    for claimed in &winners {
        let message = OutboundMessage {
            reference: claimed.reference.clone(),
            idempotency_key: IdempotencyKey::for_task(&claimed.reference),
            destination: SecretString::from(World::destination("u1", "sms")),
            text: "hello".into(),
            ttl_seconds: 60,
        };
        assert_eq!(claimed.action, Action::Send);
        let _ = channel.send(&message).await;
    }
    let task = created.tasks[0].task_id;
    ev.eq("real sends of one task (duplicate)", 2, world.sms.sends_for(&world.reference(task).await?));
    ev.eq("attempt rows for one claim", 2, world.db.count("SELECT count(*) FROM delivery_attempt").await?);
    Ok(ev)
}
