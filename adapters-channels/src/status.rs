//! The status events' HTTP sink (issue 46): posts each event to its subscription's endpoint as JSON,
//! signed per the Standard Webhooks specification (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">` under the subscription's `whsec_`
//! secret). The endpoint is an operator's, but it goes through the egress guard like every destination:
//! its URL is checked before every post and its name is resolved only through the guard.
//!
//! The body (`StatusPayload`): `{"type": "notification.<kind>", "timestamp": <occurred_at>, "data": {...}}`
//! with the notification's public id, the caller's event key, the channel, the attempt, the sequence,
//! `occurred_at`, and per kind the reason, decision or channel message id; the notification's body only
//! for a subscription with `include_body`. Never a destination.

use std::collections::HashMap;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use herald_domain::classify::retry_after_seconds;
use herald_domain::{Millis, PostResult, StatusKind, Timestamp};
use herald_ports::{StatusEvent, StatusSink};
use hmac::{Hmac, Mac};
use reqwest::header::{CONTENT_TYPE, DATE, RETRY_AFTER};
use reqwest::Client;
pub use reqwest::Url;
use secrecy::{ExposeSecret, SecretBox};
use serde::Serialize;
use sha2::Sha256;

use crate::egress::{refusal_in, Egress, Guard};

/// One subscription's endpoint, as configured.
pub struct StatusEndpoint {
    pub name: String,
    pub url: Url,
    /// The `whsec_…` secret, as the configuration's file holds it.
    pub secret: SecretBox<String>,
    pub timeout_ms: u64,
    /// For a local receiver (tests, the soak): refused by `herald serve`/`worker` without `--stand-ins`.
    pub allow_loopback: bool,
}

/// The key of a `whsec_` secret: the base64 after the prefix, decoded.
///
/// # Errors
/// What is wrong with it, never the secret itself.
pub fn signing_key(secret: &str) -> Result<SecretBox<Vec<u8>>, &'static str> {
    let encoded = secret.trim().strip_prefix("whsec_").ok_or("must start with `whsec_`")?;
    let key = STANDARD.decode(encoded).map_err(|_| "must be `whsec_` followed by base64")?;
    if key.len() < 24 {
        return Err("must hold at least 24 bytes of key (`herald init` makes 32)");
    }
    Ok(SecretBox::new(Box::new(key)))
}

/// The `webhook-signature` value of `body` under `key`.
#[must_use]
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[derive(Serialize)]
struct Payload<'a> {
    #[serde(rename = "type")]
    kind: String,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    notification_id: String,
    event_key: &'a str,
    channel: &'a str,
    attempt: u32,
    sequence: i64,
    occurred_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel_message_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
}

fn rfc3339(t: Timestamp) -> String {
    chrono::DateTime::from_timestamp_millis(t.as_millis())
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The JSON body of `event`.
#[must_use]
pub fn payload(event: &StatusEvent) -> String {
    let resolved = event.kind == StatusKind::Resolved;
    let payload = Payload {
        kind: format!("notification.{}", event.kind.as_str()),
        timestamp: rfc3339(event.occurred_at),
        data: Data {
            notification_id: event.notification.0.to_string(),
            event_key: &event.event_key,
            channel: &event.channel,
            attempt: event.attempt,
            sequence: event.sequence,
            occurred_at: rfc3339(event.occurred_at),
            reason: event.reason.as_deref().filter(|_| !resolved),
            decision: event.reason.as_deref().filter(|_| resolved),
            actor: event.actor.as_deref().filter(|_| resolved),
            channel_message_id: event.channel_message_id.as_deref(),
            body: event.body.as_deref(),
        },
    };
    serde_json::to_string(&payload).unwrap_or_default()
}

struct Endpoint {
    url: Url,
    key: SecretBox<Vec<u8>>,
    client: Client,
    guard: Guard,
}

/// Posts status events over HTTP, one client per subscription.
pub struct HttpStatusSink {
    endpoints: HashMap<String, Endpoint>,
}

impl HttpStatusSink {
    /// A sink for `endpoints`, each behind the guard of `egress`.
    ///
    /// # Errors
    /// The subscription and what is wrong with it (a secret that is no `whsec_` key, a URL the guard
    /// refuses, a client that cannot be built).
    pub fn new(endpoints: Vec<StatusEndpoint>, egress: &Egress) -> Result<HttpStatusSink, (String, String)> {
        let mut built = HashMap::new();
        for endpoint in endpoints {
            let name = endpoint.name.clone();
            let fail = |reason: String| (name.clone(), reason);
            let key = signing_key(endpoint.secret.expose_secret()).map_err(|r| fail(format!("secret {r}")))?;
            if !matches!(endpoint.url.scheme(), "http" | "https") {
                return Err(fail("url must be http or https".into()));
            }
            if endpoint.url.scheme() == "http" && !endpoint.allow_loopback {
                return Err(fail("url must be https".into()));
            }
            let guard = egress.guard(endpoint.allow_loopback);
            guard.check_url(&endpoint.url).map_err(|refused| fail(format!("url: egress guard: {refused}")))?;
            let client = Client::builder()
                .timeout(Duration::from_millis(endpoint.timeout_ms))
                .connect_timeout(Duration::from_millis((endpoint.timeout_ms / 2).max(1)))
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .dns_resolver(guard.resolver())
                .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|_| fail("the HTTP client could not be built".into()))?;
            built.insert(endpoint.name, Endpoint { url: endpoint.url, key, client, guard });
        }
        Ok(HttpStatusSink { endpoints: built })
    }
}

fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
}

fn not_taken(error: impl Into<String>) -> PostResult {
    PostResult::NotTaken { retry_after: None, error: error.into() }
}

#[async_trait::async_trait]
impl StatusSink for HttpStatusSink {
    async fn post(&self, event: &StatusEvent) -> PostResult {
        let Some(endpoint) = self.endpoints.get(&event.subscription) else {
            return not_taken("no such subscription in this process's configuration");
        };
        if let Err(refused) = endpoint.guard.check_url(&endpoint.url) {
            return not_taken(format!("egress guard: {refused}"));
        }
        let body = payload(event);
        let id = event.id.to_string();
        // The timestamp of this post, on this machine's clock, which the receiver compares with its own.
        let now = wall_clock();
        let timestamp = now.as_millis() / 1000;
        let signature = sign(endpoint.key.expose_secret(), &id, timestamp, &body);
        let request = endpoint
            .client
            .post(endpoint.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body);
        match request.send().await {
            Ok(response) if response.status().is_success() => PostResult::Taken,
            Ok(response) => {
                let headers = response.headers();
                let date = headers.get(DATE).and_then(|v| v.to_str().ok());
                let retry_after = headers
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|value| retry_after_seconds(value, date, now))
                    .map(|seconds| Millis(seconds.saturating_mul(1000)));
                PostResult::NotTaken { retry_after, error: format!("HTTP {}", response.status().as_u16()) }
            }
            Err(error) if refusal_in(&error).is_some() => {
                not_taken(format!("egress guard: {}", refusal_in(&error).map(|r| r.to_string()).unwrap_or_default()))
            }
            Err(error) if error.is_timeout() => not_taken("timed out"),
            Err(error) if error.is_connect() => not_taken("could not connect"),
            Err(_) => not_taken("the connection broke"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn the_signature_matches_the_specifications_example() {
        let key = signing_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature =
            sign(key.expose_secret(), "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, r#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_secret_without_its_prefix_or_too_short_is_refused() {
        assert!(signing_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(signing_key("whsec_not base64!").is_err());
        assert!(signing_key("whsec_c2hvcnQ=").is_err());
    }
}
