//! Signing in to the console at the identity provider (OpenID Connect, issue 43): the button's start, the
//! provider's way back, and their words in both languages. The protocol is the adapter's and the decisions
//! are the core's (`herald_core::oidc`); this module keeps the browser's half.
//!
//! **The pending cookie.** `begin` gives three secrets the browser must bring back — the `state` the
//! provider echoes, the ID token's `nonce`, the PKCE verifier — kept in one `HttpOnly` cookie
//! (`herald_oidc`, or `__Host-herald_oidc` with `server.https`) for ten minutes. It is `SameSite=Lax`,
//! not `Strict`: the provider sends the browser back with a top-level GET from its own site, which a
//! `Strict` cookie would not join. The callback compares the returned `state` with the cookie's (constant
//! time) before it uses the code, and removes the cookie whatever happens: a code from another browser's
//! sign-in, or a forged answer, opens nothing and writes nothing.
//!
//! **Landing.** The session cookie is `SameSite=Strict`, and a browser may withhold it from a navigation
//! whose chain of redirects started at another site (the provider). So the callback answers a small page
//! of its own that moves on to the console (`<meta http-equiv="refresh">`, no script): that navigation
//! starts here, and carries the cookie.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use herald_core::oidc::{self, Callback, SignInError};
use herald_ports::{IdentityError, PendingSignIn};
use maud::{html, DOCTYPE};
use secrecy::ExposeSecret as _;
use serde::Deserialize;

use super::i18n::{fill, Lang, Words};
use super::session::{self, CookieRules};
use super::{pages, see_other, Ctx};
use crate::state::ApiState;

/// The pending cookie's name without and with `server.https`.
const PENDING_COOKIE: &str = "herald_oidc";
const HOST_PENDING_COOKIE: &str = "__Host-herald_oidc";
/// How long a sign-in at the provider may take: ten minutes.
const PENDING_SECONDS: u32 = 600;

fn pending_name(rules: CookieRules) -> &'static str {
    if rules.https {
        HOST_PENDING_COOKIE
    } else {
        PENDING_COOKIE
    }
}

fn pending_cookie(rules: CookieRules, value: &str, max_age: u32) -> String {
    if rules.https {
        format!("{HOST_PENDING_COOKIE}={value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age={max_age}")
    } else {
        let secure = if rules.forwarded_tls { "; Secure" } else { "" };
        format!("{PENDING_COOKIE}={value}; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}")
    }
}

/// The cookie's value: the three secrets, each base64url (so `.` never occurs in them).
fn encode(pending: &PendingSignIn) -> Option<String> {
    let parts = [&pending.state, &pending.nonce, &pending.verifier];
    let ok =
        parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    ok.then(|| format!("{}.{}.{}", pending.state, pending.nonce, pending.verifier))
}

fn decode(value: &str) -> Option<PendingSignIn> {
    let mut parts = value.split('.');
    let (Some(state), Some(nonce), Some(verifier), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let pending = PendingSignIn { state: state.to_owned(), nonce: nonce.to_owned(), verifier: verifier.to_owned() };
    encode(&pending).map(|_| pending)
}

fn append_cookie(response: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// `GET /console/oidc/start`: on to the provider, the pending secrets in the browser's cookie.
pub async fn start(ctx: Ctx, State(state): State<ApiState>) -> Response {
    if ctx.session.is_some() {
        return super::home(ctx).await;
    }
    let o = ctx.lang.oidc();
    match oidc::begin(&state.services()).await {
        Ok(begun) => {
            let Some(value) = encode(&begun.pending) else {
                return ctx.message(StatusCode::BAD_GATEWAY, o.refused);
            };
            let mut response = see_other(&begun.url);
            append_cookie(&mut response, &pending_cookie(ctx.cookies, &value, PENDING_SECONDS));
            response
        }
        Err(SignInError::NotConfigured) => ctx.message(StatusCode::NOT_FOUND, ctx.w().page_not_found),
        Err(error) => {
            tracing::warn!(%error, "sign-in at the identity provider could not start");
            ctx.message(StatusCode::SERVICE_UNAVAILABLE, o.unavailable)
        }
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

impl std::fmt::Debug for CallbackQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackQuery").field("error", &self.error).finish_non_exhaustive()
    }
}

/// `GET /console/oidc/callback`: the provider's way back. Opens the operator's session, or says why not.
pub async fn callback(
    ctx: Ctx,
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let pending = session::cookie(&headers, pending_name(ctx.cookies)).and_then(|v| decode(&v));
    let error = q.error.map(|e| match q.error_description {
        Some(d) if !d.is_empty() => format!("{e}: {}", d.chars().take(200).collect::<String>()),
        _ => e,
    });
    let answer = Callback { code: q.code, state: q.state, error };
    let result = oidc::finish(&state.services(), state.console.sessions.policy, pending.as_ref(), answer).await;
    let mut response = match result {
        Ok((opened, actor)) => {
            tracing::info!("console sign-in at the identity provider");
            let max_age = opened.session.expires_at.since(opened.session.created_at).as_millis() / 1000;
            let cookie = ctx.cookies.set(opened.cookie.expose_secret(), i64::try_from(max_age).unwrap_or(i64::MAX));
            let mut response = landing(ctx.lang, &actor.name);
            append_cookie(&mut response, &cookie);
            response
        }
        Err(error) => refused(&ctx, error),
    };
    // The pending secrets are spent, whatever the outcome.
    append_cookie(&mut response, &pending_cookie(ctx.cookies, "", 0));
    response
}

/// The page of a refused sign-in: why, and nothing opened.
fn refused(ctx: &Ctx, error: SignInError) -> Response {
    let o = ctx.lang.oidc();
    let (status, text) = match error {
        SignInError::NotConfigured => (StatusCode::NOT_FOUND, ctx.w().page_not_found.to_owned()),
        SignInError::StateMismatch => (StatusCode::BAD_REQUEST, o.state_mismatch.to_owned()),
        SignInError::ProviderSaid(said) => (StatusCode::UNAUTHORIZED, fill(o.provider_said, &[("error", &said)])),
        SignInError::Provider(IdentityError::Refused(why)) => {
            tracing::info!(%why, "sign-in at the identity provider refused");
            (StatusCode::UNAUTHORIZED, o.refused.to_owned())
        }
        SignInError::Provider(IdentityError::Unavailable(why)) => {
            tracing::warn!(%why, "the identity provider is unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, o.unavailable.to_owned())
        }
        SignInError::NoRole { claim, name } => {
            (StatusCode::FORBIDDEN, fill(o.no_role, &[("name", &name), ("claim", &claim)]))
        }
        SignInError::Store(_) => return ctx.store_down(),
    };
    let mut response =
        ctx.page(status, o.not_signed_in, None, pages::message(&text, Some(("/console/login", ctx.w().signin_title))));
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::BAD_REQUEST {
        response = crate::api::limits::failed_authentication(response);
    }
    response
}

/// The page a successful sign-in lands on: it moves on to the console by itself (see the module's
/// "Landing"), with a link for a browser that does not.
fn landing(lang: Lang, name: &str) -> Response {
    let w: &Words = lang.words();
    let o = lang.oidc();
    let page = html! {
        (DOCTYPE)
        html lang=(lang.html_lang()) {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0; url=/console/overview";
                meta name="referrer" content="no-referrer";
                title { (o.signed_in) " — " (w.product) }
                link rel="stylesheet" href="/console/static/console.css";
            }
            body {
                main #main {
                    h1 { (o.signed_in) }
                    p { (fill(o.welcome, &[("name", name)])) }
                    p { a href="/console/overview" { (w.nav_overview) } }
                }
            }
        }
    };
    let mut response = (StatusCode::OK, page.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'"),
    );
    response
}

impl Lang {
    /// The words of the identity-provider sign-in in this language.
    #[must_use]
    pub fn oidc(self) -> &'static OidcWords {
        match self {
            Lang::En => &EN,
            Lang::Zh => &ZH,
        }
    }
}

/// Every text of the identity-provider sign-in, in one language.
pub struct OidcWords {
    /// The sign-in page's button: "Sign in with {provider}".
    pub button: &'static str,
    /// What the button calls a provider without a `display_name`.
    pub default_provider: &'static str,
    /// "or with a token" above the token form.
    pub or_token: &'static str,
    pub not_signed_in: &'static str,
    pub state_mismatch: &'static str,
    pub provider_said: &'static str,
    pub refused: &'static str,
    pub unavailable: &'static str,
    /// A signed-in operator's request while the provider cannot confirm their session.
    pub standing_unavailable: &'static str,
    pub no_role: &'static str,
    pub signed_in: &'static str,
    pub welcome: &'static str,
}

static EN: OidcWords = OidcWords {
    button: "Sign in with {provider}",
    default_provider: "your identity provider",
    or_token: "Or sign in with a token:",
    not_signed_in: "Not signed in",
    state_mismatch: "This answer does not belong to a sign-in this browser started (its state does not match, or the \
                     sign-in took longer than ten minutes). Nothing was opened; start again.",
    provider_said: "The identity provider did not sign you in ({error}). Nothing was opened.",
    refused: "The identity provider's answer could not be verified. Nothing was opened.",
    unavailable: "The identity provider cannot be reached just now. Nothing was opened; try again in a moment.",
    standing_unavailable: "The identity provider cannot be reached just now, so your session cannot be confirmed. \
                           Nothing was changed and you are still signed in; try again in a moment.",
    no_role: "You signed in at the identity provider as {name}, but no value of your claim “{claim}” gives a role \
              in Herald. Nothing was opened: ask an administrator for the viewer, resolver or admin role.",
    signed_in: "Signed in",
    welcome: "Welcome, {name}. On to the console…",
};

static ZH: OidcWords = OidcWords {
    button: "通过{provider}登录",
    default_provider: "身份提供方",
    or_token: "或使用令牌登录：",
    not_signed_in: "未登录",
    state_mismatch: "此应答不属于本浏览器发起的登录（state 不匹配，或登录超过十分钟）。未打开任何页面，请重新开始。",
    provider_said: "身份提供方未让您登录（{error}）。未打开任何页面。",
    refused: "无法验证身份提供方的应答。未打开任何页面。",
    unavailable: "暂时无法连接身份提供方。未打开任何页面，请稍后重试。",
    standing_unavailable: "暂时无法连接身份提供方，无法确认您的会话。未作任何更改，您仍处于登录状态，请稍后重试。",
    no_role: "您已在身份提供方登录为 {name}，但您的声明“{claim}”中没有任何值对应 Herald 的角色。未打开任何页面：请向管理员申请查看者、处理者或管理员角色。",
    signed_in: "已登录",
    welcome: "欢迎，{name}。正在进入控制台……",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pending_cookie_round_trips_and_refuses_anything_else() {
        let pending = PendingSignIn { state: "s-1_A".into(), nonce: "n".into(), verifier: "v".repeat(43) };
        let value = encode(&pending).expect("base64url parts");
        assert_eq!(decode(&value), Some(pending));
        assert_eq!(decode("a.b"), None);
        assert_eq!(decode("a.b.c.d"), None);
        assert_eq!(decode("a.b;c.d"), None);
        assert_eq!(decode("a..c"), None);
        let plain = pending_cookie(CookieRules { https: false, forwarded_tls: false }, "x", 600);
        assert_eq!(plain, "herald_oidc=x; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age=600");
        let https = pending_cookie(CookieRules { https: true, forwarded_tls: false }, "x", 0);
        assert!(https.starts_with("__Host-herald_oidc=x; Path=/; Secure; HttpOnly; SameSite=Lax"));
    }
}
