//! The console's sessions and one-time sign-in links (`SessionStore`, migration `0017`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use herald_domain::{SessionEnd, Timestamp, UserId};
use herald_ports::sessions::{
    Credential, Digest, NewSession, NewSignInLink, SessionOwner, SessionRole, SessionStore, StoredSession,
};
use herald_ports::{ProviderGrant, StoreError};

use crate::convert::{from_db, opt_from_db, opt_to_db, store_error, to_db};
use crate::store::PgStore;

/// How long an ended or expired session, or a used or expired sign-in link, is kept before a sign-in
/// removes it: a week, for a person asking "was that me?".
const KEEP_ENDED: &str = "7 days";

const SESSION_COLUMNS: &str = "id_digest, user_id, role, credential_kind, credential_digest, credential_key, \
     credential_expires_at, csrf, created_at, last_seen_at, expires_at, ended_reason, operator_subject, operator_name, \
     operator_role, provider_grant";

crate::rows::row! {
    struct SessionRow {
        id_digest: Vec<u8>,
        user_id: Option<String>,
        role: String,
        credential_kind: String,
        credential_digest: Vec<u8>,
        credential_key: Option<String>,
        credential_expires_at: Option<DateTime<Utc>>,
        csrf: String,
        created_at: DateTime<Utc>,
        last_seen_at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
        ended_reason: Option<String>,
        operator_subject: Option<String>,
        operator_name: Option<String>,
        operator_role: Option<String>,
        provider_grant: Option<String>,
    }
}

fn digest(bytes: &[u8]) -> Result<Digest, StoreError> {
    bytes.try_into().map_err(|_| StoreError::Unknown(anyhow::anyhow!("a stored digest is not 32 bytes")))
}

impl TryFrom<SessionRow> for StoredSession {
    type Error = StoreError;

    fn try_from(row: SessionRow) -> Result<Self, StoreError> {
        let foreign = |what: &str| StoreError::Unknown(anyhow::anyhow!("console_session: {what}"));
        let role = match (row.role.as_str(), row.user_id) {
            ("operator", None) => SessionRole::Operator,
            ("user", Some(user)) => SessionRole::User(UserId::new(user)),
            _ => return Err(foreign("role and user_id disagree")),
        };
        let credential_digest = digest(&row.credential_digest)?;
        let credential =
            match (row.credential_kind.as_str(), row.credential_key, opt_from_db(row.credential_expires_at)) {
                ("admin_token", None, None) => Credential::AdminToken { digest: credential_digest },
                ("user_token", Some(key_id), Some(expires_at)) => {
                    Credential::UserToken { digest: credential_digest, key_id, expires_at }
                }
                ("sign_in_link", None, None) => Credential::SignInLink { digest: credential_digest },
                ("oidc", None, None) => {
                    let (Some(subject), Some(name), Some(role), Some(grant)) =
                        (row.operator_subject, row.operator_name, row.operator_role, row.provider_grant)
                    else {
                        return Err(foreign("an OpenID Connect session without its operator"));
                    };
                    let role = role.parse().map_err(|_| foreign("unknown operator role"))?;
                    Credential::Oidc { digest: credential_digest, subject, name, role, grant: ProviderGrant(grant) }
                }
                _ => return Err(foreign("unknown credential")),
            };
        Ok(StoredSession {
            id_digest: digest(&row.id_digest)?,
            role,
            credential,
            csrf: row.csrf,
            created_at: from_db(row.created_at),
            last_seen_at: from_db(row.last_seen_at),
            expires_at: from_db(row.expires_at),
            ended: row
                .ended_reason
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| StoreError::Unknown(anyhow::Error::new(e)))?,
        })
    }
}

fn kind(credential: &Credential) -> (&'static str, Option<&str>) {
    match credential {
        Credential::AdminToken { .. } => ("admin_token", None),
        Credential::UserToken { key_id, .. } => ("user_token", Some(key_id.as_str())),
        Credential::SignInLink { .. } => ("sign_in_link", None),
        Credential::Oidc { .. } => ("oidc", None),
    }
}

/// `(user_id, credential_digest)` of an owner: the filter `($1 IS NULL OR user_id = $1) AND ($2 IS NULL OR
/// credential_digest = $2)` selects its sessions.
fn owner_filter(owner: &SessionOwner) -> (Option<&str>, Option<&[u8]>) {
    match owner {
        SessionOwner::User(user) => (Some(user.as_str()), None),
        SessionOwner::Credential(digest) => (None, Some(digest.as_slice())),
        SessionOwner::All => (None, None),
    }
}

#[async_trait]
impl SessionStore for PgStore {
    async fn open_session(
        &self,
        session: &NewSession,
        audit: &[herald_ports::NewAuditEvent],
    ) -> Result<(), StoreError> {
        let (credential_kind, credential_key) = kind(&session.credential);
        let user = match &session.role {
            SessionRole::Operator => None,
            SessionRole::User(user) => Some(user.as_str()),
        };
        let role = if user.is_some() { "user" } else { "operator" };
        let oidc = match &session.credential {
            Credential::Oidc { subject, name, role, grant, .. } => {
                Some((subject.as_str(), name.as_str(), *role, grant.0.as_str()))
            }
            _ => None,
        };
        // The clean-up rides on sign-ins, which are rare: at most a hundred old rows of each table per sign-in.
        let statement = format!(
            "WITH cleaned AS (DELETE FROM console_session WHERE id_digest IN (SELECT id_digest FROM console_session \
                 WHERE expires_at < $9 - interval '{KEEP_ENDED}' OR ended_at < $9 - interval '{KEEP_ENDED}' LIMIT 100)), \
             links AS (DELETE FROM console_sign_in_link WHERE code_digest IN (SELECT code_digest FROM \
                 console_sign_in_link WHERE expires_at < $9 - interval '{KEEP_ENDED}' LIMIT 100)) \
             INSERT INTO console_session (id_digest, user_id, role, credential_kind, credential_digest, \
                 credential_key, credential_expires_at, csrf, created_at, last_seen_at, expires_at, \
                 operator_subject, operator_name, operator_role, provider_grant) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $14)"
        );
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        sqlx::query(&statement)
            .bind(session.id_digest.as_slice())
            .bind(user)
            .bind(role)
            .bind(credential_kind)
            .bind(session.credential.digest().as_slice())
            .bind(credential_key)
            .bind(opt_to_db(session.credential.expires_at()))
            .bind(&session.csrf)
            .bind(to_db(session.created_at))
            .bind(to_db(session.expires_at))
            .bind(oidc.map(|o| o.0))
            .bind(oidc.map(|o| o.1))
            .bind(oidc.map(|o| o.2.as_str()))
            .bind(oidc.map(|o| o.3))
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
        crate::audit::commit_with(tx, audit).await
    }

    async fn session(&self, id_digest: &Digest) -> Result<Option<StoredSession>, StoreError> {
        let row: Option<SessionRow> =
            sqlx::query_as(&format!("SELECT {SESSION_COLUMNS} FROM console_session WHERE id_digest = $1"))
                .bind(id_digest.as_slice())
                .fetch_optional(&self.pool)
                .await
                .map_err(store_error)?;
        row.map(StoredSession::try_from).transpose()
    }

    async fn touch_session(&self, id_digest: &Digest, now: Timestamp) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE console_session SET last_seen_at = $2 \
             WHERE id_digest = $1 AND ended_at IS NULL AND last_seen_at < $2",
        )
        .bind(id_digest.as_slice())
        .bind(to_db(now))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn end_session(
        &self,
        id_digest: &Digest,
        end: SessionEnd,
        now: Timestamp,
        audit: &[herald_ports::NewAuditEvent],
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let done = sqlx::query(
            "UPDATE console_session SET ended_at = $2, ended_reason = $3 WHERE id_digest = $1 AND ended_at IS NULL",
        )
        .bind(id_digest.as_slice())
        .bind(to_db(now))
        .bind(end.as_str())
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;
        let ended = done.rows_affected() > 0;
        crate::audit::commit_with(tx, if ended { audit } else { &[] }).await?;
        Ok(ended)
    }

    async fn sessions_of(&self, owner: &SessionOwner) -> Result<Vec<StoredSession>, StoreError> {
        let (user, credential) = owner_filter(owner);
        let rows: Vec<SessionRow> = sqlx::query_as(&format!(
            "SELECT {SESSION_COLUMNS} FROM console_session WHERE ended_at IS NULL \
             AND ($1::text IS NULL OR user_id = $1) AND ($2::bytea IS NULL OR credential_digest = $2) \
             ORDER BY created_at DESC, id_digest LIMIT 1000"
        ))
        .bind(user)
        .bind(credential)
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.into_iter().map(StoredSession::try_from).collect()
    }

    async fn end_sessions(&self, owner: &SessionOwner, end: SessionEnd, now: Timestamp) -> Result<u64, StoreError> {
        let (user, credential) = owner_filter(owner);
        let done = sqlx::query(
            "UPDATE console_session SET ended_at = $3, ended_reason = $4 WHERE ended_at IS NULL \
             AND ($1::text IS NULL OR user_id = $1) AND ($2::bytea IS NULL OR credential_digest = $2)",
        )
        .bind(user)
        .bind(credential)
        .bind(to_db(now))
        .bind(end.as_str())
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected())
    }

    async fn create_sign_in_link(&self, link: &NewSignInLink) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO console_sign_in_link (code_digest, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(link.code_digest.as_slice())
        .bind(link.user.as_str())
        .bind(to_db(link.created_at))
        .bind(to_db(link.expires_at))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn redeem_sign_in_link(&self, code_digest: &Digest, now: Timestamp) -> Result<Option<UserId>, StoreError> {
        // One statement: of two concurrent redemptions, the second waits for the first's row lock and then
        // finds `used_at` set.
        let user: Option<(String,)> = sqlx::query_as(
            "UPDATE console_sign_in_link SET used_at = $2 \
             WHERE code_digest = $1 AND used_at IS NULL AND expires_at > $2 RETURNING user_id",
        )
        .bind(code_digest.as_slice())
        .bind(to_db(now))
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(user.map(|(user,)| UserId::new(user)))
    }
}
