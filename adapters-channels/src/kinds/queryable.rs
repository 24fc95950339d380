//! `kind = "queryable"` (SPEC §12): an SMS-like gateway that ignores idempotency keys but can be asked
//! by reference whether it accepted a message.
//!
//! `POST {url}/messages` with JSON `{"ref","to","text"}`; answers are classified as
//! [`ChannelKind::Queryable`] (a 2xx `{"id"}` is ACCEPTED — `replayed` is ignored, every acceptance is a
//! send). `GET {url}/messages?ref={ref}` looks a reference up, classified by
//! [`classify_query`] (`{"found": n}`: n ≥ 1 found, 0 not found, anything else failed).

use std::fmt;

use async_trait::async_trait;
use herald_domain::classify::{classify_query, classify_send, Classified};
use herald_domain::{ChannelKind, ChannelName, ChannelRules};
use herald_ports::{Channel, OutboundMessage};
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Serialize;

use super::{query_classified, send_classified, ChannelBase};
use crate::config::{ChannelConfig, ConfigError};
use crate::http::{endpoint, Connections, HttpTransport};

/// One configured queryable channel.
pub struct QueryableChannel {
    base: ChannelBase,
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

impl QueryableChannel {
    /// Validates `config` (of kind `queryable`) and builds the channel's client.
    ///
    /// # Errors
    /// An invalid setting, naming its key.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        let base = ChannelBase::new(config, ChannelKind::Queryable)?;
        let messages_url = endpoint(config, "/messages")?;
        let transport = HttpTransport::new(config, Connections::Pooled)?;
        Ok(QueryableChannel { base, transport, messages_url })
    }
}

#[async_trait]
impl Channel for QueryableChannel {
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
        let body =
            SendBody { reference: &message.reference, to: message.destination.expose_secret(), text: &message.text };
        let wire = self.transport.call(self.transport.post(&self.messages_url).json(&body)).await;
        send_classified(classify_send(ChannelKind::Queryable, self.base.refusal_5xx(), wire.reply()))
    }

    #[tracing::instrument(skip_all, fields(channel = %self.base.name()))]
    async fn query(&self, reference: &str) -> Classified {
        let request = self.transport.get(&self.messages_url).query(&[("ref", reference)]);
        let wire = self.transport.call(request).await;
        query_classified(classify_query(wire.reply()))
    }
}

impl fmt::Debug for QueryableChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.base.debug(f, "QueryableChannel", self.transport.host())
    }
}
