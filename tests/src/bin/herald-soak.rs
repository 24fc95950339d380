//! The fault soak of issue 9: real `herald` processes on one PostgreSQL, stand-ins that answer at
//! random, submitters that retry every unanswered submit, and faults — then a ledger in Jepsen's
//! terms that must show no lost notification, no duplicate and no lie about what was sent.
//!
//! `scripts/soak.sh` builds the programs, starts a private PostgreSQL cluster (so it can be restarted
//! without disturbing anything else) and runs this driver:
//!
//! ```text
//! herald-soak --herald target/debug/herald --admin-url postgres://…/postgres \
//!             --pg-ctl …/pg_ctl --pg-data … --pg-log … --workdir DIR [--minutes M] [--plant NAME]
//! ```
//!
//! # Design
//! * **Processes.** One `herald serve` (API and workers) plus `--workers` `herald worker` processes,
//!   all started from the real binary with a generated TOML file, on a fresh database migrated with
//!   `herald migrate`. With `--plant NAME` (the negative control) the extra workers are this binary in
//!   `planted-worker` mode instead: Herald's own `Worker` over the same configuration, whose store is
//!   wrapped in a decorator that plants one bug ([`Plant`]). The normal run never uses it.
//! * **Stand-ins** run in this process (real loopback HTTP servers from `herald_standin`) in
//!   chaos mode: every request draws accept, accept-then-answer-after-the-timeout, 503 / 429 before
//!   accepting, drop before / after accepting, garbage after accepting; sms queries draw 503. Seven
//!   channels: `push` (webhook, idempotent), `sms` (queryable, with a query lag just below its
//!   `query_consistency`), `miao` (Miaotixing, neither), `digest` (webhook with
//!   `digest = { instant_per_hour = 3 }`, fed with concurrent bursts on one thread), `slow`
//!   (Miaotixing with `min_interval_ms = 200`, the egress-interval channel), `mail` (e-mail over the
//!   SMTP stand-in, whose draws read as SMTP: 421 to MAIL, 451/550 to RCPT, 451 after the final `.`, a
//!   drop at RCPT or after the `.`, a late or garbage reply to it) and `webpush` (Web Push to the push
//!   service stand-in, which verifies VAPID and decrypts before it counts anything, and also draws 410).
//! * **Submitters** POST `/v1/notifications` and `/v1/events` with the service token; a submit whose
//!   answer did not come back (connection error, timeout, 5xx, server down) is repeated with the same
//!   event key until answered. Users get their destinations with `PUT /v1/users/{u}/channels/{c}`
//!   (encrypted by the server), retried the same way. Miaotixing has no reference on the wire, so every
//!   `miao` and `slow` notification goes to a user of its own with a destination of its own: a send to
//!   that destination is a send of that one task. E-mail is counted by the reference in the Message-ID,
//!   Web Push by the `Topic` derived from the reference; every `webpush` notification goes to a user with a
//!   fresh subscription of its own, so a 410 switches off only that one.
//! * **Faults**, while submitting: SIGKILL of a worker process (then a replacement starts),
//!   SIGSTOP/SIGCONT of a worker (some pauses longer than the lease, so the task is taken over as in
//!   SPEC §10 P2), `pg_terminate_backend` of every backend of the soak database except the driver's own
//!   (`application_name = herald-soak`), and one `pg_ctl restart -m fast` in the middle of the run. A
//!   `herald` process that dies by itself is restarted and counted.
//! * **Settle.** After the faults stop (stand-ins keep misbehaving), the driver waits, bounded, until no
//!   task is SENDING or due to run.
//! * **Ledger**, from three independent records: what the driver submitted and was answered; what
//!   Herald says (`GET /v1/notifications/{id}`, `GET /v1/review`, and the database for inbox rows,
//!   digest membership and task counts); what the stand-ins really accepted (`sends_for(ref)`,
//!   `sends_to(dest)`, `messages()`, `request_times()`). Each check prints `check … value … ok` or
//!   `VIOLATION`, then the fault counts, then `soak: N passed, N failed`; the exit status is non-zero on
//!   any violation.
//!
//! Nothing secret is printed: destinations and tokens stay in memory and in the generated
//! configuration file (mode 0600, in the work folder).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _};
use async_trait::async_trait;
use herald_channels::kinds::webpush::{topic, VapidKey};
use herald_domain::{Observation, TaskState, Transition};
use herald_ports::prelude::*;
use herald_ports::store::GiveBack;
use herald_ports::{ClaimBatch, ClaimRequest, FinishRecord, FinishResult, StoreError};
use herald_postgres::PgStore;
use herald_standin::{Chaos, Kind, SmtpStandIn, StandIn, WebPushService};
use herald_tests::peers::status::{StatusReceiver, TEST_SECRET};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions as _, PgPool, Row};
use tokio::process::{Child, Command};

/// The driver's `application_name`: its own backends are spared by `pg_terminate_backend`.
const DRIVER_APP: &str = "herald-soak";
/// The test key of the tests crate: fine for a throw-away database.
const KEY_ID: &str = herald_tests::world::TEST_KEY_ID;
const KEY: &str = herald_tests::world::TEST_KEY;
/// Channel client timeout; the lease must be at least this plus 2000 ms.
const TIMEOUT_MS: u64 = 400;
const LEASE_MS: u64 = 2_500;
/// An accepted-then-hanging stand-in answers only after this (longer than the timeout, finite).
const HANG: Duration = Duration::from_millis(1_500);
/// The sms stand-in's query lag: an acceptance is visible to queries only this long after it was
/// recorded. Close below the channel's `query_consistency`, so the channel keeps its contract but a
/// "not found" believed too early (counted from before the uncertain call could have been accepted,
/// issue 9 defect 2) leads to a second real send.
const QUERY_LAG: Duration = Duration::from_millis(1_200);
const QUERY_CONSISTENCY_MS: u64 = 1_500;
/// The digest rule of the `digest` channel.
const DIGEST_LIMIT: usize = 3;
const DIGEST_WINDOW: Duration = Duration::from_secs(3_600);
/// The egress interval of the `slow` channel.
const SLOW_INTERVAL: Duration = Duration::from_millis(200);
/// Its egress guard. The interval holds between actual calls only while a call's whole delay — from its
/// claim's clock read to its request reaching the channel — stays under the guard (docs/ARCHITECTURE.md,
/// "Guard"): the worker checks the part before the send, nothing can check the part after it. On this
/// 2-core machine, saturated by the soak itself and by builds, that delay reached 127 ms (a gap of 173 ms
/// with a 100 ms guard in a 20-minute run; 181 ms with the default 20 ms), so the guard is set above the
/// worst delay seen, as an operator must for their channel. The check itself stays strict: every gap
/// measured at the stand-in must be at least the interval.
const SLOW_GUARD: Duration = Duration::from_millis(300);
const REGULAR_USERS: usize = 24;
/// Users of the `mail` channel (a pool, like the regular users).
const MAIL_USERS: usize = 8;
/// Chaos weight of a 410 on the Web Push service (an expired subscription) and of a 550 to `RCPT` on the
/// SMTP server (the draw `410` reads as "no such mailbox" there).
const GONE_WEIGHT: u32 = 4;
const DIGEST_USERS: usize = 6;

/// Short retention (issue 42): every user's finished notifications leave with their tasks and attempts
/// after this, so the tables stay bounded while the soak runs.
const FINISHED_AFTER: Duration = Duration::from_secs(20);
/// How often the processes that run workers try to purge (one at a time, under the purge's lease).
const PURGE_INTERVAL: Duration = Duration::from_secs(2);
/// The boundaries after an erasure, as short: content, then records, then the tombstone.
const CONTENT_AFTER_ERASURE: Duration = Duration::from_secs(20);
const RECORDS_AFTER_ERASURE: Duration = Duration::from_secs(30);
const TOMBSTONE_AFTER_ERASURE: Duration = Duration::from_secs(40);
/// What one purge pass may take beyond its interval on this saturated machine, a PostgreSQL restart (a
/// pass that fails is retried at the next interval) included.
const PURGE_SLACK: Duration = Duration::from_secs(10);
/// How often the driver samples the sizes of `delivery_task` and `delivery_attempt`.
const SIZE_EVERY: Duration = Duration::from_secs(2);
/// At most this many of the regular users are erased in a run (the others keep the traffic going).
const MAX_ERASED: usize = 8;
/// Every kind of status event; the run's subscription asks for all of them.
const STATUS_KINDS: [&str; 7] = ["accepted", "refused", "parked", "resolved", "sent_again", "suppressed", "expired"];
/// How long the ledger waits for the dispatchers to post every event written.
const STATUS_DRAIN: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------------------------------ options

/// A bug planted in the control run's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plant {
    /// NC3: the finish write by task id only, without the state and token condition.
    FinishWithoutToken,
    /// B3: a refusal that follows an uncertain attempt is written down as FAILED.
    RefusalAfterUncertaintyFailed,
    /// Issue 42: the claim reads every user as not erased, so a task of an erased user that was in a
    /// holder's hands at the erasure and comes back for a retry is handed to its channel again.
    ClaimIgnoresErasure,
    /// Issue 46: the status subscription leaves out `refused` (Herald's own workers run): the events the
    /// ledger expects for refused tasks never arrive.
    StatusWithoutRefused,
}

impl Plant {
    fn parse(name: &str) -> anyhow::Result<Plant> {
        match name {
            "finish-without-token" => Ok(Plant::FinishWithoutToken),
            "refusal-after-uncertainty-failed" => Ok(Plant::RefusalAfterUncertaintyFailed),
            "claim-ignores-erasure" => Ok(Plant::ClaimIgnoresErasure),
            "status-without-refused" => Ok(Plant::StatusWithoutRefused),
            _ => bail!(
                "unknown plant {name}: finish-without-token | refusal-after-uncertainty-failed | claim-ignores-erasure \
                 | status-without-refused"
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Plant::FinishWithoutToken => "finish-without-token",
            Plant::RefusalAfterUncertaintyFailed => "refusal-after-uncertainty-failed",
            Plant::ClaimIgnoresErasure => "claim-ignores-erasure",
            Plant::StatusWithoutRefused => "status-without-refused",
        }
    }

    /// Whether the plant lives in the workers' store (they run as `planted-worker`); the others change
    /// only the configuration.
    fn in_store(self) -> bool {
        self != Plant::StatusWithoutRefused
    }
}

struct Options {
    herald: PathBuf,
    admin_url: String,
    pg_ctl: PathBuf,
    pg_data: PathBuf,
    pg_log: PathBuf,
    workdir: PathBuf,
    /// Length of the fault phase.
    faults_for: Duration,
    /// Upper bound of the settle phase.
    settle_for: Duration,
    workers: usize,
    seed: u64,
    plant: Option<Plant>,
}

const USAGE: &str = "usage: herald-soak --herald PATH --admin-url URL --pg-ctl PATH --pg-data DIR --pg-log FILE \
                     --workdir DIR [--minutes M] [--workers K] [--seed N] [--plant NAME]\n       \
                     herald-soak planted-worker --config FILE --plant NAME";

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut values: HashMap<&str, &str> = HashMap::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        values.insert(flag.as_str(), value.as_str());
    }
    let need = |key: &str| values.get(key).map(|v| (*v).to_owned()).with_context(|| format!("{key} missing\n{USAGE}"));
    let minutes: Option<f64> = values.get("--minutes").map(|m| m.parse()).transpose()?;
    // Short run: 90 s of faults and at most 50 s of settling, within 3 minutes with start-up.
    let (faults_for, settle_for) = match minutes {
        None => (Duration::from_secs(90), Duration::from_secs(50)),
        Some(m) => {
            let total = Duration::from_secs_f64((m * 60.0).max(60.0));
            let settle = Duration::from_secs(90).min(total / 3);
            (total.saturating_sub(settle), settle)
        }
    };
    Ok(Options {
        herald: need("--herald")?.into(),
        admin_url: need("--admin-url")?,
        pg_ctl: need("--pg-ctl")?.into(),
        pg_data: need("--pg-data")?.into(),
        pg_log: need("--pg-log")?.into(),
        workdir: need("--workdir")?.into(),
        faults_for,
        settle_for,
        workers: values.get("--workers").map(|w| w.parse()).transpose()?.unwrap_or(2),
        seed: values.get("--seed").map(|s| s.parse()).transpose()?.unwrap_or_else(|| u64::from(std::process::id())),
        plant: values.get("--plant").map(|p| Plant::parse(p)).transpose()?,
    })
}

// ------------------------------------------------------------------------------------------ random

/// A small seeded generator (splitmix64), enough for choosing mixes and pauses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

// ------------------------------------------------------------------------------------------ stand-ins

struct StandIns {
    push: StandIn,
    sms: StandIn,
    miao: StandIn,
    digest: StandIn,
    slow: StandIn,
    mail: SmtpStandIn,
    webpush: Arc<WebPushService>,
}

impl StandIns {
    async fn start(seed: u64, plant: Option<Plant>) -> StandIns {
        let push = StandIn::start(Kind::Push).await;
        let sms = StandIn::start(Kind::Sms).await;
        let miao = StandIn::start(Kind::Miaotixing).await;
        let digest = StandIn::start(Kind::Push).await;
        let slow = StandIn::start(Kind::Miaotixing).await;
        let mut chaos = Chaos::mixed(seed, HANG);
        if matches!(plant, Some(Plant::RefusalAfterUncertaintyFailed | Plant::ClaimIgnoresErasure)) {
            // More uncertain calls followed by refusals: the planted damage becomes likely (for the erasure's
            // plant: more calls in flight at an erasure come back for another attempt).
            chaos = Chaos { accept: 30, hang: 15, unavailable: 20, too_many: 10, drop_after: 15, garbage: 10, ..chaos };
        }
        for (i, standin) in [&push, &sms, &miao, &digest, &slow].into_iter().enumerate() {
            standin.set_chaos(Some(Chaos { seed: seed.wrapping_add(i as u64 + 1), ..chaos.clone() }));
        }
        sms.set_query_lag(QUERY_LAG);
        let mail = SmtpStandIn::start().await.expect("the SMTP stand-in binds a loopback port");
        let webpush = WebPushService::start().await.expect("the Web Push stand-in binds a loopback port");
        mail.set_chaos(Some(Chaos { seed: seed.wrapping_add(6), gone: GONE_WEIGHT, ..chaos.clone() }));
        webpush.set_chaos(Some(Chaos { seed: seed.wrapping_add(7), gone: GONE_WEIGHT, ..chaos }));
        StandIns { push, sms, miao, digest, slow, mail, webpush: Arc::new(webpush) }
    }

    fn by_channel(&self, channel: &str) -> Option<&StandIn> {
        match channel {
            "push" => Some(&self.push),
            "sms" => Some(&self.sms),
            "miao" => Some(&self.miao),
            "digest" => Some(&self.digest),
            "slow" => Some(&self.slow),
            _ => None,
        }
    }

    async fn shutdown(self) {
        for standin in [self.push, self.sms, self.miao, self.digest, self.slow] {
            standin.shutdown().await;
        }
        self.mail.shutdown().await;
        if let Ok(webpush) = Arc::try_unwrap(self.webpush) {
            webpush.shutdown().await;
        }
    }

    /// What one task's channel really accepted for it, and its wire reference (`None`: known by
    /// destination, Miaotixing). E-mail is counted by the Message-ID's reference, Web Push by the Topic.
    fn accepted(&self, task: &TaskLine, destinations: &HashMap<(String, String), String>) -> Option<(u64, bool)> {
        match task.channel.as_str() {
            "mail" => Some((self.mail.sends_for(&task.reference), true)),
            "webpush" => Some((self.webpush.sends_for(&topic(&task.reference)), true)),
            channel => {
                let standin = self.by_channel(channel)?;
                Some(match standin.kind() {
                    Kind::Miaotixing => (
                        destinations.get(&(task.user.clone(), task.channel.clone())).map_or(0, |d| standin.sends_to(d)),
                        false,
                    ),
                    Kind::Push | Kind::Sms => (standin.sends_for(&task.reference), true),
                })
            }
        }
    }
}

// ------------------------------------------------------------------------------------------ config

struct Secrets {
    service_token: String,
    admin_token: String,
    /// The `webpush` channel's VAPID private key, generated per run.
    vapid_key: String,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The status subscription of the run: the receiver's URL, the secret's file and the kinds asked for.
struct StatusSubscription {
    url: String,
    secret_file: PathBuf,
    kinds: Vec<&'static str>,
}

fn config_text(
    db_url: &str,
    listen: u16,
    secrets: &Secrets,
    standins: &StandIns,
    status: &StatusSubscription,
    concurrency: u32,
) -> String {
    let channel = |name: &str, kind: &str, url: String, extra: &str| {
        format!(
            "[[channel]]\nname = \"{name}\"\nkind = \"{kind}\"\nurl = \"{url}\"\ntimeout_ms = {TIMEOUT_MS}\n\
             max_attempts = 8\nretry_base_ms = 100\nretry_cap_ms = 1000\nrefusal_5xx = \"before_acceptance\"\n{extra}\n"
        )
    };
    let mut text = format!(
        "[database]\nurl = \"{db_url}\"\nmax_connections = 12\napi_max_connections = 4\n\n[server]\nlisten = \"127.0.0.1:{listen}\"\n\
         rate_per_second = 1000000\nrate_burst = 1000000\n\n\
         [auth]\nservice_tokens = [\"{}\"]\nadmin_tokens = [\"{}\"]\nuser_token_secret = \"soak-user-token-secret-{}\"\n\n\
         [keys]\ncurrent = \"{KEY_ID}\"\n{KEY_ID} = \"{KEY}\"\n\n\
         [worker]\nconcurrency = {concurrency}\nlease_ms = {LEASE_MS}\nbatch = 4\npoll_ms = 200\n\n\
         [log]\nformat = \"human\"\nlevel = \"warn\"\n\n\
         [retention]\nfinished_after = \"{}s\"\ncontent_after_erasure = \"{}s\"\nrecords_after_erasure = \"{}s\"\n\
         tombstone_after_erasure = \"{}s\"\ninterval = \"{}s\"\nbatch = 200\n\n",
        secrets.service_token,
        secrets.admin_token,
        secrets.admin_token,
        FINISHED_AFTER.as_secs(),
        CONTENT_AFTER_ERASURE.as_secs(),
        RECORDS_AFTER_ERASURE.as_secs(),
        TOMBSTONE_AFTER_ERASURE.as_secs(),
        PURGE_INTERVAL.as_secs()
    );
    text += &channel("push", "webhook", standins.push.base_url(), "min_interval_ms = 0");
    text += &channel(
        "sms",
        "queryable",
        standins.sms.base_url(),
        &format!("min_interval_ms = 0\nquery_consistency = {QUERY_CONSISTENCY_MS}"),
    );
    text += &channel("miao", "miaotixing", standins.miao.base_url(), "min_interval_ms = 0");
    text += &channel(
        "digest",
        "webhook",
        standins.digest.base_url(),
        &format!("min_interval_ms = 0\ndigest = {{ instant_per_hour = {DIGEST_LIMIT} }}"),
    );
    text += &format!(
        "[[channel]]\nname = \"mail\"\nkind = \"email\"\nhost = \"127.0.0.1\"\nport = {}\ntls = \"none\"\n\
         from = \"herald@soak.example.org\"\ntimeout_ms = {TIMEOUT_MS}\nmax_attempts = 8\nretry_base_ms = 100\n\
         retry_cap_ms = 1000\n\n",
        standins.mail.port()
    );
    text += &format!(
        "[[channel]]\nname = \"webpush\"\nkind = \"webpush\"\nvapid_private_key = \"{}\"\n\
         vapid_subject = \"mailto:ops@soak.example.org\"\nallow_loopback_endpoints = true\n\
         timeout_ms = {TIMEOUT_MS}\nmax_attempts = 8\nretry_base_ms = 100\nretry_cap_ms = 1000\n\
         refusal_5xx = \"before_acceptance\"\n\n",
        secrets.vapid_key
    );
    text += &channel(
        "slow",
        "miaotixing",
        standins.slow.base_url(),
        &format!("min_interval_ms = {}\negress_guard_ms = {}", SLOW_INTERVAL.as_millis(), SLOW_GUARD.as_millis()),
    );
    let kinds: Vec<String> = status.kinds.iter().map(|k| format!("\"{k}\"")).collect();
    text += &format!(
        "[[status_subscription]]\nname = \"soak\"\nurl = \"{}\"\nsecret_file = \"{}\"\nevents = [{}]\n\
         allow_loopback_endpoint = true\n\n[status_events]\nretry_base_ms = 100\nretry_cap_ms = 1000\nmax_posts = 40\n\n",
        status.url,
        status.secret_file.display(),
        kinds.join(", ")
    );
    text
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

// ------------------------------------------------------------------------------------------ processes

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Serve,
    Worker,
}

struct Proc {
    role: Role,
    name: String,
    child: Child,
}

impl Proc {
    fn pid(&self) -> Option<Pid> {
        self.child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw)
    }
}

/// Starts and restarts the Herald processes.
struct Fleet {
    herald: PathBuf,
    soak: PathBuf,
    workdir: PathBuf,
    config: PathBuf,
    plant: Option<Plant>,
    procs: Vec<Proc>,
    started: u64,
}

impl Fleet {
    fn spawn(&mut self, role: Role) -> anyhow::Result<()> {
        self.started += 1;
        let name = match role {
            Role::Serve => format!("serve-{}", self.started),
            Role::Worker => format!("worker-{}", self.started),
        };
        let log = std::fs::File::create(self.workdir.join(format!("{name}.log")))?;
        let mut command = match (role, self.plant) {
            (Role::Worker, Some(plant)) => {
                let mut c = Command::new(&self.soak);
                c.arg("planted-worker").arg("--config").arg(&self.config).arg("--plant").arg(plant.name());
                c
            }
            (Role::Worker, None) => {
                let mut c = Command::new(&self.herald);
                // The Web Push channel posts to the push stand-in on loopback (`allow_loopback_endpoints`).
                c.arg("--config").arg(&self.config).arg("worker").arg("--stand-ins");
                c
            }
            (Role::Serve, plant) => {
                let mut c = Command::new(&self.herald);
                c.arg("--config").arg(&self.config).arg("serve").arg("--stand-ins");
                if plant == Some(Plant::ClaimIgnoresErasure) {
                    // Only the planted workers claim: `serve`'s own workers (woken at once by every
                    // submission) would otherwise take most retries of an erased user's task, and settle them.
                    c.arg("--no-worker");
                }
                c
            }
        };
        command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        let child = command.spawn().with_context(|| format!("cannot start {name}"))?;
        if let Some(id) = child.id() {
            let mut pids = std::fs::OpenOptions::new().append(true).create(true).open(self.workdir.join("pids"))?;
            std::io::Write::write_all(&mut pids, format!("{id}\n").as_bytes())?;
        }
        self.procs.push(Proc { role, name, child });
        Ok(())
    }

    /// Restarts every process that exited by itself; returns how many did.
    fn reap(&mut self) -> anyhow::Result<u64> {
        let mut died = Vec::new();
        self.procs.retain_mut(|p| match p.child.try_wait() {
            Ok(Some(status)) => {
                println!("soak: {} exited by itself ({status}); restarting it", p.name);
                died.push(p.role);
                false
            }
            _ => true,
        });
        for role in &died {
            self.spawn(*role)?;
        }
        Ok(died.len() as u64)
    }

    fn workers(&self) -> Vec<usize> {
        self.procs.iter().enumerate().filter(|(_, p)| p.role == Role::Worker).map(|(i, _)| i).collect()
    }

    async fn stop_all(&mut self) {
        for p in &self.procs {
            if let Some(pid) = p.pid() {
                let _ = kill(pid, Signal::SIGCONT);
                let _ = kill(pid, Signal::SIGTERM);
            }
        }
        for p in &mut self.procs {
            if tokio::time::timeout(Duration::from_secs(5), p.child.wait()).await.is_err() {
                let _ = p.child.start_kill();
                let _ = p.child.wait().await;
            }
        }
        self.procs.clear();
    }
}

// ------------------------------------------------------------------------------------------ records

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Mix {
    Regular,
    Event,
    Miao,
    Slow,
    Digest,
    Mail,
    WebPush,
}

impl Mix {
    fn channels(self) -> &'static [&'static str] {
        match self {
            Mix::Regular | Mix::Event => &["push", "sms"],
            Mix::Miao => &["miao"],
            Mix::Slow => &["slow"],
            Mix::Digest => &["digest"],
            Mix::Mail => &["mail"],
            Mix::WebPush => &["webpush"],
        }
    }
}

/// One (user, event key) the driver submitted, and every notification id an answer named for it (the
/// API's opaque ids).
#[derive(Debug)]
struct Submitted {
    mix: Mix,
    answered: Vec<String>,
    /// Submits of it that got no answer and were repeated.
    retries: u64,
}

#[derive(Default)]
struct Ledger {
    submitted: Mutex<BTreeMap<(String, String), Submitted>>,
    /// Destinations by (user, channel); never printed.
    destinations: Mutex<HashMap<(String, String), String>>,
    unanswered_http: AtomicU64,
    rejected_4xx: AtomicU64,
}

struct Api {
    client: reqwest::Client,
    base: String,
    service: String,
    admin: String,
}

/// What an API call came back with: an answer (any status below 500), or nothing usable.
enum Answer {
    Answered(u16, Value),
    NotAnswered,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, token: &str, body: Option<&Value>) -> Answer {
        let mut request = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(body);
        }
        match request.send().await {
            Ok(response) if response.status().is_server_error() => Answer::NotAnswered,
            Ok(response) => {
                let status = response.status().as_u16();
                match response.json::<Value>().await {
                    Ok(value) => Answer::Answered(status, value),
                    Err(_) => Answer::NotAnswered,
                }
            }
            Err(_) => Answer::NotAnswered,
        }
    }

    /// Repeats a request until it is answered or `deadline` passes.
    async fn until_answered(
        &self,
        ledger: &Ledger,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
        deadline: Instant,
    ) -> (Option<(u16, Value)>, u64) {
        let mut retries = 0;
        loop {
            if let Answer::Answered(status, value) = self.call(method.clone(), path, token, body).await {
                return (Some((status, value)), retries);
            }
            ledger.unanswered_http.fetch_add(1, Ordering::Relaxed);
            if Instant::now() >= deadline {
                return (None, retries);
            }
            retries += 1;
            tokio::time::sleep(Duration::from_millis(100 + 50 * retries.min(10))).await;
        }
    }
}

// ------------------------------------------------------------------------------------------ submitters

struct Submitter {
    api: Arc<Api>,
    /// Makes each `webpush` user's subscription, as a browser would.
    webpush: Arc<WebPushService>,
    ledger: Arc<Ledger>,
    run: String,
    deadline: Instant,
}

impl Submitter {
    async fn put_pref(&self, user: &str, channel: &str) -> bool {
        let destination = match channel {
            "mail" => format!("{user}-{}@mail.example.org", self.run),
            "webpush" => self.webpush.subscribe(),
            _ => format!("{channel}-{}-{user}", self.run),
        };
        self.ledger
            .destinations
            .lock()
            .expect("lock")
            .insert((user.to_owned(), channel.to_owned()), destination.clone());
        let body = json!({ "destination": destination, "enabled": true });
        let path = format!("/v1/users/{user}/channels/{channel}");
        let (answer, _) = self
            .api
            .until_answered(&self.ledger, reqwest::Method::PUT, &path, &self.api.admin, Some(&body), self.deadline)
            .await;
        matches!(answer, Some((200..=299, _)))
    }

    fn record(&self, user: &str, event_key: &str, mix: Mix, id: Option<String>, retries: u64) {
        let mut submitted = self.ledger.submitted.lock().expect("lock");
        let entry = submitted.entry((user.to_owned(), event_key.to_owned())).or_insert(Submitted {
            mix,
            answered: Vec::new(),
            retries: 0,
        });
        entry.retries += retries;
        if let Some(id) = id {
            entry.answered.push(id);
        }
    }

    async fn notify(&self, user: &str, event_key: &str, mix: Mix, thread: Option<&str>) {
        let mut body = json!({ "user_id": user, "event_key": event_key, "body": format!("soak {event_key}"),
                               "ttl_seconds": 3600 });
        if let Some(thread) = thread {
            body["thread_key"] = json!(thread);
        }
        self.record(user, event_key, mix, None, 0);
        let (answer, retries) = self
            .api
            .until_answered(
                &self.ledger,
                reqwest::Method::POST,
                "/v1/notifications",
                &self.api.service,
                Some(&body),
                self.deadline,
            )
            .await;
        let id = match answer {
            Some((200 | 201, value)) => value["notification_id"].as_str().map(str::to_owned),
            Some(_) => {
                self.ledger.rejected_4xx.fetch_add(1, Ordering::Relaxed);
                None
            }
            None => None,
        };
        self.record(user, event_key, mix, id, retries);
    }

    async fn event(&self, users: &[String], event_key: &str) {
        let body = json!({ "event_key": event_key, "recipients": users, "body": format!("soak {event_key}"),
                           "ttl_seconds": 3600 });
        for user in users {
            self.record(user, event_key, Mix::Event, None, 0);
        }
        let (answer, retries) = self
            .api
            .until_answered(
                &self.ledger,
                reqwest::Method::POST,
                "/v1/events",
                &self.api.service,
                Some(&body),
                self.deadline,
            )
            .await;
        match answer {
            Some((200 | 201, value)) => {
                for entry in value["notifications"].as_array().into_iter().flatten() {
                    let user = entry["user_id"].as_str().unwrap_or_default();
                    // Each entry is the recipient's user id with the notification's fields beside it.
                    let id = entry["notification_id"].as_str().map(str::to_owned);
                    self.record(user, event_key, Mix::Event, id, retries);
                }
            }
            Some(_) => {
                self.ledger.rejected_4xx.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// Submits until `stop_at`, drawing what to submit from `rng`.
    async fn run(self: Arc<Self>, index: usize, mut rng: Rng, stop_at: Instant, counter: Arc<AtomicU64>) {
        let mut n = 0u64;
        while Instant::now() < stop_at {
            n += 1;
            let key = format!("{}-s{index}-{n}", self.run);
            let draw = rng.below(100);
            if draw < 38 {
                let user = format!("r{}", rng.below(REGULAR_USERS as u64));
                self.notify(&user, &key, Mix::Regular, None).await;
            } else if draw < 46 {
                let users: Vec<String> = (0..3).map(|_| format!("r{}", rng.below(REGULAR_USERS as u64))).collect();
                let mut unique = users.clone();
                unique.sort();
                unique.dedup();
                self.event(&unique, &key).await;
            } else if draw < 58 {
                // A user and destination of its own: a Miaotixing send is identified by its destination.
                let user = format!("m{index}-{n}");
                if self.put_pref(&user, "miao").await {
                    self.notify(&user, &key, Mix::Miao, None).await;
                }
            } else if draw < 66 {
                let user = format!("w{index}-{n}");
                if self.put_pref(&user, "slow").await {
                    self.notify(&user, &key, Mix::Slow, None).await;
                }
            } else if draw < 74 {
                let user = format!("e{}", rng.below(MAIL_USERS as u64));
                self.notify(&user, &key, Mix::Mail, None).await;
            } else if draw < 82 {
                // A subscription of its own: a 410 switches off this user's channel only.
                let user = format!("p{index}-{n}");
                if self.put_pref(&user, "webpush").await {
                    self.notify(&user, &key, Mix::WebPush, None).await;
                }
            } else {
                // A burst of concurrent submits on one (user, thread): the digest limit under concurrency.
                let user = format!("d{}", rng.below(DIGEST_USERS as u64));
                let thread = format!("t{index}-{n}");
                let burst = 4 + rng.below(5);
                let mut joins = Vec::new();
                for b in 0..burst {
                    let me = Arc::clone(&self);
                    let (user, thread, key) = (user.clone(), thread.clone(), format!("{key}-b{b}"));
                    joins.push(tokio::spawn(async move { me.notify(&user, &key, Mix::Digest, Some(&thread)).await }));
                }
                for join in joins {
                    let _ = join.await;
                }
            }
            counter.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(rng.millis(100, 500)).await;
        }
    }
}

// ------------------------------------------------------------------------------------------ faults

#[derive(Default)]
struct Faults {
    kills: AtomicU64,
    stops: AtomicU64,
    long_stops: AtomicU64,
    terminated: AtomicU64,
    pg_restarts: AtomicU64,
    deaths: AtomicU64,
    /// Every stop longer than the lease: which process, from when until its SIGCONT.
    long_stop_spans: Mutex<Vec<Stop>>,
}

/// A worker process stopped (SIGSTOP) from `from` until `until` (wall clock).
#[derive(Clone, Copy, Debug)]
struct Stop {
    pid: u32,
    from: SystemTime,
    until: SystemTime,
}

/// Slack for comparing the wall clocks of the soak, its stand-ins and PostgreSQL (one machine).
const CLOCK_SLACK: Duration = Duration::from_millis(100);

/// Whether two acceptances of one task are the lease's known gap (ARCHITECTURE "Known limits"), not a
/// failure of Herald's: the one superseded attempt that the channel accepted late (`late`: its
/// `lease_owner` and `started_at`) belongs to a worker process stopped after that attempt began, through
/// its lease's end, and the later of the two requests reached the stand-in only after the process was
/// continued, while neither reached it before the stop — it was written by a process frozen between its
/// last lease check and its send (a holder stopped *after* its call, SPEC §10 P2, sent before it). Herald
/// recorded it (the late outcome) and warned (`herald_late_acceptances_total`). Anything else — more
/// acceptances, no late acceptance, a holder not frozen through its lease end, or a request that
/// arrived while it was still frozen — stays a violation.
fn frozen_between_check_and_send(late: &[(String, SystemTime)], arrivals: &[SystemTime], stops: &[Stop]) -> bool {
    let ([(owner, started)], [_, _]) = (late, arrivals) else { return false };
    // Worker ids are `{prefix}-{pid}-{loop}` (app/src/compose.rs).
    let Some(pid) = owner.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok()) else { return false };
    let lease_end = *started + Duration::from_millis(LEASE_MS);
    let Some(&last) = arrivals.iter().max() else { return false };
    stops.iter().any(|stop| {
        stop.pid == pid
            && stop.from + CLOCK_SLACK >= *started
            && stop.from <= lease_end
            && stop.until >= lease_end
            && arrivals.iter().all(|&arrival| arrival > stop.from)
            && last + CLOCK_SLACK >= stop.until
    })
}

/// The tables whose rows the purge removes: the soak keeps a copy of every removed row (`soak_gone_*`, filled
/// by triggers of its own in its throw-away database), so the ledger still judges what was purged, and the
/// views `soak_all_*` read both.
const PURGED_TABLES: [&str; 5] = ["notification", "inbox_item", "delivery_task", "delivery_attempt", "digest_member"];

async fn keep_what_the_purge_removes(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query(
        "CREATE FUNCTION soak_keep_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           EXECUTE format('INSERT INTO %I SELECT * FROM old_rows', 'soak_gone_' || TG_TABLE_NAME); RETURN NULL; END $$",
    )
    .execute(pool)
    .await?;
    for table in PURGED_TABLES {
        for statement in [
            format!("CREATE TABLE soak_gone_{table} (LIKE {table})"),
            format!(
                "CREATE TRIGGER soak_keep_removed AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows \
                 FOR EACH STATEMENT EXECUTE FUNCTION soak_keep_removed()"
            ),
            format!("CREATE VIEW soak_all_{table} AS SELECT * FROM {table} UNION ALL SELECT * FROM soak_gone_{table}"),
        ] {
            sqlx::query(&statement).execute(pool).await?;
        }
    }
    Ok(())
}

/// One sample of the tables' sizes while the soak runs.
#[derive(Clone, Copy, Debug)]
struct SizeSample {
    at: Duration,
    tasks: i64,
    attempts: i64,
    /// Rows of notifications the purge should have removed by now: due for it (finished — no task due, in
    /// a holder's hands or waiting for a person — and made more than [`FINISHED_AFTER`] ago) for longer
    /// than [`overdue_after`]: made before `FINISHED_AFTER + overdue_after()` and not written to since
    /// `overdue_after()`.
    overdue_tasks: i64,
    overdue_attempts: i64,
    /// Tasks made so far (the identity's last value).
    created: i64,
}

/// How long after a notification finished the purge has to remove it: two purge intervals and the slack.
fn overdue_after() -> Duration {
    PURGE_INTERVAL * 2 + PURGE_SLACK
}

async fn sample_sizes(pool: &PgPool, at: Duration) -> Option<SizeSample> {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let row: (i64, i64, i64, i64, Option<i64>) = sqlx::query_as(
        "WITH overdue AS MATERIALIZED (SELECT n.user_id, n.id FROM notification n \
           WHERE n.created_at < now() - $1 * interval '1 millisecond' AND NOT EXISTS (SELECT 1 FROM delivery_task u \
             WHERE u.user_id = n.user_id AND u.notification_id = n.id AND (u.state IN ('PENDING', 'SENDING') \
               OR u.needs_review OR u.next_attempt_at IS NOT NULL OR u.updated_at > now() - $2 * interval '1 millisecond'))) \
         SELECT (SELECT count(*) FROM delivery_task), (SELECT count(*) FROM delivery_attempt), \
           (SELECT count(*) FROM delivery_task t JOIN overdue o ON o.user_id = t.user_id AND o.id = t.notification_id), \
           (SELECT count(*) FROM delivery_attempt a JOIN delivery_task t ON t.user_id = a.user_id AND t.id = a.task_id \
              JOIN overdue o ON o.user_id = t.user_id AND o.id = t.notification_id), \
           pg_sequence_last_value(pg_get_serial_sequence('delivery_task', 'id')::regclass)",
    )
    .bind(ms(FINISHED_AFTER + overdue_after()))
    .bind(ms(overdue_after()))
    .fetch_one(pool)
    .await
    .ok()?;
    Some(SizeSample {
        at,
        tasks: row.0,
        attempts: row.1,
        overdue_tasks: row.2,
        overdue_attempts: row.3,
        created: row.4.unwrap_or(0),
    })
}

/// An erasure the driver asked for while submissions and calls were in flight, with two readings of the
/// database's clock around its commit: `requested_at` (the erasure's own `now`, read before its
/// transaction) and `committed_by` (`clock_timestamp()` read after the API answered, so at or after the
/// commit). Both come from PostgreSQL's clock; the attempts' times are that clock too (the workers' clock
/// is the database's, adapters-postgres `clock.rs`), and the stand-ins' arrival times are this host's wall
/// clock, which PostgreSQL on the same host reads: they are compared with [`CLOCK_SLACK`].
#[derive(Clone, Debug)]
struct Erased {
    user: String,
    requested_at: SystemTime,
    committed_by: SystemTime,
}

/// A time read from PostgreSQL as microseconds since the epoch (`EPOCH_MICROS`).
fn system_time(micros: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// `$1` as microseconds since the epoch, for [`system_time`].
macro_rules! epoch_micros {
    ($column:literal) => {
        concat!("(extract(epoch FROM ", $column, ") * 1000000)::bigint")
    };
}

/// Erases `user` through the API (repeated until answered) and reads the erasure's two times.
async fn erase(api: &Api, ledger: &Ledger, pool: &PgPool, user: &str, deadline: Instant) -> Option<Erased> {
    let path = format!("/v1/users/{user}/erasure");
    let (answer, _) = api.until_answered(ledger, reqwest::Method::POST, &path, &api.admin, None, deadline).await;
    if !matches!(answer, Some((200 | 202, _))) {
        return None;
    }
    let (requested_at, committed_by): (i64, i64) = db_query_retry(|| {
        sqlx::query_as(concat!(
            "SELECT ",
            epoch_micros!("requested_at"),
            ", ",
            epoch_micros!("clock_timestamp()"),
            " FROM user_erasure WHERE user_digest = sha256(convert_to($1, 'UTF8'))"
        ))
        .bind(user)
        .fetch_one(pool)
    })
    .await?;
    Some(Erased {
        user: user.to_owned(),
        requested_at: system_time(requested_at),
        committed_by: system_time(committed_by),
    })
}

/// A regular user to erase: one with a call in flight now when there is one (the case the erasure must get
/// right), else any regular user not erased yet — or, with `in_flight_only` (the control run), nobody.
async fn erasure_victim(pool: &PgPool, rng: &mut Rng, erased: &[Erased], in_flight_only: bool) -> Option<String> {
    let gone: Vec<&str> = erased.iter().map(|e| e.user.as_str()).collect();
    let in_flight: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT user_id FROM delivery_task WHERE state = 'SENDING' AND user_id LIKE 'r%' AND channel IN ('push', 'sms')",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let fresh: Vec<String> = in_flight.into_iter().filter(|u| !gone.contains(&u.as_str())).collect();
    if !fresh.is_empty() {
        return Some(fresh[rng.below(fresh.len() as u64) as usize].clone());
    }
    let left: Vec<String> =
        (0..REGULAR_USERS).map(|u| format!("r{u}")).filter(|u| !gone.contains(&u.as_str())).collect();
    (!in_flight_only && !left.is_empty()).then(|| left[rng.below(left.len() as u64) as usize].clone())
}

async fn terminate_backends(pool: &PgPool, database: &str) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> $2",
    )
    .bind(database)
    .bind(DRIVER_APP)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

async fn restart_postgres(options: &Options) -> anyhow::Result<()> {
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(&options.pg_ctl)
        .arg("-D")
        .arg(&options.pg_data)
        .arg("-l")
        .arg(&options.pg_log)
        .args(["-m", "fast", "-w", "-t", "60", "restart"])
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await?;
    if !status.success() {
        bail!("pg_ctl restart failed: {status}");
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------ main

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("planted-worker") {
        return planted_worker(&args[1..]).await;
    }
    let options = options(&args)?;
    match soak(&options).await {
        // The summary is the last line of the run.
        Ok(tally) => {
            println!("soak: {} passed, {} failed", tally.passed, tally.failed);
            if tally.failed > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
        Err(error) => {
            println!("soak: error: {error:#}");
            println!("soak: 0 passed, 1 failed");
            std::process::exit(2);
        }
    }
}

async fn connect(url: &str, database: &str, max: u32) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = url.parse::<PgConnectOptions>()?.database(database).application_name(DRIVER_APP);
    Ok(PgPoolOptions::new().max_connections(max).acquire_timeout(Duration::from_secs(10)).connect_with(options).await?)
}

/// Waits until PostgreSQL answers again (after its restart).
async fn db_query_retry<T, F, Fut>(what: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    for _ in 0..20 {
        if let Ok(value) = what().await {
            return Some(value);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

#[allow(clippy::too_many_lines)]
async fn soak(options: &Options) -> anyhow::Result<Tally> {
    let started = Instant::now();
    std::fs::create_dir_all(&options.workdir)?;
    let run = format!("k{}", options.seed % 100_000);
    let database = format!("herald_soak_{}_{}", std::process::id(), options.seed % 100_000);
    let admin = connect(&options.admin_url, "postgres", 1).await.context("cannot reach PostgreSQL")?;
    sqlx::query(&format!("CREATE DATABASE {database}")).execute(&admin).await?;
    admin.close().await;
    let db_url = {
        let parsed: PgConnectOptions = options.admin_url.parse()?;
        parsed.database(&database).to_url_lossy().to_string()
    };
    println!(
        "soak: seed {} database {database} workers {} faults {} s settle ≤ {} s{}",
        options.seed,
        options.workers,
        options.faults_for.as_secs(),
        options.settle_for.as_secs(),
        options.plant.map(|p| format!(" PLANTED BUG: {}", p.name())).unwrap_or_default()
    );

    let standins = StandIns::start(options.seed, options.plant).await;
    let secrets = Secrets {
        service_token: format!("svc-{}", uuid::Uuid::new_v4().simple()),
        admin_token: format!("adm-{}", uuid::Uuid::new_v4().simple()),
        vapid_key: VapidKey::generate().0,
    };
    let port = free_port()?;
    // The status events' receiver: the Python peer verifying every post with `standardwebhooks`.
    let receiver = StatusReceiver::start(TEST_SECRET).await.context("the status events' receiver")?;
    let secret_file = options.workdir.join("status.secret");
    write_private(&secret_file, TEST_SECRET)?;
    let mut kinds = STATUS_KINDS.to_vec();
    if options.plant == Some(Plant::StatusWithoutRefused) {
        kinds.retain(|k| *k != "refused");
    }
    let status = StatusSubscription { url: receiver.url(), secret_file, kinds };
    let config = options.workdir.join("herald.toml");
    write_private(&config, &config_text(&db_url, port, &secrets, &standins, &status, 16))?;
    let migrate = Command::new(&options.herald)
        .arg("--config")
        .arg(&config)
        .arg("migrate")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await?;
    anyhow::ensure!(migrate.success(), "herald migrate failed: {migrate}");

    let mut fleet = Fleet {
        herald: options.herald.clone(),
        soak: std::env::current_exe()?,
        workdir: options.workdir.clone(),
        config: config.clone(),
        plant: options.plant.filter(|p| p.in_store()),
        procs: Vec::new(),
        started: 0,
    };
    let outcome = run_phases(options, &run, &database, &standins, &secrets, port, &mut fleet, &receiver, started).await;
    fleet.stop_all().await;
    standins.shutdown().await;
    let tally = outcome?;
    // A planted run is expected to fail: its database is of no further interest either.
    if tally.failed == 0 || options.plant.is_some() {
        if let Ok(admin) = connect(&options.admin_url, "postgres", 1).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).execute(&admin).await;
        }
    } else {
        println!("soak: database {database} and logs in {} kept for inspection", options.workdir.display());
    }
    println!("soak: wall clock {:.0} s", started.elapsed().as_secs_f64());
    Ok(tally)
}

#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
async fn run_phases(
    options: &Options,
    run: &str,
    database: &str,
    standins: &StandIns,
    secrets: &Secrets,
    port: u16,
    fleet: &mut Fleet,
    receiver: &StatusReceiver,
    started: Instant,
) -> anyhow::Result<Tally> {
    let pool = connect(&options.admin_url, database, 3).await?;
    keep_what_the_purge_removes(&pool).await?;
    fleet.spawn(Role::Serve)?;
    for _ in 0..options.workers {
        fleet.spawn(Role::Worker)?;
    }
    let api = Arc::new(Api {
        client: reqwest::Client::builder().timeout(Duration::from_secs(5)).no_proxy().build()?,
        base: format!("http://127.0.0.1:{port}"),
        service: secrets.service_token.clone(),
        admin: secrets.admin_token.clone(),
    });
    // Ready: the API answers.
    let ready_by = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = api.client.get(format!("{}/readyz", api.base)).send().await {
            if r.status().is_success() {
                break;
            }
        }
        anyhow::ensure!(Instant::now() < ready_by, "herald serve did not become ready (see serve-1.log)");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let ledger = Arc::new(Ledger::default());
    let faults = Arc::new(Faults::default());
    let fault_end = Instant::now() + options.faults_for;
    // Submissions stop a little before the faults do, so the last ones also meet faults.
    let submit_end = fault_end - Duration::from_secs(5).min(options.faults_for / 10);
    let answer_deadline = fault_end + options.settle_for;
    let submitted_count = Arc::new(AtomicU64::new(0));

    // Preferences of the long-lived users first.
    let setup = Arc::new(Submitter {
        api: Arc::clone(&api),
        webpush: Arc::clone(&standins.webpush),
        ledger: Arc::clone(&ledger),
        run: run.to_owned(),
        deadline: answer_deadline,
    });
    for u in 0..REGULAR_USERS {
        for channel in ["push", "sms"] {
            anyhow::ensure!(setup.put_pref(&format!("r{u}"), channel).await, "preference not stored");
        }
    }
    for u in 0..DIGEST_USERS {
        anyhow::ensure!(setup.put_pref(&format!("d{u}"), "digest").await, "preference not stored");
    }
    for u in 0..MAIL_USERS {
        anyhow::ensure!(setup.put_pref(&format!("e{u}"), "mail").await, "preference not stored");
    }

    let mut rng = Rng(options.seed);
    let mut submitters = Vec::new();
    for i in 0..4 {
        let sub_rng = Rng(rng.next());
        let counter = Arc::clone(&submitted_count);
        submitters.push(tokio::spawn(Arc::clone(&setup).run(i, sub_rng, submit_end, counter)));
    }

    // Erasures while submissions and calls are in flight (the control run erases more often: each erasure
    // of a user with a call in flight is a chance for the planted claim to call again).
    let eraser = {
        let (api, ledger, pool) = (Arc::clone(&api), Arc::clone(&ledger), pool.clone());
        let mut rng = Rng(rng.next());
        let planted = options.plant == Some(Plant::ClaimIgnoresErasure);
        let (every, most) = if planted { ((300, 1_000), 2 * MAX_ERASED) } else { ((6_000, 14_000), MAX_ERASED) };
        tokio::spawn(async move {
            let mut erased: Vec<Erased> = Vec::new();
            loop {
                tokio::time::sleep(rng.millis(every.0, every.1)).await;
                if Instant::now() >= submit_end || erased.len() >= most {
                    return erased;
                }
                let Some(user) = erasure_victim(&pool, &mut rng, &erased, planted).await else { continue };
                if let Some(e) = erase(&api, &ledger, &pool, &user, answer_deadline).await {
                    erased.push(e);
                }
            }
        })
    };
    // The tables' sizes, sampled until the ledger is read.
    let (sizes_stop, sizes_stopped) = tokio::sync::watch::channel(false);
    let sizes = {
        let pool = pool.clone();
        let mut stopped = sizes_stopped;
        tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                if let Some(sample) = sample_sizes(&pool, started.elapsed()).await {
                    samples.push(sample);
                }
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => return samples,
                    () = tokio::time::sleep(SIZE_EVERY) => {}
                }
            }
        })
    };

    // Faults and progress, until the fault phase ends.
    let restart_at = Instant::now() + options.faults_for / 2;
    let mut restarted = false;
    let mut next_fault = Instant::now() + Duration::from_secs(2);
    let mut next_progress = Instant::now() + Duration::from_secs(10);
    let planted = options.plant.is_some();
    while Instant::now() < fault_end {
        tokio::time::sleep(Duration::from_millis(200)).await;
        faults.deaths.fetch_add(fleet.reap()?, Ordering::Relaxed);
        if !restarted && Instant::now() >= restart_at {
            restarted = true;
            println!("soak: {:>4.0} s restarting PostgreSQL", started.elapsed().as_secs_f64());
            restart_postgres(options).await?;
            faults.pg_restarts.fetch_add(1, Ordering::Relaxed);
        }
        if Instant::now() >= next_fault {
            // The control run stops workers more often and longer: lease takeovers make the damage likely.
            next_fault = Instant::now() + if planted { rng.millis(800, 2_000) } else { rng.millis(1_500, 4_000) };
            let workers = fleet.workers();
            let draw = rng.below(100);
            if draw < 30 && !workers.is_empty() {
                let index = workers[rng.below(workers.len() as u64) as usize];
                let mut victim = fleet.procs.remove(index);
                let _ = victim.child.start_kill();
                let _ = victim.child.wait().await;
                faults.kills.fetch_add(1, Ordering::Relaxed);
                fleet.spawn(Role::Worker)?;
            } else if (draw < 65 || planted) && !workers.is_empty() {
                let index = workers[rng.below(workers.len() as u64) as usize];
                if let Some(pid) = fleet.procs[index].pid() {
                    // Half the pauses outlast the lease: the task is taken over meanwhile (SPEC §10 P2).
                    let pause = if rng.below(2) == 0 || planted {
                        rng.millis(LEASE_MS + 500, LEASE_MS + 2_500)
                    } else {
                        rng.millis(200, 1_500)
                    };
                    if pause > Duration::from_millis(LEASE_MS) {
                        faults.long_stops.fetch_add(1, Ordering::Relaxed);
                        let from = SystemTime::now();
                        let pid = u32::try_from(pid.as_raw()).unwrap_or_default();
                        faults.long_stop_spans.lock().expect("lock").push(Stop { pid, from, until: from + pause });
                    }
                    if kill(pid, Signal::SIGSTOP).is_ok() {
                        faults.stops.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(async move {
                            tokio::time::sleep(pause).await;
                            let _ = kill(pid, Signal::SIGCONT);
                        });
                    }
                }
            } else if let Ok(n) = terminate_backends(&pool, database).await {
                faults.terminated.fetch_add(n, Ordering::Relaxed);
            }
        }
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(10);
            progress(started, "faults", &pool, &submitted_count, &faults).await;
        }
    }
    // Every paused worker continues (the SIGCONT tasks fire within the longest pause).
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 2_600)).await;
    for p in &fleet.procs {
        if let Some(pid) = p.pid() {
            let _ = kill(pid, Signal::SIGCONT);
        }
    }
    for submitter in submitters {
        let _ = submitter.await;
    }
    println!("soak: {:>4.0} s faults over; settling", started.elapsed().as_secs_f64());

    // Settle: no task SENDING or due (digests waiting for the end of their window excepted).
    let settle_by = Instant::now() + options.settle_for;
    let mut settled = false;
    while Instant::now() < settle_by {
        faults.deaths.fetch_add(fleet.reap()?, Ordering::Relaxed);
        let busy: Option<i64> = db_query_retry(|| {
            sqlx::query_scalar(
                "SELECT count(*) FROM delivery_task WHERE state = 'SENDING' \
                 OR (state IN ('PENDING', 'UNKNOWN') AND next_attempt_at IS NOT NULL \
                     AND NOT (digest_count IS NOT NULL AND next_attempt_at > now() + interval '10 minutes'))",
            )
            .fetch_one(&pool)
        })
        .await;
        if busy == Some(0) {
            settled = true;
            break;
        }
        if Instant::now() >= next_progress {
            next_progress += Duration::from_secs(10);
            progress(started, "settle", &pool, &submitted_count, &faults).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "soak: {:>4.0} s {}",
        started.elapsed().as_secs_f64(),
        if settled { "settled" } else { "settle time is up" }
    );
    sizes_stop.send_replace(true);
    let sizes = sizes.await.unwrap_or_default();
    let erased = eraser.await.unwrap_or_default();
    // Herald keeps running while the ledger is read: the API is one of its three records.
    let stops = faults.long_stop_spans.lock().expect("lock").clone();
    let mut report = build_ledger(&api, &pool, standins, &ledger, &stops, &erased).await?;
    report.sizes = sizes;
    report.status = status_ledger(&pool, receiver).await?;
    Ok(print_ledger(&report, &ledger, &faults, standins))
}

async fn progress(started: Instant, phase: &str, pool: &PgPool, submitted: &AtomicU64, faults: &Faults) {
    let states: String = sqlx::query("SELECT state, count(*) FROM delivery_task GROUP BY state ORDER BY state")
        .fetch_all(pool)
        .await
        .map(|rows| {
            rows.iter()
                .map(|r| format!("{}={}", r.get::<String, _>(0), r.get::<i64, _>(1)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "(database unavailable)".to_owned());
    println!(
        "soak: {:>4.0} s {phase}: submits {} tasks [{states}] kills {} stops {} terminated {} pg restarts {}",
        started.elapsed().as_secs_f64(),
        submitted.load(Ordering::Relaxed),
        faults.kills.load(Ordering::Relaxed),
        faults.stops.load(Ordering::Relaxed),
        faults.terminated.load(Ordering::Relaxed),
        faults.pg_restarts.load(Ordering::Relaxed),
    );
}

// ------------------------------------------------------------------------------------------ ledger

struct TaskLine {
    task_id: i64,
    user: String,
    channel: String,
    state: String,
    parked: bool,
    reference: String,
    attempts: String,
    manual: bool,
}

#[derive(Default)]
struct Report {
    answered: usize,
    never_answered: usize,
    lost: Vec<String>,
    logical_duplicates: Vec<String>,
    unsettled: Vec<String>,
    digests_waiting: i64,
    sent_without_acceptance: Vec<String>,
    failed_although_accepted: Vec<String>,
    duplicate_sends: Vec<String>,
    frozen_duplicates: Vec<String>,
    unknown_sends: Vec<String>,
    digest_excess: Vec<String>,
    gone_still_on: Vec<String>,
    egress_min_gap: Option<Duration>,
    egress_violations: usize,
    tasks_by_state: BTreeMap<String, usize>,
    parked_db: i64,
    parked_api: usize,
    tally_differences: Vec<String>,
    queue_differences: Vec<String>,
    attempts_without_task: Vec<String>,
    rows_without_notification: Vec<String>,
    /// Notifications the purge removed, judged from the soak's copy of their rows.
    purged: usize,
    erased_users: usize,
    calls_after_erasure: Vec<String>,
    parked_after_erasure: Vec<String>,
    sizes: Vec<SizeSample>,
    status: StatusReport,
}

/// [`frozen_between_check_and_send`] for an `sms` task (queryable, no key: the stand-in's requests carry
/// the task's reference).
async fn frozen_holder(pool: &PgPool, standins: &StandIns, task: &TaskLine, stops: &[Stop]) -> anyhow::Result<bool> {
    let late: Vec<(String, i64)> = sqlx::query_as(
        "SELECT lease_owner, (extract(epoch FROM started_at) * 1000)::bigint FROM soak_all_delivery_attempt \
         WHERE task_id = $1 AND late_outcome = 'ACCEPTED' AND lease_owner IS NOT NULL",
    )
    .bind(task.task_id)
    .fetch_all(pool)
    .await?;
    let late: Vec<(String, SystemTime)> = late
        .into_iter()
        .map(|(owner, ms)| (owner, SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
        .collect();
    let arrivals: Vec<SystemTime> = standins
        .sms
        .messages()
        .iter()
        .filter(|m| m.reference.as_deref() == Some(task.reference.as_str()))
        .map(|m| m.at)
        .collect();
    Ok(frozen_between_check_and_send(&late, &arrivals, stops))
}

fn describe(task: &TaskLine) -> String {
    format!("task {} ({}, {}, attempts [{}])", task.task_id, task.channel, task.state, task.attempts)
}

#[allow(clippy::too_many_lines)]
async fn build_ledger(
    api: &Api,
    pool: &PgPool,
    standins: &StandIns,
    ledger: &Ledger,
    stops: &[Stop],
    erased: &[Erased],
) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let submitted: Vec<((String, String), Submitted)> = {
        let mut map = ledger.submitted.lock().expect("lock");
        std::mem::take(&mut *map).into_iter().collect()
    };
    let destinations = ledger.destinations.lock().expect("lock").clone();

    // Herald's records from the database: inbox rows, digest membership, every task.
    // Keyed by the notifications' opaque ids, the only ids the API answers with.
    let inbox: HashSet<String> = sqlx::query_scalar(
        "SELECT n.public_id::text FROM soak_all_inbox_item i \
         JOIN soak_all_notification n ON n.user_id = i.user_id AND n.id = i.notification_id",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    let members: HashSet<(String, String)> = sqlx::query(
        "SELECT n.public_id::text, m.channel FROM soak_all_digest_member m \
         JOIN soak_all_notification n ON n.user_id = m.user_id AND n.id = m.notification_id",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
    .collect();
    let per_key: Vec<(String, String, i64)> =
        sqlx::query("SELECT user_id, event_key, count(*) FROM soak_all_notification GROUP BY 1, 2 HAVING count(*) > 1")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
    for (user, key, n) in per_key {
        report.logical_duplicates.push(format!("{n} notifications for one (user, event key) [{user}, {key}]"));
    }
    report.parked_db = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_task WHERE state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL",
    )
    .fetch_one(pool)
    .await?;
    // The task gauges' tally (migration 0010) against an exact count, both in one statement's snapshot, and
    // the claim queue (migration 0012) against the scheduled tasks.
    report.tally_differences = herald_tests::tally::tally_differences(pool).await?;
    report.queue_differences = herald_tests::tally::queue_differences(pool).await?;
    // No foreign key checks it (migration 0016): the statements that write attempts keep it.
    report.attempts_without_task = herald_tests::tally::attempts_without_task(pool).await?;
    report.rows_without_notification = herald_tests::tally::rows_without_notification(pool).await?;
    report.digests_waiting = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_task WHERE digest_count IS NOT NULL AND state = 'PENDING' \
         AND next_attempt_at > now() + interval '10 minutes'",
    )
    .fetch_one(pool)
    .await?;
    let unsettled = sqlx::query(
        "SELECT id, channel, state, attempt_count FROM delivery_task WHERE NOT (state IN ('SENT', 'FAILED', 'SUPPRESSED') \
         OR (state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL) \
         OR (state = 'UNKNOWN' AND outcome_uncertain AND NOT needs_review AND next_attempt_at IS NULL \
             AND EXISTS (SELECT 1 FROM user_erasure e WHERE e.user_digest = sha256(convert_to(user_id, 'UTF8')))) \
         OR (digest_count IS NOT NULL AND state = 'PENDING' AND next_attempt_at > now() + interval '10 minutes')) \
         ORDER BY id",
    )
    .fetch_all(pool)
    .await?;
    for r in &unsettled {
        report.unsettled.push(format!(
            "task {} ({}, {}, {} attempts)",
            r.get::<i64, _>(0),
            r.get::<String, _>(1),
            r.get::<String, _>(2),
            r.get::<i32, _>(3)
        ));
    }
    let instants: Vec<(String, String, String, Option<i32>)> = sqlx::query(
        "SELECT user_id, thread_key, reference::text, digest_count FROM soak_all_delivery_task \
         WHERE channel = 'digest' AND thread_key IS NOT NULL",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();

    // Herald's API: every answered notification's view, and the review list.
    let mut views: HashMap<String, Value> = HashMap::new();
    let ids: Vec<String> = {
        let mut ids: Vec<String> = submitted.iter().flat_map(|(_, s)| s.answered.iter().cloned()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for chunk in ids.chunks(16) {
        let fetches = chunk.iter().map(|id| async move {
            let path = format!("/v1/notifications/{id}");
            (id.clone(), api.until_answered(ledger, reqwest::Method::GET, &path, &api.admin, None, deadline).await.0)
        });
        for (id, answer) in futures::future::join_all(fetches).await {
            if let Some((200, value)) = answer {
                views.insert(id, value);
            }
        }
    }
    if let (Some((200, review)), _) =
        api.until_answered(ledger, reqwest::Method::GET, "/v1/review?limit=1000", &api.admin, None, deadline).await
    {
        report.parked_api = review["tasks"].as_array().map_or(0, Vec::len);
    }
    // What the purge removed answers 404 now: its view is rebuilt from the soak's copy of its rows, in the
    // API's shape. A notification still stored is judged by its API view only.
    let purged: Vec<(String, Value)> = sqlx::query(
        "SELECT n.public_id::text, json_build_object('user_id', n.user_id, 'event_key', n.event_key, 'tasks', \
           COALESCE((SELECT json_agg(json_build_object('task_id', t.id, 'channel', t.channel, 'state', t.state, \
             'parked', t.state = 'UNKNOWN' AND t.needs_review AND t.next_attempt_at IS NULL, \
             'reference', t.reference::text, 'attempts', \
             COALESCE((SELECT json_agg(json_build_object('outcome', a.outcome, 'late_outcome', a.late_outcome) \
                 ORDER BY a.attempt_no) \
               FROM soak_gone_delivery_attempt a WHERE a.user_id = t.user_id AND a.task_id = t.id), '[]'::json))) \
             FROM soak_gone_delivery_task t WHERE t.user_id = n.user_id AND t.notification_id = n.id), '[]'::json)) \
         FROM soak_gone_notification n",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    for (id, view) in purged {
        if let std::collections::hash_map::Entry::Vacant(entry) = views.entry(id) {
            report.purged += 1;
            entry.insert(view);
        }
    }

    // Lost and logical duplicates, from what the driver submitted.
    let mut tasks: Vec<TaskLine> = Vec::new();
    let mut seen_tasks: HashSet<i64> = HashSet::new();
    for ((user, key), s) in &submitted {
        let mut distinct = s.answered.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.is_empty() {
            report.never_answered += 1;
            continue;
        }
        report.answered += 1;
        if distinct.len() > 1 {
            report
                .logical_duplicates
                .push(format!("answers named notifications {distinct:?} for one (user, event key)"));
        }
        for id in distinct {
            if herald_domain::NotificationRef::parse(&id).is_none() {
                report.lost.push(format!("notification {id}: the answer's id is not an opaque id"));
            }
            let Some(view) = views.get(&id) else {
                report.lost.push(format!("notification {id}: no view (GET /v1/notifications/{id})"));
                continue;
            };
            if view["user_id"].as_str() != Some(user) || view["event_key"].as_str() != Some(key) {
                report.lost.push(format!("notification {id}: the view names another user or event key"));
            }
            if !inbox.contains(&id) {
                report.lost.push(format!("notification {id}: no inbox item"));
            }
            let view_tasks = view["tasks"].as_array().cloned().unwrap_or_default();
            for channel in s.mix.channels() {
                let has_task = view_tasks.iter().any(|t| t["channel"].as_str() == Some(channel));
                if !has_task && !members.contains(&(id.clone(), (*channel).to_owned())) {
                    report.lost.push(format!("notification {id}: no {channel} task and no digest membership"));
                }
            }
            for t in view_tasks {
                let task_id = t["task_id"].as_i64().unwrap_or_default();
                if !seen_tasks.insert(task_id) {
                    continue;
                }
                let attempts: Vec<String> = t["attempts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let outcome = a["outcome"].as_str().unwrap_or("-");
                        match a["late_outcome"].as_str() {
                            Some(late) => format!("{outcome}/late {late}"),
                            None => outcome.to_owned(),
                        }
                    })
                    .collect();
                tasks.push(TaskLine {
                    task_id,
                    user: user.clone(),
                    channel: t["channel"].as_str().unwrap_or_default().to_owned(),
                    state: t["state"].as_str().unwrap_or_default().to_owned(),
                    parked: t["parked"].as_bool().unwrap_or(false),
                    reference: t["reference"].as_str().unwrap_or_default().to_owned(),
                    manual: attempts.iter().any(|a| a.starts_with("MANUAL")),
                    attempts: attempts.join(", "),
                });
            }
        }
    }

    // What the stand-ins really accepted, task by task.
    let mut known_refs: HashSet<String> = HashSet::new();
    let mut known_dests: HashSet<(String, String)> = HashSet::new();
    for task in &tasks {
        *report
            .tasks_by_state
            .entry(if task.parked { "PARKED".to_owned() } else { task.state.clone() })
            .or_default() += 1;
        let Some((accepted, by_reference)) = standins.accepted(task, &destinations) else { continue };
        if by_reference {
            known_refs.insert(task.reference.clone());
        } else {
            known_dests.insert((task.channel.clone(), task.user.clone()));
        }
        if task.state == "SENT" && !task.manual && accepted == 0 {
            report.sent_without_acceptance.push(describe(task));
        }
        if (task.state == "FAILED" || task.state == "SUPPRESSED") && accepted > 0 {
            report.failed_although_accepted.push(format!("{} accepted {accepted}×", describe(task)));
        }
        if accepted > 1 {
            let line = format!("{} accepted {accepted}×", describe(task));
            if task.channel == "sms" && frozen_holder(pool, standins, task, stops).await? {
                report.frozen_duplicates.push(line);
            } else {
                report.duplicate_sends.push(line);
            }
        }
    }
    // Sends nobody asked for: a reference or destination that belongs to no task Herald shows.
    for (name, standin) in [("push", &standins.push), ("sms", &standins.sms), ("digest", &standins.digest)] {
        for m in standin.messages().iter().filter(|m| !m.replayed) {
            if let Some(reference) = &m.reference {
                if !known_refs.contains(reference) {
                    report.unknown_sends.push(format!("{name} send of reference {reference}"));
                }
            }
        }
    }
    for m in standins.mail.messages() {
        if !m.reference().is_some_and(|r| known_refs.contains(r)) {
            report.unknown_sends.push("mail message whose Message-ID names no task Herald shows".to_owned());
        }
    }
    let known_topics: HashSet<String> = known_refs.iter().map(|r| topic(r)).collect();
    for r in standins.webpush.requests().iter().filter(|r| r.received) {
        if !r.topic.as_ref().is_some_and(|t| known_topics.contains(t)) {
            report.unknown_sends.push("webpush message whose Topic names no task Herald shows".to_owned());
        }
    }
    let dest_owner: HashMap<&String, &(String, String)> = destinations.iter().map(|(k, d)| (d, k)).collect();
    for (name, standin) in [("miao", &standins.miao), ("slow", &standins.slow)] {
        for m in standin.messages() {
            match dest_owner.get(&m.to) {
                Some((user, channel)) if known_dests.contains(&(channel.clone(), user.clone())) => {}
                _ => report.unknown_sends.push(format!("{name} send to a destination of no known task")),
            }
        }
    }

    // Digest limit at the stand-in: instant prompts per (user, thread) in any rolling window.
    let at_of: HashMap<String, Vec<Instant>> = standins
        .digest
        .messages()
        .into_iter()
        .filter(|m| !m.replayed)
        .filter_map(|m| m.reference.map(|r| (r, m.instant)))
        .fold(HashMap::new(), |mut acc, (r, at)| {
            acc.entry(r).or_insert_with(Vec::new).push(at);
            acc
        });
    let mut per_thread: HashMap<(String, String), Vec<Instant>> = HashMap::new();
    for (user, thread, reference, digest_count) in &instants {
        if digest_count.is_none() {
            per_thread
                .entry((user.clone(), thread.clone()))
                .or_default()
                .extend(at_of.get(reference).into_iter().flatten().copied());
        }
    }
    for ((_, thread), mut times) in per_thread {
        times.sort();
        let most = (0..times.len())
            .map(|i| times[i..].iter().take_while(|t| t.duration_since(times[i]) < DIGEST_WINDOW).count())
            .max()
            .unwrap_or(0);
        if most > DIGEST_LIMIT {
            report.digest_excess.push(format!("thread {thread}: {most} instant prompts in one window"));
        }
    }

    // Web Push: a subscription the push service said is gone (410, the only REJECTED its chaos draws) is
    // switched off and marked expired for that user.
    let gone: Vec<(i64, String)> = sqlx::query(
        "SELECT DISTINCT t.id, t.user_id FROM soak_all_delivery_attempt a JOIN soak_all_delivery_task t ON t.id = a.task_id \
         JOIN channel_pref p ON p.user_id = t.user_id AND p.channel = t.channel \
         WHERE t.channel = 'webpush' AND 'REJECTED' IN (a.outcome, a.late_outcome) \
         AND (p.enabled OR p.destination_expired_at IS NULL) ORDER BY t.id",
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    for (task, _) in gone {
        report.gone_still_on.push(format!("task {task}: 410 but the user's webpush channel is still on"));
    }

    report.erased_users = erased.len();
    report.calls_after_erasure = calls_after_erasure(pool, standins, &tasks, erased).await?;
    // Nothing waits for a person on behalf of an erased user: the erasure releases what was parked, and a
    // claim after it closes the task (with its destination destroyed, a claim that did not see the erasure
    // would park an uncertain task as "switched off" instead).
    let erased_users: Vec<String> = erased.iter().map(|e| e.user.clone()).collect();
    report.parked_after_erasure = sqlx::query_as::<_, (i64, String, String, Option<String>)>(
        "SELECT id, user_id, channel, last_error FROM delivery_task \
         WHERE user_id = ANY($1) AND state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL ORDER BY id",
    )
    .bind(&erased_users)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(id, user, channel, reason)| {
        format!("task {id} ({channel}) of erased user {user} parked: {}", reason.unwrap_or_default())
    })
    .collect();

    // Egress interval at the stand-in: every gap between send requests of the slow channel.
    let mut times = standins.slow.request_times();
    times.sort();
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        report.egress_min_gap = Some(report.egress_min_gap.map_or(gap, |g| g.min(gap)));
        if gap < SLOW_INTERVAL {
            report.egress_violations += 1;
        }
    }
    Ok(report)
}

/// "No call for an erased user after its erasure committed", from the stand-ins' record of each call's
/// arrival: a push or sms request for a task of an erased user that arrived after `committed_by` (with
/// [`CLOCK_SLACK`]) is a violation unless a call already in flight at the commit explains it — an attempt
/// (`SEND`) of that task that began before `committed_by`, while the arrival lies in its span: from its
/// start until its finish (a few milliseconds after it: the request reaches the stand-in before its answer
/// is recorded), or without end when it never finished or was superseded (a frozen holder may still send
/// when it is continued; erasure does not recall a call that left). Each attempt explains one arrival.
///
/// Herald's own record is read too: an attempt that called the channel (`SEND` or `QUERY`) for an erased
/// user and began after `committed_by` is a claim that ran after the commit and did not see the erasure.
/// The stand-ins only record the requests they accepted, and a query is not a send; the attempt rows see
/// every call.
async fn calls_after_erasure(
    pool: &PgPool,
    standins: &StandIns,
    tasks: &[TaskLine],
    erased: &[Erased],
) -> anyhow::Result<Vec<String>> {
    const END_SLACK: Duration = Duration::from_millis(20);
    let mut violations = Vec::new();
    let messages: Vec<(&str, herald_standin::Received)> = [("push", &standins.push), ("sms", &standins.sms)]
        .into_iter()
        .flat_map(|(name, standin)| standin.messages().into_iter().map(move |m| (name, m)))
        .collect();
    for e in erased {
        let after = (e.committed_by + CLOCK_SLACK).duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let claimed: Vec<(i64, String, String, i64)> = sqlx::query_as(
            "SELECT t.id, t.channel, a.action, count(*) FROM soak_all_delivery_attempt a \
             JOIN soak_all_delivery_task t ON t.user_id = a.user_id AND t.id = a.task_id \
             WHERE a.user_id = $1 AND a.action IS NOT NULL AND a.started_at > to_timestamp($2::float8 / 1000000) \
             GROUP BY 1, 2, 3 ORDER BY 1",
        )
        .bind(&e.user)
        .bind(i64::try_from(after.as_micros()).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await?;
        for (task, channel, action, n) in claimed {
            violations.push(format!(
                "task {task} ({channel}): {n} {action} call(s) claimed after the erasure of user {} committed \
                 (Herald's attempt rows)",
                e.user
            ));
        }
        for task in tasks.iter().filter(|t| t.user == e.user && (t.channel == "push" || t.channel == "sms")) {
            let mut late: Vec<SystemTime> = messages
                .iter()
                .filter(|(name, m)| {
                    *name == task.channel
                        && m.reference.as_deref() == Some(task.reference.as_str())
                        && m.at > e.committed_by + CLOCK_SLACK
                })
                .map(|(_, m)| m.at)
                .collect();
            if late.is_empty() {
                continue;
            }
            late.sort();
            let before = (e.committed_by + CLOCK_SLACK).duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            let spans: Vec<(i64, Option<i64>)> = sqlx::query_as(concat!(
                "SELECT ",
                epoch_micros!("started_at"),
                ", CASE WHEN outcome = 'LEASE_EXPIRED' THEN NULL ELSE ",
                epoch_micros!("finished_at"),
                " END FROM soak_all_delivery_attempt WHERE user_id = $1 AND task_id = $2 AND action = 'SEND' \
                 AND started_at < to_timestamp($3::float8 / 1000000) ORDER BY started_at"
            ))
            .bind(&task.user)
            .bind(task.task_id)
            .bind(i64::try_from(before.as_micros()).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?;
            let mut spans: Vec<(SystemTime, Option<SystemTime>)> =
                spans.into_iter().map(|(from, to)| (system_time(from), to.map(system_time))).collect();
            let unexplained = late
                .iter()
                .filter(|&&at| {
                    let fits = spans
                        .iter()
                        .position(|&(from, to)| from <= at + CLOCK_SLACK && to.is_none_or(|to| at <= to + END_SLACK));
                    fits.map(|i| spans.remove(i)).is_none()
                })
                .count();
            if unexplained > 0 {
                let window = e.committed_by.duration_since(e.requested_at).unwrap_or_default();
                violations.push(format!(
                    "{}: {unexplained} arrival(s) after the erasure of user {} committed (requested {} ms before \
                     the commit was seen), not a call in flight then",
                    describe(task),
                    e.user,
                    window.as_millis()
                ));
            }
        }
    }
    Ok(violations)
}

/// The sizes sampled while the soak ran, and the bound they follow from. A finished notification leaves
/// with its tasks and attempts once it is [`FINISHED_AFTER`] old and the next purge pass has run, so at any
/// time `delivery_task` holds at most the tasks made in the last `W = FINISHED_AFTER + longest time to
/// finish + overdue_after()` plus those still waiting (parked: never purged): with `R` tasks made per
/// second, about `R × W` rows, whatever the length of the run; `delivery_attempt` at most `max_attempts`
/// plus two (the claim's settlement, the erasure's) times that. The checks above are that bound's premise,
/// measured: no row of a notification past the window is left at any sample.
/// What the status events' receiver got, judged against what happened (issue 46).
#[derive(Default)]
struct StatusReport {
    /// Events still unposted (neither delivered nor parked) when the wait for the dispatchers ended.
    undrained: i64,
    /// Posts received, distinct `webhook-id`s, posts of an id already received (at-least-once: counted).
    posts: usize,
    events: usize,
    redelivered: usize,
    /// Posts `standardwebhooks` refused, or whose payload could not be read.
    unverified: Vec<String>,
    /// Settled tasks whose last event does not tell their final state.
    missing: Vec<String>,
    /// The same, counted by the event the task should have told.
    missing_kinds: BTreeMap<String, usize>,
    /// Events for what did not happen: no such task, a final event not matching the task's final state or
    /// followed by another, a `sent_again` for no such call.
    phantom: Vec<String>,
}

/// One task as the database (and the soak's copy of purged rows) ends it.
struct FinalTask {
    task_id: i64,
    state: String,
    parked: bool,
    last_attempt_no: i32,
    last_outcome: Option<String>,
    /// Attempt numbers of the task's SEND attempts.
    sends: HashSet<i32>,
}

impl FinalTask {
    /// The (kind, reason or decision) the task's last state event must tell, `None` while unsettled. As
    /// README "Status events" and the outbox trigger (migration 0031) document it.
    fn expected(&self) -> Option<(&'static str, Option<&'static str>)> {
        let outcome = self.last_outcome.as_deref().unwrap_or("");
        let manual = outcome.starts_with("MANUAL");
        Some(match self.state.as_str() {
            _ if self.parked => ("parked", None),
            _ if outcome == "USER_ERASED" => {
                ("suppressed", Some(if self.state == "SUPPRESSED" { "erased" } else { "erased_outcome_unknown" }))
            }
            "SENT" if manual => ("resolved", Some("marked_sent")),
            "SENT" => ("accepted", None),
            "FAILED" if manual => ("resolved", Some("marked_not_sent")),
            "FAILED" if outcome == "TTL_EXPIRED" => ("expired", None),
            "FAILED" if outcome == "REJECTED" => ("refused", Some("rejected")),
            "FAILED" => ("refused", Some("attempts_exhausted")),
            "SUPPRESSED" => ("suppressed", Some("preference_off")),
            _ => return None,
        })
    }
}

/// One received event of a delivery: `sequence`, kind, reason or decision, attempt.
type Told = (i64, String, Option<String>, i64);

/// A state event ends its delivery's story unless it is `parked` or a `send_again` decision.
fn is_final(kind: &str, reason: Option<&str>) -> bool {
    !matches!((kind, reason), ("sent_again" | "parked", _) | ("resolved", Some("send_again")))
}

/// The status-event ledger: waits (bounded) until the dispatchers posted every event written, then judges
/// the receiver's posts, deduplicated by `webhook-id`, against every task's final state.
#[allow(clippy::too_many_lines)]
async fn status_ledger(pool: &PgPool, receiver: &StatusReceiver) -> anyhow::Result<StatusReport> {
    let mut report = StatusReport::default();
    let drain_by = Instant::now() + STATUS_DRAIN;
    loop {
        let pending: Option<i64> = db_query_retry(|| {
            sqlx::query_scalar("SELECT count(*) FROM status_event WHERE delivered_at IS NULL AND parked_at IS NULL")
                .fetch_one(pool)
        })
        .await;
        report.undrained = pending.unwrap_or(-1);
        if report.undrained == 0 || Instant::now() >= drain_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A post acknowledged just now may still be on its way into the receiver's log.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let rows = sqlx::query(
        "SELECT n.public_id::text, t.channel, t.id, t.state, herald_task_parked(t.state, t.needs_review, t.next_attempt_at), \
                t.last_attempt_no, \
                (SELECT a.outcome FROM soak_all_delivery_attempt a \
                  WHERE a.user_id = t.user_id AND a.task_id = t.id AND a.attempt_no = t.last_attempt_no LIMIT 1), \
                ARRAY(SELECT a.attempt_no FROM soak_all_delivery_attempt a \
                       WHERE a.user_id = t.user_id AND a.task_id = t.id AND a.action = 'SEND') \
           FROM soak_all_delivery_task t JOIN soak_all_notification n ON n.user_id = t.user_id AND n.id = t.notification_id",
    )
    .fetch_all(pool)
    .await?;
    let mut tasks: HashMap<(String, String), FinalTask> = HashMap::new();
    for row in rows {
        let sends: Vec<i32> = row.get(7);
        tasks.insert(
            (row.get(0), row.get(1)),
            FinalTask {
                task_id: row.get(2),
                state: row.get(3),
                parked: row.get(4),
                last_attempt_no: row.get(5),
                last_outcome: row.get(6),
                sends: sends.into_iter().collect(),
            },
        );
    }

    // The events, once each, per delivery, in `sequence` order.
    let mut seen: HashSet<String> = HashSet::new();
    let mut per_task: HashMap<(String, String), Vec<Told>> = HashMap::new();
    for record in receiver.records() {
        report.posts += 1;
        let id = record["id"].as_str().unwrap_or_default().to_owned();
        let payload = &record["payload"];
        let data = &payload["data"];
        let (Some(kind), Some(notification), Some(channel), Some(sequence), Some(attempt)) = (
            payload["type"].as_str().and_then(|t| t.strip_prefix("notification.")),
            data["notification_id"].as_str(),
            data["channel"].as_str(),
            data["sequence"].as_i64(),
            data["attempt"].as_i64(),
        ) else {
            report.unverified.push(format!(
                "post {id}: verified {} error {}",
                record["verified"],
                record["error"].as_str().unwrap_or("unreadable payload")
            ));
            continue;
        };
        if record["verified"].as_bool() != Some(true) {
            report.unverified.push(format!("post {id}: {}", record["error"].as_str().unwrap_or("not verified")));
            continue;
        }
        if !seen.insert(id) {
            report.redelivered += 1;
            continue;
        }
        let reason = data["reason"].as_str().or_else(|| data["decision"].as_str()).map(str::to_owned);
        per_task.entry((notification.to_owned(), channel.to_owned())).or_default().push((
            sequence,
            kind.to_owned(),
            reason,
            attempt,
        ));
    }
    report.events = seen.len();

    for (key, events) in &mut per_task {
        events.sort_by_key(|e| e.0);
        let Some(task) = tasks.get(key) else {
            report.phantom.push(format!(
                "{} event(s) for notification {} on {}: no such task",
                events.len(),
                key.0,
                key.1
            ));
            continue;
        };
        let states: Vec<&Told> = events.iter().filter(|e| e.1 != "sent_again").collect();
        for (_, kind, _, attempt) in events.iter() {
            if kind == "sent_again" {
                let call = i32::try_from(*attempt).ok().filter(|n| *n > 1 && task.sends.contains(n));
                if call.is_none() {
                    report
                        .phantom
                        .push(format!("task {}: sent_again for attempt {attempt}, no such call", task.task_id));
                }
            }
        }
        for (i, (_, kind, reason, _)) in states.iter().enumerate() {
            if is_final(kind, reason.as_deref()) && i + 1 < states.len() {
                report.phantom.push(format!(
                    "task {} ({}): {kind} followed by {}",
                    task.task_id,
                    task.state,
                    states[i + 1].1
                ));
            }
        }
        if let Some((_, kind, reason, _)) = states.last() {
            if is_final(kind, reason.as_deref())
                && task.expected().is_some_and(|(k, r)| k != kind || r != reason.as_deref())
            {
                report.phantom.push(format!(
                    "task {} ({}, last outcome {}): {kind} {} tells what did not happen",
                    task.task_id,
                    task.state,
                    task.last_outcome.as_deref().unwrap_or("-"),
                    reason.as_deref().unwrap_or("")
                ));
            }
        }
    }
    for (key, task) in &tasks {
        let Some((kind, reason)) = task.expected() else { continue };
        let last = per_task.get(key).and_then(|events| events.iter().rfind(|e| e.1 != "sent_again"));
        let told = last.is_some_and(|(_, k, r, attempt)| {
            k == kind && r.as_deref() == reason && *attempt == i64::from(task.last_attempt_no)
        });
        if !told {
            *report.missing_kinds.entry(kind.to_owned()).or_default() += 1;
            report.missing.push(format!(
                "task {} ({}{}, last outcome {}): expected {kind} {}, last event {}",
                task.task_id,
                task.state,
                if task.parked { ", parked" } else { "" },
                task.last_outcome.as_deref().unwrap_or("-"),
                reason.unwrap_or(""),
                last.map_or("none".to_owned(), |(_, k, r, a)| format!(
                    "{k} {} (attempt {a})",
                    r.as_deref().unwrap_or("")
                ))
            ));
        }
    }
    Ok(report)
}

fn print_sizes(sizes: &[SizeSample], purged: usize) {
    let (Some(first), Some(last)) = (sizes.first(), sizes.last()) else { return };
    let span = (last.at.saturating_sub(first.at)).as_secs_f64().max(1.0);
    let rate = (last.created - first.created) as f64 / span;
    let window = (FINISHED_AFTER + overdue_after()).as_secs_f64();
    let max_tasks = sizes.iter().map(|s| s.tasks).max().unwrap_or(0);
    let max_attempts = sizes.iter().map(|s| s.attempts).max().unwrap_or(0);
    let every: Vec<String> = sizes
        .iter()
        .step_by((sizes.len() / 12).max(1))
        .map(|s| format!("{}s:{}/{}", s.at.as_secs(), s.tasks, s.attempts))
        .collect();
    println!(
        "soak: sizes tasks/attempts every {} s: {} | max {max_tasks}/{max_attempts} | {} tasks made, {rate:.1}/s × \
         window {window:.0} s ≈ {:.0} rows | purged notifications judged from the soak's copy {purged}",
        SIZE_EVERY.as_secs(),
        every.join(" "),
        last.created,
        rate * window
    );
}

/// How many checks passed and failed.
#[derive(Clone, Copy, Debug)]
struct Tally {
    passed: u32,
    failed: u32,
}

fn print_ledger(report: &Report, ledger: &Ledger, faults: &Faults, standins: &StandIns) -> Tally {
    println!("soak: ledger ---------------------------------------------------------------");
    println!(
        "soak: submitted (user, event key) {} answered {} never answered {} | unanswered HTTP tries {} | 4xx {}",
        report.answered + report.never_answered,
        report.answered,
        report.never_answered,
        ledger.unanswered_http.load(Ordering::Relaxed),
        ledger.rejected_4xx.load(Ordering::Relaxed)
    );
    let states: Vec<String> = report.tasks_by_state.iter().map(|(s, n)| format!("{s}={n}")).collect();
    println!(
        "soak: tasks {} | parked in the database {} in GET /v1/review {} | digests waiting for their window {}",
        states.join(" "),
        report.parked_db,
        report.parked_api,
        report.digests_waiting
    );
    for (name, standin) in [
        ("push", &standins.push),
        ("sms", &standins.sms),
        ("miao", &standins.miao),
        ("digest", &standins.digest),
        ("slow", &standins.slow),
    ] {
        let draws: Vec<String> = standin.chaos_draws().iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!(
            "soak: stand-in {name:<7} requests {:>5} sends {:>5} queries {:>4} | {}",
            standin.requests(),
            standin.sends(),
            standin.queries(),
            draws.join(" ")
        );
    }
    let draws = |d: Vec<(&str, u64)>| d.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(" ");
    println!(
        "soak: stand-in mail    transactions {:>5} sends {:>5} | {}",
        standins.mail.transactions(),
        standins.mail.sends(),
        draws(standins.mail.chaos_draws())
    );
    println!(
        "soak: stand-in webpush requests {:>5} sends {:>5} | {}",
        standins.webpush.requests().len(),
        standins.webpush.received(),
        draws(standins.webpush.chaos_draws())
    );
    let mut passed = 0;
    let mut failed = 0;
    let mut check = |name: &str, value: String, ok: bool, examples: &[String]| {
        println!("check {name:<58} {value:>10}  {}", if ok { "ok" } else { "VIOLATION" });
        for example in examples.iter().take(8) {
            println!("      {example}");
        }
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    };
    let count = |v: &Vec<String>| (v.len().to_string(), v.is_empty());
    let (v, ok) = count(&report.lost);
    check("lost: submitted and answered, but no notification/inbox/task", v, ok, &report.lost);
    let (v, ok) = count(&report.logical_duplicates);
    check("logical duplicates: two notifications for one (user, event key)", v, ok, &report.logical_duplicates);
    let (v, ok) = count(&report.unsettled);
    check("unsettled: tasks not SENT, FAILED, SUPPRESSED or parked", v, ok, &report.unsettled);
    let (v, ok) = count(&report.sent_without_acceptance);
    check("SENT automatically with no real acceptance at the stand-in", v, ok, &report.sent_without_acceptance);
    let (v, ok) = count(&report.failed_although_accepted);
    check("FAILED or SUPPRESSED although the stand-in accepted it", v, ok, &report.failed_although_accepted);
    let (v, ok) = count(&report.duplicate_sends);
    check("real duplicate sends of one task", v, ok, &report.duplicate_sends);
    if !report.frozen_duplicates.is_empty() {
        // Not a violation: the lease's known gap, recorded by Herald as a late acceptance and warned of.
        println!(
            "note  {:<58} {:>10}  known limit",
            "duplicates by a holder frozen between lease check and send",
            report.frozen_duplicates.len()
        );
        for example in report.frozen_duplicates.iter().take(8) {
            println!("      {example}");
        }
    }
    let (v, ok) = count(&report.unknown_sends);
    check("stand-in sends that belong to no task Herald shows", v, ok, &report.unknown_sends);
    let (v, ok) = count(&report.digest_excess);
    check(
        &format!("digest limit: instant prompts per user+thread in the window <= {DIGEST_LIMIT}"),
        if ok { "held".to_owned() } else { v },
        ok,
        &report.digest_excess,
    );
    let (v, ok) = count(&report.gone_still_on);
    check("webpush 410: subscription gone but the channel still on", v, ok, &report.gone_still_on);
    let (v, ok) = count(&report.tally_differences);
    check("task gauges: tally groups that differ from an exact count", v, ok, &report.tally_differences);
    let (v, ok) = count(&report.queue_differences);
    check("claim queue: tasks whose queue row differs from their schedule", v, ok, &report.queue_differences);
    let (v, ok) = count(&report.attempts_without_task);
    check("attempts: attempt rows whose task is not stored", v, ok, &report.attempts_without_task);
    let (v, ok) = count(&report.rows_without_notification);
    check(
        "notifications: inbox items and tasks whose notification is not stored",
        v,
        ok,
        &report.rows_without_notification,
    );
    let (v, ok) = count(&report.calls_after_erasure);
    check(
        &format!("no call for an erased user after its erasure committed ({} erased)", report.erased_users),
        v,
        ok,
        &report.calls_after_erasure,
    );
    let (v, ok) = count(&report.parked_after_erasure);
    check("erased users: tasks parked for a person after the erasure", v, ok, &report.parked_after_erasure);
    print_sizes(&report.sizes, report.purged);
    let overdue_tasks = report.sizes.iter().map(|s| s.overdue_tasks).max().unwrap_or(0);
    let overdue_attempts = report.sizes.iter().map(|s| s.overdue_attempts).max().unwrap_or(0);
    let late: Vec<String> = report
        .sizes
        .iter()
        .filter(|s| s.overdue_tasks > 0 || s.overdue_attempts > 0)
        .map(|s| format!("at {} s: {} tasks, {} attempts overdue", s.at.as_secs(), s.overdue_tasks, s.overdue_attempts))
        .collect();
    check(
        "retention: delivery_task rows past the window, max over samples",
        overdue_tasks.to_string(),
        overdue_tasks == 0 && !report.sizes.is_empty(),
        &late,
    );
    check(
        "retention: delivery_attempt rows past the window, max over samples",
        overdue_attempts.to_string(),
        overdue_attempts == 0 && !report.sizes.is_empty(),
        &[],
    );
    check(
        "retention: finished notifications the purge removed during the run",
        report.purged.to_string(),
        report.purged > 0,
        &[],
    );
    let min_gap = report.egress_min_gap.map_or("-".to_owned(), |g| format!("{} ms", g.as_millis()));
    check(
        &format!("egress interval: gaps between slow sends >= {} ms (min gap)", SLOW_INTERVAL.as_millis()),
        if report.egress_violations == 0 {
            format!("held {min_gap}")
        } else {
            format!("{} < ({min_gap})", report.egress_violations)
        },
        report.egress_violations == 0,
        &[],
    );
    let status = &report.status;
    println!(
        "soak: status events: posts {} distinct webhook-ids {} redelivered (counted, not a violation) {} | \
         unposted after the wait {}",
        status.posts, status.events, status.redelivered, status.undrained
    );
    check(
        "status events: posts standardwebhooks refused or unreadable",
        status.unverified.len().to_string(),
        status.unverified.is_empty(),
        &status.unverified,
    );
    check(
        "status events: settled tasks without the event of their outcome",
        status.missing.len().to_string(),
        status.missing.is_empty() && status.undrained == 0 && status.events > 0,
        &status.missing,
    );
    if !status.missing_kinds.is_empty() {
        let kinds: Vec<String> = status.missing_kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("soak: status events missing, by the event expected: {}", kinds.join(" "));
    }
    check(
        "status events: events for what did not happen",
        status.phantom.len().to_string(),
        status.phantom.is_empty(),
        &status.phantom,
    );
    println!(
        "soak: faults: worker kills {} | stops {} (longer than the lease {}) | connections terminated {} | \
         PostgreSQL restarts {} | herald processes that died by themselves {}",
        faults.kills.load(Ordering::Relaxed),
        faults.stops.load(Ordering::Relaxed),
        faults.long_stops.load(Ordering::Relaxed),
        faults.terminated.load(Ordering::Relaxed),
        faults.pg_restarts.load(Ordering::Relaxed),
        faults.deaths.load(Ordering::Relaxed),
    );
    Tally { passed, failed }
}

// ------------------------------------------------------------------------------------------ control

/// The control run's store: Herald's PostgreSQL store with one bug planted in `finish`.
struct PlantedStore {
    inner: Arc<dyn DeliveryStore>,
    pg: PgStore,
    plant: Plant,
}

/// Only the delivery path: a batch of finishes goes through the planted `finish` one record at a time
/// (`DeliveryStore::finish_batch`'s default).
#[async_trait]
impl DeliveryStore for PlantedStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        if self.plant == Plant::ClaimIgnoresErasure {
            return herald_postgres::negative::claim_ignoring_erasure(&self.pg, request).await;
        }
        self.inner.claim(request).await
    }

    async fn finish(&self, record: &FinishRecord) -> Result<FinishResult, StoreError> {
        match self.plant {
            Plant::ClaimIgnoresErasure | Plant::StatusWithoutRefused => self.inner.finish(record).await,
            Plant::FinishWithoutToken => {
                herald_postgres::negative::finish_by_id_only(&self.pg, record).await?;
                Ok(FinishResult::Applied)
            }
            Plant::RefusalAfterUncertaintyFailed => {
                let refused = matches!(record.observation, Observation::RetryableReject { .. } | Observation::Rejected);
                if refused && record.transition.state == TaskState::Unknown {
                    let mut planted = record.clone();
                    planted.transition = Transition {
                        state: TaskState::Failed,
                        outcome_uncertain: false,
                        needs_review: false,
                        next_attempt_at: None,
                        uncertain_since: None,
                        provider_msg_id: None,
                        reason: Some("planted: refusal after uncertainty written as FAILED"),
                    };
                    return self.inner.finish(&planted).await;
                }
                self.inner.finish(record).await
            }
        }
    }

    async fn give_back(&self, record: &GiveBack) -> Result<FinishResult, StoreError> {
        self.inner.give_back(record).await
    }
}

/// `herald-soak planted-worker --config FILE --plant NAME`: Herald's workers, as `herald worker` runs
/// them from the same configuration, over a store with the bug planted. Stops on SIGTERM.
async fn planted_worker(args: &[String]) -> anyhow::Result<()> {
    let mut config_path = None;
    let mut plant = None;
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--config" => config_path = Some(PathBuf::from(value)),
            "--plant" => plant = Some(Plant::parse(value)?),
            _ => bail!("unknown option {flag}\n{USAGE}"),
        }
    }
    let (Some(config_path), Some(plant)) = (config_path, plant) else { bail!(USAGE) };
    let config = herald_app::config::Config::load(Some(&config_path), std::iter::empty())?;
    let (pg, services) = herald_app::compose::services_from_config(&config, "worker", true).await?;
    let planted = PlantedStore { inner: Arc::clone(&services.delivery), pg, plant };
    let services = services.with_delivery(Arc::new(planted));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = tokio::task::JoinSet::new();
    let worker = herald_app::compose::configured_worker(&services, &config.worker, "planted", 0);
    let in_flight = config.worker.concurrency as usize;
    workers.spawn(async move { worker.run_pipelined(in_flight, stop_rx, None).await });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    stop_tx.send_replace(true);
    let _ =
        tokio::time::timeout(Duration::from_millis(LEASE_MS), async { while workers.join_next().await.is_some() {} })
            .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded() {
        let (mut a, mut b) = (Rng(5), Rng(5));
        assert_eq!((a.next(), a.below(10)), (b.next(), b.below(10)));
    }

    #[test]
    fn every_mix_names_its_channels() {
        let mut all: Vec<&str> = [Mix::Regular, Mix::Event, Mix::Miao, Mix::Slow, Mix::Digest, Mix::Mail, Mix::WebPush]
            .iter()
            .flat_map(|m| m.channels())
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, ["digest", "mail", "miao", "push", "slow", "sms", "webpush"]);
        for plant in [
            Plant::FinishWithoutToken,
            Plant::RefusalAfterUncertaintyFailed,
            Plant::ClaimIgnoresErasure,
            Plant::StatusWithoutRefused,
        ] {
            assert_eq!(Plant::parse(plant.name()).ok(), Some(plant));
        }
    }
    /// The case of seed 10240, and each way it could differ from the lease's known gap.
    #[test]
    fn only_a_holder_frozen_through_its_lease_end_explains_a_duplicate() {
        let t = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms);
        let started = t(0);
        let late = vec![("herald-10285-3".to_owned(), started)];
        // Frozen 400 ms after the claim for longer than the lease; the takeover sent at lease end + 1.6 s,
        // the thawed holder right after its SIGCONT.
        let stop = Stop { pid: 10285, from: t(400), until: t(400 + LEASE_MS + 2_000) };
        let arrivals = vec![t(LEASE_MS + 1_600), t(LEASE_MS + 2_420)];
        assert!(frozen_between_check_and_send(&late, &arrivals, &[stop]));

        let other_process = Stop { pid: 10286, ..stop };
        assert!(!frozen_between_check_and_send(&late, &arrivals, &[other_process]), "another process was stopped");
        let thawed_in_time = Stop { until: t(LEASE_MS - 200), ..stop };
        assert!(!frozen_between_check_and_send(&late, &arrivals, &[thawed_in_time]), "continued within its lease");
        let stopped_before = Stop { from: t(0) - Duration::from_secs(5), until: t(0) - Duration::from_secs(1), ..stop };
        assert!(!frozen_between_check_and_send(&late, &arrivals, &[stopped_before]), "stopped before the claim");
        let sent_before_the_stop = vec![t(300), t(LEASE_MS + 2_420)];
        assert!(!frozen_between_check_and_send(&late, &sent_before_the_stop, &[stop]), "P2: sent, then stopped");
        let while_frozen = vec![t(LEASE_MS + 1_600), t(LEASE_MS + 1_700)];
        assert!(!frozen_between_check_and_send(&late, &while_frozen, &[stop]), "both sent while it was frozen");
        let three = vec![t(LEASE_MS + 1_600), t(LEASE_MS + 2_420), t(LEASE_MS + 2_500)];
        assert!(!frozen_between_check_and_send(&late, &three, &[stop]), "three acceptances");
        assert!(!frozen_between_check_and_send(&[], &arrivals, &[stop]), "no late acceptance recorded");
        let two_late = vec![late[0].clone(), late[0].clone()];
        assert!(!frozen_between_check_and_send(&two_late, &arrivals, &[stop]), "two late acceptances");
        assert!(!frozen_between_check_and_send(&late, &arrivals, &[]), "no stop at all");
    }
}
