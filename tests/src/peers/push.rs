//! A push service stand-in (RFC 8030) that checks what a real one checks and decrypts what it receives.
//!
//! `POST /push/{n}` for subscription `n` made by [`PushPeer::subscribe`]. Every request is checked:
//! the VAPID token (RFC 8292: `Authorization: vapid t=…, k=…`, ES256 signature by `k`, `aud` = this
//! origin, `exp` in the future and at most 24 h away, a `sub`), `Content-Encoding: aes128gcm`, and the
//! payload is decrypted (RFC 8291) with the subscription's private key — a request that fails any check
//! gets 401 or 400 and is recorded as such. A checked request is then answered by the script (201 with a
//! `Location`, a status, or a hang after recording it as received). The decryption here is written apart
//! from the adapter's encryption, from the RFC.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use rand::RngCore;
use sha2::Sha256;

/// What the stand-in answers to the next checked request.
#[derive(Clone, Debug)]
pub enum Step {
    /// 201 Created with `Location: /m/{n}`.
    Accept,
    /// This status (with `Retry-After` when given).
    Status(u16, Option<&'static str>),
    /// Record the message as received, then never answer in time.
    Hang,
}

/// One request as the push service saw it.
#[derive(Clone, Debug)]
pub struct PushRequest {
    pub subscription: usize,
    pub vapid_ok: bool,
    pub vapid_subject: Option<String>,
    pub ttl: Option<u64>,
    pub topic: Option<String>,
    pub urgency: Option<String>,
    /// The decrypted payload, when the body could be decrypted.
    pub plaintext: Option<String>,
    /// The raw body, for the cross-check with another implementation.
    pub body: Vec<u8>,
    /// The raw `Authorization` header, for the cross-check of the VAPID token.
    pub authorization: Option<String>,
    /// Whether it counted as received (checked and not refused by the script).
    pub received: bool,
}

struct SubscriptionKeys {
    private: SecretKey,
    auth: [u8; 16],
}

#[derive(Default)]
struct Inner {
    subscriptions: Vec<SubscriptionKeys>,
    script: VecDeque<Step>,
    requests: Vec<PushRequest>,
}

/// The running stand-in.
#[derive(Clone)]
pub struct PushPeer {
    origin: String,
    inner: Arc<Mutex<Inner>>,
}

impl PushPeer {
    /// Starts the stand-in on a loopback port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> anyhow::Result<PushPeer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let origin = format!("http://{}", listener.local_addr()?);
        let peer = PushPeer { origin, inner: Arc::default() };
        let app = Router::new()
            .route("/push/{n}", post(push))
            .route("/push/{n}/{tag}", post(push_tagged))
            .with_state(peer.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(peer)
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
        let mut inner = self.inner.lock().expect("lock");
        inner.subscriptions.push(SubscriptionKeys { private, auth });
        let n = inner.subscriptions.len() - 1;
        serde_json::json!({
            "endpoint": match tag {
                Some(tag) => format!("{}/push/{n}/{tag}", self.origin),
                None => format!("{}/push/{n}", self.origin),
            },
            "expirationTime": null,
            "keys": { "p256dh": public, "auth": URL_SAFE_NO_PAD.encode(auth) },
        })
        .to_string()
    }

    /// The answers to the next requests, in order; when they run out, every request is accepted.
    pub fn script(&self, steps: impl IntoIterator<Item = Step>) {
        self.inner.lock().expect("lock").script.extend(steps);
    }

    /// Every request so far.
    #[must_use]
    pub fn requests(&self) -> Vec<PushRequest> {
        self.inner.lock().expect("lock").requests.clone()
    }

    /// How many messages the push service really took (answered 201, or hung after recording).
    #[must_use]
    pub fn received(&self) -> usize {
        self.requests().iter().filter(|r| r.received).count()
    }

    /// The origin push requests are addressed to (the VAPID `aud`).
    #[must_use]
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The private key (32-byte scalar) and auth secret of subscription `n`, base64url, for the cross-check.
    #[must_use]
    pub fn keys_of(&self, n: usize) -> (String, String) {
        let inner = self.inner.lock().expect("lock");
        let keys = &inner.subscriptions[n];
        (URL_SAFE_NO_PAD.encode(keys.private.to_bytes()), URL_SAFE_NO_PAD.encode(keys.auth))
    }
}

async fn push_tagged(
    State(peer): State<PushPeer>,
    Path((n, _tag)): Path<(usize, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    push(State(peer), Path(n), headers, body).await
}

async fn push(State(peer): State<PushPeer>, Path(n): Path<usize>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (keys_private, keys_auth) = {
        let inner = peer.inner.lock().expect("lock");
        let Some(keys) = inner.subscriptions.get(n) else { return StatusCode::NOT_FOUND.into_response() };
        (keys.private.clone(), keys.auth)
    };
    let vapid = header("authorization").and_then(|value| check_vapid(&value, &peer.origin));
    let plaintext = (header("content-encoding").as_deref() == Some("aes128gcm"))
        .then(|| decrypt(&keys_private, &keys_auth, &body))
        .flatten();
    let mut request = PushRequest {
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
    };
    if !request.vapid_ok {
        peer.inner.lock().expect("lock").requests.push(request);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if request.plaintext.is_none() || request.ttl.is_none() {
        peer.inner.lock().expect("lock").requests.push(request);
        return StatusCode::BAD_REQUEST.into_response();
    }
    let step = peer.inner.lock().expect("lock").script.pop_front().unwrap_or(Step::Accept);
    request.received = matches!(step, Step::Accept | Step::Hang);
    let index = {
        let mut inner = peer.inner.lock().expect("lock");
        inner.requests.push(request);
        inner.requests.len()
    };
    match step {
        Step::Accept => (StatusCode::CREATED, [("location", format!("{}/m/msg{index}", peer.origin))]).into_response(),
        Step::Status(status, retry_after) => {
            let mut response =
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR).into_response();
            if let Some(value) = retry_after {
                response.headers_mut().insert("retry-after", value.parse().expect("header"));
            }
            response
        }
        Step::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::CREATED.into_response()
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

/// Decrypts `body` for subscription `n` of `peer` with Python's `http_ece` (an implementation nobody here
/// wrote); the plaintext, or why not.
///
/// # Errors
/// When python3 or http_ece is missing, or the decryption fails.
pub async fn decrypt_with_http_ece(peer: &PushPeer, n: usize, body: &[u8]) -> anyhow::Result<String> {
    use tokio::io::AsyncWriteExt as _;
    let (private_key, auth) = peer.keys_of(n);
    let input = serde_json::json!({ "body": URL_SAFE_NO_PAD.encode(body), "private_key": private_key, "auth": auth });
    let mut child = tokio::process::Command::new("python3")
        .arg(super::script("ece_decrypt.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("stdin"))?;
    stdin.write_all(input.to_string().as_bytes()).await?;
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await??;
    anyhow::ensure!(output.status.success(), "http_ece failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?)
}

/// Verifies a VAPID `Authorization` header for `audience` with Python's `cryptography` (`vapid_verify.py`);
/// its answer (`ok sub=…`), or why not.
///
/// # Errors
/// When python3 or cryptography is missing, or the token does not verify.
pub async fn verify_vapid_with_python(authorization: &str, audience: &str) -> anyhow::Result<String> {
    use tokio::io::AsyncWriteExt as _;
    let input = serde_json::json!({ "authorization": authorization, "audience": audience });
    let mut child = tokio::process::Command::new("python3")
        .arg(super::script("vapid_verify.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("stdin"))?;
    stdin.write_all(input.to_string().as_bytes()).await?;
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await??;
    anyhow::ensure!(output.status.success(), "VAPID check failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}
