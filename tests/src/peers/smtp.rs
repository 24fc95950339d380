//! aiosmtpd, started per test with a script of handlers (see `smtp_peer.py`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running aiosmtpd on a loopback port. Killed when dropped.
pub struct SmtpPeer {
    port: u16,
    dir: PathBuf,
    _child: Child,
}

/// One message the server really received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The envelope recipients (`RCPT TO`).
    pub rcpt: String,
    /// The envelope sender (`MAIL FROM`).
    pub mail_from: String,
    /// The message as received (headers and body).
    pub data: String,
}

impl Received {
    /// The value of the first header `name` (case-insensitive), unfolded.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<String> {
        herald_standin::smtp::message_header(&self.data, name)
    }

    /// The body (after the blank line).
    #[must_use]
    pub fn body(&self) -> &str {
        herald_standin::smtp::message_body(&self.data)
    }
}

impl SmtpPeer {
    /// Starts aiosmtpd with `script` (e.g. `"accept"`, `"mail:421,accept"`, `"delay:3"`).
    ///
    /// # Errors
    /// When python3 or aiosmtpd is missing, or the server does not come up.
    pub async fn start(script: &str) -> anyhow::Result<SmtpPeer> {
        SmtpPeer::start_with_tls(script, "none").await
    }

    /// As [`SmtpPeer::start`], speaking TLS: `"starttls"` (offered and required before MAIL) or
    /// `"implicit"` (from the first byte), with a server certificate signed by a certificate authority made
    /// for this run, at [`SmtpPeer::ca_pem`].
    ///
    /// # Errors
    /// As [`SmtpPeer::start`].
    pub async fn start_with_tls(script: &str, tls: &str) -> anyhow::Result<SmtpPeer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("herald-smtp-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let mut child = Command::new(super::python())
            .arg(super::script("smtp_peer.py"))
            .arg(port.to_string())
            .arg(&dir)
            .arg(script)
            .arg(tls)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("{} smtp_peer.py", super::python().to_string_lossy()))?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
        match ready {
            Ok(Ok(Some(line))) if line.trim() == "READY" => Ok(SmtpPeer { port, dir, _child: child }),
            _ => anyhow::bail!("aiosmtpd did not start (is it installed? `pip install aiosmtpd`)"),
        }
    }

    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The PEM file of the run's certificate authority (after [`SmtpPeer::start_with_tls`]).
    #[must_use]
    pub fn ca_pem(&self) -> std::path::PathBuf {
        self.dir.join("ca.pem")
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every message received so far, in order.
    #[must_use]
    pub fn received(&self) -> Vec<Received> {
        let mut messages = Vec::new();
        for n in 1.. {
            let Ok(text) = std::fs::read_to_string(self.dir.join(format!("{n}.eml"))) else { break };
            let mut rcpt = String::new();
            let mut mail_from = String::new();
            let mut rest = text.as_str();
            for _ in 0..2 {
                let (line, tail) = rest.split_once("\r\n").unwrap_or((rest, ""));
                if let Some(value) = line.strip_prefix("X-Peer-Rcpt: ") {
                    rcpt = value.to_owned();
                } else if let Some(value) = line.strip_prefix("X-Peer-Mail-From: ") {
                    mail_from = value.to_owned();
                }
                rest = tail;
            }
            messages.push(Received { rcpt, mail_from, data: rest.to_owned() });
        }
        messages
    }
}

impl Drop for SmtpPeer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
