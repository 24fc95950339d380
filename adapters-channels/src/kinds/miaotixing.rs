//! `kind = "miaotixing"` (SPEC §9, §12): the public Miaotixing service, which has neither idempotency
//! nor a query, so an unknown outcome is parked for a human.
//!
//! `POST {url}/trigger` as `application/x-www-form-urlencoded` with `id={code}&text={text}`: the code
//! travels only in the form body, never in a URL that a proxy or an error could log. Answers are plain
//! text, classified as [`ChannelKind::Miaotixing`] (body exactly `完成` is ACCEPTED, a documented refusal
//! phrase is REJECTED, anything else unknown). The text is the privacy-safe one
//! ([`crate::config::MIAOTIXING_DEFAULT_TEXT`] unless configured), never the body.
//!
//! Every call opens a fresh connection: an unknown outcome is terminal here, and a pooled connection
//! the server closed while idle would break after the request was written and park a task that was
//! never sent.

use std::fmt;

use async_trait::async_trait;
use herald_domain::classify::{classify_send, Classified};
use herald_domain::{ChannelKind, ChannelName, ChannelRules};
use herald_ports::{Channel, OutboundMessage};
use reqwest::Url;
use secrecy::ExposeSecret;

use super::{no_query, send_classified, ChannelBase};
use crate::config::{ChannelConfig, ConfigError};
use crate::http::{endpoint, Connections, HttpTransport};

/// One configured Miaotixing channel.
pub struct MiaotixingChannel {
    base: ChannelBase,
    transport: HttpTransport,
    trigger_url: Url,
}

impl MiaotixingChannel {
    /// Validates `config` (of kind `miaotixing`) and builds the channel's client.
    ///
    /// # Errors
    /// An invalid setting, naming its key.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        let base = ChannelBase::new(config, ChannelKind::Miaotixing)?;
        let trigger_url = endpoint(config, "/trigger")?;
        let transport = HttpTransport::new(config, Connections::FreshPerCall)?;
        Ok(MiaotixingChannel { base, transport, trigger_url })
    }
}

#[async_trait]
impl Channel for MiaotixingChannel {
    fn name(&self) -> &ChannelName {
        self.base.name()
    }

    fn rules(&self) -> ChannelRules {
        self.base.rules()
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.base.outbound_text(body, digest_count)
    }

    /// Any text: Miaotixing judges its codes itself (a wrong one is refused, `参数格式有误`).
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn send(&self, message: &OutboundMessage) -> Classified {
        let form = [("id", message.destination.expose_secret()), ("text", message.text.as_str())];
        let wire = self.transport.call(self.transport.post(&self.trigger_url).form(&form)).await;
        send_classified(classify_send(ChannelKind::Miaotixing, self.base.refusal_5xx(), wire.reply()))
    }

    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn query(&self, _reference: &str) -> Classified {
        no_query()
    }
}

impl fmt::Debug for MiaotixingChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, "MiaotixingChannel", self.transport.host())
    }
}
