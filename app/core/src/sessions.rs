//! The use cases of signing in to the console: open a session for a credential, find the session a
//! cookie names (ending it when it no longer stands), sign out, list and end a person's sessions, and the
//! one-time sign-in links that open a user's session without a token in a URL.
//!
//! A session's id is 32 random bytes, given to the browser (base64url) and never stored: the store keeps
//! its SHA-256. A sign-in link's code likewise. Whether a session stands is the domain's decision
//! (`herald_domain::judge_session`), from its times and whether the credential that opened it is still
//! accepted — which only the authenticator, from the configuration, can say ([`Credentials`]).

use aes_gcm::aead::{Aead as _, KeyInit as _};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use herald_domain::{judge_session, session_end, Millis, SessionEnd, SessionPolicy, SessionVerdict, Timestamp, UserId};
use herald_ports::sessions::Digest;
use herald_ports::{
    Credential, NewSession, NewSignInLink, ProviderGrant, SessionOwner, SessionRole, StoreError, StoredSession,
};
use rand::RngCore as _;
use secrecy::{ExposeSecret as _, SecretString};
use sha2::{Digest as _, Sha256};

use crate::identity::Now;
use crate::services::Services;
use crate::usecases::{AccessError, Actor, AuditAction, Capability};
use herald_ports::NewAuditEvent;

/// Says whether the configuration still accepts the credential that opened a session.
pub trait Credentials: Send + Sync {
    fn accepts(&self, credential: &Credential) -> bool;
}

/// How the console's sessions and links behave (`[console]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionSettings {
    pub policy: SessionPolicy,
    /// How long a sign-in link may wait to be used.
    pub link_ttl: Millis,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings { policy: SessionPolicy::DEFAULT, link_ttl: DEFAULT_LINK_TTL }
    }
}

/// How long a sign-in link may wait to be used when nothing else is configured: fifteen minutes.
pub const DEFAULT_LINK_TTL: Millis = Millis(15 * 60 * 1000);

/// The SHA-256 of a secret text (a token, a session id, a link code).
#[must_use]
pub fn digest_of(secret: &str) -> Digest {
    Sha256::digest(secret.as_bytes()).into()
}

/// 32 random bytes, base64url: a session id or a link code.
fn random_secret() -> SecretString {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    SecretString::from(URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether `text` has the form of a session id or link code (43 base64url characters), so that nothing
/// else is hashed and looked up.
#[must_use]
pub fn well_formed(text: &str) -> bool {
    text.len() == 43 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A session just opened: the id for the browser's cookie, and what is stored.
pub struct Opened {
    pub cookie: SecretString,
    pub session: StoredSession,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("role", &self.session.role).finish_non_exhaustive()
    }
}

/// Opens a session of `role` for `credential`, ending at the policy's lifetime or the credential's own
/// expiry, whichever is first.
///
/// # Errors
/// Store failures.
pub async fn open(
    services: &Services,
    policy: SessionPolicy,
    role: SessionRole,
    credential: Credential,
    operator: Option<&Actor>,
) -> Result<Opened, StoreError> {
    if let SessionRole::User(user) = &role {
        crate::usecases::refuse_erased(services, user).await?;
    }
    let now = services.clock.now().await?;
    let cookie = random_secret();
    let csrf = {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    };
    let expires_at = session_end(policy, now, credential.expires_at());
    let mut credential = credential;
    if let Credential::Oidc { grant, .. } = &mut credential {
        *grant = seal_grant(cookie.expose_secret(), grant)?;
    }
    let new = NewSession {
        id_digest: digest_of(cookie.expose_secret()),
        role,
        expires_at,
        credential,
        csrf,
        created_at: now,
    };
    // An operator's sign-in is a human act: recorded with the session, in its transaction.
    let audit = operator.map(|actor| NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::SignIn,
        target: String::new(),
        detail: String::new(),
        at: now,
    });
    services.sessions.open_session(&new, audit.as_slice()).await?;
    tracing::info!(role = role_name(&new.role), "console session opened");
    let session = StoredSession {
        id_digest: new.id_digest,
        role: new.role,
        credential: new.credential,
        csrf: new.csrf,
        created_at: now,
        last_seen_at: now,
        expires_at: new.expires_at,
        ended: None,
    };
    Ok(Opened { cookie, session })
}

fn role_name(role: &SessionRole) -> &'static str {
    match role {
        SessionRole::Operator => "operator",
        SessionRole::User(_) => "user",
    }
}

/// What HKDF-SHA256 calls the key of a session's provider grant.
const GRANT_KEY_INFO: &[u8] = b"herald console_session provider_grant v1";

/// The key that seals a session's provider grant: derived from the session's cookie, which the store
/// never holds (it keeps the cookie's SHA-256), so a copy of `console_session` cannot open the grant.
fn grant_cipher(cookie: &str) -> Aes256Gcm {
    let mut key = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's limit of 255 × 32.
    let _ = hkdf::Hkdf::<Sha256>::new(None, cookie.as_bytes()).expand(GRANT_KEY_INFO, &mut key);
    Aes256Gcm::new(&key.into())
}

/// The provider's access token sealed for the store (AES-256-GCM under the cookie's key): base64url of
/// a random nonce and the ciphertext.
fn seal_grant(cookie: &str, grant: &ProviderGrant) -> Result<ProviderGrant, StoreError> {
    let mut nonce = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut nonce);
    let sealed = grant_cipher(cookie)
        .encrypt(Nonce::from_slice(&nonce), grant.0.as_bytes())
        .map_err(|_| StoreError::Unknown(anyhow::anyhow!("the provider grant could not be sealed")))?;
    Ok(ProviderGrant(URL_SAFE_NO_PAD.encode([nonce.as_slice(), &sealed].concat())))
}

/// The stored grant opened with the session's cookie; `None` when it was not sealed with that cookie.
fn open_grant(cookie: &str, stored: &ProviderGrant) -> Option<ProviderGrant> {
    let bytes = URL_SAFE_NO_PAD.decode(&stored.0).ok()?;
    let (nonce, sealed) = bytes.split_at_checked(12)?;
    let plain = grant_cipher(cookie).decrypt(Nonce::from_slice(nonce), sealed).ok()?;
    String::from_utf8(plain).ok().map(ProviderGrant)
}

/// What a cookie's session is now.
#[derive(Clone, Debug, PartialEq, Eq)]
// One per console request, moved once: boxing the live session would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Found {
    /// The session stands.
    Live(StoredSession),
    /// It is over, for this reason: ended before (signed out, ended from another browser, by an operator),
    /// or found over by this request and ended now.
    Ended(SessionEnd),
    /// No such session (never opened, ended before, or not an id at all).
    None,
    /// An operator's session opened at the identity provider, which cannot be reached to confirm it now:
    /// this request is refused, the session kept.
    ProviderUnavailable,
}

/// The session a cookie names, judged at the store's `now`: one ended before says why; one that no longer
/// stands is ended here with its reason (so that every process sees it ended); one that stands gets its
/// last use written when the record is stale.
///
/// # Errors
/// Store failures.
pub async fn find(
    services: &Services,
    credentials: &dyn Credentials,
    policy: SessionPolicy,
    cookie: &str,
) -> Result<Found, StoreError> {
    if !well_formed(cookie) {
        return Ok(Found::None);
    }
    let id = digest_of(cookie);
    let Some(session) = services.sessions.session(&id).await? else { return Ok(Found::None) };
    if let Some(end) = session.ended {
        return Ok(Found::Ended(end));
    }
    let now = services.clock.now().await?;
    let mut session = session;
    match judge_session(session.times(), credentials.accepts(&session.credential), policy, now) {
        SessionVerdict::Live { touch } => {
            // An operator signed in at the identity provider stands as long as the provider says so, with
            // the role it gives now: asked at every request, nothing cached (issue 43, item 4).
            if let Credential::Oidc { subject, grant, name, role, .. } = &mut session.credential {
                // A grant that does not open with this cookie (not sealed with it) vouches for nothing.
                let opened = open_grant(cookie, grant);
                let standing = match (services.oidc.as_ref(), &opened) {
                    (Some(oidc), Some(grant)) => oidc.standing(subject, grant).await,
                    // Sign-in at the provider is no longer configured: nobody vouches for the session.
                    _ => Ok(Now::Withdrawn),
                };
                if let Some(opened) = opened {
                    *grant = opened;
                }
                match standing {
                    Ok(Now::Stands { name: now_name, role: now_role }) => {
                        *name = now_name;
                        *role = now_role;
                    }
                    Ok(Now::Withdrawn) => {
                        let end = SessionEnd::ProviderWithdrew;
                        services.sessions.end_session(&id, end, now, &[]).await?;
                        tracing::info!(role = "operator", reason = end.as_str(), "console session ended");
                        return Ok(Found::Ended(end));
                    }
                    Err(error) => {
                        // The provider cannot say: refuse this request, keep the session.
                        tracing::warn!(%error, "the identity provider could not confirm a console session");
                        return Ok(Found::ProviderUnavailable);
                    }
                }
            }
            if touch {
                services.sessions.touch_session(&id, now).await?;
            }
            Ok(Found::Live(session))
        }
        SessionVerdict::Ended(end) => {
            services.sessions.end_session(&id, end, now, &[]).await?;
            tracing::info!(role = role_name(&session.role), reason = end.as_str(), "console session ended");
            Ok(Found::Ended(end))
        }
    }
}

/// Ends the session of this id digest (sign-out, or its holder ending it from the list). `operator`:
/// the operator who ends it, whose sign-out the audit trail records.
///
/// # Errors
/// Store failures.
pub async fn end(
    services: &Services,
    id_digest: &Digest,
    reason: SessionEnd,
    operator: Option<&Actor>,
) -> Result<bool, StoreError> {
    let now = services.clock.now().await?;
    let audit = operator.map(|actor| NewAuditEvent {
        actor: actor.clone(),
        action: AuditAction::SignOut,
        target: String::new(),
        detail: reason.as_str().to_owned(),
        at: now,
    });
    let ended = services.sessions.end_session(id_digest, reason, now, audit.as_slice()).await?;
    if ended {
        tracing::info!(reason = reason.as_str(), "console session ended");
    }
    Ok(ended)
}

/// Who owns a session, for listing and ending "my sessions": a user's sessions are all of that user's;
/// an operator's are those opened with the same admin token, or by the same person at the identity
/// provider.
#[must_use]
pub fn owner_of(session: &StoredSession) -> SessionOwner {
    match &session.role {
        SessionRole::User(user) => SessionOwner::User(user.clone()),
        SessionRole::Operator => SessionOwner::Credential(*session.credential.digest()),
    }
}

/// The sessions of the same owner as `session`, newest first.
///
/// # Errors
/// Store failures.
pub async fn list_own(services: &Services, session: &StoredSession) -> Result<Vec<StoredSession>, StoreError> {
    services.sessions.sessions_of(&owner_of(session)).await
}

/// Ends one of the sessions of the same owner as `session`, named by its id digest; another owner's
/// session (or an unknown one) is left alone and answers `false`.
///
/// # Errors
/// Store failures.
pub async fn end_own(
    services: &Services,
    session: &StoredSession,
    operator: Option<&Actor>,
    target: &Digest,
) -> Result<bool, StoreError> {
    let owner = owner_of(session);
    let Some(target) = services.sessions.sessions_of(&owner).await?.into_iter().find(|s| &s.id_digest == target) else {
        return Ok(false);
    };
    end(services, &target.id_digest, SessionEnd::EndedByHolder, operator).await
}

/// Ends every session of `owner` (`herald sessions end`).
///
/// # Errors
/// Store failures.
pub async fn end_all(services: &Services, owner: &SessionOwner) -> Result<u64, StoreError> {
    let now = services.clock.now().await?;
    let ended = services.sessions.end_sessions(owner, SessionEnd::EndedByOperator, now).await?;
    tracing::info!(ended, "console sessions ended by an operator");
    Ok(ended)
}

/// A one-time sign-in link just made: its code (for the URL) and when it stops working.
pub struct Link {
    pub code: SecretString,
    pub expires_at: Timestamp,
}

impl Link {
    /// The link's path and query, to be put after the installation's address.
    #[must_use]
    pub fn path(&self) -> String {
        format!("/console/login/user?code={}", self.code.expose_secret())
    }
}

/// Makes a one-time sign-in link for `user`, valid for `ttl`. `operator`: the operator who asks for it
/// ([`Capability::ActForUsers`]: the link signs in as the user); `None` for a calling service or the
/// command line.
///
/// # Errors
/// An operator without the capability, or a store failure.
pub async fn create_link(
    services: &Services,
    operator: Option<&Actor>,
    user: &UserId,
    ttl: Millis,
) -> Result<Link, AccessError> {
    crate::usecases::for_user(operator, Capability::ActForUsers)?;
    crate::usecases::refuse_erased(services, user).await?;
    let now = services.clock.now().await?;
    let code = random_secret();
    let expires_at = now + ttl;
    let link =
        NewSignInLink { code_digest: digest_of(code.expose_secret()), user: user.clone(), created_at: now, expires_at };
    services.sessions.create_sign_in_link(&link).await?;
    tracing::info!("console sign-in link created");
    Ok(Link { code, expires_at })
}

/// Burns a sign-in link and opens its user's session: `None` when the code is unknown, used or expired.
///
/// # Errors
/// Store failures.
pub async fn redeem_link(services: &Services, policy: SessionPolicy, code: &str) -> Result<Option<Opened>, StoreError> {
    if !well_formed(code) {
        return Ok(None);
    }
    let digest = digest_of(code);
    let now = services.clock.now().await?;
    let Some(user) = services.sessions.redeem_sign_in_link(&digest, now).await? else {
        tracing::info!("console sign-in link refused (unknown, used or expired)");
        return Ok(None);
    };
    open(services, policy, SessionRole::User(user), Credential::SignInLink { digest }, None).await.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_grant_is_sealed_with_its_cookie_and_opens_with_it_only() {
        let (cookie, other) = (random_secret(), random_secret());
        let token = ProviderGrant("an-access-token-the-provider-accepts".into());
        let sealed = seal_grant(cookie.expose_secret(), &token).expect("sealed");
        assert!(!sealed.0.contains(&token.0), "the stored text does not hold the token");
        assert_eq!(open_grant(cookie.expose_secret(), &sealed), Some(token.clone()));
        assert_eq!(open_grant(other.expose_secret(), &sealed), None, "another cookie opens nothing");
        assert_eq!(open_grant(cookie.expose_secret(), &token), None, "an unsealed token opens nothing");
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed.0).expect("base64url");
        bytes[20] ^= 1;
        let tampered = ProviderGrant(URL_SAFE_NO_PAD.encode(bytes));
        assert_eq!(open_grant(cookie.expose_secret(), &tampered), None, "a changed seal opens nothing");
        assert_ne!(seal_grant(cookie.expose_secret(), &token).expect("sealed"), sealed, "a fresh nonce each time");
    }

    #[test]
    fn secrets_are_well_formed_and_distinct() {
        let (a, b) = (random_secret(), random_secret());
        assert!(well_formed(a.expose_secret()) && well_formed(b.expose_secret()));
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert!(!well_formed(""));
        assert!(!well_formed(&"a".repeat(42)));
        assert!(!well_formed(&format!("{}=", "a".repeat(42))));
        assert_ne!(digest_of(a.expose_secret()), digest_of(b.expose_secret()));
    }
}
