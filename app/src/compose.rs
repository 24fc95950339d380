//! The composition root: the one place where Herald's ports are wired to their adapters.
//!
//! [`Services`] holds every port the application drives — the notification store, the preference store,
//! the channel registry, the destination cipher, the clock — and the configured channel table. It is
//! built once, from configuration by [`Services::from_config`] (`herald serve`, `herald worker`, the CLI's
//! use cases), or from parts a caller already has by [`Services::over`] (the demo, the tests: a database
//! they created, stand-in channels, a manual clock). Everything that runs on the ports is made from it —
//! workers ([`Services::worker`]), the HTTP API's state ([`Services::api_state`]), the use cases
//! (`crate::usecases`) — so no wiring is written twice.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use herald_domain::{ChannelName, Millis};
use herald_ports::{
    ChannelRegistry, ChannelTable, Clock, DeliveryStore, DestinationCipher, EgressStore, InboxStore, PreferenceStore,
    ReadModels, ReviewStore, SessionStore, SubmissionStore,
};
use herald_postgres::PgStore;
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::ExposeSecret as _;

use herald_domain::TestSendQuota;

use crate::api::{ApiState, Authenticator, Readiness};
use crate::config::{Config, ConfigError, WorkerSettings};
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
    pub prefs: Arc<dyn PreferenceStore>,
    /// The console's sessions and sign-in links.
    pub sessions: Arc<dyn SessionStore>,
    pub registry: Arc<dyn ChannelRegistry>,
    pub cipher: Arc<dyn DestinationCipher>,
    pub clock: Arc<dyn Clock>,
    /// The configured channels with their rules, in configuration order.
    pub channels: Arc<ChannelTable>,
    /// Test sends allowed per (user, channel).
    pub test_send_quota: TestSendQuota,
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
            + PreferenceStore
            + SessionStore
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
            prefs: store.clone(),
            sessions: store,
            registry,
            cipher,
            clock,
            channels: Arc::new(channels),
            test_send_quota: TestSendQuota::default(),
        }
    }

    /// With another test-send quota (`[test_send]`).
    #[must_use]
    pub fn with_test_send_quota(mut self, quota: TestSendQuota) -> Services {
        self.test_send_quota = quota;
        self
    }

    /// Replaces the delivery store (claims and finishes), keeping everything else: tests that wrap it to
    /// inject faults.
    #[must_use]
    pub fn with_delivery(mut self, delivery: Arc<dyn DeliveryStore>) -> Services {
        self.delivery = delivery;
        self
    }

    /// The services `command` needs, from configuration: the database (with a pool of its own for
    /// finishes when `workers` run in this process), the channels, the keys, the database clock. Returns
    /// the PostgreSQL store too, for what only it can do (migrations, wake-ups, readiness).
    ///
    /// # Errors
    /// A [`ConfigError`] for missing or invalid configuration; a connection failure.
    pub async fn from_config(config: &Config, command: &str, workers: bool) -> anyhow::Result<(PgStore, Services)> {
        let keyring = config.require_keys(command)?.keyring()?;
        let registry = herald_channels::registry::HttpChannelRegistry::from_configs_with_egress(
            &config.channels,
            &config.egress.egress(),
        )
        .map_err(|error| ConfigError::new(error.key, error.reason))?;
        // The workers' claims get a pool of their own: `herald serve` gives its API another one
        // ([`Services::on_store`]), so requests never take the connections deliveries need.
        let size = if workers { config.database.worker_max_connections } else { config.database.max_connections };
        let mut store = connect_sized(config, command, size).await?;
        if workers {
            // Finishes get a pool of their own, one connection per flusher and one for give-backs: the
            // write that records what a channel answered never queues behind claims or API requests
            // (SPEC §5). Its connections plan each statement once (`Planning::Generic`).
            let url = config.require_database_url(command)?;
            let size = u32::try_from(crate::finisher::FLUSHERS + 1).unwrap_or(u32::MAX);
            store = store.with_finish_pool(url.expose_secret(), size).await.context("database.url")?;
        }
        let clock: Arc<dyn Clock> = Arc::new(store.clock());
        let services = Services::over(Arc::new(store.clone()), Arc::new(registry), Arc::new(keyring), clock)
            .with_test_send_quota(config.test_send);
        Ok((store, services))
    }

    /// The same services over another PostgreSQL store (a pool of its own): `herald serve` gives its API
    /// one of `database.api_max_connections`, apart from the workers'.
    #[must_use]
    pub fn on_store(&self, store: PgStore) -> Services {
        let clock: Arc<dyn Clock> = Arc::new(store.clock());
        Services {
            clock,
            ..Services::over(
                Arc::new(store),
                Arc::clone(&self.registry),
                Arc::clone(&self.cipher),
                Arc::clone(&self.clock),
            )
            .with_test_send_quota(self.test_send_quota)
        }
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
    }

    /// The `i`-th worker of a process configured by `settings`, named `{prefix}-{pid}-{i}`.
    #[must_use]
    pub fn configured_worker(&self, settings: &WorkerSettings, prefix: &str, i: u32) -> Worker {
        self.worker(WorkerConfig {
            id: format!("{prefix}-{}-{i}", std::process::id()),
            lease: Millis(settings.lease_ms),
            batch: settings.batch,
            idle_poll: Duration::from_millis(settings.poll_ms),
        })
    }

    /// The HTTP API's state over these services.
    #[must_use]
    pub fn api_state(
        &self,
        auth: Arc<Authenticator>,
        readiness: Arc<dyn Readiness>,
        metrics: Option<PrometheusHandle>,
        body_limit: usize,
    ) -> ApiState {
        ApiState {
            services: self.clone(),
            auth,
            console: crate::api::ConsoleSettings::default(),
            readiness,
            metrics,
            body_limit,
        }
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

/// The PostgreSQL store of `database.url`, for `command`.
///
/// # Errors
/// No `database.url`, or no connection.
pub async fn connect(config: &Config, command: &str) -> anyhow::Result<PgStore> {
    connect_sized(config, command, config.database.max_connections).await
}

/// As [`connect`], with a pool of `max_connections`.
///
/// # Errors
/// No `database.url`, or no connection.
pub async fn connect_sized(config: &Config, command: &str, max_connections: u32) -> anyhow::Result<PgStore> {
    let url = config.require_database_url(command)?;
    // The store's message names the server without its password, the cause and the usual fix.
    PgStore::connect(url.expose_secret(), max_connections).await.map_err(|error| match error {
        herald_ports::StoreError::Unavailable(cause) | herald_ports::StoreError::Unknown(cause) => {
            cause.context("database.url")
        }
    })
}

/// PostgreSQL's own databases, which hold no application's tables: `postgres` is where administrators
/// and tools connect to create the others.
pub const MAINTENANCE_DATABASES: [&str; 3] = ["postgres", "template0", "template1"];

/// Makes the database of `database.url` ready for `command` to migrate: refuses one of
/// [`MAINTENANCE_DATABASES`] unless `force`, and creates the database when it does not exist and the
/// role may create databases. Answers what it created, if anything, for the command to say.
///
/// # Errors
/// A [`ConfigError`] for a maintenance database or a URL that is not PostgreSQL's; a connection failure,
/// or why the database cannot be created with the command that creates it.
pub async fn prepare_migration(config: &Config, command: &str, force: bool) -> anyhow::Result<Option<String>> {
    let url = config.require_database_url(command)?;
    let database = herald_postgres::database_of(url.expose_secret()).map_err(|error| match error {
        herald_ports::StoreError::Unavailable(cause) | herald_ports::StoreError::Unknown(cause) => {
            cause.context("database.url")
        }
    })?;
    if !force && MAINTENANCE_DATABASES.contains(&database.as_str()) {
        let how = if command == "migrate" {
            "`herald migrate --force` migrates into it anyway".to_owned()
        } else {
            format!("to use it anyway, run `herald migrate --force` once, then `herald {command}` without --migrate")
        };
        return Err(ConfigError::new(
            "database.url",
            format!(
                "names `{database}`, a database PostgreSQL keeps for itself: Herald's tables belong in a database \
                 of their own, e.g. …/herald (`herald migrate` creates it when the role may); {how}"
            ),
        )
        .into());
    }
    match herald_postgres::create_database_if_missing(url.expose_secret()).await {
        Ok(herald_postgres::DatabaseReady::Existed) => Ok(None),
        Ok(herald_postgres::DatabaseReady::Created(what)) => Ok(Some(what)),
        Err(herald_ports::StoreError::Unavailable(cause) | herald_ports::StoreError::Unknown(cause)) => {
            Err(cause.context("database.url"))
        }
    }
}

/// `/readyz` of `herald serve`: the database answers and every migration is applied. Public so the
/// black-box API tests judge readiness exactly as the service does.
pub struct PgReadiness(pub PgStore);

#[async_trait::async_trait]
impl Readiness for PgReadiness {
    async fn check(&self) -> Result<(), String> {
        if !self.0.ping().await {
            return Err("the database does not answer".into());
        }
        if !self.0.is_migrated().await {
            return Err("the database is not migrated (run `herald migrate`)".into());
        }
        Ok(())
    }
}
