//! Bounds on every client: how long a request may take to arrive and to be answered, how many requests
//! run at once, and how fast one token may call.
//!
//! * **Header-read timeout** — a connection that has not sent a whole request head within
//!   `header_read_timeout` is closed (a slow-loris client holds nothing for long); see [`super::serve`].
//! * **Body timeout** — a JSON body that has not fully arrived within `body_timeout` is answered 408
//!   (`super::extract::ApiJson`, which reads the [`BodyTimeout`] this layer puts on the request).
//! * **Request timeout** — a request not answered within `request_timeout` is answered 503 with
//!   `Retry-After`; its handler is dropped (a transaction in flight rolls back).
//! * **Load shedding** — at most `max_in_flight` requests run at once; one more is answered at once with
//!   503 and `Retry-After` instead of queueing. `/healthz` and `/metrics` are never shed.
//! * **Rate per token** — each valid bearer token has a token bucket of `rate_burst` requests refilled at
//!   `rate_per_second`; an empty bucket answers 429 with `Retry-After`. Buckets are keyed by the SHA-256 of
//!   the token (the token itself is never kept), and only valid tokens get one, so invented tokens cannot
//!   grow the table; they get their 401.

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
use super::Authenticator;

/// The bounds of one API server. [`Limits::default`] holds the defaults of the `[server]` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub body_timeout: Duration,
    pub max_in_flight: usize,
    pub rate_per_second: u32,
    pub rate_burst: u32,
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
        }
    }
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
        RateLimiter {
            per_second: f64::from(per_second.max(1)),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::default(),
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
    in_flight: Arc<Semaphore>,
    rates: Arc<RateLimiter>,
    auth: Arc<Authenticator>,
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

fn too_many(wait: Duration) -> Response {
    let seconds = wait.as_millis().div_ceil(1000).max(1);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many requests for this token",
        format!("this token has used its request rate; try again in {seconds} s"),
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

async fn bound(State(shared): State<Shared>, mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(BodyTimeout(shared.limits.body_timeout));
    if exempt(request.uri().path()) {
        return next.run(request).await;
    }
    let Ok(_permit) = Arc::clone(&shared.in_flight).try_acquire_owned() else {
        return overloaded();
    };
    if let Ok(token) = super::auth::bearer(request.headers()) {
        if shared.auth.identify(token).is_some() {
            let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if let Err(wait) = shared.rates.take(key, Instant::now()) {
                return too_many(wait);
            }
        }
    }
    let limit = shared.limits.request_timeout;
    tokio::time::timeout(limit, next.run(request)).await.unwrap_or_else(|_| timed_out(limit))
}

/// The router with these limits: the request timeout, load shedding and the rate per token.
pub fn apply(router: axum::Router, limits: Limits, auth: Arc<Authenticator>) -> axum::Router {
    let shared = Shared {
        limits,
        in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
        rates: Arc::new(RateLimiter::new(limits.rate_per_second, limits.rate_burst)),
        auth,
    };
    router.layer(axum::middleware::from_fn_with_state(shared, bound))
}

/// `Cache-Control: no-store` on every answer under `/v1/` that does not say otherwise: they carry user
/// data (inboxes, preferences, notifications), which no shared or browser cache should keep.
pub async fn no_store(request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/v1/");
    let mut response = next.run(request).await;
    if api {
        response.headers_mut().entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
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
}
