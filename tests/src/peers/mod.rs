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

pub mod push;
pub mod smtp;

use std::path::PathBuf;

/// A Python script of this directory.
#[must_use]
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src").join("peers").join(name)
}

/// Whether `python3` can import `module` (the tests need `aiosmtpd` and `http_ece`; `.ci/run` installs them).
#[must_use]
pub fn python_has(module: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
