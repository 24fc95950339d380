//! The API's bearer authentication: the token from the `Authorization` header, judged by the core's
//! [`Authenticator`](herald_core::auth::Authenticator), and the extractors each handler names for the role
//! it needs. A refusal is a 401 or 403 problem document that names no part of the token.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use herald_core::auth::{Caller, UserTokenError};
use herald_core::usecases::Actor;

use super::problem::Problem;
use crate::ApiState;

impl From<UserTokenError> for Problem {
    fn from(error: UserTokenError) -> Self {
        match error {
            UserTokenError::Invalid => Problem::unauthorized("the bearer token is not valid"),
            UserTokenError::UnknownKey => Problem::unauthorized(
                "the bearer token was signed by a key that is no longer accepted; ask for a new token",
            ),
            UserTokenError::Expired(at) => {
                let at = i64::try_from(at).ok().and_then(|s| s.checked_mul(1000)).map_or_else(
                    || at.to_string(),
                    |ms| super::model::rfc3339(herald_domain::Timestamp::from_millis(ms)),
                );
                Problem::unauthorized(&format!("the bearer token expired at {at}; ask for a new token"))
            }
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

/// Any caller with a valid bearer token, and who it is.
#[derive(Debug)]
pub struct Authenticated(pub Caller);

impl FromRequestParts<ApiState> for Authenticated {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers)?;
        state.auth.authenticate(token).map(Authenticated).map_err(Problem::from)
    }
}

/// A caller allowed to submit notifications and events: the name of its service token.
#[derive(Debug)]
pub struct Submitter(pub String);

impl FromRequestParts<ApiState> for Submitter {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Authenticated::from_request_parts(parts, state).await?.0 {
            Caller::Service(name) => Ok(Submitter(name)),
            Caller::Operator(_) | Caller::User(_) => Err(Problem::forbidden("submitting needs a service token")),
        }
    }
}

/// An operator token's caller: its name and role. What the role allows is the use case's to decide
/// (`herald_core::usecases`), which refuses naming the missing capability.
#[derive(Debug)]
pub struct Operator(pub Actor);

impl FromRequestParts<ApiState> for Operator {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Authenticated::from_request_parts(parts, state).await?.0 {
            Caller::Operator(actor) => Ok(Operator(actor)),
            Caller::Service(_) | Caller::User(_) => Err(Problem::forbidden("this needs an admin token")),
        }
    }
}

/// A caller allowed on the resources of the `{user_id}` in the path: that user's token (`None`), or an
/// admin token (the operator acting for the user, whose capability the use case checks).
///
/// Checked before the body is read, so a caller without access learns nothing from validation errors.
#[derive(Debug)]
pub struct UserAccess(pub Option<Actor>);

impl FromRequestParts<ApiState> for UserAccess {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let caller = Authenticated::from_request_parts(parts, state).await?.0;
        let params = RawPathParams::from_request_parts(parts, state).await.map_err(|_| Problem::not_found())?;
        let path_user = params.iter().find(|(name, _)| *name == "user_id").map(|(_, value)| value.to_owned());
        match (caller, path_user) {
            (Caller::Operator(actor), _) => Ok(UserAccess(Some(actor))),
            (Caller::User(user), Some(path_user)) if user == path_user => Ok(UserAccess(None)),
            (Caller::User(_), _) => Err(Problem::forbidden("this token belongs to another user")),
            (Caller::Service(_), _) => Err(Problem::forbidden("this needs the user's own token or an admin token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_why_without_the_token() {
        let expired = Problem::from(UserTokenError::Expired(1_000));
        assert!(expired.detail.contains("expired at 1970-01-01T00:16:40.000Z"), "{}", expired.detail);
        assert!(Problem::from(UserTokenError::UnknownKey).detail.contains("no longer accepted"));
    }
}
