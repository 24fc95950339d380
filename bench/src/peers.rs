//! The peers, each against its own database on the same server: graphile-worker and pg-boss (Node.js,
//! bench/node), apalis-postgres (bench/apalis) and pgbench running Herald's own statements
//! (bench/pgbench/claim_finish.sql). Every peer drains no-op jobs and reports `drained N jobs in S s`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use sqlx::PgPool;
use tokio::process::Command;

use crate::herald::{backlog, Drain};

/// Where the peers' programs are.
pub struct Peers {
    pub node_dir: PathBuf,
    pub apalis: PathBuf,
    pub pgbench_script: PathBuf,
    pub herald: PathBuf,
    pub workdir: PathBuf,
}

/// Runs a peer program; its last stdout line must be `drained N jobs in S s`.
async fn run_peer(name: &str, command: &mut Command, log: &Path) -> anyhow::Result<Drain> {
    let out = command
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .output()
        .await
        .with_context(|| format!("cannot run the {name} peer"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "the {name} peer failed ({}); see {}\n{stdout}", out.status, log.display());
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("drained "))
        .with_context(|| format!("the {name} peer printed no `drained` line; see {}\n{stdout}", log.display()))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let (tasks, secs): (u64, f64) = (words[1].parse()?, words[4].parse()?);
    Ok(Drain { tasks, secs, cpu: None })
}

impl Peers {
    pub async fn graphile(&self, url: &str, jobs: u64, expected: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new("node");
        c.current_dir(&self.node_dir).arg("graphile.mjs").arg(url).arg(jobs.to_string()).arg("32").arg("500");
        let d = run_peer("graphile-worker", &mut c, &self.workdir.join("graphile.log")).await?;
        ensure!(d.tasks == expected, "graphile-worker drained {} of {expected} jobs", d.tasks);
        Ok(d)
    }

    pub async fn pgboss(&self, url: &str, jobs: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new("node");
        c.current_dir(&self.node_dir).arg("pgboss.mjs").arg(url).arg(jobs.to_string()).arg("4").arg("500");
        let d = run_peer("pg-boss", &mut c, &self.workdir.join("pgboss.log")).await?;
        ensure!(d.tasks == jobs, "pg-boss drained {} of {jobs} jobs", d.tasks);
        Ok(d)
    }

    pub async fn apalis(&self, url: &str, jobs: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new(&self.apalis);
        c.arg(url).arg(jobs.to_string()).arg("100").arg("64");
        let d = run_peer("apalis-postgres", &mut c, &self.workdir.join("apalis.log")).await?;
        ensure!(d.tasks >= jobs, "apalis drained {} of {jobs} jobs", d.tasks);
        Ok(d)
    }

    /// pgbench with Herald's claim + finish over `tasks` PENDING tasks in Herald's schema (`herald migrate`
    /// into its own database), `clients` connections for `secs`: tasks finished per second.
    pub async fn pgbench(
        &self,
        url: &str,
        pool: &PgPool,
        tasks: u64,
        clients: usize,
        batch: usize,
        secs: u64,
    ) -> anyhow::Result<(Drain, bool)> {
        let status = Command::new(&self.herald)
            .arg("migrate")
            .env("HERALD__DATABASE__URL", url)
            .stdout(Stdio::null())
            .status()
            .await?;
        ensure!(status.success(), "herald migrate (pgbench's database) failed: {status}");
        backlog(pool, 0, tasks / 2, &["push", "sms"]).await?;
        sqlx::query("VACUUM ANALYZE").execute(pool).await?;
        let (started, before) = (Instant::now(), crate::cpu::snapshot());
        let out = Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-j", "2"])
            .arg("-c")
            .arg(clients.to_string())
            .arg("-T")
            .arg(secs.to_string())
            .arg("-D")
            .arg(format!("batch={batch}"))
            .arg("-f")
            .arg(&self.pgbench_script)
            .arg(url)
            .stdin(Stdio::null())
            .output()
            .await
            .context("cannot run pgbench")?;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = crate::cpu::split(&before, &crate::cpu::snapshot(), &std::collections::HashSet::new(), "pgbench");
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        std::fs::write(self.workdir.join("pgbench.log"), &text)?;
        ensure!(out.status.success(), "pgbench failed ({}):\n{text}", out.status);
        let sent: i64 =
            sqlx::query_scalar("SELECT count(*) FROM delivery_task WHERE state = 'SENT'").fetch_one(pool).await?;
        let sent = u64::try_from(sent)?;
        // Ran dry: the backlog ended before the time did, and the rate counts the idle end.
        let dry = sent >= tasks;
        Ok((Drain { tasks: sent, secs: if dry { elapsed } else { secs as f64 }, cpu: Some(cpu) }, dry))
    }
}
