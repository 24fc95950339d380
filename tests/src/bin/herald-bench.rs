//! Throughput benchmark: submits notifications and drains them with Herald's workers against a real
//! PostgreSQL and the stand-in channels, and prints the figures. Speed is measured here, never asserted
//! in tests.
//!
//! `scripts/bench.sh [NOTIFICATIONS] [WORKERS]` (defaults 2000 and 8); each notification has two
//! tasks (push and sms).

use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use herald_tests::{ClockMode, World};

const SUBMITTERS: usize = 16;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let notifications: usize = args.next().map_or(Ok(2_000), |a| a.parse())?;
    let workers: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let users = notifications.min(500);
    let world = Arc::new(World::new(ClockMode::Database).await?);
    for u in 0..users {
        world.user(&format!("user-{u}"), &["push", "sms"]).await?;
    }

    let started = Instant::now();
    let submitted = join_all((0..SUBMITTERS).map(|s| {
        let world = world.clone();
        tokio::spawn(async move {
            for n in (s..notifications).step_by(SUBMITTERS) {
                world.submit(&format!("user-{}", n % users), &format!("bench-{n}"), 3_600_000, None).await?;
            }
            anyhow::Ok(())
        })
    }))
    .await;
    for result in submitted {
        result??;
    }
    let create_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let drained = join_all((0..workers).map(|w| {
        let world = world.clone();
        tokio::spawn(async move { world.worker(&format!("bench-{w}"), 60_000).drain(usize::MAX).await })
    }))
    .await;
    let mut reports = 0;
    for result in drained {
        reports += result??.len();
    }
    let drain_secs = started.elapsed().as_secs_f64();
    let tasks = world.db.count("SELECT count(*) FROM delivery_task").await?;
    let sent = world.db.count("SELECT count(*) FROM delivery_task WHERE state = 'SENT'").await?;
    let real_sends = world.push.sends() + world.sms.sends();
    #[allow(clippy::cast_precision_loss)]
    let (n, t) = (notifications as f64, tasks as f64);
    println!("notifications {notifications}, tasks {tasks}, workers {workers} (batch 8), submitters {SUBMITTERS}");
    println!("create: {create_secs:.2} s, {:.0} notifications/s ({:.0}/min)", n / create_secs, n / create_secs * 60.0);
    println!("drain:  {drain_secs:.2} s, {:.0} tasks/s ({:.0}/min)", t / drain_secs, t / drain_secs * 60.0);
    println!("reports {reports}, SENT {sent}, real sends at the stand-ins {real_sends}");
    // Idle backends report their table statistics within 10 s; wait for them, then read how many task
    // updates were HOT (no index entry written).
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let updates = world.db.count("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'delivery_task'").await?;
    let hot = world.db.count("SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'delivery_task'").await?;
    println!("delivery_task updates {updates}, of which HOT {hot}");
    anyhow::ensure!(sent == tasks && i64::try_from(real_sends)? == tasks, "not every task was sent exactly once");
    Ok(())
}
