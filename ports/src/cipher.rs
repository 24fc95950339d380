//! The destination cipher port (SPEC §8). Synchronous: it does no I/O.

use herald_domain::{ChannelName, UserId};
use secrecy::SecretString;

/// Why a destination could not be encrypted or decrypted. Never carries the plaintext or key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    #[error("stored destination was encrypted under key `{key_id}`, which is not loaded")]
    UnknownKey { key_id: String },
    #[error("stored destination is damaged, truncated or belongs to another row")]
    Invalid,
    #[error("destination could not be encrypted")]
    Encrypt,
}

#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait DestinationCipher: Send + Sync {
    /// Encrypts under the current key, bound to the row `(user, channel)`.
    fn encrypt(&self, user: &UserId, channel: &ChannelName, plaintext: &SecretString) -> Result<Vec<u8>, CipherError>;

    /// Decrypts bytes written by [`DestinationCipher::encrypt`] for the same row, under any loaded key.
    fn decrypt(&self, user: &UserId, channel: &ChannelName, stored: &[u8]) -> Result<SecretString, CipherError>;

    /// True when the bytes are not under the current key (and so should be re-encrypted).
    fn needs_rotation(&self, stored: &[u8]) -> bool;

    /// True when the key `key_id` is loaded (a destination under it can be decrypted).
    fn has_key(&self, key_id: &str) -> bool;
}
