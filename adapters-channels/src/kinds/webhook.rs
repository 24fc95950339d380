//! `kind = "webhook"` (SPEC §12): an idempotent HTTP endpoint.
//!
//! `POST {url}/send` with JSON `{"ref","to","text","ttl_seconds"}` and `Idempotency-Key: ntf-{ref}`, so a
//! resend after an uncertain attempt is recognised and not sent again. Answers are classified as
//! [`ChannelKind::Webhook`] (a 2xx `{"id","replayed"}` is ACCEPTED or ACCEPTED_REPLAY). No query.

use async_trait::async_trait;
use herald_domain::classify::{classify_send, Classified};
use herald_domain::ChannelKind;
use herald_ports::OutboundMessage;
use secrecy::ExposeSecret;
use serde::Serialize;

use super::{ChannelBase, Kind, KindChannel, NoSettings};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::http::{Connections, Endpoint};

/// One configured webhook channel.
pub type WebhookChannel = KindChannel<Webhook>;

/// The webhook kind's own part: its client and its `{url}/send`.
pub struct Webhook(Endpoint);

/// The `POST {url}/send` body.
#[derive(Serialize)]
struct SendBody<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    to: &'a str,
    text: &'a str,
    ttl_seconds: u64,
}

#[async_trait]
impl Kind for Webhook {
    const KIND: ChannelKind = ChannelKind::Webhook;
    const ADAPTER: &'static str = "WebhookChannel";
    const USES_URL: bool = true;
    type Settings = NoSettings;

    fn build(config: &ChannelConfig, _settings: &NoSettings, _egress: &Egress) -> Result<Self, ConfigError> {
        Endpoint::new(config, "/send", Connections::Pooled).map(Webhook)
    }

    fn host(&self) -> &str {
        self.0.host()
    }

    /// Any text: the channel is the operator's own service, which judges the destination itself.
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let body = SendBody {
            reference: &message.reference,
            to: message.destination.expose_secret(),
            text: &message.text,
            ttl_seconds: message.ttl_seconds,
        };
        let request = self.0.post().header("Idempotency-Key", message.idempotency_key.as_str()).json(&body);
        let wire = self.0.call(request).await;
        classify_send(Self::KIND, base.refusal_5xx(), wire.reply())
    }
}
