//! One `[[channel]]` entry of the configuration file (SPEC §12), its defaults and its validation.
//!
//! The settings that decide what an uncertain attempt means (`kind`, `refusal_5xx`, `query_consistency`)
//! are declared here by the operator, because only the operator knows the third party's contract; the
//! domain turns them into decisions through [`ChannelConfig::rules`]. The resend policy is deliberately
//! not a setting: production always runs [`Policy::Safe`], the blind-resend policy exists only in tests.

use std::fmt;

use herald_domain::{default_guard, RefusalProof, RetryPolicy};
use herald_domain::{ChannelContract, ChannelKind, ChannelRules, DigestRule, Millis, Policy, QueryConsistency};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Default client timeout for one call.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Default attempt budget. Miaotixing never resends an uncertain attempt anyway (its capability is
/// `Neither`), so the same generic budget only retries provable refusals there.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
pub const DEFAULT_RETRY_BASE_MS: u64 = 500;
pub const DEFAULT_RETRY_CAP_MS: u64 = 60_000;
/// Miaotixing's documentation asks for at least 10 s between calls (SPEC §12).
pub const MIAOTIXING_MIN_INTERVAL_MS: u64 = 10_000;
/// Default rolling window of a digest rule.
pub const DEFAULT_DIGEST_WINDOW_SECS: u64 = 3_600;
/// Default cap on how much of a reply body is read; a longer body is an unknown outcome.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// What Miaotixing users see when no `text` is configured: the body stays in the inbox (SPEC §8).
pub const MIAOTIXING_DEFAULT_TEXT: &str = "You have a new update — open the app to view it.";

/// One configured external channel.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// The name used in preferences and tasks.
    pub name: String,
    pub kind: ChannelKind,
    /// Base URL; the adapter appends its path (`/send`, `/messages`, `/trigger`).
    pub url: String,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
    #[serde(default = "default_retry_cap_ms")]
    pub retry_cap_ms: u64,
    /// What a 5xx (and, for JSON channels, a 429) proves for this channel.
    #[serde(default = "default_refusal_5xx")]
    pub refusal_5xx: RefusalProof,
    /// `"immediate"` or a delay in ms after which "not found" is believed. Only queryable channels use it.
    #[serde(default = "default_query_consistency", deserialize_with = "deserialize_consistency")]
    pub query_consistency: QueryConsistency,
    /// Global egress interval; absent means the kind's default, see [`ChannelConfig::min_interval_ms`].
    #[serde(default)]
    pub min_interval_ms: Option<u64>,
    /// Egress guard; absent means the domain's default (a tenth of the interval, at most 1 s), see
    /// [`ChannelConfig::egress_guard_ms`].
    #[serde(default)]
    pub egress_guard_ms: Option<u64>,
    #[serde(default)]
    pub digest: Option<DigestSetting>,
    /// Privacy-safe text sent instead of the body; see [`ChannelConfig::text`].
    #[serde(default)]
    pub text: Option<String>,
    /// Absent means [`DEFAULT_MAX_RESPONSE_BYTES`].
    #[serde(default)]
    pub max_response_bytes: Option<usize>,
    /// Allows an `http://` URL to a host that is not loopback: destinations would cross the network in
    /// the clear, so `herald serve`/`worker` refuse it unless this says the operator means it.
    #[serde(default)]
    pub allow_plain_http: bool,
}

/// `digest = { instant_per_hour = 3 }`: instant prompts per rolling window before events are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestSetting {
    pub instant_per_hour: u32,
    /// The rolling window; absent means one hour, which is what the key's name promises.
    #[serde(default)]
    pub window_secs: Option<u64>,
}

/// An invalid channel setting. The message names the key (`channel.<name>.<key>`) so an operator can
/// find it, and never repeats the value: a URL may carry credentials.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    /// The full key, such as `channel.push.url`.
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    /// An error about `key` of the channel named `channel`.
    #[must_use]
    pub fn new(channel: &str, key: &str, reason: impl Into<String>) -> Self {
        let key = if channel.is_empty() { format!("channel.{key}") } else { format!("channel.{channel}.{key}") };
        ConfigError { key, reason: reason.into() }
    }
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}
fn default_max_attempts() -> u32 {
    DEFAULT_MAX_ATTEMPTS
}
fn default_retry_base_ms() -> u64 {
    DEFAULT_RETRY_BASE_MS
}
fn default_retry_cap_ms() -> u64 {
    DEFAULT_RETRY_CAP_MS
}
fn default_refusal_5xx() -> RefusalProof {
    RefusalProof::BeforeAcceptance
}
fn default_query_consistency() -> QueryConsistency {
    QueryConsistency::Immediate
}

/// Accepts `"immediate"`, a non-negative integer of milliseconds, or that integer as a string (values
/// overridden through environment variables arrive as strings).
fn deserialize_consistency<'de, D: Deserializer<'de>>(deserializer: D) -> Result<QueryConsistency, D::Error> {
    struct ConsistencyVisitor;

    impl Visitor<'_> for ConsistencyVisitor {
        type Value = QueryConsistency;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(r#""immediate" or a delay in milliseconds"#)
        }

        fn visit_u64<E: de::Error>(self, ms: u64) -> Result<QueryConsistency, E> {
            Ok(QueryConsistency::After(Millis(ms)))
        }

        fn visit_i64<E: de::Error>(self, ms: i64) -> Result<QueryConsistency, E> {
            u64::try_from(ms)
                .map(|ms| QueryConsistency::After(Millis(ms)))
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(ms), &self))
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<QueryConsistency, E> {
            if value == "immediate" {
                return Ok(QueryConsistency::Immediate);
            }
            value
                .parse::<u64>()
                .map(|ms| QueryConsistency::After(Millis(ms)))
                .map_err(|_| E::invalid_value(de::Unexpected::Str(value), &self))
        }
    }

    deserializer.deserialize_any(ConsistencyVisitor)
}

impl ChannelConfig {
    /// A channel with every optional key at its default, as if only `name`, `kind` and `url` were given.
    #[must_use]
    pub fn new(name: impl Into<String>, kind: ChannelKind, url: impl Into<String>) -> Self {
        ChannelConfig {
            name: name.into(),
            kind,
            url: url.into(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry_base_ms: DEFAULT_RETRY_BASE_MS,
            retry_cap_ms: DEFAULT_RETRY_CAP_MS,
            refusal_5xx: RefusalProof::BeforeAcceptance,
            query_consistency: QueryConsistency::Immediate,
            min_interval_ms: None,
            egress_guard_ms: None,
            digest: None,
            text: None,
            max_response_bytes: None,
            allow_plain_http: false,
        }
    }

    /// Whether this channel sends destinations in the clear over a network: an `http://` URL to a host
    /// other than loopback, without `allow_plain_http`.
    #[must_use]
    pub fn plain_http_off_loopback(&self) -> bool {
        let Ok(url) = reqwest::Url::parse(&self.url) else { return false };
        let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        let loopback =
            host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        url.scheme() == "http" && !loopback && !self.allow_plain_http
    }

    /// Refuses settings that cannot work, naming the key.
    ///
    /// # Errors
    /// The first invalid key found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name = self.name.as_str();
        if name.is_empty() {
            return Err(ConfigError::new("", "name", "must not be empty"));
        }
        if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
            return Err(ConfigError::new(name, "name", "must consist of a-z, 0-9, `_` and `-` only"));
        }
        let err = |key: &str, reason: &str| Err(ConfigError::new(name, key, reason));
        match reqwest::Url::parse(&self.url) {
            Err(_) => return err("url", "is not a valid URL"),
            Ok(url) if !matches!(url.scheme(), "http" | "https") => return err("url", "must be an http or https URL"),
            Ok(url) if url.host().is_none() => return err("url", "must name a host"),
            // The adapter appends its own path; a query or fragment would end up in the middle of it.
            Ok(url) if url.query().is_some() || url.fragment().is_some() => {
                return err("url", "must not have a query or fragment");
            }
            Ok(_) => {}
        }
        if self.timeout_ms == 0 {
            return err("timeout_ms", "must be at least 1");
        }
        if self.max_attempts == 0 {
            return err("max_attempts", "must be at least 1");
        }
        if self.retry_cap_ms < self.retry_base_ms {
            return err("retry_cap_ms", "must not be smaller than retry_base_ms");
        }
        if let Some(digest) = self.digest {
            if digest.instant_per_hour == 0 {
                return err("digest.instant_per_hour", "must be at least 1");
            }
            if digest.window_secs == Some(0) {
                return err("digest.window_secs", "must be at least 1");
            }
        }
        // A zero guard would give every slot back: no worker reads the clock and sends in no time at all.
        if self.egress_guard_ms == Some(0) && self.min_interval_ms() > 0 {
            return err("egress_guard_ms", "must be at least 1 when the channel has an egress interval");
        }
        if self.text.as_deref().is_some_and(|text| text.trim().is_empty()) {
            return err("text", "must not be empty");
        }
        if self.max_response_bytes == Some(0) {
            return err("max_response_bytes", "must be at least 1");
        }
        Ok(())
    }

    /// The effective egress interval: the configured one, else 10 s for Miaotixing and none otherwise.
    #[must_use]
    pub fn min_interval_ms(&self) -> u64 {
        self.min_interval_ms.unwrap_or(match self.kind {
            ChannelKind::Miaotixing => MIAOTIXING_MIN_INTERVAL_MS,
            ChannelKind::Webhook | ChannelKind::Queryable => 0,
        })
    }

    /// The effective egress guard: how late after its claim a worker may still use its egress slot. The
    /// configured one, else the domain's default for the effective interval.
    #[must_use]
    pub fn egress_guard_ms(&self) -> u64 {
        self.egress_guard_ms.unwrap_or_else(|| default_guard(Millis(self.min_interval_ms())).0)
    }

    /// The effective privacy-safe text: the configured one, else a fixed text for Miaotixing (a
    /// third-party service that has no business reading bodies) and none (send the body) otherwise.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match (&self.text, self.kind) {
            (Some(text), _) => Some(text),
            (None, ChannelKind::Miaotixing) => Some(MIAOTIXING_DEFAULT_TEXT),
            (None, ChannelKind::Webhook | ChannelKind::Queryable) => None,
        }
    }

    /// The effective cap on a reply body.
    #[must_use]
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES)
    }

    /// The decision rules of this channel. The policy is always [`Policy::Safe`].
    #[must_use]
    pub fn rules(&self) -> ChannelRules {
        ChannelRules {
            contract: ChannelContract::new(self.kind, self.refusal_5xx, self.query_consistency),
            retry: RetryPolicy::new(self.max_attempts, Millis(self.retry_base_ms), Millis(self.retry_cap_ms)),
            policy: Policy::Safe,
            client_timeout: Millis(self.timeout_ms),
            min_interval: Millis(self.min_interval_ms()),
            egress_guard: Millis(self.egress_guard_ms()),
            digest: self.digest.map(|digest| DigestRule {
                instant_per_window: digest.instant_per_hour,
                window: Millis::from_secs(digest.window_secs.unwrap_or(DEFAULT_DIGEST_WINDOW_SECS)),
            }),
        }
    }
}
