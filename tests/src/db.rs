//! A fresh database per test, cloned from a migrated template.
//!
//! The server comes from `DATABASE_URL` (the README's test command provides it); the default is the
//! local server at 127.0.0.1:5432. The template is named after the migrations' checksums, so a changed
//! migration gets a new template; creating it is serialised across test processes by an advisory lock.
//! Databases of test processes that no longer exist are dropped when the next one starts.

use std::sync::atomic::{AtomicU32, Ordering};

use herald_postgres::{PgStore, MIGRATOR};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::OnceCell;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const PREFIX: &str = "herald_t_";

static TEMPLATE: OnceCell<String> = OnceCell::const_new();
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// One test's own database.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub store: PgStore,
}

/// The server URL tests use.
#[must_use]
pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

fn options(database: &str) -> anyhow::Result<PgConnectOptions> {
    let options: PgConnectOptions = server_url().parse()?;
    Ok(options.database(database))
}

fn url_for(database: &str) -> anyhow::Result<String> {
    Ok(options(database)?.to_url_lossy().to_string())
}

async fn admin() -> anyhow::Result<PgConnection> {
    let options: PgConnectOptions = server_url().parse()?;
    Ok(PgConnection::connect_with(&options).await?)
}

fn template_name() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for migration in MIGRATOR.iter() {
        for byte in migration.checksum.iter().chain(migration.version.to_le_bytes().iter()) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("herald_tpl_{hash:016x}")
}

async fn ensure_template() -> anyhow::Result<String> {
    let name = template_name();
    let mut conn = admin().await?;
    sqlx::query("SELECT pg_advisory_lock(727001)").execute(&mut conn).await?;
    let result = async {
        drop_abandoned(&mut conn).await?;
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut conn)
            .await?;
        if !exists {
            let building = format!("{name}_building");
            sqlx::query(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)")).execute(&mut conn).await?;
            sqlx::query(&format!("CREATE DATABASE {building}")).execute(&mut conn).await?;
            let store = PgStore::connect(&url_for(&building)?, 1).await?;
            store.migrate().await?;
            // Closing waits for the pool's connections; one that does not go within a few seconds is
            // ended by the rename loop below, never waited for without end.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), store.pool().close()).await;
            // The server may still be closing the migration connections' backends for a moment; any
            // session still attached is ended (nothing but this function uses the half-built database).
            let rename = format!("ALTER DATABASE {building} RENAME TO {name}");
            let mut tries = 0;
            while let Err(error) = sqlx::query(&rename).execute(&mut conn).await {
                // On a busy machine closing backends (or an autovacuum worker) can outlast a second;
                // nothing else may use a database being built, so end them.
                sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
                    .bind(&building)
                    .execute(&mut conn)
                    .await?;
                tries += 1;
                anyhow::ensure!(tries < 250, "cannot finish the template {name}: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            // No session may open it any more — an autovacuum worker attached to a template makes every
            // `CREATE DATABASE … TEMPLATE` fail with "being accessed by other users".
            sqlx::query(&format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false")).execute(&mut conn).await?;
        }
        anyhow::Ok(())
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(727001)").execute(&mut conn).await?;
    result?;
    Ok(name)
}

/// Drops databases left by test processes that have exited.
async fn drop_abandoned(conn: &mut PgConnection) -> anyhow::Result<()> {
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'herald\\_t\\_%'")
        .fetch_all(&mut *conn)
        .await?;
    for name in names {
        let pid = name.trim_start_matches(PREFIX).split('_').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// Drops what test runs left on the server: the databases of test processes that have exited, and —
/// when no test process is running any more — the migrated template. `scripts/test.sh` calls it (through
/// `herald-test-db drop-leftovers`) when a run ends, also after a failure. Returns the names dropped.
///
/// # Errors
/// When the server cannot be reached.
pub async fn drop_leftovers() -> anyhow::Result<Vec<String>> {
    let mut conn = admin().await?;
    sqlx::query("SELECT pg_advisory_lock(727001)").execute(&mut conn).await?;
    let result = async {
        let before: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'herald\\_t%'")
                .fetch_all(&mut conn)
                .await?;
        drop_abandoned(&mut conn).await?;
        let live: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname LIKE 'herald\\_t\\_%'")
            .fetch_one(&mut conn)
            .await?;
        if live == 0 {
            let templates: Vec<String> =
                sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'herald\\_tpl\\_%'")
                    .fetch_all(&mut conn)
                    .await?;
            for name in templates {
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await?;
            }
        }
        let after: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'herald\\_t%'")
            .fetch_all(&mut conn)
            .await?;
        anyhow::Ok(before.into_iter().filter(|name| !after.contains(name)).collect())
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(727001)").execute(&mut conn).await?;
    result
}

impl TestDb {
    /// A new, migrated, empty database.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub async fn fresh() -> anyhow::Result<TestDb> {
        let template = TEMPLATE.get_or_try_init(ensure_template).await?.clone();
        let name = format!("{PREFIX}{}_{}", std::process::id(), SEQUENCE.fetch_add(1, Ordering::Relaxed));
        let mut conn = admin().await?;
        let mut tries = 0;
        loop {
            // Two clones of one template at the same instant can collide; a short retry settles it.
            match sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE {template}")).execute(&mut conn).await {
                Ok(_) => break,
                Err(_) if tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
                }
                Err(error) => return Err(error.into()),
            }
        }
        let url = url_for(&name)?;
        let store = PgStore::connect(&url, 20).await?;
        Ok(TestDb { name, url, store })
    }

    /// Rows of a query returning one count, for assertions.
    ///
    /// # Errors
    /// Store failures.
    pub async fn count(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(sql).fetch_one(self.store.pool()).await?)
    }
}
