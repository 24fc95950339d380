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

use crate::compose;
use crate::config::{Config, ConfigError};
use herald_core::usecases;
use herald_core::Services;

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
    /// Run the HTTP API and the workers in one process (the API alone with `--no-worker` or
    /// `[worker] enabled = false`).
    Serve(ServiceArgs),
    /// Run only the workers (claim → call → finish), up to `worker.concurrency` calls in flight.
    Worker(ServiceArgs),
    /// Apply the database migrations, then exit. Creates the database of `database.url` first when it
    /// does not exist and the role may create databases.
    Migrate(MigrateArgs),
    /// Write a fresh configuration (random tokens, a new key, secrets in files readable only by you).
    Init(InitArgs),
    /// Start a self-contained demonstration (a private database when `database.url` is absent).
    Demo(DemoArgs),
    /// Tasks whose outcome is unknown and that wait for a human.
    #[command(subcommand)]
    Review(ReviewCommand),
    /// Destination encryption keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Bearer tokens and one-time sign-in links.
    #[command(subcommand)]
    Token(TokenCommand),
    /// The console's sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// A person's data: erasure (SPEC §13).
    #[command(subcommand)]
    Users(UsersCommand),
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Erase a user: from its commit nothing more is sent to them, every task not yet handed to a channel
    /// is settled, their destinations are destroyed, later submissions for them are refused. Repeating it
    /// changes nothing.
    Erase {
        /// The user id.
        #[arg(value_name = "USER")]
        user_id: String,
        /// Who asks, recorded with the erasure (default: the operating-system user running the command).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

/// `herald init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write `herald.toml` and `secrets/` into.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// The database the configuration names.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/herald", value_name = "URL")]
    pub database_url: String,
}

/// `herald migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Migrate even into `postgres`, `template0` or `template1`, the databases PostgreSQL keeps for itself
    /// (refused without it: Herald's tables belong in a database of their own).
    #[arg(long)]
    pub force: bool,
}

/// `herald serve` and `herald worker`.
#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// Apply the database migrations before starting (without it, an unmigrated database is refused).
    #[arg(long)]
    pub migrate: bool,
    /// This process posts to local stand-in channels (tests, the soak): channels may keep
    /// `allow_loopback_endpoints = true`, which is refused otherwise.
    #[arg(long)]
    pub stand_ins: bool,
    /// `herald serve` only: serve the API without workers (the same as `[worker] enabled = false`);
    /// deliveries are then made by `herald worker` processes.
    #[arg(long)]
    pub no_worker: bool,
}

/// `herald demo`: runs the `herald-demo` program installed beside `herald` with these arguments
/// (`herald demo --help` shows its options). The demo lives in a crate of its own, so that the service's
/// library carries no demonstration code.
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct DemoArgs {
    /// Arguments for herald-demo, e.g. `--exit`, `--database-url URL`, `--stop-postgres`, `--help`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<String>,
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
    /// It did not arrive and should be sent again: the task returns to PENDING with a fresh budget and the
    /// next send is an ordinary attempt.
    #[arg(long)]
    pub resend: bool,
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
    /// Print a new VAPID key pair for a `webpush` channel: the private key for `vapid_private_key` (or
    /// its `_file`), and the public key browsers subscribe with (`applicationServerKey`).
    Vapid,
    /// Re-encrypt every stored destination that is not under `keys.current`.
    Rotate {
        /// Rows read per batch.
        #[arg(long, default_value_t = 500)]
        batch: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print the bearer token of one user, signed with the first of `auth.user_token_keys` (or
    /// `auth.user_token_secret`). It expires after `--ttl` (default 24h).
    User {
        /// ASCII letters, digits and . _ - @ : + (1 to 128 characters).
        #[arg(value_name = "USER_ID", value_parser = parse_user_id)]
        user_id: String,
        /// How long the token is valid: a number with s, m, h or d (e.g. 30m, 1h, 7d); at most 366d.
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_ttl)]
        ttl: std::time::Duration,
    },
    /// Print a one-time link that signs one user in to the console: it works once, within
    /// `console.sign_in_link_minutes` (default 15), and carries no token. Needs the database.
    Link {
        /// ASCII letters, digits and . _ - @ : + (1 to 128 characters).
        #[arg(value_name = "USER_ID", value_parser = parse_user_id)]
        user_id: String,
        /// The installation's address, put before the link's path (e.g. https://herald.example.org).
        #[arg(long, value_name = "URL", default_value = "")]
        base_url: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the console sessions that have not ended, newest first.
    List {
        /// Only this user's.
        #[arg(long, value_name = "USER_ID", value_parser = parse_user_id)]
        user: Option<String>,
    },
    /// End console sessions at once: their cookies open nothing any more.
    End {
        /// Every session of this user.
        #[arg(long, value_name = "USER_ID", value_parser = parse_user_id, conflicts_with = "all", required_unless_present = "all")]
        user: Option<String>,
        /// Every session, operators' and users'.
        #[arg(long)]
        all: bool,
    },
}

/// `USER_ID`: the user-id rule of the domain (`herald_domain::check_user_id`); clap names the argument.
fn parse_user_id(text: &str) -> Result<String, String> {
    herald_domain::check_user_id(text).map(|()| text.to_owned()).map_err(|problem| problem.to_string())
}

/// `--ttl`: a whole number followed by `s`, `m`, `h` or `d`, from 1 s to 366 days.
///
/// # Errors
/// What is wrong with it, in words.
pub fn parse_ttl(text: &str) -> Result<std::time::Duration, String> {
    let unit = text.chars().last().ok_or("must be a number followed by s, m, h or d (e.g. 1h)")?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err("must be a number followed by s, m, h or d (e.g. 1h)".to_owned()),
    };
    let number = &text[..text.len() - 1];
    let n: u64 = number
        .parse()
        .ok()
        .filter(|_| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
        .ok_or("must be a number followed by s, m, h or d (e.g. 1h)")?;
    let ttl = std::time::Duration::from_secs(n.saturating_mul(scale));
    if ttl.is_zero() || ttl > herald_core::auth::MAX_USER_TOKEN_TTL {
        return Err("must be between 1s and 366d".to_owned());
    }
    Ok(ttl)
}

/// Loads the configuration, mapping every failure to a [`ConfigError`] (exit status 2).
///
/// # Errors
/// The configuration error.
pub fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
    Config::load(cli.config.as_deref(), std::env::vars())
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
        Command::Keys(KeysCommand::Vapid) => {
            let (private, public) = herald_channels::kinds::webpush::VapidKey::generate();
            println!("vapid_private_key = \"{private}\"");
            println!("# applicationServerKey for the browsers' pushManager.subscribe: {public}");
            return Ok(());
        }
        Command::Demo(args) => return demo(&cli, args),
        Command::Init(args) => {
            let config = crate::init::init(&args.dir, &args.database_url)?;
            println!("wrote {} and its secrets/ (mode 0600)", config.display());
            let database = herald_postgres::database_of(&args.database_url).unwrap_or_else(|_| "herald".into());
            println!(
                "next: herald --config {config} migrate (it creates the database {database} when it does not exist \
                 and the role may create databases; HERALD__DATABASE__URL overrides database.url), then herald \
                 --config {config} serve",
                config = config.display(),
            );
            return Ok(());
        }
        _ => {}
    }
    let config = load_config(&cli)?;
    match cli.command {
        Command::Token(TokenCommand::User { user_id, ttl }) => {
            let auth = config.require_auth("token user")?;
            let authenticator = auth.authenticator();
            println!("{}", authenticator.user_token_for(&user_id, ttl).expose_secret());
            Ok(())
        }
        Command::Token(TokenCommand::Link { user_id, base_url }) => {
            let services = store_services(&config, "token link").await?;
            let link =
                herald_core::sessions::create_link(&services, None, &UserId::new(user_id), config.console.link_ttl)
                    .await
                    .context("cannot store the sign-in link")?;
            println!("{}{}", base_url.trim_end_matches('/'), link.path());
            Ok(())
        }
        Command::Sessions(SessionsCommand::List { user }) => {
            let services = store_services(&config, "sessions list").await?;
            let owner =
                user.map_or(herald_ports::SessionOwner::All, |u| herald_ports::SessionOwner::User(UserId::new(u)));
            let list = services.sessions.sessions_of(&owner).await.context("cannot list sessions")?;
            print!("{}", sessions_table(&list));
            Ok(())
        }
        Command::Sessions(SessionsCommand::End { user, all: _ }) => {
            let services = store_services(&config, "sessions end").await?;
            let owner =
                user.map_or(herald_ports::SessionOwner::All, |u| herald_ports::SessionOwner::User(UserId::new(u)));
            let ended = herald_core::sessions::end_all(&services, &owner).await.context("cannot end sessions")?;
            println!("{ended} session(s) ended");
            Ok(())
        }
        Command::Migrate(args) => {
            crate::logging::init(&config);
            if let Some(created) = compose::prepare_migration(&config, "migrate", args.force).await? {
                println!("{created}");
            }
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
            let final_state = if args.state.sent {
                FinalState::Sent
            } else if args.state.resend {
                FinalState::Resend
            } else {
                FinalState::Failed
            };
            println!("{}", review_resolve(&services, TaskId(args.task), final_state, &args.note).await?);
            Ok(())
        }
        Command::Users(UsersCommand::Erase { user_id, by }) => {
            if let Err(problem) = herald_domain::check_user_id(&user_id) {
                return Err(ConfigError::new("USER", problem.to_string()).into());
            }
            let actor = match by {
                Some(name) if herald_domain::operators::valid_name(&name) => usecases::Actor::command_line(name),
                Some(_) => {
                    return Err(ConfigError::new("--by", "a name of 1 to 128 printable characters".to_owned()).into())
                }
                None => cli_actor(),
            };
            let services = store_services(&config, "users erase").await?;
            let erasure = usecases::erase_user(&services, &actor, &UserId::new(user_id))
                .await
                .context("cannot erase the user")?;
            println!("{}", erasure_words(&erasure));
            Ok(())
        }
        Command::Keys(KeysCommand::Rotate { batch }) => {
            crate::logging::init(&config);
            let (_, services) = compose::services_from_config(&config, "keys rotate", false).await?;
            let report = usecases::rotate_keys(
                &cli_actor(),
                services.prefs.as_ref(),
                services.cipher.as_ref(),
                (services.audit.as_ref(), services.clock.as_ref()),
                batch,
            )
            .await?;
            println!("{report}");
            if let Some(keys) = &services.user_keys {
                // The users' data keys are re-wrapped under the current key; what they seal is not touched.
                let rewrap = keys.rewrap(batch).await.context("cannot re-wrap the users' data keys")?;
                println!(
                    "user data keys: {} examined, {} re-wrapped, {} changed concurrently, {} unreadable",
                    rewrap.examined,
                    rewrap.rewrapped,
                    rewrap.skipped,
                    rewrap.unreadable.len()
                );
                for row in &rewrap.unreadable {
                    println!("  {row}");
                }
            }
            Ok(())
        }
        Command::Serve(args) => crate::service::serve(config, true, &args).await,
        Command::Worker(args) => crate::service::serve(config, false, &args).await,
        Command::Keys(KeysCommand::Generate | KeysCommand::Vapid) | Command::Demo(_) | Command::Init(_) => {
            unreachable!("handled before loading")
        }
    }
}

/// `herald demo`: replaces this process with `herald-demo` from the same folder, passing the
/// configuration file on (`HERALD_CONFIG`) and telling it how to name this binary in the commands it
/// prints (`HERALD_EXE`).
fn demo(cli: &Cli, args: &DemoArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let herald = std::env::current_exe().context("cannot tell where this program is")?;
    let demo = herald.with_file_name("herald-demo");
    if !demo.is_file() {
        anyhow::bail!(
            "the demo program {} is not installed beside herald; build both with `cargo build --release -p \
             herald-app -p herald-demo` (scripts/demo.sh does)",
            demo.display()
        );
    }
    let mut command = std::process::Command::new(&demo);
    command.args(&args.args).env("HERALD_EXE", &herald);
    if let Some(config) = &cli.config {
        command.env("HERALD_CONFIG", config);
    }
    let error = command.exec();
    Err(anyhow::Error::new(error).context(format!("cannot start {}", demo.display())))
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

    fn has_key(&self, _: &str) -> bool {
        false
    }
}

/// Open sessions as a table, one line each: who, how they signed in, when, and when it ends at the latest.
fn sessions_table(list: &[herald_ports::StoredSession]) -> String {
    use herald_ports::{Credential, SessionRole};
    if list.is_empty() {
        return "no open console session\n".into();
    }
    let at = |t| herald_http::api::model::rfc3339(t);
    let mut out = String::from("WHO\tSIGNED IN WITH\tSIGNED IN\tLAST ACTIVE\tENDS\n");
    for s in list {
        let who = match (&s.role, &s.credential) {
            (SessionRole::Operator, Credential::Oidc { name, .. }) => format!("operator {name}"),
            (SessionRole::Operator, _) => "operator".to_owned(),
            (SessionRole::User(user), _) => format!("user {user}"),
        };
        let how = match s.credential {
            Credential::AdminToken { .. } => "admin token",
            Credential::UserToken { .. } => "user token",
            Credential::SignInLink { .. } => "sign-in link",
            Credential::Oidc { .. } => "identity provider",
        };
        out.push_str(&format!("{who}\t{how}\t{}\t{}\t{}\n", at(s.created_at), at(s.last_seen_at), at(s.expires_at)));
    }
    out
}

fn outcomes(task: &TaskView) -> String {
    let list: Vec<&str> = task.attempts.iter().map(|a| a.outcome.map_or("…", |o| o.as_str())).collect();
    format!("[{}]", list.join(", "))
}

/// Who acts from the command line: whoever can read the configuration (an admin), named by the
/// operating system's user (`$USER`), as the audit trail records it.
#[must_use]
pub fn cli_actor() -> usecases::Actor {
    let name = std::env::var("USER").ok().filter(|n| herald_domain::operators::valid_name(n));
    usecases::Actor::command_line(name.unwrap_or_else(|| "unknown".to_owned()))
}

/// The parked tasks as a table, one line each.
///
/// # Errors
/// Store failures.
pub async fn review_list(services: &Services, limit: u32) -> anyhow::Result<String> {
    let tasks = usecases::review_list(services, &cli_actor(), limit).await.context("cannot list parked tasks")?;
    if tasks.is_empty() {
        return Ok("no task is waiting for review\n".into());
    }
    let mut out = String::from("TASK\tNOTIFICATION\tUSER\tCHANNEL\tATTEMPTS\tOUTCOMES\tREASON\n");
    for t in &tasks {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            t.task_id,
            t.notification_ref,
            t.user_id,
            t.channel,
            t.attempt_count,
            outcomes(t),
            t.last_error.as_deref().unwrap_or("-")
        ));
    }
    Ok(out)
}

/// What `herald users erase` prints: the record, in words.
#[must_use]
pub fn erasure_words(erasure: &herald_ports::Erasure) -> String {
    let r = &erasure.record;
    let when = herald_http::api::model::rfc3339(r.requested_at);
    if erasure.first {
        format!(
            "user erased at {when} by {}: {} task(s) settled ({} left the review queue), {} destination(s) destroyed; \
             nothing more will be sent to this user",
            r.requested_by, r.settled_tasks, r.released_reviews, r.destroyed_destinations
        )
    } else {
        format!("the user was erased before, at {when} by {}; nothing changed", r.requested_by)
    }
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
    match usecases::resolve(services, &cli_actor(), task, final_state, note).await {
        Ok(resolved) => Ok(format!(
            "task {} is now {}: {}: {note}",
            resolved.task_id,
            resolved.state,
            usecases::decision_words(final_state)
        )),
        Err(ResolveError::NotFound) => anyhow::bail!("task {task} does not exist"),
        Err(ResolveError::NotParked { state }) => {
            anyhow::bail!("task {task} is {state} and not waiting for review; nothing changed")
        }
        Err(ResolveError::Forbidden(refused)) => Err(refused.into()),
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
        let cli =
            parse(&["review", "resolve", "7", "--resend", "--note", "user checked: nothing arrived"]).expect("valid");
        let Command::Review(ReviewCommand::Resolve(args)) = cli.command else { panic!("wrong command") };
        assert!(args.state.resend && !args.state.sent && !args.state.failed);
        assert!(parse(&["review", "resolve", "7", "--resend", "--sent", "--note", "x"]).is_err());
        assert!(parse(&["review", "resolve", "7", "--failed"]).is_err());
        let cli = parse(&["demo", "--exit", "--help"]).expect("demo arguments pass through");
        let Command::Demo(demo) = cli.command else { panic!("wrong command") };
        assert_eq!(demo.args, ["--exit", "--help"]);
        assert!(parse(&["token", "user", "alice"]).is_ok());
        assert!(parse(&["token", "link", "alice", "--base-url", "https://h.example.org"]).is_ok());
        assert!(parse(&["sessions", "end", "--user", "alice"]).is_ok());
        assert!(parse(&["sessions", "end", "--all"]).is_ok());
        assert!(parse(&["sessions", "end"]).is_err(), "ending sessions names whose");
        assert!(parse(&["sessions", "end", "--all", "--user", "alice"]).is_err());
        assert!(parse(&["--config", "x.toml", "serve"]).is_ok());
    }
}
