//! `herald-demo`, also started as `herald demo`: see the library's documentation.

use std::path::PathBuf;

use clap::Parser;
use herald_demo::{DemoOptions, Server};

/// Herald's demonstration: the real API, workers and PostgreSQL store with stand-in channels, driven
/// through a scripted mix; it prints what happened and how to look around.
#[derive(Debug, Parser)]
#[command(name = "herald demo", bin_name = "herald demo", version)]
struct Args {
    /// A Herald configuration file; only its `database.url` is used.
    #[arg(long, short, env = "HERALD_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run the scripted demonstration once and exit after the summary instead of serving.
    #[arg(long)]
    exit: bool,
    /// A PostgreSQL server whose role may create databases; the demo (re)creates the database
    /// `herald_demo` on it, drops `herald_walkthrough` (unless --exit) and touches nothing else. Default:
    /// `database.url`, else the server at 127.0.0.1:5432 when it answers, else the private cluster — the
    /// rule scripts/test.sh follows too.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    database_url: Option<String>,
    /// Use the private cluster in this folder, whatever else answers (the default folder, used when
    /// 127.0.0.1:5432 does not answer: /var/tmp/herald-pg as root, else ~/.cache/herald/pg — the one the
    /// test scripts use too).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Stop the private PostgreSQL (if it runs) and exit.
    #[arg(long)]
    stop_postgres: bool,
    /// Where the API listens; when the port is taken, a free one is used.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    listen: std::net::SocketAddr,
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.stop_postgres {
        return herald_demo::postgres::stop(args.data_dir.as_deref()).await;
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Warnings only by default: the demo's own output is the story.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour).try_init();
    let configured = match args.database_url.as_deref().filter(|url| !url.trim().is_empty()) {
        Some(url) => {
            herald_app::config::check_database_url(url)
                .map_err(|reason| herald_app::config::ConfigError::new("--database-url (or DATABASE_URL)", reason))?;
            Some(secrecy::SecretString::from(url.to_owned()))
        }
        None => herald_app::config::Config::load(args.config.as_deref(), std::env::vars())?.database.url,
    };
    let server = match configured {
        Some(url) => Server::Url(url),
        None => Server::Found { data_dir: args.data_dir.clone() },
    };
    let mut options = DemoOptions::new(server);
    options.exit = args.exit;
    options.listen = args.listen;
    if let Some(herald) = std::env::var_os("HERALD_EXE") {
        options.herald = PathBuf::from(herald).display().to_string();
    }
    let report = herald_demo::run(options).await?;
    if !report.drained || report.cases.iter().any(|c| !c.ok) {
        anyhow::bail!("the demo did not end as its scenario table expects (see above)");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            let config_error = error.chain().any(|c| c.downcast_ref::<herald_app::config::ConfigError>().is_some());
            eprintln!("herald demo: {error:#}");
            std::process::ExitCode::from(if config_error { 2 } else { 1 })
        }
    }
}
