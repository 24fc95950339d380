//! Configuration (SPEC §12): one TOML file, every key overridable from the environment, secrets
//! optionally read from files, everything checked at start-up with a message naming the key.
//!
//! # Layers, in order (a later one wins key by key)
//! figment merges the first two ([`sources`]), remembering which layer gave each value; serde then decodes
//! the result with the path of the first key that does not fit, and the third step reads the files.
//! 1. The TOML file given by `--config FILE` or `HERALD_CONFIG` (optional: without one, only the
//!    environment and the defaults count).
//! 2. Environment variables `HERALD__SECTION__KEY` (double underscores; names are case-insensitive and
//!    taken in lower case), e.g. `HERALD__DATABASE__URL`, `HERALD__WORKER__CONCURRENCY=16`,
//!    `HERALD__KEYS__CURRENT=k2`, `HERALD__KEYS__K2_FILE=/run/secrets/k2`. A value's type comes from its
//!    key, never from how the text looks (a numeric token stays a string).
//!    * Integers are parsed; an unparsable value is refused naming the variable.
//!    * Lists (`HERALD__AUTH__SERVICE_TOKENS`, `…__ADMIN_TOKENS`, `HERALD__EGRESS__ALLOW_PRIVATE`) are either a
//!      JSON array (`["a","b"]`) or a comma-separated list (`a,b`; spaces around entries and empty entries
//!      dropped).
//!    * Channel entries are addressed by index or name: `HERALD__CHANNEL__0__TIMEOUT_MS=400` or
//!      `HERALD__CHANNEL__PUSH__TIMEOUT_MS=400`; nested keys continue the path
//!      (`HERALD__CHANNEL__0__DIGEST__INSTANT_PER_HOUR=3`). The index one past the last entry adds an
//!      entry. A channel value is read as a TOML value when it is one (`400`, `true`, `"x"`,
//!      `{ instant_per_hour = 3 }`) and as a plain string otherwise (`http://…`, `immediate`).
//! 3. `…_file` keys, read after merging: `database.url_file`, `auth.user_token_secret_file`,
//!    `auth.service_tokens_file` and `auth.admin_tokens_file` (one token a line; blank lines and `#`
//!    comments ignored), and in `[keys]` `ID_file` for key `ID`. Giving both a key and its `_file` (in any
//!    layers) is refused. Relative paths are relative to the configuration file's folder (the working
//!    folder without a file), also when a variable gives them. Surrounding whitespace (the final newline)
//!    is dropped.
//!
//! Unknown keys, values out of range and inconsistent settings are refused before anything starts.
//! Error messages name keys and variables, never values: a URL or a token is a secret. An error about a
//! value that a variable set says so: `… (set by HERALD__LOG__FORMAT)`.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::value::{Dict, Value};
use herald_channels::cipher::Keyring;
use herald_channels::config::{ChannelConfig, ChannelEntry};
use secrecy::{ExposeSecret, SecretString};

use herald_core::auth::{valid_key_id, UserTokenKey, LEGACY_USER_KEY_ID};
use serde::Deserialize;

pub mod production;
mod sources;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 64 * 1024;
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
pub const DEFAULT_CONCURRENCY: u32 = 64;
pub const DEFAULT_LEASE_MS: u64 = 60_000;
pub const DEFAULT_BATCH: u32 = 16;
pub const DEFAULT_POLL_MS: u64 = 1_000;
/// What a lease must add to a channel's timeout (SPEC §4): time to start the call after the claim and
/// time to finish it after the answer (`herald_domain::min_lease`).
pub const LEASE_MARGIN_MS: u64 = herald_domain::claim::START_SLACK.0 + herald_domain::claim::FINISH_MARGIN.0;
pub const MIN_USER_TOKEN_SECRET_BYTES: usize = 16;
/// The prefix of overriding environment variables.
pub const ENV_PREFIX: &str = "HERALD__";

/// A configuration that cannot be used, naming the key (and the variable, when one set it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The key, such as `worker.lease_ms`, or the file or variable when no key applies.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration: {}: {}", self.key, self.reason)
    }
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError { key: key.into(), reason: reason.into() }
    }
}

type Result<T, E = ConfigError> = std::result::Result<T, E>;

#[derive(Debug)]
pub struct DatabaseConfig {
    /// `None`: `herald demo` starts a private server; other commands refuse.
    pub url: Option<SecretString>,
    /// The pool of the commands that need one (`migrate`, `review`, `keys rotate`), and the default of
    /// the two below.
    pub max_connections: u32,
    /// The HTTP API's own pool (`herald serve`): requests never take the workers' connections.
    pub api_max_connections: u32,
    /// The workers' pool for claims (`herald serve`, `herald worker`); finishes have one more of their own.
    pub worker_max_connections: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub body_limit_bytes: usize,
    /// The bounds every client is held to (timeouts, budgets, rates, failed sign-ins).
    pub limits: herald_http::api::limits::Limits,
    /// `server.https`: clients reach the installation over https (a TLS-terminating proxy in front): the
    /// console's session cookie is `Secure` with the `__Host-` prefix, and answers carry HSTS.
    pub https: bool,
}

#[derive(Debug)]
pub struct AuthConfig {
    pub service_tokens: Vec<SecretString>,
    pub admin_tokens: Vec<SecretString>,
    /// Tokens that may only scrape `/metrics` on the API listener (admin tokens may too).
    pub metrics_tokens: Vec<SecretString>,
    /// `auth.user_token_keys` in order (the first signs user tokens, all verify), or the one key of
    /// `auth.user_token_secret` under the id `default`.
    pub user_token_keys: Vec<herald_core::auth::UserTokenKey>,
    /// `[[operators.tokens]]`: named admin tokens with a role (`auth.admin_tokens` are admins named
    /// `admin`, `admin-2`, …).
    pub operator_tokens: Vec<herald_core::auth::OperatorToken>,
    /// `[[services.tokens]]`: named service tokens (`auth.service_tokens` are named `service`,
    /// `service-2`, …).
    pub named_service_tokens: Vec<herald_core::auth::ServiceToken>,
}

impl AuthConfig {
    /// The configuration key naming user-token key `i` in errors.
    #[must_use]
    pub fn user_key_name(&self, i: usize) -> String {
        if self.user_token_keys.len() == 1 && self.user_token_keys[0].id == herald_core::auth::LEGACY_USER_KEY_ID {
            "auth.user_token_secret".to_owned()
        } else {
            format!("auth.user_token_keys[{i}]")
        }
    }

    /// The authenticator of these tokens and keys.
    #[must_use]
    pub fn authenticator(&self) -> herald_core::auth::Authenticator {
        herald_core::auth::Authenticator::with_user_keys(
            &self.service_tokens,
            &self.admin_tokens,
            self.user_token_keys.clone(),
        )
        .with_operator_tokens(&self.operator_tokens)
        .with_service_tokens(&self.named_service_tokens)
        .with_metrics_tokens(&self.metrics_tokens)
    }

    /// The name of every service token: those of `auth.service_tokens`, then `[[services.tokens]]`.
    #[must_use]
    pub fn service_token_names(&self) -> Vec<String> {
        let mut names = herald_core::auth::legacy_service_names(self.service_tokens.len());
        names.extend(self.named_service_tokens.iter().map(|t| t.name.clone()));
        names
    }
}

#[derive(Debug)]
pub struct KeysConfig {
    pub current: String,
    /// `(id, base64 of 32 bytes)`, in file order.
    pub keys: Vec<(String, SecretString)>,
    /// `keys.vault_database_url` (or `_file`): the user-key vault's own database. When given, each
    /// user's destinations are sealed under a data key of the user's, kept there, and the erasure destroys
    /// it (crypto-shredding, README "Data lifecycle").
    pub vault_database_url: Option<SecretString>,
}

impl KeysConfig {
    /// The keyring of these keys.
    ///
    /// # Errors
    /// A key that is not base64 of 32 bytes, an id that is not allowed, or `current` not among them.
    pub fn keyring(&self) -> Result<Keyring> {
        let keys = self.keys.iter().map(|(id, key)| (id.clone(), key.clone()));
        Keyring::new(keys, &self.current).map_err(|error| ConfigError::new("keys", error.to_string()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSettings {
    /// Whether `herald serve` also runs the workers (`[worker] enabled`, default true). With `false` (or
    /// `herald serve --no-worker`) the process serves the API only and `herald worker` processes deliver,
    /// so submission and delivery scale apart.
    pub enabled: bool,
    /// Channel calls in flight per process (one pipelined loop keeps them going).
    pub concurrency: u32,
    pub lease_ms: u64,
    /// Tasks per claim (at most `concurrency`).
    pub batch: u32,
    pub poll_ms: u64,
    /// Where the process also serves `/metrics` (and `/healthz`); `herald worker` has no other listener.
    pub metrics_listen: Option<SocketAddr>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive such as `info` or `herald_app=debug,info`.
    pub level: String,
}

/// `[egress]` (SPEC §16): what the egress guard opens for this installation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressConfig {
    /// Address ranges a user's destination may point into although they are private (an installation
    /// whose push service is internal). Never loopback: only a channel's `allow_loopback_endpoints` opens
    /// that, for a local stand-in.
    pub allow_private: Vec<herald_channels::egress::Cidr>,
}

impl EgressConfig {
    /// The egress settings the channels are built with.
    #[must_use]
    pub fn egress(&self) -> herald_channels::egress::Egress {
        herald_channels::egress::Egress::new(self.allow_private.clone())
    }
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    pub database: DatabaseConfig,
    pub server: ServerConfig,
    /// Required by `serve` and `token`; absent is fine for `worker`, `migrate` and `review`.
    pub auth: Option<AuthConfig>,
    /// Required by `serve`, `worker` and `keys rotate`.
    pub keys: Option<KeysConfig>,
    pub worker: WorkerSettings,
    pub channels: Vec<ChannelConfig>,
    pub log: LogConfig,
    /// `[test_send]`: test sends per (user, channel) — `per_minute` (default 1), `per_day` (default 10).
    pub test_send: herald_domain::TestSendQuota,
    /// `[console]`: session lifetime and idle timeout, sign-in link lifetime.
    pub console: herald_core::sessions::SessionSettings,
    /// `[egress]`: the private ranges a user's destination may point into.
    pub egress: EgressConfig,
    /// `[retention]`: the windows after an erasure and for every user's finished notifications (SPEC §13).
    pub retention: herald_core::retention::RetentionPolicy,
    /// `[[status_subscription]]` and `[status_events]`: where status events go, and how they are retried.
    pub status: StatusConfig,
    /// `[operators.oidc]`: console sign-in with an OpenID Connect provider, when configured.
    pub oidc: Option<OidcConfig>,
}

/// `[operators.oidc]` (issue 43): sign-in to the console at an OpenID Connect provider.
#[derive(Clone)]
pub struct OidcConfig {
    /// The issuer (`https://…`; its `/.well-known/openid-configuration` is read).
    pub issuer: String,
    pub client_id: String,
    /// From `client_secret_file`.
    pub client_secret: SecretString,
    /// Where the provider sends the browser back: this installation's `/console/oidc/callback`.
    pub redirect_url: String,
    /// The scopes asked beside `openid` (default `profile`).
    pub scopes: Vec<String>,
    /// The userinfo claim that carries the role values (default `roles`).
    pub role_claim: String,
    /// Claim value → role (`[operators.oidc.roles]`).
    pub roles: Vec<(String, herald_domain::operators::Role)>,
    /// What the sign-in button calls the provider (default "your identity provider").
    pub display_name: Option<String>,
    /// An `http://` issuer is accepted (local tests and development only; `herald serve` refuses it without
    /// `--stand-ins`).
    pub allow_http_issuer: bool,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("redirect_url", &self.redirect_url)
            .field("role_claim", &self.role_claim)
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

/// One `[[status_subscription]]` (issue 46): an endpoint that is told what happens to each delivery.
#[derive(Clone, Debug)]
pub struct StatusSubscriptionConfig {
    pub name: String,
    pub url: herald_channels::status::Url,
    /// The `whsec_…` signing secret, from `secret_file`.
    pub secret: SecretString,
    pub kinds: Vec<herald_domain::StatusKind>,
    /// `service_tokens`: the names of the service tokens whose notifications it is told about; `None`
    /// (left out): every notification's.
    pub service_tokens: Option<Vec<String>>,
    pub include_body: bool,
    pub timeout_ms: u64,
    /// Only with `--stand-ins`, as a channel's `allow_loopback_endpoints`.
    pub allow_loopback_endpoint: bool,
}

/// The status events' configuration.
#[derive(Clone, Debug, Default)]
pub struct StatusConfig {
    pub subscriptions: Vec<StatusSubscriptionConfig>,
    pub dispatch: herald_core::status::DispatchSettings,
}

impl Config {
    /// Loads the file (if any), applies `HERALD__…` overrides from `env`, reads `…_file` secrets and
    /// validates everything.
    ///
    /// # Errors
    /// The first problem found, naming its key.
    pub fn load(path: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<Config> {
        let (text, base) = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| {
                    ConfigError::new(path.display().to_string(), format!("cannot be read: {}", error.kind()))
                })?;
                (text, path.parent().map(Path::to_path_buf).unwrap_or_default())
            }
            None => (String::new(), PathBuf::new()),
        };
        Config::from_toml(&text, env, &base)
    }

    /// As [`Config::load`], from the file's text; relative `…_file` paths are taken from `base`.
    ///
    /// # Errors
    /// The first problem found, naming its key.
    pub fn from_toml(text: &str, env: impl IntoIterator<Item = (String, String)>, base: &Path) -> Result<Config> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let rust_log = env.iter().find(|(name, _)| name == "RUST_LOG").map(|(_, value)| value.trim().to_owned());
        let figment = sources::layered(text, env)?;
        let mut config = figment
            .extract::<RawConfig>()
            .map_err(|error| sources::decoding_error(&error, ""))
            .and_then(|raw| raw.resolve(base))
            .map_err(|error| sources::name_variable(error, &figment))?;
        // The Rust ecosystem's convention: RUST_LOG, when set, overrides `log.level`.
        if let Some(level) = rust_log.filter(|level| !level.is_empty()) {
            if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
                return Err(ConfigError::new(
                    "RUST_LOG",
                    "is not a valid filter such as `info` or `herald_app=debug,warn` (it overrides log.level)",
                ));
            }
            config.log.level = level;
        }
        Ok(config)
    }

    /// The `[auth]` section, which `command` needs.
    ///
    /// # Errors
    /// When it is absent.
    pub fn require_auth(&self, command: &str) -> Result<&AuthConfig> {
        self.auth.as_ref().ok_or_else(|| ConfigError::new("auth", format!("is required by `herald {command}`")))
    }

    /// The `[keys]` section, which `command` needs.
    ///
    /// # Errors
    /// When it is absent.
    pub fn require_keys(&self, command: &str) -> Result<&KeysConfig> {
        self.keys.as_ref().ok_or_else(|| ConfigError::new("keys", format!("is required by `herald {command}`")))
    }

    /// The database URL, which `command` needs.
    ///
    /// # Errors
    /// When it is absent.
    pub fn require_database_url(&self, command: &str) -> Result<&SecretString> {
        self.database
            .url
            .as_ref()
            .ok_or_else(|| ConfigError::new("database.url", format!("is required by `herald {command}`")))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Option<String>,
    url_file: Option<PathBuf>,
    max_connections: Option<u32>,
    api_max_connections: Option<u32>,
    worker_max_connections: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    body_limit_bytes: Option<usize>,
    header_read_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    max_in_flight: Option<usize>,
    rate_per_second: Option<u32>,
    rate_burst: Option<u32>,
    anonymous_max_in_flight: Option<usize>,
    anonymous_rate_per_second: Option<u32>,
    anonymous_rate_burst: Option<u32>,
    failed_auth_burst: Option<u32>,
    failed_auth_per_minute: Option<u32>,
    forwarded_for: Option<bool>,
    https: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConsole {
    session_hours: Option<u64>,
    session_idle_minutes: Option<u64>,
    sign_in_link_minutes: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    service_tokens: Option<Vec<String>>,
    service_tokens_file: Option<PathBuf>,
    admin_tokens: Option<Vec<String>>,
    admin_tokens_file: Option<PathBuf>,
    metrics_tokens: Option<Vec<String>>,
    metrics_tokens_file: Option<PathBuf>,
    user_token_secret: Option<String>,
    user_token_secret_file: Option<PathBuf>,
    user_token_keys: Option<Vec<RawUserKey>>,
}

/// One entry of `auth.user_token_keys`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUserKey {
    id: Option<String>,
    secret: Option<String>,
    secret_file: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    enabled: Option<bool>,
    concurrency: Option<u32>,
    lease_ms: Option<u64>,
    batch: Option<u32>,
    poll_ms: Option<u64>,
    metrics_listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: Option<LogFormat>,
    level: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    server: RawServer,
    auth: Option<RawAuth>,
    /// Parsed by hand: its keys are key ids.
    keys: Option<Dict>,
    #[serde(default)]
    worker: RawWorker,
    /// Decoded one by one, so that an error names the entry by its name.
    #[serde(default)]
    channel: Vec<Value>,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    test_send: RawTestSend,
    #[serde(default)]
    console: RawConsole,
    #[serde(default)]
    egress: RawEgress,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    status_subscription: Vec<RawStatusSubscription>,
    #[serde(default)]
    status_events: RawStatusEvents,
    #[serde(default)]
    operators: RawOperators,
    #[serde(default)]
    services: RawServices,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    content_after_erasure: Option<String>,
    records_after_erasure: Option<String>,
    tombstone_after_erasure: Option<String>,
    finished_after: Option<String>,
    status_events_after: Option<String>,
    batch: Option<u32>,
    interval: Option<String>,
}

/// A window: a whole number followed by `s`, `m`, `h` or `d` (`24h`, `90d`), from 0 s to 10 years.
fn window(key: &str, text: Option<String>, default: herald_domain::Millis) -> Result<herald_domain::Millis> {
    let Some(text) = text else { return Ok(default) };
    let bad = || ConfigError::new(key, "must be a whole number followed by s, m, h or d (e.g. 24h, 90d)");
    let text = text.trim();
    let unit = text.chars().last().ok_or_else(bad)?;
    let scale: u64 = match unit {
        's' => 1_000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return Err(bad()),
    };
    let number: u64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    let ms = number
        .checked_mul(scale)
        .filter(|ms| *ms <= 3_650 * 86_400_000)
        .ok_or_else(|| ConfigError::new(key, "must be at most 3650d"))?;
    Ok(herald_domain::Millis(ms))
}

impl RawRetention {
    fn check(self) -> Result<herald_core::retention::RetentionPolicy> {
        let d = herald_core::retention::RetentionPolicy::default();
        let content = window("retention.content_after_erasure", self.content_after_erasure, d.content_after_erasure)?;
        let records = window("retention.records_after_erasure", self.records_after_erasure, d.records_after_erasure)?;
        let tombstone =
            window("retention.tombstone_after_erasure", self.tombstone_after_erasure, d.tombstone_after_erasure)?;
        let finished = window("retention.finished_after", self.finished_after, d.finished_after)?;
        let status_events = window("retention.status_events_after", self.status_events_after, d.status_events_after)?;
        if records < content {
            return Err(ConfigError::new(
                "retention.records_after_erasure",
                "must be at least retention.content_after_erasure",
            ));
        }
        if tombstone < records {
            return Err(ConfigError::new(
                "retention.tombstone_after_erasure",
                "must be at least retention.records_after_erasure",
            ));
        }
        let batch = in_range("retention.batch", self.batch.unwrap_or(d.batch), 1, 100_000)?;
        let default_interval = herald_domain::Millis(u64::try_from(d.interval.as_millis()).unwrap_or(60_000));
        let interval = window("retention.interval", self.interval, default_interval)?;
        if interval.0 < 1_000 {
            return Err(ConfigError::new("retention.interval", "must be at least 1s"));
        }
        Ok(herald_core::retention::RetentionPolicy {
            content_after_erasure: content,
            records_after_erasure: records,
            tombstone_after_erasure: tombstone,
            finished_after: finished,
            status_events_after: status_events,
            batch,
            interval: std::time::Duration::from_millis(interval.0),
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStatusSubscription {
    name: Option<String>,
    url: Option<String>,
    secret_file: Option<PathBuf>,
    events: Option<Vec<String>>,
    service_tokens: Option<Vec<String>>,
    include_body: Option<bool>,
    timeout_ms: Option<u64>,
    allow_loopback_endpoint: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStatusEvents {
    max_posts: Option<u32>,
    retry_base_ms: Option<u64>,
    retry_cap_ms: Option<u64>,
    poll_ms: Option<u64>,
    batch: Option<u32>,
}

impl RawStatusEvents {
    fn resolve(self) -> Result<herald_core::status::DispatchSettings> {
        let defaults = herald_core::status::DispatchSettings::default();
        let max_posts =
            in_range("status_events.max_posts", self.max_posts.unwrap_or(defaults.retry.max_attempts), 1, 100)?;
        let base = in_range(
            "status_events.retry_base_ms",
            self.retry_base_ms.unwrap_or(defaults.retry.base.0),
            10,
            3_600_000,
        )?;
        let cap = in_range(
            "status_events.retry_cap_ms",
            self.retry_cap_ms.unwrap_or(defaults.retry.cap.0),
            base,
            86_400_000,
        )?;
        let poll = in_range("status_events.poll_ms", self.poll_ms.unwrap_or(200), 10, 60_000)?;
        let batch = in_range("status_events.batch", self.batch.unwrap_or(defaults.batch), 1, 1000)?;
        Ok(herald_core::status::DispatchSettings {
            batch,
            hold: defaults.hold,
            poll: std::time::Duration::from_millis(poll),
            retry: herald_domain::RetryPolicy::new(max_posts, herald_domain::Millis(base), herald_domain::Millis(cap)),
        })
    }
}

/// The `[[status_subscription]]` entries, each checked, its key named in any error.
fn status_subscriptions(
    raw: Vec<RawStatusSubscription>,
    egress: &EgressConfig,
    base: &Path,
) -> Result<Vec<StatusSubscriptionConfig>> {
    let mut names = std::collections::HashSet::new();
    let mut list = Vec::new();
    for (i, entry) in raw.into_iter().enumerate() {
        let name = entry
            .name
            .filter(|name| !name.trim().is_empty())
            .ok_or_else(|| ConfigError::new(format!("status_subscription[{i}].name"), "is required"))?;
        let key = |field: &str| format!("status_subscription.{name}.{field}");
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ConfigError::new(key("name"), "may hold only letters, digits, `-` and `_`"));
        }
        if !names.insert(name.clone()) {
            return Err(ConfigError::new(key("name"), "is used by more than one [[status_subscription]]"));
        }
        let allow_loopback_endpoint = entry.allow_loopback_endpoint.unwrap_or(false);
        let url_text = entry.url.ok_or_else(|| ConfigError::new(key("url"), "is required"))?;
        let url =
            herald_channels::status::Url::parse(&url_text).map_err(|_| ConfigError::new(key("url"), "is not a URL"))?;
        match url.scheme() {
            "https" => {}
            "http" if allow_loopback_endpoint => {}
            _ => return Err(ConfigError::new(key("url"), "must be an https URL")),
        }
        egress
            .egress()
            .guard(allow_loopback_endpoint)
            .check_url(&url)
            .map_err(|refused| ConfigError::new(key("url"), format!("is refused by the egress guard: {refused}")))?;
        let path = entry.secret_file.ok_or_else(|| ConfigError::new(key("secret_file"), "is required"))?;
        let secret = read_secret_file(&key("secret_file"), &path, base)?;
        herald_channels::status::signing_key(&secret).map_err(|reason| ConfigError::new(key("secret_file"), reason))?;
        let kinds = match entry.events {
            None => herald_domain::StatusKind::ALL.to_vec(),
            Some(events) => {
                let mut kinds = Vec::new();
                for (j, event) in events.iter().enumerate() {
                    let kind = herald_domain::StatusKind::parse(event).ok_or_else(|| {
                        let known: Vec<&str> = herald_domain::StatusKind::ALL.iter().map(|k| k.as_str()).collect();
                        ConfigError::new(
                            format!("{}[{j}]", key("events")),
                            format!("is not one of {}", known.join(", ")),
                        )
                    })?;
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
                if kinds.is_empty() {
                    return Err(ConfigError::new(key("events"), "must name at least one kind (leave it out for all)"));
                }
                kinds
            }
        };
        let timeout_ms = in_range(&key("timeout_ms"), entry.timeout_ms.unwrap_or(5000), 100, 60_000)?;
        let service_tokens = match entry.service_tokens {
            None => None,
            Some(tokens) if tokens.is_empty() => {
                return Err(ConfigError::new(
                    key("service_tokens"),
                    "must name at least one service token (leave it out for every service's notifications)",
                ))
            }
            Some(tokens) => Some(tokens),
        };
        list.push(StatusSubscriptionConfig {
            name,
            url,
            secret: SecretString::from(secret),
            kinds,
            service_tokens,
            include_body: entry.include_body.unwrap_or(false),
            timeout_ms,
            allow_loopback_endpoint,
        });
    }
    Ok(list)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServices {
    tokens: Option<Vec<RawServiceToken>>,
}

/// One `[[services.tokens]]`: a named service token; the notifications it submits record the name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServiceToken {
    name: Option<String>,
    token: Option<String>,
    file: Option<PathBuf>,
}

/// The position of the first of `tokens` that is also one of `others` or another of `tokens`.
fn shared_token(tokens: &[&SecretString], others: &[&SecretString]) -> Option<usize> {
    let same = |a: &SecretString, b: &SecretString| a.expose_secret() == b.expose_secret();
    tokens.iter().position(|t| others.iter().any(|o| same(o, t)) || tokens.iter().filter(|u| same(u, t)).count() > 1)
}

/// The token of a named token entry `key` (`[[operators.tokens]]`, `[[services.tokens]]`): given directly
/// (`token`) or in a file (`file`), one of them, without spaces or control characters.
fn named_token(key: &str, token: Option<String>, file: Option<PathBuf>, base: &Path) -> Result<String> {
    let token = match (token, file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                format!("{key}.token"),
                format!("is given both directly and as {key}.file; give one"),
            ))
        }
        (Some(token), None) => token,
        (None, Some(path)) => read_secret_file(&format!("{key}.file"), &path, base)?,
        (None, None) => return Err(ConfigError::new(format!("{key}.file"), "is required (or token)")),
    };
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError::new(
            format!("{key}.token"),
            "must not be empty or contain spaces or control characters",
        ));
    }
    Ok(token)
}

/// `[[services.tokens]]`: each named (uniquely, and not as `auth.service_tokens`' names `service`,
/// `service-2`, …), with a token given directly or in a file.
fn service_tokens(
    list: Vec<RawServiceToken>,
    legacy: usize,
    base: &Path,
) -> Result<Vec<herald_core::auth::ServiceToken>> {
    let taken = herald_core::auth::legacy_service_names(legacy);
    let mut out: Vec<herald_core::auth::ServiceToken> = Vec::with_capacity(list.len());
    for (i, raw) in list.into_iter().enumerate() {
        let key = format!("services.tokens[{i}]");
        let name = raw.name.ok_or_else(|| ConfigError::new(format!("{key}.name"), "is required"))?;
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ConfigError::new(
                format!("{key}.name"),
                "must be 1 to 64 letters, digits, `-` or `_` (status events name it)",
            ));
        }
        if out.iter().any(|t| t.name == name) || taken.contains(&name) {
            return Err(ConfigError::new(
                format!("{key}.name"),
                "is used by another service token (auth.service_tokens are named service, service-2, …)",
            ));
        }
        let token = named_token(&key, raw.token, raw.file, base)?;
        out.push(herald_core::auth::ServiceToken { name, token: SecretString::from(token) });
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOperators {
    tokens: Option<Vec<RawOperatorToken>>,
    oidc: Option<RawOidc>,
}

/// `[operators.oidc]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOidc {
    issuer: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    redirect_url: Option<String>,
    scopes: Option<Vec<String>>,
    role_claim: Option<String>,
    roles: Option<std::collections::BTreeMap<String, String>>,
    display_name: Option<String>,
    allow_http_issuer: Option<bool>,
}

/// The path the provider sends the browser back to.
pub const OIDC_CALLBACK_PATH: &str = "/console/oidc/callback";

/// `[operators.oidc]`, checked: an https issuer (http only with `allow_http_issuer`), a client id, a secret
/// in a file, a redirect URL ending in [`OIDC_CALLBACK_PATH`], and at least one claim value mapped to a role.
fn oidc(raw: RawOidc, base: &Path) -> Result<OidcConfig> {
    let key = |k: &str| format!("operators.oidc.{k}");
    let allow_http_issuer = raw.allow_http_issuer.unwrap_or(false);
    let issuer = raw.issuer.ok_or_else(|| ConfigError::new(key("issuer"), "is required"))?;
    let parsed =
        reqwest::Url::parse(&issuer).map_err(|e| ConfigError::new(key("issuer"), format!("is not a URL: {e}")))?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_http_issuer => {}
        "http" => {
            return Err(ConfigError::new(
                key("issuer"),
                "must be https (an http issuer is for local tests only: operators.oidc.allow_http_issuer)",
            ))
        }
        _ => return Err(ConfigError::new(key("issuer"), "must be an https URL")),
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err(ConfigError::new(key("issuer"), "must have no query, fragment or credentials"));
    }
    let client_id = raw.client_id.filter(|c| !c.trim().is_empty());
    let client_id = client_id.ok_or_else(|| ConfigError::new(key("client_id"), "is required"))?;
    let secret_file =
        raw.client_secret_file.ok_or_else(|| ConfigError::new(key("client_secret_file"), "is required"))?;
    let client_secret = read_secret_file(&key("client_secret_file"), &secret_file, base)?;
    if client_secret.is_empty() {
        return Err(ConfigError::new(key("client_secret_file"), "is empty"));
    }
    let redirect_url = raw.redirect_url.ok_or_else(|| {
        ConfigError::new(
            key("redirect_url"),
            format!("is required: this installation's address + {OIDC_CALLBACK_PATH}"),
        )
    })?;
    let redirect = reqwest::Url::parse(&redirect_url)
        .map_err(|e| ConfigError::new(key("redirect_url"), format!("is not a URL: {e}")))?;
    if !matches!(redirect.scheme(), "https" | "http") || redirect.path() != OIDC_CALLBACK_PATH {
        return Err(ConfigError::new(
            key("redirect_url"),
            format!("must be this installation's http(s) address + {OIDC_CALLBACK_PATH}"),
        ));
    }
    let role_claim = raw.role_claim.unwrap_or_else(|| "roles".to_owned());
    if role_claim.trim().is_empty() {
        return Err(ConfigError::new(key("role_claim"), "must not be empty"));
    }
    let mut roles = Vec::new();
    for (value, role) in raw.roles.unwrap_or_default() {
        let role = role.parse::<herald_domain::operators::Role>().map_err(|_| {
            ConfigError::new(format!("operators.oidc.roles.{value}"), "must be viewer, resolver or admin")
        })?;
        roles.push((value, role));
    }
    if roles.is_empty() {
        return Err(ConfigError::new(
            key("roles"),
            "maps no claim value to a role; nobody could sign in (e.g. [operators.oidc.roles] herald-admins = \"admin\")",
        ));
    }
    let scopes = raw.scopes.unwrap_or_else(|| vec!["profile".to_owned()]);
    Ok(OidcConfig {
        issuer,
        client_id,
        client_secret: SecretString::from(client_secret),
        redirect_url,
        scopes,
        role_claim,
        roles,
        display_name: raw.display_name.filter(|n| !n.trim().is_empty()),
        allow_http_issuer,
    })
}

/// One `[[operators.tokens]]`: a named admin token with a role, for automation and break-glass.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperatorToken {
    name: Option<String>,
    role: Option<String>,
    token: Option<String>,
    file: Option<PathBuf>,
}

/// `[[operators.tokens]]`: each named (uniquely), with a role, and a token given directly or in a file.
fn operator_tokens(list: Vec<RawOperatorToken>, base: &Path) -> Result<Vec<herald_core::auth::OperatorToken>> {
    let mut out: Vec<herald_core::auth::OperatorToken> = Vec::with_capacity(list.len());
    for (i, raw) in list.into_iter().enumerate() {
        let key = format!("operators.tokens[{i}]");
        let name = raw.name.ok_or_else(|| ConfigError::new(format!("{key}.name"), "is required"))?;
        if !herald_domain::operators::valid_name(&name) {
            return Err(ConfigError::new(
                format!("{key}.name"),
                "must be 1 to 128 characters, without control characters",
            ));
        }
        if out.iter().any(|t| t.name == name) {
            return Err(ConfigError::new(format!("{key}.name"), "is used by another operator token"));
        }
        let role = raw
            .role
            .ok_or_else(|| ConfigError::new(format!("{key}.role"), "is required (viewer, resolver or admin)"))?;
        let role = role
            .parse::<herald_domain::operators::Role>()
            .map_err(|_| ConfigError::new(format!("{key}.role"), "must be viewer, resolver or admin"))?;
        let token = named_token(&key, raw.token, raw.file, base)?;
        out.push(herald_core::auth::OperatorToken { name, role, token: SecretString::from(token) });
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    allow_private: Option<Vec<String>>,
}

/// `egress.allow_private`: each entry a range (`10.1.2.0/24`, `fd00::/8`) that opens nothing of this machine.
fn allow_private(list: Option<Vec<String>>) -> Result<Vec<herald_channels::egress::Cidr>> {
    let mut ranges = Vec::new();
    for (i, entry) in list.unwrap_or_default().iter().enumerate() {
        let key = format!("egress.allow_private[{i}]");
        let range: herald_channels::egress::Cidr = entry.parse().map_err(|reason| ConfigError::new(&key, reason))?;
        range.check_allowable().map_err(|reason| ConfigError::new(&key, reason))?;
        ranges.push(range);
    }
    Ok(ranges)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTestSend {
    per_minute: Option<u32>,
    per_day: Option<u32>,
}

fn read_secret_file(key: &str, path: &Path, base: &Path) -> Result<String> {
    let path = if path.is_relative() { base.join(path) } else { path.to_owned() };
    let text = std::fs::read_to_string(&path)
        .map_err(|error| ConfigError::new(key, format!("cannot read {}: {}", path.display(), error.kind())))?;
    Ok(text.trim().to_owned())
}

/// A value given directly or as `<key>_file`, not both.
fn secret(
    section: &str,
    key: &str,
    direct: Option<String>,
    file: Option<&Path>,
    base: &Path,
) -> Result<Option<String>> {
    match (direct, file) {
        (Some(_), Some(_)) => Err(ConfigError::new(
            format!("{section}.{key}"),
            format!("is given both directly and as {section}.{key}_file; give one"),
        )),
        (Some(value), None) => Ok(Some(value)),
        (None, Some(path)) => read_secret_file(&format!("{section}.{key}_file"), path, base).map(Some),
        (None, None) => Ok(None),
    }
}

fn tokens(key: &str, direct: Option<Vec<String>>, file: Option<&Path>, base: &Path) -> Result<Vec<SecretString>> {
    let list = match (direct, file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                format!("auth.{key}"),
                format!("is given both directly and as auth.{key}_file"),
            ))
        }
        (Some(list), None) => list,
        (None, Some(path)) => read_secret_file(&format!("auth.{key}_file"), path, base)?
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(str::to_owned)
            .collect(),
        (None, None) => Vec::new(),
    };
    for (i, token) in list.iter().enumerate() {
        if token.is_empty() {
            return Err(ConfigError::new(format!("auth.{key}[{i}]"), "must not be empty"));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::new(format!("auth.{key}[{i}]"), "must not contain spaces or control characters"));
        }
    }
    Ok(list.into_iter().map(SecretString::from).collect())
}

fn in_range<T: PartialOrd + fmt::Display + Copy>(key: &str, value: T, min: T, max: T) -> Result<T> {
    if value < min || value > max {
        Err(ConfigError::new(key, format!("must be between {min} and {max}")))
    } else {
        Ok(value)
    }
}

impl RawAuth {
    fn resolve(self, base: &Path) -> Result<AuthConfig> {
        let service_tokens = tokens("service_tokens", self.service_tokens, self.service_tokens_file.as_deref(), base)?;
        let admin_tokens = tokens("admin_tokens", self.admin_tokens, self.admin_tokens_file.as_deref(), base)?;
        let metrics_tokens = tokens("metrics_tokens", self.metrics_tokens, self.metrics_tokens_file.as_deref(), base)?;
        let both = service_tokens.iter().any(|s| admin_tokens.iter().any(|a| a.expose_secret() == s.expose_secret()));
        if both {
            return Err(ConfigError::new("auth.admin_tokens", "a token is also listed in auth.service_tokens"));
        }
        let shared = metrics_tokens.iter().any(|m| {
            service_tokens.iter().chain(&admin_tokens).any(|other| other.expose_secret() == m.expose_secret())
        });
        if shared {
            return Err(ConfigError::new(
                "auth.metrics_tokens",
                "a token is also listed as a service or admin token (admin tokens may scrape already)",
            ));
        }
        let legacy =
            secret("auth", "user_token_secret", self.user_token_secret, self.user_token_secret_file.as_deref(), base)?;
        let user_token_keys = match (legacy, self.user_token_keys) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "auth.user_token_keys",
                    "is given together with auth.user_token_secret; give one (a list's first key signs)",
                ))
            }
            (Some(secret), None) => {
                if secret.len() < MIN_USER_TOKEN_SECRET_BYTES {
                    return Err(ConfigError::new(
                        "auth.user_token_secret",
                        format!("must be at least {MIN_USER_TOKEN_SECRET_BYTES} bytes long"),
                    ));
                }
                vec![UserTokenKey { id: LEGACY_USER_KEY_ID.to_owned(), secret: SecretString::from(secret) }]
            }
            (None, Some(list)) => user_keys(list, base)?,
            (None, None) => {
                return Err(ConfigError::new(
                    "auth.user_token_secret",
                    "is required when [auth] is given (or auth.user_token_keys)",
                ))
            }
        };
        Ok(AuthConfig {
            service_tokens,
            admin_tokens,
            metrics_tokens,
            user_token_keys,
            operator_tokens: Vec::new(),
            named_service_tokens: Vec::new(),
        })
    }
}

/// `auth.user_token_keys`: at least one, ids unique and token-safe, each secret long enough.
fn user_keys(list: Vec<RawUserKey>, base: &Path) -> Result<Vec<UserTokenKey>> {
    if list.is_empty() {
        return Err(ConfigError::new("auth.user_token_keys", "must list at least one key (the first signs)"));
    }
    let mut keys: Vec<UserTokenKey> = Vec::with_capacity(list.len());
    for (i, raw) in list.into_iter().enumerate() {
        let name = format!("auth.user_token_keys[{i}]");
        let id = raw.id.ok_or_else(|| ConfigError::new(format!("{name}.id"), "is required"))?;
        if !valid_key_id(&id) {
            return Err(ConfigError::new(format!("{name}.id"), "must be 1 to 32 ASCII letters, digits, - or _"));
        }
        if keys.iter().any(|k| k.id == id) {
            return Err(ConfigError::new(format!("{name}.id"), "is listed twice"));
        }
        let secret = secret(&name, "secret", raw.secret, raw.secret_file.as_deref(), base)?
            .ok_or_else(|| ConfigError::new(format!("{name}.secret"), "is required (or secret_file)"))?;
        if secret.len() < MIN_USER_TOKEN_SECRET_BYTES {
            return Err(ConfigError::new(
                format!("{name}.secret"),
                format!("must be at least {MIN_USER_TOKEN_SECRET_BYTES} bytes long"),
            ));
        }
        keys.push(UserTokenKey { id, secret: SecretString::from(secret) });
    }
    Ok(keys)
}

fn resolve_keys(mut table: Dict, base: &Path) -> Result<KeysConfig> {
    let current = match table.remove("current") {
        Some(Value::String(_, current)) => current,
        Some(_) => return Err(ConfigError::new("keys.current", "must be a string (a key id)")),
        None => return Err(ConfigError::new("keys.current", "is required: the id of the key that encrypts")),
    };
    let vault_database_url = match (table.remove("vault_database_url"), table.remove("vault_database_url_file")) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                "keys.vault_database_url",
                "is given both directly and as keys.vault_database_url_file",
            ))
        }
        (Some(Value::String(_, url)), None) => Some(url),
        (None, Some(Value::String(_, path))) => {
            Some(read_secret_file("keys.vault_database_url_file", Path::new(&path), base)?)
        }
        (Some(_), None) => return Err(ConfigError::new("keys.vault_database_url", "must be a string (a URL)")),
        (None, Some(_)) => return Err(ConfigError::new("keys.vault_database_url_file", "must be a string (a path)")),
        (None, None) => None,
    };
    if let Some(url) = &vault_database_url {
        check_database_url(url).map_err(|reason| ConfigError::new("keys.vault_database_url", reason))?;
    }
    let vault_database_url = vault_database_url.map(SecretString::from);
    let mut keys: Vec<(String, SecretString)> = Vec::new();
    for (name, value) in table {
        let Value::String(_, text) = value else {
            return Err(ConfigError::new(format!("keys.{name}"), "must be a string"));
        };
        let (id, key) = match name.strip_suffix("_file") {
            Some(id) => (id.to_owned(), read_secret_file(&format!("keys.{name}"), Path::new(&text), base)?),
            None => (name, text),
        };
        if keys.iter().any(|(known, _)| *known == id) {
            return Err(ConfigError::new(
                format!("keys.{id}"),
                format!("is given both directly and as keys.{id}_file"),
            ));
        }
        keys.push((id, SecretString::from(key)));
    }
    if keys.is_empty() {
        return Err(ConfigError::new("keys", "has no key; add `ID = \"base64 of 32 bytes\"` (herald keys generate)"));
    }
    if !keys.iter().any(|(id, _)| *id == current) {
        let ids: Vec<&str> = keys.iter().map(|(id, _)| id.as_str()).collect();
        return Err(ConfigError::new(
            "keys.current",
            format!("names `{current}`, which is not among the keys ({})", ids.join(", ")),
        ));
    }
    let config = KeysConfig { current, keys, vault_database_url };
    config.keyring()?;
    Ok(config)
}

/// A database URL must be PostgreSQL's: `postgres://` or `postgresql://` (sqlx would take any scheme and
/// try PostgreSQL anyway). What is wrong, in words that quote at most the scheme, never the rest: a URL
/// may hold a password.
///
/// # Errors
/// What is wrong with it.
pub fn check_database_url(url: &str) -> Result<(), String> {
    const SCHEMES: [&str; 2] = ["postgres", "postgresql"];
    const FORM: &str = "postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE";
    let Some((scheme, _)) = url.trim().split_once("://") else {
        return Err(format!("must be a PostgreSQL URL such as {FORM}"));
    };
    if SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        // sqlx's own reading, whose error may quote the URL: only whether it reads.
        return match url.trim().parse::<sqlx::postgres::PgConnectOptions>() {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("is not a valid PostgreSQL URL ({FORM})")),
        };
    }
    let plain = !scheme.is_empty()
        && scheme.len() <= 20
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !plain {
        return Err(format!("must be a PostgreSQL URL such as {FORM}"));
    }
    let lower = scheme.to_ascii_lowercase();
    Err(match herald_core::names::nearest(&lower, SCHEMES) {
        Some(near) => format!("`{scheme}://` is not a PostgreSQL URL scheme: did you mean `{near}://`?"),
        None => format!("`{scheme}://` is not a PostgreSQL URL: Herald stores in PostgreSQL ({FORM})"),
    })
}

impl RawConfig {
    fn resolve(self, base: &Path) -> Result<Config> {
        let url = secret("database", "url", self.database.url, self.database.url_file.as_deref(), base)?;
        if url.as_deref().is_some_and(|url| url.trim().is_empty()) {
            return Err(ConfigError::new("database.url", "must not be empty"));
        }
        if let Some(url) = url.as_deref() {
            check_database_url(url).map_err(|reason| ConfigError::new("database.url", reason))?;
        }
        let max_connections = in_range(
            "database.max_connections",
            self.database.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            1,
            1000,
        )?;
        let api_max_connections = in_range(
            "database.api_max_connections",
            self.database.api_max_connections.unwrap_or(max_connections),
            1,
            1000,
        )?;
        let worker_max_connections = in_range(
            "database.worker_max_connections",
            self.database.worker_max_connections.unwrap_or(max_connections),
            1,
            1000,
        )?;
        let database = DatabaseConfig {
            url: url.map(SecretString::from),
            max_connections,
            api_max_connections,
            worker_max_connections,
        };

        let listen = self.server.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen = listen
            .parse::<SocketAddr>()
            .map_err(|_| ConfigError::new("server.listen", "must be an IP address and port, such as 127.0.0.1:8080"))?;
        let body_limit_bytes = in_range(
            "server.body_limit_bytes",
            self.server.body_limit_bytes.unwrap_or(DEFAULT_BODY_LIMIT_BYTES),
            1024,
            16 * 1024 * 1024,
        )?;
        let defaults = herald_http::api::limits::Limits::default();
        let ms = |key: &str, value: Option<u64>, default: std::time::Duration, max: u64| {
            let default = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
            in_range(key, value.unwrap_or(default), 100, max).map(std::time::Duration::from_millis)
        };
        let s = &self.server;
        // A count of requests: at least one, at most a million.
        fn count<T: PartialOrd + fmt::Display + Copy + From<u16> + TryFrom<u32>>(
            key: &str,
            value: Option<T>,
            default: T,
        ) -> Result<T> {
            let million = T::try_from(1_000_000).unwrap_or(default);
            in_range(key, value.unwrap_or(default), T::from(1), million)
        }
        let limits = herald_http::api::limits::Limits {
            header_read_timeout: ms(
                "server.header_read_timeout_ms",
                s.header_read_timeout_ms,
                defaults.header_read_timeout,
                600_000,
            )?,
            request_timeout: ms(
                "server.request_timeout_ms",
                s.request_timeout_ms,
                defaults.request_timeout,
                3_600_000,
            )?,
            body_timeout: ms("server.body_timeout_ms", s.body_timeout_ms, defaults.body_timeout, 3_600_000)?,
            max_in_flight: count("server.max_in_flight", s.max_in_flight, defaults.max_in_flight)?,
            rate_per_second: count("server.rate_per_second", s.rate_per_second, defaults.rate_per_second)?,
            rate_burst: count("server.rate_burst", s.rate_burst, defaults.rate_burst)?,
            anonymous_max_in_flight: 0,
            anonymous_rate_per_second: count(
                "server.anonymous_rate_per_second",
                s.anonymous_rate_per_second,
                defaults.anonymous_rate_per_second,
            )?,
            anonymous_rate_burst: count(
                "server.anonymous_rate_burst",
                s.anonymous_rate_burst,
                defaults.anonymous_rate_burst,
            )?,
            failed_auth_burst: count("server.failed_auth_burst", s.failed_auth_burst, defaults.failed_auth_burst)?,
            failed_auth_per_minute: count(
                "server.failed_auth_per_minute",
                s.failed_auth_per_minute,
                defaults.failed_auth_per_minute,
            )?,
            forwarded_for: s.forwarded_for.unwrap_or(defaults.forwarded_for),
        };
        // Anonymous requests get the smaller budget: an eighth of the authenticated one unless set.
        let limits = herald_http::api::limits::Limits {
            anonymous_max_in_flight: match s.anonymous_max_in_flight {
                Some(n) => in_range("server.anonymous_max_in_flight", n, 1, limits.max_in_flight).map_err(|_| {
                    ConfigError::new(
                        "server.anonymous_max_in_flight",
                        "must be between 1 and server.max_in_flight: anonymous requests get the smaller budget",
                    )
                })?,
                None => herald_http::api::limits::anonymous_budget(limits.max_in_flight),
            },
            ..limits
        };
        let server = ServerConfig { listen, body_limit_bytes, limits, https: s.https.unwrap_or(false) };

        let mut auth = self.auth.map(|auth| auth.resolve(base)).transpose()?;
        let named = operator_tokens(self.operators.tokens.unwrap_or_default(), base)?;
        let oidc = self.operators.oidc.map(|raw| oidc(raw, base)).transpose()?;
        match &mut auth {
            Some(auth) => {
                let others: Vec<&SecretString> =
                    auth.service_tokens.iter().chain(&auth.admin_tokens).chain(&auth.metrics_tokens).collect();
                let tokens: Vec<&SecretString> = named.iter().map(|t| &t.token).collect();
                if let Some(i) = shared_token(&tokens, &others) {
                    return Err(ConfigError::new(
                        format!("operators.tokens[{i}]"),
                        "its token is also another token of the configuration; give each its own",
                    ));
                }
                auth.operator_tokens = named;
            }
            None if !named.is_empty() => {
                return Err(ConfigError::new("operators.tokens", "needs [auth] (service tokens, user-token secret)"));
            }
            None => {}
        }
        let raw_services = self.services.tokens.unwrap_or_default();
        match &mut auth {
            Some(auth) => {
                let services = service_tokens(raw_services, auth.service_tokens.len(), base)?;
                let others: Vec<&SecretString> = auth
                    .service_tokens
                    .iter()
                    .chain(&auth.admin_tokens)
                    .chain(&auth.metrics_tokens)
                    .chain(auth.operator_tokens.iter().map(|t| &t.token))
                    .collect();
                let tokens: Vec<&SecretString> = services.iter().map(|t| &t.token).collect();
                if let Some(i) = shared_token(&tokens, &others) {
                    return Err(ConfigError::new(
                        format!("services.tokens[{i}]"),
                        "its token is also another token of the configuration; give each its own",
                    ));
                }
                auth.named_service_tokens = services;
            }
            None if !raw_services.is_empty() => {
                return Err(ConfigError::new("services.tokens", "needs [auth] (user-token secret)"));
            }
            None => {}
        }
        let keys = self.keys.map(|keys| resolve_keys(keys, base)).transpose()?;

        let w = self.worker;
        let worker = WorkerSettings {
            enabled: w.enabled.unwrap_or(true),
            concurrency: in_range("worker.concurrency", w.concurrency.unwrap_or(DEFAULT_CONCURRENCY), 1, 1024)?,
            lease_ms: in_range("worker.lease_ms", w.lease_ms.unwrap_or(DEFAULT_LEASE_MS), 100, 86_400_000)?,
            batch: in_range("worker.batch", w.batch.unwrap_or(DEFAULT_BATCH), 1, 1000)?,
            poll_ms: in_range("worker.poll_ms", w.poll_ms.unwrap_or(DEFAULT_POLL_MS), 1, 3_600_000)?,
            metrics_listen: w
                .metrics_listen
                .as_deref()
                .map(|text| {
                    text.parse::<SocketAddr>().map_err(|_| {
                        ConfigError::new(
                            "worker.metrics_listen",
                            "must be an IP address and port, such as 127.0.0.1:9464",
                        )
                    })
                })
                .transpose()?,
        };

        let mut channels = Vec::with_capacity(self.channel.len());
        let mut names = HashSet::new();
        for (i, entry) in self.channel.into_iter().enumerate() {
            let label = match entry.find_ref("name").and_then(Value::as_str) {
                Some(name) => format!("channel.{name}"),
                None => format!("channel[{i}]"),
            };
            // The shared keys are decoded here (figment names the key of a value that does not fit); the
            // kind reads the rest into its own settings, naming the key it refuses.
            let mut channel = ChannelEntry::deserialize(&entry)
                .map_err(|error| sources::decoding_error(&error, &label))?
                .into_config()
                .map_err(|error| ConfigError::new(error.key, error.reason))?;
            // Like every other `…_file`, a relative path is taken from the configuration file's folder; the
            // channel's kind says which of its keys name files.
            for path in channel.files_mut() {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
            channel.validate().map_err(|error| ConfigError::new(error.key, error.reason))?;
            if !names.insert(channel.name.clone()) {
                return Err(ConfigError::new(
                    format!("channel.{}.name", channel.name),
                    "is used by more than one [[channel]]",
                ));
            }
            let needed = herald_domain::min_lease(herald_domain::Millis(channel.timeout_ms)).0;
            if worker.lease_ms < needed {
                return Err(ConfigError::new(
                    "worker.lease_ms",
                    format!(
                        "({} ms) must be at least channel `{}`'s timeout_ms ({} ms) plus {LEASE_MARGIN_MS} ms \
                         to start and finish the call, so that no second worker claims a task while its call may \
                         still be running",
                        worker.lease_ms, channel.name, channel.timeout_ms
                    ),
                ));
            }
            channels.push(channel);
        }

        let level = self.log.level.unwrap_or_else(|| "info".to_owned());
        if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
            return Err(ConfigError::new(
                "log.level",
                "is not a valid filter such as `info` or `herald_app=debug,warn`",
            ));
        }
        let log = LogConfig { format: self.log.format.unwrap_or_default(), level };

        let defaults = herald_domain::TestSendQuota::default();
        let per_minute =
            in_range("test_send.per_minute", self.test_send.per_minute.unwrap_or(defaults.per_minute), 1, 1000)?;
        let per_day = in_range("test_send.per_day", self.test_send.per_day.unwrap_or(defaults.per_day), 1, 100_000)?;
        if per_day < per_minute {
            return Err(ConfigError::new("test_send.per_day", "must be at least test_send.per_minute"));
        }
        let test_send = herald_domain::TestSendQuota { per_minute, per_day };

        let c = self.console;
        let hours = in_range("console.session_hours", c.session_hours.unwrap_or(8), 1, 24 * 30)?;
        let idle = in_range("console.session_idle_minutes", c.session_idle_minutes.unwrap_or(60), 1, 24 * 60)?;
        let link = in_range("console.sign_in_link_minutes", c.sign_in_link_minutes.unwrap_or(15), 1, 7 * 24 * 60)?;
        let console = herald_core::sessions::SessionSettings {
            policy: herald_domain::SessionPolicy {
                lifetime: herald_domain::Millis(hours * 3_600_000),
                idle: herald_domain::Millis(idle * 60_000),
            },
            link_ttl: herald_domain::Millis(link * 60_000),
        };
        let egress = EgressConfig { allow_private: allow_private(self.egress.allow_private)? };
        let retention = self.retention.check()?;
        let mut dispatch = self.status_events.resolve()?;
        let subscriptions = status_subscriptions(self.status_subscription, &egress, base)?;
        // A subscription names service tokens this configuration has (a worker's configuration without
        // [auth] cannot be checked: the API's process checks the same subscriptions).
        if let Some(auth) = &auth {
            let known = auth.service_token_names();
            for subscription in &subscriptions {
                for (j, name) in subscription.service_tokens.iter().flatten().enumerate() {
                    if !known.contains(name) {
                        return Err(ConfigError::new(
                            format!("status_subscription.{}.service_tokens[{j}]", subscription.name),
                            format!("is not the name of a service token (known: {})", known.join(", ")),
                        ));
                    }
                }
            }
        }
        // A post is held longer than it can last, so no second dispatcher takes it while it may run.
        let longest = subscriptions.iter().map(|s| s.timeout_ms).max().unwrap_or(0);
        dispatch.hold = herald_domain::Millis(longest + 5_000);
        let status = StatusConfig { subscriptions, dispatch };
        Ok(Config {
            database,
            server,
            auth,
            keys,
            worker,
            channels,
            log,
            test_send,
            console,
            egress,
            retention,
            status,
            oidc,
        })
    }
}

#[cfg(test)]
mod tests;
