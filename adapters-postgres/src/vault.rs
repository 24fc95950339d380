//! The user-key vault on PostgreSQL (`UserKeyVault`, issue 42's crypto-shredding): one row per user in a
//! database of its own — never the data database, whose backups, WAL archives and replicas must not hold
//! a key. Rows are found by the SHA-256 of the user id; a destroyed key leaves the digest alone (no id,
//! no key), so a destroyed key is never replaced by a new one.
//!
//! The table is created by [`PgVault::connect`] (`CREATE TABLE IF NOT EXISTS`): the vault's database takes
//! none of the data database's migrations.

use async_trait::async_trait;
use herald_domain::UserId;
use herald_ports::store::StoreError;
use herald_ports::vault::{UserKeyVault, WrappedKey};
use sqlx::PgPool;

use crate::convert::store_error;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS herald_user_key ( \
       user_digest bytea PRIMARY KEY CHECK (length(user_digest) = 32), \
       user_id text, \
       wrapped bytea, \
       created_at timestamptz NOT NULL DEFAULT now(), \
       destroyed_at timestamptz, \
       CHECK ((wrapped IS NULL) = (destroyed_at IS NOT NULL)), \
       CHECK ((user_id IS NULL) = (wrapped IS NULL)))";

/// The SHA-256 of the user id `$1`.
const DIGEST: &str = "sha256(convert_to($1, 'UTF8'))";

/// Herald's [`UserKeyVault`] adapter.
#[derive(Clone, Debug)]
pub struct PgVault {
    pool: PgPool,
}

impl PgVault {
    /// Connects to the vault's own database (`[keys] vault_database_url`) and creates its table if absent.
    ///
    /// # Errors
    /// As `PgStore::connect`; `Unknown` when the table cannot be created.
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgVault, StoreError> {
        let pool = crate::store::connect_pool(url, max_connections, crate::store::Planning::Chosen).await?;
        sqlx::query(SCHEMA).execute(&pool).await.map_err(store_error)?;
        Ok(PgVault { pool })
    }

    /// The vault's pool (for tests and the negative controls).
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl UserKeyVault for PgVault {
    async fn get_or_insert(&self, user: &UserId, candidate: &[u8]) -> Result<Vec<u8>, StoreError> {
        // Read first (the common case); insert when absent; read again when a concurrent insert won (a
        // fresh statement sees its commit). Two rounds settle it: a row, once there, is never removed.
        for _ in 0..2 {
            let found: Option<(Option<Vec<u8>>,)> =
                sqlx::query_as(&format!("SELECT wrapped FROM herald_user_key WHERE user_digest = {DIGEST}"))
                    .bind(user.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(store_error)?;
            match found {
                Some((Some(wrapped),)) => return Ok(wrapped),
                Some((None,)) => return Err(StoreError::UserErased),
                None => {}
            }
            let inserted = sqlx::query(&format!(
                "INSERT INTO herald_user_key (user_digest, user_id, wrapped) VALUES ({DIGEST}, $1, $2) \
                 ON CONFLICT (user_digest) DO NOTHING"
            ))
            .bind(user.as_str())
            .bind(candidate)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            if inserted.rows_affected() == 1 {
                return Ok(candidate.to_vec());
            }
        }
        Err(StoreError::Unknown(anyhow::anyhow!("the user's key neither exists nor could be stored")))
    }

    async fn get_many(&self, users: &[UserId]) -> Result<Vec<WrappedKey>, StoreError> {
        let ids: Vec<&str> = users.iter().map(UserId::as_str).collect();
        let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
            "SELECT k.user_id, k.wrapped FROM herald_user_key k \
             WHERE k.user_digest = ANY (SELECT sha256(convert_to(u, 'UTF8')) FROM unnest($1::text[]) u) \
               AND k.wrapped IS NOT NULL",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(rows.into_iter().map(|(user, wrapped)| WrappedKey { user: UserId(user), wrapped }).collect())
    }

    async fn destroy(&self, user: &UserId) -> Result<bool, StoreError> {
        // One statement: a key present is destroyed in place; an absent one is remembered as destroyed.
        let destroyed: Option<(bool,)> = sqlx::query_as(&format!(
            "INSERT INTO herald_user_key AS k (user_digest, user_id, wrapped, destroyed_at) \
             VALUES ({DIGEST}, NULL, NULL, now()) \
             ON CONFLICT (user_digest) DO UPDATE SET user_id = NULL, wrapped = NULL, destroyed_at = now() \
               WHERE k.wrapped IS NOT NULL \
             RETURNING (xmax <> 0)"
        ))
        .bind(user.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        // `xmax <> 0`: the row existed with a key and was updated; a fresh insert had none to destroy.
        Ok(destroyed.is_some_and(|(updated,)| updated))
    }

    async fn page(&self, after: Option<UserId>, limit: u32) -> Result<Vec<WrappedKey>, StoreError> {
        let rows: Vec<(String, Vec<u8>)> = sqlx::query_as(
            "SELECT user_id, wrapped FROM herald_user_key \
             WHERE wrapped IS NOT NULL AND ($1::text IS NULL OR user_id > $1) ORDER BY user_id LIMIT $2",
        )
        .bind(after.as_ref().map(UserId::as_str))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(rows.into_iter().map(|(user, wrapped)| WrappedKey { user: UserId(user), wrapped }).collect())
    }

    async fn replace(&self, user: &UserId, old: &[u8], new: &[u8]) -> Result<bool, StoreError> {
        let done = sqlx::query(&format!(
            "UPDATE herald_user_key SET wrapped = $3 WHERE user_digest = {DIGEST} AND wrapped = $2"
        ))
        .bind(user.as_str())
        .bind(old)
        .bind(new)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() == 1)
    }
}
