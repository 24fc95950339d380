//! The channel port: one configured external channel, and the registry that finds it by name.
//!
//! The same registry serves the worker and the settings page's test send (SPEC §9), so both go
//! through the same adapter and the same classification.

use std::sync::Arc;

use async_trait::async_trait;
use herald_domain::classify::Classified;
use herald_domain::{ChannelName, ChannelRules, IdempotencyKey};
use secrecy::SecretString;

/// One external prompt, as handed to an adapter after the lease is held.
#[derive(Debug)]
pub struct OutboundMessage {
    /// The task reference the channel can be queried by.
    pub reference: String,
    /// Identical across every attempt of the task.
    pub idempotency_key: IdempotencyKey,
    /// Decrypted only for this call; `SecretString` keeps it out of `Debug` output.
    pub destination: SecretString,
    /// The text the third party sees (a privacy-safe template where configured).
    pub text: String,
    pub ttl_seconds: u64,
}

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait Channel: Send + Sync {
    /// The channel's configured name.
    fn name(&self) -> &ChannelName;

    /// The decision rules of the channel: contract, budget, backoff, egress interval, digest.
    fn rules(&self) -> ChannelRules;

    /// The text the third party receives for a notification body (or a digest of `digest_count`
    /// events). Channels configured with a privacy-safe `text` return it instead of the body.
    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String;

    /// Checks a destination before it is stored: what this channel would refuse to send to (not an
    /// e-mail address, not a push subscription, an endpoint on a loopback or private address, …) is
    /// refused when a user sets it, by every front end alike. MUST NOT do I/O (no name is resolved: a
    /// channel that resolves names checks their addresses again when it sends). The reason MUST NOT
    /// repeat the destination or any part of it.
    ///
    /// # Errors
    /// A short reason, in words for the user who gave the destination.
    fn check_destination(&self, destination: &str) -> Result<(), &'static str>;

    /// Sends one message. MUST NOT fail: every transport result is classified into an observation
    /// (a timeout is `TIMEOUT`, a refusal before acceptance `RETRYABLE_REJECT`, …). The detail MUST NOT
    /// contain the destination.
    async fn send(&self, message: &OutboundMessage) -> Classified;

    /// Looks a reference up. Channels without a query MUST answer `QUERY_FAILED`; the domain never asks
    /// them.
    async fn query(&self, reference: &str) -> Classified;
}

#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait ChannelRegistry: Send + Sync {
    fn get(&self, name: &ChannelName) -> Option<Arc<dyn Channel>>;

    /// Every configured channel name, in configuration order.
    fn names(&self) -> Vec<ChannelName>;
}
