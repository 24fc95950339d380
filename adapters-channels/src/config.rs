//! One `[[channel]]` entry of the configuration file (SPEC §12), its defaults and its validation.
//!
//! The settings that decide what an uncertain attempt means (`kind`, `refusal_5xx`, `query_consistency`)
//! are declared here by the operator, because only the operator knows the third party's contract; the
//! domain turns them into decisions through [`ChannelConfig::rules`]. The resend policy is deliberately
//! not a setting: production always runs [`Policy::Safe`], the blind-resend policy exists only in tests.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use herald_domain::{default_guard, OnUnknown, RefusalProof, RetryPolicy};
use herald_domain::{ChannelContract, ChannelKind, ChannelRules, DigestRule, Millis, Policy, QueryConsistency};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

pub use crate::kinds::email::SmtpTls;
pub use crate::kinds::webpush::Urgency;
use crate::kinds::{KindEntry, KindSettings, Registered};
pub use crate::settings::RawSettings;

/// Default client timeout for one call.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Default attempt budget. Miaotixing never resends an uncertain attempt anyway (its capability is
/// `Neither`), so the same generic budget only retries provable refusals there.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
pub const DEFAULT_RETRY_BASE_MS: u64 = 500;
pub const DEFAULT_RETRY_CAP_MS: u64 = 60_000;
pub use crate::kinds::miaotixing::{MIAOTIXING_DEFAULT_TEXT, MIAOTIXING_MIN_INTERVAL_MS};
/// Default rolling window of a digest rule.
pub const DEFAULT_DIGEST_WINDOW_SECS: u64 = 3_600;
/// Default cap on how much of a reply body is read; a longer body is an unknown outcome.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// What e-mail and Web Push users see when neither `text` nor `send_body = true` is configured: a mail
/// server or a browser vendor's push service has no business reading bodies (SPEC §8).
pub const PRIVATE_DEFAULT_TEXT: &str = "You have a new update — open the app to view it.";
/// The e-mail subject when none is configured.
pub const EMAIL_DEFAULT_SUBJECT: &str = "New notification";

/// One configured external channel: the keys every kind shares, and `settings`, the kind's own.
///
/// As read from the file, `S` is [`RawSettings`] (the table's other keys, as given: a [`ChannelEntry`]);
/// [`ChannelEntry::into_config`] hands them to the kind, whose own type reads them
/// ([`crate::kinds::Kind::Settings`]), and the result is a `ChannelConfig` with [`KindSettings`].
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ChannelConfig<S = KindSettings> {
    /// The name used in preferences and tasks.
    pub name: String,
    /// What the console calls the channel (users' and operators' pages); absent means the `name`. Any
    /// text up to 60 characters, without control characters.
    #[serde(default)]
    pub display_name: Option<String>,
    /// One of [`crate::kinds::KINDS`], by its name.
    #[serde(deserialize_with = "deserialize_kind")]
    pub kind: ChannelKind,
    /// Base URL; the adapter appends its path (`/send`, `/messages`, `/trigger`). Only kinds with
    /// `USES_URL` read it (not `email`, which has `host` and `port`, nor `webpush`, whose endpoint is each
    /// user's subscription).
    #[serde(default)]
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
    /// What may be done after an unknown outcome — park (default), or the kind's partial resend (`email`:
    /// `resend_same_message_id`, `webpush`: `resend_same_topic`); see [`OnUnknown`].
    #[serde(default)]
    pub on_unknown: OnUnknown,
    /// The kind's own settings, declared in its module.
    #[serde(flatten)]
    pub settings: S,
}

/// A `[[channel]]` table as read, before its kind has read its own keys.
pub type ChannelEntry = ChannelConfig<RawSettings>;

impl ChannelEntry {
    /// Hands the keys that are not shared to the entry's kind, which reads them into its own settings.
    ///
    /// # Errors
    /// A key the kind does not have (named, with the kinds that have it), or a value that does not fit.
    pub fn into_config(self) -> Result<ChannelConfig, ConfigError> {
        let entry = crate::kinds::entry(self.kind)
            .ok_or_else(|| ConfigError::new(&self.name, "kind", "is not a kind this build knows"))?;
        let settings = (entry.parse)(self.settings).map_err(|error| {
            let key = error.key.unwrap_or_default();
            let readers: Vec<&str> = crate::kinds::KINDS
                .iter()
                .filter(|other| other.kind != self.kind && (other.has_key)(&key))
                .map(|other| other.kind.name())
                .collect();
            let reason = if readers.is_empty() {
                error.reason
            } else {
                format!("is only used by {} channels", readers.join(" and "))
            };
            ConfigError::new(&self.name, &key, reason)
        })?;
        Ok(ChannelConfig {
            name: self.name,
            display_name: self.display_name,
            kind: self.kind,
            url: self.url,
            timeout_ms: self.timeout_ms,
            max_attempts: self.max_attempts,
            retry_base_ms: self.retry_base_ms,
            retry_cap_ms: self.retry_cap_ms,
            refusal_5xx: self.refusal_5xx,
            query_consistency: self.query_consistency,
            min_interval_ms: self.min_interval_ms,
            egress_guard_ms: self.egress_guard_ms,
            digest: self.digest,
            text: self.text,
            max_response_bytes: self.max_response_bytes,
            allow_plain_http: self.allow_plain_http,
            on_unknown: self.on_unknown,
            settings,
        })
    }
}

/// A secret setting (a password, a private key). Its `Debug` shows nothing of it. Given through an
/// environment variable a value may arrive as a TOML number; it is taken as its text.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigSecret(String);

impl ConfigSecret {
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        ConfigSecret(value.into())
    }

    /// The secret itself, for the adapter that uses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ConfigSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfigSecret([redacted])")
    }
}

impl<'de> Deserialize<'de> for ConfigSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SecretVisitor;

        impl Visitor<'_> for SecretVisitor {
            type Value = ConfigSecret;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<ConfigSecret, E> {
                Ok(ConfigSecret(value.to_owned()))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ConfigSecret, E> {
                Ok(ConfigSecret(value.to_string()))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ConfigSecret, E> {
                Ok(ConfigSecret(value.to_string()))
            }
        }

        deserializer.deserialize_any(SecretVisitor)
    }
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

/// A kind this build knows ([`crate::kinds::named`]); another is serde's "unknown variant", whose
/// message names the kinds known (and, as the application reports it, never the value given).
fn deserialize_kind<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ChannelKind, D::Error> {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let name = String::deserialize(deserializer)?;
    crate::kinds::named(&name).map(|entry| entry.kind).ok_or_else(|| {
        let names = NAMES.get_or_init(|| crate::kinds::KINDS.iter().map(|entry| entry.kind.name()).collect());
        de::Error::unknown_variant(&name, names)
    })
}

impl ChannelConfig {
    /// A channel with every optional key at its default, as if only `name`, `kind` and `url` were given.
    #[must_use]
    pub fn new(name: impl Into<String>, kind: ChannelKind, url: impl Into<String>) -> Self {
        ChannelConfig {
            name: name.into(),
            display_name: None,
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
            on_unknown: OnUnknown::Park,
            settings: crate::kinds::entry(kind).map_or(KindSettings::Unknown, |entry| (entry.default_settings)()),
        }
    }

    /// A channel of kind `K` with these settings of its own and every shared key at its default.
    #[must_use]
    pub fn with_settings<K: Registered>(
        name: impl Into<String>,
        url: impl Into<String>,
        settings: K::Settings,
    ) -> Self {
        ChannelConfig { settings: K::wrap(settings), ..ChannelConfig::new(name, K::KIND, url) }
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
        if let Some(shown) = &self.display_name {
            if shown.trim().is_empty() || shown.chars().count() > 60 || shown.chars().any(char::is_control) {
                return err("display_name", "must be 1 to 60 characters, without control characters");
            }
        }
        let entry = self.entry()?;
        if entry.uses_url {
            match reqwest::Url::parse(&self.url) {
                Err(_) => return err("url", "is not a valid URL"),
                Ok(url) if !matches!(url.scheme(), "http" | "https") => {
                    return err("url", "must be an http or https URL");
                }
                Ok(url) if url.host().is_none() => return err("url", "must name a host"),
                // The adapter appends its own path; a query or fragment would end up in the middle of it.
                Ok(url) if url.query().is_some() || url.fragment().is_some() => {
                    return err("url", "must not have a query or fragment");
                }
                Ok(_) => {}
            }
        } else if !self.url.is_empty() {
            return err(
                "url",
                "is not used by this kind (email: host and port; webpush: each subscription's endpoint)",
            );
        }
        self.validate_kind_settings()?;
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

    /// The kind this entry names, as this build knows it.
    fn entry(&self) -> Result<&'static KindEntry, ConfigError> {
        crate::kinds::entry(self.kind)
            .ok_or_else(|| ConfigError::new(&self.name, "kind", "is not a kind this build knows"))
    }

    /// The kind's own settings, checked by its module; and `on_unknown`, which only some kinds allow.
    fn validate_kind_settings(&self) -> Result<(), ConfigError> {
        if !self.on_unknown.fits(self.kind) {
            return Err(ConfigError::new(
                &self.name,
                "on_unknown",
                "is not available for this kind (email: resend_same_message_id; webpush: resend_same_topic)",
            ));
        }
        (self.entry()?.check_config)(self)
    }

    /// The settings of kind `K`, if this entry is of that kind.
    #[must_use]
    pub fn settings_of<K: Registered>(&self) -> Option<&K::Settings> {
        K::pick(&self.settings)
    }

    /// The settings of kind `K` to change, if this entry is of that kind.
    pub fn settings_mut<K: Registered>(&mut self) -> Option<&mut K::Settings> {
        K::pick_mut(&mut self.settings)
    }

    /// What a process serving a network refuses of this entry: its kind's rules (a placeholder secret, a
    /// setting for local stand-ins only, see `Kind::check_production`) and, for every kind, destinations in
    /// the clear off this machine ([`ChannelConfig::plain_http_off_loopback`]).
    ///
    /// # Errors
    /// The first such setting, naming its key.
    pub fn check_production(&self, placeholder: fn(&str) -> bool, stand_ins: bool) -> Result<(), ConfigError> {
        (self.entry()?.check_production)(self, placeholder, stand_ins)?;
        if self.plain_http_off_loopback() {
            return Err(ConfigError::new(
                &self.name,
                "url",
                "is http:// to a host that is not this machine: destinations would cross the network in the clear; \
                 use https://, or set allow_plain_http = true for this channel if the network is yours",
            ));
        }
        Ok(())
    }

    /// The files this entry's kind reads when it is built (as its module declares them), so that a loader
    /// can take a relative path from the configuration file's folder.
    pub fn files_mut(&mut self) -> Vec<&mut PathBuf> {
        match crate::kinds::entry(self.kind) {
            Some(entry) => (entry.files)(&mut self.settings),
            None => Vec::new(),
        }
    }

    /// The effective egress interval: the configured one, else the kind's default (10 s for Miaotixing,
    /// none otherwise).
    #[must_use]
    pub fn min_interval_ms(&self) -> u64 {
        self.min_interval_ms
            .unwrap_or_else(|| crate::kinds::entry(self.kind).map_or(0, |entry| entry.default_min_interval_ms))
    }

    /// The effective egress guard: how late after its claim a worker may still use its egress slot. The
    /// configured one, else the domain's default for the effective interval.
    #[must_use]
    pub fn egress_guard_ms(&self) -> u64 {
        self.egress_guard_ms.unwrap_or_else(|| default_guard(Millis(self.min_interval_ms())).0)
    }

    /// The effective privacy-safe text: the configured one, else the kind's default for its settings (a
    /// fixed text for Miaotixing, and for e-mail and Web Push unless `send_body = true`: third parties
    /// that have no business reading bodies) and none (send the body) otherwise.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match &self.text {
            Some(text) => Some(text),
            None => crate::kinds::entry(self.kind).and_then(|entry| (entry.default_text)(&self.settings)),
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
            contract: ChannelContract::opted(self.kind, self.refusal_5xx, self.query_consistency, self.on_unknown),
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

/// Whether `host` is `localhost` or a loopback address: the only hosts an `email` channel may reach
/// without TLS, and a `webpush` endpoint over plain http.
#[must_use]
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ChannelConfig {
        toml::from_str::<ChannelEntry>(text).expect("a channel entry").into_config().expect("its kind's keys")
    }

    fn refused(text: &str) -> ConfigError {
        match toml::from_str::<ChannelEntry>(text).expect("a channel entry").into_config() {
            Ok(config) => config.validate().expect_err("refused"),
            Err(error) => error,
        }
    }

    fn email(config: &ChannelConfig) -> &crate::kinds::email::EmailSettings {
        config.settings_of::<crate::kinds::email::Email>().expect("an email entry")
    }

    const EMAIL: &str = r#"
        name = "mail"
        kind = "email"
        host = "smtp.example.org"
        from = "herald@notify.example.org"
    "#;

    const WEBPUSH: &str = r#"
        name = "browser"
        kind = "webpush"
        vapid_private_key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
        vapid_subject = "mailto:ops@notify.example.org"
    "#;

    #[test]
    fn an_email_entry_has_starttls_on_587_and_the_private_text_by_default() {
        let config = parse(EMAIL);
        config.validate().expect("valid");
        assert_eq!((email(&config).tls(), email(&config).port()), (SmtpTls::Starttls, 587));
        assert_eq!(config.text(), Some(PRIVATE_DEFAULT_TEXT));
        assert_eq!(config.rules().contract.capability, herald_domain::Capability::Neither);
        let implicit = parse(&format!("{EMAIL}\ntls = \"implicit\""));
        assert_eq!(email(&implicit).port(), 465);
    }

    #[test]
    fn send_body_and_the_opt_ins_are_explicit() {
        let config = parse(&format!("{EMAIL}\nsend_body = true\non_unknown = \"resend_same_message_id\""));
        config.validate().expect("valid");
        assert_eq!(config.text(), None);
        assert_eq!(config.rules().contract.capability, herald_domain::Capability::Idempotent);
        let push = parse(&format!("{WEBPUSH}\non_unknown = \"resend_same_topic\""));
        push.validate().expect("valid");
        assert_eq!(push.rules().contract.capability, herald_domain::Capability::Idempotent);
    }

    #[test]
    fn email_settings_are_checked_by_key() {
        let key = |text: &str| refused(text).key;
        assert_eq!(key(&EMAIL.replace("host = \"smtp.example.org\"", "")), "channel.mail.host");
        assert_eq!(key(&format!("{EMAIL}\ntls = \"none\"")), "channel.mail.tls", "none only on loopback");
        assert_eq!(key(&EMAIL.replace("herald@notify.example.org", "not an address")), "channel.mail.from");
        assert_eq!(key(&format!("{EMAIL}\nusername = \"herald\"")), "channel.mail.username");
        assert_eq!(key(&format!("{EMAIL}\non_unknown = \"resend_same_topic\"")), "channel.mail.on_unknown");
        assert_eq!(key(&format!("{EMAIL}\nurl = \"http://127.0.0.1:25\"")), "channel.mail.url");
        assert_eq!(key(&format!("{EMAIL}\nurgency = \"high\"")), "channel.mail.urgency");
        let local = parse(&EMAIL.replace("smtp.example.org", "127.0.0.1").replace("from", "tls = \"none\"\nfrom"));
        local.validate().expect("none is fine on loopback");
        assert_eq!(email(&local).port(), 25);
    }

    #[test]
    fn webpush_settings_are_checked_by_key() {
        let key = |text: &str| refused(text).key;
        assert_eq!(key(&WEBPUSH.replace("vapid_private_key = ", "# ")), "channel.browser.vapid_private_key");
        assert_eq!(key(&WEBPUSH.replace("mailto:", "")), "channel.browser.vapid_subject");
        assert_eq!(key(&format!("{WEBPUSH}\nhost = \"smtp.example.org\"")), "channel.browser.host");
        assert_eq!(key(&format!("{WEBPUSH}\non_unknown = \"resend_same_message_id\"")), "channel.browser.on_unknown");
        let webhook = "name = \"push\"\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9\"\nsend_body = true";
        assert_eq!(key(webhook), "channel.push.send_body");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let config = parse(&format!("{EMAIL}\nusername = \"herald\"\npassword = \"s3cr3t-pw\""));
        config.validate().expect("valid");
        let push = parse(WEBPUSH);
        let debug = format!("{config:?} {push:?}");
        assert!(!debug.contains("s3cr3t-pw") && !debug.contains("MDEyMzQ1"), "{debug}");
        assert_eq!(
            email(&parse(&format!("{EMAIL}\npassword = 123456\nusername = \"u\"")))
                .password
                .as_ref()
                .expect("pw")
                .expose(),
            "123456"
        );
    }
}
