//! The side-by-side benchmark (`scripts/bench.sh`): Herald end to end through its real binary (`herald
//! serve`, K `herald worker` processes, loopback stand-ins answering at once, `synchronous_commit` on),
//! and in the same run the peers draining no-op jobs, each against its own database on the same server:
//! graphile-worker (batched), pg-boss, apalis-postgres, and pgbench running Herald's own claim + finish
//! statements. Prints one table of figures and ratios; `--write` also writes docs/BENCHMARKS.md (and with
//! `--scaling` the measured part of docs/SCALING.md). Figures are printed, never asserted.
//!
//! ```text
//! herald-bench --herald PATH --apalis PATH [--quick] [--scaling] [--write] [--history TASKS] [--profile NAME]
//! herald-bench --account [NOTIFICATIONS [--setup SQL]]
//! herald-bench --pgbench-script
//! ```
//!
//! `--account` runs only the write account (src/account.rs): what one notification with one channel writes
//! in PostgreSQL at submit, claim and finish, through Herald's own store; best on a server of its own that
//! loads `pg_stat_statements`. `--pgbench-script` prints the pgbench script of Herald's SQL that the run
//! makes from the statements the store runs (src/pgbench.rs).

mod account;
mod cpu;
mod herald;
mod peers;
mod pgbench;
mod report;
mod status;
mod wal;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};
use nix::fcntl::{Flock, FlockArg};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::herald::{Drain, Herald, Sizing};
use crate::peers::Peers;
use crate::report::{Figures, Machine, Purge};

/// The batch of the pgbench script of Herald's SQL, as the drains' workers claim.
const PGBENCH_BATCH: u32 = 32;

/// The run's sizes.
#[derive(Clone, Debug)]
pub struct Plan {
    pub quick: bool,
    pub scaling: bool,
    pub write: bool,
    /// Herald's measurements only, no peers (to iterate on Herald; no ratios, never written to docs/).
    pub herald_only: bool,
    /// The cargo profile of the binaries (`release`; `debug` in CI: not representative).
    pub profile: String,
    /// Notifications per drain (two tasks each: push and sms).
    pub notifications: u64,
    /// Worker processes of the main drains.
    pub processes: usize,
    /// Finished tasks in the tables for the second drain.
    pub history: u64,
    /// The control of migration `0013`: Herald's references and attempt tokens minted random (version 4)
    /// again, as before it (`--herald-only` runs).
    pub random_keys: bool,
    /// Only the latency phase, at this many notifications per second (`--herald-only` runs).
    pub latency_at: Option<f64>,
    /// Only the subscriptions' cost: drains without and with a status subscription, alternated
    /// (`--herald-only` runs).
    pub status_events: bool,
    /// Only the submit phase (`--herald-only` runs).
    pub submit_only: bool,
    /// `VACUUM task_queue` before each of Herald's phases, standing in for the autovacuum of migration
    /// `0012` on a server that runs none; off (`--no-vacuum`, `--herald-only` runs) for the control.
    pub vacuum_queue: bool,
    pub submit_clients: usize,
    pub submit_secs: f64,
    pub latency_secs: f64,
    pub in_flight: u64,
    pub pgbench_tasks: u64,
    pub pgbench_secs: u64,
    pub pgbench_clients: usize,
    pub limited: u64,
    /// The command line, as given to scripts/bench.sh.
    pub command: String,
}

struct Options {
    plan: Plan,
    herald: PathBuf,
    apalis: PathBuf,
    root: PathBuf,
}

const USAGE: &str = "usage: herald-bench --herald PATH --apalis PATH [--quick] [--scaling] [--write] \
                     [--herald-only] [--history TASKS] [--random-keys] [--no-vacuum] [--latency-at RATE] [--submit-only] [--status-events] \
                     [--profile NAME] [--command TEXT]";

fn options() -> anyhow::Result<Options> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut quick, mut scaling, mut write, mut herald_only) = (false, false, false, false);
    let (mut herald, mut apalis, mut profile, mut command) = (None, None, "release".to_owned(), String::new());
    let (mut history, mut random_keys, mut latency_at, mut vacuum_queue) = (None, false, None, true);
    let (mut submit_only, mut status_events) = (false, false);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || rest.next().cloned().context(USAGE);
        match arg.as_str() {
            "--quick" => quick = true,
            "--scaling" => scaling = true,
            "--write" => write = true,
            "--herald-only" => herald_only = true,
            "--random-keys" => random_keys = true,
            "--no-vacuum" => vacuum_queue = false,
            "--submit-only" => submit_only = true,
            "--status-events" => status_events = true,
            "--herald" => herald = Some(PathBuf::from(value()?)),
            "--apalis" => apalis = Some(PathBuf::from(value()?)),
            "--profile" => profile = value()?,
            "--command" => command = value()?,
            "--latency-at" => {
                latency_at = Some(value()?.parse::<f64>().context("--latency-at takes notifications per second")?);
            }
            "--history" => history = Some(value()?.parse().context("--history takes a number of tasks")?),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let (Some(herald), Some(apalis)) = (herald, apalis) else { bail!(USAGE) };
    if herald_only && write {
        bail!("--herald-only measures no peer, so it has no ratios to write: drop --write");
    }
    if random_keys && !herald_only {
        bail!("--random-keys is a control for --herald-only runs: its figures are not Herald's");
    }
    if !vacuum_queue && !herald_only {
        bail!("--no-vacuum is a control for --herald-only runs: the figures of record vacuum the queue");
    }
    if (latency_at.is_some() || submit_only || status_events) && !herald_only {
        bail!("--latency-at and --submit-only measure one phase alone: they go with --herald-only");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace")?.to_path_buf();
    let mut plan = if quick {
        Plan {
            quick,
            scaling,
            write,
            herald_only,
            profile,
            notifications: 2_500,
            processes: 2,
            history: 100_000,
            random_keys,
            latency_at,
            submit_only,
            status_events,
            vacuum_queue,
            submit_clients: 16,
            submit_secs: 3.0,
            latency_secs: 3.0,
            in_flight: 1_000,
            pgbench_tasks: 60_000,
            pgbench_secs: 4,
            pgbench_clients: 4,
            limited: 500,
            command,
        }
    } else {
        Plan {
            quick,
            scaling,
            write,
            herald_only,
            profile,
            notifications: 20_000,
            processes: 2,
            history: 10_000_000,
            random_keys,
            latency_at,
            submit_only,
            status_events,
            vacuum_queue,
            submit_clients: 32,
            submit_secs: 15.0,
            latency_secs: 20.0,
            in_flight: 1_000,
            pgbench_tasks: 400_000,
            pgbench_secs: 20,
            pgbench_clients: 4,
            limited: 10_000,
            command,
        }
    };
    if let Some(history) = history {
        plan.history = history;
    }
    Ok(Options { plan, herald, apalis, root })
}

fn say(text: impl AsRef<str>) {
    println!("bench: {}", text.as_ref());
}

/// Counts as PostgreSQL's CPU only the server of `admin` (cpu.rs): the machine may run others.
async fn measure_server(admin: &PgPool) -> anyhow::Result<()> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(admin).await?;
    cpu::measure_server(u32::try_from(backend)?);
    Ok(())
}

/// A fresh database `name` on the server of `admin_url`; its URL and a pool on it.
async fn database(admin: &PgPool, admin_url: &str, name: &str) -> anyhow::Result<(String, PgPool)> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(admin).await?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(admin).await?;
    // The peers (node-postgres, pgbench) get the server's URL with only the database changed.
    let mut url = reqwest::Url::parse(admin_url)?;
    url.set_path(&format!("/{name}"));
    let url = url.to_string();
    let pool = PgPoolOptions::new().max_connections(4).connect(&url).await?;
    Ok((url, pool))
}

async fn drop_database(admin: &PgPool, name: &str) {
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(admin).await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--pgbench-script") {
        print!("{}", pgbench::script(PGBENCH_BATCH)?);
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("--account") {
        let notifications = match args.get(1) {
            Some(n) => n.parse().context("--account takes a number of notifications")?,
            None => 4_000,
        };
        // An experiment: SQL run after the migrations (`--account N --setup 'ALTER TABLE …'`).
        let setup = match (args.get(2).map(String::as_str), args.get(3)) {
            (Some("--setup"), Some(sql)) => Some(sql.clone()),
            (None, _) => None,
            _ => bail!("usage: herald-bench --account [NOTIFICATIONS [--setup SQL]]"),
        };
        let admin_url = std::env::var("DATABASE_URL").context("DATABASE_URL (the server to account on)")?;
        let admin = PgPoolOptions::new().max_connections(2).connect(&admin_url).await?;
        measure_server(&admin).await?;
        let report = account::run(&admin, &admin_url, notifications, setup.as_deref()).await?;
        println!("{report}");
        let workdir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("bench");
        std::fs::create_dir_all(&workdir)?;
        std::fs::write(workdir.join("ACCOUNT.md"), &report)?;
        return Ok(());
    }
    let Options { plan, herald: herald_bin, apalis, root } = options()?;
    let admin_url = std::env::var("DATABASE_URL").context("DATABASE_URL (scripts/bench.sh sets it)")?;
    let admin = PgPoolOptions::new().max_connections(2).connect(&admin_url).await?;
    measure_server(&admin).await?;
    let workdir = root.join("target").join("bench");
    std::fs::create_dir_all(&workdir)?;
    // Two runs at once would share this directory, the workers' configuration file in it, and the
    // server's CPUs: the second would wait for calls made to the first's stand-ins until its timeout.
    let _one_run = one_run_at_a_time(&workdir)?;
    let run_started = Instant::now();
    let machine = Machine::read(&admin).await?;
    say(format!(
        "{} profile{}; {}; PostgreSQL {}",
        plan.profile,
        if plan.quick { ", QUICK run (small sizes)" } else { "" },
        machine.summary(),
        machine.postgres
    ));
    if plan.profile != "release" {
        say("binaries of a non-release profile: the figures are NOT representative");
    }
    let mut figures = Figures::default();
    let tag = std::process::id();

    // ---------------------------------------------------------------- peers, each in its own database
    let pgbench_script = workdir.join("claim_finish.sql");
    std::fs::write(&pgbench_script, pgbench::script(PGBENCH_BATCH)?)?;
    let peers = Peers {
        node_dir: root.join("bench").join("node"),
        apalis,
        pgbench_script,
        herald: herald_bin.clone(),
        workdir: workdir.clone(),
    };
    let jobs = plan.notifications * 2;
    if !plan.herald_only {
        run_peers(&plan, &admin, &admin_url, &peers, jobs, tag, &mut figures).await?;
    }

    // ---------------------------------------------------------------- Herald, through the real binary
    let name = format!("bench_herald_{tag}");
    let (url, pool) = database(&admin, &admin_url, &name).await?;
    let mut herald = Herald::start(herald_bin, workdir.clone(), &url, pool, plan.vacuum_queue).await?;
    let outcome = run_herald(&plan, &mut herald, &mut figures).await;
    herald.stop_all(true).await;
    herald.pool.close().await;
    let Herald { standins, .. } = herald;
    standins.shutdown().await;
    drop_database(&admin, &name).await;
    outcome?;

    figures.wall_secs = run_started.elapsed().as_secs_f64();
    let table = report::table(&plan, &figures);
    println!("\n{table}");
    if plan.write {
        let docs = root.join("docs");
        report::write_benchmarks(&docs.join("BENCHMARKS.md"), &report::benchmarks_md(&plan, &machine, &figures))?;
        std::fs::write(docs.join("benchmarks.svg"), report::chart(&figures))?;
        say("wrote docs/BENCHMARKS.md and docs/benchmarks.svg");
        if plan.scaling {
            report::write_scaling(&docs.join("SCALING.md"), &plan, &machine, &figures)?;
            say("wrote the measured part of docs/SCALING.md");
        }
    } else {
        std::fs::write(workdir.join("BENCHMARKS.md"), report::benchmarks_md(&plan, &machine, &figures))?;
        std::fs::write(workdir.join("benchmarks.svg"), report::chart(&figures))?;
        say(format!("wrote {} (docs/ only with --write)", workdir.join("BENCHMARKS.md").display()));
    }
    say(format!("wall clock {:.0} s", figures.wall_secs));
    Ok(())
}

/// The peers, each in its own database on the same server.
async fn run_peers(
    plan: &Plan,
    admin: &PgPool,
    admin_url: &str,
    peers: &Peers,
    jobs: u64,
    tag: u32,
    figures: &mut Figures,
) -> anyhow::Result<()> {
    {
        let name = format!("bench_graphile_{tag}");
        let (url, _pool) = database(admin, admin_url, &name).await?;
        let d = peers.graphile(&url, jobs, jobs).await?;
        say(format!("graphile-worker 0.17.3: {} jobs in {:.2} s, {:.0} jobs/s", d.tasks, d.secs, d.rate()));
        figures.graphile = Some(d);
        drop_database(admin, &name).await;
    }
    {
        let name = format!("bench_pgboss_{tag}");
        let (url, _pool) = database(admin, admin_url, &name).await?;
        let d = peers.pgboss(&url, jobs).await?;
        say(format!("pg-boss 10.4.2: {} jobs in {:.2} s, {:.0} jobs/s", d.tasks, d.secs, d.rate()));
        figures.pgboss = Some(d);
        drop_database(admin, &name).await;
    }
    {
        let name = format!("bench_apalis_{tag}");
        let (url, _pool) = database(admin, admin_url, &name).await?;
        let d = peers.apalis(&url, jobs).await?;
        say(format!("apalis-postgres 1.0.0: {} jobs in {:.2} s, {:.0} jobs/s", d.tasks, d.secs, d.rate()));
        figures.apalis = Some(d);
        drop_database(admin, &name).await;
    }
    {
        let name = format!("bench_pgbench_{tag}");
        let (url, pool) = database(admin, admin_url, &name).await?;
        let (d, dry) = peers.pgbench(&url, &pool, plan.pgbench_tasks, plan.pgbench_clients, plan.pgbench_secs).await?;
        say(format!(
            "pgbench, Herald's claim + finish: {} tasks in {:.2} s, {:.0} tasks/s{}",
            d.tasks,
            d.secs,
            d.rate(),
            if dry { " (RAN DRY: the backlog ended first)" } else { "" }
        ));
        figures.pgbench = Some(d);
        pool.close().await;
        drop_database(admin, &name).await;
    }
    Ok(())
}

/// The latency phase at `rate` notifications per second, printed with where its time went.
async fn latency(plan: &Plan, herald: &mut Herald, rate: f64, sizing: Sizing) -> anyhow::Result<herald::Latency> {
    let l = herald.latency(rate, plan.latency_secs, sizing).await?;
    say(format!(
        "Herald latency submit → call at {:.0} notifications/s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; the API's \
         answer p50 {:.1} ms, p99 {:.1} ms ({} calls, {} submissions refused with 503/429 and tried again)",
        l.rate, l.p50, l.p99, l.max, l.answer_p50, l.answer_p99, l.calls, l.refused
    ));
    match l.parts {
        Some(p) => {
            let show = |what: &str, [p50, p99, tail]: [f64; 3]| {
                say(format!("  {what:<42} p50 {p50:6.1} ms, p99 {p99:6.1} ms, slowest 1 % of calls: {tail:6.1} ms"));
            };
            show("sent → the API's clock read", p.to_api);
            show("the API's clock read → its answer", p.to_answer);
            show("the API's clock read → the claim's", p.to_claim);
            show("the claim's clock read → the call", p.to_call);
        }
        None => say("  (the latency's parts: some rows were missing)"),
    }
    Ok(l)
}

/// Prints the last drain's WAL and hands it to the report.
fn report_wal(herald: &mut Herald, deliveries: u64, what: &str) -> Option<wal::Use> {
    let used = herald.take_wal()?;
    say(format!("{what}: {}", used.describe(deliveries, "delivery")));
    Some(used)
}

async fn run_herald(plan: &Plan, herald: &mut Herald, figures: &mut Figures) -> anyhow::Result<()> {
    let sizing = Sizing::for_processes(plan.processes);
    figures.sizing = Some(sizing);
    herald.serve(&[]).await?;
    if plan.random_keys {
        herald.random_keys().await?;
        say("keys: references and attempt tokens random (version 4), as before migration 0013");
    }
    herald.preferences().await?;
    herald.stop_all(false).await;
    if let Some(rate) = plan.latency_at {
        figures.latency = Some(latency(plan, herald, rate, sizing).await?);
        return Ok(());
    }
    if plan.submit_only {
        figures.submit = Some(submit(plan, herald, sizing).await?);
        return Ok(());
    }
    if plan.status_events {
        return status_events(plan, herald, sizing).await;
    }

    let before = herald.task_updates().await?;
    let d = herald.drain(plan.notifications, sizing).await?;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let after = herald.task_updates().await?;
    let updates = [0, 1, 2, 3].map(|i| after[i] - before[i]);
    figures.task_updates = Some(updates);
    say(format!(
        "updates during the drain: delivery_task {} ({} HOT), delivery_attempt {} ({} HOT)",
        updates[0], updates[1], updates[2], updates[3]
    ));
    say(format!(
        "Herald drain, empty tables, {}: {} tasks in {:.2} s, {:.0}/s",
        sizing.describe(),
        d.tasks,
        d.secs,
        d.rate()
    ));
    figures.drain = Some(d);
    figures.wal_drain = report_wal(herald, d.tasks, "empty-table drain");

    figures.submit = Some(submit(plan, herald, sizing).await?);
    run_rest(plan, herald, figures, sizing).await
}

/// The submit phase, printed.
async fn submit(plan: &Plan, herald: &mut Herald, sizing: Sizing) -> anyhow::Result<herald::Submit> {
    let submit = herald.submit(plan.submit_clients, plan.submit_secs, sizing).await?;
    let per = |secs: f64| secs * 1000.0 / submit.notifications.max(1) as f64;
    say(format!(
        "Herald submit through the API, {} clients: {:.0} notifications/s; CPU per submission PostgreSQL {:.3} ms, \
         herald serve {:.3} ms, harness {:.3} ms, other {:.3} ms; {}",
        plan.submit_clients,
        submit.rate(),
        per(submit.cpu.postgres),
        per(submit.cpu.subject),
        per(submit.cpu.harness),
        per(submit.cpu.other),
        submit.wal.describe(submit.notifications, "submission")
    ));
    Ok(submit)
}

/// Herald's phases after the submit.
async fn run_rest(plan: &Plan, herald: &mut Herald, figures: &mut Figures, sizing: Sizing) -> anyhow::Result<()> {
    let e2e = herald.end_to_end(plan.submit_clients, plan.submit_secs, sizing).await?;
    say(format!(
        "Herald end to end, {} clients submitting while the workers deliver: {e2e:.0} notifications/s",
        plan.submit_clients
    ));
    figures.end_to_end = Some(e2e);

    // Half the peak of the whole path, in notifications per second (two calls each).
    figures.latency = Some(latency(plan, herald, 0.5 * e2e, sizing).await?);

    if plan.scaling {
        for processes in [1, 2, 4, 8] {
            let s = Sizing::for_processes(processes);
            let d = herald.drain(plan.notifications / 2, s).await?;
            say(format!("scaling: {}: {:.0} tasks/s", s.describe(), d.rate()));
            figures.scaling.push((s, d));
        }
        for processes in [1, 4] {
            let s = Sizing::for_processes(processes);
            let d = herald.limited(plan.limited, s, std::time::Duration::from_secs(8)).await?;
            say(format!(
                "scaling: one channel at a 5 ms interval (+20 ms guard), {}: {:.0} calls/s",
                s.describe(),
                d.rate()
            ));
            figures.limited.push((s, d));
        }
    }

    if plan.history > 0 {
        let secs = herald.history(plan.history, &|line| say(format!("history: {line}"))).await?;
        say(format!("history: {} finished tasks written and vacuumed in {secs:.0} s", plan.history));
        figures.history_secs = Some(secs);
        let d = herald.drain(plan.notifications, sizing).await?;
        say(format!("Herald drain, {} finished tasks in the tables: {:.0}/s", plan.history, d.rate()));
        figures.drain_history = Some(d);
        figures.wal_history = report_wal(herald, d.tasks, "drain with history");
        figures.purge = Some(purge_drain(plan, herald, sizing, d).await?);
        if let Some(c) = d.cpu {
            let per = |secs: f64| secs * 1000.0 / d.tasks.max(1) as f64;
            say(format!(
                "drain with history: CPU per delivery PostgreSQL {:.3} ms, herald worker {:.3} ms, harness {:.3} ms, other {:.3} ms",
                per(c.postgres),
                per(c.subject),
                per(c.harness),
                per(c.other)
            ));
        }
    }

    let rss = herald.rss(plan.in_flight).await?;
    say(format!(
        "Herald worker at {} calls in flight: VmRSS {:.1} MiB, VmHWM {:.1} MiB",
        rss.in_flight,
        rss.rss_kib as f64 / 1024.0,
        rss.hwm_kib as f64 / 1024.0
    ));
    figures.rss = Some(rss);
    Ok(())
}

/// The drain while the workers purge the expired rows (issue 42): every finished row so far — the history
/// and the earlier phases' — is aged past a one-day window, and the same drain runs again with
/// `retention.finished_after = 1d` (interval 1 s, the default batch), so one worker process holds the
/// purge's lease and removes them in bounded batches while the others deliver. Compared with the drain
/// with history just before it (the same rows, not purged), in this run.
async fn purge_drain(plan: &Plan, herald: &mut Herald, sizing: Sizing, without: Drain) -> anyhow::Result<Purge> {
    let expired = herald.expire_everything().await?;
    let extra = [
        ("HERALD__RETENTION__FINISHED_AFTER".to_owned(), "1d".to_owned()),
        ("HERALD__RETENTION__INTERVAL".to_owned(), "1s".to_owned()),
    ];
    let d = herald.drain_with(plan.notifications, sizing, &extra).await?;
    let left = herald.stored_tasks().await? - i64::try_from(d.tasks)?;
    let purge = Purge { expired, removed: (expired - left).max(0), drain: d };
    say(format!(
        "Herald drain while purging {expired} expired tasks: {:.0}/s, {} removed meanwhile ({:.0}/s); ÷ the drain with history, not purging: {:.2}×",
        d.rate(),
        purge.removed,
        purge.removed as f64 / d.secs.max(0.001),
        d.rate() / without.rate()
    ));
    Ok(purge)
}

/// Holds an exclusive lock on `workdir/.lock` for the life of the run; fails at once when another run
/// holds it.
fn one_run_at_a_time(workdir: &Path) -> anyhow::Result<Flock<std::fs::File>> {
    let path = workdir.join(".lock");
    let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
        nix::errno::Errno::EWOULDBLOCK => {
            anyhow::anyhow!("another benchmark run is using {}: wait for it to end, or stop it", workdir.display())
        }
        other => anyhow::anyhow!("cannot lock {}: {other}", path.display()),
    })
}

/// Drains without and with a status subscription (every kind, to a receiver in this process that takes
/// every post), alternated twice, and the ratio of their rates (issue 46: with ≥ 0.9× without).
async fn status_events(plan: &Plan, herald: &mut Herald, sizing: Sizing) -> anyhow::Result<()> {
    let receiver = status::Receiver::start().await?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for round in 1..=2 {
        herald.status_subscription(None)?;
        let d = herald.drain(plan.notifications, sizing).await?;
        say(format!(
            "status events round {round}, no subscription: {} tasks in {:.2} s, {:.0}/s",
            d.tasks,
            d.secs,
            d.rate()
        ));
        off.push(d.rate());
        herald.status_subscription(Some(&receiver))?;
        let (written_before, _) = herald.status_events().await?;
        let d = herald.drain(plan.notifications, sizing).await?;
        let (written, delivered) = herald.status_events().await?;
        say(format!(
            "status events round {round}, one subscription: {} tasks in {:.2} s, {:.0}/s; {} events written, {} delivered \
             by the drain's end ({} posts at the receiver so far)",
            d.tasks,
            d.secs,
            d.rate(),
            written - written_before,
            delivered,
            receiver.posts()
        ));
        on.push(d.rate());
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    say(format!(
        "status events: drain with a subscription / without = {:.3} (means of {:?} and {:?} tasks/s)",
        mean(&on) / mean(&off),
        on.iter().map(|r| r.round()).collect::<Vec<_>>(),
        off.iter().map(|r| r.round()).collect::<Vec<_>>()
    ));
    herald.status_subscription(None)?;
    Ok(())
}
