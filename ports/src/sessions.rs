//! The session port: the console's server-side sessions and its one-time sign-in links.
//!
//! A session is found by the SHA-256 of the random id its cookie holds, so the table never holds a value
//! that signs anybody in; likewise a sign-in link by the SHA-256 of its code. Whether a session still
//! stands is decided by `herald_domain::judge_session`; this port only stores it.

use async_trait::async_trait;
use herald_domain::operators::Role;
use herald_domain::{SessionEnd, Timestamp, UserId};

use crate::identity::ProviderGrant;
use crate::store::StoreError;

/// A SHA-256 digest: of a session id, a sign-in code or a token.
pub type Digest = [u8; 32];

/// Whose pages a session opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionRole {
    Operator,
    User(UserId),
}

/// What opened a session: the session is bound to it and ends when it is no longer accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// An admin token, by its digest: the session ends when the configuration no longer lists it.
    AdminToken { digest: Digest },
    /// A user token, by its digest, signed by the user-token key `key_id`, valid until `expires_at`: the
    /// session ends when the token expires or that key is retired.
    UserToken { digest: Digest, key_id: String, expires_at: Timestamp },
    /// A one-time sign-in link (burnt when it opened the session).
    SignInLink { digest: Digest },
    /// A sign-in with the identity provider (OpenID Connect): the person's `subject` there (`digest` is
    /// the SHA-256 of `oidc\0{subject}`, so that one person's sessions are found together), the `name` and
    /// `role` they have — as stored at sign-in, and as the provider says now once the session has been
    /// judged (`herald_core::sessions::find` asks it at every request) — and the grant to ask it with.
    Oidc { digest: Digest, subject: String, name: String, role: Role, grant: ProviderGrant },
}

impl Credential {
    /// The credential's digest.
    #[must_use]
    pub fn digest(&self) -> &Digest {
        match self {
            Credential::AdminToken { digest }
            | Credential::UserToken { digest, .. }
            | Credential::SignInLink { digest }
            | Credential::Oidc { digest, .. } => digest,
        }
    }

    /// When the credential itself expires, if it does.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        match self {
            Credential::UserToken { expires_at, .. } => Some(*expires_at),
            Credential::AdminToken { .. } | Credential::SignInLink { .. } | Credential::Oidc { .. } => None,
        }
    }
}

/// A session to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSession {
    pub id_digest: Digest,
    pub role: SessionRole,
    pub credential: Credential,
    /// The secret every form of the session echoes (CSRF).
    pub csrf: String,
    pub created_at: Timestamp,
    /// The absolute end.
    pub expires_at: Timestamp,
}

/// A stored session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    pub id_digest: Digest,
    pub role: SessionRole,
    pub credential: Credential,
    pub csrf: String,
    pub created_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub expires_at: Timestamp,
    /// Why it was ended, when it was.
    pub ended: Option<SessionEnd>,
}

impl StoredSession {
    /// The times `herald_domain::judge_session` decides on.
    #[must_use]
    pub fn times(&self) -> herald_domain::SessionTimes {
        herald_domain::SessionTimes {
            last_seen_at: self.last_seen_at,
            expires_at: self.expires_at,
            credential_expires_at: self.credential.expires_at(),
        }
    }
}

/// Whose sessions a listing or an ending concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionOwner {
    /// Every session of one user, whatever opened it.
    User(UserId),
    /// Every session opened by one credential (an admin token's sessions).
    Credential(Digest),
    /// Every session.
    All,
}

/// A one-time sign-in link to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSignInLink {
    pub code_digest: Digest,
    pub user: UserId,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Stores a new session, with `audit` (an operator's sign-in) in the same transaction. Sessions that
    /// ended or expired long ago MAY be removed on the way.
    async fn open_session(&self, session: &NewSession, audit: &[crate::audit::NewAuditEvent])
        -> Result<(), StoreError>;

    /// The session with this id digest, ended or not (an ended one says why), while its row is kept.
    async fn session(&self, id_digest: &Digest) -> Result<Option<StoredSession>, StoreError>;

    /// Records a use of the session at `now`.
    async fn touch_session(&self, id_digest: &Digest, now: Timestamp) -> Result<(), StoreError>;

    /// Ends one session, with `audit` (an operator's sign-out) in the same transaction; `false` when it was
    /// ended already (or never existed), and then nothing is written.
    async fn end_session(
        &self,
        id_digest: &Digest,
        end: SessionEnd,
        now: Timestamp,
        audit: &[crate::audit::NewAuditEvent],
    ) -> Result<bool, StoreError>;

    /// The sessions of `owner` that have not been ended, newest first.
    async fn sessions_of(&self, owner: &SessionOwner) -> Result<Vec<StoredSession>, StoreError>;

    /// Ends every session of `owner`; how many were ended.
    async fn end_sessions(&self, owner: &SessionOwner, end: SessionEnd, now: Timestamp) -> Result<u64, StoreError>;

    /// Stores a one-time sign-in link.
    async fn create_sign_in_link(&self, link: &NewSignInLink) -> Result<(), StoreError>;

    /// Burns the link with this code digest and names its user — only once, and only before it expires:
    /// `None` for a code that is unknown, used or expired.
    async fn redeem_sign_in_link(&self, code_digest: &Digest, now: Timestamp) -> Result<Option<UserId>, StoreError>;
}
