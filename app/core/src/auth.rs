//! Bearer tokens (SPEC §11): service tokens submit, admin tokens review and resolve, user tokens (signed,
//! expiring user ids) reach one user's own resources — and the console sessions they open are bound to
//! them ([`crate::sessions::Credentials`]).
//!
//! Service and admin tokens are compared as SHA-256 digests with `subtle`, so neither the content nor the
//! length of a configured token leaks through timing. A user token is
//! `u2.{key id}.{base64url(user id)}.{expiry, Unix seconds}.{base64url(HMAC-SHA256)}`: the key id names
//! which of `auth.user_token_keys` signed it — the first key signs, every listed key verifies, so keys
//! rotate with an overlap — and the MAC covers the key id, the user and the expiry. No token, digest or
//! MAC is ever logged or echoed. How a front end finds the token (an `Authorization` header, a form) is
//! the front end's business; this module only judges it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use herald_domain::operators::{Actor, ActorKind, Role};
use herald_domain::Timestamp;
use herald_ports::Credential;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation for the user-token MAC, so the secret cannot be abused to sign anything else.
const USER_TOKEN_CONTEXT: &[u8] = b"herald user token v2\0";

/// How long a user token lives when `--ttl` is not given: one day.
pub const DEFAULT_USER_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
/// The longest life a user token may be given: a year.
pub const MAX_USER_TOKEN_TTL: Duration = Duration::from_secs(366 * 24 * 3600);
/// The key id of the single key given as `auth.user_token_secret` (the form before key lists).
pub const LEGACY_USER_KEY_ID: &str = "default";

/// Who is calling, as proven by the bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A service token, by its name (`[[services.tokens]]`; `service`, `service-2`, … for `auth.service_tokens`).
    Service(String),
    /// A named admin token (automation, break-glass), with the role the configuration gives it.
    Operator(Actor),
    User(String),
}

/// The name the tokens of `auth.admin_tokens` get, numbered from the second on (`admin`, `admin-2`, …).
pub const LEGACY_ADMIN_TOKEN_NAME: &str = "admin";

/// The name the tokens of `auth.service_tokens` get, numbered from the second on (`service`, `service-2`, …).
pub const LEGACY_SERVICE_TOKEN_NAME: &str = "service";

/// A named service token from the configuration (`[[services.tokens]]`): the name a notification it submits
/// records, which status subscriptions select by.
#[derive(Clone)]
pub struct ServiceToken {
    pub name: String,
    pub token: SecretString,
}

impl std::fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceToken").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The names `auth.service_tokens` get, in order.
#[must_use]
pub fn legacy_service_names(count: usize) -> Vec<String> {
    (0..count).map(|i| numbered(LEGACY_SERVICE_TOKEN_NAME, i)).collect()
}

/// An operator token from the configuration: its name (what the audit trail shows), its role and the
/// token itself.
#[derive(Clone)]
pub struct OperatorToken {
    pub name: String,
    pub role: Role,
    pub token: SecretString,
}

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorToken").field("name", &self.name).field("role", &self.role).finish_non_exhaustive()
    }
}

/// A configured operator token as kept in memory: its digest only.
struct KnownToken {
    digest: [u8; 32],
    name: String,
    role: Role,
}

/// Why a user token was refused. The words name no secret and no part of the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserTokenError {
    /// Not a user token of this format, or its MAC does not verify.
    Invalid,
    /// Signed under a key id that is not (or no longer) configured.
    UnknownKey,
    /// Its MAC verifies but its expiry (Unix seconds) has passed.
    Expired(u64),
}

fn numbered(base: &str, index: usize) -> String {
    if index == 0 {
        base.to_owned()
    } else {
        format!("{base}-{}", index + 1)
    }
}

/// One user-token key: its id (in every token it signs) and its secret.
#[derive(Clone)]
pub struct UserTokenKey {
    pub id: String,
    pub secret: SecretString,
}

impl std::fmt::Debug for UserTokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserTokenKey").field("id", &self.id).finish_non_exhaustive()
    }
}

/// Whether `id` may name a user-token key: 1 to 32 ASCII letters, digits, `-` or `_` (it travels in tokens).
#[must_use]
pub fn valid_key_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The verified token material, built once from the `[auth]` configuration.
pub struct Authenticator {
    /// Service tokens, each with its name.
    service: Vec<(String, [u8; 32])>,
    /// Admin tokens, each with its name and role.
    admin: Vec<KnownToken>,
    /// Tokens that may scrape `/metrics` and nothing else.
    metrics: Vec<[u8; 32]>,
    /// The first signs; all verify.
    user_keys: Vec<UserTokenKey>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("service_tokens", &self.service.len())
            .field("admin_tokens", &self.admin.len())
            .field("metrics_tokens", &self.metrics.len())
            .field("user_token_keys", &self.user_keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn matches_any(candidate: &[u8; 32], configured: &[[u8; 32]]) -> bool {
    // Every configured token is compared, so the time taken does not say which one matched.
    configured.iter().fold(subtle::Choice::from(0), |found, known| found | known.ct_eq(candidate)).into()
}

/// The name of the service token whose digest is `candidate`. Every token is compared, whatever matched.
fn matching_service<'a>(candidate: &[u8; 32], configured: &'a [(String, [u8; 32])]) -> Option<&'a str> {
    let mut found = None;
    for (name, known) in configured {
        if bool::from(known.ct_eq(candidate)) && found.is_none() {
            found = Some(name.as_str());
        }
    }
    found
}

/// The operator token whose digest is `candidate`. Every token is compared, whatever matched.
fn matching_token<'a>(candidate: &[u8; 32], configured: &'a [KnownToken]) -> Option<&'a KnownToken> {
    let mut found = None;
    for known in configured {
        if bool::from(known.digest.ct_eq(candidate)) && found.is_none() {
            found = Some(known);
        }
    }
    found
}

impl KnownToken {
    fn actor(&self) -> Actor {
        Actor::new(ActorKind::Token, self.name.clone(), self.role)
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Authenticator {
    /// One user-token key, `user_token_secret`, under the id [`LEGACY_USER_KEY_ID`].
    #[must_use]
    pub fn new(
        service_tokens: &[SecretString],
        admin_tokens: &[SecretString],
        user_token_secret: SecretString,
    ) -> Self {
        Self::with_user_keys(
            service_tokens,
            admin_tokens,
            vec![UserTokenKey { id: LEGACY_USER_KEY_ID.to_owned(), secret: user_token_secret }],
        )
    }

    /// `user_keys` in order: the first signs new user tokens, every one verifies.
    ///
    /// # Panics
    /// When `user_keys` is empty (the configuration refuses that).
    #[must_use]
    pub fn with_user_keys(
        service_tokens: &[SecretString],
        admin_tokens: &[SecretString],
        user_keys: Vec<UserTokenKey>,
    ) -> Self {
        assert!(!user_keys.is_empty(), "at least one user-token key");
        let admin = admin_tokens
            .iter()
            .enumerate()
            .map(|(i, token)| KnownToken {
                digest: digest(token.expose_secret().as_bytes()),
                name: numbered(LEGACY_ADMIN_TOKEN_NAME, i),
                role: Role::Admin,
            })
            .collect();
        let service = service_tokens
            .iter()
            .enumerate()
            .map(|(i, token)| (numbered(LEGACY_SERVICE_TOKEN_NAME, i), digest(token.expose_secret().as_bytes())))
            .collect();
        Authenticator { service, admin, metrics: Vec::new(), user_keys }
    }

    /// With these named service tokens too (`[[services.tokens]]`), after those of `auth.service_tokens`.
    #[must_use]
    pub fn with_service_tokens(mut self, tokens: &[ServiceToken]) -> Self {
        self.service.extend(tokens.iter().map(|t| (t.name.clone(), digest(t.token.expose_secret().as_bytes()))));
        self
    }

    /// With these named operator tokens too (`[[operators.tokens]]`), after those of `auth.admin_tokens`.
    #[must_use]
    pub fn with_operator_tokens(mut self, tokens: &[OperatorToken]) -> Self {
        self.admin.extend(tokens.iter().map(|t| KnownToken {
            digest: digest(t.token.expose_secret().as_bytes()),
            name: t.name.clone(),
            role: t.role,
        }));
        self
    }

    /// The operator a session opened with `credential` acts as now: the token's name and its role as
    /// configured now (a role changed in the configuration applies at the session's next request).
    #[must_use]
    pub fn operator_of(&self, credential: &Credential) -> Option<Actor> {
        match credential {
            Credential::AdminToken { digest } => matching_token(digest, &self.admin).map(KnownToken::actor),
            // As the identity provider said at this request (`crate::sessions::find`).
            Credential::Oidc { name, role, .. } => Some(Actor::new(ActorKind::Operator, name.clone(), *role)),
            Credential::UserToken { .. } | Credential::SignInLink { .. } => None,
        }
    }

    /// With these tokens allowed to scrape `/metrics` (and nothing else).
    #[must_use]
    pub fn with_metrics_tokens(mut self, tokens: &[SecretString]) -> Self {
        self.metrics = tokens.iter().map(|t| digest(t.expose_secret().as_bytes())).collect();
        self
    }

    /// Whether `token` may scrape `/metrics` on the API listener: a metrics token or an admin token.
    #[must_use]
    pub fn may_scrape(&self, token: &str) -> bool {
        let candidate = digest(token.as_bytes());
        matches_any(&candidate, &self.metrics) | matching_token(&candidate, &self.admin).is_some()
    }

    fn mac(key: &UserTokenKey, user_id: &str, expires: u64) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(key.secret.expose_secret().as_bytes()).expect("HMAC takes keys of any length");
        mac.update(USER_TOKEN_CONTEXT);
        mac.update(key.id.as_bytes());
        mac.update(b"\0");
        mac.update(user_id.as_bytes());
        mac.update(b"\0");
        mac.update(expires.to_string().as_bytes());
        mac
    }

    /// The bearer token of one user, valid for `ttl` from now, signed by the first key.
    #[must_use]
    pub fn user_token_for(&self, user_id: &str, ttl: Duration) -> SecretString {
        self.user_token_until(user_id, unix_now().saturating_add(ttl.as_secs()))
    }

    /// The bearer token of one user for [`DEFAULT_USER_TOKEN_TTL`].
    #[must_use]
    pub fn user_token(&self, user_id: &str) -> SecretString {
        self.user_token_for(user_id, DEFAULT_USER_TOKEN_TTL)
    }

    /// The bearer token of one user that expires at `expires` (Unix seconds).
    #[must_use]
    pub fn user_token_until(&self, user_id: &str, expires: u64) -> SecretString {
        let key = &self.user_keys[0];
        let tag = Self::mac(key, user_id, expires).finalize().into_bytes();
        SecretString::from(format!(
            "u2.{}.{}.{expires}.{}",
            key.id,
            URL_SAFE_NO_PAD.encode(user_id),
            URL_SAFE_NO_PAD.encode(tag)
        ))
    }

    /// Checks a user token at `now` (Unix seconds): the user id it names.
    ///
    /// # Errors
    /// Why it is refused.
    pub fn verify_user_token(&self, token: &str, now: u64) -> Result<String, UserTokenError> {
        self.verify_user_token_parts(token, now).map(|(user, _, _)| user)
    }

    /// As [`Authenticator::verify_user_token`], also naming the key that signed it and its expiry (Unix
    /// seconds).
    fn verify_user_token_parts(&self, token: &str, now: u64) -> Result<(String, String, u64), UserTokenError> {
        let rest = token.strip_prefix("u2.").ok_or(UserTokenError::Invalid)?;
        let mut parts = rest.split('.');
        let (Some(kid), Some(user_b64), Some(expires), Some(tag_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(UserTokenError::Invalid);
        };
        let key = self.user_keys.iter().find(|k| k.id == kid).ok_or(UserTokenError::UnknownKey)?;
        if expires.is_empty() || !expires.bytes().all(|b| b.is_ascii_digit()) {
            return Err(UserTokenError::Invalid);
        }
        let expires: u64 = expires.parse().map_err(|_| UserTokenError::Invalid)?;
        let user = URL_SAFE_NO_PAD.decode(user_b64).ok().and_then(|b| String::from_utf8(b).ok());
        let tag = URL_SAFE_NO_PAD.decode(tag_b64).map_err(|_| UserTokenError::Invalid)?;
        let user = user.ok_or(UserTokenError::Invalid)?;
        Self::mac(key, &user, expires).verify_slice(&tag).map_err(|_| UserTokenError::Invalid)?;
        if expires <= now {
            return Err(UserTokenError::Expired(expires));
        }
        Ok((user, key.id.clone(), expires))
    }

    /// What a console sign-in with `token` opens, and the credential the session is bound to: an admin
    /// token opens the operator's pages, a user token that user's. A service token, or an invalid one,
    /// opens nothing.
    #[must_use]
    pub fn console_credential(&self, token: &str) -> Option<(Caller, Credential)> {
        let digest = digest(token.as_bytes());
        if token.starts_with("u2.") {
            if let Ok((user, key_id, expires)) = self.verify_user_token_parts(token, unix_now()) {
                let expires_at = Timestamp(i64::try_from(expires.saturating_mul(1000)).unwrap_or(i64::MAX));
                return Some((Caller::User(user), Credential::UserToken { digest, key_id, expires_at }));
            }
        }
        matching_token(&digest, &self.admin)
            .map(|known| (Caller::Operator(known.actor()), Credential::AdminToken { digest }))
    }

    /// Identifies the caller of a bearer token now.
    ///
    /// # Errors
    /// The refused user token's reason; any other unknown token is [`UserTokenError::Invalid`].
    pub fn authenticate(&self, token: &str) -> Result<Caller, UserTokenError> {
        if token.starts_with("u2.") {
            match self.verify_user_token(token, unix_now()) {
                Ok(user) => return Ok(Caller::User(user)),
                Err(UserTokenError::Invalid) => {}
                Err(other) => return Err(other),
            }
        }
        let candidate = digest(token.as_bytes());
        // Admin first: a token configured in both lists gets the wider role.
        if let Some(known) = matching_token(&candidate, &self.admin) {
            Ok(Caller::Operator(known.actor()))
        } else if let Some(name) = matching_service(&candidate, &self.service) {
            Ok(Caller::Service(name.to_owned()))
        } else {
            Err(UserTokenError::Invalid)
        }
    }

    /// Identifies the caller of a bearer token, or `None` when the token is not valid (now).
    #[must_use]
    pub fn identify(&self, token: &str) -> Option<Caller> {
        self.authenticate(token).ok()
    }
}

/// A session stands only while the credential that opened it is accepted: an admin token still listed, a
/// user token's signing key still configured (its expiry is the session's own end). A sign-in link was
/// burnt when it opened the session; it binds nothing further.
impl crate::sessions::Credentials for Authenticator {
    fn accepts(&self, credential: &Credential) -> bool {
        match credential {
            Credential::AdminToken { digest } => matching_token(digest, &self.admin).is_some(),
            Credential::UserToken { key_id, .. } => self.user_keys.iter().any(|key| &key.id == key_id),
            Credential::SignInLink { .. } => true,
            // Judged by the identity provider at every request (`crate::sessions::find`).
            Credential::Oidc { .. } => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, secret: &str) -> UserTokenKey {
        UserTokenKey { id: id.to_owned(), secret: SecretString::from(secret) }
    }

    fn auth() -> Authenticator {
        Authenticator::new(
            &[SecretString::from("service-token-1")],
            &[SecretString::from("admin-token-1")],
            SecretString::from("a user token secret of some length"),
        )
    }

    #[test]
    fn configured_tokens_identify_their_role() {
        let auth = auth();
        assert_eq!(auth.identify("service-token-1"), Some(Caller::Service("service".into())));
        assert_eq!(
            auth.identify("admin-token-1"),
            Some(Caller::Operator(Actor::new(ActorKind::Token, "admin", Role::Admin)))
        );
        assert_eq!(auth.identify("service-token-"), None);
        assert_eq!(auth.identify(""), None);
    }

    #[test]
    fn named_tokens_carry_their_name_and_role_and_a_changed_role_applies_to_open_sessions() {
        let named = |role| OperatorToken { name: "night-shift".into(), role, token: SecretString::from("night-token") };
        let auth = auth().with_operator_tokens(&[named(Role::Viewer)]);
        let viewer = Actor::new(ActorKind::Token, "night-shift", Role::Viewer);
        assert_eq!(auth.identify("night-token"), Some(Caller::Operator(viewer.clone())));
        let (_, credential) = auth.console_credential("night-token").expect("an operator token signs in");
        assert_eq!(auth.operator_of(&credential), Some(viewer));
        let promoted = super::Authenticator::new(&[], &[], SecretString::from("x".repeat(20)))
            .with_operator_tokens(&[named(Role::Resolver)]);
        assert_eq!(promoted.operator_of(&credential).map(|a| a.role), Some(Role::Resolver));
        assert!(auth.may_scrape("night-token"));
        let two = Authenticator::new(
            &[],
            &[SecretString::from("a1"), SecretString::from("a2")],
            SecretString::from("x".repeat(20)),
        );
        assert_eq!(two.identify("a2"), Some(Caller::Operator(Actor::new(ActorKind::Token, "admin-2", Role::Admin))));
    }

    #[test]
    fn service_tokens_carry_their_name() {
        let named = ServiceToken { name: "billing".into(), token: SecretString::from("billing-token") };
        let auth = Authenticator::new(
            &[SecretString::from("s1"), SecretString::from("s2")],
            &[],
            SecretString::from("x".repeat(20)),
        )
        .with_service_tokens(&[named]);
        assert_eq!(auth.identify("s1"), Some(Caller::Service("service".into())));
        assert_eq!(auth.identify("s2"), Some(Caller::Service("service-2".into())));
        assert_eq!(auth.identify("billing-token"), Some(Caller::Service("billing".into())));
        assert_eq!(auth.identify("billing-toke"), None);
        assert_eq!(legacy_service_names(2), ["service", "service-2"]);
        assert!(!format!("{named:?}", named = ServiceToken { name: "n".into(), token: "secret-x".into() })
            .contains("secret-x"));
    }

    #[test]
    fn user_tokens_are_bound_to_their_user_and_secret() {
        let auth = auth();
        let token = auth.user_token("alice");
        assert_eq!(auth.identify(token.expose_secret()), Some(Caller::User("alice".into())));

        let other = Authenticator::new(&[], &[], SecretString::from("another secret entirely, same length"));
        assert_eq!(other.identify(token.expose_secret()), None);

        // Swapping the user id (or the expiry) while keeping the MAC must fail.
        let parts: Vec<&str> = token.expose_secret().split('.').collect();
        let forged = format!("u2.{}.{}.{}.{}", parts[1], URL_SAFE_NO_PAD.encode("bob"), parts[3], parts[4]);
        assert_eq!(auth.identify(&forged), None);
        let later = format!("u2.{}.{}.{}.{}", parts[1], parts[2], parts[3].parse::<u64>().unwrap() + 1, parts[4]);
        assert_eq!(auth.identify(&later), None);
        assert_eq!(auth.identify("u2.garbage"), None);
        assert_eq!(auth.identify("u2.default.!!.1.!!"), None);
        assert_eq!(auth.identify("u2.default.YQ.+1.AA"), None);
    }

    #[test]
    fn a_token_expires_at_its_expiry() {
        let auth = auth();
        let token = auth.user_token_until("alice", 1_000);
        assert_eq!(auth.verify_user_token(token.expose_secret(), 999), Ok("alice".to_owned()));
        assert_eq!(auth.verify_user_token(token.expose_secret(), 1_000), Err(UserTokenError::Expired(1_000)));
        assert_eq!(auth.identify(token.expose_secret()), None, "expired long ago");
        let fresh = auth.user_token_for("alice", Duration::from_secs(3600));
        assert_eq!(auth.identify(fresh.expose_secret()), Some(Caller::User("alice".into())));
    }

    #[test]
    fn the_first_key_signs_and_every_key_verifies() {
        let old = Authenticator::with_user_keys(&[], &[], vec![key("k1", "the first user token secret")]);
        let rotated = Authenticator::with_user_keys(
            &[],
            &[],
            vec![key("k2", "the second user token secret"), key("k1", "the first user token secret")],
        );
        let retired = Authenticator::with_user_keys(&[], &[], vec![key("k2", "the second user token secret")]);
        let by_old = old.user_token("alice");
        let by_new = rotated.user_token("alice");
        assert!(by_new.expose_secret().starts_with("u2.k2."), "the first key signs");
        assert_eq!(rotated.identify(by_old.expose_secret()), Some(Caller::User("alice".into())));
        assert_eq!(retired.identify(by_new.expose_secret()), Some(Caller::User("alice".into())));
        assert_eq!(retired.authenticate(by_old.expose_secret()), Err(UserTokenError::UnknownKey));
        // A known key id with another key's MAC is not valid.
        let relabelled = by_old.expose_secret().replacen("u2.k1.", "u2.k2.", 1);
        assert_eq!(rotated.authenticate(&relabelled), Err(UserTokenError::Invalid));
    }

    #[test]
    fn a_console_session_is_bound_to_the_credential_that_opened_it() {
        use crate::sessions::Credentials as _;
        let auth = auth();
        let (caller, admin) = auth.console_credential("admin-token-1").expect("an admin token signs in");
        assert!(matches!(caller, Caller::Operator(ref a) if a.name == "admin" && a.role == Role::Admin));
        assert!(auth.accepts(&admin));
        let removed =
            Authenticator::new(&[], &[SecretString::from("admin-token-2")], SecretString::from("x".repeat(20)));
        assert!(!removed.accepts(&admin), "an admin token removed from the configuration ends its sessions");
        assert_eq!(auth.console_credential("service-token-1"), None, "a service token opens no console");
        assert_eq!(auth.console_credential("admin-token-"), None);

        let token = auth.user_token_until("alice", 4_000_000_000);
        let (caller, user) = auth.console_credential(token.expose_secret()).expect("a user token signs in");
        assert_eq!(caller, Caller::User("alice".into()));
        assert_eq!(user.expires_at(), Some(Timestamp(4_000_000_000_000)), "the token's expiry bounds the session");
        let retired = Authenticator::with_user_keys(&[], &[], vec![key("k9", "another user token secret")]);
        assert!(auth.accepts(&user));
        assert!(!retired.accepts(&user), "a retired key ends the sessions its tokens opened");
        let expired = auth.user_token_until("alice", 1_000);
        assert_eq!(auth.console_credential(expired.expose_secret()), None);
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let text = format!("{:?}", auth());
        assert!(!text.contains("secret of some length"));
        assert!(!text.contains("admin-token-1"));
    }
}
