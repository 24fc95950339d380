//! `kind = "queryable"` (SPEC §12): an SMS-like gateway that ignores idempotency keys but can be asked
//! by reference whether it accepted a message.
//!
//! `POST {url}/messages` with JSON `{"ref","to","text"}`; answers are classified as
//! [`ChannelKind::Queryable`] (a 2xx `{"id"}` is ACCEPTED — `replayed` is ignored, every acceptance is a
//! send). `GET {url}/messages?ref={ref}` looks a reference up, classified by
//! [`classify_query`] (`{"found": n}`: n ≥ 1 found, 0 not found, anything else failed).

use async_trait::async_trait;
use herald_domain::classify::{classify_query, classify_send, Classified};
use herald_domain::ChannelKind;
use herald_ports::OutboundMessage;
use secrecy::ExposeSecret;
use serde::Serialize;

use super::{ChannelBase, Kind, KindChannel, NoSettings};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::http::{Connections, Endpoint};

/// One configured queryable channel.
pub type QueryableChannel = KindChannel<Queryable>;

/// The queryable kind's own part: its client and its `{url}/messages` (`POST` sends, `GET ?ref=` queries).
pub struct Queryable(Endpoint);

/// The `POST {url}/messages` body.
#[derive(Serialize)]
struct SendBody<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    to: &'a str,
    text: &'a str,
}

#[async_trait]
impl Kind for Queryable {
    const KIND: ChannelKind = ChannelKind::Queryable;
    const ADAPTER: &'static str = "QueryableChannel";
    const USES_URL: bool = true;
    type Settings = NoSettings;

    fn build(config: &ChannelConfig, _settings: &NoSettings, _egress: &Egress) -> Result<Self, ConfigError> {
        Endpoint::new(config, "/messages", Connections::Pooled).map(Queryable)
    }

    fn host(&self) -> &str {
        self.0.host()
    }

    /// Any text: the channel is the operator's own service, which judges the destination itself.
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let body =
            SendBody { reference: &message.reference, to: message.destination.expose_secret(), text: &message.text };
        let wire = self.0.call(self.0.post().json(&body)).await;
        classify_send(Self::KIND, base.refusal_5xx(), wire.reply())
    }

    async fn query(&self, _base: &ChannelBase, reference: &str) -> Classified {
        let wire = self.0.call(self.0.get().query(&[("ref", reference)])).await;
        classify_query(wire.reply())
    }
}
