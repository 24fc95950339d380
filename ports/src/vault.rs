//! The user-key vault port (issue 42, crypto-shredding): where each user's data key is kept, *wrapped*
//! (sealed under the keyring's current key by its caller), apart from the data it protects.
//!
//! The point of the port is *where* the keys live: not in the database whose backups, WAL archives and
//! replicas hold the users' content, so that destroying a user's key makes every copy of that content
//! unreadable. Herald's adapter is a PostgreSQL database of its own (`herald_postgres::PgVault`); a KMS
//! or an HSM fits the same trait. The vault sees only wrapped keys: it can neither read them nor the data.

use async_trait::async_trait;
use herald_domain::UserId;

use crate::store::StoreError;

/// A user's wrapped data key as the vault stores it: opaque bytes (for Herald's keyring:
/// `key id || nonce || AES-256-GCM ciphertext`, the key id being the wrapping key's version).
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedKey {
    pub user: UserId,
    pub wrapped: Vec<u8>,
}

impl std::fmt::Debug for WrappedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Wrapped bytes are not secret without the keyring, but nothing gains from printing them.
        f.debug_struct("WrappedKey").field("user", &self.user).field("bytes", &self.wrapped.len()).finish()
    }
}

/// Keeps one wrapped data key per user; destroys it for good.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait UserKeyVault: Send + Sync {
    /// Stores `candidate` as `user`'s key unless the user has one, and answers the stored one (the
    /// candidate, or the existing key when another writer came first). Refused with
    /// [`StoreError::UserErased`] once the user's key was destroyed: a destroyed key never comes back,
    /// and no new key is made for an erased user.
    async fn get_or_insert(&self, user: &UserId, candidate: &[u8]) -> Result<Vec<u8>, StoreError>;

    /// The stored keys of `users`, in one round trip; a user without a key (never made, or destroyed) is
    /// absent from the answer.
    async fn get_many(&self, users: &[UserId]) -> Result<Vec<WrappedKey>, StoreError>;

    /// Destroys `user`'s key, for good, and remembers that it was destroyed. `true` when a key was
    /// destroyed now; `false` when there was none or it was destroyed before.
    async fn destroy(&self, user: &UserId) -> Result<bool, StoreError>;

    /// A page of stored keys in user order, after `after`, at most `limit` (for re-wrapping them).
    async fn page(&self, after: Option<UserId>, limit: u32) -> Result<Vec<WrappedKey>, StoreError>;

    /// Replaces `user`'s key `old` by `new` (the same data key wrapped under another key); `false`
    /// when the stored key is no longer `old` (changed or destroyed meanwhile), writing nothing.
    async fn replace(&self, user: &UserId, old: &[u8], new: &[u8]) -> Result<bool, StoreError>;
}
