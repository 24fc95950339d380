//! Herald through its real binary: `herald serve` and `herald worker` processes with a configuration
//! file, the loopback stand-ins of this process as their channels, a database of their own.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use std::collections::HashSet;

use crate::cpu::{self, Split};
use crate::wal;
use futures::StreamExt as _;
use herald_standin::{Chaos, Kind, StandIn};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use sqlx::PgPool;
use tokio::process::{Child, Command};

/// Users with a preference on every channel; notifications are spread over them.
pub const USERS: usize = 200;
/// Finished rows are inserted per statement in chunks of this many notifications (two tasks each).
const OLD_CHUNK: u64 = 250_000;
/// The delay of the stand-in that holds calls open (worker RSS at 1,000 in flight).
const HOLD: Duration = Duration::from_secs(8);

pub fn user(i: usize) -> String {
    format!("u{i:03}")
}

/// The stand-ins: `push` (webhook) and `sms` (queryable) answer at once; `limited` is a webhook channel
/// with a 5 ms egress interval and a 20 ms guard; `slow` accepts and answers only after [`HOLD`].
pub struct StandIns {
    pub push: StandIn,
    pub sms: StandIn,
    pub limited: StandIn,
    pub slow: StandIn,
}

impl StandIns {
    pub async fn start() -> StandIns {
        let slow = StandIn::start(Kind::Push).await;
        slow.set_chaos(Some(Chaos {
            seed: 1,
            accept: 0,
            hang: 1,
            hang_for: HOLD,
            unavailable: 0,
            too_many: 0,
            gone: 0,
            drop_before: 0,
            drop_after: 0,
            garbage: 0,
            query_ok: 1,
            query_fail: 0,
        }));
        StandIns {
            push: StandIn::start(Kind::Push).await,
            sms: StandIn::start(Kind::Sms).await,
            limited: StandIn::start(Kind::Push).await,
            slow,
        }
    }

    /// Calls accepted by the two channels of the drains.
    pub fn drained(&self) -> u64 {
        self.push.sends() + self.sms.sends()
    }

    pub async fn shutdown(self) {
        for s in [self.push, self.sms, self.limited, self.slow] {
            s.shutdown().await;
        }
    }
}

/// How the worker processes are sized.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    pub processes: usize,
    pub concurrency: usize,
    pub batch: usize,
    pub claim_connections: usize,
}

impl Sizing {
    /// The same total of calls in flight (256) whatever the number of processes, at least one batch per
    /// process, and connections within the server's `max_connections` (100 by default) even with 8
    /// processes (each also opens its finish pool of 3 and a listener).
    pub fn for_processes(processes: usize) -> Sizing {
        let processes = processes.max(1);
        Sizing {
            processes,
            concurrency: (256 / processes).max(32),
            batch: 32,
            claim_connections: (8 / processes).max(2),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} × `herald worker` (concurrency {}, batch {}, {} claim connections each)",
            self.processes, self.concurrency, self.batch, self.claim_connections
        )
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("HERALD__WORKER__CONCURRENCY".into(), self.concurrency.to_string()),
            ("HERALD__WORKER__BATCH".into(), self.batch.to_string()),
            ("HERALD__DATABASE__WORKER_MAX_CONNECTIONS".into(), self.claim_connections.to_string()),
        ]
    }
}

pub struct Herald {
    pub binary: PathBuf,
    pub workdir: PathBuf,
    pub config: PathBuf,
    pub pool: PgPool,
    pub api: String,
    pub service_token: String,
    pub admin_token: String,
    pub standins: StandIns,
    children: Vec<(String, Child)>,
    started: usize,
    /// Notifications inserted so far (their event keys are numbered from here).
    inserted: u64,
    /// `pg_walinspect` is available: drains report their WAL by kind, not only its size.
    inspect_wal: bool,
    /// The WAL of the last [`Herald::drain`], until taken.
    last_wal: Option<wal::Use>,
    /// Each phase starts with `VACUUM task_queue` (see [`Herald::vacuum_queue`]).
    vacuum: bool,
    /// The configuration as written at start, without status subscriptions.
    base_config: String,
    /// Processes start with `--stand-ins` (a status subscription to this process's receiver).
    stand_ins: bool,
}

fn config_text(db_url: &str, listen: u16, s: &StandIns, service: &str, admin: &str) -> String {
    let channel = |name: &str, kind: &str, url: String, extra: &str| {
        format!(
            "[[channel]]\nname = \"{name}\"\nkind = \"{kind}\"\nurl = \"{url}\"\ntimeout_ms = 10000\nmax_attempts = 8\n\
             retry_base_ms = 100\nretry_cap_ms = 1000\nrefusal_5xx = \"before_acceptance\"\n{extra}\n"
        )
    };
    let mut text = format!(
        "[database]\nurl = \"{db_url}\"\nmax_connections = 4\napi_max_connections = 8\nworker_max_connections = 8\n\n\
         [server]\nlisten = \"127.0.0.1:{listen}\"\nrate_per_second = 1000000\nrate_burst = 1000000\nmax_in_flight = 4096\n\n\
         [auth]\nservice_tokens = [\"{service}\"]\nadmin_tokens = [\"{admin}\"]\nuser_token_secret = \"{admin}-user-tokens\"\n\n\
         [keys]\ncurrent = \"b1\"\nb1 = \"YmVuY2gta2V5LWZvci1oZXJhbGQtYmVuY2htYXJrISE=\"\n\n\
         [worker]\nconcurrency = 4\nlease_ms = 30000\nbatch = 32\npoll_ms = 100\n\n\
         [log]\nformat = \"human\"\nlevel = \"warn\"\n\n"
    );
    text += &channel("push", "webhook", s.push.base_url(), "min_interval_ms = 0");
    text += &channel("sms", "queryable", s.sms.base_url(), "min_interval_ms = 0\nquery_consistency = \"immediate\"");
    text += &channel("limited", "webhook", s.limited.base_url(), "min_interval_ms = 5\negress_guard_ms = 20");
    text += &channel("slow", "webhook", s.slow.base_url(), "min_interval_ms = 0");
    text
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn token(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-benchmark-{nanos:032x}-{}", std::process::id())
}

/// What a drain measured.
#[derive(Clone, Copy, Debug)]
pub struct Drain {
    pub tasks: u64,
    pub secs: f64,
    /// Where the machine's CPU went meanwhile, when measured.
    pub cpu: Option<Split>,
}

impl Drain {
    pub fn rate(&self) -> f64 {
        self.tasks as f64 / self.secs
    }
}

/// What the submit phase measured.
#[derive(Clone, Debug)]
pub struct Submit {
    pub notifications: u64,
    pub secs: f64,
    /// Where the machine's CPU went meanwhile (the subject: `herald serve`).
    pub cpu: Split,
    /// The WAL written meanwhile (the whole server's).
    pub wal: wal::Use,
}

impl Submit {
    pub fn rate(&self) -> f64 {
        self.notifications as f64 / self.secs
    }
}

/// The latency of submit → call at the stand-in, in ms.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    pub rate: f64,
    pub calls: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Submit → the API's answer (the part of the latency spent before the commit), p50 and p99.
    pub answer_p50: f64,
    pub answer_p99: f64,
    /// Submissions answered 503/429 and tried again.
    pub refused: u64,
    /// Where the time went, for every call and for the slowest 1 %.
    pub parts: Option<Parts>,
}

/// Submit → call split at the clock reads Herald stores: the API's (the notification's `created_at`) and
/// the claim's (the attempt's `started_at`). Same machine, so one clock; each part's p50 and p99 over all
/// calls, and its mean over the slowest 1 % of calls (what the p99 is made of). In ms.
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    /// Request sent → the API's clock read (HTTP, parsing, authentication).
    pub to_api: [f64; 3],
    /// The API's clock read → its answer (the create's transaction and commit).
    pub to_answer: [f64; 3],
    /// The API's clock read → the claim's (commit, wake-up, the worker's turn to claim).
    pub to_claim: [f64; 3],
    /// The claim's clock read → the call at the stand-in (the claim's statements and commit, the call).
    pub to_call: [f64; 3],
}

/// Memory of one worker process with calls held open.
#[derive(Clone, Copy, Debug)]
pub struct Rss {
    pub in_flight: u64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl Herald {
    pub async fn start(
        binary: PathBuf,
        workdir: PathBuf,
        db_url: &str,
        pool: PgPool,
        vacuum: bool,
    ) -> anyhow::Result<Herald> {
        let standins = StandIns::start().await;
        let (service, admin) = (token("svc"), token("adm"));
        let port = free_port()?;
        let config = workdir.join("herald.toml");
        let base_config = config_text(db_url, port, &standins, &service, &admin);
        write_private(&config, &base_config)?;
        let status = Command::new(&binary)
            .arg("--config")
            .arg(&config)
            .arg("migrate")
            .stdout(Stdio::null())
            .status()
            .await
            .context("cannot run herald migrate")?;
        ensure!(status.success(), "herald migrate failed: {status}");
        let inspect_wal = wal::inspect(&pool).await;
        Ok(Herald {
            binary,
            workdir,
            config,
            pool,
            api: format!("http://127.0.0.1:{port}"),
            service_token: service,
            admin_token: admin,
            standins,
            children: Vec::new(),
            started: 0,
            inserted: 0,
            inspect_wal,
            last_wal: None,
            vacuum,
            base_config,
            stand_ins: false,
        })
    }

    fn spawn(&mut self, command: &str, env: &[(String, String)]) -> anyhow::Result<u32> {
        self.started += 1;
        let name = format!("{command}-{}", self.started);
        let log = std::fs::File::create(self.workdir.join(format!("{name}.log")))?;
        let mut c = Command::new(&self.binary);
        c.arg("--config").arg(&self.config).arg(command);
        if self.stand_ins && command != "migrate" {
            c.arg("--stand-ins");
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        let child = c.spawn().with_context(|| format!("cannot start herald {command}"))?;
        let pid = child.id().context("no pid")?;
        self.children.push((name, child));
        Ok(pid)
    }

    /// `herald serve`, once it answers `/healthz`; its pid.
    pub async fn serve(&mut self, env: &[(String, String)]) -> anyhow::Result<u32> {
        let pid = self.spawn("serve", env)?;
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/healthz", self.api)).send().await {
                if r.status().is_success() {
                    return Ok(pid);
                }
            }
            self.check_alive()?;
            ensure!(Instant::now() < deadline, "herald serve did not answer /healthz within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn workers(&mut self, sizing: Sizing, extra: &[(String, String)]) -> anyhow::Result<Vec<u32>> {
        let mut env = sizing.env();
        env.extend_from_slice(extra);
        (0..sizing.processes).map(|_| self.spawn("worker", &env)).collect()
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                bail!("herald {name} exited ({status}); see {}", self.workdir.join(format!("{name}.log")).display());
            }
        }
        Ok(())
    }

    /// Stops every Herald process (SIGTERM, then SIGKILL after 5 s, or at once when `hard`).
    pub async fn stop_all(&mut self, hard: bool) {
        for (_, child) in &mut self.children {
            if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = kill(Pid::from_raw(pid), if hard { Signal::SIGKILL } else { Signal::SIGTERM });
            }
        }
        for (_, child) in &mut self.children {
            if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
        self.children.clear();
    }

    /// Processes started from now on post status events to `receiver` (every kind), or none (`None`).
    pub fn status_subscription(&mut self, receiver: Option<&crate::status::Receiver>) -> anyhow::Result<()> {
        let mut text = self.base_config.clone();
        if let Some(receiver) = receiver {
            let secret = self.workdir.join("status.secret");
            write_private(&secret, crate::status::SECRET)?;
            text += &crate::status::subscription(&receiver.url, &secret);
        }
        self.stand_ins = receiver.is_some();
        write_private(&self.config, &text)
    }

    /// Status events written and delivered so far.
    pub async fn status_events(&self) -> anyhow::Result<(i64, i64)> {
        Ok(sqlx::query_as("SELECT count(*), count(delivered_at) FROM status_event").fetch_one(&self.pool).await?)
    }

    /// Every user's preference on every channel, through the API (destinations are stored encrypted).
    pub async fn preferences(&self) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        // The drains' users have push and sms; the rate-limited and the slow channel have users of their
        // own, so that a notification submitted through the API has exactly the drains' two tasks.
        let jobs: Vec<(String, &str)> = (0..USERS)
            .flat_map(|u| {
                [(user(u), "push"), (user(u), "sms"), (format!("l{u:03}"), "limited"), (format!("s{u:03}"), "slow")]
            })
            .collect();
        for chunk in jobs.chunks(32) {
            let calls = chunk.iter().map(|(u, c)| {
                client
                    .put(format!("{}/v1/users/{u}/channels/{c}", self.api))
                    .bearer_auth(&self.admin_token)
                    .json(&json!({ "destination": format!("{c}-{u}"), "enabled": true }))
                    .send()
            });
            for r in futures::future::join_all(calls).await {
                let r = r?;
                ensure!(r.status().is_success(), "PUT preference answered {}", r.status());
            }
        }
        Ok(())
    }

    /// Inserts `notifications` new notifications, each with a PENDING task on every one of `channels`, in
    /// one statement (as the API's create would have left them, without the API). Returns the first new
    /// task id.
    pub async fn backlog(&mut self, notifications: u64, channels: &[&str]) -> anyhow::Result<i64> {
        let from = self.inserted;
        self.inserted += notifications;
        backlog(&self.pool, from, notifications, channels).await
    }

    /// Vacuums the claim's queue before a phase (after its backlog is written, if it has one), as the
    /// autovacuum that migration `0012` asks for (at 2 % dead rows) would between phases on a server that
    /// runs it. This one may not (`autovacuum` is off on the machine of record), and then every claim of a
    /// phase walks the dead entries of `task_queue_due` that the phases before it left: the rate-limited
    /// channel made 38 and 35 calls/s after the other phases, 38 and 38 with the queue vacuumed first, 35
    /// and 31 with only the other tables vacuumed.
    async fn vacuum_queue(&self) -> anyhow::Result<()> {
        if self.vacuum {
            sqlx::query("VACUUM task_queue").execute(&self.pool).await?;
        }
        Ok(())
    }

    /// The id the next task will get at least: the mark from which a phase's tasks are counted.
    async fn next_task_id(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT COALESCE(max(id), 0) + 1 FROM delivery_task").fetch_one(&self.pool).await?)
    }

    /// Tasks from id `first` on not finished yet (runnable or held): rows of the claim's queue, which
    /// holds only unfinished tasks, so the count costs the same whatever the size of the tables. (Asked
    /// through `delivery_task`, which has no index on the notification, it was a sequential scan of the
    /// whole table at the end of each drain.)
    async fn unfinished(&self, first: i64) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM task_queue WHERE task_id >= $1")
            .bind(first)
            .fetch_one(&self.pool)
            .await?)
    }

    /// Waits until every task from id `first` on is finished: `calls` more calls at the stand-ins than
    /// `base` (read before the workers were started, so no call escapes it) and no unfinished row left.
    /// Returns the seconds from the first call to the last finish.
    async fn wait_drained(&mut self, first: i64, calls: u64, base: u64, timeout: Duration) -> anyhow::Result<f64> {
        let started = Instant::now();
        let mut first_call = None;
        loop {
            let seen = self.standins.drained().saturating_sub(base);
            if first_call.is_none() && seen > 0 {
                first_call = Some(Instant::now());
            }
            if seen >= calls && self.unfinished(first).await? == 0 {
                break;
            }
            self.check_alive()?;
            ensure!(
                started.elapsed() < timeout,
                "the drain did not finish within {} s ({seen} of {calls} calls)",
                timeout.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(if seen > 0 { 10 } else { 2 })).await;
        }
        Ok(first_call.map_or(0.0, |t| t.elapsed().as_secs_f64()))
    }

    /// Drains `notifications` × push and sms with `sizing`: the rate from the first call to the last
    /// finished row. Checks that every task was sent once with one attempt row. The WAL written meanwhile
    /// is kept for [`Herald::take_wal`].
    pub async fn drain(&mut self, notifications: u64, sizing: Sizing) -> anyhow::Result<Drain> {
        self.drain_with(notifications, sizing, &[]).await
    }

    /// [`Herald::drain`] with `extra` environment for the workers (the purge's drain: its retention).
    pub async fn drain_with(
        &mut self,
        notifications: u64,
        sizing: Sizing,
        extra: &[(String, String)],
    ) -> anyhow::Result<Drain> {
        let first = self.backlog(notifications, &["push", "sms"]).await?;
        self.vacuum_queue().await?;
        sqlx::query("ANALYZE delivery_task").execute(&self.pool).await?;
        // Every drain starts just after a checkpoint, so each pays the same way for the first change of a
        // page (a full-page image in the WAL) whatever the server's checkpoint cycle was doing: without it
        // the drain after the history (which takes one) paid for every page it touched and the empty one
        // for none, and the two were not compared like for like.
        if let Err(error) = sqlx::query("CHECKPOINT").execute(&self.pool).await {
            eprintln!("herald-bench: no CHECKPOINT before the drain ({error}): its full-page images depend on the server's cycle");
        }
        let tasks = notifications * 2;
        let start = wal::mark(&self.pool).await?;
        let before = cpu::snapshot();
        let base = self.standins.drained();
        let pids: HashSet<u32> = self.workers(sizing, extra)?.into_iter().collect();
        let secs = self.wait_drained(first, tasks, base, Duration::from_secs(900)).await?;
        let cpu = cpu::split(&before, &cpu::snapshot(), &pids, "");
        self.last_wal = Some(wal::since(&self.pool, &start, self.inspect_wal).await?);
        self.stop_all(false).await;
        self.check_sent(first, tasks).await?;
        Ok(Drain { tasks, secs, cpu: Some(cpu) })
    }

    /// The control of migrations `0013` and `0014`: references, attempt tokens and notifications' public ids
    /// minted random (version 4) again (the public ids through `herald_uuid_v7()`, their default).
    pub async fn random_keys(&self) -> anyhow::Result<()> {
        sqlx::query("CREATE OR REPLACE FUNCTION herald_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS 'SELECT gen_random_uuid()'")
            .execute(&self.pool)
            .await?;
        sqlx::query("ALTER TABLE delivery_task ALTER COLUMN reference SET DEFAULT gen_random_uuid()")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The WAL written by the last drain (from its workers' start to its last finish), once.
    pub fn take_wal(&mut self) -> Option<wal::Use> {
        self.last_wal.take()
    }

    async fn check_sent(&self, first: i64, tasks: u64) -> anyhow::Result<()> {
        let (sent, attempts): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE t.state = 'SENT'), \
               (SELECT count(*) FROM delivery_attempt a JOIN delivery_task x ON x.user_id = a.user_id AND x.id = a.task_id \
                WHERE x.id >= $1 AND a.outcome = 'ACCEPTED') \
             FROM delivery_task t WHERE t.id >= $1",
        )
        .bind(first)
        .fetch_one(&self.pool)
        .await?;
        ensure!(
            u64::try_from(sent)? == tasks && u64::try_from(attempts)? == tasks,
            "expected {tasks} SENT tasks with one ACCEPTED attempt each, found {sent} SENT and {attempts} attempts"
        );
        Ok(())
    }

    /// Submit throughput through the HTTP API: `clients` concurrent clients for `secs`, each notification
    /// with a task on push and sms. The workers of `herald serve` claim nothing meanwhile (both channels'
    /// egress is held by a long interval), so the API alone is measured, with the CPU of every process and
    /// the WAL written meanwhile. The backlog is drained afterwards by `sizing`'s workers (not measured).
    pub async fn submit(&mut self, clients: usize, secs: f64, sizing: Sizing) -> anyhow::Result<Submit> {
        self.vacuum_queue().await?;
        sqlx::query(
            "INSERT INTO channel_egress (channel, last_call_at) VALUES ('push', now()), ('sms', now()) \
             ON CONFLICT (channel) DO UPDATE SET last_call_at = now()",
        )
        .execute(&self.pool)
        .await?;
        let hold = vec![
            ("HERALD__CHANNEL__PUSH__MIN_INTERVAL_MS".to_owned(), "3600000".to_owned()),
            ("HERALD__CHANNEL__SMS__MIN_INTERVAL_MS".to_owned(), "3600000".to_owned()),
        ];
        let pid = self.serve(&hold).await?;
        let first = self.next_task_id().await?;
        let tag = format!("submit-{}", self.started);
        let start = wal::mark(&self.pool).await?;
        let (before, started) = (cpu::snapshot(), Instant::now());
        let total = self.closed_loop(clients, started + Duration::from_secs_f64(secs), &tag).await?;
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu::split(&before, &cpu::snapshot(), &HashSet::from([pid]), "");
        let wal = wal::since(&self.pool, &start, self.inspect_wal).await?;
        self.stop_all(false).await;
        // Drain what was submitted, so the next phase starts with no backlog.
        let base = self.standins.drained();
        self.workers(sizing, &[])?;
        self.wait_drained(first, total * 2, base, Duration::from_secs(900)).await?;
        self.stop_all(false).await;
        Ok(Submit { notifications: total, secs, cpu, wal })
    }

    /// Updates of `delivery_task` so far and how many of them were HOT (no index entry written), then the
    /// same of `delivery_attempt`, from the statistics collector. Backends report at most once a second,
    /// so read it after a pause.
    pub async fn task_updates(&self) -> anyhow::Result<[i64; 4]> {
        let (task, task_hot, attempt, attempt_hot): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT sum(n_tup_upd) FILTER (WHERE relname = 'delivery_task')::bigint, \
                    sum(n_tup_hot_upd) FILTER (WHERE relname = 'delivery_task')::bigint, \
                    sum(n_tup_upd) FILTER (WHERE relname = 'delivery_attempt')::bigint, \
                    sum(n_tup_hot_upd) FILTER (WHERE relname = 'delivery_attempt')::bigint \
             FROM pg_stat_user_tables WHERE relname IN ('delivery_task', 'delivery_attempt')",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok([task, task_hot, attempt, attempt_hot])
    }

    /// `clients` clients each submitting one notification after the other until `deadline`; the count
    /// of notifications accepted.
    async fn closed_loop(&self, clients: usize, deadline: Instant, tag: &str) -> anyhow::Result<u64> {
        let client = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
        let submitted = futures::future::join_all((0..clients).map(|c| {
            let (client, api, token) = (client.clone(), self.api.clone(), self.service_token.clone());
            async move {
                let mut ok = 0_u64;
                let mut n = 0_usize;
                while Instant::now() < deadline {
                    let body = json!({ "user_id": user((c + n * clients) % USERS), "event_key": format!("{tag}-{c}-{n}"),
                                       "body": "a benchmark notification", "ttl_seconds": 3600 });
                    n += 1;
                    let r = client.post(format!("{api}/v1/notifications")).bearer_auth(&token).json(&body).send().await?;
                    ensure!(r.status().is_success(), "POST /v1/notifications answered {}", r.status());
                    ok += 1;
                }
                anyhow::Ok(ok)
            }
        }))
        .await;
        submitted.into_iter().sum()
    }

    /// The peak of the whole path: `clients` clients submitting as fast as they can while `herald serve`
    /// and `sizing`'s workers deliver, all on one machine. Returns notifications delivered per second
    /// (both calls made at the stand-ins) after the first second, until the clients stop — whichever of
    /// the API and the workers is the narrower part sets it. The backlog is drained afterwards.
    pub async fn end_to_end(&mut self, clients: usize, secs: f64, sizing: Sizing) -> anyhow::Result<f64> {
        self.vacuum_queue().await?;
        let first = self.next_task_id().await?;
        self.serve(&[]).await?;
        self.workers(sizing, &[])?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tag = format!("e2e-{}", self.started);
        let warm = Duration::from_secs(1);
        let deadline = Instant::now() + Duration::from_secs_f64(secs).max(warm * 2);
        let standins = &self.standins;
        let measure = async {
            tokio::time::sleep(warm).await;
            let (from, at) = (standins.drained(), Instant::now());
            tokio::time::sleep_until(deadline.into()).await;
            (standins.drained() - from, at.elapsed().as_secs_f64())
        };
        let (submitted, (calls, window)) = tokio::join!(self.closed_loop(clients, deadline, &tag), measure);
        submitted?;
        self.wait_drained(first, 0, 0, Duration::from_secs(900)).await?;
        self.stop_all(false).await;
        Ok(calls as f64 / 2.0 / window)
    }

    /// Submit → call latency at a fixed `rate` (notifications per second, each with a push and an sms
    /// task) for `secs`, with `herald serve` and `sizing`'s workers running.
    pub async fn latency(&mut self, rate: f64, secs: f64, sizing: Sizing) -> anyhow::Result<Latency> {
        self.vacuum_queue().await?;
        let first = self.next_task_id().await?;
        self.serve(&[]).await?;
        self.workers(sizing, &[])?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (push_base, sms_base) = (self.standins.push.messages().len(), self.standins.sms.messages().len());
        let count = (rate * secs).round().max(1.0) as usize;
        let sent_at: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; count]));
        let answered: Arc<Mutex<Vec<Option<f64>>>> = Arc::new(Mutex::new(vec![None; count]));
        let client = reqwest::Client::new();
        let started = Instant::now();
        let tag = format!("lat{}", self.started);
        let mut calls = Vec::with_capacity(count);
        for i in 0..count {
            tokio::time::sleep_until((started + Duration::from_secs_f64(i as f64 / rate)).into()).await;
            let (client, api, token, sent_at, answered) = (
                client.clone(),
                self.api.clone(),
                self.service_token.clone(),
                Arc::clone(&sent_at),
                Arc::clone(&answered),
            );
            let body = json!({ "user_id": user(i % USERS), "event_key": format!("{tag}-{i}"), "body": format!("{tag}:{i}"),
                               "ttl_seconds": 3600 });
            calls.push(tokio::spawn(async move {
                let first_try = Instant::now();
                sent_at.lock().expect("lock")[i] = Some(first_try);
                // An overloaded API answers 503 (or 429): the client tries again after a pause, as a real
                // one would, and the latency still counts from its first try.
                let mut refused = 0_u64;
                loop {
                    let r =
                        client.post(format!("{api}/v1/notifications")).bearer_auth(&token).json(&body).send().await?;
                    if r.status().is_success() {
                        answered.lock().expect("lock")[i] = Some(first_try.elapsed().as_secs_f64() * 1000.0);
                        return anyhow::Ok(refused);
                    }
                    ensure!(
                        matches!(r.status().as_u16(), 429 | 503) && refused < 100,
                        "POST /v1/notifications answered {}",
                        r.status()
                    );
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }));
        }
        let mut refused = 0;
        for c in calls {
            refused += c.await??;
        }
        self.wait_drained(first, 0, 0, Duration::from_secs(120)).await?;
        self.stop_all(false).await;
        let sent_at = sent_at.lock().expect("lock").clone();
        let prefix = format!("{tag}:");
        // (notification, channel, instant of the call at the stand-in)
        let calls: Vec<(usize, &'static str, Instant)> = self.standins.push.messages()[push_base..]
            .iter()
            .map(|m| (m, "push"))
            .chain(self.standins.sms.messages()[sms_base..].iter().map(|m| (m, "sms")))
            .filter_map(|(m, channel)| Some((m.text.strip_prefix(&prefix)?.parse().ok()?, channel, m.instant)))
            .collect();
        ensure!(calls.len() == count * 2, "expected {} calls at the stand-ins, saw {}", count * 2, calls.len());
        let since =
            |i: usize, at: Instant| sent_at[i].map(|sent| at.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        let mut millis: Vec<f64> = calls.iter().filter_map(|&(i, _, at)| since(i, at)).collect();
        let answers = answered.lock().expect("lock").clone();
        let mut answer_millis: Vec<f64> = answers.iter().flatten().copied().collect();
        let (p50, p99, max) = (quantile(&mut millis, 0.50), quantile(&mut millis, 0.99), quantile(&mut millis, 1.0));
        let (answer_p50, answer_p99) = (quantile(&mut answer_millis, 0.50), quantile(&mut answer_millis, 0.99));
        let parts = self.parts(&tag, started, &sent_at, &answers, &calls).await?;
        Ok(Latency { rate, calls: millis.len(), p50, p99, max, answer_p50, answer_p99, refused, parts })
    }

    /// Splits each call's latency at the clock reads stored with it ([`Parts`]). `started` is when the
    /// clients began; the stored times are on the same clock as the machine's `SystemTime`, read here
    /// against `started`. `None` when the rows are not all there.
    async fn parts(
        &self,
        tag: &str,
        started: Instant,
        sent_at: &[Option<Instant>],
        answers: &[Option<f64>],
        calls: &[(usize, &'static str, Instant)],
    ) -> anyhow::Result<Option<Parts>> {
        // The wall clock at `started`: now's wall clock less the time since.
        let started_wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64()
            - started.elapsed().as_secs_f64();
        let rows: Vec<(String, String, f64, f64)> = sqlx::query_as(
            "SELECT n.event_key, t.channel, extract(epoch FROM n.created_at)::float8, \
                    extract(epoch FROM a.started_at)::float8 \
             FROM notification n JOIN delivery_task t ON t.user_id = n.user_id AND t.notification_id = n.id \
             JOIN delivery_attempt a ON a.user_id = t.user_id AND a.task_id = t.id AND a.attempt_no = 1 \
             WHERE n.event_key LIKE $1",
        )
        .bind(format!("{tag}-%"))
        .fetch_all(&self.pool)
        .await?;
        let prefix = format!("{tag}-");
        // ms since `started`, keyed by (notification, channel)
        let mut stored = std::collections::HashMap::new();
        for (key, channel, created, claimed) in rows {
            let Some(Ok(i)) = key.strip_prefix(&prefix).map(str::parse::<usize>) else { continue };
            stored.insert((i, channel), ((created - started_wall) * 1000.0, (claimed - started_wall) * 1000.0));
        }
        let at = |instant: Instant| instant.saturating_duration_since(started).as_secs_f64() * 1000.0;
        // (total, to_api, to_answer, to_claim, to_call) per call
        let mut split = Vec::with_capacity(calls.len());
        for &(i, channel, call) in calls {
            let (Some(sent), Some(answer), Some(&(created, claimed))) =
                (sent_at[i], answers[i], stored.get(&(i, channel.to_owned())))
            else {
                return Ok(None);
            };
            let (sent, call) = (at(sent), at(call));
            split.push([call - sent, created - sent, sent + answer - created, claimed - created, call - claimed]);
        }
        split.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let tail = &split[split.len() - split.len().div_ceil(100)..];
        let part = |k: usize| {
            let mut all: Vec<f64> = split.iter().map(|s| s[k]).collect();
            let mean = tail.iter().map(|s| s[k]).sum::<f64>() / tail.len() as f64;
            [quantile(&mut all, 0.50), quantile(&mut all, 0.99), mean]
        };
        Ok(Some(Parts { to_api: part(1), to_answer: part(2), to_claim: part(3), to_call: part(4) }))
    }

    /// Adds `tasks` finished tasks (SENT, one ACCEPTED attempt each, two per notification, with inbox
    /// rows) in bulk with SQL, as an installation that has run for a while holds them; then VACUUM ANALYZE
    /// and a CHECKPOINT.
    pub async fn history(&self, tasks: u64, progress: &dyn Fn(String)) -> anyhow::Result<f64> {
        let started = Instant::now();
        let notifications = tasks / 2;
        // Two chunks at a time (one per CPU of the machine this was tuned on); each chunk's users are
        // its own, so the two statements touch different index pages at the ends of the same indexes.
        let chunks: Vec<(i64, i64)> = (0..notifications)
            .step_by(usize::try_from(OLD_CHUNK)?)
            .map(|from| Ok((i64::try_from(from)?, i64::try_from(from + OLD_CHUNK.min(notifications - from) - 1)?)))
            .collect::<anyhow::Result<_>>()?;
        let mut written = 0;
        let mut writes = futures::stream::iter(chunks)
            .map(|(from, to)| async move {
                sqlx::query(OLD_ROWS).bind(from).bind(to).execute(&self.pool).await?;
                anyhow::Ok(u64::try_from(to - from + 1)?)
            })
            .buffer_unordered(2);
        while let Some(n) = writes.next().await {
            written += n?;
            progress(format!("{} of {tasks} finished tasks in {:.0} s", written * 2, started.elapsed().as_secs_f64()));
        }
        for table in ["notification", "inbox_item", "delivery_task", "delivery_attempt"] {
            sqlx::query(&format!("VACUUM (ANALYZE) {table}")).execute(&self.pool).await?;
        }
        // Writing the history is set-up: its checkpoint (gigabytes of dirty pages) is taken now, not left
        // to run through the drain that is measured next.
        if let Err(error) = sqlx::query("CHECKPOINT").execute(&self.pool).await {
            progress(format!("no CHECKPOINT after the history ({error}): its write-out may overlap the drain"));
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Ages every finished notification made so far (the earlier phases' and the history's) past a one-day
    /// window, so that all of them are expired for the purge's drain: the expired rows are then the oldest
    /// ids, as in an installation, where a row's id and its creation time grow together (the purge pages by
    /// id and stops at the first young page). Answers how many tasks are expired.
    pub async fn expire_everything(&self) -> anyhow::Result<i64> {
        sqlx::query("UPDATE notification SET created_at = now() - interval '2 days' WHERE created_at > now() - interval '1 day'")
            .execute(&self.pool)
            .await?;
        sqlx::query("VACUUM (ANALYZE) notification").execute(&self.pool).await?;
        // The earlier phases' processes are gone, but the last of them to purge still holds the purge's lease
        // for three of its (default, one-minute) intervals: the drain's workers would wait that long.
        sqlx::query("DELETE FROM lifecycle_lease WHERE job = 'purge'").execute(&self.pool).await?;
        Ok(sqlx::query_scalar("SELECT count(*) FROM delivery_task").fetch_one(&self.pool).await?)
    }

    /// Tasks stored now (after the purge's drain: how many it left).
    pub async fn stored_tasks(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM delivery_task").fetch_one(&self.pool).await?)
    }

    /// Worker RSS with `in_flight` calls held open by the `slow` stand-in: one `herald worker` with
    /// concurrency `in_flight`, batch 1.
    pub async fn rss(&mut self, in_flight: u64) -> anyhow::Result<Rss> {
        self.backlog(in_flight, &["slow"]).await?;
        self.vacuum_queue().await?;
        let base = self.standins.slow.requests();
        let sizing = Sizing { processes: 1, concurrency: usize::try_from(in_flight)?, batch: 1, claim_connections: 16 };
        let pid = self.workers(sizing, &[])?[0];
        let started = Instant::now();
        let mut seen = 0;
        while started.elapsed() < HOLD.saturating_sub(Duration::from_secs(2)) {
            seen = self.standins.slow.requests() - base;
            if seen >= in_flight {
                break;
            }
            self.check_alive()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Let the process settle with every call open, then read its memory.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().strip_suffix("kB")?.trim().parse().ok())
                .unwrap_or(0)
        };
        let rss = Rss { in_flight: seen, rss_kib: field("VmRSS:"), hwm_kib: field("VmHWM:") };
        self.stop_all(true).await;
        Ok(rss)
    }

    /// The egress row's ceiling: `notifications` tasks on the `limited` channel (5 ms interval + 20 ms
    /// guard), claimed by `sizing`'s workers for `window`: calls per second seen at the stand-in. What is
    /// left is removed afterwards, so later phases do not call the channel.
    pub async fn limited(&mut self, notifications: u64, sizing: Sizing, window: Duration) -> anyhow::Result<Drain> {
        self.backlog(notifications, &["limited"]).await?;
        self.vacuum_queue().await?;
        let base = self.standins.limited.sends();
        self.workers(sizing, &[])?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.standins.limited.sends() == base && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (from, started) = (self.standins.limited.sends(), Instant::now());
        tokio::time::sleep(window).await;
        let calls = self.standins.limited.sends() - from;
        let secs = started.elapsed().as_secs_f64();
        self.stop_all(false).await;
        sqlx::query(
            "WITH t AS (SELECT user_id, id FROM delivery_task WHERE channel = 'limited'), \
               a AS (DELETE FROM delivery_attempt x USING t WHERE x.user_id = t.user_id AND x.task_id = t.id) \
             SELECT 1",
        )
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM delivery_task WHERE channel = 'limited'").execute(&self.pool).await?;
        Ok(Drain { tasks: calls, secs, cpu: None })
    }
}

/// New notifications with a PENDING task on each channel, due now: `$1` first number, `$2` count, `$3`
/// users, `$4` channels, `$5` the users' prefix.
const BACKLOG: &str = "WITH n AS ( \
       INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
       SELECT $5 || lpad((g % $3)::text, 3, '0'), 'bench-' || g, 'a benchmark notification', now(), \
              now() + interval '1 day' \
       FROM generate_series($1::bigint, $1::bigint + $2 - 1) g RETURNING user_id, id), \
     i AS (INSERT INTO inbox_item (user_id, notification_id, created_at) SELECT user_id, id, now() FROM n), \
     t AS (INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
       created_at, updated_at) \
     SELECT n.user_id, n.id, c, 'PENDING', now(), 8, now(), now() FROM n CROSS JOIN unnest($4::text[]) c \
     RETURNING id) \
     SELECT min(id) FROM t";

pub async fn backlog(pool: &PgPool, from: u64, notifications: u64, channels: &[&str]) -> anyhow::Result<i64> {
    let first: Option<i64> = sqlx::query_scalar(BACKLOG)
        .bind(i64::try_from(from)?)
        .bind(i64::try_from(notifications)?)
        .bind(i64::try_from(USERS)?)
        .bind(channels.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>())
        .bind(match channels {
            ["limited"] => "l",
            ["slow"] => "s",
            _ => "u",
        })
        .fetch_one(pool)
        .await?;
    first.context("no task inserted")
}

/// The `q` quantile (0 < q ≤ 1) of `values` (sorted here; not empty), nearest rank.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1]
}

/// Finished history, notifications `$1..=$2`: 50 per user (users `old00000000`…, sorted as inserted, so
/// every index grows at its end), two SENT tasks each with one ACCEPTED attempt, and inbox rows.
const OLD_ROWS: &str = "WITH n AS ( \
       INSERT INTO notification (user_id, event_key, body, created_at, expires_at) \
       SELECT 'old' || lpad((g / 50)::text, 8, '0'), 'old-' || g, 'an earlier notification', \
              now() - interval '2 days', now() - interval '1 day' \
       FROM generate_series($1::bigint, $2::bigint) g RETURNING user_id, id, created_at), \
     i AS (INSERT INTO inbox_item (user_id, notification_id, created_at, read_at) \
           SELECT user_id, id, created_at, created_at FROM n), \
     t AS ( \
       INSERT INTO delivery_task (user_id, notification_id, channel, state, next_attempt_at, max_attempts, \
         attempt_count, last_attempt_no, provider_msg_id, created_at, updated_at) \
       SELECT n.user_id, n.id, c, 'SENT', NULL, 8, 1, 1, 'old-' || n.id || '-' || c, n.created_at, n.created_at \
       FROM n CROSS JOIN unnest(ARRAY['push', 'sms']) c \
       RETURNING user_id, id, created_at) \
     INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, outcome, \
       started_at, finished_at) \
     SELECT user_id, id, 1, lpad(to_hex(id), 32, '0')::uuid, 'SEND', 'old-worker', 'ACCEPTED', created_at, created_at \
     FROM t";
