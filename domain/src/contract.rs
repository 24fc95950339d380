//! What a channel promises (SPEC §9): whether a resend with the same key is safe, whether an outcome can
//! be looked up, and what a refusal proves. Every decision about an uncertain attempt follows from it.

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// A kind of channel adapter (`kind = "…"`, SPEC §12): its name, what it promises about an uncertain
/// attempt, and which table of [`crate::classify`] reads its answers. The kinds Herald ships are the
/// constants below; a kind of another crate declares its own with [`ChannelKind::new`] — the domain decides
/// from these three facts alone, never from a kind's name.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelKind {
    name: &'static str,
    promise: Promise,
    answers: Answers,
}

/// What a kind promises about a resend after an uncertain attempt, before the operator's opt-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Promise {
    /// A resend with the same idempotency key is recognised and not sent again.
    Idempotent,
    /// The outcome can be looked up by reference.
    Queryable,
    /// Neither; with the operator's opt-in `on_unknown` (never [`OnUnknown::Park`]), a resend that is
    /// idempotent in part.
    Neither { opt_in: Option<OnUnknown> },
}

/// Which table of [`crate::classify::classify_send`] reads a kind's HTTP answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answers {
    /// A JSON `{"id","replayed"}` acknowledgement; `replayed` counts only where the kind honours the key.
    Json { honours_key: bool },
    /// Miaotixing's plain-text phrases.
    Miaotixing,
    /// RFC 8030's statuses ([`crate::classify::classify_webpush`]).
    Webpush,
    /// Not HTTP (SMTP is read by [`crate::classify::classify_smtp`]): an HTTP status proves nothing.
    NotHttp,
}

#[allow(non_upper_case_globals)] // read like the variants of the enum this once was: `ChannelKind::Email`
impl ChannelKind {
    /// HTTP webhook honouring `Idempotency-Key`.
    pub const Webhook: ChannelKind =
        ChannelKind::new("webhook", Promise::Idempotent, Answers::Json { honours_key: true });
    /// SMS-like gateway that can be queried by reference.
    pub const Queryable: ChannelKind =
        ChannelKind::new("queryable", Promise::Queryable, Answers::Json { honours_key: false });
    /// Miaotixing: no key, no query.
    pub const Miaotixing: ChannelKind =
        ChannelKind::new("miaotixing", Promise::Neither { opt_in: None }, Answers::Miaotixing);
    /// E-mail over SMTP (RFC 5321): neither key nor query by default. A 2yz after the end of DATA makes the
    /// server responsible; no answer to the final "." leaves the outcome unknown.
    pub const Email: ChannelKind =
        ChannelKind::new("email", Promise::Neither { opt_in: Some(OnUnknown::ResendSameMessageId) }, Answers::NotHttp);
    /// Web Push (RFC 8030, 8291, 8292): neither key nor query by default. 201 means the push service accepted
    /// the message (not that it was delivered).
    pub const Webpush: ChannelKind =
        ChannelKind::new("webpush", Promise::Neither { opt_in: Some(OnUnknown::ResendSameTopic) }, Answers::Webpush);

    /// A kind named `name` (its `kind = "…"`), promising `promise`, whose answers `answers` reads.
    #[must_use]
    pub const fn new(name: &'static str, promise: Promise, answers: Answers) -> Self {
        ChannelKind { name, promise, answers }
    }

    /// The name in the configuration (`kind = "…"`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        self.name
    }

    #[must_use]
    pub const fn promise(self) -> Promise {
        self.promise
    }

    #[must_use]
    pub const fn answers(self) -> Answers {
        self.answers
    }
}

impl std::fmt::Debug for ChannelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl std::fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// As it is named in the configuration.
impl Serialize for ChannelKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name)
    }
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
        Capability::opted(kind, consistency, OnUnknown::Park)
    }

    /// The capability of a kind with the operator's `on_unknown` opt-in (see [`OnUnknown`]).
    ///
    /// | kind | `on_unknown` | capability |
    /// |---|---|---|
    /// | `webhook` | — | idempotent (`Idempotency-Key`) |
    /// | `queryable` | — | queryable |
    /// | `miaotixing` | — | neither |
    /// | `email` | `park` (default) | neither: an unknown outcome is parked for a human |
    /// | `email` | `resend_same_message_id` | idempotent *in part*: resent with the same `Message-ID` |
    /// | `webpush` | `park` (default) | neither |
    /// | `webpush` | `resend_same_topic` | idempotent *in part*: resent with the same `Topic` |
    ///
    /// An opt-in that does not belong to the kind changes nothing (configuration refuses it, see
    /// [`OnUnknown::fits`]).
    #[must_use]
    pub fn opted(kind: ChannelKind, consistency: QueryConsistency, on_unknown: OnUnknown) -> Capability {
        match kind.promise {
            Promise::Idempotent => Capability::Idempotent,
            Promise::Queryable => Capability::Queryable { consistency },
            Promise::Neither { .. } if on_unknown != OnUnknown::Park && on_unknown.fits(kind) => Capability::Idempotent,
            Promise::Neither { .. } => Capability::Neither,
        }
    }
}

/// What an operator allows for an attempt whose outcome is unknown on a channel that has neither an
/// idempotency key nor a query (SPEC §9). Both opt-ins are **partial** guarantees, which is why they are
/// opt-ins and parking is the default:
///
/// * `resend_same_message_id` (`email`): the resend carries the same `Message-ID: <ntf-{reference}@…>`.
///   Many receiving systems and mail clients collapse messages with equal Message-IDs; not all do, so a
///   user may see the message twice. It never creates a second identity.
/// * `resend_same_topic` (`webpush`): the resend carries the same `Topic`, and a push service replaces a
///   message with that topic *that is still outstanding* (RFC 8030 §5.4). A message already delivered to
///   the browser stays delivered: the user may see two.
///
/// With an opt-in the domain treats the channel as idempotent: after an unknown outcome it sends again
/// (within the budget) instead of parking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnknown {
    /// Park the task for a human (the honest default for a channel without key or query).
    #[default]
    Park,
    /// `email` only: resend with the same `Message-ID`.
    ResendSameMessageId,
    /// `webpush` only: resend with the same `Topic`.
    ResendSameTopic,
}

impl OnUnknown {
    /// Whether this setting exists for `kind`: `park` for every kind, each resend for its own kind.
    #[must_use]
    pub fn fits(self, kind: ChannelKind) -> bool {
        self == OnUnknown::Park || kind.promise == Promise::Neither { opt_in: Some(self) }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

    /// As [`ChannelContract::new`], with the operator's `on_unknown` opt-in ([`Capability::opted`]).
    #[must_use]
    pub fn opted(
        kind: ChannelKind,
        refusal_5xx: RefusalProof,
        consistency: QueryConsistency,
        on_unknown: OnUnknown,
    ) -> Self {
        ChannelContract { kind, capability: Capability::opted(kind, consistency, on_unknown), refusal_5xx }
    }
}

/// Everything the claim and finish decisions need to know about one configured channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    const C: QueryConsistency = QueryConsistency::Immediate;

    #[test]
    fn email_and_webpush_have_neither_key_nor_query_by_default() {
        assert_eq!(Capability::of(ChannelKind::Email, C), Capability::Neither);
        assert_eq!(Capability::of(ChannelKind::Webpush, C), Capability::Neither);
        assert_eq!(OnUnknown::default(), OnUnknown::Park);
    }

    #[test]
    fn email_opt_in_resends_with_the_same_message_id() {
        assert_eq!(Capability::opted(ChannelKind::Email, C, OnUnknown::ResendSameMessageId), Capability::Idempotent);
        assert_eq!(Capability::opted(ChannelKind::Email, C, OnUnknown::Park), Capability::Neither);
    }

    #[test]
    fn webpush_opt_in_resends_with_the_same_topic() {
        assert_eq!(Capability::opted(ChannelKind::Webpush, C, OnUnknown::ResendSameTopic), Capability::Idempotent);
        assert_eq!(Capability::opted(ChannelKind::Webpush, C, OnUnknown::Park), Capability::Neither);
    }

    #[test]
    fn an_opt_in_fits_only_its_own_kind() {
        assert!(OnUnknown::ResendSameMessageId.fits(ChannelKind::Email));
        assert!(!OnUnknown::ResendSameMessageId.fits(ChannelKind::Webpush));
        assert!(OnUnknown::ResendSameTopic.fits(ChannelKind::Webpush));
        assert!(!OnUnknown::ResendSameTopic.fits(ChannelKind::Miaotixing));
        assert!(!OnUnknown::ResendSameTopic.fits(ChannelKind::Email));
        for kind in [ChannelKind::Webhook, ChannelKind::Queryable, ChannelKind::Miaotixing] {
            assert!(OnUnknown::Park.fits(kind));
            assert_eq!(Capability::opted(kind, C, OnUnknown::ResendSameTopic), Capability::of(kind, C), "{kind:?}");
        }
    }

    #[test]
    fn kinds_are_named_as_in_the_configuration() {
        let names: Vec<String> = [ChannelKind::Email, ChannelKind::Webpush]
            .iter()
            .map(|kind| serde_json::to_string(kind).expect("serialises"))
            .collect();
        assert_eq!(names, [r#""email""#, r#""webpush""#]);
    }
}
