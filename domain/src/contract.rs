//! What a channel promises (SPEC §9): whether a resend with the same key is safe, whether an outcome can
//! be looked up, and what a refusal proves. Every decision about an uncertain attempt follows from it.

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// The three kinds of channel adapter Herald ships (SPEC §12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// HTTP webhook honouring `Idempotency-Key`.
    Webhook,
    /// SMS-like gateway that can be queried by reference.
    Queryable,
    /// Miaotixing: no key, no query.
    Miaotixing,
}

/// How an uncertain attempt can be resolved automatically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Capability {
    /// A resend with the same idempotency key is recognised and not sent again.
    Idempotent,
    /// The outcome can be looked up by reference.
    Queryable { consistency: QueryConsistency },
    /// Neither: an uncertain attempt can only be settled by a human.
    Neither,
}

impl Capability {
    /// The capability that goes with an adapter kind.
    #[must_use]
    pub fn of(kind: ChannelKind, consistency: QueryConsistency) -> Capability {
        match kind {
            ChannelKind::Webhook => Capability::Idempotent,
            ChannelKind::Queryable => Capability::Queryable { consistency },
            ChannelKind::Miaotixing => Capability::Neither,
        }
    }
}

/// When a "not found" answer to a query can be believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QueryConsistency {
    /// An accepted request is visible to queries at once.
    Immediate,
    /// An accepted request may take up to this long to become visible.
    After(Millis),
}

/// What a 5xx or 429 answer proves for this channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalProof {
    /// The contract promises such refusals happen before acceptance: safe to retry.
    BeforeAcceptance,
    /// No such promise: the request may have been accepted; treat as unknown.
    Unknown,
}

/// Resend policy. `Unsafe` resends blindly; it exists only for the negative control NC2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    #[default]
    Safe,
    Unsafe,
}

/// The declared contract of one configured channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelContract {
    pub kind: ChannelKind,
    pub capability: Capability,
    pub refusal_5xx: RefusalProof,
}

impl ChannelContract {
    #[must_use]
    pub fn new(kind: ChannelKind, refusal_5xx: RefusalProof, consistency: QueryConsistency) -> Self {
        ChannelContract { kind, capability: Capability::of(kind, consistency), refusal_5xx }
    }
}

/// Everything the claim and finish decisions need to know about one configured channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRules {
    pub contract: ChannelContract,
    /// The channel's attempt budget and backoff; a notification's own `max_attempts` overrides the budget.
    pub retry: crate::retry::RetryPolicy,
    pub policy: Policy,
    /// The adapter's client timeout: a call ends within it. A call may only start while it can still
    /// end, and be finished, before the lease does (SPEC §4; see `claim::call_fits_lease`).
    pub client_timeout: Millis,
    /// Global egress interval: minimum time between two actual calls, across all workers (SPEC §7).
    pub min_interval: Millis,
    /// How late after its claim's `now` a holder may still use its egress slot; reservations are spaced
    /// `min_interval + egress_guard` apart so actual calls keep `min_interval` (see `egress`).
    pub egress_guard: Millis,
    /// Instant prompts per rolling window before events are merged into a digest.
    pub digest: Option<crate::digest::DigestRule>,
}
