//! Real peers for the e-mail and Web Push channels, started by the tests (SPEC §9, issue 13).
//!
//! * [`smtp::SmtpPeer`]: aiosmtpd — an SMTP server nobody here wrote — run by `smtp_peer.py` beside this
//!   file with scripted handlers (accept, refuse at MAIL/RCPT/after DATA, delay the reply to the final
//!   `.`, drop the connection), writing every message it really received to a directory.
//! * The push service stand-in is `herald_standin::WebPushService` (it checks every request as a push
//!   service would — the VAPID token's ES256 signature, audience and expiry (RFC 8292), the `TTL`,
//!   `Topic` and `Urgency` headers (RFC 8030) — and decrypts the `aes128gcm` payload with the
//!   subscription's private key (RFC 8291)). As cross-checks by implementations nobody here wrote,
//!   [`push::decrypt_with_http_ece`] hands a body to Python's `http_ece` (`ece_decrypt.py`) and
//!   [`push::verify_vapid_with_python`] a VAPID header to Python's `cryptography` (`vapid_verify.py`).

pub mod oidc;
pub mod push;
pub mod smtp;
pub mod status;

use std::path::PathBuf;

/// A Python script of this directory.
#[must_use]
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src").join("peers").join(name)
}

/// The Python interpreter of the peers: `HERALD_PYTHON` (scripts/test.sh sets it to one that imports them,
/// installing them first when needed: scripts/ensure-python-peers.sh), else `python3`.
#[must_use]
pub fn python() -> std::ffi::OsString {
    std::env::var_os("HERALD_PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into())
}

/// Whether [`python`] can import `module`.
#[must_use]
pub fn python_has(module: &str) -> bool {
    std::process::Command::new(python())
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether the running test may go on with the Python peer `module`: true when [`python`] imports it.
/// When it does not, the test fails saying so — or, with `HERALD_ALLOW_SKIP=1`, is recorded as skipped
/// (`herald_standin::skip`) and this answers false: the caller returns at once.
///
/// # Panics
/// When `module` is missing and skipping is not allowed.
#[must_use]
#[track_caller]
pub fn require_python(module: &str) -> bool {
    if python_has(module) {
        return true;
    }
    herald_standin::skip::missing(
        &format!("the Python module {module} cannot be imported by {}", python().to_string_lossy()),
        "scripts/test.sh installs the peers (scripts/ensure-python-peers.sh, a virtual environment of the \
         project's own when python3 lacks them) and points HERALD_PYTHON at that interpreter",
    );
    false
}
