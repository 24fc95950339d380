//! The `herald` command line: one binary for the API, the workers and the operator's chores.
//!
//! Commands that talk to the database connect through `herald-postgres`; the chores themselves
//! (`review`, `keys rotate`) are written over the ports so that they can be tested with mocks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use herald_domain::resolve::FinalState;
use herald_domain::{Millis, TaskId, UserId};
use herald_ports::{
    ChannelRegistry, ChannelTable, Clock, DestinationCipher, NotificationStore, PreferenceStore, ResolveError, TaskView,
};
use secrecy::ExposeSecret;

use crate::api::{self, ApiState, Authenticator};
use crate::config::{Config, ConfigError, LogFormat};

/// Herald: notification delivery that never silently turns "outcome unknown" into a duplicate or a
/// "not sent".
#[derive(Debug, Parser)]
#[command(name = "herald", version, propagate_version = true)]
#[command(after_help = "Configuration: a TOML file (--config or HERALD_CONFIG) with every key overridable as \
HERALD__SECTION__KEY, e.g. HERALD__DATABASE__URL. Configuration errors exit with status 2.")]
pub struct Cli {
    /// The configuration file (TOML). Without one, only HERALD__… variables and the defaults apply.
    #[arg(long, short, global = true, env = "HERALD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API and the workers in one process.
    Serve,
    /// Run only the workers (claim → call → finish), as many as `worker.concurrency`.
    Worker,
    /// Apply the database migrations, then exit.
    Migrate,
    /// Start a self-contained demonstration (a private database when `database.url` is absent).
    Demo(DemoArgs),
    /// Tasks whose outcome is unknown and that wait for a human.
    #[command(subcommand)]
    Review(ReviewCommand),
    /// Destination encryption keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `herald demo`: see [`crate::demo`].
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run the scripted demonstration once and exit after the summary instead of serving.
    #[arg(long)]
    pub exit: bool,
    /// A PostgreSQL server whose role may create databases; the demo (re)creates the database
    /// `herald_demo` on it and touches nothing else. Default: `database.url`, else a private server.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// The private server's folder (default: ~/.local/share/herald/demo-pg, /var/lib/herald/demo-pg as root).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where the API listens; when the port is taken, a free one is used.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// List parked tasks, oldest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Settle a parked task once, after checking with the channel what really happened.
    Resolve(ResolveArgs),
}

#[derive(Debug, Args)]
#[group(id = "final_state", required = true, multiple = false)]
pub struct FinalStateArg {
    /// The channel did accept it.
    #[arg(long)]
    pub sent: bool,
    /// The channel did not accept it.
    #[arg(long)]
    pub failed: bool,
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The task id (from `herald review list`).
    #[arg(value_name = "TASK")]
    pub task: i64,
    #[command(flatten)]
    pub state: FinalStateArg,
    /// Why: what was checked, recorded with the manual attempt.
    #[arg(long, value_name = "TEXT")]
    pub note: String,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print a new random key (base64 of 32 bytes) for the [keys] section.
    Generate,
    /// Re-encrypt every stored destination that is not under `keys.current`.
    Rotate {
        /// Rows read per batch.
        #[arg(long, default_value_t = 500)]
        batch: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print the bearer token of one user (signed with `auth.user_token_secret`).
    User {
        #[arg(value_name = "USER_ID")]
        user_id: String,
    },
}

/// Loads the configuration, mapping every failure to a [`ConfigError`] (exit status 2).
///
/// # Errors
/// The configuration error.
pub fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
    Config::load(cli.config.as_deref(), std::env::vars())
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // Failure means a subscriber is set already (only in tests); keep it.
    let _ = match config.log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs one command.
///
/// # Errors
/// A [`ConfigError`] (exit status 2) or any other failure (status 1), as one line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Keys(KeysCommand::Generate) => {
            println!("{}", herald_channels::cipher::Keyring::generate_key().expose_secret());
            return Ok(());
        }
        Command::Demo(args) => return demo(&cli, args).await,
        _ => {}
    }
    let config = load_config(&cli)?;
    match cli.command {
        Command::Token(TokenCommand::User { user_id }) => {
            let auth = config.require_auth("token user")?;
            let authenticator =
                Authenticator::new(&auth.service_tokens, &auth.admin_tokens, auth.user_token_secret.clone());
            println!("{}", authenticator.user_token(&user_id).expose_secret());
            Ok(())
        }
        Command::Migrate => {
            init_logging(&config);
            let store = connect(&config, "migrate").await?;
            store.migrate().await.context("migrations failed")?;
            println!("migrations applied");
            Ok(())
        }
        Command::Review(ReviewCommand::List { limit }) => {
            let store = connect(&config, "review list").await?;
            print!("{}", review_list(&store, limit).await?);
            Ok(())
        }
        Command::Review(ReviewCommand::Resolve(args)) => {
            let store = connect(&config, "review resolve").await?;
            let clock = store.clock();
            let final_state = if args.state.sent { FinalState::Sent } else { FinalState::Failed };
            println!("{}", review_resolve(&store, &clock, TaskId(args.task), final_state, &args.note).await?);
            Ok(())
        }
        Command::Keys(KeysCommand::Rotate { batch }) => {
            init_logging(&config);
            let keyring = config.require_keys("keys rotate")?.keyring()?;
            let store = connect(&config, "keys rotate").await?;
            let report = rotate_keys(&store, &keyring, batch).await?;
            println!("{report}");
            Ok(())
        }
        Command::Serve => serve(config, true).await,
        Command::Worker => serve(config, false).await,
        Command::Keys(KeysCommand::Generate) | Command::Demo(_) => unreachable!("handled before loading"),
    }
}

/// `herald demo`: the server is `--database-url`/`DATABASE_URL`, else `database.url` of the
/// configuration, else the private one.
async fn demo(cli: &Cli, args: &DemoArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Warnings only by default: the demo's own output is the story.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let configured = match args.database_url.as_deref().filter(|url| !url.trim().is_empty()) {
        Some(url) => Some(secrecy::SecretString::from(url.to_owned())),
        None => load_config(cli)?.database.url,
    };
    let server = match configured {
        Some(url) => crate::demo::Server::Url(url),
        None => crate::demo::Server::Private { data_dir: args.data_dir.clone() },
    };
    let mut options = crate::demo::DemoOptions::new(server);
    options.exit = args.exit;
    options.listen = args.listen;
    if let Ok(exe) = std::env::current_exe() {
        options.herald = exe.display().to_string();
    }
    let report = crate::demo::run(options).await?;
    if !report.drained || report.cases.iter().any(|c| !c.ok) {
        anyhow::bail!("the demo did not end as its scenario table expects (see above)");
    }
    Ok(())
}

async fn connect(config: &Config, command: &str) -> anyhow::Result<herald_postgres::PgStore> {
    let url = config.require_database_url(command)?;
    // The store's error never carries the URL; neither does this message.
    herald_postgres::PgStore::connect(url.expose_secret(), config.database.max_connections)
        .await
        .context("cannot connect to the database (database.url)")
}

/// `/readyz` of `herald serve`: the database answers and every migration is applied. Public so the
/// black-box API tests judge readiness exactly as the service does.
pub struct PgReadiness(pub herald_postgres::PgStore);

#[async_trait::async_trait]
impl api::Readiness for PgReadiness {
    async fn check(&self) -> Result<(), String> {
        if !self.0.ping().await {
            return Err("the database does not answer".into());
        }
        if !self.0.is_migrated().await {
            return Err("the database is not migrated (run `herald migrate`)".into());
        }
        Ok(())
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// How often `serve` refreshes the task gauges of `/metrics` from the database.
const GAUGE_REFRESH: Duration = Duration::from_secs(5);

/// `serve` (API and workers) or `worker` (workers only), until SIGINT or SIGTERM.
async fn serve(config: Config, with_api: bool) -> anyhow::Result<()> {
    let command = if with_api { "serve" } else { "worker" };
    init_logging(&config);
    let keyring = config.require_keys(command)?.keyring()?;
    let authenticator = if with_api {
        let auth = config.require_auth(command)?;
        Some(Authenticator::new(&auth.service_tokens, &auth.admin_tokens, auth.user_token_secret.clone()))
    } else {
        None
    };
    let registry = herald_channels::registry::HttpChannelRegistry::from_configs(&config.channels)
        .map_err(|error| ConfigError::new(error.key, error.reason))?;
    let metrics = crate::metrics::install()?;
    // Finishes get a pool of their own, one connection per worker loop: the write that records what a
    // channel answered never queues behind claims or API requests (SPEC §5; see docs/ARCHITECTURE.md).
    let url = config.require_database_url(command)?;
    let store = connect(&config, command)
        .await?
        .with_finish_pool(url.expose_secret(), config.worker.concurrency.max(2))
        .await
        .context("cannot connect to the database (database.url)")?;
    if !store.is_migrated().await {
        tracing::warn!("the database is not migrated; run `herald migrate` (readiness reports not ready)");
    }

    let store_port: Arc<dyn NotificationStore> = Arc::new(store.clone());
    let prefs: Arc<dyn PreferenceStore> = Arc::new(store.clone());
    let registry: Arc<dyn ChannelRegistry> = Arc::new(registry);
    let cipher: Arc<dyn DestinationCipher> = Arc::new(keyring);
    let clock: Arc<dyn Clock> = Arc::new(store.clock());
    let channels = ChannelTable(
        config.channels.iter().map(|c| (herald_domain::ChannelName::new(c.name.clone()), c.rules())).collect(),
    );

    // Bound before any worker starts, so a taken port fails the start-up cleanly.
    let api_listener = if with_api {
        Some(
            tokio::net::TcpListener::bind(config.server.listen)
                .await
                .with_context(|| format!("cannot listen on {} (server.listen)", config.server.listen))?,
        )
    } else {
        None
    };

    // One shutdown switch for everything: the first SIGINT/SIGTERM stops claiming at once (workers
    // finish the cycle in flight, the API drains); a second one exits without waiting.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let signals = tokio::spawn({
        let stop_tx = Arc::clone(&stop_tx);
        async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested: no new claims; calls in flight finish and are recorded");
            stop_tx.send_replace(true);
            shutdown_signal().await;
            tracing::warn!(
                "second shutdown signal: exiting now; unfinished tasks are taken over when their leases expire"
            );
            std::process::exit(130);
        }
    });
    let (wake, listener_task) = crate::wakeups::start(store.clone(), stop_rx.clone()).await;
    // Only a process that serves `/metrics` needs the gauges; `herald worker` has no scrape endpoint.
    let gauges = with_api.then(|| {
        tokio::spawn(crate::metrics::refresh_every(
            Arc::clone(&store_port),
            metrics.clone(),
            GAUGE_REFRESH,
            stop_rx.clone(),
        ))
    });

    let mut workers = tokio::task::JoinSet::new();
    for i in 0..config.worker.concurrency {
        let worker = crate::worker::Worker::new(
            Arc::clone(&store_port),
            Arc::clone(&registry),
            Arc::clone(&cipher),
            Arc::clone(&clock),
            crate::worker::WorkerConfig {
                id: format!("herald-{}-{i}", std::process::id()),
                lease: Millis(config.worker.lease_ms),
                batch: config.worker.batch,
                idle_poll: Duration::from_millis(config.worker.poll_ms),
            },
        );
        let (stop, wake) = (stop_rx.clone(), wake.clone());
        workers.spawn(async move { worker.run(stop, Some(wake)).await });
    }
    drop(wake);
    tracing::info!(workers = config.worker.concurrency, channels = config.channels.len(), "workers started");

    let stopping = {
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    };
    let result = if let Some(auth) = authenticator {
        let state = ApiState {
            store: store_port,
            prefs,
            registry,
            cipher,
            clock,
            auth: Arc::new(auth),
            channels: Arc::new(channels),
            readiness: Arc::new(PgReadiness(store)),
            metrics: Some(metrics),
            body_limit: config.server.body_limit_bytes,
        };
        let listener = api_listener.context("the API listener is bound when the API runs")?;
        tracing::info!(listen = %config.server.listen, "API listening");
        api::serve(listener, api::router(state), stopping, Duration::from_secs(10))
            .await
            .context("the HTTP server failed")
    } else {
        stopping.await;
        Ok(())
    };
    // Also when the HTTP server failed: the workers must not outlive it unnoticed.
    stop_tx.send_replace(true);
    // A cycle in flight ends within the channel timeout plus its finish, which the configuration keeps
    // below the lease; waiting longer would only delay what lease expiry recovers anyway.
    let lease = Duration::from_millis(config.worker.lease_ms);
    let drained = tokio::time::timeout(lease, async { while workers.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            still_running = workers.len(),
            "workers did not finish within the lease; their tasks are taken over when the leases expire"
        );
        workers.abort_all();
    }
    if let Some(gauges) = gauges {
        let _ = gauges.await;
    }
    let _ = listener_task.await;
    signals.abort();
    tracing::info!("stopped");
    result
}

fn outcomes(task: &TaskView) -> String {
    let list: Vec<&str> = task.attempts.iter().map(|a| a.outcome.map_or("…", |o| o.as_str())).collect();
    format!("[{}]", list.join(", "))
}

/// The parked tasks as a table, one line each.
///
/// # Errors
/// Store failures.
pub async fn review_list(store: &dyn NotificationStore, limit: u32) -> anyhow::Result<String> {
    let tasks = store.parked(limit).await.context("cannot list parked tasks")?;
    if tasks.is_empty() {
        return Ok("no task is waiting for review\n".into());
    }
    let mut out = String::from("TASK\tNOTIFICATION\tUSER\tCHANNEL\tATTEMPTS\tOUTCOMES\tREASON\n");
    for t in &tasks {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            t.task_id,
            t.notification_id,
            t.user_id,
            t.channel,
            t.attempt_count,
            outcomes(t),
            t.last_error.as_deref().unwrap_or("-")
        ));
    }
    Ok(out)
}

/// Resolves one parked task; a task that is not parked is an error that says nothing changed.
///
/// # Errors
/// Not found, not parked, or a store failure.
pub async fn review_resolve(
    store: &dyn NotificationStore,
    clock: &dyn Clock,
    task: TaskId,
    final_state: FinalState,
    note: &str,
) -> anyhow::Result<String> {
    if note.trim().is_empty() {
        return Err(ConfigError::new("--note", "must not be empty").into());
    }
    let now = clock.now().await.context("cannot read the database clock")?;
    match store.resolve_manually(task, final_state, note, now).await {
        Ok(resolved) => Ok(format!("task {} is now {}", resolved.task_id, resolved.state)),
        Err(ResolveError::NotFound) => anyhow::bail!("task {task} does not exist"),
        Err(ResolveError::NotParked { state }) => {
            anyhow::bail!("task {task} is {state} and not waiting for review; nothing changed")
        }
        Err(ResolveError::Store(error)) => Err(anyhow::Error::new(error).context("cannot resolve the task")),
    }
}

/// What a key rotation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RotationReport {
    pub examined: u64,
    pub rotated: u64,
    /// Changed by someone else between read and write; the new value is theirs, under the current key.
    pub skipped: u64,
}

impl std::fmt::Display for RotationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} destinations examined, {} re-encrypted under the current key, {} changed concurrently (left as they are)",
            self.examined, self.rotated, self.skipped
        )
    }
}

/// Re-encrypts every destination not under the current key, row by row, never overwriting a
/// concurrent change (the replacement is conditional on the old ciphertext).
///
/// # Errors
/// A store failure, or a destination under a key that is not loaded (named by id, never the value).
pub async fn rotate_keys(
    prefs: &dyn PreferenceStore,
    cipher: &dyn DestinationCipher,
    batch: u32,
) -> anyhow::Result<RotationReport> {
    let mut report = RotationReport::default();
    let mut after: Option<(UserId, herald_domain::ChannelName)> = None;
    loop {
        let rows = prefs.destinations_after(after.clone(), batch.max(1)).await.context("cannot read destinations")?;
        let Some(last) = rows.last() else { break };
        after = Some((last.user_id.clone(), last.channel.clone()));
        for row in &rows {
            report.examined += 1;
            if !cipher.needs_rotation(&row.ciphertext) {
                continue;
            }
            let plain = cipher.decrypt(&row.user_id, &row.channel, &row.ciphertext).with_context(|| {
                format!("cannot decrypt the destination of user {} on channel {}", row.user_id, row.channel)
            })?;
            let new = cipher.encrypt(&row.user_id, &row.channel, &plain).context("cannot encrypt a destination")?;
            if prefs.replace_destination(&row.user_id, &row.channel, &row.ciphertext, &new).await? {
                report.rotated += 1;
            } else {
                report.skipped += 1;
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use herald_ports::cipher::MockDestinationCipher;
    use herald_ports::prefs::MockPreferenceStore;
    use herald_ports::StoredDestination;
    use secrecy::SecretString;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn resolve_needs_exactly_one_final_state_and_a_note() {
        let parse = |args: &[&str]| Cli::try_parse_from(["herald"].iter().chain(args));
        let cli = parse(&["review", "resolve", "7", "--sent", "--note", "checked"]).expect("valid");
        let Command::Review(ReviewCommand::Resolve(args)) = cli.command else { panic!("wrong command") };
        assert_eq!((args.task, args.state.sent, args.state.failed), (7, true, false));
        assert!(parse(&["review", "resolve", "7", "--note", "x"]).is_err());
        assert!(parse(&["review", "resolve", "7", "--sent", "--failed", "--note", "x"]).is_err());
        assert!(parse(&["review", "resolve", "7", "--failed"]).is_err());
        assert!(parse(&["demo", "--exit"]).is_ok());
        assert!(parse(&["token", "user", "alice"]).is_ok());
        assert!(parse(&["--config", "x.toml", "serve"]).is_ok());
    }

    #[tokio::test]
    async fn rotation_re_encrypts_only_old_rows_and_never_overwrites_a_concurrent_change() {
        let rows = vec![
            StoredDestination { user_id: "a".into(), channel: "push".into(), ciphertext: b"old-1".to_vec() },
            StoredDestination { user_id: "b".into(), channel: "push".into(), ciphertext: b"new-1".to_vec() },
            StoredDestination { user_id: "c".into(), channel: "push".into(), ciphertext: b"old-2".to_vec() },
        ];
        let mut prefs = MockPreferenceStore::new();
        prefs
            .expect_destinations_after()
            .returning(move |after, _| Ok(if after.is_none() { rows.clone() } else { Vec::new() }));
        prefs
            .expect_replace_destination()
            .times(2)
            .returning(|user, _, old, new| Ok(user.as_str() == "a" && old == b"old-1" && new == b"fresh"));
        let mut cipher = MockDestinationCipher::new();
        cipher.expect_needs_rotation().returning(|bytes| bytes.starts_with(b"old"));
        cipher.expect_decrypt().times(2).returning(|_, _, _| Ok(SecretString::from("dest")));
        cipher.expect_encrypt().times(2).returning(|_, _, _| Ok(b"fresh".to_vec()));
        let report = rotate_keys(&prefs, &cipher, 10).await.expect("rotates");
        assert_eq!(report, RotationReport { examined: 3, rotated: 1, skipped: 1 });
    }
}
