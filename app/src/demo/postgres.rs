//! The demo's private PostgreSQL: a cluster of its own, `initdb`'d once into a data folder, started with
//! `pg_ctl` on a free loopback port and reused by the next run.
//!
//! Why a private cluster rather than "whatever is on 5432": the demo's first command must work on a fresh
//! machine where the only server (if any) asks for a password. Trust authentication is safe here only
//! because the cluster listens on 127.0.0.1 and its socket lives inside the data folder.
//!
//! PostgreSQL refuses to run as root, so as root every `initdb`/`pg_ctl` runs as the `postgres` user
//! (`runuser -u postgres --`) and the folder is owned by it; the default folder is then
//! `/var/lib/herald/demo-pg`, because root's home is usually closed to other users.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context as _};

/// How to get the server binaries, for every message that finds them missing.
pub const INSTALL_HINT: &str = "install PostgreSQL (Debian/Ubuntu: `apt-get install postgresql`; scripts/demo.sh \
does this when it may), or set DATABASE_URL to a server whose role may create databases";

/// A running private cluster.
#[derive(Clone, Debug)]
pub struct PrivatePg {
    /// The folder holding `data/`, `port` and the logs.
    pub base: PathBuf,
    pub port: u16,
    /// The folder of `initdb`, `pg_ctl`, …
    pub bin: PathBuf,
    /// True when this call started the server (false: it was running already).
    pub started: bool,
}

impl PrivatePg {
    /// The URL of one database on this server (no password: trust on loopback).
    #[must_use]
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn data(&self) -> PathBuf {
        self.base.join("data")
    }

    /// The command that stops the cluster, for the demo's closing lines.
    #[must_use]
    pub fn stop_command(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let prefix = if is_root() { "runuser -u postgres -- " } else { "" };
        format!("{prefix}{} -D {} stop", pg_ctl.display(), self.data().display())
    }
}

fn is_root() -> bool {
    // `id -u` would need a process; the effective uid is what PostgreSQL checks, and HOME/USER can lie.
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

/// The default folder: `/var/lib/herald/demo-pg` as root, else `$XDG_DATA_HOME/herald/demo-pg` or
/// `~/.local/share/herald/demo-pg`.
///
/// # Errors
/// When neither `XDG_DATA_HOME` nor `HOME` is set (not root).
pub fn default_base() -> anyhow::Result<PathBuf> {
    if is_root() {
        return Ok(PathBuf::from("/var/lib/herald/demo-pg"));
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("herald/demo-pg"));
    }
    let home = std::env::var_os("HOME").filter(|d| !d.is_empty()).context("HOME is not set; pass --data-dir")?;
    Ok(PathBuf::from(home).join(".local/share/herald/demo-pg"))
}

fn has_tools(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("pg_ctl").is_file()
}

/// Finds `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/<major>/bin` (Debian's layout, not on
/// PATH), else a folder on PATH that has both.
///
/// # Errors
/// When they are not installed, with the way to install them.
pub fn find_bin() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_tools(&bin).then_some((major, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(dir) = std::env::split_paths(&path).find(|dir| has_tools(dir)) {
            return Ok(dir);
        }
    }
    bail!("the PostgreSQL server programs initdb and pg_ctl were not found; {INSTALL_HINT}")
}

/// Runs a PostgreSQL program as the cluster owner; its output goes to `log` (the server it may start
/// inherits no pipe of ours, so waiting for it cannot hang).
async fn run_as_owner(program: &Path, args: &[&str], log: &Path) -> anyhow::Result<bool> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot write {}", log.display()))?;
    let err = out.try_clone()?;
    let mut command = if is_root() {
        let mut c = tokio::process::Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        tokio::process::Command::new(program)
    };
    let status = command
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .await
        .with_context(|| format!("cannot run {}", program.display()))?;
    Ok(status.success())
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).is_ok()
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).context("cannot find a free port")?;
    Ok(listener.local_addr()?.port())
}

fn major_of(bin: &Path) -> Option<String> {
    // /usr/lib/postgresql/<major>/bin; elsewhere the check is left to pg_ctl.
    bin.parent()?.file_name()?.to_str().filter(|m| m.chars().all(|c| c.is_ascii_digit())).map(str::to_owned)
}

/// Makes sure the cluster in `base` exists and runs, and says on which port.
///
/// # Errors
/// Missing binaries (with the install hint), a folder the owner cannot write, or a failing
/// `initdb`/`pg_ctl` (with the last lines of its log).
pub async fn ensure(base: &Path) -> anyhow::Result<PrivatePg> {
    let bin = find_bin()?;
    let data = base.join("data");
    std::fs::create_dir_all(base).with_context(|| format!("cannot create {}", base.display()))?;
    if is_root() {
        let chown = tokio::process::Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(base)
            .status()
            .await
            .context("cannot run chown")?;
        if !chown.success() {
            bail!(
                "cannot give {} to the user postgres (does it exist? `apt-get install postgresql` creates it)",
                base.display()
            );
        }
    }
    let log = base.join("pg_ctl.log");

    let version_file = data.join("PG_VERSION");
    if !version_file.is_file() {
        // Missing or half-created: start from scratch.
        let _ = std::fs::remove_dir_all(&data);
        let data_arg = data.to_str().context("the data folder's path is not UTF-8")?;
        let ok = run_as_owner(
            &bin.join("initdb"),
            &["-D", data_arg, "-U", "postgres", "-E", "UTF8", "--locale=C", "--auth=trust"],
            &log,
        )
        .await?;
        if !ok {
            bail!("initdb into {} failed:\n{}", data.display(), tail(&log));
        }
        // Loopback only, the socket inside the data folder (no /var/run/postgresql needed), and no
        // durability work: the demo's data is recreated on every run.
        let extra = format!(
            "\n# added by herald demo\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{data_arg}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"
        );
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).context("initdb wrote no postgresql.conf")?;
        text.push_str(&extra);
        std::fs::write(&conf, text).context("cannot extend postgresql.conf")?;
    } else if let (Some(major), Ok(found)) = (major_of(&bin), std::fs::read_to_string(&version_file)) {
        if found.trim() != major {
            bail!(
                "{} holds a PostgreSQL {} cluster but the installed server is {major}; remove the folder or pass \
                 --data-dir",
                data.display(),
                found.trim()
            );
        }
    }

    let mut pg = PrivatePg { base: base.to_owned(), port: 0, bin, started: false };
    let data_arg = data.to_str().context("the data folder's path is not UTF-8")?.to_owned();
    if run_as_owner(&pg.bin.join("pg_ctl"), &["-D", &data_arg, "status"], &log).await? {
        // postmaster.pid, line 4: the port.
        let pid = std::fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
        if let Some(port) = pid.lines().nth(3).and_then(|p| p.trim().parse().ok()) {
            pg.port = port;
            return Ok(pg);
        }
        bail!(
            "the private PostgreSQL in {} runs but its port is unknown; stop it: {}",
            data.display(),
            pg.stop_command()
        );
    }

    let port_file = base.join("port");
    let remembered = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse::<u16>().ok());
    let port = match remembered {
        Some(port) if port_is_free(port) => port,
        _ => free_port()?,
    };
    let server_log = base.join("server.log");
    let options = format!("-p {port}");
    let args = ["-D", data_arg.as_str(), "-l", server_log.to_str().unwrap_or("server.log"), "-o", &options];
    let ok = run_as_owner(&pg.bin.join("pg_ctl"), &[&args[..], &["-w", "-t", "60", "start"]].concat(), &log).await?;
    if !ok {
        bail!("pg_ctl could not start the private PostgreSQL in {}:\n{}", data.display(), tail(&server_log));
    }
    std::fs::write(&port_file, format!("{port}\n")).context("cannot remember the port")?;
    pg.port = port;
    pg.started = true;
    Ok(pg)
}
