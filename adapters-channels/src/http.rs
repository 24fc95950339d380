//! The HTTP plumbing every HTTP channel kind shares (SPEC §9, §12): one `reqwest` client per configured
//! channel, the mapping of transport failures, the capped body read, and `Retry-After`. What goes on
//! the wire and what the answer means are the kind modules' business ([`crate::kinds`]).
//!
//! An adapter only reports what happened on the wire and leaves the meaning to
//! [`herald_domain::classify`]. The one judgement made here is how a transport failure maps to a
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
//! Redirects are never followed (a redirect is an answer we do not understand, not something to follow
//! with the destination in the body — nor a way around the egress guard) and no proxy from the
//! environment is used (it would see destinations). A transport for destinations a user controls
//! ([`HttpTransport::guarded`]) resolves names only through the egress guard (`crate::egress`).
//!
//! Nothing here formats a `reqwest::Error`: its `Display` names the URL, and details are fixed words
//! from the classifier. The destination exists only inside the request body a kind module builds.

use std::time::Duration;

use herald_domain::classify::{retry_after_seconds, Reply};
use herald_domain::Timestamp;
use reqwest::header::{CONTENT_LENGTH, DATE, RETRY_AFTER};
use reqwest::{Client, RequestBuilder, Response, Url};

use crate::config::{ChannelConfig, ConfigError};

/// Whether idle connections are kept for the next call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connections {
    /// Reuse idle connections (reqwest's default pool).
    Pooled,
    /// A fresh connection per call: for a kind whose unknown outcome is terminal, where a pooled
    /// connection the server closed while idle would break after the request was written.
    FreshPerCall,
}

/// One configured channel's HTTP client and body cap.
///
/// Cheap to share behind an `Arc`: the `reqwest::Client` inside pools connections for every caller.
pub(crate) struct HttpTransport {
    client: Client,
    max_response_bytes: usize,
    /// Only the host, for `Debug`: a webhook URL's path can itself be a credential.
    host: String,
}

/// `{url}{path}`: the channel's base URL with a kind's path appended.
///
/// # Errors
/// `channel.<name>.url` when the result is not a URL (the message never repeats the value).
pub(crate) fn endpoint(config: &ChannelConfig, path: &str) -> Result<Url, ConfigError> {
    Url::parse(&format!("{}{path}", config.url.trim_end_matches('/')))
        .map_err(|_| ConfigError::new(&config.name, "url", "is not a valid URL"))
}

/// One path of the service at a channel's `url` and the client that calls it: all an HTTP kind that
/// sends to the operator's own service holds (webhook, queryable, Miaotixing), built once here.
pub(crate) struct Endpoint {
    transport: HttpTransport,
    url: Url,
}

impl Endpoint {
    /// `{url}{path}` of a validated `config`, and its client.
    ///
    /// # Errors
    /// As [`endpoint`] and [`HttpTransport::new`].
    pub(crate) fn new(config: &ChannelConfig, path: &str, connections: Connections) -> Result<Self, ConfigError> {
        let url = endpoint(config, path)?;
        Ok(Endpoint { transport: HttpTransport::new(config, connections)?, url })
    }

    /// The host of the channel's URL, the only part of it that `Debug` output may show.
    pub(crate) fn host(&self) -> &str {
        self.transport.host()
    }

    /// A `POST` to the endpoint.
    pub(crate) fn post(&self) -> RequestBuilder {
        self.transport.post(&self.url)
    }

    /// A `GET` of the endpoint.
    pub(crate) fn get(&self) -> RequestBuilder {
        self.transport.get(&self.url)
    }

    /// Sends `request` and reads the answer, as [`HttpTransport::call`].
    pub(crate) async fn call(&self, request: RequestBuilder) -> Wire {
        self.transport.call(request).await
    }
}

impl HttpTransport {
    /// The client of a validated `config`: its timeouts, no proxy, no redirects.
    ///
    /// # Errors
    /// A URL without a host, or a client that cannot be built.
    pub(crate) fn new(config: &ChannelConfig, connections: Connections) -> Result<Self, ConfigError> {
        Self::build(config, connections, None)
    }

    /// As [`HttpTransport::new`], resolving names only through `guard` (`crate::egress`): the client
    /// connects to exactly the addresses the guard checked. For destinations a user controls.
    ///
    /// # Errors
    /// As [`HttpTransport::new`].
    pub(crate) fn guarded(
        config: &ChannelConfig,
        connections: Connections,
        guard: &crate::egress::Guard,
    ) -> Result<Self, ConfigError> {
        Self::build(config, connections, Some(guard.resolver()))
    }

    fn build(
        config: &ChannelConfig,
        connections: Connections,
        resolver: Option<std::sync::Arc<crate::egress::GuardedResolver>>,
    ) -> Result<Self, ConfigError> {
        let name = config.name.as_str();
        let host = endpoint(config, "")?.host_str().unwrap_or_default().to_owned();
        let mut builder = Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis((config.timeout_ms / 2).max(1)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")));
        if connections == Connections::FreshPerCall {
            builder = builder.pool_max_idle_per_host(0);
        }
        if let Some(resolver) = resolver {
            builder = builder.dns_resolver(resolver);
        }
        let client =
            builder.build().map_err(|_| ConfigError::new(name, "kind", "the HTTP client could not be built"))?;
        Ok(HttpTransport { client, max_response_bytes: config.max_response_bytes(), host })
    }

    /// The host of the channel's URL, the only part of it that `Debug` output may show.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    pub(crate) fn post(&self, url: &Url) -> RequestBuilder {
        self.client.post(url.clone())
    }

    pub(crate) fn get(&self, url: &Url) -> RequestBuilder {
        self.client.get(url.clone())
    }

    /// Sends `request` and reads the answer: never fails, every failure is a [`Reply`].
    pub(crate) async fn call(&self, request: RequestBuilder) -> Wire {
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

/// What came back from one call, owned so the body can be borrowed into a [`Reply`].
pub(crate) enum Wire {
    Answer {
        status: u16,
        /// Empty when the body was larger than the cap or not UTF-8: for a 2xx that makes the
        /// outcome unknown, other statuses are classified on the status alone.
        body: String,
        /// `Retry-After` as delta-seconds, whichever form the channel sent.
        retry_after: Option<String>,
    },
    Failed(Reply<'static>),
}

impl Wire {
    /// What the domain's classification reads.
    pub(crate) fn reply(&self) -> Reply<'_> {
        match self {
            Wire::Answer { status, body, retry_after } => {
                Reply::Response { status: *status, body, retry_after: retry_after.as_deref() }
            }
            Wire::Failed(reply) => *reply,
        }
    }
}

/// The mapping of the module documentation (also for Web Push, which reads a header of the answer and
/// so sends by itself). Order matters: a connect timeout is both `is_connect()` and `is_timeout()`, and it
/// never wrote the request.
pub(crate) fn failure(err: &reqwest::Error) -> Reply<'static> {
    if err.is_connect() || err.is_builder() {
        Reply::NotSent
    } else if err.is_timeout() {
        Reply::TimedOut
    } else {
        Reply::Broken
    }
}

/// This machine's wall clock, only for reading an HTTP-date `Retry-After` sent without a `Date`.
pub(crate) fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
}
