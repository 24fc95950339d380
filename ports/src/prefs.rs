//! The preference port: a user's switch and (encrypted) destination per channel.

use async_trait::async_trait;
use herald_domain::{ChannelName, UserId};

use crate::store::StoreError;

/// A preference as the API may show it: never the destination itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelPref {
    pub user_id: UserId,
    pub channel: ChannelName,
    pub enabled: bool,
    pub has_destination: bool,
    pub verified: bool,
    pub version: i64,
}

/// One stored ciphertext, for decryption or key rotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDestination {
    pub user_id: UserId,
    pub channel: ChannelName,
    pub ciphertext: Vec<u8>,
}

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait PreferenceStore: Send + Sync {
    /// Creates or updates a preference, bumping `version`. `destination = None` keeps the stored one;
    /// a new destination clears `verified`.
    async fn put(
        &self,
        user: &UserId,
        channel: &ChannelName,
        enabled: bool,
        destination: Option<Vec<u8>>,
    ) -> Result<ChannelPref, StoreError>;

    async fn get(&self, user: &UserId, channel: &ChannelName) -> Result<Option<ChannelPref>, StoreError>;

    /// The stored ciphertext of a destination.
    async fn destination(&self, user: &UserId, channel: &ChannelName) -> Result<Option<Vec<u8>>, StoreError>;

    /// Records that a test prompt to the destination stored as `tested` was accepted by the channel —
    /// only if `tested` is still the stored ciphertext. Returns whether it was recorded.
    async fn record_test_accepted(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError>;

    /// A test send found the destination `tested` gone for good (a Web Push subscription answered 404 or
    /// 410): as after a delivery's attempt, the channel is switched off for this user and marked
    /// "subscription expired" — only while `tested` is still the stored destination (a newer one was not
    /// refused). Returns whether it was.
    async fn record_destination_gone(
        &self,
        user: &UserId,
        channel: &ChannelName,
        tested: &[u8],
    ) -> Result<bool, StoreError>;

    /// Marks the destination verified (the user confirmed a test prompt arrived). MUST only succeed
    /// while the stored destination is the one a test send was accepted for; returns whether it did.
    async fn mark_verified(&self, user: &UserId, channel: &ChannelName) -> Result<bool, StoreError>;

    /// Whether the stored destination was found gone for good by its channel — a Web Push subscription
    /// answered 404/410 (SPEC §9): the channel was then switched off for this user, and stays marked
    /// "subscription expired" until a new destination is stored (which clears the mark). A store that
    /// keeps no such mark answers `false`.
    async fn destination_expired(&self, user: &UserId, channel: &ChannelName) -> Result<bool, StoreError> {
        let _ = (user, channel);
        Ok(false)
    }

    /// Up to `limit` stored destinations after `after` in `(user_id, channel)` order, for rotation.
    async fn destinations_after(
        &self,
        after: Option<(UserId, ChannelName)>,
        limit: u32,
    ) -> Result<Vec<StoredDestination>, StoreError>;

    /// Replaces a ciphertext only if it is still `old` (so a concurrent change is never overwritten).
    /// The ids of the keys the stored ciphertexts are under (destinations and the marks of accepted test
    /// sends), each once: what must be loaded for every destination to be readable.
    async fn key_ids_in_use(&self) -> Result<Vec<String>, StoreError>;

    async fn replace_destination(
        &self,
        user: &UserId,
        channel: &ChannelName,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError>;
}
