//! `kind = "webhook"` (SPEC §12): an idempotent HTTP endpoint.
//!
//! `POST {url}/send` with JSON `{"ref","to","text","ttl_seconds"}` and `Idempotency-Key: ntf-{ref}`, so a
//! resend after an uncertain attempt is recognised and not sent again. Answers are classified as
//! [`ChannelKind::Webhook`] (a 2xx `{"id","replayed"}` is ACCEPTED or ACCEPTED_REPLAY). No query.

use std::fmt;

use async_trait::async_trait;
use herald_domain::classify::{classify_send, Classified};
use herald_domain::{ChannelKind, ChannelName, ChannelRules};
use herald_ports::{Channel, OutboundMessage};
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Serialize;

use super::{no_query, send_classified, ChannelBase};
use crate::config::{ChannelConfig, ConfigError};
use crate::http::{endpoint, Connections, HttpTransport};

/// One configured webhook channel.
pub struct WebhookChannel {
    base: ChannelBase,
    transport: HttpTransport,
    send_url: Url,
}

/// The `POST {url}/send` body.
#[derive(Serialize)]
struct SendBody<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    to: &'a str,
    text: &'a str,
    ttl_seconds: u64,
}

impl WebhookChannel {
    /// Validates `config` (of kind `webhook`) and builds the channel's client.
    ///
    /// # Errors
    /// An invalid setting, naming its key.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        let base = ChannelBase::new(config, ChannelKind::Webhook)?;
        let send_url = endpoint(config, "/send")?;
        let transport = HttpTransport::new(config, Connections::Pooled)?;
        Ok(WebhookChannel { base, transport, send_url })
    }
}

#[async_trait]
impl Channel for WebhookChannel {
    fn name(&self) -> &ChannelName {
        self.base.name()
    }

    fn rules(&self) -> ChannelRules {
        self.base.rules()
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.base.outbound_text(body, digest_count)
    }

    /// Any text: the channel is the operator's own service, which judges the destination itself.
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn send(&self, message: &OutboundMessage) -> Classified {
        let body = SendBody {
            reference: &message.reference,
            to: message.destination.expose_secret(),
            text: &message.text,
            ttl_seconds: message.ttl_seconds,
        };
        let request =
            self.transport.post(&self.send_url).header("Idempotency-Key", message.idempotency_key.as_str()).json(&body);
        let wire = self.transport.call(request).await;
        send_classified(classify_send(ChannelKind::Webhook, self.base.refusal_5xx(), wire.reply()))
    }

    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn query(&self, _reference: &str) -> Classified {
        no_query()
    }
}

impl fmt::Debug for WebhookChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, "WebhookChannel", self.transport.host())
    }
}
