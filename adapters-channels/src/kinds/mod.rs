//! One module per channel kind (SPEC §9, §12), each a [`Channel`] adapter of its own: its wire format
//! (paths, body, idempotency header), its outbound text, and which classification of
//! [`herald_domain::classify`] reads its answers. The HTTP kinds share the crate's `http` module for the
//! client and everything between "request built" and "answer read" (timeouts, no proxy, no redirects,
//! the transport-failure mapping, the capped body read, `Retry-After`); this module holds what every
//! kind shares whatever its transport (`ChannelBase`: name, rules, privacy-safe text and digest count).
//!
//! | module | `kind` | capability | on the wire |
//! |---|---|---|---|
//! | [`webhook`] | `webhook` | idempotent | `POST {url}/send` JSON, `Idempotency-Key: ntf-{ref}` |
//! | [`queryable`] | `queryable` | queryable | `POST {url}/messages` JSON, `GET {url}/messages?ref=` |
//! | [`miaotixing`] | `miaotixing` | neither | `POST {url}/trigger` form `id={code}&text=` |
//! | [`email`] | `email` | neither (opt-in: resend with the same `Message-ID`) | SMTP, step by step, `Message-ID: <ntf-{ref}@…>` |
//! | [`webpush`] | `webpush` | neither (opt-in: resend with the same `Topic`) | `POST {endpoint}` `aes128gcm`, VAPID, `TTL`, `Topic` |
//!
//! **Adding a kind** is one module here and its line in `kinds!` below (docs/ARCHITECTURE.md, "Adding a
//! channel kind"): the module holds a struct implementing [`Kind`] — its `ChannelKind` (name, promise,
//! which classification table reads its answers), its own settings (a `serde` type reading the
//! `[[channel]]` keys that are not shared) and their check naming the key, the files it reads, its
//! destination check, how it is built and how it sends. [`KindChannel`] turns any `Kind` into a
//! [`Channel`]: the delegation every kind shares (name, rules, outbound text, the span and the log of
//! each classification, a `Debug` without destination) is written there once. A piece the trait requires
//! and the module lacks is a compile error; [`KINDS`] is the one place a `kind = "…"` name is looked up,
//! by the configuration and by the factory alike.

use std::fmt;
use std::path::PathBuf;

use async_trait::async_trait;
use herald_domain::classify::Classified;
use herald_domain::{ChannelKind, ChannelName, ChannelRules, Observation, RefusalProof};
use herald_ports::{Channel, OutboundMessage};
use serde::Deserialize;

use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::settings::{self, RawSettings, SettingError};

/// Declares the kinds: one line each, `module: Type` (the module is declared here too). A line may carry
/// attributes, such as the `cfg` of a kind compiled only for tests. Each line also gives the kind its
/// variant of [`KindSettings`] and its [`Registered`] impl, so a kind's settings type is all it declares.
macro_rules! kinds {
    ($($(#[$attr:meta])* $module:ident: $kind:ident,)+) => {
        $($(#[$attr])* pub mod $module;)+

        /// Every kind this build knows, in the order of its lines.
        pub static KINDS: &[KindEntry] = &[$($(#[$attr])* KindEntry::of::<$module::$kind>(),)+];

        /// The settings of one entry: a variant per kind, holding that kind's own [`Kind::Settings`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum KindSettings {
            $($(#[$attr])* $kind(<$module::$kind as Kind>::Settings),)+
            /// Of a kind this build does not know (refused by [`ChannelConfig::validate`]).
            Unknown,
        }

        $($(#[$attr])* impl Registered for $module::$kind {
            fn wrap(settings: Self::Settings) -> KindSettings {
                KindSettings::$kind(settings)
            }

            fn pick(settings: &KindSettings) -> Option<&Self::Settings> {
                match settings {
                    KindSettings::$kind(settings) => Some(settings),
                    _ => None,
                }
            }

            fn pick_mut(settings: &mut KindSettings) -> Option<&mut Self::Settings> {
                match settings {
                    KindSettings::$kind(settings) => Some(settings),
                    _ => None,
                }
            }
        })+
    };
}

kinds! {
    webhook: Webhook,
    queryable: Queryable,
    miaotixing: Miaotixing,
    email: Email,
    webpush: Webpush,
    #[cfg(feature = "test-kind")]
    echo: Echo,
}

/// One channel kind, declared in its own module: everything a kind needs beyond what every kind shares.
#[async_trait]
pub trait Kind: Send + Sync + Sized + 'static {
    /// Its name in `kind = "…"`, what it promises about an uncertain attempt, and which table of
    /// [`herald_domain::classify`] reads its answers.
    const KIND: ChannelKind;
    /// The name its `Debug` output starts with, such as `WebhookChannel`.
    const ADAPTER: &'static str;
    /// Whether it sends to the entry's `url` (the others refuse one).
    const USES_URL: bool;
    /// The egress interval when none is configured.
    const DEFAULT_MIN_INTERVAL_MS: u64 = 0;

    /// Its own keys of a `[[channel]]` table (those not shared by every kind, see [`ChannelConfig`]): a
    /// `serde` type with `deny_unknown_fields`, so a misspelt key or another kind's is refused by name;
    /// [`NoSettings`] for a kind without keys of its own.
    type Settings: serde::de::DeserializeOwned + Default + Clone + fmt::Debug + PartialEq + Eq + Send + Sync;

    /// Checks its own settings: required ones present, values that cannot work refused. The shared keys
    /// are checked by [`ChannelConfig::validate`] before; a kind may also check a shared key against its
    /// own rule here. The default has nothing to check.
    ///
    /// # Errors
    /// The first invalid key, named (`ConfigError::new(&config.name, key, reason)`).
    fn check_config(_config: &ChannelConfig, _settings: &Self::Settings) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Those of its settings that name a file read when it is built (a password, a key, a CA), so that
    /// the loader takes a relative path from the configuration file's folder. None unless it says.
    fn files(_settings: &mut Self::Settings) -> Vec<&mut PathBuf> {
        Vec::new()
    }

    /// The text sent instead of the body when no `text` is configured; `None`, unless it says: the body.
    fn default_text(_settings: &Self::Settings) -> Option<&'static str> {
        None
    }

    /// What a process serving a network refuses of its entry (`herald serve`, `worker`), naming the key and
    /// never the value: a secret that is still a placeholder (`placeholder` says what is one), a setting
    /// only local stand-ins may use (`stand_ins`: the process was started for them). Nothing unless it says.
    ///
    /// # Errors
    /// The first such setting.
    fn check_production(
        _config: &ChannelConfig,
        _settings: &Self::Settings,
        _placeholder: fn(&str) -> bool,
        _stand_ins: bool,
    ) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Builds the transport of a checked entry of this kind.
    ///
    /// # Errors
    /// What can only be found while building (an unreadable file, a client that cannot be built),
    /// naming the key.
    fn build(config: &ChannelConfig, settings: &Self::Settings, egress: &Egress) -> Result<Self, ConfigError>;

    /// The host its `Debug` output shows (never a path, never a destination).
    fn host(&self) -> &str;

    /// [`Channel::check_destination`]: what it would never send to. No I/O; the reason never repeats
    /// the destination.
    ///
    /// # Errors
    /// A short reason for the user who gave it.
    fn check_destination(&self, destination: &str) -> Result<(), &'static str>;

    /// [`Channel::send`]: reports what the transport saw through the kind's classification.
    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified;

    /// [`Channel::query`]; a kind without a query keeps this default, which the domain never asks.
    async fn query(&self, _base: &ChannelBase, _reference: &str) -> Classified {
        no_query()
    }
}

/// What the [`kinds!`] line of a kind adds to it: its variant of [`KindSettings`].
pub trait Registered: Kind {
    /// Its settings as an entry holds them.
    fn wrap(settings: Self::Settings) -> KindSettings;
    /// Its settings, if `settings` are of this kind.
    fn pick(settings: &KindSettings) -> Option<&Self::Settings>;
    /// As [`Registered::pick`], to change them.
    fn pick_mut(settings: &mut KindSettings) -> Option<&mut Self::Settings>;
}

/// The settings of a kind without keys of its own: any key is refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// [`Kind::check_production`].
type CheckProduction = fn(&ChannelConfig, fn(&str) -> bool, bool) -> Result<(), ConfigError>;

/// Builds a checked entry's adapter.
type Build = fn(&ChannelConfig, &Egress) -> Result<Box<dyn ChannelAdapter>, ConfigError>;

/// A kind as the registry holds it, without its type: how to read, check, build and describe its entries.
pub struct KindEntry {
    pub kind: ChannelKind,
    pub(crate) uses_url: bool,
    pub(crate) default_min_interval_ms: u64,
    pub(crate) parse: fn(RawSettings) -> Result<KindSettings, SettingError>,
    pub(crate) has_key: fn(&str) -> bool,
    pub(crate) default_settings: fn() -> KindSettings,
    pub(crate) check_config: fn(&ChannelConfig) -> Result<(), ConfigError>,
    pub(crate) check_production: CheckProduction,
    pub(crate) files: fn(&mut KindSettings) -> Vec<&mut PathBuf>,
    pub(crate) default_text: fn(&KindSettings) -> Option<&'static str>,
    pub(crate) build: Build,
}

impl KindEntry {
    /// The entry of kind `K`.
    #[must_use]
    pub const fn of<K: Registered>() -> KindEntry {
        KindEntry {
            kind: K::KIND,
            uses_url: K::USES_URL,
            default_min_interval_ms: K::DEFAULT_MIN_INTERVAL_MS,
            parse: |raw| settings::parse::<K::Settings>(raw).map(K::wrap),
            has_key: settings::has_key::<K::Settings>,
            default_settings: || K::wrap(K::Settings::default()),
            check_config: |config| K::check_config(config, settings_of::<K>(config)?),
            check_production: |config, placeholder, stand_ins| {
                K::check_production(config, settings_of::<K>(config)?, placeholder, stand_ins)
            },
            files: |settings| K::pick_mut(settings).map_or_else(Vec::new, K::files),
            default_text: |settings| K::pick(settings).and_then(K::default_text),
            build: build::<K>,
        }
    }
}

/// The settings of kind `K` of `config`, which must be of that kind.
fn settings_of<K: Registered>(config: &ChannelConfig) -> Result<&K::Settings, ConfigError> {
    config
        .settings_of::<K>()
        .ok_or_else(|| ConfigError::new(&config.name, "kind", "does not match the adapter it was given to"))
}

fn build<K: Registered>(config: &ChannelConfig, egress: &Egress) -> Result<Box<dyn ChannelAdapter>, ConfigError> {
    Ok(Box::new(KindChannel::<K>::with_egress(config, egress)?))
}

/// The kind named `name` in `kind = "…"`, if this build knows it.
#[must_use]
pub fn named(name: &str) -> Option<&'static KindEntry> {
    KINDS.iter().find(|entry| entry.kind.name() == name)
}

/// The entry of `kind`, if this build knows it.
#[must_use]
pub fn entry(kind: ChannelKind) -> Option<&'static KindEntry> {
    named(kind.name())
}

/// A kind's adapter as the registry holds it: a [`Channel`] whose `Debug` output shows no destination
/// and no URL path.
pub trait ChannelAdapter: Channel + fmt::Debug {}

impl<T: Channel + fmt::Debug> ChannelAdapter for T {}

/// A configured channel of kind `K`: what every kind shares, around the kind's own part.
pub struct KindChannel<K: Kind> {
    base: ChannelBase,
    kind: K,
}

impl<K: Registered> KindChannel<K> {
    /// Validates `config` (of kind `K`) and builds the channel, with the default egress settings.
    ///
    /// # Errors
    /// An invalid setting, naming its key.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        Self::with_egress(config, &Egress::default())
    }

    /// As [`KindChannel::new`], with the installation's egress settings (`[egress]`).
    ///
    /// # Errors
    /// An invalid setting, naming its key, or a `config` of another kind.
    pub fn with_egress(config: &ChannelConfig, egress: &Egress) -> Result<Self, ConfigError> {
        let base = ChannelBase::new(config, K::KIND)?;
        Ok(KindChannel { base, kind: K::build(config, settings_of::<K>(config)?, egress)? })
    }

    /// The kind's own part.
    pub fn kind(&self) -> &K {
        &self.kind
    }
}

#[async_trait]
impl<K: Kind> Channel for KindChannel<K> {
    fn name(&self) -> &ChannelName {
        self.base.name()
    }

    fn rules(&self) -> ChannelRules {
        self.base.rules()
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.base.outbound_text(body, digest_count)
    }

    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        self.kind.check_destination(destination)
    }

    /// Logs the classification (outcome and the secret-free detail only).
    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn send(&self, message: &OutboundMessage) -> Classified {
        send_classified(self.kind.send(&self.base, message).await)
    }

    /// Logs the classification (outcome and the secret-free detail only).
    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn query(&self, reference: &str) -> Classified {
        query_classified(self.kind.query(&self.base, reference).await)
    }
}

impl<K: Kind> fmt::Debug for KindChannel<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, K::ADAPTER, self.kind.host())
    }
}

/// What every kind takes from its `[[channel]]` entry apart from the transport.
pub struct ChannelBase {
    name: ChannelName,
    rules: ChannelRules,
    text: Option<String>,
}

impl ChannelBase {
    /// Validates `config`, which must configure a channel of `kind`.
    ///
    /// # Errors
    /// An invalid setting (see [`ChannelConfig::validate`]), or a `config` of another kind.
    pub(crate) fn new(config: &ChannelConfig, kind: ChannelKind) -> Result<Self, ConfigError> {
        config.validate()?;
        if config.kind != kind {
            return Err(ConfigError::new(&config.name, "kind", "does not match the adapter it was given to"));
        }
        Ok(ChannelBase {
            name: ChannelName::new(config.name.as_str()),
            rules: config.rules(),
            text: config.text().map(str::to_owned),
        })
    }

    pub(crate) fn name(&self) -> &ChannelName {
        &self.name
    }

    pub(crate) fn rules(&self) -> ChannelRules {
        self.rules
    }

    /// What a 5xx (and for the JSON kinds a 429) proves, as configured.
    pub(crate) fn refusal_5xx(&self) -> RefusalProof {
        self.rules.contract.refusal_5xx
    }

    /// [`Channel::outbound_text`]: the privacy-safe text instead of the body where one is configured,
    /// and the digest count in the text of a digest.
    pub(crate) fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        match (digest_count, self.text.as_deref()) {
            (None, Some(text)) => text.to_owned(),
            (None, None) => body.to_owned(),
            (Some(1), Some(text)) => format!("{text} (1 update)"),
            (Some(n), Some(text)) => format!("{text} ({n} updates)"),
            (Some(1), None) => "1 new update".to_owned(),
            (Some(n), None) => format!("{n} new updates"),
        }
    }

    /// The fields of a kind's `Debug` output: name, host and rules — never the destination, the URL's
    /// path or the text.
    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>, adapter: &str, host: &str) -> fmt::Result {
        f.debug_struct(adapter)
            .field("name", &self.name)
            .field("kind", &self.rules.contract.kind)
            .field("host", &host)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// Logs a send's classification (outcome and the secret-free detail only) and returns it.
fn send_classified(classified: Classified) -> Classified {
    tracing::debug!(outcome = ?classified.observation.outcome(), detail = %classified.detail, "send classified");
    classified
}

/// Logs a query's classification (outcome and the secret-free detail only) and returns it.
fn query_classified(classified: Classified) -> Classified {
    tracing::debug!(outcome = ?classified.observation.outcome(), detail = %classified.detail, "query classified");
    classified
}

/// The answer of a kind without a query: `QUERY_FAILED`, without a request (the domain never asks).
pub(crate) fn no_query() -> Classified {
    Classified { observation: Observation::QueryFailed, detail: "channel has no query".to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ConfiguredChannel;

    #[test]
    fn each_kind_gets_its_own_module() {
        for (kind, adapter) in [
            (ChannelKind::Webhook, "WebhookChannel"),
            (ChannelKind::Queryable, "QueryableChannel"),
            (ChannelKind::Miaotixing, "MiaotixingChannel"),
            (ChannelKind::Email, "EmailChannel"),
            (ChannelKind::Webpush, "WebpushChannel"),
        ] {
            let mut config = ChannelConfig::new("c", kind, "http://127.0.0.1:9");
            if kind == ChannelKind::Email {
                config.url = String::new();
                config.settings = email::Email::wrap(email::EmailSettings {
                    host: Some("127.0.0.1".into()),
                    tls: Some(crate::config::SmtpTls::None),
                    from: Some("herald@example.org".into()),
                    ..Default::default()
                });
            }
            if kind == ChannelKind::Webpush {
                config.url = String::new();
                config.settings = webpush::Webpush::wrap(webpush::WebpushSettings {
                    vapid_private_key: Some(crate::config::ConfigSecret::new(webpush::VapidKey::generate().0)),
                    vapid_subject: Some("mailto:ops@example.org".into()),
                    ..Default::default()
                });
            }
            let channel = ConfiguredChannel::new(&config).expect("valid");
            assert!(format!("{channel:?}").starts_with(adapter), "{kind:?}: {channel:?}");
            assert_eq!(channel.kind(), kind);
        }
    }

    #[test]
    fn every_kind_is_listed_once_under_a_name_of_its_own() {
        let mut names: Vec<&str> = KINDS.iter().map(|entry| entry.kind.name()).collect();
        let listed = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), listed, "a name twice: {names:?}");
        let shipped = [
            ChannelKind::Webhook,
            ChannelKind::Queryable,
            ChannelKind::Miaotixing,
            ChannelKind::Email,
            ChannelKind::Webpush,
        ];
        for kind in shipped {
            assert_eq!(entry(kind).map(|entry| entry.kind), Some(kind), "{kind}");
        }
        assert!(named("fax").is_none());
    }

    #[test]
    fn an_adapter_refuses_the_config_of_another_kind() {
        let config = ChannelConfig::new("push", ChannelKind::Queryable, "http://127.0.0.1:9");
        let err = webhook::WebhookChannel::new(&config).expect_err("a queryable entry");
        assert_eq!(err.key, "channel.push.kind");
        assert!(miaotixing::MiaotixingChannel::new(&config).is_err());
        assert!(queryable::QueryableChannel::new(&config).is_ok());
    }
}
