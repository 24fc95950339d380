//! `kind = "miaotixing"` (SPEC §9, §12): the public Miaotixing service, which has neither idempotency
//! nor a query, so an unknown outcome is parked for a human.
//!
//! `POST {url}/trigger` as `application/x-www-form-urlencoded` with `id={code}&text={text}`: the code
//! travels only in the form body, never in a URL that a proxy or an error could log. Answers are plain
//! text, classified as [`ChannelKind::Miaotixing`] (body exactly `完成` is ACCEPTED, a documented refusal
//! phrase is REJECTED, anything else unknown). The text is the privacy-safe one
//! ([`MIAOTIXING_DEFAULT_TEXT`] unless configured), never the body.
//!
//! Every call opens a fresh connection: an unknown outcome is terminal here, and a pooled connection
//! the server closed while idle would break after the request was written and park a task that was
//! never sent.

use async_trait::async_trait;
use herald_domain::classify::{classify_send, Classified};
use herald_domain::ChannelKind;
use herald_ports::OutboundMessage;
use secrecy::ExposeSecret;

use super::{ChannelBase, Kind, KindChannel, NoSettings};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::http::{Connections, Endpoint};

/// Miaotixing's documentation asks for at least 10 s between calls (SPEC §12).
pub const MIAOTIXING_MIN_INTERVAL_MS: u64 = 10_000;
/// What Miaotixing users see when no `text` is configured: the body stays in the inbox (SPEC §8).
pub const MIAOTIXING_DEFAULT_TEXT: &str = "You have a new update — open the app to view it.";

/// One configured Miaotixing channel.
pub type MiaotixingChannel = KindChannel<Miaotixing>;

/// The Miaotixing kind's own part: its client and its `{url}/trigger`.
pub struct Miaotixing(Endpoint);

#[async_trait]
impl Kind for Miaotixing {
    const KIND: ChannelKind = ChannelKind::Miaotixing;
    const ADAPTER: &'static str = "MiaotixingChannel";
    const USES_URL: bool = true;
    type Settings = NoSettings;
    const DEFAULT_MIN_INTERVAL_MS: u64 = MIAOTIXING_MIN_INTERVAL_MS;

    fn build(config: &ChannelConfig, _settings: &NoSettings, _egress: &Egress) -> Result<Self, ConfigError> {
        Endpoint::new(config, "/trigger", Connections::FreshPerCall).map(Miaotixing)
    }

    fn default_text(_settings: &NoSettings) -> Option<&'static str> {
        Some(MIAOTIXING_DEFAULT_TEXT)
    }

    fn host(&self) -> &str {
        self.0.host()
    }

    /// Any text: Miaotixing judges its codes itself (a wrong one is refused, `参数格式有误`).
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let form = [("id", message.destination.expose_secret()), ("text", message.text.as_str())];
        let wire = self.0.call(self.0.post().form(&form)).await;
        classify_send(Self::KIND, base.refusal_5xx(), wire.reply())
    }
}
