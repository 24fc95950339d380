//! Console sessions and CSRF tokens.
//!
//! **Sessions are signed cookies, not server state.** After a successful sign-in (an admin token, or a
//! user's signed link or token) the console sets `herald_session` to
//! `v1.{base64url(payload)}.{base64url(HMAC-SHA256)}`, the payload being the role (operator, or the user
//! id), the expiry (8 hours) and a random CSRF secret. The MAC key is derived from the signing user-token key
//! with its own context string ([`crate::api::Authenticator::console_key`]), so every `herald serve`
//! process behind a load balancer accepts every other's cookies without a shared session table, and
//! changing that secret signs everybody out. Nothing secret is in the payload — no token, no destination —
//! only what the MAC protects from change. The cookie is `HttpOnly` (no script reads it),
//! `SameSite=Strict` (no other site's page sends it), `Path=/console`, `Max-Age` = the expiry, and `Secure`
//! when the request came over TLS (`X-Forwarded-Proto: https` from the TLS-terminating proxy).
//!
//! **CSRF.** Every form carries a hidden `csrf` field whose value is the session's CSRF secret; every POST
//! handler compares it (in constant time) with the one inside the verified cookie before it does anything,
//! and refuses with 403 and changes nothing when they differ — a synchronizer token whose server-side copy
//! travels in the signed cookie. Together with `SameSite=Strict` a forged cross-site form has neither the
//! cookie nor the token. The sign-in form has no session yet: a sign-in posted from another site (which
//! would sign the browser in as the attacker) is refused by the browser's own `Sec-Fetch-Site` header.

use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore as _;
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "herald_session";
/// How long a session lasts.
pub const SESSION_SECONDS: i64 = 8 * 3600;

/// Who a session belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Operator,
    User(String),
}

/// A verified session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub role: Role,
    /// Unix seconds.
    pub expires: i64,
    /// The CSRF secret forms must echo (hex, 32 characters).
    pub csrf: String,
}

impl Session {
    /// A new session for `role`, expiring [`SESSION_SECONDS`] after `now` (Unix seconds).
    #[must_use]
    pub fn new(role: Role, now: i64) -> Session {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        let csrf = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Session { role, expires: now + SESSION_SECONDS, csrf }
    }

    fn payload(&self) -> String {
        let who = match &self.role {
            Role::Operator => "o".to_owned(),
            Role::User(user) => format!("u:{}", URL_SAFE_NO_PAD.encode(user)),
        };
        format!("{who}|{}|{}", self.expires, self.csrf)
    }

    /// The signed cookie value.
    #[must_use]
    pub fn encode(&self, key: &[u8; 32]) -> String {
        let payload = self.payload();
        let tag = mac(key, payload.as_bytes());
        format!("v1.{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(tag))
    }

    /// The session in a cookie value, if its MAC is valid and it has not expired at `now`.
    #[must_use]
    pub fn decode(value: &str, key: &[u8; 32], now: i64) -> Option<Session> {
        let rest = value.strip_prefix("v1.")?;
        let (payload_b64, tag_b64) = rest.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload_b64).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag_b64).ok()?;
        let mut verifier = HmacSha256::new_from_slice(key).ok()?;
        verifier.update(&payload);
        verifier.verify_slice(&tag).ok()?;
        let payload = String::from_utf8(payload).ok()?;
        let mut parts = payload.split('|');
        let who = parts.next()?;
        let expires: i64 = parts.next()?.parse().ok()?;
        let csrf = parts.next()?.to_owned();
        if parts.next().is_some() || expires <= now || csrf.len() != 32 {
            return None;
        }
        let role = match who {
            "o" => Role::Operator,
            user => Role::User(String::from_utf8(URL_SAFE_NO_PAD.decode(user.strip_prefix("u:")?).ok()?).ok()?),
        };
        Some(Session { role, expires, csrf })
    }

    /// Whether a form's `csrf` field matches this session's secret (constant time).
    #[must_use]
    pub fn csrf_ok(&self, presented: &str) -> bool {
        presented.len() == self.csrf.len() && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }

    /// The `Set-Cookie` value that stores this session.
    #[must_use]
    pub fn set_cookie(&self, key: &[u8; 32], now: i64, secure: bool) -> String {
        format!(
            "{SESSION_COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.encode(key),
            (self.expires - now).max(0),
            if secure { "; Secure" } else { "" }
        )
    }
}

/// The `Set-Cookie` value that ends a session.
#[must_use]
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{SESSION_COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

fn mac(key: &[u8; 32], payload: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(payload);
    mac.finalize().into_bytes().to_vec()
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

/// Whether the request reached us over TLS (directly or through a proxy that says so).
#[must_use]
pub fn is_tls(headers: &HeaderMap) -> bool {
    headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_session_round_trips_and_refuses_tampering_expiry_and_other_keys() {
        let s = Session::new(Role::User("alice|o".into()), 1000);
        let value = s.encode(&KEY);
        assert_eq!(Session::decode(&value, &KEY, 1001), Some(s.clone()));
        assert_eq!(Session::decode(&value, &KEY, s.expires), None, "expired");
        assert_eq!(Session::decode(&value, &[8; 32], 1001), None, "another key");
        let forged = Session { role: Role::Operator, ..s.clone() }.payload();
        let forged = format!("v1.{}.{}", URL_SAFE_NO_PAD.encode(forged), value.rsplit('.').next().unwrap());
        assert_eq!(Session::decode(&forged, &KEY, 1001), None, "changed payload");
        assert!(s.csrf_ok(&s.csrf));
        assert!(!s.csrf_ok("0".repeat(32).as_str()));
        assert!(!s.csrf_ok(""));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_on_tls() {
        let s = Session::new(Role::Operator, 0);
        let plain = s.set_cookie(&KEY, 0, false);
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Strict") && plain.contains("Max-Age=28800"));
        assert!(!plain.contains("Secure"));
        assert!(s.set_cookie(&KEY, 0, true).ends_with("; Secure"));
    }
}
