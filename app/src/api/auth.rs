//! Bearer authentication (SPEC §11): service tokens submit, admin tokens review and resolve, user tokens
//! (signed user ids) reach one user's own resources.
//!
//! Tokens are compared as SHA-256 digests with `subtle`, so neither the content nor the length of a
//! configured token leaks through timing. No token, digest or MAC is ever logged or echoed.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::problem::Problem;
use super::ApiState;

type HmacSha256 = Hmac<Sha256>;

/// Domain separation for the user-token MAC, so the secret cannot be abused to sign anything else.
const USER_TOKEN_CONTEXT: &[u8] = b"herald user token v1\0";

/// Who is calling, as proven by the bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    Service,
    Admin,
    User(String),
}

/// The verified token material, built once from the `[auth]` configuration.
pub struct Authenticator {
    service: Vec<[u8; 32]>,
    admin: Vec<[u8; 32]>,
    user_secret: SecretString,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("service_tokens", &self.service.len())
            .field("admin_tokens", &self.admin.len())
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

impl Authenticator {
    #[must_use]
    pub fn new(
        service_tokens: &[SecretString],
        admin_tokens: &[SecretString],
        user_token_secret: SecretString,
    ) -> Self {
        let hash = |tokens: &[SecretString]| tokens.iter().map(|t| digest(t.expose_secret().as_bytes())).collect();
        Authenticator { service: hash(service_tokens), admin: hash(admin_tokens), user_secret: user_token_secret }
    }

    fn mac(&self, user_id: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(self.user_secret.expose_secret().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(USER_TOKEN_CONTEXT);
        mac.update(user_id.as_bytes());
        mac
    }

    /// The bearer token of one user: `u.{base64url(user id)}.{base64url(HMAC-SHA256)}`. It does not expire;
    /// changing `user_token_secret` revokes every user token at once.
    #[must_use]
    pub fn user_token(&self, user_id: &str) -> SecretString {
        let tag = self.mac(user_id).finalize().into_bytes();
        SecretString::from(format!("u.{}.{}", URL_SAFE_NO_PAD.encode(user_id), URL_SAFE_NO_PAD.encode(tag)))
    }

    /// The key that signs console session cookies (`crate::console::session`): derived from
    /// `user_token_secret` under its own context, so it is the same in every process of one installation
    /// and cannot be used to make user tokens (or the reverse).
    #[must_use]
    pub fn console_key(&self) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(self.user_secret.expose_secret().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(b"herald console session key v1\0");
        mac.finalize().into_bytes().into()
    }

    fn verify_user_token(&self, token: &str) -> Option<String> {
        let rest = token.strip_prefix("u.")?;
        let (user_b64, tag_b64) = rest.split_once('.')?;
        let user = String::from_utf8(URL_SAFE_NO_PAD.decode(user_b64).ok()?).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag_b64).ok()?;
        self.mac(&user).verify_slice(&tag).ok()?;
        Some(user)
    }

    /// Identifies the caller of a bearer token, or `None` when the token is not valid.
    #[must_use]
    pub fn identify(&self, token: &str) -> Option<Caller> {
        if token.starts_with("u.") {
            if let Some(user) = self.verify_user_token(token) {
                return Some(Caller::User(user));
            }
        }
        let candidate = digest(token.as_bytes());
        // Admin first: a token configured in both lists gets the wider role.
        if matches_any(&candidate, &self.admin) {
            Some(Caller::Admin)
        } else if matches_any(&candidate, &self.service) {
            Some(Caller::Service)
        } else {
            None
        }
    }
}

pub(crate) fn bearer(headers: &HeaderMap) -> Result<&str, Problem> {
    let value =
        headers.get(header::AUTHORIZATION).ok_or_else(|| Problem::unauthorized("a bearer token is required"))?;
    let value = value.to_str().map_err(|_| Problem::unauthorized("the Authorization header is not a bearer token"))?;
    let (scheme, token) =
        value.split_once(' ').ok_or_else(|| Problem::unauthorized("the Authorization header is not a bearer token"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(Problem::unauthorized("the Authorization header is not a bearer token"));
    }
    Ok(token.trim())
}

impl FromRequestParts<ApiState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers)?;
        state.auth.identify(token).ok_or_else(|| Problem::unauthorized("the bearer token is not valid"))
    }
}

/// A caller allowed to submit notifications and events.
#[derive(Debug)]
pub struct Submitter;

impl FromRequestParts<ApiState> for Submitter {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Caller::from_request_parts(parts, state).await? {
            Caller::Service => Ok(Submitter),
            Caller::Admin | Caller::User(_) => Err(Problem::forbidden("submitting needs a service token")),
        }
    }
}

/// A caller allowed to list and resolve parked tasks.
#[derive(Debug)]
pub struct Administrator;

impl FromRequestParts<ApiState> for Administrator {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Caller::from_request_parts(parts, state).await? {
            Caller::Admin => Ok(Administrator),
            Caller::Service | Caller::User(_) => Err(Problem::forbidden("this needs an admin token")),
        }
    }
}

/// A caller allowed on the resources of the `{user_id}` in the path: that user's token, or an admin token.
///
/// Checked before the body is read, so a caller without access learns nothing from validation errors.
#[derive(Debug)]
pub struct UserAccess;

impl FromRequestParts<ApiState> for UserAccess {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| Problem::not_found())?;
        let path_user = params.iter().find(|(name, _)| *name == "user_id").map(|(_, value)| value.to_owned());
        match (caller, path_user) {
            (Caller::Admin, _) => Ok(UserAccess),
            (Caller::User(user), Some(path_user)) if user == path_user => Ok(UserAccess),
            (Caller::User(_), _) => Err(Problem::forbidden("this token belongs to another user")),
            (Caller::Service, _) => Err(Problem::forbidden("this needs the user's own token or an admin token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(auth.identify("service-token-1"), Some(Caller::Service));
        assert_eq!(auth.identify("admin-token-1"), Some(Caller::Admin));
        assert_eq!(auth.identify("service-token-"), None);
        assert_eq!(auth.identify(""), None);
    }

    #[test]
    fn user_tokens_are_bound_to_their_user_and_secret() {
        let auth = auth();
        let token = auth.user_token("alice");
        assert_eq!(auth.identify(token.expose_secret()), Some(Caller::User("alice".into())));

        let other = Authenticator::new(&[], &[], SecretString::from("another secret entirely, same length"));
        assert_eq!(other.identify(token.expose_secret()), None);

        // Swapping the user id while keeping the MAC must fail.
        let forged =
            format!("u.{}.{}", URL_SAFE_NO_PAD.encode("bob"), token.expose_secret().rsplit('.').next().unwrap());
        assert_eq!(auth.identify(&forged), None);
        assert_eq!(auth.identify("u.garbage"), None);
        assert_eq!(auth.identify("u.!!.!!"), None);
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let text = format!("{:?}", auth());
        assert!(!text.contains("secret of some length"));
        assert!(!text.contains("admin-token-1"));
    }
}
