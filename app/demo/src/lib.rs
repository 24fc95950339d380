//! `herald demo`: the whole service on one machine in one command — a PostgreSQL database, the five
//! stand-in channels (webhook, sms, Miaotixing, an SMTP server, a Web Push service), the real HTTP API and several workers — driven through a scripted mix that shows
//! what the service is for: where the outcome of a call is unknown, no user is prompted twice where the
//! channel's contract allows avoiding it, and what cannot be decided automatically waits for a human.
//!
//! The parts are the production ones (`api::router`, `worker::Worker`, `PgStore`, the HTTP channel
//! adapters); only the channels are stand-ins, so that their counters can say how many times a user
//! would really have been prompted.
//!
//! * [`postgres`]: the server used when none is configured (127.0.0.1:5432, else the private cluster);
//! * [`scenario`]: the table of scripted cases and the background traffic;
//! * [`submit`]: the submissions, through the API;
//! * [`summary`]: the counting and the tables.

pub mod postgres;
pub mod scenario;
pub mod submit;
pub mod summary;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use base64::Engine as _;
use herald_channels::cipher::Keyring;
use herald_channels::config::{ChannelConfig, ConfigSecret, SmtpTls};
use herald_channels::kinds::email::{Email, EmailSettings};
use herald_channels::kinds::webpush::VapidKey;
use herald_channels::kinds::webpush::{Webpush, WebpushSettings};
use herald_channels::registry::HttpChannelRegistry;
use herald_domain::{ChannelKind, Millis, UserId};
use herald_ports::Clock;
use herald_standin::{Kind, Script, SmtpStandIn, StandIn, WebPushService};
use secrecy::{ExposeSecret, SecretString};
use sqlx::Connection as _;

use herald_core::auth::Authenticator;
use herald_core::worker::WorkerConfig;
use herald_core::Services;
use herald_http as api;
use scenario::{Ch, CASES};
use summary::{CaseResult, ChannelSummary, StandIns};

/// The database the demo creates (and drops first) on its server.
pub const DEMO_DATABASE: &str = "herald_demo";
/// The database of the README's walkthrough on the demo's server: dropped when the demo starts serving,
/// so that the walkthrough's `herald migrate` creates it afresh.
pub const WALKTHROUGH_DATABASE: &str = "herald_walkthrough";
/// Ports of the spare stand-ins (push, sms, miao) that `example.toml` points at: channels for the
/// reader's own experiments while the demo runs. The demo's own traffic uses stand-ins on free ports, so
/// that its counters stay about the demo alone.
pub const SPARE_STANDIN_PORTS: [u16; 3] = [9001, 9002, 9003];
/// Concurrent worker cycles.
pub const WORKERS: u32 = 4;
/// Longer than the client timeout plus the finish margin (SPEC §4).
const LEASE_MS: u64 = 5_000;
/// The drain gives up after this long and reports what is left unsettled.
const DRAIN_LIMIT: Duration = Duration::from_secs(90);

/// Where the demo's database server comes from.
#[derive(Debug)]
pub enum Server {
    /// A configured server (`DATABASE_URL`, `--database-url` or `database.url`); its role must be able
    /// to create databases. The database named in the URL is not touched.
    Url(SecretString),
    /// The server of the project's one rule, as the test scripts find it: 127.0.0.1:5432 when it answers,
    /// else the private cluster (in the default folder). With `data_dir`, the private cluster in that
    /// folder.
    Found { data_dir: Option<PathBuf> },
}

/// How to run the demo.
#[derive(Debug)]
pub struct DemoOptions {
    pub server: Server,
    /// Dropped and recreated on every run, so the summary is about this run.
    pub database: String,
    /// Where the API listens; when the port is taken, a free one is used instead.
    pub listen: SocketAddr,
    /// Where to start the spare stand-ins for `example.toml`; `None`: none.
    pub spare_standins: Option<[u16; 3]>,
    /// Stop after the summary instead of serving until ctrl-c.
    pub exit: bool,
    /// Draw the progress bar (it draws only on a terminal anyway).
    pub progress: bool,
    /// How the printed commands call the binary.
    pub herald: String,
    /// Install the process-wide Prometheus recorder for `/metrics` (off in tests, which share a process).
    pub metrics: bool,
}

impl DemoOptions {
    /// The options of `herald demo` with a server and the defaults.
    #[must_use]
    pub fn new(server: Server) -> Self {
        DemoOptions {
            server,
            database: DEMO_DATABASE.to_owned(),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            spare_standins: Some(SPARE_STANDIN_PORTS),
            exit: false,
            progress: true,
            herald: "herald".to_owned(),
            metrics: true,
        }
    }
}

/// What the run showed, for the caller (and the test) to check.
#[derive(Debug)]
pub struct DemoReport {
    pub channels: Vec<ChannelSummary>,
    pub cases: Vec<CaseResult>,
    pub submitted: submit::Submitted,
    /// Rows in the `notification` table after the run.
    pub notification_rows: u64,
    /// Rows in `delivery_task`.
    pub task_rows: u64,
    /// Every task settled before [`DRAIN_LIMIT`].
    pub drained: bool,
    pub drain_time: Duration,
    /// Task ids of the parked tasks, oldest first.
    pub parked: Vec<i64>,
    /// The payloads the Web Push stand-in decrypted (VAPID verified first), in order.
    pub webpush_payloads: Vec<String>,
}

impl DemoReport {
    #[must_use]
    pub fn channel(&self, ch: Ch) -> &ChannelSummary {
        &self.channels[Ch::ALL.iter().position(|c| *c == ch).unwrap_or(0)]
    }
}

/// The sender of the demo's e-mail channel.
pub const DEMO_MAIL_FROM: &str = "herald@notify.example.org";

/// The demo's channels: one per kind, pointing at the stand-ins, with short timeouts and backoffs so
/// the run takes seconds, and a Miaotixing interval of 200 ms instead of the real service's 10 s. The
/// e-mail channel speaks plain SMTP to the stand-in on loopback (`tls = "none"` is refused for any
/// other host); the Web Push channel signs with `vapid_key` and may post to loopback endpoints.
#[must_use]
pub fn channel_configs(push: &str, sms: &str, miao: &str, smtp_port: u16, vapid_key: &str) -> Vec<ChannelConfig> {
    let email = ChannelConfig::with_settings::<Email>(
        "email",
        "",
        EmailSettings {
            host: Some("127.0.0.1".into()),
            port: Some(smtp_port),
            tls: Some(SmtpTls::None),
            from: Some(DEMO_MAIL_FROM.into()),
            ..EmailSettings::default()
        },
    );
    let webpush = ChannelConfig::with_settings::<Webpush>(
        "webpush",
        "",
        WebpushSettings {
            vapid_private_key: Some(ConfigSecret::new(vapid_key.to_owned())),
            vapid_subject: Some("mailto:ops@notify.example.org".into()),
            allow_loopback_endpoints: true,
            ..WebpushSettings::default()
        },
    );
    let mut configs = vec![
        ChannelConfig::new("push", ChannelKind::Webhook, push),
        ChannelConfig::new("sms", ChannelKind::Queryable, sms),
        ChannelConfig::new("miao", ChannelKind::Miaotixing, miao),
        email,
        webpush,
    ];
    for config in &mut configs {
        config.timeout_ms = scenario::TIMEOUT_MS;
        config.retry_base_ms = scenario::RETRY_BASE_MS;
        config.retry_cap_ms = scenario::RETRY_CAP_MS;
    }
    configs[2].min_interval_ms = Some(scenario::MIAO_INTERVAL_MS);
    configs[3].timeout_ms = scenario::SLOW_KIND_TIMEOUT_MS;
    configs[4].timeout_ms = scenario::SLOW_KIND_TIMEOUT_MS;
    configs
}

fn random_token(prefix: &str) -> String {
    let bytes: [u8; 18] = rand::random();
    format!("{prefix}-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The server URL with another database, and whether it can be shown (no password in it).
fn with_database(server: &str, database: &str) -> anyhow::Result<(String, bool)> {
    let mut url = reqwest::Url::parse(server).context("the database URL is not a URL")?;
    url.set_path(&format!("/{database}"));
    let showable = url.password().is_none();
    Ok((url.to_string(), showable))
}

/// Drops `database` on the server, and creates it again when `create`. Its name is a plain identifier,
/// checked here.
async fn recreate(server: &str, database: &str, create: bool) -> anyhow::Result<()> {
    if database.is_empty() || !database.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        bail!("the demo database name must consist of a-z, 0-9 and _");
    }
    let mut conn = sqlx::PgConnection::connect(server)
        .await
        .context("cannot connect to the demo's PostgreSQL server (is it running? does DATABASE_URL answer?)")?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        .execute(&mut conn)
        .await
        .with_context(|| format!("cannot drop the previous {database} database"))?;
    if create {
        sqlx::query(&format!("CREATE DATABASE {database}")).execute(&mut conn).await.with_context(|| {
            format!("cannot create the database {database} (the role must be allowed to create databases)")
        })?;
    }
    conn.close().await.ok();
    Ok(())
}

/// Where a server URL points, without user or password: `host:port`.
fn server_place(server: &str) -> String {
    reqwest::Url::parse(server).map_or_else(
        |_| "(a URL that does not parse)".to_owned(),
        |url| format!("{}:{}", url.host_str().unwrap_or("localhost"), url.port().unwrap_or(5432)),
    )
}

/// The spare stand-ins, or `None` (with the reason printed) when a port is taken.
async fn spare_standins(ports: [u16; 3]) -> Option<[StandIn; 3]> {
    let bind = |kind, port| StandIn::bind(kind, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    match (bind(Kind::Push, ports[0]).await, bind(Kind::Sms, ports[1]).await, bind(Kind::Miaotixing, ports[2]).await) {
        (Ok(push), Ok(sms), Ok(miao)) => {
            // The walkthrough's way to make a parked task by hand: this code is always answered too late.
            for _ in 0..1_000 {
                miao.script_for(scenario::LATE_MIAO_CODE, Script::Delay(scenario::LATE_MIAO_DELAY));
            }
            Some([push, sms, miao])
        }
        _ => {
            println!(
                "Spare stand-ins for example.toml: not started, a port of {}, {}, {} is taken",
                ports[0], ports[1], ports[2]
            );
            None
        }
    }
}

async fn settled_and_total(store: &herald_postgres::PgStore) -> anyhow::Result<(u64, u64)> {
    let (settled, total): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(*) FILTER (WHERE t.state IN ('SENT', 'FAILED', 'SUPPRESSED') OR {}), count(*) \
         FROM delivery_task t",
        herald_postgres::PARKED
    ))
    .fetch_one(store.pool())
    .await
    .context("cannot count tasks")?;
    Ok((settled.try_into().unwrap_or(0), total.try_into().unwrap_or(0)))
}

async fn count_rows(store: &herald_postgres::PgStore, table: &str) -> anyhow::Result<u64> {
    let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .with_context(|| format!("cannot count {table}"))?;
    Ok(n.try_into().unwrap_or(0))
}

/// Waits until every task is settled (or [`DRAIN_LIMIT`]), drawing the progress bar.
async fn drain(store: &herald_postgres::PgStore, progress: bool) -> anyhow::Result<(bool, Duration)> {
    let start = Instant::now();
    let (_, total) = settled_and_total(store).await?;
    let bar = if progress { indicatif::ProgressBar::new(total) } else { indicatif::ProgressBar::hidden() };
    bar.set_style(
        indicatif::ProgressStyle::with_template("  {bar:40} {pos}/{len} tasks settled  {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let drained = loop {
        let (settled, _) = settled_and_total(store).await?;
        bar.set_position(settled);
        if settled >= total {
            break true;
        }
        if start.elapsed() > DRAIN_LIMIT {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    bar.finish();
    Ok((drained, start.elapsed()))
}

async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Runs the demo: database, stand-ins, API, workers, the scripted mix, the summary; then serves until
/// ctrl-c unless `exit`.
///
/// # Errors
/// When the database cannot be prepared, a port cannot be bound, or the API answers what the demo
/// did not expect.
#[allow(clippy::too_many_lines)] // One story, told in order; the parts live in the submodules.
pub async fn run(options: DemoOptions) -> anyhow::Result<DemoReport> {
    println!("Herald demo: the real API, workers and PostgreSQL store, with stand-in channels.\n");

    // 1. The database server and a fresh database on it.
    let (server_url, private) = match &options.server {
        Server::Url(url) => {
            let url = url.expose_secret().to_owned();
            println!(
                "PostgreSQL: the configured server {} (DATABASE_URL, --database-url or database.url), database {} \
                 (recreated)",
                server_place(&url),
                options.database
            );
            (url, None)
        }
        Server::Found { data_dir } => {
            let pg = postgres::find(data_dir.as_deref()).await?;
            println!("PostgreSQL: {}, database {} (recreated)", pg.which, options.database);
            let private = pg.is_private().then(|| pg.clone());
            (pg.url("postgres"), private)
        }
    };
    recreate(&server_url, &options.database, true).await?;
    if !options.exit {
        recreate(&server_url, WALKTHROUGH_DATABASE, false).await?;
    }
    let (db_url, showable) = with_database(&server_url, &options.database)?;
    let store =
        herald_postgres::PgStore::connect(&db_url, WORKERS + 6).await.context("cannot connect to the demo database")?;
    store.migrate().await.context("migrations failed")?;

    // 2. Stand-ins, channels, a fresh key, tokens.
    let push = StandIn::try_start(Kind::Push).await.context("cannot start the push stand-in")?;
    let sms = StandIn::try_start(Kind::Sms).await.context("cannot start the sms stand-in")?;
    let miao = StandIn::try_start(Kind::Miaotixing).await.context("cannot start the miao stand-in")?;
    let email = SmtpStandIn::start().await.context("cannot start the SMTP stand-in")?;
    let webpush = WebPushService::start().await.context("cannot start the Web Push stand-in")?;
    // A fresh VAPID key for this run, as `herald keys vapid` makes one.
    let (vapid_key, _) = VapidKey::generate();
    let configs =
        channel_configs(&push.base_url(), &sms.base_url(), &miao.base_url(), email.port(), vapid_key.as_str());
    let registry =
        HttpChannelRegistry::from_configs(&configs).map_err(|e| anyhow::anyhow!("{}: {}", e.key, e.reason))?;
    let keyring = Keyring::new([("demo".to_owned(), Keyring::generate_key())], "demo").context("demo key")?;
    let service_token = random_token("svc");
    let admin_token = random_token("adm");
    let auth = Arc::new(Authenticator::new(
        &[SecretString::from(service_token.clone())],
        &[SecretString::from(admin_token.clone())],
        SecretString::from(random_token("uts")),
    ));
    println!(
        "Stand-in channels: push (webhook, idempotent) {}, sms (queryable) {}, miao (Miaotixing, neither) {}",
        push.base_url(),
        sms.base_url(),
        miao.base_url()
    );
    println!(
        "  email (SMTP, neither) smtp://{}, webpush (Web Push, neither; VAPID verified, payload decrypted) {}",
        email.addr(),
        webpush.origin()
    );
    println!(
        "  client timeout {} ms (email and webpush {} ms); retries from {} ms; miao egress interval {} ms for the demo (the real service asks for 10 s)",
        scenario::TIMEOUT_MS,
        scenario::SLOW_KIND_TIMEOUT_MS,
        scenario::RETRY_BASE_MS,
        scenario::MIAO_INTERVAL_MS
    );

    let clock: Arc<dyn Clock> = Arc::new(store.clock());
    let services = Services::over(Arc::new(store.clone()), Arc::new(registry), Arc::new(keyring), Arc::clone(&clock));

    // 3. The API.
    let listener = match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(_) => tokio::net::TcpListener::bind(SocketAddr::from((options.listen.ip(), 0)))
            .await
            .context("cannot listen on a loopback port")?,
    };
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    let state = api::ApiState::new(
        services.clone(),
        Arc::clone(&auth),
        Arc::new(api::ClockReadiness(Arc::clone(&clock))),
        if options.metrics { herald_app::metrics::install().ok() } else { None },
        api::DEFAULT_BODY_LIMIT,
    );
    let (api_stop_tx, api_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api::serve(
        listener,
        api::router(state),
        async {
            let _ = api_stop_rx.await;
        },
        Duration::from_secs(5),
    ));
    let moved = if addr.port() == options.listen.port() { "" } else { " (the requested port was taken)" };
    println!("API: {base}{moved}");
    println!("  service token {service_token}\n  admin token   {admin_token}\n");

    // 4. The mix, through the API.
    let client =
        submit::Api { http: reqwest::Client::new(), base: base.clone(), service_token: &service_token, auth: &auth };
    let standins = StandIns { push: &push, sms: &sms, miao: &miao, email: &email, webpush: &webpush };
    let submitted = submit::submit_mix(&client, &standins).await?;
    print_submissions(&submitted);

    // 5. Workers, until drained.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = tokio::task::JoinSet::new();
    for i in 0..WORKERS {
        let worker = services.worker(WorkerConfig {
            id: format!("demo-{}-{i}", std::process::id()),
            lease: Millis(LEASE_MS),
            batch: 4,
            idle_poll: Duration::from_millis(50),
        });
        let stop = stop_rx.clone();
        workers.spawn(async move { worker.run(stop, None).await });
    }
    println!("\n{WORKERS} workers draining:");
    let (drained, drain_time) = drain(&store, options.progress).await?;
    println!("  {} in {:.1} s", if drained { "drained" } else { "NOT drained" }, drain_time.as_secs_f64());

    // 6. The summary.
    let (channels, cases) =
        summary::count(services.reads.as_ref(), services.prefs.as_ref(), &submitted, &standins).await?;
    let notification_rows = count_rows(&store, "notification").await?;
    let task_rows = count_rows(&store, "delivery_task").await?;
    let parked = services.review.parked(100).await?;
    let report = DemoReport {
        channels,
        cases,
        submitted,
        notification_rows,
        task_rows,
        drained,
        drain_time,
        parked: parked.iter().map(|t| t.task_id.0).collect(),
        webpush_payloads: webpush.payloads(),
    };
    print_summary(&report);
    // The user's console link is one-time (and short-lived): made now, for the run that stays up.
    let link = if options.exit {
        String::new()
    } else {
        let link = herald_core::sessions::create_link(
            &services,
            None,
            &UserId::new(scenario::user(1)),
            herald_core::sessions::DEFAULT_LINK_TTL,
        )
        .await?;
        format!("{base}{}", link.path())
    };
    print_next_steps(
        &options,
        &report,
        &parked,
        &base,
        (&service_token, &admin_token, &auth),
        &link,
        (&db_url, showable),
    );
    if !options.exit {
        print_walkthrough_lines(&server_url)?;
    }

    let mut spares = None;
    if !options.exit {
        if let Some(ports) = options.spare_standins {
            spares = spare_standins(ports).await;
            if let Some([push, sms, miao]) = &spares {
                println!(
                    "\nSpare stand-ins for your own tries (example.toml points at them): push {}, sms {}, miao {};\n  \
                     the miao code {} is always answered after {} s, beyond example.toml's timeout (a parked task).",
                    push.base_url(),
                    sms.base_url(),
                    miao.base_url(),
                    scenario::LATE_MIAO_CODE,
                    scenario::LATE_MIAO_DELAY.as_secs()
                );
            }
        }
        println!("\nThe API, the workers and the stand-ins keep running; ctrl-c stops them.");
        stop_signal().await;
        println!("\nstopping");
    }
    let _ = stop_tx.send(true);
    while workers.join_next().await.is_some() {}
    let _ = api_stop_tx.send(());
    let _ = server.await;
    push.shutdown().await;
    sms.shutdown().await;
    miao.shutdown().await;
    email.shutdown().await;
    webpush.shutdown().await;
    for spare in spares.into_iter().flatten() {
        spare.shutdown().await;
    }
    store.pool().close().await;
    if let Some(pg) = private {
        println!("PostgreSQL: {} keeps running for the next run; to stop it: {}", pg.which, postgres::STOP_COMMAND);
    }
    Ok(report)
}

fn print_submissions(s: &submit::Submitted) {
    let cases = CASES.len();
    println!("Submitted through the API:");
    println!("  {:<52} {} x 201 created", format!("{} users, one order notification each", scenario::USERS), s.created);
    println!(
        "  {:<52} {} x 200 created: false (same notification, nothing written)",
        format!("the first {} again (a retried call)", scenario::DUPLICATES),
        scenario::DUPLICATES
    );
    println!(
        "  {:<52} 201, {} notifications",
        format!("/v1/events fanned out to {} users", scenario::FAN_OUT),
        s.fan_out_created
    );
    println!("  {:<52} {}, {} new", "the same event again", s.fan_out_repeat.0, s.fan_out_repeat.1);
    if let Some((_, tasks)) = s.in_app {
        println!("  {:<52} 201, {tasks} tasks (inbox only)", "a user with no channel");
    }
    println!("  {:<52} {}, nothing written", "an invalid submit (ttl_seconds: 0)", s.invalid_status);
    println!("  {:<52} {cases} x 201, one task each, stand-ins scripted:", format!("{cases} scripted cases"));
    for case in CASES {
        println!("{}", case_line(case));
    }
    println!("  {} tasks in all", s.tasks);
}

fn print_summary(report: &DemoReport) {
    let s = &report.submitted;
    println!("\nSummary per channel (Herald's task states | what the stand-in channels counted):");
    print!("{}", summary::channel_table(&report.channels));
    println!(
        "\n  logical notifications: {} rows for {} distinct submits; {} duplicate submits wrote nothing; {} in-app only",
        report.notification_rows,
        s.notifications.len(),
        s.duplicates,
        s.in_app.as_ref().map_or(0, |_| 1)
    );
    let extra: u64 = report.channels.iter().map(|c| c.extra_sends).sum();
    println!(
        "  real sends = SENT + the parked whose call the channel did accept before the answer was lost; extra sends \
         (a user prompted twice for one notification): {extra}"
    );
    println!("\nScripted cases (expected -> observed):");
    print!("{}", summary::case_table(&report.cases));
    let unexpected = report.cases.iter().filter(|c| !c.ok).count();
    println!(
        "  {} of {} cases as expected{}",
        report.cases.len() - unexpected,
        report.cases.len(),
        if unexpected == 0 { "" } else { " — see UNEXPECTED above" }
    );
}

/// The line the README's walkthrough asks to paste into a second terminal: its database on the demo's
/// server, exactly (dropped when the demo started; the walkthrough's `herald migrate` creates it).
fn print_walkthrough_lines(server_url: &str) -> anyhow::Result<()> {
    let (walkthrough, showable) = with_database(server_url, WALKTHROUGH_DATABASE)?;
    println!("\nFor the README walkthrough, paste into a second terminal (from the repository's folder):");
    if showable {
        println!("  export HERALD__DATABASE__URL={walkthrough}");
    } else {
        println!(
            "  export HERALD__DATABASE__URL=<your server's URL, database {WALKTHROUGH_DATABASE}>   # it has a password"
        );
    }
    Ok(())
}

/// One scripted case as listed before the run, columns aligned by display width.
fn case_line(case: &scenario::Case) -> String {
    format!(
        "    {:<20} {:<7} {} expect {}",
        case.id,
        case.channel.name(),
        summary::pad(case.scripted, 48),
        case.end.label()
    )
}

#[allow(clippy::too_many_arguments)]
fn print_next_steps(
    options: &DemoOptions,
    report: &DemoReport,
    parked: &[herald_ports::TaskView],
    base: &str,
    (service_token, admin_token, auth): (&str, &str, &Authenticator),
    link: &str,
    (db_url, showable): (&str, bool),
) {
    let herald = &options.herald;
    println!("\nParked: {} tasks wait for a human (outcome unknown; never resent automatically).", parked.len());
    if showable {
        println!("  export HERALD__DATABASE__URL={db_url}");
    } else {
        println!("  export HERALD__DATABASE__URL=<the server URL, with database {}>", options.database);
    }
    println!("  {herald} review list");
    for task in parked {
        let outcomes: Vec<&str> = task.attempts.iter().map(|a| a.outcome.map_or("…", |o| o.as_str())).collect();
        println!(
            "  {herald} review resolve {} --sent --note \"checked with {}\"    # {} on {}: [{}]",
            task.task_id,
            task.channel,
            task.user_id,
            task.channel,
            outcomes.join(", ")
        );
    }
    if options.exit {
        println!(
            "\nThe API and the stand-ins have stopped (--exit). Run scripts/demo.sh without --exit to keep them \
             running and try the API."
        );
        return;
    }
    // The notification and the inbox shown are the same user's: user-01's order.
    let user = scenario::user(1);
    let notification = report.submitted.first_order.clone().unwrap_or_default();
    println!("\nTry the API (while the demo runs):");
    println!("  curl -s {base}/v1/notifications/{notification} -H 'Authorization: Bearer {service_token}'");
    println!(
        "  curl -s -X POST {base}/v1/notifications -H 'Authorization: Bearer {service_token}' \
         -H 'Content-Type: application/json' \\\n       -d '{{\"user_id\":\"{user}\",\"event_key\":\"hello-1\",\"body\":\"Hello\",\"ttl_seconds\":3600}}'"
    );
    println!(
        "  curl -s {base}/v1/users/{user}/inbox -H 'Authorization: Bearer {}'",
        auth.user_token(&user).expose_secret()
    );
    println!("  curl -s {base}/v1/review -H 'Authorization: Bearer {admin_token}'");
    if let Some(task) = parked.first() {
        println!(
            "  curl -s -X POST {base}/v1/tasks/{}/resolve -H 'Authorization: Bearer {admin_token}' \
             -H 'Content-Type: application/json' \\\n       -d '{{\"final_state\":\"SENT\",\"note\":\"the user confirmed it\"}}'",
            task.task_id
        );
    }
    println!("  curl -s {base}/metrics");
    println!("\nOpen the console (while the demo runs):");
    println!("  operator:  {base}/console/login    (sign in with the admin token {admin_token})");
    println!("  user {user}: {link}    (a one-time link: it signs in once, within 15 minutes)");
}

#[cfg(test)]
mod tests {
    use unicode_width::UnicodeWidthStr as _;

    use super::*;

    /// The row with Miaotixing's Chinese refusal text lines up with the others: the "expect" column
    /// starts at the same terminal column on every row.
    #[test]
    fn case_rows_align_by_display_width() {
        let columns: Vec<usize> = CASES
            .iter()
            .map(|case| {
                let line = case_line(case);
                line[..line.find(" expect ").expect("expect column")].width()
            })
            .collect();
        assert!(CASES.iter().any(|c| c.scripted.contains("参数格式有误")), "the table has a Chinese row");
        assert!(columns.windows(2).all(|w| w[0] == w[1]), "{columns:?}");
        assert_eq!(summary::pad("参数格式有误", 14).width(), 14);
    }
}
