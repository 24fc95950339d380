//! The [`PgStore`]: its pools and connection, and its implementation of every store role
//! (`herald_ports::store::prelude`), which delegates each method to the module of its path (`create`, `claim`, `finish`, `resolve`, `read`, `views`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use herald_domain::egress::EgressDecision;
use herald_domain::quota::TestSendQuota;
use herald_domain::resolve::FinalState;
use herald_domain::{
    ChannelName, ChannelRules, EventKey, Millis, NotificationId, NotificationRef, TaskId, Timestamp, UserId,
};
use herald_ports::store::prelude::*;
use herald_ports::store::{
    ChannelTable, ClaimBatch, ClaimRequest, Created, EgressSlot, Erasure, ErasureRecord, FinishRecord, FinishResult,
    GiveBack, InboxCursor, InboxItem, MarkRead, NewNotification, NotificationView, OutcomeBucket, OutcomeCount,
    ParkedBucket, ParkedFilter, ParkedTask, PurgeCutoffs, PurgeReport, ResolveError, Resolved, StoreError,
    StoredSubmission, TaskCount, TaskView, TestSendGrant,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};

use crate::clock::PgClock;
use crate::convert::store_error;
use crate::create_batch::CreateQueue;
use crate::notify::{Announcer, TaskListener};
use crate::{claim, create, finish, lifecycle, read, resolve, status, test_send, views};

/// How the connections of a pool plan the statements they keep prepared (sqlx prepares every query once
/// per connection and runs it again by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planning {
    /// PostgreSQL's own choice (`plan_cache_mode = auto`): a statement is planned for its parameters at
    /// each of its first five runs, and from then on too unless a plan made without them is estimated to
    /// cost no more. For the API's reads, whose best plan may depend on the user or the page asked for,
    /// and for the claims: how many queue rows a claim reads is estimated from `task_queue`'s statistics
    /// and its `LIMIT`, and a plan made without the limit (estimated at a tenth of those rows) may join
    /// all of `delivery_task` instead of probing it per row.
    Chosen,
    /// One plan per statement and connection, made at its first run without looking at the parameters
    /// (`plan_cache_mode = force_generic_plan`). For the finish pool ([`PgStore::with_finish_pool`]):
    /// its statements join the arrays of a batch to rows found by key, so the parameters never change
    /// the best plan; but PostgreSQL, left to choose, found a plan made for a batch of a few rows cheaper
    /// than the generic one (ten rows for each `unnest`) and planned most flushes again, at 0.3–0.5 ms of
    /// its CPU each (docs/BENCHMARKS.md). A plan made while the tables were small is replaced as they
    /// grow (`claim::plan_generation`).
    Generic,
}

/// The PostgreSQL store. Cheap to clone: it is a connection pool (two, when finishes get their own).
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    /// Where finishes and give-backs run: the main pool unless [`PgStore::with_finish_pool`] gave them
    /// one of their own, so that claims and API requests queueing for connections never delay the write
    /// that records what a channel answered.
    pub(crate) finishes: PgPool,
    /// Tells listening workers, debounced, that creates committed new tasks.
    announcer: Announcer,
    /// Submissions without a digest decision, written together when they arrive together
    /// (`create_batch`); shared by the store's clones.
    creates: Arc<CreateQueue>,
    /// Rows taken by this store's claims, shared by its clones: which plans the claim's statements and
    /// the batched finish use (`claim::plan_generation`).
    claimed: Arc<AtomicU64>,
}

impl PgStore {
    /// Connects a pool of at most `max_connections`.
    ///
    /// # Errors
    /// `Unavailable` when the server cannot be reached; `Unknown` for a malformed URL.
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        PgStore::connect_planned(url, max_connections, Planning::Chosen).await
    }

    /// As [`PgStore::connect`], with the pool's connections planning as `planning` says.
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn connect_planned(url: &str, max_connections: u32, planning: Planning) -> Result<PgStore, StoreError> {
        Ok(PgStore::from_pool(connect_pool(url, max_connections, planning).await?))
    }

    #[must_use]
    pub fn from_pool(pool: PgPool) -> PgStore {
        PgStore {
            finishes: pool.clone(),
            announcer: Announcer::new(pool.clone()),
            pool,
            creates: Arc::default(),
            claimed: Arc::default(),
        }
    }

    /// Gives finishes and give-backs a pool of their own of `max_connections` (SPEC §5: the outcome of a
    /// call must be written while the attempt's lease lasts; queued behind claims and API requests it
    /// might not be). Its connections plan generically ([`Planning::Generic`]): they run only those
    /// fenced writes, each of which finds its rows by key.
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn with_finish_pool(mut self, url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        self.finishes = connect_pool(url, max_connections, Planning::Generic).await?;
        Ok(self)
    }

    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The pool finishes and give-backs run on ([`PgStore::pool`] unless
    /// [`PgStore::with_finish_pool`] gave them one of their own).
    #[must_use]
    pub fn finish_pool(&self) -> &PgPool {
        &self.finishes
    }

    /// Applies the embedded migrations.
    ///
    /// # Errors
    /// When a migration fails or the database is unreachable.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        crate::MIGRATOR.run(&self.pool).await.map_err(|e| StoreError::Unknown(e.into()))
    }

    /// The database's clock, shared by every worker.
    #[must_use]
    pub fn clock(&self) -> PgClock {
        PgClock::new(self.pool.clone())
    }

    /// True when the database answers.
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// True when every embedded migration has been applied.
    pub async fn is_migrated(&self) -> bool {
        let applied: Result<Vec<i64>, _> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success").fetch_all(&self.pool).await;
        applied.is_ok_and(|versions| crate::MIGRATOR.iter().all(|m| versions.contains(&m.version)))
    }

    /// Folds the task tally's deltas into one row per group (`COMPACT_TASK_TALLY`); the gauges' read does
    /// it by itself once the tally has grown. Answers how many rows it removed.
    ///
    /// # Errors
    /// Store failures.
    pub async fn compact_task_tally(&self) -> Result<u64, StoreError> {
        crate::views::compact_task_tally(&self.pool).await
    }

    /// Opens a listener; when this returns, every later committed `create` with tasks is heard.
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached.
    pub async fn listen(&self) -> Result<TaskListener, StoreError> {
        TaskListener::open(&self.pool).await
    }
}

/// The options of `url`. sqlx's parse error may quote the URL, password included: this one says only
/// what is wrong (the caller names the key or flag the URL came from).
fn parse_url(url: &str) -> Result<PgConnectOptions, StoreError> {
    url.parse().map_err(|_: sqlx::Error| {
        StoreError::Unknown(anyhow::anyhow!(
            "is not a valid PostgreSQL URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
        ))
    })
}

/// The database `url` names (sqlx's default, the user's name, when it names none).
///
/// # Errors
/// When `url` is not a PostgreSQL URL.
pub fn database_of(url: &str) -> Result<String, StoreError> {
    let options = parse_url(url)?;
    Ok(options.get_database().unwrap_or(options.get_username()).to_owned())
}

/// What [`create_database_if_missing`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseReady {
    /// The database answered.
    Existed,
    /// It did not exist and was created; the text names it and its server (no password).
    Created(String),
}

/// Connects to the database `url` names; when the server says it does not exist (SQLSTATE 3D000) and the
/// role may create databases, creates it from the same server's `postgres` database. A role that may not
/// gets an error with the exact command that creates it.
///
/// # Errors
/// The connection failure (as [`PgStore::connect`] words it), or why the database cannot be created.
pub async fn create_database_if_missing(url: &str) -> Result<DatabaseReady, StoreError> {
    let options = parse_url(url)?;
    let error = match PgConnection::connect_with(&options).await {
        Ok(conn) => {
            let _ = conn.close().await;
            return Ok(DatabaseReady::Existed);
        }
        Err(error) => error,
    };
    let missing = matches!(&error, sqlx::Error::Database(db) if db.code().as_deref() == Some("3D000"));
    if !missing {
        return Err(connect_failure(&options, &error));
    }
    let name = database_of(url)?;
    let place = redacted_url(&options);
    let by_hand = create_command(&options, &name);
    let maintenance = options.clone().database("postgres");
    let mut conn = PgConnection::connect_with(&maintenance).await.map_err(|_| {
        StoreError::Unavailable(anyhow::anyhow!(
            "database {name} does not exist on {place}, and its server's `postgres` database does not let this \
             role in to create it; create it as a role that may, e.g.: {by_hand}"
        ))
    })?;
    let may: Option<bool> =
        sqlx::query_scalar("SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user")
            .fetch_optional(&mut conn)
            .await
            .map_err(store_error)?;
    if may != Some(true) {
        let _ = conn.close().await;
        return Err(StoreError::Unavailable(anyhow::anyhow!(
            "database {name} does not exist on {place}, and the role {} may not create databases; create it as \
             a role that may, e.g.: {by_hand}",
            options.get_username()
        )));
    }
    let created = conn.execute(format!("CREATE DATABASE {}", quote_identifier(&name)).as_str()).await;
    let _ = conn.close().await;
    match created {
        Ok(_) => Ok(DatabaseReady::Created(format!("created database {name} on {place}"))),
        // Created meanwhile by someone else: what was asked for is there.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P04") => Ok(DatabaseReady::Existed),
        Err(error) => Err(StoreError::Unavailable(anyhow::anyhow!(
            "database {name} does not exist on {place} and could not be created ({}); create it by hand: {by_hand}",
            match &error {
                sqlx::Error::Database(db) => db.message().to_owned(),
                other => other.to_string(),
            }
        ))),
    }
}

/// `"name"`, with any `"` doubled: an identifier PostgreSQL reads as written.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The shell command that creates database `name` on the server of `options` for its role, run as the
/// server's usual superuser `postgres` (no password in it).
fn create_command(options: &PgConnectOptions, name: &str) -> String {
    let plain = |text: &str| text.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b));
    let quoted = |text: &str| if plain(text) { text.to_owned() } else { format!("'{}'", text.replace('\'', "'\\''")) };
    let role = options.get_username();
    let owner = if role == "postgres" { String::new() } else { format!(" -O {}", quoted(role)) };
    format!("createdb -h {} -p {} -U postgres{owner} {}", quoted(options.get_host()), options.get_port(), quoted(name))
}

pub(crate) async fn connect_pool(url: &str, max_connections: u32, planning: Planning) -> Result<PgPool, StoreError> {
    let options = parse_url(url)?;
    // One connection first, outside the pool: a pool would retry until its acquire timeout and then
    // report only "timed out", hiding the cause (refused, no such database, authentication).
    match PgConnection::connect_with(&options).await {
        Ok(conn) => {
            let _ = conn.close().await;
        }
        Err(error) => return Err(connect_failure(&options, &error)),
    }
    let pool = PgPoolOptions::new().max_connections(max_connections).acquire_timeout(Duration::from_secs(5));
    let pool = match planning {
        Planning::Chosen => pool,
        // A `SET` once per connection rather than a startup option, which some connection poolers
        // refuse: the setting changes how fast the statements run, never what they do.
        Planning::Generic => pool.after_connect(|conn, _| {
            Box::pin(async move { conn.execute("SET plan_cache_mode = force_generic_plan").await.map(drop) })
        }),
    };
    pool.connect_with(options).await.map_err(store_error)
}

/// The URL of `options` as an operator can show it: no password, ever.
#[must_use]
pub fn redacted_url(options: &PgConnectOptions) -> String {
    let database = options.get_database().unwrap_or("");
    format!("postgres://{}@{}:{}/{database}", options.get_username(), options.get_host(), options.get_port())
}

/// A failed first connection, as one line: where (the URL without password), the cause (its innermost
/// message, once), and what usually fixes it.
fn connect_failure(options: &PgConnectOptions, error: &sqlx::Error) -> StoreError {
    let place = redacted_url(options);
    let (cause, hint) = match error {
        sqlx::Error::Io(io) => (
            io.to_string(),
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "is PostgreSQL running there? (scripts/ensure-postgres.sh finds or starts one)"
                }
                _ => "is the host reachable and the port right?",
            },
        ),
        sqlx::Error::Database(db) => (
            db.message().to_owned(),
            match db.code().as_deref() {
                Some("3D000") => "`herald migrate` creates it when the role may create databases",
                Some("28P01" | "28000") => "check the URL's user and password",
                _ => "",
            },
        ),
        other => (other.to_string(), ""),
    };
    let hint = if hint.is_empty() { String::new() } else { format!(" — {hint}") };
    StoreError::Unavailable(anyhow::anyhow!("cannot connect to {place}: {cause}{hint}"))
}

#[async_trait]
impl SubmissionStore for PgStore {
    #[tracing::instrument(skip_all, fields(user_id = %new.user_id))]
    async fn create(
        &self,
        new: &NewNotification,
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Created, StoreError> {
        let created = if create::digest_possible(new, channels) {
            create::create(&self.pool, new, channels, now).await?
        } else {
            self.creates.create(&self.pool, new, channels, now).await?
        };
        if !created.tasks.is_empty() {
            self.announcer.committed_tasks();
        }
        Ok(created)
    }

    #[tracing::instrument(skip_all, fields(recipients = news.len()))]
    async fn create_event(
        &self,
        news: &[NewNotification],
        channels: &ChannelTable,
        now: Timestamp,
    ) -> Result<Vec<Created>, StoreError> {
        let created = create::create_many(&self.pool, news, channels, now).await?;
        if created.iter().any(|c| !c.tasks.is_empty()) {
            self.announcer.committed_tasks();
        }
        Ok(created)
    }

    async fn submitted(&self, event_key: &EventKey, users: &[UserId]) -> Result<Vec<StoredSubmission>, StoreError> {
        create::submitted(&self.pool, event_key, users).await
    }
}

#[async_trait]
impl DeliveryStore for PgStore {
    #[tracing::instrument(skip_all, fields(worker = %request.worker))]
    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        claim::claim(&self.pool, request, &self.claimed).await
    }

    #[tracing::instrument(skip_all, fields(task_id = %record.task_id))]
    async fn finish(&self, record: &FinishRecord) -> Result<FinishResult, StoreError> {
        finish::finish(&self.finishes, record).await
    }

    #[tracing::instrument(skip_all, fields(attempts = records.len()))]
    async fn finish_batch(
        &self,
        records: &[FinishRecord],
    ) -> Result<Vec<Result<FinishResult, StoreError>>, StoreError> {
        let generation = claim::plan_generation(self.claimed.load(std::sync::atomic::Ordering::Relaxed));
        finish::finish_batch(&self.finishes, records, generation).await
    }

    #[tracing::instrument(skip_all, fields(task_id = %record.task_id))]
    async fn give_back(&self, record: &GiveBack) -> Result<FinishResult, StoreError> {
        finish::give_back(&self.finishes, record).await
    }
}

#[async_trait]
impl EgressStore for PgStore {
    async fn reserve_egress(
        &self,
        channel: &ChannelName,
        rules: &ChannelRules,
        now: Timestamp,
    ) -> Result<EgressDecision, StoreError> {
        claim::reserve_egress(&self.pool, channel, rules, now).await
    }

    async fn reserve_test_send(
        &self,
        user: &UserId,
        channel: &ChannelName,
        rules: &ChannelRules,
        quota: TestSendQuota,
        audit: &[herald_ports::NewAuditEvent],
        now: Timestamp,
    ) -> Result<TestSendGrant, StoreError> {
        test_send::reserve_test_send(&self.pool, user, channel, rules, quota, audit, now).await
    }
}

#[async_trait]
impl ReviewStore for PgStore {
    #[tracing::instrument(skip_all, fields(task_id = %task))]
    async fn resolve_manually(
        &self,
        task: TaskId,
        final_state: FinalState,
        note: &str,
        audit: &herald_ports::NewAuditEvent,
        now: Timestamp,
    ) -> Result<Resolved, ResolveError> {
        resolve::resolve_manually(&self.pool, task, final_state, note, audit, now).await
    }

    async fn parked(&self, limit: u32) -> Result<Vec<TaskView>, StoreError> {
        views::parked(&self.pool, limit).await
    }

    async fn parked_page(&self, filter: &ParkedFilter) -> Result<Vec<ParkedTask>, StoreError> {
        views::parked_page(&self.pool, filter).await
    }
}

#[async_trait]
impl herald_ports::StatusEventStore for PgStore {
    async fn set_subscriptions(&self, subscriptions: &[herald_ports::SubscriptionFilter]) -> Result<(), StoreError> {
        status::set_subscriptions(&self.pool, subscriptions).await
    }

    async fn claim_status_events(
        &self,
        subscriptions: &[String],
        with_body: &[String],
        limit: u32,
        now: Timestamp,
        hold: herald_domain::Millis,
    ) -> Result<Vec<herald_ports::StatusEvent>, StoreError> {
        status::claim(&self.pool, subscriptions, with_body, limit, now, hold).await
    }

    async fn status_events_delivered(&self, sequences: &[i64], now: Timestamp) -> Result<(), StoreError> {
        status::delivered(&self.pool, sequences, now).await
    }

    async fn status_event_retry(&self, sequence: i64, due: Timestamp, error: &str) -> Result<(), StoreError> {
        status::retry(&self.pool, sequence, due, error).await
    }

    async fn status_event_park(&self, sequence: i64, now: Timestamp, error: &str) -> Result<(), StoreError> {
        status::park(&self.pool, sequence, now, error).await
    }

    async fn parked_status_events(&self, limit: u32) -> Result<Vec<herald_ports::ParkedStatusEvent>, StoreError> {
        status::parked(&self.pool, limit).await
    }

    async fn parked_status_event_count(&self) -> Result<u64, StoreError> {
        status::parked_count(&self.pool).await
    }
}

#[async_trait]
impl InboxStore for PgStore {
    async fn inbox(&self, user: &UserId, limit: u32) -> Result<Vec<InboxItem>, StoreError> {
        views::inbox(&self.pool, user, limit).await
    }

    async fn inbox_page(
        &self,
        user: &UserId,
        cursor: Option<InboxCursor>,
        limit: u32,
    ) -> Result<Vec<InboxItem>, StoreError> {
        views::inbox_page(&self.pool, user, cursor, limit).await
    }

    async fn mark_read(
        &self,
        user: &UserId,
        notification: NotificationRef,
        now: Timestamp,
    ) -> Result<MarkRead, StoreError> {
        read::mark_read(&self.pool, user, notification, now).await
    }
}

#[async_trait]
impl LifecycleStore for PgStore {
    async fn erase(
        &self,
        user: &UserId,
        audit: &herald_ports::NewAuditEvent,
        now: Timestamp,
    ) -> Result<Erasure, StoreError> {
        lifecycle::erase(&self.pool, user, audit, now).await
    }

    async fn erasure(&self, user: &UserId) -> Result<Option<ErasureRecord>, StoreError> {
        lifecycle::erasure(&self.pool, user).await
    }

    async fn take_lease(&self, job: &str, holder: &str, now: Timestamp, until: Timestamp) -> Result<bool, StoreError> {
        lifecycle::take_lease(&self.pool, job, holder, now, until).await
    }

    async fn purge(&self, cutoffs: &PurgeCutoffs) -> Result<PurgeReport, StoreError> {
        lifecycle::purge(&self.pool, cutoffs).await
    }
}

#[async_trait]
impl ReadModels for PgStore {
    async fn notification(&self, id: NotificationId) -> Result<Option<NotificationView>, StoreError> {
        views::notification(&self.pool, id).await
    }

    async fn notification_by_ref(&self, notification: NotificationRef) -> Result<Option<NotificationId>, StoreError> {
        views::notification_by_ref(&self.pool, notification).await
    }

    async fn notification_by_event(
        &self,
        user: &UserId,
        event_key: &EventKey,
    ) -> Result<Option<NotificationId>, StoreError> {
        views::notification_by_event(&self.pool, user, event_key).await
    }

    async fn notification_by_reference(&self, reference: &str) -> Result<Option<NotificationId>, StoreError> {
        views::notification_by_reference(&self.pool, reference).await
    }

    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError> {
        views::task_counts(&self.pool).await
    }

    async fn outcome_counts(&self, since: Timestamp) -> Result<Vec<OutcomeCount>, StoreError> {
        views::outcome_counts(&self.pool, since).await
    }

    async fn egress_slots(&self) -> Result<Vec<EgressSlot>, StoreError> {
        views::egress_slots(&self.pool).await
    }

    async fn decided_counts(&self) -> Result<Vec<OutcomeCount>, StoreError> {
        views::decided_counts(&self.pool).await
    }

    async fn outcome_buckets(&self, since: Timestamp, width: Millis) -> Result<Vec<OutcomeBucket>, StoreError> {
        views::outcome_buckets(&self.pool, since, width).await
    }

    async fn parked_buckets(&self, since: Timestamp, width: Millis) -> Result<Vec<ParkedBucket>, StoreError> {
        views::parked_buckets(&self.pool, since, width).await
    }
}
