//! The HTTP channel adapters (SPEC §9, §12): webhook, queryable and Miaotixing, over one `reqwest` client
//! per configured channel.
//!
//! An adapter only reports what happened on the wire and leaves the meaning to
//! [`herald_domain::classify`]. The one judgement it makes is how a transport failure maps to a
//! [`Reply`], and that judgement errs towards "unknown": only a failure that provably happened before
//! any request byte was written is [`Reply::NotSent`], because that is the one answer that lets a
//! channel without idempotency resend.
//!
//! | `reqwest::Error` | [`Reply`] | why |
//! |---|---|---|
//! | `is_connect()` (refused, DNS, TLS handshake, and the connect timeout) | `NotSent` | the connector failed, so no request was written |
//! | `is_builder()` | `NotSent` | the request could not even be built |
//! | otherwise `is_timeout()` (total timeout, also while reading the body) | `TimedOut` | the connection existed, so the request may have been written |
//! | anything else (`is_request`, `is_body`, `is_decode`, …) | `Broken` | the connection broke after it existed |
//!
//! (`Response::chunk` reports a body that broke or stalled as a decode error, with `is_timeout()` set for
//! the stall; both come after the request was written, so the order above still decides correctly.)
//!
//! The connect timeout is half the call's `timeout_ms` so it always fires before the total timeout
//! does: with equal values the total timer (started first) would win the race and turn a connection
//! that never opened into an unknown outcome. So every timeout is unambiguous — one during connect
//! is `is_connect()`, one after it is not.
//!
//! Nothing here formats a `reqwest::Error`: its `Display` names the URL, and details are fixed words
//! from the classifier. The destination exists only inside the request body being sent.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use herald_domain::classify::{classify_query, classify_send, retry_after_seconds, Classified, Reply};
use herald_domain::{ChannelKind, ChannelName, ChannelRules, Observation, Policy, RefusalProof, Timestamp};
use herald_ports::{Channel, OutboundMessage};
use reqwest::header::{CONTENT_LENGTH, DATE, RETRY_AFTER};
use reqwest::{Client, RequestBuilder, Response, Url};
use secrecy::ExposeSecret;
use serde::Serialize;

use crate::config::{ChannelConfig, ConfigError};

/// One configured HTTP channel of any of the three kinds.
///
/// Cheap to share behind an `Arc`: the `reqwest::Client` inside pools connections for every caller.
pub struct HttpChannel {
    name: ChannelName,
    kind: ChannelKind,
    refusal_5xx: RefusalProof,
    rules: ChannelRules,
    text: Option<String>,
    max_response_bytes: usize,
    /// Only the host, for `Debug`: a webhook URL's path can itself be a credential.
    host: String,
    send_url: Url,
    /// `GET {url}/messages`, queryable channels only.
    query_url: Option<Url>,
    client: Client,
}

/// `POST {url}/send` body of a webhook.
#[derive(Serialize)]
struct WebhookSend<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    to: &'a str,
    text: &'a str,
    ttl_seconds: u64,
}

/// `POST {url}/messages` body of a queryable channel.
#[derive(Serialize)]
struct QueryableSend<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    to: &'a str,
    text: &'a str,
}

/// What came back from one call, owned so the body can be borrowed into a [`Reply`].
enum Wire {
    Answer {
        status: u16,
        /// Empty when the body was larger than the cap or not UTF-8: for a 2xx that makes the
        /// outcome unknown, other statuses are classified on the status alone.
        body: String,
        retry_after: Option<String>,
    },
    Failed(Reply<'static>),
}

impl Wire {
    fn reply(&self) -> Reply<'_> {
        match self {
            Wire::Answer { status, body, retry_after } => {
                Reply::Response { status: *status, body, retry_after: retry_after.as_deref() }
            }
            Wire::Failed(reply) => *reply,
        }
    }
}

/// The mapping of the module documentation. Order matters: a connect timeout is both
/// `is_connect()` and `is_timeout()`, and it never wrote the request.
fn failure(err: &reqwest::Error) -> Reply<'static> {
    if err.is_connect() || err.is_builder() {
        Reply::NotSent
    } else if err.is_timeout() {
        Reply::TimedOut
    } else {
        Reply::Broken
    }
}

/// This machine's wall clock, only for reading an HTTP-date `Retry-After` sent without a `Date`.
fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
}

fn endpoint(base: &str, path: &str, name: &str) -> Result<Url, ConfigError> {
    Url::parse(&format!("{}{path}", base.trim_end_matches('/')))
        .map_err(|_| ConfigError::new(name, "url", "is not a valid URL"))
}

impl HttpChannel {
    /// Validates `config` and builds the channel's client.
    ///
    /// # Errors
    /// An invalid setting (see [`ChannelConfig::validate`]), or a client that cannot be built.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let name = config.name.as_str();
        let (send_path, query_path) = match config.kind {
            ChannelKind::Webhook => ("/send", None),
            ChannelKind::Queryable => ("/messages", Some("/messages")),
            ChannelKind::Miaotixing => ("/trigger", None),
        };
        let send_url = endpoint(&config.url, send_path, name)?;
        let query_url = query_path.map(|path| endpoint(&config.url, path, name)).transpose()?;
        let host = send_url.host_str().unwrap_or_default().to_owned();

        let mut builder = Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis((config.timeout_ms / 2).max(1)))
            // A redirect is an answer we do not understand (unknown), not something to follow with
            // the destination in the body; and a proxy from the environment would see destinations.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")));
        if config.kind == ChannelKind::Miaotixing {
            // An unknown outcome is terminal for Miaotixing, so it gets a fresh connection per call:
            // a pooled one the server closed while idle would break after the request was written
            // and park a task that was never sent.
            builder = builder.pool_max_idle_per_host(0);
        }
        let client =
            builder.build().map_err(|_| ConfigError::new(name, "kind", "the HTTP client could not be built"))?;

        Ok(HttpChannel {
            name: ChannelName::new(name),
            kind: config.kind,
            refusal_5xx: config.refusal_5xx,
            rules: config.rules(),
            text: config.text().map(str::to_owned),
            max_response_bytes: config.max_response_bytes(),
            host,
            send_url,
            query_url,
            client,
        })
    }

    /// Replaces the resend policy. Configuration cannot reach this: it exists for the negative
    /// control NC2, which must show that a blind resend really prompts a user twice.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.rules.policy = policy;
        self
    }

    #[must_use]
    pub fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// The request of one send in the channel's wire format (SPEC §12).
    fn send_request(&self, message: &OutboundMessage) -> RequestBuilder {
        let to = message.destination.expose_secret();
        let request = self.client.post(self.send_url.clone());
        match self.kind {
            ChannelKind::Webhook => {
                request.header("Idempotency-Key", message.idempotency_key.as_str()).json(&WebhookSend {
                    reference: &message.reference,
                    to,
                    text: &message.text,
                    ttl_seconds: message.ttl_seconds,
                })
            }
            ChannelKind::Queryable => {
                request.json(&QueryableSend { reference: &message.reference, to, text: &message.text })
            }
            // A form body, so the code never appears in a URL that a proxy or error could log.
            ChannelKind::Miaotixing => request.form(&[("id", to), ("text", message.text.as_str())]),
        }
    }

    async fn call(&self, request: RequestBuilder) -> Wire {
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(err) => return Wire::Failed(failure(&err)),
        };
        let status = response.status().as_u16();
        // An HTTP-date is turned into seconds here, where a clock may be read: against the answer's own
        // `Date` when it has one, else this machine's wall clock at receipt.
        let headers = response.headers();
        let date = headers.get(DATE).and_then(|v| v.to_str().ok());
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|value| retry_after_seconds(value, date, wall_clock()))
            .map(|seconds| seconds.to_string());
        match self.read_body(&mut response).await {
            Ok(body) => Wire::Answer { status, body: body.unwrap_or_default(), retry_after },
            Err(err) => Wire::Failed(failure(&err)),
        }
    }

    /// Reads at most `max_response_bytes`; `None` when the body is longer or not UTF-8. A third party
    /// that streams without end must not hold a worker or its memory.
    async fn read_body(&self, response: &mut Response) -> Result<Option<String>, reqwest::Error> {
        let limit = self.max_response_bytes;
        let declared = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|length| length > limit) {
            return Ok(None);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > limit {
                return Ok(None);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8(body).ok())
    }
}

#[async_trait]
impl Channel for HttpChannel {
    fn name(&self) -> &ChannelName {
        &self.name
    }

    fn rules(&self) -> ChannelRules {
        self.rules
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        match (digest_count, self.text.as_deref()) {
            (None, Some(text)) => text.to_owned(),
            (None, None) => body.to_owned(),
            (Some(1), Some(text)) => format!("{text} (1 update)"),
            (Some(n), Some(text)) => format!("{text} ({n} updates)"),
            (Some(1), None) => "1 new update".to_owned(),
            (Some(n), None) => format!("{n} new updates"),
        }
    }

    #[tracing::instrument(skip_all, fields(channel = %self.name))]
    async fn send(&self, message: &OutboundMessage) -> Classified {
        let wire = self.call(self.send_request(message)).await;
        let classified = classify_send(self.kind, self.refusal_5xx, wire.reply());
        tracing::debug!(outcome = ?classified.observation.outcome(), detail = %classified.detail, "send classified");
        classified
    }

    #[tracing::instrument(skip_all, fields(channel = %self.name))]
    async fn query(&self, reference: &str) -> Classified {
        let Some(url) = &self.query_url else {
            return Classified { observation: Observation::QueryFailed, detail: "channel has no query".to_owned() };
        };
        let wire = self.call(self.client.get(url.clone()).query(&[("ref", reference)])).await;
        let classified = classify_query(wire.reply());
        tracing::debug!(outcome = ?classified.observation.outcome(), detail = %classified.detail, "query classified");
        classified
    }
}

impl fmt::Debug for HttpChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpChannel")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("host", &self.host)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}
