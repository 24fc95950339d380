//! The status events' receiver (issue 46): `status_receiver.py`, which verifies every request with the
//! official `standardwebhooks` package from PyPI — an implementation nobody here wrote — records it, and
//! answers as the test scripts it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// A signing secret for the tests: `whsec_` and 32 bytes in base64.
pub const TEST_SECRET: &str = "whsec_c3RhdHVzLWV2ZW50cy10ZXN0LXNlY3JldC0zMi1ieXRlcw==";

pub struct StatusReceiver {
    port: u16,
    log: PathBuf,
    _child: Child,
}

impl StatusReceiver {
    /// Starts a receiver verifying with `secret`.
    ///
    /// # Errors
    /// When Python or `standardwebhooks` is missing.
    pub async fn start(secret: &str) -> anyhow::Result<StatusReceiver> {
        let log =
            std::env::temp_dir().join(format!("herald-status-{}-{}.jsonl", std::process::id(), uuid::Uuid::new_v4()));
        let mut child = Command::new(super::python())
            .arg(super::script("status_receiver.py"))
            .args(["serve", secret])
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("status_receiver.py")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let port = match tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await {
            Ok(Ok(Some(line))) => line.trim().parse::<u16>().context("the receiver's port")?,
            _ => anyhow::bail!("status_receiver.py did not start (is standardwebhooks installed?)"),
        };
        Ok(StatusReceiver { port, log, _child: child })
    }

    #[must_use]
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/herald-status", self.port)
    }

    /// How the next requests are answered: `"503,200"` (a queue, then 204), `"always:503"`, `""` (204).
    ///
    /// # Errors
    /// When the receiver cannot be reached.
    pub async fn answer(&self, script: &str) -> anyhow::Result<()> {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/_answers", self.port))
            .body(script.to_owned())
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Every request received so far, in order of arrival: `id`, `timestamp`, `signature`, `verified`,
    /// `error`, `payload` (parsed, when verified), `body` (as received), `answered`.
    #[must_use]
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for StatusReceiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What `standardwebhooks` says of a request with these headers and body: `"ok"` or `"refused: …"`.
///
/// # Errors
/// When Python cannot be run.
pub async fn verify(secret: &str, headers: &Value, body: &str) -> anyhow::Result<String> {
    let mut child = Command::new(super::python())
        .arg(super::script("status_receiver.py"))
        .args(["verify", secret])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("status_receiver.py verify")?;
    let request = serde_json::json!({ "headers": headers, "body": body });
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(request.to_string().as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
