//! Console sessions as the browser sees them: the cookie, and the CSRF token of every form.
//!
//! **Sessions are server-side** (`herald_core::sessions`, table `console_session`). The cookie holds only a
//! random id (32 bytes, base64url); the database holds its SHA-256, the role, the credential the session
//! is bound to, its CSRF secret and its times. Every console request looks the session up, and the
//! domain decides whether it still stands (`herald_domain::judge_session`): signing out ends it, so a
//! copied cookie stops working at once; removing the admin token that opened it from the configuration,
//! or retiring the key of the user token that opened it, ends it at its next request; it never outlives
//! the user token that opened it; and it ends after an idle gap (`console.session_idle_minutes`) or at its
//! absolute end (`console.session_hours`), whichever comes first. Every `herald serve` process behind a
//! load balancer sees the same sessions. A person sees their open sessions and can end any of them
//! (`/console/me/sessions`); `herald sessions end` ends a user's, or all.
//!
//! **The cookie** is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends it).
//! With `server.https = true` it is `__Host-herald_session`, `Secure`, `Path=/` — the prefix makes the
//! browser refuse it from plain http or from another host; without, `herald_session`, `Path=/console`,
//! and `Secure` when the request came through a proxy that says it was https (`X-Forwarded-Proto`).
//!
//! **CSRF.** Every form carries a hidden `csrf` field whose value is the session's CSRF secret (stored
//! with the session); every POST handler compares it in constant time before it does anything, and
//! refuses with 403 and changes nothing when they differ. Together with `SameSite=Strict` a forged
//! cross-site form has neither the cookie nor the token. The sign-in forms have no session yet: a sign-in
//! posted from another site (which would sign the browser in as someone else) is refused by the
//! browser's own `Sec-Fetch-Site` header.

use axum::http::{header, HeaderMap};
use herald_core::usecases::Actor;
use herald_ports::{SessionRole, StoredSession};
use subtle::ConstantTimeEq as _;

/// The session cookie's name without `server.https`.
pub const SESSION_COOKIE: &str = "herald_session";
/// The session cookie's name with `server.https`.
pub const HOST_SESSION_COOKIE: &str = "__Host-herald_session";

/// Who a session belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// An operator: their name and their role now.
    Operator(Actor),
    User(String),
}

/// A session that stands, as the pages use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub role: Role,
    /// The CSRF secret forms must echo (hex, 32 characters).
    pub csrf: String,
    pub stored: StoredSession,
}

impl Session {
    /// A standing session as the pages use it; `operator`: who an operator's session acts as now (from
    /// the credential that opened it). An operator's session without one opens nothing.
    #[must_use]
    pub fn new(stored: StoredSession, operator: Option<Actor>) -> Option<Self> {
        let role = match &stored.role {
            SessionRole::Operator => Role::Operator(operator?),
            SessionRole::User(user) => Role::User(user.as_str().to_owned()),
        };
        Some(Session { role, csrf: stored.csrf.clone(), stored })
    }

    /// The operator of an operator's session.
    #[must_use]
    pub fn actor(&self) -> Option<&Actor> {
        match &self.role {
            Role::Operator(actor) => Some(actor),
            Role::User(_) => None,
        }
    }

    /// Whether a form's `csrf` field matches this session's secret (constant time).
    #[must_use]
    pub fn csrf_ok(&self, presented: &str) -> bool {
        presented.len() == self.csrf.len() && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// How the session cookie is written: its name, path and whether it is `Secure`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieRules {
    /// `server.https`.
    pub https: bool,
    /// The request came through a proxy that says it was https.
    pub forwarded_tls: bool,
}

impl CookieRules {
    /// The name the session cookie has under these rules.
    #[must_use]
    pub fn name(self) -> &'static str {
        if self.https {
            HOST_SESSION_COOKIE
        } else {
            SESSION_COOKIE
        }
    }

    fn attributes(self, max_age: i64) -> String {
        if self.https {
            format!("Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={max_age}")
        } else {
            let secure = if self.forwarded_tls { "; Secure" } else { "" };
            format!("Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
        }
    }

    /// The `Set-Cookie` value that stores a session id for `max_age` seconds.
    #[must_use]
    pub fn set(self, id: &str, max_age: i64) -> String {
        format!("{}={id}; {}", self.name(), self.attributes(max_age.max(0)))
    }

    /// The `Set-Cookie` value that removes the session cookie.
    #[must_use]
    pub fn clear(self) -> String {
        format!("{}=; {}", self.name(), self.attributes(0))
    }
}

/// A cookie's value from the request headers.
#[must_use]
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_owned())
}

/// Whether the request reached us over TLS (through a proxy that says so).
#[must_use]
pub fn is_tls(headers: &HeaderMap) -> bool {
    headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

#[cfg(test)]
mod tests {
    use herald_domain::{Timestamp, UserId};
    use herald_ports::Credential;

    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_host_bound_over_https() {
        let plain = CookieRules { https: false, forwarded_tls: false }.set("abc", 28_800);
        assert_eq!(plain, "herald_session=abc; Path=/console; HttpOnly; SameSite=Strict; Max-Age=28800");
        let proxied = CookieRules { https: false, forwarded_tls: true }.set("abc", 60);
        assert!(proxied.ends_with("; Secure"));
        let https = CookieRules { https: true, forwarded_tls: false }.set("abc", 60);
        assert_eq!(https, "__Host-herald_session=abc; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=60");
        assert!(CookieRules { https: true, forwarded_tls: false }.clear().contains("Max-Age=0"));
    }

    #[test]
    fn csrf_tokens_compare_exactly() {
        let stored = StoredSession {
            id_digest: [1; 32],
            role: SessionRole::User(UserId::new("alice")),
            credential: Credential::SignInLink { digest: [2; 32] },
            csrf: "0123456789abcdef0123456789abcdef".to_owned(),
            created_at: Timestamp(0),
            last_seen_at: Timestamp(0),
            expires_at: Timestamp(1),
            ended: None,
        };
        let session = Session::new(stored, None).expect("a user's session");
        assert_eq!(session.role, Role::User("alice".into()));
        assert!(session.csrf_ok("0123456789abcdef0123456789abcdef"));
        assert!(!session.csrf_ok("0123456789abcdef0123456789abcdee"));
        assert!(!session.csrf_ok(""));
    }
}
