//! The peers, each against its own database on the same server: graphile-worker and pg-boss (Node.js,
//! bench/node), apalis-postgres (bench/apalis) and pgbench running Herald's own statements
//! (made by src/pgbench.rs from the statements the store runs). Every peer drains no-op jobs, says `draining` when its clock starts
//! and reports `drained N jobs in S s`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{ensure, Context as _};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt as _, BufReader};
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

/// Runs a peer program: its stdout must say `draining` when its clock starts and end with `drained N
/// jobs in S s`. The CPU is measured from the first line to the program's end (its `subject` is its
/// command name), so its setup — the schema, the bulk insert of its jobs — is not counted.
async fn run_peer(name: &str, subject: &str, command: &mut Command, log: &Path) -> anyhow::Result<Drain> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run the {name} peer"))?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let (mut stdout, mut before) = (String::new(), None);
    while let Some(line) = lines.next_line().await? {
        if line == "draining" && before.is_none() {
            before = Some(crate::cpu::snapshot());
        }
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = child.wait().await?;
    let after = crate::cpu::snapshot();
    ensure!(status.success(), "the {name} peer failed ({status}); see {}\n{stdout}", log.display());
    let before = before.with_context(|| format!("the {name} peer printed no `draining` line\n{stdout}"))?;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("drained "))
        .with_context(|| format!("the {name} peer printed no `drained` line; see {}\n{stdout}", log.display()))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let (tasks, secs): (u64, f64) = (words[1].parse()?, words[4].parse()?);
    let cpu = crate::cpu::split(&before, &after, &std::collections::HashSet::new(), subject);
    Ok(Drain { tasks, secs, cpu: Some(cpu) })
}

impl Peers {
    pub async fn graphile(&self, url: &str, jobs: u64, expected: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new("node");
        c.current_dir(&self.node_dir).arg("graphile.mjs").arg(url).arg(jobs.to_string()).arg("32").arg("500");
        let d = run_peer("graphile-worker", "node", &mut c, &self.workdir.join("graphile.log")).await?;
        ensure!(d.tasks == expected, "graphile-worker drained {} of {expected} jobs", d.tasks);
        Ok(d)
    }

    pub async fn pgboss(&self, url: &str, jobs: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new("node");
        c.current_dir(&self.node_dir).arg("pgboss.mjs").arg(url).arg(jobs.to_string()).arg("4").arg("500");
        let d = run_peer("pg-boss", "node", &mut c, &self.workdir.join("pgboss.log")).await?;
        ensure!(d.tasks == jobs, "pg-boss drained {} of {jobs} jobs", d.tasks);
        Ok(d)
    }

    pub async fn apalis(&self, url: &str, jobs: u64) -> anyhow::Result<Drain> {
        let mut c = Command::new(&self.apalis);
        c.arg(url).arg(jobs.to_string()).arg("100").arg("64");
        let d = run_peer("apalis-postgres", "apalis-bench", &mut c, &self.workdir.join("apalis.log")).await?;
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
