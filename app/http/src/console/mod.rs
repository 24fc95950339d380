//! The console (SPEC §11 `/console`, issue 11): server-rendered operator and user pages served by
//! `herald serve` beside the API, over the same use cases (`herald_core::usecases`) and through the same
//! ports — no SQL here or in the templates; every read model is a `NotificationStore` method.
//!
//! * **Operator** (signed in with an admin token): the overview (tasks per channel × state, parked
//!   count, the last hour's outcomes, each channel's contract in words, its interval and next free slot,
//!   its last error class), the review queue (parked tasks oldest first, filtered by channel and age,
//!   paginated, each with its timeline, why it is parked and what to check, and the three decisions —
//!   **Mark sent**, **Mark not sent**, **Send again** — each with a required note, applied at most once:
//!   a second decision on the same task, from another tab or operator, shows the conflict and changes
//!   nothing), and the delivery log (by notification id, task reference, user id and event key).
//! * **User** (signed in with their signed link `/console/login/user?token=…` or their user token): the
//!   inbox, newest first, paginated, with each channel's status in words and mark-as-read; the channel
//!   settings (destination entered but never shown back, switch, test send with the honest answer, confirm).
//!
//! Sessions and CSRF are explained in [`session`], languages in [`i18n`]. Pages are HTML from
//! [`pages`]; `static/console.js` is a small progressive enhancement (the pages work without it).

pub mod audit;
pub mod i18n;
pub mod lookup;
pub mod oidc;
pub mod pages;
pub mod roles;
pub mod session;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use herald_domain::resolve::FinalState;
use herald_domain::{ChannelName, EventKey, Millis, NotificationRef, SessionEnd, TaskId, Timestamp, UserId};
use herald_ports::{InboxCursor, MarkRead, ResolveError, SessionRole, StoreError};
use maud::Markup;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use self::i18n::{fill, Lang, Words, LANG_COOKIE};
use self::lookup::{request_session, LookedUp};
use self::pages::{Flash, Frame};
use self::session::{CookieRules, Role, Session};
use crate::paging::next_page;
use crate::state::ApiState;
use herald_core::auth::Caller;
use herald_core::sessions::{self, Found};
use herald_core::usecases::{
    self, AccessError, Actor, Forbidden, LogQuery, PreferenceError, TestOutcome, TestSendError,
};

const CSS: &str = include_str!("static/console.css");
const JS: &str = include_str!("static/console.js");
const PAGE_SIZE: u32 = 20;

/// The console's routes, to be merged into the API router (paths all start with `/console`).
pub fn router() -> Router<ApiState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/", get(home))
        .route("/console/login", get(login_page).post(login))
        .route("/console/login/user", get(user_link_page).post(user_link))
        .route("/console/oidc/start", get(oidc::start))
        .route("/console/oidc/callback", get(oidc::callback))
        .route("/console/logout", post(logout))
        .route("/console/me/sessions", get(my_sessions))
        .route("/console/me/sessions/end", post(end_session))
        .route("/console/overview", get(overview))
        .route("/console/review", get(review))
        .route("/console/status-events", get(status_events))
        .route("/console/tasks/{task_id}/resolve", post(resolve))
        .route("/console/log", get(log))
        .route("/console/audit", get(audit::audit))
        .route("/console/notifications/{id}", get(notification))
        .route("/console/users/{user_id}/inbox", get(user_inbox))
        .route("/console/users/{user_id}/erasure", post(erase_user))
        .route("/console/me/inbox", get(my_inbox))
        .route("/console/me/inbox/{id}/read", post(mark_read))
        .route("/console/me/channels", get(my_channels))
        .route("/console/me/channels/{channel}", post(save_channel))
        .route("/console/me/channels/{channel}/test", post(test_channel))
        .route("/console/me/channels/{channel}/confirm", post(confirm_channel))
        .route("/console/static/console.css", get(|| async { static_file("text/css; charset=utf-8", CSS) }))
        .route("/console/static/console.js", get(|| async { static_file("text/javascript; charset=utf-8", JS) }))
        .route("/console/{*rest}", axum::routing::any(not_found))
}

/// A console address that names no page: the console's own page, not the API's problem document.
async fn not_found(ctx: Ctx) -> Response {
    let w = ctx.w();
    let link = match ctx.session.as_ref().map(|s| &s.role) {
        Some(Role::Operator(_)) => ("/console/overview", w.nav_overview),
        Some(Role::User(_)) => ("/console/me/inbox", w.nav_inbox),
        None => ("/console/login", w.signin_title),
    };
    ctx.page(StatusCode::NOT_FOUND, w.not_found, None, pages::message(w.page_not_found, Some(link)))
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "public, max-age=300")], body).into_response()
}

/// Where a request is, for the language switch: its path and query without a bearer token the query may
/// carry (the retired form of sign-in links), so that no link on the page repeats it. A link's one-time
/// code stays: the page's own form holds it anyway, and the switch must keep the link working.
fn here(path: &str, query: &str) -> String {
    let kept: Vec<&str> = query.split('&').filter(|p| !p.is_empty() && !p.starts_with("token=")).collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// What every console request knows: its language, its session (if one stands), whether its session
/// just ended (and why), how the cookie is written, and where it is (for the language switch).
pub struct Ctx {
    pub lang: Lang,
    /// Set when the request chose the language explicitly (`?lang=`): the answer remembers it.
    pub chose_lang: bool,
    pub session: Option<Session>,
    /// The session this request's cookie named was over, and has been ended now.
    pub ended: Option<SessionEnd>,
    /// The session could not be looked up (the store is down) or confirmed (the identity provider cannot
    /// be reached).
    pub unavailable: Option<Unavailable>,
    pub cookies: CookieRules,
    pub here: String,
}

/// Why a request's session could not be judged: each has its own words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// The store did not answer.
    Store,
    /// The identity provider that vouches for an operator's session could not be reached.
    Provider,
}

impl FromRequestParts<ApiState> for Ctx {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let explicit = query.split('&').find_map(|p| p.strip_prefix("lang="));
        let lang = Lang::of_request(explicit, &parts.headers);
        let found = match parts.extensions.remove::<LookedUp>() {
            Some(LookedUp(found)) => found,
            None => request_session(state, &parts.headers).await.map_err(drop),
        };
        let (session, ended, unavailable) = match found {
            Ok(Found::Live(stored)) => {
                let operator = state.auth.operator_of(&stored.credential);
                (Session::new(stored, operator), None, None)
            }
            Ok(Found::Ended(end)) => (None, Some(end), None),
            Ok(Found::None) => (None, None, None),
            Ok(Found::ProviderUnavailable) => (None, None, Some(Unavailable::Provider)),
            Err(()) => (None, None, Some(Unavailable::Store)),
        };
        let here = here(parts.uri.path(), query);
        Ok(Ctx {
            lang,
            chose_lang: explicit.and_then(Lang::parse).is_some(),
            session,
            ended,
            unavailable,
            cookies: CookieRules { https: state.console.https, forwarded_tls: session::is_tls(&parts.headers) },
            here,
        })
    }
}

// The `Err` of the access checks is the page to answer instead, returned at once by the handler: its
// size does not travel far, and boxing it would only add noise to every handler.
#[allow(clippy::result_large_err)]
impl Ctx {
    fn w(&self) -> &'static Words {
        self.lang.words()
    }

    /// A complete page.
    fn page(&self, status: StatusCode, title: &str, flash: Option<Flash>, content: Markup) -> Response {
        let frame = Frame { lang: self.lang, session: self.session.as_ref(), here: &self.here, title, flash };
        let mut response = (status, pages::layout(frame, content).into_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
        // Pages are per person and may show personal data: never cached, never framed.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        );
        if self.chose_lang {
            let cookie = format!("{LANG_COOKIE}={}; Path=/console; SameSite=Lax; Max-Age=31536000", self.lang.code());
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                headers.append(header::SET_COOKIE, value);
            }
        }
        response
    }

    fn message(&self, status: StatusCode, text: &str) -> Response {
        let link = match self.session.as_ref().map(|s| &s.role) {
            Some(Role::Operator(_)) => Some(("/console/overview", self.w().nav_overview)),
            Some(Role::User(_)) => Some(("/console/me/inbox", self.w().nav_inbox)),
            None => Some(("/console/login", self.w().signin_title)),
        };
        self.page(status, text, None, pages::message(text, link))
    }

    fn store_down(&self) -> Response {
        self.message(StatusCode::SERVICE_UNAVAILABLE, self.w().store_down)
    }

    /// The answer to a store failure: 410 for an erased user (SPEC §13), otherwise the database is down.
    fn store_failed(&self, error: &StoreError) -> Response {
        match error {
            StoreError::UserErased => self.message(StatusCode::GONE, self.w().user_gone),
            _ => self.store_down(),
        }
    }

    /// The operator's session and who they are, or the answer to give instead (sign-in, or 403 for a
    /// user). What the operator's role allows is the use case's to decide ([`Ctx::refused`]).
    fn operator(&self) -> Result<(&Session, &Actor), Response> {
        match &self.session {
            Some(s) => match s.actor() {
                Some(actor) => Ok((s, actor)),
                None => Err(self.message(StatusCode::FORBIDDEN, self.w().forbidden)),
            },
            None => Err(self.to_signin()),
        }
    }

    /// The page of a refusal: the operator's role lacks a capability; nothing was done.
    fn refused(&self, refused: Forbidden) -> Response {
        let w = self.lang.roles();
        let text = fill(
            w.missing_capability,
            &[("capability", w.capability(refused.capability)), ("role", w.role(refused.role))],
        );
        self.message(StatusCode::FORBIDDEN, &text)
    }

    /// The answer to a read use case's failure.
    fn failed(&self, error: AccessError) -> Response {
        match error {
            AccessError::Forbidden(refused) => self.refused(refused),
            AccessError::Store(error) => self.store_failed(&error),
        }
    }

    /// The user's session and id, or the answer to give instead.
    fn user(&self) -> Result<(&Session, UserId), Response> {
        match &self.session {
            Some(s) => match &s.role {
                Role::User(user) => Ok((s, UserId::new(user.clone()))),
                Role::Operator(_) => Err(self.message(StatusCode::FORBIDDEN, self.w().forbidden)),
            },
            None => Err(self.to_signin()),
        }
    }

    /// Any session, or the answer to give instead.
    fn signed_in(&self) -> Result<&Session, Response> {
        self.session.as_ref().ok_or_else(|| self.to_signin())
    }

    /// The sign-in page, saying why when the session just ended (and removing its cookie then), or a 503
    /// when the session could not be looked up or confirmed (the cookie kept: the session still stands).
    fn to_signin(&self) -> Response {
        match self.unavailable {
            Some(Unavailable::Store) => return self.store_down(),
            Some(Unavailable::Provider) => {
                return self.message(StatusCode::SERVICE_UNAVAILABLE, self.lang.oidc().standing_unavailable)
            }
            None => {}
        }
        match self.ended {
            Some(end) => {
                let mut response = see_other(&format!("/console/login?ended={}", end.as_str()));
                self.set_cookie(&mut response, &self.cookies.clear());
                response
            }
            None => see_other("/console/login?required=1"),
        }
    }

    fn set_cookie(&self, response: &mut Response, cookie: &str) {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }

    /// Checks a form's CSRF token against the session's; a mismatch is refused with nothing changed.
    fn check_csrf(&self, presented: &str) -> Result<(), Response> {
        match &self.session {
            Some(s) if s.csrf_ok(presented) => Ok(()),
            Some(_) => Err(self.message(StatusCode::FORBIDDEN, self.w().csrf_refused)),
            None => Err(self.to_signin()),
        }
    }

    /// Sets the cookie of a session just opened and sends the browser to `to`.
    fn signed_in_to(&self, opened: &sessions::Opened, to: &str) -> Response {
        use secrecy::ExposeSecret as _;
        let max_age = opened.session.expires_at.since(opened.session.created_at).as_millis() / 1000;
        let cookie = self.cookies.set(opened.cookie.expose_secret(), i64::try_from(max_age).unwrap_or(i64::MAX));
        let mut response = see_other(to);
        self.set_cookie(&mut response, &cookie);
        response.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        response
    }

    /// Opens a session for `role` bound to `credential`, and sends the browser on to its first page.
    async fn open_session(
        &self,
        state: &ApiState,
        role: SessionRole,
        credential: herald_ports::Credential,
        operator: Option<&Actor>,
    ) -> Response {
        let to = match role {
            SessionRole::Operator => "/console/overview",
            SessionRole::User(_) => "/console/me/inbox",
        };
        match sessions::open(&state.services(), state.console.sessions.policy, role, credential, operator).await {
            Ok(opened) => self.signed_in_to(&opened, to),
            Err(error) => self.store_failed(&error),
        }
    }

    /// Refuses a sign-in form posted from another site: it has no session to carry a CSRF token, and would
    /// sign the browser in as someone else. The browser's own `Sec-Fetch-Site` says where it came from.
    fn cross_site(&self, headers: &HeaderMap) -> Option<Response> {
        headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|site| !matches!(site, "same-origin" | "none"))
            .then(|| self.message(StatusCode::FORBIDDEN, self.w().csrf_refused))
    }
}

/// Who may ask for a page, as its handler receives them: found from the request's session before the
/// handler runs, or the answer to give instead (the sign-in page without a session, 403 for the other
/// kind of person).
// The `Err` is the page to answer instead, as for `Ctx`'s access checks.
#[allow(clippy::result_large_err)]
pub trait Visitor: Sized + Send {
    /// Who `ctx`'s session is, if it is one of these.
    ///
    /// # Errors
    /// The answer to give instead.
    fn of(ctx: &Ctx) -> Result<Self, Response>;
}

/// An operator, as who they act as.
impl Visitor for Actor {
    fn of(ctx: &Ctx) -> Result<Self, Response> {
        ctx.operator().map(|(_, actor)| actor.clone())
    }
}

/// A user, by their id.
impl Visitor for UserId {
    fn of(ctx: &Ctx) -> Result<Self, Response> {
        ctx.user().map(|(_, user)| user)
    }
}

/// Anyone signed in, by their session.
impl Visitor for Session {
    fn of(ctx: &Ctx) -> Result<Self, Response> {
        ctx.signed_in().cloned()
    }
}

/// A page asked for by a `V`: the handler runs only for one.
pub struct Visit<V> {
    pub ctx: Ctx,
    pub who: V,
}

impl<V: Visitor> FromRequestParts<ApiState> for Visit<V> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Response> {
        let Ok(ctx) = Ctx::from_request_parts(parts, state).await;
        let who = V::of(&ctx)?;
        Ok(Visit { ctx, who })
    }
}

/// A console form as posted: the session's CSRF token (`csrf`, in every form the pages write) beside the
/// form's own fields.
#[derive(Deserialize)]
struct WithCsrf<F> {
    #[serde(default)]
    csrf: String,
    #[serde(flatten)]
    form: F,
}

/// A form with no field of its own (sign out, test send, confirm, mark read): only the CSRF token.
#[derive(Deserialize)]
struct NoFields {}

/// A form posted by a `V`, its CSRF token checked: the handler runs only for one, with the right token.
/// A form that cannot be read is refused first (as axum's `Form` does), then a stranger is sent to sign
/// in, then a wrong token is refused — nothing changed in each case.
pub struct Posted<V, F> {
    pub ctx: Ctx,
    pub who: V,
    pub form: F,
}

impl<V: Visitor, F: DeserializeOwned + Send> FromRequest<ApiState> for Posted<V, F> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &ApiState) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let Ok(ctx) = Ctx::from_request_parts(&mut parts, state).await;
        let Form(posted) = Form::<WithCsrf<F>>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let who = V::of(&ctx)?;
        ctx.check_csrf(&posted.csrf)?;
        Ok(Posted { ctx, who, form: posted.form })
    }
}

fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn home(ctx: Ctx) -> Response {
    match ctx.session.as_ref().map(|s| &s.role) {
        Some(Role::Operator(_)) => see_other("/console/overview"),
        Some(Role::User(_)) => see_other("/console/me/inbox"),
        None => see_other("/console/login"),
    }
}

#[derive(Deserialize)]
struct LoginQuery {
    required: Option<String>,
    bye: Option<String>,
    failed: Option<String>,
    ended: Option<String>,
}

async fn login_page(ctx: Ctx, State(state): State<ApiState>, Query(q): Query<LoginQuery>) -> Response {
    // Someone signed in has nothing to do here: on to their first page.
    if ctx.session.is_some() {
        return home(ctx).await;
    }
    let w = ctx.w();
    let flash = if q.failed.is_some() {
        Some(Flash::Error(w.signin_failed.to_owned()))
    } else if let Some(end) = q.ended.as_deref().and_then(|e| e.parse::<SessionEnd>().ok()) {
        Some(Flash::Info(fill(w.session_ended, &[("why", w.session_end(end))])))
    } else if q.required.is_some() {
        Some(Flash::Info(w.signin_required.to_owned()))
    } else if q.bye.is_some() {
        Some(Flash::Info(w.signed_out.to_owned()))
    } else {
        None
    };
    let status = if q.failed.is_some() { StatusCode::UNAUTHORIZED } else { StatusCode::OK };
    let provider = state.console.identity_provider.as_deref().map(|name| {
        let o = ctx.lang.oidc();
        fill(o.button, &[("provider", if name.is_empty() { o.default_provider } else { name })])
    });
    ctx.page(status, w.signin_title, flash, pages::signin(w, provider.as_deref(), ctx.lang.oidc().or_token))
}

/// A `Debug` that shows only the type's name: the forms below carry a password, a code or a destination.
macro_rules! redacted_debug {
    ($form:ident) => {
        impl std::fmt::Debug for $form {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($form), "([redacted])"))
            }
        }
    };
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

redacted_debug!(LoginForm);

/// Sign-in with a token typed into the form: an admin token opens the operator pages, a user token that
/// user's pages. The token is compared and dropped; the session is bound to it by its digest.
async fn login(ctx: Ctx, State(state): State<ApiState>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    if let Some(refused) = ctx.cross_site(&headers) {
        return refused;
    }
    match state.auth.console_credential(form.token.trim()) {
        Some((Caller::Operator(actor), credential)) => {
            ctx.open_session(&state, SessionRole::Operator, credential, Some(&actor)).await
        }
        Some((Caller::User(user), credential)) => {
            ctx.open_session(&state, SessionRole::User(UserId::new(user)), credential, None).await
        }
        Some((Caller::Service(_), _)) | None => {
            tracing::info!("console sign-in refused");
            crate::api::limits::failed_authentication(see_other("/console/login?failed=1"))
        }
    }
}

#[derive(Deserialize)]
struct LinkQuery {
    code: Option<String>,
    token: Option<String>,
}

/// A user's one-time sign-in link (`/console/login/user?code=…`) shows a page with one button: opening
/// the link signs nobody in (a mail scanner that follows it burns nothing), the button's POST does.
async fn user_link_page(ctx: Ctx, Query(q): Query<LinkQuery>) -> Response {
    let w = ctx.w();
    match (q.code, q.token) {
        (Some(code), _) if sessions::well_formed(&code) => {
            ctx.page(StatusCode::OK, w.link_title, None, pages::link_confirm(w, &code))
        }
        // The old form carried a bearer token in the URL (history, proxy logs): never accepted.
        (None, Some(_)) => ctx.page(
            StatusCode::GONE,
            w.signin_title,
            Some(Flash::Error(w.link_old_form.to_owned())),
            pages::signin(w, None, ""),
        ),
        _ => ctx.page(
            StatusCode::NOT_FOUND,
            w.signin_title,
            Some(Flash::Error(w.link_failed.to_owned())),
            pages::signin(w, None, ""),
        ),
    }
}

#[derive(Deserialize)]
struct LinkForm {
    #[serde(default)]
    code: String,
}

redacted_debug!(LinkForm);

/// The link page's button: the code is burnt and exchanged for a session, once, before it expires —
/// checked like the sign-in form (`Sec-Fetch-Site`).
async fn user_link(
    ctx: Ctx,
    State(state): State<ApiState>,
    headers: HeaderMap,
    Form(form): Form<LinkForm>,
) -> Response {
    if let Some(refused) = ctx.cross_site(&headers) {
        return refused;
    }
    let w = ctx.w();
    match sessions::redeem_link(&state.services(), state.console.sessions.policy, form.code.trim()).await {
        Ok(Some(opened)) => ctx.signed_in_to(&opened, "/console/me/inbox"),
        Ok(None) => crate::api::limits::failed_authentication(ctx.page(
            StatusCode::UNAUTHORIZED,
            w.signin_title,
            Some(Flash::Error(w.link_failed.to_owned())),
            pages::signin(w, None, ""),
        )),
        Err(error) => ctx.store_failed(&error),
    }
}

/// Signing out ends the session on the server: its cookie, copied or not, opens nothing any more.
async fn logout(State(state): State<ApiState>, posted: Posted<Session, NoFields>) -> Response {
    let Posted { ctx, who: session, .. } = posted;
    if sessions::end(&state.services(), &session.stored.id_digest, SessionEnd::SignedOut, session.actor())
        .await
        .is_err()
    {
        return ctx.store_down();
    }
    let mut response = see_other("/console/login?bye=1");
    ctx.set_cookie(&mut response, &ctx.cookies.clear());
    response
}

#[derive(Deserialize, Default)]
struct SessionsQuery {
    #[serde(default)]
    notice: Option<String>,
}

/// The signed-in person's open sessions (a user's, or those opened with the same admin token).
async fn my_sessions(
    Visit { ctx, who: session }: Visit<Session>,
    State(state): State<ApiState>,
    Query(q): Query<SessionsQuery>,
) -> Response {
    let w = ctx.w();
    let Ok(list) = sessions::list_own(&state.services(), &session.stored).await else { return ctx.store_down() };
    let flash = q.notice.as_deref().filter(|n| *n == "ended").map(|_| Flash::Info(w.session_ended_one.to_owned()));
    ctx.page(StatusCode::OK, w.sessions_title, flash, pages::sessions(w, &session, &list))
}

#[derive(Deserialize)]
struct EndSessionForm {
    #[serde(default)]
    session: String,
}

/// Ends one of the person's own sessions (named by its id digest, in hex); ending this one signs out.
async fn end_session(State(state): State<ApiState>, posted: Posted<Session, EndSessionForm>) -> Response {
    let Posted { ctx, who: session, form } = posted;
    let Some(target) = pages::digest_from_hex(&form.session) else {
        return ctx.message(StatusCode::NOT_FOUND, ctx.w().not_found);
    };
    match sessions::end_own(&state.services(), &session.stored, session.actor(), &target).await {
        Ok(true) if target == session.stored.id_digest => {
            let mut response = see_other("/console/login?bye=1");
            ctx.set_cookie(&mut response, &ctx.cookies.clear());
            response
        }
        Ok(true) => see_other("/console/me/sessions?notice=ended"),
        Ok(false) => ctx.message(StatusCode::NOT_FOUND, ctx.w().not_found),
        Err(_) => ctx.store_down(),
    }
}

async fn overview(Visit { ctx, who: actor }: Visit<Actor>, State(state): State<ApiState>) -> Response {
    match usecases::overview(&state.services(), &actor).await {
        Ok(overview) => ctx.page(
            StatusCode::OK,
            ctx.w().overview_title,
            None,
            pages::overview(ctx.w(), &state.console.channel_names, &overview),
        ),
        Err(error) => ctx.failed(error),
    }
}

async fn status_events(Visit { ctx, .. }: Visit<Actor>, State(state): State<ApiState>) -> Response {
    match usecases::parked_status_events(&state.services(), 200).await {
        Ok(events) => {
            ctx.page(StatusCode::OK, ctx.w().status_events_title, None, pages::status_events(ctx.w(), &events))
        }
        Err(_) => ctx.store_down(),
    }
}

#[derive(Deserialize, Default)]
struct ReviewQuery {
    channel: Option<String>,
    min_age: Option<String>,
    after_at: Option<i64>,
    after_id: Option<i64>,
    done: Option<i64>,
    decision: Option<String>,
}

async fn review(ctx: Ctx, State(state): State<ApiState>, Query(q): Query<ReviewQuery>) -> Response {
    let flash = match (q.done, q.decision.as_deref().and_then(|d| d.parse::<FinalState>().ok())) {
        (Some(task), Some(FinalState::Resend)) => {
            Some(Flash::Info(fill(ctx.w().resolved_resend, &[("task", &task.to_string())])))
        }
        (Some(task), Some(decision)) => Some(Flash::Info(fill(
            ctx.w().resolved,
            &[("task", &task.to_string()), ("words", ctx.w().decision(decision))],
        ))),
        _ => None,
    };
    review_page(&ctx, &state, &q, StatusCode::OK, flash).await
}

async fn review_page(
    ctx: &Ctx,
    state: &ApiState,
    q: &ReviewQuery,
    status: StatusCode,
    flash: Option<Flash>,
) -> Response {
    let (session, actor) = match ctx.operator() {
        Ok(s) => s,
        Err(r) => return r,
    };
    let services = state.services();
    let channel = q.channel.as_deref().filter(|c| !c.is_empty()).map(ChannelName::new);
    let min_age = q.min_age.as_deref().and_then(|m| m.trim().parse::<u64>().ok());
    let after = q.after_at.zip(q.after_id).map(|(at, id)| (Timestamp(at), TaskId(id)));
    let page = usecases::review_queue(
        &services,
        actor,
        channel.clone(),
        min_age.map(|m| Millis(m.saturating_mul(60_000))),
        after,
        PAGE_SIZE + 1,
    )
    .await;
    let (now, mut page) = match page {
        Ok(page) => page,
        Err(error) => return ctx.failed(error),
    };
    let next = next_page(&mut page, PAGE_SIZE, |last| {
        format!(
            "/console/review?channel={}&min_age={}&after_at={}&after_id={}",
            channel.as_ref().map_or("", |c| c.as_str()),
            min_age.map(|m| m.to_string()).unwrap_or_default(),
            last.parked_at.as_millis(),
            last.task.task_id.0
        )
    });
    let tasks: Vec<_> = page
        .into_iter()
        .map(|p| {
            let capability = services
                .channels
                .get(&p.task.channel)
                .map_or(herald_domain::Capability::Neither, |r| r.contract.capability);
            (p.parked_at, p.task, capability)
        })
        .collect();
    let names: Vec<String> = services.channels.names().map(ToString::to_string).collect();
    let content = pages::review(
        ctx.w(),
        ctx.lang.roles(),
        &state.console.channel_names,
        session,
        now,
        &names,
        channel.as_ref().map(ChannelName::as_str),
        min_age,
        &tasks,
        next,
    );
    ctx.page(status, ctx.w().review_title, flash, content)
}

#[derive(Deserialize)]
struct ResolveForm {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    note: String,
}

/// One decision on a parked task. Success goes back to the queue with a message (POST-redirect-GET); a
/// task that is no longer parked answers 409 with the conflict in words and the queue as it is now.
async fn resolve(
    State(state): State<ApiState>,
    Path(task_id): Path<i64>,
    posted: Posted<Actor, ResolveForm>,
) -> Response {
    let Posted { ctx, who: actor, form } = posted;
    let w = ctx.w();
    let Ok(decision) = form.decision.parse::<FinalState>() else {
        return ctx.message(StatusCode::UNPROCESSABLE_ENTITY, w.not_found);
    };
    let note = form.note.trim();
    if note.is_empty()
        || note.chars().count() > crate::api::model::MAX_NOTE_CHARS
        || note.chars().any(|c| c.is_control() && c != '\n' && c != '\r')
    {
        let flash = Some(Flash::Error(w.note_required.to_owned()));
        return review_page(&ctx, &state, &ReviewQuery::default(), StatusCode::UNPROCESSABLE_ENTITY, flash).await;
    }
    let note = note.replace(['\r', '\n'], " ");
    match usecases::resolve(&state.services(), &actor, TaskId(task_id), decision, &note).await {
        Ok(_) => see_other(&format!("/console/review?done={task_id}&decision={}", decision.as_str())),
        Err(ResolveError::NotParked { state: now }) => {
            let flash =
                Some(Flash::Error(fill(w.conflict, &[("task", &task_id.to_string()), ("state", now.as_str())])));
            review_page(&ctx, &state, &ReviewQuery::default(), StatusCode::CONFLICT, flash).await
        }
        Err(ResolveError::NotFound) => ctx.message(StatusCode::NOT_FOUND, w.not_found),
        Err(ResolveError::Forbidden(refused)) => ctx.refused(refused),
        Err(ResolveError::Store(_)) => ctx.store_down(),
    }
}

#[derive(Deserialize, Default)]
struct LogQueryForm {
    #[serde(default)]
    q: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    event: String,
}

async fn log(
    Visit { ctx, who: actor }: Visit<Actor>,
    State(state): State<ApiState>,
    Query(f): Query<LogQueryForm>,
) -> Response {
    let w = ctx.w();
    let (q, user, event) = (f.q.trim(), f.user.trim(), f.event.trim());
    let query = if !q.is_empty() {
        Some(NotificationRef::parse(q).map_or_else(|| LogQuery::Reference(q.to_owned()), LogQuery::NotificationRef))
    } else if !user.is_empty() && !event.is_empty() {
        Some(LogQuery::Event(UserId::new(user), EventKey::new(event)))
    } else if !user.is_empty() {
        return see_other(&format!("/console/users/{}/inbox", encode_path(user)));
    } else if !event.is_empty() {
        // One event key names one notification per user (the unique key is (user, event key)): alone
        // it names none, and finding it across users would read every notification.
        let form = pages::log_form(w, q, user, event);
        return ctx.page(
            StatusCode::UNPROCESSABLE_ENTITY,
            w.log_title,
            Some(Flash::Error(w.log_event_alone.to_owned())),
            form,
        );
    } else {
        None
    };
    let form = pages::log_form(w, q, user, event);
    let Some(query) = query else { return ctx.page(StatusCode::OK, w.log_title, None, form) };
    match usecases::find_notification(&state.services(), &actor, &query).await {
        Ok(Some(view)) => see_other(&format!("/console/notifications/{}", view.notification_ref)),
        Ok(None) => ctx.page(StatusCode::NOT_FOUND, w.log_title, Some(Flash::Info(w.log_nothing.to_owned())), form),
        Err(error) => ctx.failed(error),
    }
}

/// Percent-encodes one path segment.
fn encode_path(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn notification(
    Visit { ctx, who: actor }: Visit<Actor>,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Response {
    let w = ctx.w();
    let Some(id) = NotificationRef::parse(&id) else { return ctx.message(StatusCode::NOT_FOUND, w.not_found) };
    match usecases::find_notification(&state.services(), &actor, &LogQuery::NotificationRef(id)).await {
        Ok(Some(view)) => {
            let title = format!("{} {}", w.notification_title, view.notification_ref);
            ctx.page(StatusCode::OK, &title, None, pages::notification(w, &state.console.channel_names, &view))
        }
        Ok(None) => ctx.message(StatusCode::NOT_FOUND, w.not_found),
        Err(error) => ctx.failed(error),
    }
}

#[derive(Deserialize, Default)]
struct PageQuery {
    before_at: Option<i64>,
    /// The opaque id of the last notification of the previous page.
    before: Option<String>,
}

async fn inbox_response(
    ctx: &Ctx,
    state: &ApiState,
    user: &UserId,
    q: &PageQuery,
    own: bool,
    base: &str,
    title: &str,
) -> Response {
    let cursor = q
        .before_at
        .zip(q.before.as_deref().and_then(NotificationRef::parse))
        .map(|(at, notification)| InboxCursor { created_at: Timestamp(at), notification });
    let operator = if own { None } else { ctx.session.as_ref().and_then(Session::actor) };
    let mut items = match usecases::inbox_page(&state.services(), user, operator, cursor, PAGE_SIZE + 1).await {
        Ok(items) => items,
        Err(error) => return ctx.failed(error),
    };
    let next = next_page(&mut items, PAGE_SIZE, |l| {
        format!("{base}?before_at={}&before={}", l.created_at.as_millis(), l.notification_ref)
    });
    let session = if own { ctx.session.as_ref() } else { None };
    let erase = match (own, ctx.session.as_ref()) {
        (false, Some(operator)) => Some(pages::erase_form(ctx.w(), operator, &encode_path(user.as_str()))),
        _ => None,
    };
    let content = maud::html! { (pages::inbox(ctx.w(), &state.console.channel_names, session, &items, next)) @if let Some(form) = erase { (form) } };
    ctx.page(StatusCode::OK, title, None, content)
}

#[derive(Deserialize, Default)]
struct EraseForm {
    #[serde(default)]
    confirm: String,
}

/// An operator erases a user (SPEC §13), through the same use case as the API and the command line.
async fn erase_user(
    State(state): State<ApiState>,
    Path(user_id): Path<String>,
    posted: Posted<Actor, EraseForm>,
) -> Response {
    let Posted { ctx, who: actor, form } = posted;
    let w = ctx.w();
    if herald_domain::check_user_id(&user_id).is_err() {
        return ctx.message(StatusCode::NOT_FOUND, w.not_found);
    }
    if form.confirm.trim() != user_id {
        return ctx.message(StatusCode::UNPROCESSABLE_ENTITY, w.erase_mismatch);
    }
    match usecases::erase_user(&state.services(), &actor, &UserId::new(user_id)).await {
        Ok(erasure) if erasure.first => ctx.message(StatusCode::OK, w.erase_done),
        Ok(_) => ctx.message(StatusCode::OK, w.erase_repeat),
        Err(error) => ctx.failed(error),
    }
}

/// An operator's read-only view of one user's inbox (the delivery log by user id).
async fn user_inbox(
    Visit { ctx, .. }: Visit<Actor>,
    State(state): State<ApiState>,
    Path(user_id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    let title = format!("{} {user_id}", ctx.w().user_inbox_title);
    let base = format!("/console/users/{}/inbox", encode_path(&user_id));
    inbox_response(&ctx, &state, &UserId::new(user_id), &q, false, &base, &title).await
}

async fn my_inbox(
    Visit { ctx, who: user }: Visit<UserId>,
    State(state): State<ApiState>,
    Query(q): Query<PageQuery>,
) -> Response {
    inbox_response(&ctx, &state, &user, &q, true, "/console/me/inbox", ctx.w().inbox_title).await
}

async fn mark_read(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    posted: Posted<UserId, NoFields>,
) -> Response {
    let Posted { ctx, who: user, .. } = posted;
    let Some(id) = NotificationRef::parse(&id) else { return ctx.message(StatusCode::NOT_FOUND, ctx.w().not_found) };
    match usecases::mark_read(&state.services(), &user, None, id).await {
        Ok(MarkRead::Marked(_) | MarkRead::AlreadyRead(_)) => see_other(&format!("/console/me/inbox#n-{id}")),
        Ok(MarkRead::NotFound) => ctx.message(StatusCode::NOT_FOUND, ctx.w().not_found),
        Err(error) => ctx.failed(error),
    }
}

async fn channels_page(
    ctx: &Ctx,
    state: &ApiState,
    status: StatusCode,
    flash: Option<Flash>,
    tested: Option<(&str, &Flash)>,
    pending_confirm: Option<&str>,
) -> Response {
    let (session, user) = match ctx.user() {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Ok(prefs) = usecases::user_channels(&state.services(), &user).await else { return ctx.store_down() };
    let prefs: Vec<(String, _)> = prefs.into_iter().map(|(c, p)| (c.to_string(), p)).collect();
    let names = &state.console.channel_names;
    let content = pages::channels(ctx.w(), names, session, &prefs, tested, pending_confirm);
    ctx.page(status, ctx.w().channels_title, flash, content)
}

#[derive(Deserialize, Default)]
struct ChannelsQuery {
    notice: Option<String>,
    /// The channel a test send just went to, and what came of it (`TestResult`).
    tested: Option<String>,
    result: Option<String>,
    secs: Option<u64>,
    why: Option<String>,
}

/// What a test send came to, as its redirect carries it: the page that shows it can be reloaded without
/// sending again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TestResult {
    Accepted,
    Refused,
    NotSent,
    Unknown,
    TooSoon,
    Quota,
    NoDestination,
}

impl TestResult {
    const ALL: [TestResult; 7] = [
        TestResult::Accepted,
        TestResult::Refused,
        TestResult::NotSent,
        TestResult::Unknown,
        TestResult::TooSoon,
        TestResult::Quota,
        TestResult::NoDestination,
    ];

    fn code(self) -> &'static str {
        match self {
            TestResult::Accepted => "accepted",
            TestResult::Refused => "refused",
            TestResult::NotSent => "not_sent",
            TestResult::Unknown => "unknown",
            TestResult::TooSoon => "too_soon",
            TestResult::Quota => "quota",
            TestResult::NoDestination => "no_destination",
        }
    }

    fn parse(code: &str) -> Option<TestResult> {
        TestResult::ALL.into_iter().find(|r| r.code() == code)
    }

    /// The words of the result for `channel` (its display name).
    fn flash(self, w: &Words, channel: &str, secs: u64, why: &str) -> Flash {
        let say = |template: &str| fill(template, &[("channel", channel), ("secs", &secs.to_string()), ("why", why)]);
        match self {
            TestResult::Accepted => Flash::Info(say(w.test_accepted)),
            TestResult::Refused => Flash::Error(say(w.test_refused)),
            TestResult::NotSent => Flash::Error(say(w.test_not_sent)),
            TestResult::Unknown => Flash::Error(say(w.test_unknown)),
            TestResult::TooSoon => Flash::Error(say(w.test_too_soon)),
            TestResult::Quota => Flash::Error(say(w.test_quota)),
            TestResult::NoDestination => Flash::Error(w.test_no_destination.to_owned()),
        }
    }
}

async fn my_channels(ctx: Ctx, State(state): State<ApiState>, Query(q): Query<ChannelsQuery>) -> Response {
    let flash = match q.notice.as_deref() {
        Some("saved") => Some(Flash::Info(ctx.w().saved.to_owned())),
        Some("confirmed") => Some(Flash::Info(ctx.w().confirmed.to_owned())),
        _ => None,
    };
    let result = q.tested.as_deref().zip(q.result.as_deref().and_then(TestResult::parse));
    let shown = result.map(|(channel, result)| {
        let name = state.console.channel_names.shown(channel);
        (channel, result, result.flash(ctx.w(), name, q.secs.unwrap_or(0), q.why.as_deref().unwrap_or("")))
    });
    let tested = shown.as_ref().map(|(channel, _, flash)| (*channel, flash));
    let confirm = shown.as_ref().filter(|(_, r, _)| *r == TestResult::Accepted).map(|(c, _, _)| *c);
    channels_page(&ctx, &state, StatusCode::OK, flash, tested, confirm).await
}

#[derive(Deserialize)]
struct ChannelForm {
    #[serde(default)]
    destination: String,
    enabled: Option<String>,
}

redacted_debug!(ChannelForm);

async fn save_channel(
    State(state): State<ApiState>,
    Path(channel): Path<String>,
    posted: Posted<UserId, ChannelForm>,
) -> Response {
    let Posted { ctx, who: user, form } = posted;
    let w = ctx.w();
    // A blank field keeps the stored destination, as the form says.
    let destination = form.destination.trim();
    let destination = (!destination.is_empty()).then(|| secrecy::SecretString::from(destination.to_owned()));
    let enabled = form.enabled.is_some();
    let refused = |words: &str| Some(Flash::Error(words.to_owned()));
    let (status, flash) = match usecases::set_preference(
        &state.services(),
        &user,
        None,
        &ChannelName::new(channel),
        enabled,
        destination.as_ref(),
    )
    .await
    {
        Ok(_) => return see_other("/console/me/channels?notice=saved"),
        Err(PreferenceError::InvalidDestination(_)) => (StatusCode::UNPROCESSABLE_ENTITY, refused(w.bad_destination)),
        Err(PreferenceError::NoDestination) => (StatusCode::CONFLICT, refused(w.need_destination)),
        Err(PreferenceError::SubscriptionExpired) => (StatusCode::CONFLICT, refused(w.subscription_expired)),
        Err(PreferenceError::UnknownChannel) => return ctx.message(StatusCode::NOT_FOUND, w.not_found),
        Err(PreferenceError::Forbidden(refused)) => return ctx.refused(refused),
        Err(PreferenceError::Encryption | PreferenceError::Store(_)) => return ctx.store_down(),
    };
    channels_page(&ctx, &state, status, flash, None, None).await
}

/// A test send: its result goes back to the channels page by a redirect (POST-redirect-GET), which shows
/// it beside the tested channel; reloading that page sends nothing.
async fn test_channel(
    State(state): State<ApiState>,
    Path(channel): Path<String>,
    posted: Posted<UserId, NoFields>,
) -> Response {
    let Posted { ctx, who: user, .. } = posted;
    let name = ChannelName::new(channel.clone());
    let (result, secs, why) = match usecases::test_send(&state.services(), &user, None, &name).await {
        Ok(sent) => match sent.outcome {
            TestOutcome::Accepted => (TestResult::Accepted, 0, String::new()),
            TestOutcome::Refused { why } => (TestResult::Refused, 0, why.chars().take(200).collect()),
            TestOutcome::NotSent => (TestResult::NotSent, 0, String::new()),
            TestOutcome::Unknown => (TestResult::Unknown, 0, String::new()),
        },
        Err(error @ (TestSendError::TooSoon(wait) | TestSendError::QuotaExceeded(wait))) => {
            let result =
                if matches!(error, TestSendError::QuotaExceeded(_)) { TestResult::Quota } else { TestResult::TooSoon };
            (result, wait.0.div_ceil(1000), String::new())
        }
        Err(TestSendError::NoDestination) => (TestResult::NoDestination, 0, String::new()),
        Err(TestSendError::UnknownChannel) => return ctx.message(StatusCode::NOT_FOUND, ctx.w().not_found),
        Err(_) => return ctx.store_down(),
    };
    let channel = encode_path(&channel);
    let mut to = format!("/console/me/channels?tested={channel}&result={}", result.code());
    if secs > 0 {
        to.push_str(&format!("&secs={secs}"));
    }
    if !why.is_empty() {
        to.push_str(&format!("&why={}", encode_path(&why)));
    }
    to.push_str(&format!("#ch-{channel}"));
    see_other(&to)
}

async fn confirm_channel(
    State(state): State<ApiState>,
    Path(channel): Path<String>,
    posted: Posted<UserId, NoFields>,
) -> Response {
    let Posted { ctx, who: user, .. } = posted;
    let w = ctx.w();
    match usecases::confirm(&state.services(), &user, None, &ChannelName::new(channel)).await {
        Ok(_) => see_other("/console/me/channels?notice=confirmed"),
        Err(TestSendError::NothingToConfirm | TestSendError::NoDestination) => {
            let flash = Some(Flash::Error(w.nothing_to_confirm.to_owned()));
            channels_page(&ctx, &state, StatusCode::CONFLICT, flash, None, None).await
        }
        Err(TestSendError::UnknownChannel) => ctx.message(StatusCode::NOT_FOUND, w.not_found),
        Err(_) => ctx.store_down(),
    }
}
