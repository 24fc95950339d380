//! The `herald` command line: one binary for the API, the workers and the operator's chores.
//!
//! This module only parses the command line and dispatches: the services come from the composition
//! root (`crate::compose`), the chores (`review`, `keys rotate`) are the use cases of `crate::usecases`
//! shared with the API, and `serve`/`worker` run in `crate::service`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use herald_domain::resolve::FinalState;
use herald_domain::{TaskId, UserId};
use herald_ports::{ResolveError, TaskView};
use secrecy::ExposeSecret;

use crate::api::Authenticator;
use crate::compose::{self, Services};
use crate::config::{Config, ConfigError, LogFormat};
use crate::usecases;

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
    /// The private server's folder (default: /var/tmp/herald-pg as root, else ~/.cache/herald/pg — the
    /// one the test scripts use too).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Stop the private PostgreSQL (if it runs) and exit.
    #[arg(long)]
    pub stop_postgres: bool,
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

/// Logging for the commands that run for a while (`serve`, `worker`, `migrate`, `keys rotate`).
pub(crate) fn init_logging(config: &Config) {
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
            let store = compose::connect(&config, "migrate").await?;
            store.migrate().await.context("migrations failed")?;
            println!("migrations applied");
            Ok(())
        }
        Command::Review(ReviewCommand::List { limit }) => {
            let services = store_services(&config, "review list").await?;
            print!("{}", review_list(&services, limit).await?);
            Ok(())
        }
        Command::Review(ReviewCommand::Resolve(args)) => {
            let services = store_services(&config, "review resolve").await?;
            let final_state = if args.state.sent { FinalState::Sent } else { FinalState::Failed };
            println!("{}", review_resolve(&services, TaskId(args.task), final_state, &args.note).await?);
            Ok(())
        }
        Command::Keys(KeysCommand::Rotate { batch }) => {
            init_logging(&config);
            let (_, services) = Services::from_config(&config, "keys rotate", false).await?;
            let report = usecases::rotate_keys(services.prefs.as_ref(), services.cipher.as_ref(), batch).await?;
            println!("{report}");
            Ok(())
        }
        Command::Serve => crate::service::serve(config, true).await,
        Command::Worker => crate::service::serve(config, false).await,
        Command::Keys(KeysCommand::Generate) | Command::Demo(_) => unreachable!("handled before loading"),
    }
}

/// `herald demo`: the server is `--database-url`/`DATABASE_URL`, else `database.url` of the
/// configuration, else the private one.
async fn demo(cli: &Cli, args: &DemoArgs) -> anyhow::Result<()> {
    if args.stop_postgres {
        return crate::demo::postgres::stop(args.data_dir.as_deref()).await;
    }
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

fn outcomes(task: &TaskView) -> String {
    let list: Vec<&str> = task.attempts.iter().map(|a| a.outcome.map_or("…", |o| o.as_str())).collect();
    format!("[{}]", list.join(", "))
}

/// The services of a command that needs only the database (no keys, no channels): the review commands.
async fn store_services(config: &Config, command: &str) -> anyhow::Result<Services> {
    let store = Arc::new(compose::connect(config, command).await?);
    let clock: Arc<dyn herald_ports::Clock> = Arc::new(store.clock());
    let registry = Arc::new(herald_channels::registry::HttpChannelRegistry::from_configs(&[])?);
    Ok(Services::over(store, registry, Arc::new(NoKeys), clock))
}

/// The cipher of a command that never touches a destination.
struct NoKeys;

impl herald_ports::DestinationCipher for NoKeys {
    fn encrypt(
        &self,
        _: &UserId,
        _: &herald_domain::ChannelName,
        _: &secrecy::SecretString,
    ) -> Result<Vec<u8>, herald_ports::CipherError> {
        Err(herald_ports::CipherError::Encrypt)
    }

    fn decrypt(
        &self,
        _: &UserId,
        _: &herald_domain::ChannelName,
        _: &[u8],
    ) -> Result<secrecy::SecretString, herald_ports::CipherError> {
        Err(herald_ports::CipherError::UnknownKey { key_id: "none (this command loads no keys)".into() })
    }

    fn needs_rotation(&self, _: &[u8]) -> bool {
        false
    }
}

/// The parked tasks as a table, one line each.
///
/// # Errors
/// Store failures.
pub async fn review_list(services: &Services, limit: u32) -> anyhow::Result<String> {
    let tasks = usecases::review_list(services, limit).await.context("cannot list parked tasks")?;
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
    services: &Services,
    task: TaskId,
    final_state: FinalState,
    note: &str,
) -> anyhow::Result<String> {
    if note.trim().is_empty() {
        return Err(ConfigError::new("--note", "must not be empty").into());
    }
    match usecases::resolve(services, task, final_state, note).await {
        Ok(resolved) => Ok(format!("task {} is now {}", resolved.task_id, resolved.state)),
        Err(ResolveError::NotFound) => anyhow::bail!("task {task} does not exist"),
        Err(ResolveError::NotParked { state }) => {
            anyhow::bail!("task {task} is {state} and not waiting for review; nothing changed")
        }
        Err(ResolveError::Store(error)) => Err(anyhow::Error::new(error).context("cannot resolve the task")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

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
}
