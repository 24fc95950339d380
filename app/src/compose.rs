//! The composition root: the one place where Herald's ports are wired to their adapters.
//!
//! [`services_from_config`] builds the core's [`Services`] from configuration — the PostgreSQL store
//! (every store role), the channel registry with the egress guard, the keyring, the database clock — for
//! `herald serve`, `herald worker` and the CLI's use cases; the demo and the tests build theirs with
//! [`Services::over`] from parts they already have (a database they created, stand-in channels, a manual
//! clock). Everything that runs on the ports is made from it — workers ([`configured_worker`]), the HTTP
//! front end's state (`herald_http::ApiState::new`), the core's use cases — so no wiring is written twice.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use herald_core::worker::{Worker, WorkerConfig};
use herald_core::Services;
use herald_domain::Millis;
use herald_http::Readiness;
use herald_ports::Clock;
use herald_postgres::PgStore;
use secrecy::ExposeSecret as _;

use crate::config::{Config, ConfigError, WorkerSettings};
use herald_core::user_keys::UserKeys;

/// Connections to the user-key vault: one read per claimed batch, one per submission that sets a
/// destination, one per erasure.
const VAULT_CONNECTIONS: u32 = 4;

/// The services `command` needs, from configuration: the database (with a pool of its own for
/// finishes when `workers` run in this process), the channels, the keys, the database clock. Returns
/// the PostgreSQL store too, for what only it can do (migrations, wake-ups, readiness).
///
/// # Errors
/// A [`ConfigError`] for missing or invalid configuration; a connection failure.
pub async fn services_from_config(
    config: &Config,
    command: &str,
    workers: bool,
) -> anyhow::Result<(PgStore, Services)> {
    let keys = config.require_keys(command)?;
    let keyring: Arc<dyn herald_ports::DestinationCipher> = Arc::new(keys.keyring()?);
    let registry = herald_channels::registry::HttpChannelRegistry::from_configs_with_egress(
        &config.channels,
        &config.egress.egress(),
    )
    .map_err(|error| ConfigError::new(error.key, error.reason))?;
    // The workers' claims get a pool of their own: `herald serve` gives its API another one
    // ([`on_store`]), so requests never take the connections deliveries need.
    let size = if workers { config.database.worker_max_connections } else { config.database.max_connections };
    let mut store = connect_sized(config, command, size).await?;
    if workers {
        // Finishes get a pool of their own, one connection per flusher and one for give-backs: the
        // write that records what a channel answered never queues behind claims or API requests
        // (SPEC §5). Its connections plan each statement once (`Planning::Generic`).
        let url = config.require_database_url(command)?;
        let size = u32::try_from(herald_core::finisher::FLUSHERS + 1).unwrap_or(u32::MAX);
        store = store.with_finish_pool(url.expose_secret(), size).await.context("database.url")?;
    }
    let clock: Arc<dyn Clock> = Arc::new(store.clock());
    let mut services = Services::over(Arc::new(store.clone()), Arc::new(registry), Arc::clone(&keyring), clock)
        .with_test_send_quota(config.test_send);
    if let Some(oidc) = &config.oidc {
        services = services.with_oidc(oidc_sign_in(oidc)?);
    }
    if let Some(url) = &keys.vault_database_url {
        // The vault's own database: the data database's backups must never hold a user's key.
        let vault = herald_postgres::PgVault::connect(url.expose_secret(), VAULT_CONNECTIONS)
            .await
            .context("keys.vault_database_url")?;
        services = services.with_user_keys(UserKeys::new(Arc::new(vault), keyring));
    }
    Ok((store, services))
}

/// Console sign-in with the OpenID Connect provider of `[operators.oidc]`.
///
/// # Errors
/// The provider's HTTP client could not be built.
pub fn oidc_sign_in(config: &crate::config::OidcConfig) -> anyhow::Result<herald_core::oidc::OidcSignIn> {
    Ok(herald_core::oidc::OidcSignIn {
        provider: Arc::new(crate::oidc::OidcProvider::new(config.clone())?),
        mapping: herald_core::oidc::RoleMapping { claim: config.role_claim.clone(), roles: config.roles.clone() },
    })
}

/// The same services over another PostgreSQL store (a pool of its own): `herald serve` gives its API
/// one of `database.api_max_connections`, apart from the workers'.
#[must_use]
pub fn on_store(services: &Services, store: PgStore) -> Services {
    let clock: Arc<dyn Clock> = Arc::new(store.clock());
    Services {
        clock,
        oidc: services.oidc.clone(),
        user_keys: services.user_keys.clone(),
        ..Services::over(
            Arc::new(store),
            Arc::clone(&services.registry),
            Arc::clone(&services.cipher),
            Arc::clone(&services.clock),
        )
        .with_test_send_quota(services.test_send_quota)
    }
}

/// The `i`-th worker of a process configured by `settings`, named `{prefix}-{pid}-{i}`.
#[must_use]
pub fn configured_worker(services: &Services, settings: &WorkerSettings, prefix: &str, i: u32) -> Worker {
    services.worker(WorkerConfig {
        id: format!("{prefix}-{}-{i}", std::process::id()),
        lease: Millis(settings.lease_ms),
        batch: settings.batch,
        idle_poll: Duration::from_millis(settings.poll_ms),
    })
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
        herald_ports::StoreError::UserErased => anyhow::anyhow!("database.url: unexpected answer"),
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
        herald_ports::StoreError::UserErased => anyhow::anyhow!("database.url: unexpected answer"),
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
        Err(herald_ports::StoreError::UserErased) => Err(anyhow::anyhow!("database.url: unexpected answer")),
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

/// The status events' dispatcher of `config`, over `store`: `None` when no subscription is configured.
/// Tells the store which subscriptions want which events (the database writes them from then on).
///
/// # Errors
/// A subscription the sink refuses (its secret, its URL); a store failure.
pub async fn status_dispatcher(
    config: &Config,
    store: &PgStore,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Option<herald_core::status::Dispatcher>> {
    use herald_core::status::{Dispatcher, Subscriptions};
    use herald_ports::{StatusEventStore as _, SubscriptionFilter};
    let subscriptions = &config.status.subscriptions;
    let filters: Vec<SubscriptionFilter> = subscriptions
        .iter()
        .map(|s| SubscriptionFilter {
            name: s.name.clone(),
            kinds: s.kinds.clone(),
            service_tokens: s.service_tokens.clone(),
        })
        .collect();
    store.set_subscriptions(&filters).await.context("cannot record the status subscriptions")?;
    if subscriptions.is_empty() {
        return Ok(None);
    }
    let endpoints = subscriptions
        .iter()
        .map(|s| herald_channels::status::StatusEndpoint {
            name: s.name.clone(),
            url: s.url.clone(),
            secret: secrecy::SecretBox::new(Box::new(s.secret.expose_secret().to_owned())),
            timeout_ms: s.timeout_ms,
            allow_loopback: s.allow_loopback_endpoint,
        })
        .collect();
    let sink = herald_channels::status::HttpStatusSink::new(endpoints, &config.egress.egress())
        .map_err(|(name, reason)| ConfigError::new(format!("status_subscription.{name}"), reason))?;
    let names = subscriptions.iter().map(|s| s.name.clone()).collect();
    let with_body = subscriptions.iter().filter(|s| s.include_body).map(|s| s.name.clone()).collect();
    Ok(Some(Dispatcher::new(
        Arc::new(store.clone()),
        Arc::new(sink),
        clock,
        Subscriptions { names, with_body },
        config.status.dispatch.clone(),
    )))
}
