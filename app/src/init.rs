//! `herald init`: a fresh configuration for a newcomer, safe to put on a network — random tokens and a
//! key of its own, every secret in a file of its own readable only by its owner (mode 0600), referenced
//! from `herald.toml` with `…_file` keys, so the configuration file itself holds no secret and can be
//! shown or committed.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use secrecy::ExposeSecret as _;

/// A random token: 32 random bytes, URL-safe base64 (43 characters).
fn token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Creates `path` with `contents`, readable and writable by its owner only; never overwrites.
fn write_secret(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist yet)", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

/// Writes `herald.toml` and `secrets/` into `dir`; returns the configuration file's path.
///
/// # Errors
/// When a file exists already (nothing is overwritten) or cannot be written.
pub fn init(dir: &Path, database_url: &str) -> anyhow::Result<PathBuf> {
    let config = dir.join("herald.toml");
    anyhow::ensure!(!config.exists(), "{} exists already; herald init never overwrites", config.display());
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).with_context(|| format!("cannot create {}", secrets.display()))?;
    write_secret(&secrets.join("service-tokens"), &format!("{}\n", token()))?;
    write_secret(&secrets.join("admin-tokens"), &format!("{}\n", token()))?;
    write_secret(&secrets.join("user-token-secret"), &format!("{}\n", token()))?;
    let key = herald_channels::cipher::Keyring::generate_key();
    write_secret(&secrets.join("k1.key"), &format!("{}\n", key.expose_secret()))?;
    let text = format!(
        r#"# Herald configuration written by `herald init`. Every secret is in secrets/ (mode 0600), referenced
# below by a `…_file` key relative to this file's folder; this file holds none and can be shared.
# Every key can be overridden from the environment as HERALD__SECTION__KEY (e.g. HERALD__DATABASE__URL).
# example.toml in Herald's repository lists every key with a comment.

[database]
url = "{database_url}"
max_connections = 10

[server]
listen = "127.0.0.1:8090"

[auth]
service_tokens_file = "secrets/service-tokens"   # submit notifications and events
admin_tokens_file = "secrets/admin-tokens"       # review and resolve parked tasks, act for any user
# Sign user tokens (herald token user USER_ID --ttl 1h): the first key signs, every listed key verifies;
# to rotate, put a new key first and remove the old one once the tokens it signed have expired.
user_token_keys = [{{ id = "k1", secret_file = "secrets/user-token-secret" }}]

[keys]
current = "k1"
k1_file = "secrets/k1.key"   # destinations are encrypted with it; rotate with a k2 and `herald keys rotate`

[worker]
concurrency = 64   # calls in flight per process
lease_ms = 60000

# The channels below are the stand-ins `scripts/demo.sh` keeps running on 127.0.0.1:9001-9003 while it
# runs; replace their urls with your real channels (https:// off this machine).

[[channel]]
name = "push"
kind = "webhook"
url = "http://127.0.0.1:9001"
timeout_ms = 2000

[[channel]]
name = "sms"
kind = "queryable"
url = "http://127.0.0.1:9002"
timeout_ms = 2000

[[channel]]
name = "miao"
kind = "miaotixing"
url = "http://127.0.0.1:9003"
timeout_ms = 2000
"#
    );
    std::fs::write(&config, text).with_context(|| format!("cannot write {}", config.display()))?;
    Ok(config)
}
