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
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Serialize;

use super::{ChannelBase, Kind, KindChannel};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::http::{endpoint, Connections, HttpTransport};

/// One configured queryable channel.
pub type QueryableChannel = KindChannel<Queryable>;

/// The queryable kind's own part: its client and its `/messages` URL.
pub struct Queryable {
    transport: HttpTransport,
    /// `{url}/messages`: `POST` sends, `GET ?ref=` queries.
    messages_url: Url,
}

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

    fn check_config(_config: &ChannelConfig) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(config: &ChannelConfig, _egress: &Egress) -> Result<Self, ConfigError> {
        let messages_url = endpoint(config, "/messages")?;
        let transport = HttpTransport::new(config, Connections::Pooled)?;
        Ok(Queryable { transport, messages_url })
    }

    fn host(&self) -> &str {
        self.transport.host()
    }

    /// Any text: the channel is the operator's own service, which judges the destination itself.
    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let body =
            SendBody { reference: &message.reference, to: message.destination.expose_secret(), text: &message.text };
        let wire = self.transport.call(self.transport.post(&self.messages_url).json(&body)).await;
        classify_send(Self::KIND, base.refusal_5xx(), wire.reply())
    }

    async fn query(&self, _base: &ChannelBase, reference: &str) -> Classified {
        let request = self.transport.get(&self.messages_url).query(&[("ref", reference)]);
        let wire = self.transport.call(request).await;
        classify_query(wire.reply())
    }
}
