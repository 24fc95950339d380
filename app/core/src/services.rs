//! [`Services`]: every port the core drives, in one value — the store's roles, the preferences, the
//! sessions, the channel registry, the destination cipher, the clock — and the configured channel table.
//! Whoever embeds the core builds it once, from its own adapters ([`Services::over`] takes one store that
//! plays every role), and everything that runs on the ports is made from it: workers ([`Services::worker`])
//! and the use cases of [`crate::usecases`] and [`crate::sessions`], called by every front end.

use std::sync::Arc;

use herald_domain::{ChannelName, TestSendQuota};
use herald_ports::{
    AuditStore, ChannelRegistry, ChannelTable, Clock, DeliveryStore, DestinationCipher, EgressStore, InboxStore,
    LifecycleStore, PreferenceStore, ReadModels, ReviewStore, SessionStore, StatusEventStore, SubmissionStore,
};

use crate::user_keys::UserKeys;
use crate::worker::{Worker, WorkerConfig};

/// The ports of one Herald process, each wired to its adapter. Cheap to clone: every part is shared.
#[derive(Clone)]
pub struct Services {
    pub submissions: Arc<dyn SubmissionStore>,
    /// Claims and finishes: the workers'.
    pub delivery: Arc<dyn DeliveryStore>,
    /// The test send's quota and egress slot.
    pub egress: Arc<dyn EgressStore>,
    pub review: Arc<dyn ReviewStore>,
    pub inbox: Arc<dyn InboxStore>,
    pub reads: Arc<dyn ReadModels>,
    /// Erasure of a user, retention, export (SPEC §13).
    pub lifecycle: Arc<dyn LifecycleStore>,
    pub prefs: Arc<dyn PreferenceStore>,
    /// The console's sessions and sign-in links.
    pub sessions: Arc<dyn SessionStore>,
    /// The status events' outbox: the console's count and list of parked events.
    pub status: Arc<dyn StatusEventStore>,
    /// The audit trail.
    pub audit: Arc<dyn AuditStore>,
    pub registry: Arc<dyn ChannelRegistry>,
    pub cipher: Arc<dyn DestinationCipher>,
    pub clock: Arc<dyn Clock>,
    /// The configured channels with their rules, in configuration order.
    pub channels: Arc<ChannelTable>,
    /// Test sends allowed per (user, channel).
    pub test_send_quota: TestSendQuota,
    /// Console sign-in with the identity provider (`[operators.oidc]`), when configured.
    pub oidc: Option<Arc<crate::identity::OidcSignIn>>,
    /// The users' data keys and their vault, when one is configured: the erasure destroys the user's key
    /// first. `None` (the default): no vault.
    pub user_keys: Option<UserKeys>,
}

impl Services {
    /// Services over a store that plays every store role (PostgreSQL: `herald_ports::prelude`), a registry,
    /// a cipher and a clock. The channel table is the registry's, in its order.
    pub fn over<S>(
        store: Arc<S>,
        registry: Arc<dyn ChannelRegistry>,
        cipher: Arc<dyn DestinationCipher>,
        clock: Arc<dyn Clock>,
    ) -> Services
    where
        S: SubmissionStore
            + DeliveryStore
            + EgressStore
            + ReviewStore
            + InboxStore
            + ReadModels
            + LifecycleStore
            + PreferenceStore
            + SessionStore
            + StatusEventStore
            + AuditStore
            + 'static,
    {
        let channels = channel_table(registry.as_ref());
        Services {
            submissions: store.clone(),
            delivery: store.clone(),
            egress: store.clone(),
            review: store.clone(),
            inbox: store.clone(),
            reads: store.clone(),
            lifecycle: store.clone(),
            prefs: store.clone(),
            sessions: store.clone(),
            status: store.clone(),
            audit: store,
            registry,
            cipher,
            clock,
            channels: Arc::new(channels),
            test_send_quota: TestSendQuota::default(),
            oidc: None,
            user_keys: None,
        }
    }

    /// With the users' data keys and their vault.
    #[must_use]
    pub fn with_user_keys(mut self, keys: UserKeys) -> Services {
        self.user_keys = Some(keys);
        self
    }

    /// With another test-send quota (`[test_send]`).
    #[must_use]
    pub fn with_test_send_quota(mut self, quota: TestSendQuota) -> Services {
        self.test_send_quota = quota;
        self
    }

    /// With console sign-in through this identity provider.
    #[must_use]
    pub fn with_oidc(mut self, oidc: crate::identity::OidcSignIn) -> Services {
        self.oidc = Some(Arc::new(oidc));
        self
    }

    /// Replaces the delivery store (claims and finishes), keeping everything else: tests that wrap it to
    /// inject faults.
    #[must_use]
    pub fn with_delivery(mut self, delivery: Arc<dyn DeliveryStore>) -> Services {
        self.delivery = delivery;
        self
    }

    /// A worker over these services.
    #[must_use]
    pub fn worker(&self, config: WorkerConfig) -> Worker {
        Worker::new(
            Arc::clone(&self.delivery),
            Arc::clone(&self.registry),
            Arc::clone(&self.cipher),
            Arc::clone(&self.clock),
            config,
        )
        .with_user_keys(self.user_keys.clone())
    }
}

/// The channels of a registry with their rules, in the registry's order.
#[must_use]
pub fn channel_table(registry: &dyn ChannelRegistry) -> ChannelTable {
    ChannelTable(
        registry
            .names()
            .into_iter()
            .filter_map(|name: ChannelName| registry.get(&name).map(|channel| (name, channel.rules())))
            .collect(),
    )
}
