//! The Web Push service stand-in (RFC 8030) that checks what a real push service checks and decrypts
//! what it receives.
//!
//! `POST /push/{n}` (or `/push/{n}/{tag}`) for subscription `n` made by [`WebPushService::subscribe`].
//! Every request is checked first: the VAPID token (RFC 8292: `Authorization: vapid t=…, k=…`, ES256
//! signature by `k`, `aud` = this origin, `exp` in the future and at most 24 h away, a `sub`),
//! `Content-Encoding: aes128gcm` and a `TTL`, and the payload is decrypted (RFC 8291) with the
//! subscription's private key. A request that fails a check gets 401 or 400 and is recorded as such —
//! never as a send. A checked request is then answered by the next [`Script`] step, exactly as the HTTP
//! stand-ins do: `Ok` is `201 Created` with a `Location`; `Status` refuses before anything is recorded
//! (`Script::status(410)` is a subscription that expired); `Delay`, `HangAfterAccept`, `DropAfterAccept`
//! and `Garbage` (a `200` that is not the `201` of RFC 8030) record the message as received first. Chaos
//! mode ([`WebPushService::set_chaos`]) draws the steps when none is queued.
//!
//! The wire reference of a Web Push message is its `Topic` header (the adapter derives it from the task
//! reference): scripts per message are keyed by it and real sends are counted per topic. The decryption
//! here is written apart from the adapter's encryption, from the RFC.

use std::collections::HashMap;
use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use rand::RngCore;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::chaos::Chaos;
use super::script::{AfterAccept, Script, Scripts, SendStep, GARBAGE_BODY};
use super::server::{self, Arrived, ConnectionAbort};

/// One request as the push service saw it.
///
/// `Debug` leaves out the body and the `Authorization` header; the endpoint (a destination) is not kept.
#[derive(Clone)]
pub struct PushRequest {
    /// Index of the subscription the request was addressed to.
    pub subscription: usize,
    /// The VAPID token verified for this origin.
    pub vapid_ok: bool,
    /// The token's `sub` claim, when it verified.
    pub vapid_subject: Option<String>,
    /// The `TTL` header.
    pub ttl: Option<u64>,
    /// The `Topic` header.
    pub topic: Option<String>,
    /// The `Urgency` header.
    pub urgency: Option<String>,
    /// The decrypted payload, when the body could be decrypted.
    pub plaintext: Option<String>,
    /// The raw body, for a cross-check with another implementation.
    pub body: Vec<u8>,
    /// The raw `Authorization` header, for a cross-check of the VAPID token.
    pub authorization: Option<String>,
    /// Whether it counted as received: checked, and accepted by the script (answered or not).
    pub received: bool,
    /// When the request's head arrived.
    pub arrived: Instant,
}

impl std::fmt::Debug for PushRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushRequest")
            .field("subscription", &self.subscription)
            .field("vapid_ok", &self.vapid_ok)
            .field("vapid_subject", &self.vapid_subject)
            .field("ttl", &self.ttl)
            .field("topic", &self.topic)
            .field("urgency", &self.urgency)
            .field("plaintext", &self.plaintext)
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

struct SubscriptionKeys {
    private: SecretKey,
    auth: [u8; 16],
}

#[derive(Default)]
struct Inner {
    subscriptions: Vec<SubscriptionKeys>,
    scripts: Scripts,
    requests: Vec<PushRequest>,
    /// Real sends per topic.
    sends_by_topic: HashMap<String, u64>,
}

struct PushShared {
    origin: String,
    inner: Mutex<Inner>,
}

impl PushShared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running Web Push service stand-in. Dropping it stops the server; [`WebPushService::shutdown`] also
/// waits until every connection, hung ones included, is closed.
pub struct WebPushService {
    shared: Arc<PushShared>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

impl std::fmt::Debug for WebPushService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebPushService").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl WebPushService {
    /// Starts the stand-in on `127.0.0.1` and an ephemeral port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> io::Result<WebPushService> {
        Self::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the stand-in on a chosen address.
    ///
    /// # Errors
    /// When binding `addr` fails.
    pub async fn bind(addr: SocketAddr) -> io::Result<WebPushService> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(PushShared { origin: format!("http://{addr}"), inner: Mutex::default() });
        let router = Router::new()
            .route("/push/{n}", post(push))
            .route("/push/{n}/{tag}", post(push_tagged))
            .with_state(Arc::clone(&shared));
        let (stop, stopped) = oneshot::channel();
        let server = tokio::spawn(server::serve(listener, router, stopped));
        Ok(WebPushService { shared, addr, stop, server })
    }

    /// Stops accepting, closes every open connection and waits for the server to finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }

    /// A new browser subscription: its `PushSubscription` JSON (the destination Herald stores).
    #[must_use]
    pub fn subscribe(&self) -> String {
        self.subscribe_tagged(None)
    }

    /// A new subscription whose endpoint ends in `/{tag}` (the leak test plants its canary there).
    #[must_use]
    pub fn subscribe_tagged(&self, tag: Option<&str>) -> String {
        let private = SecretKey::random(&mut rand::rngs::OsRng);
        let mut auth = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut auth);
        let public = URL_SAFE_NO_PAD.encode(private.public_key().to_encoded_point(false).as_bytes());
        let mut inner = self.shared.lock();
        inner.subscriptions.push(SubscriptionKeys { private, auth });
        let n = inner.subscriptions.len() - 1;
        let origin = &self.shared.origin;
        serde_json::json!({
            "endpoint": match tag {
                Some(tag) => format!("{origin}/push/{n}/{tag}"),
                None => format!("{origin}/push/{n}"),
            },
            "expirationTime": null,
            "keys": { "p256dh": public, "auth": URL_SAFE_NO_PAD.encode(auth) },
        })
        .to_string()
    }

    /// Queues steps for the next checked requests, in order; when they run out, every request is
    /// accepted (or drawn, in chaos mode).
    pub fn script(&self, steps: impl IntoIterator<Item = Script>) {
        let mut inner = self.shared.lock();
        for step in steps {
            inner.scripts.push(None, step);
        }
    }

    /// Queues a step for the next checked request with this `Topic`; consulted before the shared queue.
    pub fn script_for(&self, topic: &str, step: Script) {
        self.shared.lock().scripts.push(Some(topic), step);
    }

    /// Chaos mode (`Some`): a checked request that finds no step queued draws one (see [`Chaos`]).
    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        self.shared.lock().scripts.set_chaos(chaos);
    }

    /// How often each chaos behaviour was drawn, by the names of [`DRAW_NAMES`](crate::DRAW_NAMES).
    #[must_use]
    pub fn chaos_draws(&self) -> Vec<(&'static str, u64)> {
        self.shared.lock().scripts.chaos_draws()
    }

    /// Every request so far, in order.
    #[must_use]
    pub fn requests(&self) -> Vec<PushRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many messages the push service really took (VAPID verified, payload decrypted, and accepted
    /// by the script, whether or not its answer came back): each one would have reached the browser.
    #[must_use]
    pub fn received(&self) -> usize {
        self.shared.lock().requests.iter().filter(|r| r.received).count()
    }

    /// Real sends with this `Topic`.
    #[must_use]
    pub fn sends_for(&self, topic: &str) -> u64 {
        self.shared.lock().sends_by_topic.get(topic).copied().unwrap_or(0)
    }

    /// The decrypted payloads of the messages really received, in order.
    #[must_use]
    pub fn payloads(&self) -> Vec<String> {
        self.shared.lock().requests.iter().filter(|r| r.received).filter_map(|r| r.plaintext.clone()).collect()
    }

    /// The origin push requests are addressed to (the VAPID `aud`).
    #[must_use]
    pub fn origin(&self) -> &str {
        &self.shared.origin
    }

    /// The bound socket address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The private key (32-byte scalar) and auth secret of subscription `n`, base64url, for a
    /// cross-check with another implementation.
    ///
    /// # Panics
    /// When there is no subscription `n`.
    #[must_use]
    pub fn keys_of(&self, n: usize) -> (String, String) {
        let inner = self.shared.lock();
        let keys = &inner.subscriptions[n];
        (URL_SAFE_NO_PAD.encode(keys.private.to_bytes()), URL_SAFE_NO_PAD.encode(keys.auth))
    }
}

async fn push_tagged(
    state: State<Arc<PushShared>>,
    abort: Extension<ConnectionAbort>,
    arrived: Extension<Arrived>,
    Path((n, _tag)): Path<(usize, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    push(state, abort, arrived, Path(n), headers, body).await
}

async fn push(
    State(shared): State<Arc<PushShared>>,
    Extension(abort): Extension<ConnectionAbort>,
    Extension(Arrived(arrived)): Extension<Arrived>,
    Path(n): Path<usize>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (keys_private, keys_auth) = {
        let inner = shared.lock();
        let Some(keys) = inner.subscriptions.get(n) else { return StatusCode::NOT_FOUND.into_response() };
        (keys.private.clone(), keys.auth)
    };
    let vapid = header("authorization").and_then(|value| check_vapid(&value, &shared.origin));
    let plaintext = (header("content-encoding").as_deref() == Some("aes128gcm"))
        .then(|| decrypt(&keys_private, &keys_auth, &body))
        .flatten();
    let request = PushRequest {
        subscription: n,
        vapid_ok: vapid.is_some(),
        vapid_subject: vapid,
        ttl: header("ttl").and_then(|v| v.parse().ok()),
        topic: header("topic"),
        urgency: header("urgency"),
        plaintext,
        body: body.to_vec(),
        authorization: header("authorization"),
        received: false,
        arrived,
    };
    if !request.vapid_ok {
        shared.lock().requests.push(request);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if request.plaintext.is_none() || request.ttl.is_none() {
        shared.lock().requests.push(request);
        return StatusCode::BAD_REQUEST.into_response();
    }
    let (step, index) = {
        let mut inner = shared.lock();
        let step = inner.scripts.next_send(request.topic.as_deref());
        let received = matches!(step, SendStep::Accept(_));
        if received {
            if let Some(topic) = &request.topic {
                *inner.sends_by_topic.entry(topic.clone()).or_default() += 1;
            }
        }
        inner.requests.push(PushRequest { received, ..request });
        (step, inner.requests.len())
    };
    let created = || (StatusCode::CREATED, [("location", format!("{}/m/msg{index}", shared.origin))]).into_response();
    match step {
        SendStep::Refuse(refusal) => {
            let mut response = match refusal.body {
                Some(body) => (refusal.status, body).into_response(),
                None => refusal.status.into_response(),
            };
            if let Some(seconds) = refusal.retry_after {
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
        SendStep::DropBeforeAccept => abort.drop_connection().await,
        SendStep::Accept(AfterAccept::Answer) => created(),
        SendStep::Accept(AfterAccept::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            created()
        }
        SendStep::Accept(AfterAccept::Hang) => pending().await,
        SendStep::Accept(AfterAccept::Drop) => abort.drop_connection().await,
        SendStep::Accept(AfterAccept::Garbage) => {
            (StatusCode::OK, [(CONTENT_TYPE, "text/html; charset=utf-8")], GARBAGE_BODY).into_response()
        }
    }
}

/// Checks `vapid t=JWT, k=KEY`; returns the `sub` when the token is valid for `origin`.
fn check_vapid(value: &str, origin: &str) -> Option<String> {
    let rest = value.strip_prefix("vapid ")?;
    let mut token = None;
    let mut key = None;
    for part in rest.split(',') {
        let (name, v) = part.trim().split_once('=')?;
        match name {
            "t" => token = Some(v),
            "k" => key = Some(v),
            _ => {}
        }
    }
    let key = VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(key?).ok()?).ok()?;
    let token = token?;
    let (signed, signature) = token.rsplit_once('.')?;
    let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).ok()?).ok()?;
    key.verify(signed.as_bytes(), &signature).ok()?;
    let (header, claims) = signed.split_once('.')?;
    let header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    if header["alg"] != "ES256" {
        return None;
    }
    let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    let exp = claims["exp"].as_u64()?;
    if claims["aud"] != origin || exp <= now || exp > now + 24 * 3600 {
        return None;
    }
    claims["sub"].as_str().map(str::to_owned)
}

/// RFC 8291 §3.4 / RFC 8188 §2, from the receiving side: one record, padding removed.
fn decrypt(private: &SecretKey, auth: &[u8; 16], body: &[u8]) -> Option<String> {
    let salt = body.get(..16)?;
    let id_len = usize::from(*body.get(20)?);
    let sender = PublicKey::from_sec1_bytes(body.get(21..21 + id_len)?).ok()?;
    let ciphertext = body.get(21 + id_len..)?;
    let shared = p256::ecdh::diffie_hellman(private.to_nonzero_scalar(), sender.as_affine());
    let mut info = b"WebPush: info\0".to_vec();
    info.extend_from_slice(private.public_key().to_encoded_point(false).as_bytes());
    info.extend_from_slice(sender.to_encoded_point(false).as_bytes());
    let mut ikm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(auth), shared.raw_secret_bytes()).expand(&info, &mut ikm).ok()?;
    let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
    let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).ok()?;
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce).ok()?;
    let mut plain = Aes128Gcm::new_from_slice(&cek).ok()?.decrypt(Nonce::from_slice(&nonce), ciphertext).ok()?;
    while plain.last() == Some(&0) {
        plain.pop();
    }
    (plain.pop()? == 2).then_some(())?;
    String::from_utf8(plain).ok()
}
