//! Fixtures for unit tests of the core and of the crates over it (feature `testing`).

use herald_domain::RetryPolicy;
use herald_domain::{ChannelContract, ChannelKind, ChannelRules, Millis, Policy, QueryConsistency, RefusalProof};

/// A webhook channel with the defaults: 3 attempts, 5 s client timeout, no interval, no digest.
#[must_use]
pub fn webhook_rules() -> ChannelRules {
    ChannelRules {
        contract: ChannelContract::new(
            ChannelKind::Webhook,
            RefusalProof::BeforeAcceptance,
            QueryConsistency::Immediate,
        ),
        retry: RetryPolicy::new(3, Millis(500), Millis(60_000)),
        policy: Policy::Safe,
        client_timeout: Millis(5_000),
        min_interval: Millis::ZERO,
        egress_guard: Millis::ZERO,
        digest: None,
    }
}
