//! Per-user data keys for crypto-shredding (issue 42): each user gets a random 256-bit data key, wrapped
//! by the keyring's current key (the `DestinationCipher` port, bound to the user and to a slot no channel
//! can be named, so a wrapped key is never mistaken for a destination) and kept in the user-key vault
//! (`UserKeyVault`), apart from the data it protects. Destroying a user's key is what makes every copy of
//! content sealed under it unreadable; rotating the keyring re-wraps the keys (a few bytes per user)
//! instead of re-encrypting the content.

use std::collections::HashMap;
use std::sync::Arc;

use aes_gcm::aead::{Aead as _, KeyInit as _, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use herald_domain::{ChannelName, UserId};
use herald_ports::store::StoreError;
use herald_ports::{CipherError, DestinationCipher, UserKeyVault};
use rand::rngs::OsRng;
use rand::RngCore as _;
use secrecy::zeroize::Zeroizing;
use secrecy::{ExposeSecret as _, SecretString};

/// The length of a data key: AES-256.
pub const DATA_KEY_LEN: usize = 32;

/// The wrapping's second associated-data part: a channel name no configuration can give (channel names
/// are `[a-z0-9_-]`), so bytes wrapped here fail to open as any destination and the reverse.
const WRAP_SLOT: &str = "\u{0}user-data-key";

/// The first byte of a value sealed under a user's data key ([`DataKey::seal`]).
const SEALED_UNDER_USER_KEY: u8 = 0;
const NONCE_LEN: usize = 12;

/// The associated data of a sealed value: each part length-prefixed (u64, big endian), so that
/// `("ab", "c")` and `("a", "bc")` differ.
fn associated_data(context: &[&str]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(context.iter().map(|p| 8 + p.len()).sum());
    for part in context {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

/// One user's data key, unwrapped. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct DataKey(Arc<Zeroizing<[u8; DATA_KEY_LEN]>>);

impl DataKey {
    /// The key's bytes, for the content cipher.
    #[must_use]
    pub fn bytes(&self) -> &[u8; DATA_KEY_LEN] {
        &self.0
    }

    /// Seals `plaintext` under this key: `0x00 || 12-byte random nonce || AES-256-GCM ciphertext and
    /// tag`, bound to `context` (the row it belongs to, as length-prefixed parts: a sealed value copied
    /// into another row does not open). The leading zero byte tells it apart from a value sealed under
    /// the keyring directly, which starts with its key id's length (at least 1), so rows written before
    /// shredding stay readable.
    ///
    /// # Errors
    /// [`CipherError::Encrypt`] only for inputs AES-GCM refuses (many GiB).
    pub fn seal(&self, context: &[&str], plaintext: &[u8]) -> Result<Vec<u8>, CipherError> {
        let mut nonce = [0_u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let aad = associated_data(context);
        let sealed = self
            .cipher()
            .encrypt(&Nonce::from(nonce), Payload { msg: plaintext, aad: &aad })
            .map_err(|_| CipherError::Encrypt)?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(SEALED_UNDER_USER_KEY);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Opens bytes written by [`DataKey::seal`] for the same `context`.
    ///
    /// # Errors
    /// [`CipherError::Invalid`] when they are not such bytes, were changed, belong to another row or
    /// were sealed under another user's key.
    pub fn open(&self, context: &[&str], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, CipherError> {
        let Some((&SEALED_UNDER_USER_KEY, rest)) = sealed.split_first() else {
            return Err(CipherError::Invalid);
        };
        let (nonce, ciphertext) = rest.split_first_chunk::<NONCE_LEN>().ok_or(CipherError::Invalid)?;
        let aad = associated_data(context);
        self.cipher()
            .decrypt(&Nonce::from(*nonce), Payload { msg: ciphertext, aad: &aad })
            .map(Zeroizing::new)
            .map_err(|_| CipherError::Invalid)
    }

    /// Whether `stored` was sealed under a user's data key (rather than under the keyring directly).
    #[must_use]
    pub fn is_sealed_under_user_key(stored: &[u8]) -> bool {
        stored.first() == Some(&SEALED_UNDER_USER_KEY)
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(self.bytes().into())
    }

    fn generate() -> DataKey {
        let mut key = Zeroizing::new([0_u8; DATA_KEY_LEN]);
        OsRng.fill_bytes(key.as_mut());
        DataKey(Arc::new(key))
    }
}

impl PartialEq for DataKey {
    fn eq(&self, other: &DataKey) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(self.bytes().ct_eq(other.bytes()))
    }
}

impl Eq for DataKey {}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(…)")
    }
}

/// Why a user's key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The vault failed, or refused: [`StoreError::UserErased`] when the user's key was destroyed.
    #[error(transparent)]
    Vault(#[from] StoreError),
    /// The stored key does not unwrap (its wrapping key is not loaded, or the bytes were damaged).
    #[error("the user's data key cannot be unwrapped: {0}")]
    Unwrap(#[from] CipherError),
}

/// What a re-wrap did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewrapReport {
    pub examined: u64,
    pub rewrapped: u64,
    /// Changed or destroyed meanwhile; left as they are.
    pub skipped: u64,
    /// Users whose key did not unwrap (never their key itself).
    pub unreadable: Vec<String>,
}

/// The users' data keys: the vault where they are kept, the keyring that wraps them.
#[derive(Clone)]
pub struct UserKeys {
    vault: Arc<dyn UserKeyVault>,
    keyring: Arc<dyn DestinationCipher>,
}

impl UserKeys {
    #[must_use]
    pub fn new(vault: Arc<dyn UserKeyVault>, keyring: Arc<dyn DestinationCipher>) -> UserKeys {
        UserKeys { vault, keyring }
    }

    fn slot() -> ChannelName {
        ChannelName::new(WRAP_SLOT)
    }

    fn wrap(&self, user: &UserId, key: &DataKey) -> Result<Vec<u8>, CipherError> {
        let text = SecretString::from(BASE64.encode(key.bytes()));
        self.keyring.encrypt(user, &Self::slot(), &text)
    }

    fn unwrap(&self, user: &UserId, wrapped: &[u8]) -> Result<DataKey, CipherError> {
        let text = self.keyring.decrypt(user, &Self::slot(), wrapped)?;
        let bytes = Zeroizing::new(BASE64.decode(text.expose_secret()).map_err(|_| CipherError::Invalid)?);
        let key: [u8; DATA_KEY_LEN] = bytes.as_slice().try_into().map_err(|_| CipherError::Invalid)?;
        Ok(DataKey(Arc::new(Zeroizing::new(key))))
    }

    /// `user`'s key, made and stored now when the user has none (one vault round trip when it exists,
    /// two when it is made). Concurrent callers in any process get the same key.
    ///
    /// # Errors
    /// [`KeyError::Vault`] with [`StoreError::UserErased`] once the user's key was destroyed.
    pub async fn key_for(&self, user: &UserId) -> Result<DataKey, KeyError> {
        let candidate = DataKey::generate();
        let wrapped = self.wrap(user, &candidate)?;
        let stored = self.vault.get_or_insert(user, &wrapped).await?;
        if stored == wrapped {
            return Ok(candidate);
        }
        Ok(self.unwrap(user, &stored)?)
    }

    /// The keys of `users` that exist, in one vault round trip (the worker's batch). A user without a
    /// key (never made, or destroyed) is absent; a key that does not unwrap is an error naming nobody.
    ///
    /// # Errors
    /// Vault failures; [`KeyError::Unwrap`].
    pub async fn existing_keys(&self, users: &[UserId]) -> Result<HashMap<UserId, DataKey>, KeyError> {
        let found = self.vault.get_many(users).await?;
        let mut keys = HashMap::with_capacity(found.len());
        for row in found {
            let key = self.unwrap(&row.user, &row.wrapped)?;
            keys.insert(row.user, key);
        }
        Ok(keys)
    }

    /// Destroys `user`'s key for good (the erasure's first step): `true` when a key was destroyed now.
    ///
    /// # Errors
    /// Vault failures.
    pub async fn destroy(&self, user: &UserId) -> Result<bool, StoreError> {
        self.vault.destroy(user).await
    }

    /// Re-wraps every stored key that is not under the keyring's current key, `batch` at a time; a key
    /// changed or destroyed meanwhile is skipped, one that does not unwrap is reported by its user.
    ///
    /// # Errors
    /// Vault failures; a wrapping failure.
    pub async fn rewrap(&self, batch: u32) -> Result<RewrapReport, KeyError> {
        let mut report = RewrapReport::default();
        let mut after = None;
        loop {
            let page = self.vault.page(after.clone(), batch.max(1)).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.user.clone());
            for row in &page {
                report.examined += 1;
                if !self.keyring.needs_rotation(&row.wrapped) {
                    continue;
                }
                let key = match self.unwrap(&row.user, &row.wrapped) {
                    Ok(key) => key,
                    Err(error) => {
                        report.unreadable.push(format!("user {}: {error}", row.user));
                        continue;
                    }
                };
                let new = self.wrap(&row.user, &key)?;
                if self.vault.replace(&row.user, &row.wrapped, &new).await? {
                    report.rewrapped += 1;
                } else {
                    report.skipped += 1;
                }
            }
        }
        Ok(report)
    }
}

/// Seals a destination for the row `(user, channel)`: under the user's data key when there is a vault
/// (`keys`; the key is made on first use), else under the keyring as before.
///
/// # Errors
/// [`KeyError::Vault`] (with [`StoreError::UserErased`] for an erased user), a sealing failure.
pub async fn seal_destination(
    keys: Option<&UserKeys>,
    keyring: &dyn DestinationCipher,
    user: &UserId,
    channel: &ChannelName,
    plaintext: &SecretString,
) -> Result<Vec<u8>, KeyError> {
    match keys {
        Some(keys) => {
            let key = keys.key_for(user).await?;
            Ok(key.seal(&[user.as_str(), channel.as_str()], plaintext.expose_secret().as_bytes())?)
        }
        None => Ok(keyring.encrypt(user, channel, plaintext)?),
    }
}

/// Opens a stored destination of `(user, channel)` however it was sealed: under the user's data key
/// (`key`, `None` when the user has none — destroyed, or no vault) or under the keyring directly (a row
/// written before the vault, which stays readable).
///
/// # Errors
/// [`CipherError::Invalid`] when the user's key is missing or the bytes do not open; the keyring's errors.
pub fn open_destination(
    key: Option<&DataKey>,
    keyring: &dyn DestinationCipher,
    user: &UserId,
    channel: &ChannelName,
    stored: &[u8],
) -> Result<SecretString, CipherError> {
    if !DataKey::is_sealed_under_user_key(stored) {
        return keyring.decrypt(user, channel, stored);
    }
    let key = key.ok_or(CipherError::Invalid)?;
    let plain = key.open(&[user.as_str(), channel.as_str()], stored)?;
    let text = std::str::from_utf8(&plain).map_err(|_| CipherError::Invalid)?;
    Ok(SecretString::from(text.to_owned()))
}

/// As [`open_destination`], reading the user's key from the vault when the bytes need it (one round trip).
///
/// # Errors
/// As [`open_destination`]; [`KeyError::Vault`].
pub async fn open_destination_now(
    keys: Option<&UserKeys>,
    keyring: &dyn DestinationCipher,
    user: &UserId,
    channel: &ChannelName,
    stored: &[u8],
) -> Result<SecretString, KeyError> {
    let key = match keys {
        Some(keys) if DataKey::is_sealed_under_user_key(stored) => {
            keys.existing_keys(std::slice::from_ref(user)).await?.remove(user)
        }
        _ => None,
    };
    Ok(open_destination(key.as_ref(), keyring, user, channel, stored)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_content_opens_only_under_its_key_and_for_its_row() {
        let (key, other) = (DataKey::generate(), DataKey::generate());
        let row = ["alice", "notification", "42"];
        let sealed = key.seal(&row, b"your parcel arrives today").expect("seal");
        assert!(DataKey::is_sealed_under_user_key(&sealed));
        assert_eq!(key.open(&row, &sealed).expect("open").as_slice(), b"your parcel arrives today");
        assert_ne!(key.seal(&row, b"your parcel arrives today").expect("seal"), sealed, "a fresh nonce each time");
        assert!(!sealed.windows(6).any(|w| w == b"parcel"), "the text is not in the sealed bytes");
        // Another user's key, another row, a changed byte, a cut: none opens.
        assert_eq!(other.open(&row, &sealed), Err(CipherError::Invalid));
        assert_eq!(key.open(&["alice", "notification", "43"], &sealed), Err(CipherError::Invalid));
        assert_eq!(key.open(&["alicen", "otification", "42"], &sealed), Err(CipherError::Invalid));
        let mut changed = sealed.clone();
        *changed.last_mut().expect("bytes") ^= 1;
        assert_eq!(key.open(&row, &changed), Err(CipherError::Invalid));
        for cut in [0, 1, 13, sealed.len() - 1] {
            assert_eq!(key.open(&row, &sealed[..cut]), Err(CipherError::Invalid), "cut at {cut}");
        }
    }

    #[test]
    fn a_value_sealed_under_the_keyring_is_told_apart_by_its_first_byte() {
        // The keyring's format starts with its key id's length, never zero.
        let keyring_sealed = [2_u8, b'k', b'1', 0, 0, 0];
        assert!(!DataKey::is_sealed_under_user_key(&keyring_sealed));
        assert!(!DataKey::is_sealed_under_user_key(&[]));
        assert_eq!(DataKey::generate().open(&["u"], &keyring_sealed), Err(CipherError::Invalid));
    }
}
