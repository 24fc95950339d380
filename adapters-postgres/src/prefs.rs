//! The preference store: switches and encrypted destinations.

use async_trait::async_trait;
use herald_domain::{ChannelName, UserId};
use herald_ports::prefs::{ChannelPref, PreferenceStore, StoredDestination};
use herald_ports::StoreError;

use crate::convert::store_error;
use crate::rows::{DestinationRow, PrefRow};
use crate::store::PgStore;

/// The columns of a [`PrefRow`].
const PREF_COLUMNS: &str =
    "user_id, channel, enabled, destination IS NOT NULL AS has_destination, verified_at IS NOT NULL AS verified, version";

#[async_trait]
impl PreferenceStore for PgStore {
    async fn put(
        &self,
        user: &UserId,
        channel: &ChannelName,
        enabled: bool,
        destination: Option<Vec<u8>>,
    ) -> Result<ChannelPref, StoreError> {
        let row: PrefRow = sqlx::query_as(&format!(
            "INSERT INTO channel_pref AS p (user_id, channel, enabled, destination) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (user_id, channel) DO UPDATE SET enabled = EXCLUDED.enabled, \
               destination = COALESCE(EXCLUDED.destination, p.destination), \
               verified_at = CASE WHEN EXCLUDED.destination IS NULL OR EXCLUDED.destination = p.destination \
                             THEN p.verified_at END, \
               tested_destination = CASE WHEN EXCLUDED.destination IS NULL OR EXCLUDED.destination = p.destination \
                             THEN p.tested_destination END, \
               destination_expired_at = CASE WHEN EXCLUDED.destination IS NULL \
                             OR EXCLUDED.destination = p.destination THEN p.destination_expired_at END, \
               version = p.version + 1, updated_at = now() \
             RETURNING {PREF_COLUMNS}"
        ))
        .bind(user.as_str())
        .bind(channel.as_str())
        .bind(enabled)
        .bind(destination)
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(row.into())
    }

    async fn get(&self, user: &UserId, channel: &ChannelName) -> Result<Option<ChannelPref>, StoreError> {
        let row: Option<PrefRow> =
            sqlx::query_as(&format!("SELECT {PREF_COLUMNS} FROM channel_pref WHERE user_id = $1 AND channel = $2"))
                .bind(user.as_str())
                .bind(channel.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(store_error)?;
        Ok(row.map(ChannelPref::from))
    }

    async fn destination(&self, user: &UserId, channel: &ChannelName) -> Result<Option<Vec<u8>>, StoreError> {
        let value: Option<Option<Vec<u8>>> =
            sqlx::query_scalar("SELECT destination FROM channel_pref WHERE user_id = $1 AND channel = $2")
                .bind(user.as_str())
                .bind(channel.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(store_error)?;
        Ok(value.flatten())
    }

    async fn record_test_accepted(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError> {
        self.update_pref_holding(
            "UPDATE channel_pref SET tested_destination = destination \
             WHERE user_id = $1 AND channel = $2 AND destination = $3",
            user,
            channel,
            tested,
        )
        .await
    }

    async fn record_destination_gone(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError> {
        // The same consequence as migration 0006's trigger after a delivery's attempt.
        self.update_pref_holding(
            "UPDATE channel_pref SET enabled = false, destination_expired_at = COALESCE(destination_expired_at, now()), \
                    version = version + 1, updated_at = now() \
             WHERE user_id = $1 AND channel = $2 AND destination = $3",
            user,
            channel,
            tested,
        )
        .await
    }

    async fn mark_verified(&self, user: &UserId, channel: &ChannelName) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE channel_pref SET verified_at = now(), version = version + 1, updated_at = now() \
             WHERE user_id = $1 AND channel = $2 AND destination IS NOT NULL AND destination = tested_destination",
        )
        .bind(user.as_str())
        .bind(channel.as_str())
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn destination_expired(&self, user: &UserId, channel: &ChannelName) -> Result<bool, StoreError> {
        // Set by the trigger of migration 0006 when a push service said the subscription is gone.
        let expired: Option<bool> = sqlx::query_scalar(
            "SELECT destination_expired_at IS NOT NULL FROM channel_pref WHERE user_id = $1 AND channel = $2",
        )
        .bind(user.as_str())
        .bind(channel.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(expired.unwrap_or(false))
    }

    async fn destinations_after(
        &self,
        after: Option<(UserId, ChannelName)>,
        limit: u32,
    ) -> Result<Vec<StoredDestination>, StoreError> {
        let (user, channel) = after.map_or((None, None), |(u, c)| (Some(u.0), Some(c.0)));
        let rows: Vec<DestinationRow> = sqlx::query_as(
            "SELECT user_id, channel, destination FROM channel_pref \
             WHERE destination IS NOT NULL AND ($1::text IS NULL OR (user_id, channel) > ($1, $2)) \
             ORDER BY user_id, channel LIMIT $3",
        )
        .bind(user)
        .bind(channel)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(rows.into_iter().map(StoredDestination::from).collect())
    }

    async fn key_ids_in_use(&self) -> Result<Vec<String>, StoreError> {
        // A sealed destination starts with the key id's length (one byte), then the id (ASCII).
        sqlx::query_scalar(
            "SELECT DISTINCT convert_from(substring(c FROM 2 FOR get_byte(c, 0)), 'UTF8') FROM ( \
               SELECT destination AS c FROM channel_pref WHERE destination IS NOT NULL AND length(destination) > 1 \
               UNION ALL \
               SELECT tested_destination FROM channel_pref WHERE tested_destination IS NOT NULL \
                 AND length(tested_destination) > 1) sealed ORDER BY 1",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)
    }

    async fn replace_destination(
        &self,
        user: &UserId,
        channel: &ChannelName,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        // Rotation re-encrypts the same plaintext: the version is not bumped and verification is kept. The
        // mark of an accepted test follows the destination it names; a mark naming any other ciphertext is
        // moot (confirming needs it to equal the destination) and goes, so no copy stays under the old key.
        let done = sqlx::query(
            "UPDATE channel_pref SET destination = $4, \
               tested_destination = CASE WHEN tested_destination = $3 THEN $4 END \
             WHERE user_id = $1 AND channel = $2 AND destination = $3",
        )
        .bind(user.as_str())
        .bind(channel.as_str())
        .bind(old)
        .bind(new)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() == 1)
    }
}

impl PgStore {
    /// Runs `sql`, an UPDATE of `user`'s preference for `channel` (`$1`, `$2`) that still holds the
    /// destination `tested` (`$3`); whether it changed the row.
    async fn update_pref_holding(
        &self,
        sql: &'static str,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(sql)
            .bind(user.as_str())
            .bind(channel.as_str())
            .bind(tested)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(done.rows_affected() == 1)
    }
}
