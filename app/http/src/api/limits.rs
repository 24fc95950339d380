//! Bounds on every client: how long a request may take to arrive and to be answered, how many requests
//! run at once — authenticated and anonymous ones apart —, how fast one token, one session or one client
//! address may call, and how often an address may fail to authenticate.
//!
//! * **Header-read timeout** — a connection that has not sent a whole request head within
//!   `header_read_timeout` is closed (a slow-loris client holds nothing for long); see [`super::serve`].
//! * **Body timeout** — every request body is read here, before any handler runs, and one that has not
//!   fully arrived within `body_timeout` is answered 408 (one larger than the body limit, 413). A handler
//!   — JSON or a console form — only ever reads a body that is already there.
//! * **Request timeout** — a request not answered within `request_timeout` is answered 503 with
//!   `Retry-After`; its handler is dropped (a transaction in flight rolls back).
//! * **Two budgets** — who is asking is decided from the head alone: a valid bearer token, or a console
//!   session that stands (looked up once here and handed on to the console). Those run under
//!   `max_in_flight`; everything else — no credentials, invalid ones, sign-in forms — under the much
//!   smaller `anonymous_max_in_flight`, so anonymous clients can never take a slot an authenticated request
//!   needs. One more request than a budget allows is answered at once with 503 and `Retry-After`.
//!   `/healthz` and `/metrics` are never shed.
//! * **Rates** — each valid bearer token and each console session has a token bucket of `rate_burst`
//!   requests refilled at `rate_per_second`; each client address one of `anonymous_rate_burst` at
//!   `anonymous_rate_per_second` for its anonymous requests. An empty bucket answers 429 with
//!   `Retry-After`. Buckets are keyed by a SHA-256 (of the token, the session id digest, the address): no
//!   token is kept, and only valid tokens and sessions get a bucket of their own, so invented ones cannot
//!   grow the table.
//! * **Failed authentication** — an invalid bearer token (401) or a refused console sign-in spends one of
//!   the address's `failed_auth_burst` failures, refilled at `failed_auth_per_minute`; once they are spent,
//!   further attempts with credentials from that address are answered 429 with `Retry-After` without being
//!   checked, until the bucket refills.
//! * **Client address** — the TCP peer, or with `forwarded_for = true` the last address of the last
//!   `X-Forwarded-For` header: the one the proxy in front of Herald appended (set it only behind a proxy
//!   that does, or clients choose their own address).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;

use super::problem::Problem;

/// The bounds of one API server. [`Limits::default`] holds the defaults of the `[server]` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub body_timeout: Duration,
    /// Authenticated requests in progress at once.
    pub max_in_flight: usize,
    pub rate_per_second: u32,
    pub rate_burst: u32,
    /// Anonymous requests in progress at once (no valid token, no standing session).
    pub anonymous_max_in_flight: usize,
    pub anonymous_rate_per_second: u32,
    pub anonymous_rate_burst: u32,
    /// Failed authentications an address may make at once, and how many come back per minute.
    pub failed_auth_burst: u32,
    pub failed_auth_per_minute: u32,
    /// Take the client address from `X-Forwarded-For` (behind a proxy that appends it).
    pub forwarded_for: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            max_in_flight: 512,
            rate_per_second: 100,
            rate_burst: 200,
            anonymous_max_in_flight: anonymous_budget(512),
            anonymous_rate_per_second: 10,
            anonymous_rate_burst: 40,
            failed_auth_burst: 10,
            failed_auth_per_minute: 6,
            forwarded_for: false,
        }
    }
}

/// The anonymous budget when none is configured: an eighth of the authenticated one, at most 64.
#[must_use]
pub fn anonymous_budget(max_in_flight: usize) -> usize {
    (max_in_flight / 8).clamp(1, 64)
}

/// How long a JSON body may take to arrive, put on every request for `ApiJson`.
#[derive(Clone, Copy, Debug)]
pub struct BodyTimeout(pub Duration);

/// Paths that are never shed nor rate-limited: a liveness probe and a scrape must answer under load.
fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/metrics")
}

/// A token bucket per key, with the clock as an argument so the arithmetic is tested without waiting.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<[u8; 32], (f64, Instant)>>,
}

/// Above this many buckets, full ones are dropped (a full bucket is the same as no bucket).
const PRUNE_ABOVE: usize = 10_000;

impl RateLimiter {
    #[must_use]
    pub fn new(per_second: u32, burst: u32) -> Self {
        RateLimiter::per_minute(per_second.max(1).saturating_mul(60), burst)
    }

    /// A bucket of `burst` refilled at `per_minute`.
    #[must_use]
    pub fn per_minute(per_minute: u32, burst: u32) -> Self {
        RateLimiter {
            per_second: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::default(),
        }
    }

    /// How long until `key`'s bucket holds a whole request at `now`, without taking one.
    ///
    /// # Errors
    /// The wait, when the bucket is empty.
    pub fn peek(&self, key: [u8; 32], now: Instant) -> Result<(), Duration> {
        let buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((tokens, at)) = buckets.get(&key) else { return Ok(()) };
        let refilled = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        if refilled >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - refilled) / self.per_second))
        }
    }

    /// Takes one request from `key`'s bucket at `now`, or says how long until one is available.
    ///
    /// # Errors
    /// The wait, when the bucket is empty.
    pub fn take(&self, key: [u8; 32], now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > PRUNE_ABOVE {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, (tokens, at)| *tokens + now.saturating_duration_since(*at).as_secs_f64() * rate < burst);
        }
        let (tokens, at) = buckets.entry(key).or_insert((self.burst, now));
        let refilled = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * self.per_second).min(self.burst);
        *at = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Ok(())
        } else {
            *tokens = refilled;
            Err(Duration::from_secs_f64((1.0 - refilled) / self.per_second))
        }
    }
}

/// What the middleware of [`apply`] share.
#[derive(Clone)]
struct Shared {
    limits: Limits,
    authenticated: Arc<Semaphore>,
    anonymous: Arc<Semaphore>,
    /// Per valid token and per standing session.
    rates: Arc<RateLimiter>,
    /// Per client address, for anonymous requests.
    addresses: Arc<RateLimiter>,
    /// Failed authentications per client address.
    failures: Arc<RateLimiter>,
    state: super::ApiState,
}

/// Marks a response as a failed authentication (a refused console sign-in), so that it spends one of the
/// client address's failures. A 401 answer counts without it.
#[derive(Clone, Copy, Debug)]
pub struct AuthFailed;

/// `response`, marked as a failed authentication ([`AuthFailed`]).
pub fn failed_authentication(mut response: Response) -> Response {
    response.extensions_mut().insert(AuthFailed);
    response
}

fn overloaded() -> Response {
    // A 503 problem carries `Retry-After: 1` (`Problem::into_response`).
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "Too many requests in progress",
        "the server is at its limit of requests in progress; retry shortly",
    )
    .into_response()
}

fn too_many(wait: Duration, what: &str) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many requests",
        format!("{what}; try again in {seconds} s"),
    )
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(u64::try_from(seconds).unwrap_or(u64::MAX)));
    response
}

fn timed_out(limit: Duration) -> Response {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "timeout",
        "Request took too long",
        format!("the request was not answered within {} ms and was abandoned; retry later", limit.as_millis()),
    )
    .into_response()
}

fn body_too_slow(limit: Duration) -> Response {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        "Request body too slow",
        format!("the request body did not arrive within {} ms", limit.as_millis()),
    )
    .into_response()
}

/// The client's address as the limits key it: the TCP peer, or the last `X-Forwarded-For` entry.
fn client_key(request: &Request, forwarded_for: bool) -> [u8; 32] {
    let forwarded = forwarded_for
        .then(|| {
            let last = request.headers().get_all("x-forwarded-for").iter().next_back()?;
            let entry = last.to_str().ok()?.rsplit(',').next()?.trim();
            entry.parse::<std::net::IpAddr>().ok()
        })
        .flatten();
    let address = forwarded.or_else(|| {
        request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|info| info.0.ip())
    });
    let text = address.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    Sha256::digest(text.as_bytes()).into()
}

/// Who a request is, as far as its head says.
enum Who {
    /// A valid bearer token, keyed by its digest.
    Token([u8; 32]),
    /// A console session that stands, keyed by its id digest.
    Session([u8; 32]),
    /// Neither. `credentials`: it presents some (an invalid bearer token, a sign-in form).
    Anonymous { credentials: bool },
}

/// Whether an anonymous request presents credentials to be checked: a bearer token, or a sign-in form.
fn presents_credentials(request: &Request) -> bool {
    request.headers().contains_key(header::AUTHORIZATION)
        || (request.method() == axum::http::Method::POST
            && matches!(request.uri().path(), "/console/login" | "/console/login/user"))
}

async fn bound(State(shared): State<Shared>, mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(BodyTimeout(shared.limits.body_timeout));
    if exempt(request.uri().path()) {
        return next.run(request).await;
    }
    let now = Instant::now();
    let address = client_key(&request, shared.limits.forwarded_for);
    let mut anonymous_permit = None;
    let mut who = match super::auth::bearer(request.headers()) {
        Ok(token) if shared.state.auth.identify(token).is_some() => Who::Token(Sha256::digest(token.as_bytes()).into()),
        _ => Who::Anonymous { credentials: presents_credentials(&request) },
    };
    if matches!(who, Who::Anonymous { .. }) && request.uri().path().starts_with("/console") {
        // A console page: its session is looked up under the anonymous budget (a forged cookie costs no
        // more than any anonymous request), and handed on to the page.
        let Ok(permit) = Arc::clone(&shared.anonymous).try_acquire_owned() else { return overloaded() };
        let limit = shared.limits.request_timeout;
        let found = match tokio::time::timeout(
            limit,
            crate::console::lookup::request_session(&shared.state, request.headers()),
        )
        .await
        {
            Ok(found) => found.map_err(drop),
            Err(_) => return timed_out(limit),
        };
        if let Ok(herald_core::sessions::Found::Live(session)) = &found {
            who = Who::Session(Sha256::digest(session.id_digest).into());
        } else {
            anonymous_permit = Some(permit);
        }
        request.extensions_mut().insert(crate::console::lookup::LookedUp(found));
    }
    let (_permit, credentials) = match who {
        Who::Token(key) | Who::Session(key) => {
            if let Err(wait) = shared.rates.take(key, now) {
                return too_many(wait, "this token or session has used its request rate");
            }
            let Ok(permit) = Arc::clone(&shared.authenticated).try_acquire_owned() else { return overloaded() };
            (permit, false)
        }
        Who::Anonymous { credentials } => {
            if credentials {
                if let Err(wait) = shared.failures.peek(address, now) {
                    return too_many(wait, "too many failed sign-ins from this address");
                }
            }
            if let Err(wait) = shared.addresses.take(address, now) {
                return too_many(wait, "this address has used its rate of anonymous requests");
            }
            let permit = match anonymous_permit {
                Some(permit) => permit,
                None => match Arc::clone(&shared.anonymous).try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(_) => return overloaded(),
                },
            };
            (permit, credentials)
        }
    };
    // Every body is read here, under its timeout and the body limit, before any handler runs.
    let (parts, body) = request.into_parts();
    let limit = shared.state.body_limit;
    let bytes = match tokio::time::timeout(shared.limits.body_timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => return body_too_slow(shared.limits.body_timeout),
        Ok(Err(_)) => return Problem::payload_too_large(limit).into_response(),
        Ok(Ok(bytes)) => bytes,
    };
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    let limit = shared.limits.request_timeout;
    let response = tokio::time::timeout(limit, next.run(request)).await.unwrap_or_else(|_| timed_out(limit));
    if credentials
        && (response.status() == StatusCode::UNAUTHORIZED || response.extensions().get::<AuthFailed>().is_some())
    {
        if let Err(wait) = shared.failures.take(address, Instant::now()) {
            return too_many(wait, "too many failed sign-ins from this address");
        }
    }
    response
}

/// The router with these limits: budgets, rates, timeouts and the body read.
pub fn apply(router: axum::Router, limits: Limits, state: super::ApiState) -> axum::Router {
    let shared = Shared {
        limits,
        authenticated: Arc::new(Semaphore::new(limits.max_in_flight)),
        anonymous: Arc::new(Semaphore::new(limits.anonymous_max_in_flight)),
        rates: Arc::new(RateLimiter::new(limits.rate_per_second, limits.rate_burst)),
        addresses: Arc::new(RateLimiter::new(limits.anonymous_rate_per_second, limits.anonymous_rate_burst)),
        failures: Arc::new(RateLimiter::per_minute(limits.failed_auth_per_minute, limits.failed_auth_burst)),
        state,
    };
    router.layer(axum::middleware::from_fn_with_state(shared, bound))
}

/// The headers every answer carries: `X-Content-Type-Options: nosniff` (no browser guesses a type the
/// answer does not state), HSTS when the installation says it is reached over https (`server.https`),
/// and `Cache-Control: no-store` on every answer under `/v1/` that does not say otherwise: they carry user
/// data (inboxes, preferences, notifications), which no shared or browser cache should keep.
pub async fn response_headers(State(https): State<bool>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/v1/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if https {
        headers.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    }
    if api {
        headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    }
    response
}

/// The longest `x-request-id` taken from a client; a longer one, or one with anything but visible ASCII,
/// is replaced by a generated id.
pub const MAX_REQUEST_ID_CHARS: usize = 64;

/// Drops a client's `x-request-id` that is too long or not printable, so the id layer generates one.
pub async fn sane_request_id(mut request: Request, next: Next) -> Response {
    let acceptable = |value: &HeaderValue| {
        let bytes = value.as_bytes();
        !bytes.is_empty() && bytes.len() <= MAX_REQUEST_ID_CHARS && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
    };
    let headers = request.headers_mut();
    if headers.get_all("x-request-id").iter().count() > 1
        || headers.get("x-request-id").is_some_and(|value| !acceptable(value))
    {
        headers.remove("x-request-id");
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let limiter = RateLimiter::new(2, 3);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(a, t0), Ok(()));
        }
        let wait = limiter.take(a, t0).expect_err("the burst is spent");
        assert_eq!(wait, Duration::from_millis(500), "one request every half second at 2/s");
        assert_eq!(limiter.take(b, t0), Ok(()), "another key has its own bucket");
        assert!(limiter.take(a, t0 + Duration::from_millis(400)).is_err(), "0.8 of a request is not one");
        assert_eq!(limiter.take(a, t0 + Duration::from_millis(500)), Ok(()));
        // A long pause refills to the burst, never beyond it.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limiter.take(a, later), Ok(()));
        }
        assert!(limiter.take(a, later).is_err());
    }

    #[test]
    fn the_client_address_is_the_peer_unless_a_proxy_in_front_says_otherwise() {
        let request = |peer: [u8; 4], forwarded: Option<&str>| {
            let mut builder = axum::http::Request::builder().uri("/console/login");
            if let Some(value) = forwarded {
                builder = builder.header("x-forwarded-for", value);
            }
            let mut request = builder.body(axum::body::Body::empty()).unwrap();
            let peer = std::net::SocketAddr::from((peer, 40_000));
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            request
        };
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        assert_ne!(client_key(&request(a, None), false), client_key(&request(b, None), false));
        assert_eq!(
            client_key(&request(a, Some("203.0.113.9")), false),
            client_key(&request(a, Some("198.51.100.7")), false),
            "without forwarded_for a client cannot choose its address"
        );
        // The proxy appends the address it saw: the last entry counts, not what the client wrote first.
        assert_eq!(
            client_key(&request(a, Some("1.1.1.1, 203.0.113.9")), true),
            client_key(&request(b, Some("2.2.2.2, 203.0.113.9")), true)
        );
        assert_ne!(
            client_key(&request(a, Some("203.0.113.9")), true),
            client_key(&request(a, Some("203.0.113.10")), true)
        );
    }

    #[test]
    fn a_peek_takes_nothing_and_a_minute_bucket_refills_per_minute() {
        let limiter = RateLimiter::per_minute(6, 2);
        let (a, t0) = ([1u8; 32], Instant::now());
        assert_eq!(limiter.peek(a, t0), Ok(()), "an unknown key has a full bucket");
        assert_eq!(limiter.take(a, t0), Ok(()));
        assert_eq!(limiter.peek(a, t0), Ok(()));
        assert_eq!(limiter.peek(a, t0), Ok(()), "peeking twice takes nothing");
        assert_eq!(limiter.take(a, t0), Ok(()));
        assert_eq!(limiter.peek(a, t0), Err(Duration::from_secs(10)), "six a minute: one every ten seconds");
        assert_eq!(limiter.peek(a, t0 + Duration::from_secs(10)), Ok(()));
    }
}
