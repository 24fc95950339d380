//! The run's output: one table of figures and ratios, an SVG chart, docs/BENCHMARKS.md and the measured
//! part of docs/SCALING.md.

use std::fmt::Write as _;
use std::path::Path;

use sqlx::PgPool;

use crate::herald::{Drain, Latency, Rss, Sizing};
use crate::wal;
use crate::Plan;

/// The machine and the database server.
pub struct Machine {
    pub cpus: usize,
    pub memory_gib: f64,
    pub cpu_model: String,
    pub kernel: String,
    pub postgres: String,
    pub settings: Vec<(String, String)>,
    pub date: String,
}

const SETTINGS: &[&str] = &[
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "wal_level",
    "max_connections",
    "work_mem",
    "maintenance_work_mem",
    "effective_cache_size",
    "max_wal_size",
    "checkpoint_timeout",
    "commit_delay",
    "autovacuum",
    "jit",
];

impl Machine {
    pub async fn read(admin: &PgPool) -> anyhow::Result<Machine> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse().ok())
            .unwrap_or(0.0);
        let postgres: String = sqlx::query_scalar("SELECT current_setting('server_version')").fetch_one(admin).await?;
        let settings: Vec<(String, String)> =
            sqlx::query_as("SELECT name, current_setting(name) FROM unnest($1::text[]) AS name")
                .bind(SETTINGS.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .fetch_all(admin)
                .await?;
        let date = std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        Ok(Machine {
            cpus: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            memory_gib: mem_kib / 1024.0 / 1024.0,
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
            postgres,
            settings,
            date,
        })
    }

    pub fn summary(&self) -> String {
        format!("{} CPUs ({}), {:.1} GiB memory", self.cpus, self.cpu_model, self.memory_gib)
    }
}

/// The purge's drain: tasks expired when it started, how many the purge removed while it ran.
#[derive(Clone, Copy, Debug)]
pub struct Purge {
    pub expired: i64,
    pub removed: i64,
    pub drain: Drain,
}

#[derive(Default)]
pub struct Figures {
    pub sizing: Option<Sizing>,
    pub drain: Option<Drain>,
    pub drain_history: Option<Drain>,
    pub history_secs: Option<f64>,
    /// The drain while the workers purge the expired rows, after the drain with history.
    pub purge: Option<Purge>,
    pub submit: Option<crate::herald::Submit>,
    /// Notifications per second through the whole path (submit and deliver at once).
    pub end_to_end: Option<f64>,
    /// Updates of `delivery_task` during the first drain, and how many were HOT.
    /// Updates of `delivery_task` during the first drain and how many were HOT, then `delivery_attempt`'s.
    pub task_updates: Option<[i64; 4]>,
    pub latency: Option<Latency>,
    pub rss: Option<Rss>,
    pub graphile: Option<Drain>,
    pub pgboss: Option<Drain>,
    pub apalis: Option<Drain>,
    pub pgbench: Option<Drain>,
    /// WAL written by the empty-table drain and by the drain with history.
    pub wal_drain: Option<wal::Use>,
    pub wal_history: Option<wal::Use>,
    pub scaling: Vec<(Sizing, Drain)>,
    pub limited: Vec<(Sizing, Drain)>,
    pub wall_secs: f64,
}

/// 12345.6 → "12,346".
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}×", a / b)
}

fn history_label(plan: &Plan) -> String {
    if plan.history >= 1_000_000 && plan.history % 1_000_000 == 0 {
        format!("{} M", plan.history / 1_000_000)
    } else {
        thousands(plan.history as f64)
    }
}

/// The one table: every figure, the ratios on the peers' own lines.
pub fn table(plan: &Plan, f: &Figures) -> String {
    let mut t = String::from("| Measurement | Figure | Ratio |\n| --- | ---: | --- |\n");
    let herald = f.drain.map(|d| d.rate());
    let sizing = f.sizing.map(|s| s.describe()).unwrap_or_default();
    if let Some(d) = f.drain {
        let _ = writeln!(
            t,
            "| **Herald drain**, empty tables: {} notifications × 2 channels, {sizing} | **{} deliveries/s** | — |",
            thousands(plan.notifications as f64),
            thousands(d.rate())
        );
    }
    if let (Some(d), Some(h)) = (f.drain_history, herald) {
        let _ = writeln!(
            t,
            "| Herald drain, {} finished tasks already in the tables | {} deliveries/s | {} ÷ empty: **{}** |",
            history_label(plan),
            thousands(d.rate()),
            history_label(plan),
            ratio(d.rate(), h)
        );
    }
    if let (Some(p), Some(h)) = (f.purge, f.drain_history) {
        let _ = writeln!(
            t,
            "| Herald drain while the workers purge {} expired tasks ({} removed during it) | {} deliveries/s | \
             ÷ not purging: **{}** |",
            thousands(p.expired as f64),
            thousands(p.removed as f64),
            thousands(p.drain.rate()),
            ratio(p.drain.rate(), h.rate())
        );
    }
    let peer = |t: &mut String, name: &str, what: &str, d: Option<Drain>, unit: &str| {
        if let Some(d) = d {
            let r = herald.map_or("—".into(), |h| format!("Herald ÷ {name}: **{}**", ratio(h, d.rate())));
            let _ = writeln!(t, "| {name} {what} | {} {unit}/s | {r} |", thousands(d.rate()));
        }
    };
    peer(
        &mut t,
        "graphile-worker",
        "0.17.3, batched (local queue 500, batched completions), concurrency 32",
        f.graphile,
        "jobs",
    );
    peer(&mut t, "pg-boss", "10.4.2, 4 `work` loops fetching 500 at a time", f.pgboss, "jobs");
    peer(&mut t, "apalis-postgres", "1.0.0, batch 100, concurrency 64", f.apalis, "jobs");
    peer(
        &mut t,
        "pgbench",
        &format!("running Herald's claim + finish ({} clients, batch 32)", plan.pgbench_clients),
        f.pgbench,
        "tasks",
    );
    let cpu = |t: &mut String, unit: &str, what: &str, d: Option<Drain>, subject: &str| {
        if let Some((d, c)) = d.and_then(|d| d.cpu.map(|c| (d, c))) {
            let per = |secs: f64| secs * 1000.0 / d.tasks.max(1) as f64;
            let _ = writeln!(
                t,
                "| CPU per {unit}, {what} ({:.1} CPU-s in {:.1} s) | PostgreSQL {:.3} ms, {subject} {:.3} ms, harness and stand-ins {:.3} ms, other processes {:.3} ms | — |",
                c.total(),
                d.secs,
                per(c.postgres),
                per(c.subject),
                per(c.harness),
                per(c.other)
            );
        }
    };
    cpu(&mut t, "task", "Herald's empty-table drain", f.drain, "`herald worker`");
    cpu(
        &mut t,
        "task",
        &format!("the drain with {} finished tasks", history_label(plan)),
        f.drain_history,
        "`herald worker`",
    );
    cpu(&mut t, "task", "pgbench of Herald's SQL", f.pgbench, "pgbench");
    cpu(&mut t, "job", "graphile-worker's drain", f.graphile, "node");
    cpu(&mut t, "job", "pg-boss's drain", f.pgboss, "node");
    cpu(&mut t, "job", "apalis-postgres's drain", f.apalis, "`apalis-bench`");
    let wal_row = |t: &mut String, what: &str, used: Option<&wal::Use>, d: Option<Drain>| {
        if let (Some(used), Some(d)) = (used, d) {
            let per = d.tasks.max(1) as f64;
            let fpi = used
                .fpi_bytes()
                .map_or(String::new(), |fpi| format!(", of which full-page images {}", thousands(fpi / per)));
            let most: Vec<String> =
                used.imaged.iter().take(2).map(|r| format!("`{}` {}", r.relation, thousands(r.bytes / per))).collect();
            let most = if most.is_empty() { String::new() } else { format!(" (most in {})", most.join(", ")) };
            let _ = writeln!(t, "| WAL per delivery, {what} | {} bytes{fpi}{most} | — |", thousands(used.bytes / per));
        }
    };
    wal_row(&mut t, "the empty-table drain", f.wal_drain.as_ref(), f.drain);
    wal_row(
        &mut t,
        &format!("the drain with {} finished tasks", history_label(plan)),
        f.wal_history.as_ref(),
        f.drain_history,
    );
    if let Some([task, task_hot, attempt, attempt_hot]) = f.task_updates {
        let _ = writeln!(
            t,
            "| Updates during the empty-table drain that were HOT (`n_tup_hot_upd`) | `delivery_task` {} of {}, `delivery_attempt` {} of {} | — |",
            thousands(task_hot as f64),
            thousands(task as f64),
            thousands(attempt_hot as f64),
            thousands(attempt as f64)
        );
    }
    if let Some(s) = &f.submit {
        let _ = writeln!(
            t,
            "| Herald submit through the HTTP API, {} concurrent clients (2 tasks each) | {} notifications/s | — |",
            plan.submit_clients,
            thousands(s.rate())
        );
        let per = |secs: f64| secs * 1000.0 / s.notifications.max(1) as f64;
        let _ = writeln!(
            t,
            "| CPU per submission through the API ({:.1} CPU-s in {:.1} s) | PostgreSQL {:.3} ms, `herald serve` {:.3} ms, harness {:.3} ms, other processes {:.3} ms | — |",
            s.cpu.total(),
            s.secs,
            per(s.cpu.postgres),
            per(s.cpu.subject),
            per(s.cpu.harness),
            per(s.cpu.other)
        );
        let n = s.notifications.max(1) as f64;
        let fpi = s
            .wal
            .fpi_bytes()
            .map_or(String::new(), |fpi| format!(", of which full-page images {}", thousands(fpi / n)));
        let _ = writeln!(t, "| WAL per submission (2 tasks) | {} bytes{fpi} | — |", thousands(s.wal.bytes / n));
    }
    if let Some(e) = f.end_to_end {
        let _ = writeln!(
            t,
            "| Herald end to end: {} clients submitting while the workers deliver, both on this machine | {} notifications/s delivered | — |",
            plan.submit_clients,
            thousands(e)
        );
    }
    if let Some(l) = f.latency {
        let _ = writeln!(
            t,
            "| Herald latency submit → call at the stand-in, at {} notifications/s (half the end-to-end peak) | p50 {:.1} ms, p99 {:.1} ms (of which the API's answer: p50 {:.1} ms, p99 {:.1} ms){} | — |",
            thousands(l.rate),
            l.p50,
            l.p99,
            l.answer_p50,
            l.answer_p99,
            if l.refused > 0 { format!(" ({} submissions answered 503 and retried)", l.refused) } else { String::new() }
        );
        if let Some(p) = l.parts {
            let _ = writeln!(
                t,
                "| The latency split at the clock reads Herald stores: API's clock read → its claim's; claim's clock read → the call (p50, p99; mean over the slowest 1 % of calls) | {:.1}, {:.1}; {:.1} ms — {:.1}, {:.1}; {:.1} ms | — |",
                p.to_claim[0], p.to_claim[1], p.to_claim[2], p.to_call[0], p.to_call[1], p.to_call[2]
            );
        }
    }
    if let Some(r) = f.rss {
        let _ = writeln!(
            t,
            "| Herald worker memory at {} calls in flight (concurrency {}) | VmRSS {:.1} MiB, VmHWM {:.1} MiB | — |",
            thousands(r.in_flight as f64),
            thousands(plan.in_flight as f64),
            r.rss_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0
        );
    }
    let one = f.scaling.first().map(|(_, d)| d.rate());
    for (s, d) in &f.scaling {
        let r = one.map_or("—".into(), |o| format!("÷ 1 process: {}", ratio(d.rate(), o)));
        let _ = writeln!(
            t,
            "| Scaling ({} notifications × 2): {} | {} deliveries/s | {r} |",
            thousands(plan.notifications as f64 / 2.0),
            s.describe(),
            thousands(d.rate())
        );
    }
    for (s, d) in &f.limited {
        let _ = writeln!(
            t,
            "| One rate-limited channel (5 ms interval + 20 ms guard: at most 40/s), {} | {} calls/s | — |",
            s.describe(),
            thousands(d.rate())
        );
    }
    t
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A horizontal bar chart of the drain rates, hand-written SVG.
pub fn chart(f: &Figures) -> String {
    let mut bars: Vec<(String, f64, &str)> = Vec::new();
    if let Some(d) = f.drain {
        bars.push(("Herald, empty tables".into(), d.rate(), "#c0392b"));
    }
    if let Some(d) = f.drain_history {
        bars.push(("Herald, with finished history".into(), d.rate(), "#e67e22"));
    }
    for (name, d) in [
        ("graphile-worker 0.17.3 (batched)", f.graphile),
        ("pg-boss 10.4.2", f.pgboss),
        ("apalis-postgres 1.0.0", f.apalis),
        ("pgbench: Herald's SQL", f.pgbench),
    ] {
        if let Some(d) = d {
            bars.push((name.into(), d.rate(), "#2c7fb8"));
        }
    }
    for (s, d) in &f.scaling {
        bars.push((format!("Herald, {} worker process(es)", s.processes), d.rate(), "#7f8c8d"));
    }
    let max = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let (left, width, row) = (260.0, 420.0, 28.0);
    let height = 50.0 + row * bars.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Drain throughput (no-op jobs / deliveries per second, one PostgreSQL)</text>\n"
    );
    for (i, (label, value, colour)) in bars.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let w = (value / max * width).max(1.0);
        let _ = writeln!(
            svg,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{left:.0}\" y=\"{y:.0}\" width=\"{w:.1}\" height=\"20\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{:.0}\">{}/s</text>",
            left - 8.0,
            y + 15.0,
            esc(label),
            left + w + 6.0,
            y + 15.0,
            thousands(*value)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn target(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**not met**"
    }
}

fn commands(plan: &Plan) -> String {
    let command = if plan.command.is_empty() { "scripts/bench.sh".to_owned() } else { plan.command.clone() };
    format!(
        "```sh\n{command}\n```\n\n\
         `scripts/bench.sh` builds `herald` and `herald-bench` ({profile} profile) and the apalis peer \
         (`bench/apalis`, its own workspace), installs the Node.js peers from `bench/node/package-lock.json` \
         (`npm ci`), and runs `herald-bench`. The peers run as:\n\n\
         ```sh\n\
         node bench/node/graphile.mjs URL JOBS 32 500     # concurrency 32, local queue 500, completeJobBatchDelay 0\n\
         node bench/node/pgboss.mjs URL JOBS 4 500        # 4 work() loops, batchSize 500, polling 0.5 s\n\
         target/bench-apalis/{profile}/apalis-bench URL JOBS 100 64\n\
         target/{profile}/herald-bench --pgbench-script > claim_finish.sql   # made from the statements the store runs\n\
         pgbench -n -M prepared -j 2 -c {clients} -T {secs} -f claim_finish.sql URL\n\
         ```\n",
        profile = plan.profile,
        clients = plan.pgbench_clients,
        secs = plan.pgbench_secs,
    )
}

fn machine_md(m: &Machine) -> String {
    let mut s = format!(
        "* {} CPUs: {}\n* {:.1} GiB memory, Linux {}\n* PostgreSQL {} on the same machine (loopback TCP), settings:\n\n\
         | Setting | Value |\n| --- | --- |\n",
        m.cpus, m.cpu_model, m.memory_gib, m.kernel, m.postgres
    );
    for (k, v) in &m.settings {
        let _ = writeln!(s, "| `{k}` | `{v}` |");
    }
    s
}

/// PostgreSQL's CPU per submission through the API before issue 44's work: this harness's submit phase
/// run with the binary of commit 000fd69 (2026-12-07), the median of five runs on the measuring machine
/// (0.371–0.515 ms, the machine loaded 6–9 runnable processes by others). Its target is half of it.
pub const SUBMISSION_CPU_BEFORE_MS: f64 = 0.459;

/// The targets of issue 44, each against this run.
fn targets(plan: &Plan, f: &Figures) -> String {
    let mut s = String::from("## Targets (issue 44)\n\n| Target | Measured | |\n| --- | --- | --- |\n");
    let postgres_per = |d: Drain| d.cpu.map(|c| c.postgres * 1000.0 / d.tasks.max(1) as f64);
    if let Some(ms) = f.drain.and_then(postgres_per) {
        let _ = writeln!(
            s,
            "| PostgreSQL CPU per delivery, empty-table drain ≤ 0.090 ms | {ms:.3} ms | {} |",
            target(ms <= 0.09)
        );
    }
    if let Some(sub) = &f.submit {
        let ms = sub.cpu.postgres * 1000.0 / sub.notifications.max(1) as f64;
        let _ = writeln!(
            s,
            "| PostgreSQL CPU per submission ≤ half of before ({SUBMISSION_CPU_BEFORE_MS:.3} ms: ≤ {:.3} ms) | {ms:.3} ms | {} |",
            SUBMISSION_CPU_BEFORE_MS / 2.0,
            target(ms <= SUBMISSION_CPU_BEFORE_MS / 2.0)
        );
    }
    if let (Some(used), Some(d)) = (f.wal_drain.as_ref(), f.drain) {
        let bytes = used.bytes / d.tasks.max(1) as f64;
        let _ = writeln!(
            s,
            "| WAL per delivery, empty-table drain ≤ 1,000 bytes | {} bytes | {} |",
            thousands(bytes),
            target(bytes <= 1000.0)
        );
    }
    if let (Some(h), Some(g)) = (f.drain, f.graphile) {
        let r = h.rate() / g.rate();
        let _ = writeln!(s, "| drain ≥ 0.4× graphile-worker batched | {r:.2}× | {} |", target(r >= 0.4));
    }
    if let (Some(h), Some(p)) = (f.drain, f.pgbench) {
        let r = h.rate() / p.rate();
        let _ = writeln!(s, "| drain ≥ 0.8× pgbench of Herald's SQL | {r:.2}× | {} |", target(r >= 0.8));
    }
    if let (Some(h), Some(o)) = (f.drain, f.drain_history) {
        let r = o.rate() / h.rate();
        let _ = writeln!(s, "| ≥ 0.9× with {} finished tasks | {r:.2}× | {} |", history_label(plan), target(r >= 0.9));
    }
    if let (Some(p), Some(o)) = (f.purge, f.drain_history) {
        let r = p.drain.rate() / o.rate();
        let _ = writeln!(s, "| ≥ 0.9× while purging the expired rows | {r:.2}× | {} |", target(r >= 0.9));
    }
    if let Some(l) = f.latency {
        let _ = writeln!(
            s,
            "| p99 submit → call < 25 ms at half the end-to-end peak | {:.1} ms | {} |",
            l.p99,
            target(l.p99 < 25.0)
        );
    }
    if let Some(r) = f.rss {
        let mib = r.hwm_kib as f64 / 1024.0;
        let _ =
            writeln!(s, "| worker RSS < 64 MiB at 1,000 in flight | {mib:.1} MiB (VmHWM) | {} |", target(mib < 64.0));
    }
    s
}

pub fn benchmarks_md(plan: &Plan, m: &Machine, f: &Figures) -> String {
    let mut s = String::from("# Benchmarks\n\n");
    s += "Written by `scripts/bench.sh --write` (the code is under `bench/`); every figure below comes from one run, \
          Herald and its peers side by side against one PostgreSQL server. Figures are measured and printed, never \
          asserted.\n\n";
    let _ = writeln!(
        s,
        "Run of {} — {} profile{}, {} notifications (× 2 channels) per drain, wall clock {:.0} s.\n",
        m.date,
        plan.profile,
        if plan.quick { ", **quick run (small sizes)**" } else { "" },
        thousands(plan.notifications as f64),
        f.wall_secs
    );
    if plan.profile != "release" {
        s += "**These binaries were built in a non-release profile: the figures are not representative.**\n\n";
    }
    s += "## Figures\n\n";
    s += &table(plan, f);
    s += "\n![Drain throughput](benchmarks.svg)\n\n";
    s += &targets(plan, f);
    s += "\n## What is measured\n\n";
    let _ = write!(
        s,
        "* **Herald drain**: `herald worker` processes of the real binary, with a configuration file, drain a \
         backlog of PENDING tasks inserted in bulk with SQL ({users} users with an encrypted destination on each \
         channel, set through the API; a notification, its inbox row and a task per channel, as the API's create \
         leaves them). Each task is one call to a loopback stand-in that answers at once (`push`: webhook, `sms`: \
         queryable), one attempt row, `synchronous_commit` as the server has it. Each drain starts just after a \
         `CHECKPOINT`, so each pays the same way for the first change of every page it touches. The rate runs \
         from the first call at a stand-in to the moment no task of the backlog is unfinished in the database.\n\
         * **{hist} finished tasks**: the same drain after {hist} SENT tasks (with their notifications, inbox rows \
         and one ACCEPTED attempt each) were inserted with `generate_series` into the real (logged) tables, then \
         `VACUUM (ANALYZE)`{hist_secs}.\n\
         * **While purging**: right after it, every finished row so far (that history and the earlier phases') \
         is aged past a one-day window and the same drain runs again with `retention.finished_after = \"1d\"` \
         and `retention.interval = \"1s\"` (batch 1,000): the worker process holding the purge's lease removes \
         the expired notifications with their tasks, attempts and inbox rows in bounded batches while the \
         deliveries run. Compared with the drain with history just before it, in the same run.\n\
         * **Submit**: `herald serve`, {clients} concurrent HTTP clients posting `POST /v1/notifications` (two \
         channels each) for {ssecs:.0} s; the process's own workers claim nothing meanwhile (both channels' \
         egress is held by a long interval for that phase), so the API and its writes alone are measured.\n\
         * **End to end**: the same {clients} clients with `herald serve` and the drain's workers running: \
         notifications delivered per second (both calls made at the stand-ins) after the first second until \
         the clients stop. On one machine the API and the workers share the CPUs, so this, not the submit \
         figure nor the drain alone, is the peak of the path submit → call.\n\
         * **Latency**: `herald serve` plus the drain's workers; notifications submitted open-loop at half the \
         end-to-end peak for {lsecs:.0} s; from the moment a request is sent to the moment its call reaches \
         the stand-in, both channels; the API's part is the time until its answer (the commit). The split \
         uses the times Herald stores, on the same machine's clock: the notification's `created_at` (the \
         API's clock read) and the first attempt's `started_at` (the claim's clock read); both are the \
         database's clock carried forward by each process, so a part may be off by a millisecond or two.\n\
         * **Worker memory**: one `herald worker` with `worker.concurrency = {inflight}` and batch 1, over \
         {inflight} tasks of a channel whose stand-in accepts and holds every answer for 8 s; `VmRSS` and \
         `VmHWM` from `/proc/PID/status` once the calls are in flight.\n\
         * **Between Herald's phases**: {between}\n\
         * **Peers**: each drains the same number of no-op jobs ({jobs}) from its own database on the same \
         server, inserted in bulk before the clock starts; the clock stops when the database shows them all \
         completed. graphile-worker 0.17.3 and pg-boss 10.4.2 from npm (`bench/node`, pinned by \
         package-lock.json), apalis-postgres 1.0.0 (`bench/apalis`).\n\
         * **pgbench**: Herald's own statements (made by `herald-bench` from the texts the store runs, \
         `herald-bench --pgbench-script` prints them: the claim query and the batch's write in one transaction, \
         then one batched fenced finish, batch 32) over {ptasks} PENDING tasks in \
         Herald's schema, {pclients} clients for {psecs} s: the database's limit for this shape of work, with \
         no Rust, HTTP or stand-in in the way.\n\
         * **CPU per task** (per job for the peers): user + system time from `/proc/PID/stat` over the phase, \
         by process: PostgreSQL (the postmaster of the server under test and its children — another server on the \
         machine counts as another process — and through the postmaster the backends that ended \
         within the phase), the subject (`herald worker`, pgbench, or the peer's program: `node`, \
         `apalis-bench`), this harness with its in-process stand-ins, everything else. A peer's phase runs \
         from the moment it says its clock starts (`draining`, after its jobs are inserted) to its exit; its \
         own polling of the job count is in it.\n\
         * **WAL per delivery**: the distance between the server's WAL insert positions at a drain's start and \
         end (the whole server's WAL, this run being the only writer), and from `pg_walinspect` how much of it \
         were full-page images; the harness prints the split by kind (heap, B-tree) too.\n",
        users = crate::herald::USERS,
        between = if plan.vacuum_queue {
            "they run one after the other in one database, and each starts with `VACUUM task_queue` (after its \
             backlog is written), as the autovacuum that migration `0012` sets for the claim's queue would \
             between them: a server without autovacuum (this one, see below) would leave every claim of a later \
             phase walking the dead queue entries of the phases before it."
        } else {
            "they run one after the other in one database, and the claim's queue is not vacuumed between them \
             (`--no-vacuum`, the control): on a server without autovacuum every claim of a later phase walks the \
             dead queue entries of the phases before it."
        },
        hist = history_label(plan),
        hist_secs = f.history_secs.map(|s| format!(" (written in {s:.0} s)")).unwrap_or_default(),
        clients = plan.submit_clients,
        ssecs = plan.submit_secs,
        lsecs = plan.latency_secs,
        inflight = thousands(plan.in_flight as f64),
        jobs = thousands((plan.notifications * 2) as f64),
        ptasks = thousands(plan.pgbench_tasks as f64),
        pclients = plan.pgbench_clients,
        psecs = plan.pgbench_secs,
    );
    s += "\n## Machine\n\n";
    s += &machine_md(m);
    s += "\n## Commands\n\n";
    s += &commands(plan);
    s
}

/// Where the generated part of docs/BENCHMARKS.md ends: what follows it is written by hand (the reading
/// of the figures) and kept by every `--write`.
const GENERATED_END: &str = "<!-- scripts/bench.sh --write: generated part ends; what follows is kept -->";

/// Writes `generated` to `path`, keeping the hand-written part after [`GENERATED_END`] of the file there.
pub fn write_benchmarks(path: &Path, generated: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let kept = text.find(GENERATED_END).map_or("\n", |at| &text[at + GENERATED_END.len()..]);
    std::fs::write(path, format!("{generated}\n{GENERATED_END}{kept}"))?;
    Ok(())
}

const BEGIN: &str = "<!-- scripts/bench.sh --scaling --write: measured part begins -->";
const END: &str = "<!-- scripts/bench.sh --scaling --write: measured part ends -->";

/// Replaces the measured part of docs/SCALING.md (between its markers), keeping the rest.
pub fn write_scaling(path: &Path, plan: &Plan, m: &Machine, f: &Figures) -> anyhow::Result<()> {
    let mut part = format!(
        "{BEGIN}\n\nMeasured on {} ({}), PostgreSQL {}, {} profile{}.\n\n",
        m.date,
        m.summary(),
        m.postgres,
        plan.profile,
        if plan.quick { ", quick run (small sizes)" } else { "" }
    );
    part += "| Worker processes | Per process | Drain | ÷ 1 process |\n| ---: | --- | ---: | ---: |\n";
    let one = f.scaling.first().map(|(_, d)| d.rate());
    for (s, d) in &f.scaling {
        let _ = writeln!(
            part,
            "| {} | concurrency {}, batch {}, {} claim connections | {} deliveries/s | {} |",
            s.processes,
            s.concurrency,
            s.batch,
            s.claim_connections,
            thousands(d.rate()),
            one.map_or("—".into(), |o| ratio(d.rate(), o))
        );
    }
    part += "\nOne rate-limited channel (`min_interval_ms = 5`, `egress_guard_ms = 20`: a spacing of 25 ms, so at \
             most 40 calls/s by configuration), its egress row locked by every claim that calls it:\n\n\
             | Worker processes | Calls/s | Of the configured 40/s |\n| ---: | ---: | ---: |\n";
    for (s, d) in &f.limited {
        let _ = writeln!(part, "| {} | {} | {:.0} % |", s.processes, thousands(d.rate()), d.rate() / 40.0 * 100.0);
    }
    part += &format!("\n{END}");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{part}{}", &text[..b], &text[e + END.len()..]),
        _ => format!("# Scaling\n\n{part}\n"),
    };
    std::fs::write(path, new)?;
    Ok(())
}
