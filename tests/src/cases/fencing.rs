//! NC3, P1, P2: fencing by token, with real worker processes killed, stopped and continued.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use herald_domain::{finish, Jitter, Millis, Observation, Outcome, TaskId, TaskState};
use herald_ports::prelude::*;
use herald_ports::store::{ClaimRequest, FinishRecord, FinishResult};
use herald_standin::Script;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{codes, outcomes};
use crate::wait::try_wait_until;
use crate::world::{ClockMode, World};
use crate::Evidence;

const HOUR: u64 = 3_600_000;

/// NC3 (negative control): finishing by id only, without the token, lets a superseded holder's late
/// TIMEOUT overwrite SENT with UNKNOWN. Before that, the fenced finish is shown refusing the same late
/// record both while the newer holder is still in flight (only the token tells the two apart) and
/// after it delivered.
pub async fn nc3() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("NC3", "negative control: finish by id only overwrites SENT");
    let world = World::new(ClockMode::Manual).await?;
    world.user("u1", &["push"]).await?;
    let created = world.submit("u1", "nc3", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    let claim = |worker: &str| ClaimRequest {
        worker: worker.into(),
        now: world.manual.read(),
        lease: Millis(10_000),
        limit: 1,
        channels: world.table(),
    };
    let old =
        world.store.claim(&claim("old-holder")).await?.claimed.pop().ok_or_else(|| anyhow::anyhow!("no claim"))?;
    // The old holder stalls past its lease; a newer holder takes over.
    world.advance(11_000);
    let new =
        world.store.claim(&claim("new-holder")).await?.claimed.pop().ok_or_else(|| anyhow::anyhow!("no claim"))?;
    let record = |holder: &herald_ports::ClaimedTask, observation: Observation| {
        let now = world.manual.read();
        FinishRecord {
            task_id: task,
            user_id: holder.user_id.clone(),
            token: holder.token,
            transition: finish(&holder.finish, &observation, now, Jitter::NONE),
            observation,
            detail: "test".into(),
            now,
        }
    };
    let late = record(&old, Observation::Timeout);
    ev.eq("late finish while the newer holder is in flight", FinishResult::Stale, world.store.finish(&late).await?);
    let (state, owner) = state_and_owner(&world, task).await?;
    ev.eq(
        "the newer holder still holds the task",
        ("SENDING".to_owned(), Some("new-holder".to_owned())),
        (state, owner),
    );
    let channel = world.registry.get(&"push".into()).ok_or_else(|| anyhow::anyhow!("push"))?;
    let sent = channel
        .send(&herald_ports::OutboundMessage {
            reference: new.reference.clone(),
            idempotency_key: herald_domain::IdempotencyKey::for_task(&new.reference),
            destination: secrecy::SecretString::from(World::destination("u1", "push")),
            text: "hello".into(),
            ttl_seconds: 60,
        })
        .await;
    let delivered = record(&new, sent.observation);
    ev.eq("the newer holder's finish", FinishResult::Applied, world.store.finish(&delivered).await?);
    ev.eq("delivered", TaskState::Sent, world.task(created.notification_id, task).await?.state);
    ev.eq("late finish after delivery", FinishResult::Stale, world.store.finish(&late).await?);
    let view = world.task(created.notification_id, task).await?;
    ev.eq("after the fenced finishes: state", TaskState::Sent, view.state);
    ev.eq("late observation kept", Some(Outcome::Timeout), view.attempts[0].late_outcome);
    herald_postgres::negative::finish_by_id_only(&world.store, &late).await?;
    let view = world.task(created.notification_id, task).await?;
    ev.eq("after finishing by id only: state (damage)", TaskState::Unknown, view.state);
    ev.eq("real sends", 1, world.push.sends_for(&world.reference(task).await?));
    Ok(ev)
}

/// The worker process binary (`HERALD_TEST_WORKER` overrides it).
fn worker_binary() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("HERALD_TEST_WORKER") {
        return Ok(PathBuf::from(path));
    }
    Ok(crate::bins::binary("herald-test-worker"))
}

struct WorkerProcess {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    pid: Pid,
}

impl WorkerProcess {
    async fn spawn(world: &World, id: &str, lease_ms: u64, timeout_ms: u64) -> anyhow::Result<WorkerProcess> {
        Self::spawn_with(world, id, lease_ms, timeout_ms, &[]).await
    }

    async fn spawn_with(
        world: &World,
        id: &str,
        lease_ms: u64,
        timeout_ms: u64,
        options: &[&str],
    ) -> anyhow::Result<WorkerProcess> {
        let mut child = Command::new(worker_binary()?)
            .args([
                world.db.url.as_str(),
                &world.push.base_url(),
                &world.sms.base_url(),
                id,
                &lease_ms.to_string(),
                &timeout_ms.to_string(),
            ])
            .args(options)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = Pid::from_raw(i32::try_from(child.id().unwrap_or(0))?);
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let (tx, mut lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = tokio::time::timeout(Duration::from_secs(20), lines.recv()).await?;
        anyhow::ensure!(ready.as_deref() == Some("READY"), "worker process did not start: {ready:?}");
        Ok(WorkerProcess { child, lines, pid })
    }

    fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        kill(self.pid, signal)?;
        Ok(())
    }

    /// Waits for the process to exit and returns what it printed.
    async fn output(mut self) -> anyhow::Result<Vec<String>> {
        tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await??;
        let mut out = Vec::new();
        while let Ok(Some(line)) = tokio::time::timeout(Duration::from_millis(500), self.lines.recv()).await {
            out.push(line);
        }
        Ok(out)
    }
}

/// Sleeps until the task's lease has ended by the database's clock.
async fn wait_for_lease_end(world: &World, task: TaskId) -> anyhow::Result<()> {
    let remaining_ms: i64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::bigint FROM delivery_task WHERE id = $1",
    )
    .bind(task.0)
    .fetch_one(world.store.pool())
    .await?;
    tokio::time::sleep(Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0) + 50)).await;
    Ok(())
}

async fn state_and_owner(world: &World, task: TaskId) -> anyhow::Result<(String, Option<String>)> {
    Ok(sqlx::query_as("SELECT state, lease_owner FROM delivery_task WHERE id = $1")
        .bind(task.0)
        .fetch_one(world.store.pool())
        .await?)
}

/// P1: a worker process is killed with SIGKILL mid-call after the channel accepted. The task stays
/// SENDING until the lease ends and nobody can claim it before; then a second process claims, records
/// LEASE_EXPIRED, resends with the same key -> ACCEPTED_REPLAY -> SENT.
pub async fn p1() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("P1", "worker process killed mid-call after acceptance");
    let world = World::new(ClockMode::Database).await?;
    world.user("u1", &["push"]).await?;
    let created = world.submit("u1", "p1", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    world.push.script(Script::HangAfterAccept);
    let first = WorkerProcess::spawn(&world, "process-1", 2_500, 1_000).await?;
    try_wait_until("the first acceptance", || async { world.push.sends() == 1 }).await?;
    first.signal(Signal::SIGKILL)?;
    let _ = first.output().await?;
    ev.eq(
        "after SIGKILL: task",
        ("SENDING".to_owned(), Some("process-1".to_owned())),
        state_and_owner(&world, task).await?,
    );
    let early = world.worker("in-test", 2_000).run_once().await?;
    ev.eq("claims before the lease ends", 0, early.len());
    wait_for_lease_end(&world, task).await?;
    let second = WorkerProcess::spawn(&world, "process-2", 2_500, 1_000).await?;
    let printed = second.output().await?;
    ev.that(
        "second process reported",
        printed.iter().any(|l| l.starts_with("REPORT Sent")),
        "REPORT Sent(..)",
        &printed,
    );
    let view = world.task(created.notification_id, task).await?;
    ev.eq("attempts", codes(&["LEASE_EXPIRED", "ACCEPTED_REPLAY"]), outcomes(&view));
    ev.eq("state", TaskState::Sent, view.state);
    ev.eq("requests at the stand-in", 2, world.push.requests_for(&world.reference(task).await?));
    ev.eq("real sends", 1, world.push.sends_for(&world.reference(task).await?));
    Ok(ev)
}

/// P2: a worker process is paused (SIGSTOP) after acceptance; its lease ends and another worker
/// finishes SENT; on SIGCONT the old holder's finish is refused (Stale), its observation lands in
/// `late_outcome`, and the task stays SENT.
pub async fn p2() -> anyhow::Result<Evidence> {
    let mut ev = Evidence::new("P2", "worker process paused past its lease, then continued");
    let world = World::new(ClockMode::Database).await?;
    world.user("u1", &["push"]).await?;
    let created = world.submit("u1", "p2", HOUR, None).await?;
    let task = created.tasks[0].task_id;
    world.push.script(Script::Delay(Duration::from_millis(400)));
    // Lease shorter than the client timeout: the overlap this case reproduces on purpose.
    let old = WorkerProcess::spawn_with(&world, "process-old", 1_500, 3_000, &["--allow-lease-overlap"]).await?;
    try_wait_until("the first acceptance", || async { world.push.sends() == 1 }).await?;
    old.signal(Signal::SIGSTOP)?;
    wait_for_lease_end(&world, task).await?;
    let took_over = world.worker("in-test", 60_000).run_once().await?;
    ev.eq("the new holder's cycle", format!("[Sent(TaskId({}))]", task.0), format!("{took_over:?}"));
    let before = world.task(created.notification_id, task).await?;
    ev.eq("while the old holder is stopped: state", TaskState::Sent, before.state);
    old.signal(Signal::SIGCONT)?;
    let printed = old.output().await?;
    ev.that(
        "old holder reported Stale",
        printed.iter().any(|l| l.starts_with("REPORT Stale")),
        "REPORT Stale(..)",
        &printed,
    );
    let view = world.task(created.notification_id, task).await?;
    ev.eq("state after the old holder's finish", TaskState::Sent, view.state);
    ev.eq("attempts", codes(&["LEASE_EXPIRED", "ACCEPTED_REPLAY"]), outcomes(&view));
    let late = view.attempts[0].late_outcome;
    ev.that(
        "old holder's observation kept as late_outcome",
        matches!(late, Some(Outcome::Accepted | Outcome::Timeout)),
        "Some(ACCEPTED) or Some(TIMEOUT)",
        late,
    );
    ev.eq("real sends", 1, world.push.sends_for(&world.reference(task).await?));
    Ok(ev)
}
