//! The `herald` service: worker cycles, HTTP API, configuration and command line, wired to the
//! PostgreSQL store and the channel adapters.

pub mod api;
pub mod cli;
pub mod compose;
pub mod config;
pub mod console;
pub mod finisher;
pub mod init;
pub mod metrics;
pub mod names;
pub mod service;
pub mod sessions;
pub mod usecases;
pub mod wakeups;
pub mod worker;

/// Fixtures shared by the unit tests of this crate.
#[cfg(test)]
pub(crate) mod test_support {
    use herald_domain::RetryPolicy;
    use herald_domain::{ChannelContract, ChannelKind, ChannelRules, Millis, Policy, QueryConsistency, RefusalProof};

    /// A webhook channel with the defaults: 3 attempts, 5 s client timeout, no interval, no digest.
    pub(crate) fn webhook_rules() -> ChannelRules {
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
}
