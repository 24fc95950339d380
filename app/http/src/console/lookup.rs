//! The session a console request's cookie names, looked up once per request: by the API's limits (to
//! give a signed-in page the budget of an authenticated request) or, for a request that came another
//! way, by the page's own context.

use axum::http::HeaderMap;
use herald_core::sessions::{self, Found};
use herald_ports::StoreError;

use super::session::{self, CookieRules};
use crate::state::ApiState;

/// The session a request's cookie names, judged now (`herald_core::sessions::find`). The API's limits look it
/// up first, to give a signed-in page the budget of an authenticated request, and leave it in the
/// request's extensions for the page's context (`Ctx`); a request that came another way is looked up here.
///
/// # Errors
/// Store failures.
pub async fn request_session(state: &ApiState, headers: &HeaderMap) -> Result<Found, StoreError> {
    let rules = CookieRules { https: state.console.https, forwarded_tls: session::is_tls(headers) };
    let Some(cookie) = session::cookie(headers, rules.name()) else { return Ok(Found::None) };
    sessions::find(&state.services(), state.auth.as_ref(), state.console.sessions.policy, &cookie).await
}

/// A looked-up session, as the limits layer leaves it for the page's context (`Ctx`).
#[derive(Clone, Debug)]
pub struct LookedUp(pub Result<Found, ()>);
