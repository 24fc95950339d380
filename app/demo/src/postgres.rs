//! The demo finds its PostgreSQL server exactly as the test scripts do: `scripts/ensure-postgres.sh`,
//! embedded in this binary, picks the server at 127.0.0.1:5432 when it answers, else the project's one
//! private cluster, in one folder (`/var/tmp/herald-pg` as root, else `~/.cache/herald/pg`;
//! `HERALD_PG_BASE` chooses another), with one stop command (`herald demo --stop-postgres`, or
//! `scripts/ensure-postgres.sh --stop`). `--data-dir` asks for a private cluster in that folder (the
//! script's `--private`).
//!
//! The script checks that a running cluster really answers and restarts it when it does not, starts one
//! on a free loopback port from 5433 up (`initdb` once, as the `postgres` user when run as root), and
//! prints which server it chose (a line `# …`) and the server's URL as its last line; its progress goes
//! to standard error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context as _};

/// The script, as committed in `scripts/`.
const SCRIPT: &str = include_str!("../../../scripts/ensure-postgres.sh");

/// The command that stops the private cluster, for the demo's closing lines.
pub const STOP_COMMAND: &str = "herald demo --stop-postgres   (or: scripts/ensure-postgres.sh --stop)";

/// A running server the script found or started.
#[derive(Clone, Debug)]
pub struct PgServer {
    /// The server's URL, database `postgres` (no password: trust on loopback only).
    pub url: String,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    /// Which server it is, in words: "the server at 127.0.0.1:5432" or "the private cluster on
    /// 127.0.0.1:5433 (in /var/tmp/herald-pg/15/data)".
    pub which: String,
}

impl PgServer {
    /// Whether it is the project's private cluster (which keeps running after the demo).
    #[must_use]
    pub fn is_private(&self) -> bool {
        self.which.starts_with("the private cluster")
    }

    /// The URL of one database on this server.
    #[must_use]
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

/// Runs the embedded script with `argument` (none when empty), the cluster folder in `data_dir` when
/// given; returns its standard output. Its progress lines go to this process's standard error.
async fn run_script(argument: &str, data_dir: Option<&Path>) -> anyhow::Result<String> {
    // Run from a file: the script tells being run from being sourced by its own path.
    let file = tempfile_path();
    {
        let mut out = std::fs::File::create(&file).with_context(|| format!("cannot write {}", file.display()))?;
        out.write_all(SCRIPT.as_bytes())?;
    }
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(&file)
        .args((!argument.is_empty()).then_some(argument))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(dir) = data_dir {
        command.env("HERALD_PG_BASE", dir);
    }
    // Not `output()`: tokio's pipes standard error too, and the script's messages (what it started, what
    // it stopped, why it failed) would be swallowed.
    let output = match command.spawn() {
        Ok(child) => child.wait_with_output().await,
        Err(error) => Err(error),
    }
    .context("cannot run bash for the PostgreSQL script");
    let _ = std::fs::remove_file(&file);
    let output = output?;
    if !output.status.success() {
        bail!(
            "no PostgreSQL server could be found or started (the messages are above); install PostgreSQL \
             (Debian/Ubuntu: `apt-get install postgresql`; scripts/demo.sh does this when it may), or set \
             DATABASE_URL to a server whose role may create databases"
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn tempfile_path() -> PathBuf {
    std::env::temp_dir().join(format!("herald-ensure-postgres-{}-{}.sh", std::process::id(), rand::random::<u32>()))
}

/// The server of the project's one rule (README): the one at 127.0.0.1:5432 when it answers, else the
/// private cluster, found or started (checked to answer) in the default folder. With `data_dir`, the
/// private cluster in that folder, whatever else answers.
///
/// # Errors
/// When no server answers and PostgreSQL is not installed or the cluster cannot be started; the script
/// says why.
pub async fn find(data_dir: Option<&Path>) -> anyhow::Result<PgServer> {
    let stdout = run_script(if data_dir.is_some() { "--private" } else { "" }, data_dir).await?;
    parse(&stdout)
}

/// Finds the private cluster or starts it (checking that it answers), in `data_dir` or the default
/// folder, whatever else answers.
///
/// # Errors
/// When PostgreSQL is not installed or the cluster cannot be started; the script says why.
pub async fn ensure(data_dir: Option<&Path>) -> anyhow::Result<PgServer> {
    parse(&run_script("--private", data_dir).await?)
}

/// The script's answer: `# WHICH` and the URL as its last two lines.
fn parse(stdout: &str) -> anyhow::Result<PgServer> {
    let url = stdout.lines().last().unwrap_or_default().trim().to_owned();
    let which = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("# "))
        .unwrap_or("the server the script found")
        .to_owned();
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|port| port.parse::<u16>().ok())
        .with_context(|| format!("the private PostgreSQL script printed no server URL (got {url:?})"))?;
    Ok(PgServer { url, port, which })
}

/// Stops the private cluster, if it runs.
///
/// # Errors
/// When the script fails.
pub async fn stop(data_dir: Option<&Path>) -> anyhow::Result<()> {
    run_script("--stop", data_dir).await.map(|_| ())
}
