//! A small world for one test: a fresh database, three stand-in channels, their adapters, a keyring,
//! a clock, and Herald's worker.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald_channels::cipher::Keyring;
use herald_channels::config::ChannelConfig;
use herald_channels::registry::HttpChannelRegistry;
use herald_core::worker::{Worker, WorkerConfig};
use herald_core::Services;
use herald_domain::classify::Classified;
use herald_domain::{
    ChannelKind, ChannelName, ChannelRules, EventKey, Millis, NotificationId, Policy, TaskId, ThreadKey, Timestamp,
    UserId,
};
use herald_ports::prelude::*;
use herald_ports::store::{ChannelTable, Created, NewNotification, TaskView};
use herald_ports::{Channel, ChannelRegistry, Clock, DestinationCipher, OutboundMessage, PreferenceStore};
use herald_standin::{Kind, StandIn};
use secrecy::SecretString;

use crate::clock::ManualClock;
use crate::db::TestDb;

/// The test key: fixed, so separate worker processes can decrypt what the test encrypted.
pub const TEST_KEY_ID: &str = "t1";
pub const TEST_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[must_use]
pub fn test_keyring() -> Keyring {
    Keyring::new([(TEST_KEY_ID.to_owned(), SecretString::from(TEST_KEY))], TEST_KEY_ID).expect("test key")
}

/// Which clock the world's store decisions use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// Moved by hand; deterministic. For in-process cases.
    Manual,
    /// The database's clock, shared with worker processes. For multi-process cases.
    Database,
}

/// Channel client timeout used by the reference cases: short, so a stand-in delay makes it expire.
pub const CLIENT_TIMEOUT_MS: u64 = 300;

/// Default channel configurations pointing at the stand-ins.
#[must_use]
pub fn default_configs(push: &StandIn, sms: &StandIn, miao: &StandIn) -> Vec<ChannelConfig> {
    default_configs_for_urls(&push.base_url(), &sms.base_url(), &miao.base_url())
}

/// Default channel configurations for stand-ins at these URLs (also used by worker processes).
#[must_use]
pub fn default_configs_for_urls(push: &str, sms: &str, miao: &str) -> Vec<ChannelConfig> {
    let mut push_cfg = ChannelConfig::new("push", ChannelKind::Webhook, push);
    let mut sms_cfg = ChannelConfig::new("sms", ChannelKind::Queryable, sms);
    let mut miao_cfg = ChannelConfig::new("miao", ChannelKind::Miaotixing, miao);
    for cfg in [&mut push_cfg, &mut sms_cfg, &mut miao_cfg] {
        cfg.timeout_ms = CLIENT_TIMEOUT_MS;
        cfg.retry_base_ms = 1_000;
        cfg.retry_cap_ms = 10_000;
    }
    miao_cfg.min_interval_ms = Some(0);
    vec![push_cfg, sms_cfg, miao_cfg]
}

pub struct World {
    pub db: TestDb,
    pub store: Arc<herald_postgres::PgStore>,
    pub clock: Arc<dyn Clock>,
    pub manual: Arc<ManualClock>,
    pub cipher: Arc<Keyring>,
    pub push: StandIn,
    pub sms: StandIn,
    pub miao: StandIn,
    pub configs: Vec<ChannelConfig>,
    pub registry: Arc<dyn ChannelRegistry>,
}

/// The start of every manual clock: a fixed, recognisable instant (2026-01-01T00:00:00Z).
pub const T0: Timestamp = Timestamp(1_767_225_600_000);

impl World {
    /// A world with the default channels.
    ///
    /// # Errors
    /// When the database or a stand-in cannot be started.
    pub async fn new(mode: ClockMode) -> anyhow::Result<World> {
        Self::with(mode, |_| {}).await
    }

    /// A world whose channel configurations `adjust` may change first.
    ///
    /// # Errors
    /// When the database or a stand-in cannot be started.
    pub async fn with(mode: ClockMode, adjust: impl FnOnce(&mut Vec<ChannelConfig>)) -> anyhow::Result<World> {
        let db = TestDb::fresh().await?;
        let push = StandIn::try_start(Kind::Push).await?;
        let sms = StandIn::try_start(Kind::Sms).await?;
        let miao = StandIn::try_start(Kind::Miaotixing).await?;
        let mut configs = default_configs(&push, &sms, &miao);
        adjust(&mut configs);
        let registry: Arc<dyn ChannelRegistry> = Arc::new(HttpChannelRegistry::from_configs(&configs)?);
        let store = Arc::new(db.store.clone());
        let manual = Arc::new(ManualClock::at(T0));
        let clock: Arc<dyn Clock> = match mode {
            ClockMode::Manual => manual.clone(),
            ClockMode::Database => Arc::new(store.clock()),
        };
        Ok(World { db, store, clock, manual, cipher: Arc::new(test_keyring()), push, sms, miao, configs, registry })
    }

    /// Replaces the registry, e.g. with a wrapped channel for a negative control.
    pub fn set_registry(&mut self, registry: Arc<dyn ChannelRegistry>) {
        self.registry = registry;
    }

    #[must_use]
    pub fn table(&self) -> ChannelTable {
        herald_core::channel_table(self.registry.as_ref())
    }

    /// Herald's services over this world, wired by the composition root as `herald serve` wires them.
    #[must_use]
    pub fn services(&self) -> Services {
        Services::over(self.store.clone(), self.registry.clone(), self.cipher.clone(), self.clock.clone())
    }

    /// Herald's worker over this world, with a lease of `lease_ms`.
    #[must_use]
    pub fn worker(&self, id: &str, lease_ms: u64) -> Worker {
        self.services().worker(WorkerConfig {
            id: id.to_owned(),
            lease: Millis(lease_ms),
            batch: 8,
            idle_poll: Duration::from_millis(20),
        })
    }

    /// The destination stored for a user on a channel (plaintext only in this test helper).
    #[must_use]
    pub fn destination(user: &str, channel: &str) -> String {
        format!("dest-{user}-{channel}")
    }

    /// Enables `channels` for `user`, each with its encrypted destination.
    ///
    /// # Errors
    /// Store or cipher failures.
    pub async fn user(&self, user: &str, channels: &[&str]) -> anyhow::Result<()> {
        for channel in channels {
            let (u, c) = (UserId::from(user), ChannelName::from(*channel));
            let secret = SecretString::from(Self::destination(user, channel));
            let stored = DestinationCipher::encrypt(&*self.cipher, &u, &c, &secret)?;
            self.store.put(&u, &c, true, Some(stored)).await?;
        }
        Ok(())
    }

    /// Switches a channel of a user on or off, keeping the destination.
    ///
    /// # Errors
    /// Store failures.
    pub async fn switch(&self, user: &str, channel: &str, enabled: bool) -> anyhow::Result<()> {
        self.store.put(&UserId::from(user), &ChannelName::from(channel), enabled, None).await?;
        Ok(())
    }

    /// Submits a notification.
    ///
    /// # Errors
    /// Store failures.
    pub async fn submit(
        &self,
        user: &str,
        event_key: &str,
        ttl_ms: u64,
        max_attempts: Option<u32>,
    ) -> anyhow::Result<Created> {
        let new = NewNotification {
            user_id: UserId::from(user),
            event_key: EventKey::from(event_key),
            body: format!("Event {event_key} for {user}"),
            ttl: Millis(ttl_ms),
            max_attempts,
            thread_key: None,
            submitted_by: None,
        };
        let now = self.clock.now().await?;
        Ok(self.store.create(&new, &self.table(), now).await?)
    }

    /// Submits a notification in a thread (digests group by user, thread and channel, SPEC §7).
    ///
    /// # Errors
    /// Store failures.
    pub async fn submit_in_thread(
        &self,
        user: &str,
        event_key: &str,
        ttl_ms: u64,
        thread_key: &str,
    ) -> anyhow::Result<Created> {
        let new = NewNotification {
            user_id: UserId::from(user),
            event_key: EventKey::from(event_key),
            body: format!("Event {event_key} for {user}"),
            ttl: Millis(ttl_ms),
            max_attempts: None,
            thread_key: Some(ThreadKey::from(thread_key)),
            submitted_by: None,
        };
        let now = self.clock.now().await?;
        Ok(self.store.create(&new, &self.table(), now).await?)
    }

    /// The task view (with attempts, oldest first) of one task.
    ///
    /// # Errors
    /// When the task does not exist.
    pub async fn task(&self, notification: NotificationId, task: TaskId) -> anyhow::Result<TaskView> {
        let view = self.store.notification(notification).await?.ok_or_else(|| anyhow::anyhow!("no notification"))?;
        view.tasks.into_iter().find(|t| t.task_id == task).ok_or_else(|| anyhow::anyhow!("no task {task}"))
    }

    /// The notification an API answer named by its opaque id (`notification_id`).
    ///
    /// # Errors
    /// When the text is not an opaque id, or names no notification.
    pub async fn notification_id(&self, public: &str) -> anyhow::Result<NotificationId> {
        internal_id(&self.store, public).await
    }

    /// The reference channels know a task by (`ref` on the wire, `ntf-{reference}` as idempotency key).
    ///
    /// # Errors
    /// When the task does not exist.
    pub async fn reference(&self, task: TaskId) -> anyhow::Result<String> {
        Ok(sqlx::query_scalar("SELECT reference::text FROM delivery_task WHERE id = $1")
            .bind(task.0)
            .fetch_one(self.store.pool())
            .await?)
    }

    /// Moves the manual clock.
    pub fn advance(&self, ms: u64) {
        self.manual.advance(Millis(ms));
    }
}

/// Wraps a channel to change its resend policy; used only by the negative control NC2.
pub struct WithPolicy {
    pub inner: Arc<dyn Channel>,
    pub policy: Policy,
}

#[async_trait]
impl Channel for WithPolicy {
    fn name(&self) -> &ChannelName {
        self.inner.name()
    }

    fn rules(&self) -> ChannelRules {
        ChannelRules { policy: self.policy, ..self.inner.rules() }
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.inner.outbound_text(body, digest_count)
    }

    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        self.inner.check_destination(destination)
    }

    async fn send(&self, message: &OutboundMessage) -> Classified {
        self.inner.send(message).await
    }

    async fn query(&self, reference: &str) -> Classified {
        self.inner.query(reference).await
    }
}

/// The serial id behind the opaque id `public` an API answer showed (tests reach the store with it).
///
/// # Errors
/// When the text is not an opaque id, or names no notification.
pub async fn internal_id(store: &herald_postgres::PgStore, public: &str) -> anyhow::Result<NotificationId> {
    use herald_ports::prelude::*;
    let reference = herald_domain::NotificationRef::parse(public)
        .ok_or_else(|| anyhow::anyhow!("{public} is not an opaque notification id"))?;
    store.notification_by_ref(reference).await?.ok_or_else(|| anyhow::anyhow!("no notification {public}"))
}
