//! Encryption of channel destinations at rest (SPEC §8).
//!
//! A destination (a webhook address, a Miaotixing code, …) is stored only as
//! versioned AES-256-GCM ciphertext. The stored bytes are
//!
//! ```text
//! [key_id_len: u8][key_id bytes][12-byte random nonce][ciphertext || 16-byte tag]
//! ```
//!
//! i.e. "key id || nonce || ciphertext". The key id in front is the version:
//! a [`Keyring`] can hold several keys, encrypts with the current one and
//! decrypts with whichever key the bytes name, so keys can be rotated without
//! a flag day ([`Keyring::needs_rotation`], [`Keyring::rotate`]).
//!
//! The associated data is the row identity `(user_id, channel)`, so a
//! ciphertext copied into another user's or another channel's row fails to
//! decrypt instead of delivering someone else's destination.
//!
//! Nonces are 96 random bits from the operating system. With random nonces a
//! single key should not seal more than about 2^32 values; one value per
//! (user, channel) row, re-sealed on change or rotation, stays far below that.
//!
//! Nothing in this module puts key material or plaintext into an error,
//! a `Debug` rendering or a `Display` rendering.

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand::rngs::OsRng;
use rand::RngCore as _;
use secrecy::zeroize::{Zeroize as _, Zeroizing};
use secrecy::{ExposeSecret as _, SecretString};

/// Length of an AES-256 key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of the random GCM nonce stored after the key id.
pub const NONCE_LEN: usize = 12;
/// Length of the GCM authentication tag at the end of the ciphertext.
pub const TAG_LEN: usize = 16;
/// Longest key id: its length must fit in the one-byte length prefix.
pub const MAX_KEY_ID_LEN: usize = u8::MAX as usize;

/// Why a [`Keyring`] could not be built from configuration.
///
/// Every variant names the offending key id (ids are not secret) and says what
/// is wrong; none carries any part of the key itself. In particular the base64
/// decoder's own error is dropped on purpose: it quotes the offending byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// A key was given with an empty id.
    #[error("key id is empty")]
    EmptyKeyId,
    /// A key id does not fit the one-byte length prefix of the ciphertext.
    #[error("key id {key_id:?} is {len} bytes long; at most 255 bytes are allowed")]
    KeyIdTooLong {
        /// The offending id.
        key_id: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A key id contains a character outside `[A-Za-z0-9_-]`.
    #[error("key id {key_id:?} may contain only A-Z, a-z, 0-9, '_' and '-'")]
    InvalidKeyId {
        /// The offending id.
        key_id: String,
    },
    /// The same key id was given twice.
    #[error("key id {key_id:?} is given more than once")]
    DuplicateKeyId {
        /// The repeated id.
        key_id: String,
    },
    /// The key is not valid (standard, padded) base64.
    #[error("key {key_id:?} is not valid base64")]
    NotBase64 {
        /// The id of the key that failed to decode.
        key_id: String,
    },
    /// The key decodes to something other than 32 bytes.
    #[error("key {key_id:?} decodes to {len} bytes; AES-256 needs exactly 32")]
    WrongLength {
        /// The id of the key with the wrong length.
        key_id: String,
        /// How many bytes it decoded to.
        len: usize,
    },
    /// The `current` id names no loaded key.
    #[error("current key {key_id:?} is not among the loaded keys")]
    CurrentNotLoaded {
        /// The `current` id as configured.
        key_id: String,
    },
}

/// Why a destination could not be sealed or opened.
///
/// None of the variants carries plaintext or key bytes, so these errors can be
/// logged and returned freely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CipherError {
    /// The bytes are shorter than their own header says they must be
    /// (including empty input).
    #[error("encrypted destination is truncated")]
    Truncated,
    /// The key id in the header is empty, not UTF-8 or has forbidden
    /// characters: the bytes were not written by a [`Keyring`].
    #[error("encrypted destination has a malformed key id")]
    MalformedKeyId,
    /// The bytes are sealed under a key that is not loaded (for example one
    /// removed after a rotation that missed this row).
    #[error("encrypted destination uses key {key_id:?}, which is not loaded")]
    UnknownKey {
        /// The key id named in the bytes.
        key_id: String,
    },
    /// Authentication failed: the bytes were modified, or they belong to a
    /// different `(user_id, channel)` row.
    #[error("encrypted destination failed authentication (modified, or moved from another row)")]
    Tampered,
    /// Authentication succeeded but the plaintext is not UTF-8. Only possible
    /// if something other than [`Keyring::encrypt`] sealed it with our key.
    #[error("decrypted destination is not valid UTF-8")]
    NotUtf8,
    /// AES-GCM refused to seal the plaintext (only for inputs of many GiB).
    #[error("destination could not be encrypted")]
    Encrypt,
}

/// The loaded destination keys and the id of the one new writes use.
///
/// Built once from the `[keys]` configuration section (SPEC §12). Its `Debug`
/// output lists only key ids.
pub struct Keyring {
    keys: BTreeMap<String, Aes256Gcm>,
    current: String,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("key_ids", &self.keys.keys().collect::<Vec<_>>())
            .field("current", &self.current)
            .finish()
    }
}

impl Keyring {
    /// Builds a keyring from `(key id, base64 of 32 bytes)` pairs and the id of
    /// the key that encrypts new values.
    ///
    /// Leading and trailing ASCII whitespace around a key is ignored, because
    /// keys given as `…_file` paths usually end with a newline.
    ///
    /// # Errors
    ///
    /// A [`KeyringError`] naming the first key id that is empty, too long,
    /// has forbidden characters, is repeated, is not base64 or not 32 bytes,
    /// or [`KeyringError::CurrentNotLoaded`] when `current` names no key.
    pub fn new<I>(keys: I, current: &str) -> Result<Self, KeyringError>
    where
        I: IntoIterator<Item = (String, SecretString)>,
    {
        let mut loaded = BTreeMap::new();
        for (key_id, key) in keys {
            validate_key_id(&key_id)?;
            if loaded.contains_key(&key_id) {
                return Err(KeyringError::DuplicateKeyId { key_id });
            }
            let cipher = decode_key(&key_id, &key)?;
            loaded.insert(key_id, cipher);
        }
        if !loaded.contains_key(current) {
            return Err(KeyringError::CurrentNotLoaded { key_id: current.to_owned() });
        }
        Ok(Self { keys: loaded, current: current.to_owned() })
    }

    /// Generates a fresh random key, base64-encoded as the `[keys]` section
    /// expects it (for `herald keys generate`).
    #[must_use]
    pub fn generate_key() -> SecretString {
        let mut key = Zeroizing::new([0_u8; KEY_LEN]);
        OsRng.fill_bytes(key.as_mut());
        SecretString::from(BASE64.encode(key.as_ref()))
    }

    /// The id of the key that [`encrypt`](Self::encrypt) uses.
    #[must_use]
    pub fn current_key_id(&self) -> &str {
        &self.current
    }

    /// The ids of all loaded keys, in sorted order.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Seals `plaintext` for the row `(user_id, channel)` under the current key.
    ///
    /// Each call draws a fresh nonce, so sealing the same value twice gives
    /// different bytes.
    ///
    /// # Errors
    ///
    /// [`CipherError::Encrypt`] only if AES-GCM refuses the input length.
    pub fn encrypt(&self, user_id: &str, channel: &str, plaintext: &SecretString) -> Result<Vec<u8>, CipherError> {
        let key_id = self.current.as_str();
        // `new` guarantees the current id is loaded; an error rather than a
        // panic keeps that an invariant of this type, not of every caller.
        let cipher = self.keys.get(key_id).ok_or_else(|| CipherError::UnknownKey { key_id: key_id.to_owned() })?;
        // Validated in `new`: at most 255 bytes, so the cast cannot truncate.
        let key_id_len = u8::try_from(key_id.len()).map_err(|_| CipherError::MalformedKeyId)?;

        let mut nonce = [0_u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);

        let plaintext = plaintext.expose_secret().as_bytes();
        let header_len = 1 + key_id.len() + NONCE_LEN;
        let mut out = Vec::with_capacity(header_len + plaintext.len() + TAG_LEN);
        out.push(key_id_len);
        out.extend_from_slice(key_id.as_bytes());
        out.extend_from_slice(&nonce);
        // Encrypted in place inside the output buffer; capacity was reserved
        // for the tag, so the buffer never reallocates while it holds
        // plaintext.
        out.extend_from_slice(plaintext);
        let aad = associated_data(user_id, channel);
        match cipher.encrypt_in_place_detached(&Nonce::from(nonce), &aad, &mut out[header_len..]) {
            Ok(tag) => {
                out.extend_from_slice(&tag);
                Ok(out)
            }
            Err(_) => {
                out.zeroize();
                Err(CipherError::Encrypt)
            }
        }
    }

    /// Opens bytes written by [`encrypt`](Self::encrypt) for the row
    /// `(user_id, channel)`, with the key the bytes name.
    ///
    /// # Errors
    ///
    /// [`CipherError::Truncated`] or [`CipherError::MalformedKeyId`] for bytes
    /// that are not a sealed destination, [`CipherError::UnknownKey`] when
    /// their key is not loaded, [`CipherError::Tampered`] when they were
    /// modified or belong to another row.
    pub fn decrypt(&self, user_id: &str, channel: &str, bytes: &[u8]) -> Result<SecretString, CipherError> {
        let sealed = Sealed::parse(bytes)?;
        let cipher =
            self.keys.get(sealed.key_id).ok_or_else(|| CipherError::UnknownKey { key_id: sealed.key_id.to_owned() })?;
        let aad = associated_data(user_id, channel);
        // A boxed slice has exactly the plaintext's length, so turning it into
        // the `Box<str>` inside `SecretString` below does not reallocate and
        // leave an unwiped copy behind.
        let mut buffer: Box<[u8]> = sealed.ciphertext.into();
        if cipher
            .decrypt_in_place_detached(&Nonce::from(*sealed.nonce), &aad, &mut buffer, &Tag::from(*sealed.tag))
            .is_err()
        {
            // aes-gcm checks the tag before decrypting, so this is still
            // ciphertext; wiping it costs nothing.
            buffer.zeroize();
            return Err(CipherError::Tampered);
        }
        match String::from_utf8(buffer.into_vec()) {
            Ok(text) => Ok(SecretString::from(text)),
            Err(err) => {
                err.into_bytes().zeroize();
                Err(CipherError::NotUtf8)
            }
        }
    }

    /// The id of the key that sealed `bytes`, without decrypting them.
    ///
    /// # Errors
    ///
    /// [`CipherError::Truncated`] or [`CipherError::MalformedKeyId`] when the
    /// bytes are not a sealed destination. The key need not be loaded.
    pub fn key_id_of(bytes: &[u8]) -> Result<&str, CipherError> {
        Sealed::parse(bytes).map(|sealed| sealed.key_id)
    }

    /// Whether `bytes` should be re-encrypted by the rotation command: true
    /// unless they are well-formed and sealed under the current key.
    ///
    /// Malformed bytes count as needing rotation so that the rotation command
    /// visits them and reports the decryption error instead of skipping them
    /// silently.
    #[must_use]
    pub fn needs_rotation(&self, bytes: &[u8]) -> bool {
        !matches!(Self::key_id_of(bytes), Ok(key_id) if key_id == self.current)
    }

    /// Re-seals `bytes` under the current key if they are under an older one.
    ///
    /// Returns `Ok(None)` when they are already under the current key (after
    /// checking that they still decrypt for this row), `Ok(Some(new_bytes))`
    /// otherwise.
    ///
    /// # Errors
    ///
    /// Any error of [`decrypt`](Self::decrypt) or [`encrypt`](Self::encrypt).
    pub fn rotate(&self, user_id: &str, channel: &str, bytes: &[u8]) -> Result<Option<Vec<u8>>, CipherError> {
        let plaintext = self.decrypt(user_id, channel, bytes)?;
        if self.needs_rotation(bytes) {
            self.encrypt(user_id, channel, &plaintext).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The parts of a sealed destination, borrowed from the stored bytes.
struct Sealed<'a> {
    key_id: &'a str,
    nonce: &'a [u8; NONCE_LEN],
    ciphertext: &'a [u8],
    tag: &'a [u8; TAG_LEN],
}

impl<'a> Sealed<'a> {
    /// Splits stored bytes into their parts. Every split is length-checked,
    /// so no input can make this panic.
    fn parse(bytes: &'a [u8]) -> Result<Self, CipherError> {
        let (&key_id_len, rest) = bytes.split_first().ok_or(CipherError::Truncated)?;
        let (key_id, rest) = rest.split_at_checked(usize::from(key_id_len)).ok_or(CipherError::Truncated)?;
        let (nonce, rest) = rest.split_first_chunk::<NONCE_LEN>().ok_or(CipherError::Truncated)?;
        let (ciphertext, tag) = rest.split_last_chunk::<TAG_LEN>().ok_or(CipherError::Truncated)?;
        let key_id =
            std::str::from_utf8(key_id).ok().filter(|id| is_valid_key_id(id)).ok_or(CipherError::MalformedKeyId)?;
        Ok(Self { key_id, nonce, ciphertext, tag })
    }
}

/// The AEAD associated data for a row: both parts length-prefixed (u64, big
/// endian), so `("ab", "c")` and `("a", "bc")` cannot collide.
fn associated_data(user_id: &str, channel: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(16 + user_id.len() + channel.len());
    for part in [user_id, channel] {
        // usize -> u64 is lossless on every platform Rust supports.
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

fn is_valid_key_id(key_id: &str) -> bool {
    !key_id.is_empty()
        && key_id.len() <= MAX_KEY_ID_LEN
        && key_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_key_id(key_id: &str) -> Result<(), KeyringError> {
    if key_id.is_empty() {
        return Err(KeyringError::EmptyKeyId);
    }
    if key_id.len() > MAX_KEY_ID_LEN {
        return Err(KeyringError::KeyIdTooLong { key_id: key_id.to_owned(), len: key_id.len() });
    }
    if !is_valid_key_id(key_id) {
        return Err(KeyringError::InvalidKeyId { key_id: key_id.to_owned() });
    }
    Ok(())
}

/// Decodes one configured key into a cipher. The decoded bytes live in a
/// `Zeroizing` buffer and are wiped as soon as the cipher is built.
fn decode_key(key_id: &str, key: &SecretString) -> Result<Aes256Gcm, KeyringError> {
    let bytes = Zeroizing::new(
        BASE64
            .decode(key.expose_secret().trim_ascii())
            .map_err(|_| KeyringError::NotBase64 { key_id: key_id.to_owned() })?,
    );
    if bytes.len() != KEY_LEN {
        return Err(KeyringError::WrongLength { key_id: key_id.to_owned(), len: bytes.len() });
    }
    Aes256Gcm::new_from_slice(&bytes)
        .map_err(|_| KeyringError::WrongLength { key_id: key_id.to_owned(), len: bytes.len() })
}

/// The port the application uses (SPEC §8). The row identity `(user, channel)` is the associated data.
/// The port's errors are coarser: the application only needs to tell a missing key (an operator must
/// load it) from damaged bytes.
impl herald_ports::DestinationCipher for Keyring {
    fn encrypt(
        &self,
        user: &herald_domain::UserId,
        channel: &herald_domain::ChannelName,
        plaintext: &SecretString,
    ) -> Result<Vec<u8>, herald_ports::CipherError> {
        Keyring::encrypt(self, user.as_str(), channel.as_str(), plaintext)
            .map_err(|_| herald_ports::CipherError::Encrypt)
    }

    fn decrypt(
        &self,
        user: &herald_domain::UserId,
        channel: &herald_domain::ChannelName,
        stored: &[u8],
    ) -> Result<SecretString, herald_ports::CipherError> {
        Keyring::decrypt(self, user.as_str(), channel.as_str(), stored).map_err(|err| match err {
            CipherError::UnknownKey { key_id } => herald_ports::CipherError::UnknownKey { key_id },
            CipherError::Truncated
            | CipherError::MalformedKeyId
            | CipherError::Tampered
            | CipherError::NotUtf8
            | CipherError::Encrypt => herald_ports::CipherError::Invalid,
        })
    }

    fn needs_rotation(&self, stored: &[u8]) -> bool {
        Keyring::needs_rotation(self, stored)
    }

    fn has_key(&self, key_id: &str) -> bool {
        self.key_ids().any(|id| id == key_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DESTINATION: &str = "tXk3Q9a";

    fn key(seed: u8) -> SecretString {
        SecretString::from(BASE64.encode([seed; KEY_LEN]))
    }

    fn ring(keys: &[(&str, u8)], current: &str) -> Keyring {
        Keyring::new(keys.iter().map(|&(id, seed)| (id.to_owned(), key(seed))), current).expect("valid test keyring")
    }

    fn secret(text: &str) -> SecretString {
        SecretString::from(text)
    }

    fn build_err(keys: Vec<(&str, SecretString)>, current: &str) -> KeyringError {
        Keyring::new(keys.into_iter().map(|(id, k)| (id.to_owned(), k)), current)
            .expect_err("keyring should be refused")
    }

    #[test]
    fn round_trip() {
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        let opened = ring.decrypt("u-1", "push", &sealed).unwrap();
        assert_eq!(opened.expose_secret(), DESTINATION);
    }

    #[test]
    fn layout_is_key_id_nonce_ciphertext_tag() {
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert_eq!(sealed[0], 2);
        assert_eq!(&sealed[1..3], b"k1");
        assert_eq!(sealed.len(), 1 + 2 + NONCE_LEN + DESTINATION.len() + TAG_LEN);
        assert!(!sealed.windows(DESTINATION.len()).any(|w| w == DESTINATION.as_bytes()));
        assert_eq!(Keyring::key_id_of(&sealed), Ok("k1"));
    }

    #[test]
    fn same_plaintext_seals_differently_each_time() {
        let ring = ring(&[("k1", 1)], "k1");
        let a = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        let b = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn empty_plaintext_round_trips() {
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret("")).unwrap();
        assert_eq!(ring.decrypt("u-1", "push", &sealed).unwrap().expose_secret(), "");
    }

    #[test]
    fn other_row_is_tampered() {
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        for (user, channel) in [("u-2", "push"), ("u-1", "sms"), ("", ""), ("u-1push", "")] {
            assert_eq!(
                ring.decrypt(user, channel, &sealed).unwrap_err(),
                CipherError::Tampered,
                "row ({user:?}, {channel:?})"
            );
        }
    }

    #[test]
    fn row_identity_encoding_is_unambiguous() {
        assert_ne!(associated_data("ab", "c"), associated_data("a", "bc"));
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("ab", "c", &secret(DESTINATION)).unwrap();
        assert_eq!(ring.decrypt("a", "bc", &sealed).unwrap_err(), CipherError::Tampered);
    }

    #[test]
    fn every_single_byte_flip_is_an_error() {
        let ring = ring(&[("k1", 1), ("k2", 2)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        for index in 0..sealed.len() {
            for mask in [0x01_u8, 0x80, 0xff] {
                let mut bytes = sealed.clone();
                bytes[index] ^= mask;
                let result = ring.decrypt("u-1", "push", &bytes);
                assert!(result.is_err(), "flip {mask:#04x} at byte {index} decrypted");
            }
        }
    }

    #[test]
    fn flipping_the_key_id_to_another_loaded_key_is_tampered() {
        let ring = ring(&[("k1", 1), ("k3", 3)], "k1");
        let mut sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        sealed[2] = b'3';
        assert_eq!(Keyring::key_id_of(&sealed), Ok("k3"));
        assert_eq!(ring.decrypt("u-1", "push", &sealed).unwrap_err(), CipherError::Tampered);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let ring = ring(&[("k1", 1)], "k1");
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        for len in 0..sealed.len() {
            let result = ring.decrypt("u-1", "push", &sealed[..len]);
            assert!(result.is_err(), "prefix of {len} bytes decrypted");
        }
        // Below the minimum length the error is specifically `Truncated`.
        let minimum = 1 + 2 + NONCE_LEN + TAG_LEN;
        for len in 0..minimum {
            assert_eq!(
                ring.decrypt("u-1", "push", &sealed[..len]).unwrap_err(),
                CipherError::Truncated,
                "prefix of {len} bytes"
            );
            assert_eq!(Keyring::key_id_of(&sealed[..len]), Err(CipherError::Truncated));
        }
    }

    #[test]
    fn malformed_key_ids_are_reported() {
        let ring = ring(&[("k1", 1)], "k1");
        let body = [0_u8; NONCE_LEN + TAG_LEN];
        let mut empty_id = vec![0_u8];
        empty_id.extend_from_slice(&body);
        let mut bad_chars = vec![2_u8, b'k', b'/'];
        bad_chars.extend_from_slice(&body);
        let mut not_utf8 = vec![2_u8, 0xc3, 0x28];
        not_utf8.extend_from_slice(&body);
        for bytes in [empty_id, bad_chars, not_utf8] {
            assert_eq!(ring.decrypt("u-1", "push", &bytes).unwrap_err(), CipherError::MalformedKeyId);
            assert!(ring.needs_rotation(&bytes));
        }
    }

    #[test]
    fn unknown_key_id() {
        let old = ring(&[("k9", 9)], "k9");
        let sealed = old.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        let ring = ring(&[("k1", 1)], "k1");
        assert_eq!(
            ring.decrypt("u-1", "push", &sealed).unwrap_err(),
            CipherError::UnknownKey { key_id: "k9".to_owned() }
        );
    }

    #[test]
    fn two_key_versions() {
        let v1 = ring(&[("k1", 1), ("k2", 2)], "k1");
        let old = v1.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert!(!v1.needs_rotation(&old));

        let v2 = ring(&[("k1", 1), ("k2", 2)], "k2");
        assert_eq!(v2.current_key_id(), "k2");
        assert_eq!(v2.decrypt("u-1", "push", &old).unwrap().expose_secret(), DESTINATION);
        assert!(v2.needs_rotation(&old));

        let new = v2.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert_eq!(Keyring::key_id_of(&new), Ok("k2"));
        assert!(!v2.needs_rotation(&new));
    }

    #[test]
    fn rotation_then_removal() {
        let v1 = ring(&[("k1", 1)], "k1");
        let rows = [("u-1", "push"), ("u-2", "miaotixing"), ("u-3", "sms")];
        let stored: Vec<Vec<u8>> = rows
            .iter()
            .map(|(user, channel)| v1.encrypt(user, channel, &secret(&format!("{user}/{channel}"))).unwrap())
            .collect();

        let v2 = ring(&[("k1", 1), ("k2", 2)], "k2");
        let rotated: Vec<Vec<u8>> = rows
            .iter()
            .zip(&stored)
            .map(|((user, channel), bytes)| v2.rotate(user, channel, bytes).unwrap().expect("k1 rows are re-sealed"))
            .collect();
        for ((user, channel), bytes) in rows.iter().zip(&rotated) {
            assert!(!v2.needs_rotation(bytes));
            assert_eq!(v2.rotate(user, channel, bytes).unwrap(), None);
        }

        let v3 = ring(&[("k2", 2)], "k2");
        for ((user, channel), bytes) in rows.iter().zip(&rotated) {
            assert_eq!(v3.decrypt(user, channel, bytes).unwrap().expose_secret(), format!("{user}/{channel}"));
        }
        // A row the rotation missed is reported, not silently lost.
        assert_eq!(
            v3.decrypt("u-1", "push", &stored[0]).unwrap_err(),
            CipherError::UnknownKey { key_id: "k1".to_owned() }
        );
    }

    #[test]
    fn generated_keys_load_and_differ() {
        let a = Keyring::generate_key();
        let b = Keyring::generate_key();
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert_eq!(BASE64.decode(a.expose_secret()).unwrap().len(), KEY_LEN);
        let ring = Keyring::new([("k1".to_owned(), a)], "k1").unwrap();
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert_eq!(ring.decrypt("u-1", "push", &sealed).unwrap().expose_secret(), DESTINATION);
    }

    #[test]
    fn key_with_trailing_newline_is_accepted() {
        let padded = SecretString::from(format!("{}\n", key(1).expose_secret()));
        let a = Keyring::new([("k1".to_owned(), padded)], "k1").unwrap();
        let b = ring(&[("k1", 1)], "k1");
        let sealed = a.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert!(b.decrypt("u-1", "push", &sealed).is_ok());
    }

    #[test]
    fn invalid_configuration_names_the_key() {
        let short = SecretString::from(BASE64.encode([7_u8; 16]));
        let long_id = "k".repeat(256);
        let cases = [
            (build_err(vec![("k1", secret("not base64!"))], "k1"), KeyringError::NotBase64 { key_id: "k1".to_owned() }),
            (build_err(vec![("k1", short)], "k1"), KeyringError::WrongLength { key_id: "k1".to_owned(), len: 16 }),
            (build_err(vec![("k1", key(1))], "k2"), KeyringError::CurrentNotLoaded { key_id: "k2".to_owned() }),
            (build_err(vec![], "k1"), KeyringError::CurrentNotLoaded { key_id: "k1".to_owned() }),
            (build_err(vec![("", key(1))], ""), KeyringError::EmptyKeyId),
            (
                build_err(vec![(long_id.as_str(), key(1))], "k1"),
                KeyringError::KeyIdTooLong { key_id: long_id.clone(), len: 256 },
            ),
            (build_err(vec![("k 1", key(1))], "k 1"), KeyringError::InvalidKeyId { key_id: "k 1".to_owned() }),
            (
                build_err(vec![("k1", key(1)), ("k1", key(2))], "k1"),
                KeyringError::DuplicateKeyId { key_id: "k1".to_owned() },
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        assert!(build_err(vec![("k1", secret("not base64!"))], "k1").to_string().contains("\"k1\""));
        // 255 bytes is the limit, and it is allowed.
        let max_id = "k".repeat(MAX_KEY_ID_LEN);
        let ring = Keyring::new([(max_id.clone(), key(1))], &max_id).unwrap();
        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        assert_eq!(Keyring::key_id_of(&sealed), Ok(max_id.as_str()));
    }

    #[test]
    fn debug_and_errors_leak_neither_key_nor_plaintext() {
        let key_b64 = key(0x5a).expose_secret().to_owned();
        let ring = ring(&[("k1", 0x5a), ("k2", 2)], "k1");
        let debug = format!("{ring:?}");
        assert!(debug.contains("k1") && debug.contains("k2"));
        assert!(!debug.contains(&key_b64));

        let sealed = ring.encrypt("u-1", "push", &secret(DESTINATION)).unwrap();
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        let errors = [
            ring.decrypt("u-2", "push", &sealed).unwrap_err(),
            ring.decrypt("u-1", "push", &tampered).unwrap_err(),
            ring.decrypt("u-1", "push", &sealed[..5]).unwrap_err(),
            CipherError::UnknownKey { key_id: "k9".to_owned() },
        ];
        // A bad key that is almost valid base64: the message must not quote it.
        let bad_key = format!("{}$", &key_b64[..key_b64.len() - 1]);
        let config_error = build_err(vec![("k1", SecretString::from(bad_key.as_str()))], "k1");
        let rendered: Vec<String> = errors
            .iter()
            .flat_map(|e| [format!("{e:?}"), e.to_string()])
            .chain([format!("{config_error:?}"), config_error.to_string()])
            .collect();
        for text in rendered {
            assert!(!text.contains(DESTINATION), "{text}");
            assert!(!text.contains(&key_b64), "{text}");
            assert!(!text.contains(&bad_key), "{text}");
            assert!(!text.contains('$'), "{text}");
        }
    }

    proptest! {
        #[test]
        fn prop_round_trip(user in ".{0,40}", channel in ".{0,20}", text in ".{0,200}") {
            let ring = ring(&[("k1", 1)], "k1");
            let sealed = ring.encrypt(&user, &channel, &secret(&text)).unwrap();
            let opened = ring.decrypt(&user, &channel, &sealed).unwrap();
            prop_assert_eq!(opened.expose_secret(), text.as_str());
        }

        #[test]
        fn prop_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let ring = ring(&[("k1", 1)], "k1");
            prop_assert!(ring.decrypt("u-1", "push", &bytes).is_err());
            let _ = Keyring::key_id_of(&bytes);
            let _ = ring.needs_rotation(&bytes);
        }
    }
}
