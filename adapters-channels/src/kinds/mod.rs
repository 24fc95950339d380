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
//! **Adding a kind** (e-mail, Web Push, …) is one new module here plus its rows elsewhere:
//! * the module: a struct holding a `ChannelBase` and its transport (the HTTP kinds use `HttpTransport`
//!   of the `http` module; SMTP brings its own), `new(&ChannelConfig)` building it through
//!   `ChannelBase::new`, and `impl Channel` whose `check_destination` refuses what it would never send
//!   to, whose `send` reports what the transport saw and hands it to the kind's classification, and whose
//!   `Debug` shows no destination (`ChannelBase::debug`). A destination that names a host a user chose
//!   goes through the egress guard ([`crate::egress`]: `HttpTransport::guarded`, `Guard::check_url`);
//! * its configuration rows: the `ChannelKind` variant (its `kind = "…"` name) and its capability
//!   (`Capability::of`) in `domain/src/contract.rs`, its defaults and settings in [`crate::config`], and its
//!   line in [`crate::registry::ConfiguredChannel::new`], the one place a kind picks its adapter;
//! * its classification rows: in `domain/src/classify.rs`, with their unit tests. The domain decides
//!   what an answer proves; the adapter only reports what it saw.

use std::fmt;

use herald_domain::classify::Classified;
use herald_domain::{ChannelKind, ChannelName, ChannelRules, Observation, RefusalProof};
use herald_ports::Channel;

use crate::config::{ChannelConfig, ConfigError};

pub mod email;
pub mod miaotixing;
pub mod queryable;
pub mod webhook;
pub mod webpush;

/// A kind's adapter as the registry holds it: a [`Channel`] whose `Debug` output shows no destination
/// and no URL path.
pub trait ChannelAdapter: Channel + fmt::Debug {}

impl<T: Channel + fmt::Debug> ChannelAdapter for T {}

/// What every kind takes from its `[[channel]]` entry apart from the transport.
pub(crate) struct ChannelBase {
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
pub(crate) fn send_classified(classified: Classified) -> Classified {
    tracing::debug!(outcome = ?classified.observation.outcome(), detail = %classified.detail, "send classified");
    classified
}

/// Logs a query's classification (outcome and the secret-free detail only) and returns it.
pub(crate) fn query_classified(classified: Classified) -> Classified {
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
                config.host = Some("127.0.0.1".into());
                config.tls = Some(crate::config::SmtpTls::None);
                config.from = Some("herald@example.org".into());
            }
            if kind == ChannelKind::Webpush {
                config.url = String::new();
                config.vapid_private_key = Some(crate::config::ConfigSecret::new(webpush::VapidKey::generate().0));
                config.vapid_subject = Some("mailto:ops@example.org".into());
            }
            let channel = ConfiguredChannel::new(&config).expect("valid");
            assert!(format!("{channel:?}").starts_with(adapter), "{kind:?}: {channel:?}");
            assert_eq!(channel.kind(), kind);
        }
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
