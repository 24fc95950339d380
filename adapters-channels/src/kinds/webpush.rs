//! `kind = "webpush"` (SPEC §9, §12): Web Push (RFC 8030) with an encrypted payload (RFC 8291,
//! `aes128gcm` of RFC 8188) and VAPID authorization (RFC 8292); neither idempotent nor queryable by default.
//!
//! The destination is a browser's `PushSubscription` as JSON (`{"endpoint", "keys": {"p256dh", "auth"}}`),
//! checked by [`Subscription::parse`] when stored. A send is one `POST {endpoint}` with
//!
//! * the payload `{"text","tag"}` encrypted for the subscription's keys (a fresh ephemeral P-256 key and
//!   salt per message, one record, `Content-Encoding: aes128gcm`);
//! * `Authorization: vapid t={JWT ES256 of aud, exp, sub}, k={public key}` from the configured key;
//! * `TTL` = the notification's remaining lifetime in seconds (the claim never sends after expiry);
//! * `Urgency` from configuration;
//! * `Topic` derived from the task reference ([`topic`]): the same for every attempt, so a push service
//!   replaces a message of that topic *still outstanding* — the basis of the partial opt-in
//!   `on_unknown = "resend_same_topic"`. A message already delivered stays delivered: the user may see
//!   two. The payload's `tag` is the same value, so a service worker that shows it with that tag replaces
//!   the notification on the device instead of adding one.
//!
//! [`classify_webpush`] decides what the answer proves (201 accepted, 404/410 subscription expired,
//! 429 refused before acceptance, 5xx per `refusal_5xx`, no answer unknown). A fresh connection per call,
//! as for Miaotixing: an unknown outcome is parked, and a pooled connection the server closed while idle
//! would break after the request was written.
//!
//! The endpoint is a capability URL (whoever knows it can push to the browser): it is part of the secret
//! destination, so it never reaches a log, an error or `Debug`, and no `reqwest::Error` is formatted.
//!
//! The endpoint is also a user's choice of where Herald connects: it goes through the egress guard
//! (`crate::egress`, SPEC §16) when it is stored ([`Channel::check_destination`]: an address literal or
//! `localhost` on a loopback, private, link-local, … address is refused) and at every send (the literal
//! again, before the request; a name in the client's resolver, which connects to exactly the addresses it
//! checked). A refused send made no request and is REJECTED ([`egress_refused`]).

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use async_trait::async_trait;
use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use herald_domain::classify::{classify_webpush, egress_refused, retry_after_seconds, Classified, Reply};
use herald_domain::{ChannelKind, Observation};
use herald_ports::OutboundMessage;
use hkdf::Hkdf;
use p256::ecdh::EphemeralSecret;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::PublicKey;
use rand::RngCore;
use reqwest::header::{
    HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, DATE, LOCATION, RETRY_AFTER,
};
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{ChannelBase, Kind, KindChannel};
use crate::config::{is_loopback, ChannelConfig, ConfigError, ConfigSecret, PRIVATE_DEFAULT_TEXT};
use crate::egress::{refusal_in, Egress, Guard};
use crate::http::{failure, wall_clock, Connections, HttpTransport};

/// The keys of a `webpush` channel's `[[channel]]` table besides the shared ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebpushSettings {
    /// The VAPID private key, base64url of the 32-byte P-256 scalar (`herald keys vapid`).
    #[serde(default)]
    pub vapid_private_key: Option<ConfigSecret>,
    /// A file holding the VAPID private key; a configuration file's relative path is taken from that
    /// file's folder (see [`Kind::files`]).
    #[serde(default)]
    pub vapid_private_key_file: Option<PathBuf>,
    /// The VAPID `sub` claim, a `mailto:` or `https:` contact for the push services.
    #[serde(default)]
    pub vapid_subject: Option<String>,
    /// The `Urgency` header (RFC 8030 §5.3): `very-low`, `low`, `normal` (default) or `high`.
    #[serde(default)]
    pub urgency: Option<Urgency>,
    /// Also send to plain-http endpoints on a loopback host (a local push-service stand-in). Off by
    /// default: an endpoint comes from a user, and Herald must not be made to post to the services of its
    /// own machine.
    #[serde(default)]
    pub allow_loopback_endpoints: bool,
    /// Send the notification body when no `text` is configured. Off by default: the channel gets
    /// [`PRIVATE_DEFAULT_TEXT`] unless the operator says otherwise.
    #[serde(default)]
    pub send_body: bool,
}

/// `urgency = "…"` of a `webpush` channel (RFC 8030 §5.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Urgency {
    VeryLow,
    Low,
    #[default]
    Normal,
    High,
}

impl Urgency {
    /// The header value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Urgency::VeryLow => "very-low",
            Urgency::Low => "low",
            Urgency::Normal => "normal",
            Urgency::High => "high",
        }
    }
}

/// The record size announced in the `aes128gcm` header: one record holds the whole payload.
const RECORD_SIZE: u32 = 4096;
/// The `aes128gcm` header: salt (16), record size (4), key id length (1), key id (65-byte public key).
const HEADER_LEN: usize = 16 + 4 + 1 + 65;
/// The largest plaintext that fits one record: the record size less the tag (16) and the delimiter (1).
/// Push services accept at least 4096 bytes of body (RFC 8030 §7.2), and header plus record stay within it.
pub const MAX_PLAINTEXT: usize = RECORD_SIZE as usize - HEADER_LEN - 16 - 1;
/// How long a VAPID token is valid (RFC 8292 §2: at most 24 hours).
const VAPID_VALIDITY: Duration = Duration::from_secs(12 * 3600);
/// Base64url that accepts padding or none (browsers send none; some libraries pad).
const B64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A browser's push subscription, checked: an https endpoint (or plain http on a loopback host, which only a
/// channel with `allow_loopback_endpoints = true` — a local stand-in — will send to), the user agent's P-256
/// public key, and its 16-byte authentication secret. Where the endpoint may point is the egress guard's
/// business ([`WebpushChannel`]'s `check_destination`).
pub struct Subscription {
    endpoint: Url,
    p256dh: PublicKey,
    auth: [u8; 16],
}

#[derive(Deserialize)]
struct SubscriptionJson {
    endpoint: String,
    keys: KeysJson,
}

#[derive(Deserialize)]
struct KeysJson {
    p256dh: String,
    auth: String,
}

impl Subscription {
    /// Parses and checks a `PushSubscription` JSON (extra members such as `expirationTime` are ignored).
    ///
    /// # Errors
    /// A short reason, never any part of the subscription.
    pub fn parse(json: &str) -> Result<Subscription, &'static str> {
        let parsed: SubscriptionJson = serde_json::from_str(json)
            .map_err(|_| "must be a PushSubscription as JSON: {\"endpoint\", \"keys\": {\"p256dh\", \"auth\"}}")?;
        let endpoint = Url::parse(&parsed.endpoint).map_err(|_| "the subscription's endpoint is not a URL")?;
        let host = endpoint.host_str().unwrap_or_default();
        match endpoint.scheme() {
            "https" if !host.is_empty() => {}
            "http" if is_loopback(host) => {}
            _ => return Err("the subscription's endpoint must be an https URL"),
        }
        if !endpoint.username().is_empty() || endpoint.password().is_some() || endpoint.fragment().is_some() {
            return Err("the subscription's endpoint must not carry credentials or a fragment");
        }
        let p256dh = B64_LENIENT
            .decode(parsed.keys.p256dh.trim())
            .ok()
            .filter(|bytes| bytes.len() == 65)
            .and_then(|bytes| PublicKey::from_sec1_bytes(&bytes).ok())
            .ok_or("keys.p256dh must be the base64url of an uncompressed P-256 public key")?;
        let auth = B64_LENIENT
            .decode(parsed.keys.auth.trim())
            .ok()
            .and_then(|bytes| <[u8; 16]>::try_from(bytes.as_slice()).ok())
            .ok_or("keys.auth must be the base64url of 16 bytes")?;
        Ok(Subscription { endpoint, p256dh, auth })
    }
}

/// A VAPID key pair (RFC 8292): signs the token every request carries.
pub struct VapidKey {
    signing: SigningKey,
    /// The uncompressed public key, base64url: the `k=` of every request and the browser's
    /// `applicationServerKey`.
    public: String,
}

impl VapidKey {
    /// A key from the base64url of its 32-byte private scalar, as `herald keys vapid` prints it.
    ///
    /// # Errors
    /// Anything else (the message never repeats the value).
    pub fn from_base64(private: &str) -> Result<VapidKey, &'static str> {
        let bytes = B64_LENIENT.decode(private.trim()).map_err(|_| "must be base64url")?;
        let signing = SigningKey::from_slice(&bytes).map_err(|_| "must be a 32-byte P-256 private key")?;
        let public = URL_SAFE_NO_PAD.encode(signing.verifying_key().to_encoded_point(false).as_bytes());
        Ok(VapidKey { signing, public })
    }

    /// A new random key: (private scalar, uncompressed public key), both base64url without padding.
    #[must_use]
    pub fn generate() -> (String, String) {
        let signing = SigningKey::random(&mut rand::rngs::OsRng);
        let private = URL_SAFE_NO_PAD.encode(signing.to_bytes());
        let public = URL_SAFE_NO_PAD.encode(signing.verifying_key().to_encoded_point(false).as_bytes());
        (private, public)
    }

    /// The public key, base64url (the browser's `applicationServerKey`).
    #[must_use]
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// `vapid t={token}, k={public key}` for a request to `endpoint`, valid until `now + 12 h`.
    fn authorization(&self, endpoint: &Url, subject: &str, now: SystemTime) -> String {
        let audience = endpoint.origin().ascii_serialization();
        let expires = now.duration_since(UNIX_EPOCH).unwrap_or_default().saturating_add(VAPID_VALIDITY).as_secs();
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({ "aud": audience, "exp": expires, "sub": subject });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let signature: Signature = self.signing.sign(signed.as_bytes());
        format!("vapid t={signed}.{}, k={}", URL_SAFE_NO_PAD.encode(signature.to_bytes()), self.public)
    }
}

impl fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VapidKey").field("public", &self.public).finish_non_exhaustive()
    }
}

/// The `Topic` of a task's messages (RFC 8030 §5.4: at most 32 characters of the URL-safe base64
/// alphabet): the task reference without its hyphens when that fits (a UUID's 32 hex digits), else the
/// first 32 characters of the base64url SHA-256 of `ntf-{reference}`. Stable across every attempt.
#[must_use]
pub fn topic(reference: &str) -> String {
    let plain: String = reference.chars().filter(|c| *c != '-').collect();
    if !plain.is_empty() && plain.len() <= 32 && plain.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return plain;
    }
    let digest = Sha256::digest(format!("ntf-{reference}").as_bytes());
    URL_SAFE_NO_PAD.encode(digest)[..32].to_owned()
}

/// Encrypts `plaintext` (at most [`MAX_PLAINTEXT`] bytes) for `subscription` as one `aes128gcm` record
/// (RFC 8291 §3.4, RFC 8188 §2), with a fresh ephemeral key and salt.
fn encrypt(subscription: &Subscription, plaintext: &[u8]) -> Option<Vec<u8>> {
    if plaintext.len() > MAX_PLAINTEXT {
        return None;
    }
    let ephemeral = EphemeralSecret::random(&mut rand::rngs::OsRng);
    let as_public = ephemeral.public_key().to_encoded_point(false);
    let ua_public = subscription.p256dh.to_encoded_point(false);
    let shared = ephemeral.diffie_hellman(&subscription.p256dh);
    // IKM = HKDF(auth secret, ECDH secret, "WebPush: info" 0x00 ua_public as_public, 32)
    let mut key_info = Vec::with_capacity(14 + 65 + 65);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(ua_public.as_bytes());
    key_info.extend_from_slice(as_public.as_bytes());
    let mut ikm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(&subscription.auth), shared.raw_secret_bytes()).expand(&key_info, &mut ikm).ok()?;
    let mut salt = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let prk = Hkdf::<Sha256>::new(Some(&salt), &ikm);
    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).ok()?;
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce).ok()?;
    let mut record = Vec::with_capacity(plaintext.len() + 1);
    record.extend_from_slice(plaintext);
    record.push(2); // the last (and only) record's delimiter, no padding
    let sealed = Aes128Gcm::new_from_slice(&cek).ok()?.encrypt(Nonce::from_slice(&nonce), record.as_slice()).ok()?;
    let mut body = Vec::with_capacity(HEADER_LEN + sealed.len());
    body.extend_from_slice(&salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(65);
    body.extend_from_slice(as_public.as_bytes());
    body.extend_from_slice(&sealed);
    Some(body)
}

/// The payload a service worker receives: `{"text","tag"}`, the text cut (at a character boundary) so the
/// payload fits one record.
fn payload(text: &str, tag: &str) -> Vec<u8> {
    let mut end = text.len();
    loop {
        let json = serde_json::json!({ "text": &text[..end], "tag": tag }).to_string().into_bytes();
        if json.len() <= MAX_PLAINTEXT || end == 0 {
            return json;
        }
        let mut next = end.saturating_sub((json.len() - MAX_PLAINTEXT).max(1));
        while !text.is_char_boundary(next) {
            next -= 1;
        }
        end = next;
    }
}

/// One configured Web Push channel.
pub type WebpushChannel = KindChannel<Webpush>;

/// The Web Push kind's own part: its guarded client, its VAPID key and the headers it sets.
pub struct Webpush {
    transport: HttpTransport,
    vapid: VapidKey,
    subject: String,
    urgency: Urgency,
    allow_loopback_endpoints: bool,
    /// Where an endpoint may point (SPEC §16); the transport resolves names through it.
    guard: Guard,
}

impl KindChannel<Webpush> {
    /// The VAPID public key (the browser's `applicationServerKey`).
    #[must_use]
    pub fn vapid_public_key(&self) -> &str {
        self.kind().vapid.public_key()
    }
}

fn header(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

#[async_trait]
impl Kind for Webpush {
    const KIND: ChannelKind = ChannelKind::Webpush;
    const ADAPTER: &'static str = "WebpushChannel";
    const USES_URL: bool = false;
    type Settings = WebpushSettings;

    fn files(settings: &mut WebpushSettings) -> Vec<&mut PathBuf> {
        settings.vapid_private_key_file.as_mut().into_iter().collect()
    }

    fn default_text(settings: &WebpushSettings) -> Option<&'static str> {
        (!settings.send_body).then_some(PRIVATE_DEFAULT_TEXT)
    }

    fn check_config(entry: &ChannelConfig, config: &WebpushSettings) -> Result<(), ConfigError> {
        let err = |key: &str, reason: &str| Err(ConfigError::new(&entry.name, key, reason));
        if config.vapid_private_key.is_some() && config.vapid_private_key_file.is_some() {
            return err("vapid_private_key", "is given both directly and as vapid_private_key_file; give one");
        }
        if config.vapid_private_key.is_none() && config.vapid_private_key_file.is_none() {
            return err("vapid_private_key", "is required for a webpush channel (`herald keys vapid` makes one)");
        }
        match config.vapid_subject.as_deref() {
            Some(sub) if sub.starts_with("mailto:") || sub.starts_with("https://") => Ok(()),
            Some(_) => err("vapid_subject", "must be a mailto: or https: URL"),
            None => err("vapid_subject", "is required for a webpush channel (a mailto: or https: contact)"),
        }
    }

    /// `allow_loopback_endpoints` outside a process started for local stand-ins.
    fn check_production(
        entry: &ChannelConfig,
        config: &WebpushSettings,
        _placeholder: fn(&str) -> bool,
        stand_ins: bool,
    ) -> Result<(), ConfigError> {
        if config.allow_loopback_endpoints && !stand_ins {
            return Err(ConfigError::new(
                &entry.name,
                "allow_loopback_endpoints",
                "lets a user's subscription make Herald post to the services of its own machine; it is for a local \
                 push-service stand-in only (tests, the soak: start with --stand-ins). Remove it; for an internal push \
                 service, list its range in [egress] allow_private",
            ));
        }
        Ok(())
    }

    /// Reads the VAPID key and builds the client, guarded by `egress`.
    fn build(entry: &ChannelConfig, config: &WebpushSettings, egress: &Egress) -> Result<Self, ConfigError> {
        let name = entry.name.as_str();
        let vapid = match (&config.vapid_private_key, &config.vapid_private_key_file) {
            (Some(key), _) => VapidKey::from_base64(key.expose())
                .map_err(|reason| ConfigError::new(name, "vapid_private_key", reason))?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|_| ConfigError::new(name, "vapid_private_key_file", "cannot be read"))?;
                VapidKey::from_base64(&text)
                    .map_err(|reason| ConfigError::new(name, "vapid_private_key_file", reason))?
            }
            (None, None) => return Err(ConfigError::new(name, "vapid_private_key", "is required")),
        };
        // The endpoint is each user's subscription, so the channel has no URL of its own; the shared client
        // (timeouts, no proxy, no redirects, a fresh connection per call) is built from a placeholder one
        // that is never called. Its names resolve only through the guard.
        let guard = egress.guard(config.allow_loopback_endpoints);
        let mut client_config = entry.clone();
        client_config.url = "https://webpush.invalid".to_owned();
        let transport = HttpTransport::guarded(&client_config, Connections::FreshPerCall, &guard)?;
        Ok(Webpush {
            transport,
            vapid,
            subject: config.vapid_subject.clone().unwrap_or_default(),
            urgency: config.urgency.unwrap_or_default(),
            allow_loopback_endpoints: config.allow_loopback_endpoints,
            guard,
        })
    }

    /// Not one host: each subscription names its push service.
    fn host(&self) -> &str {
        "(each subscription's push service)"
    }

    /// A `PushSubscription` JSON whose endpoint is no address literal (nor `localhost`) the egress guard
    /// refuses. A name is resolved only when sending.
    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        let subscription = Subscription::parse(destination)?;
        self.guard.check_url(&subscription.endpoint).map_err(|refused| refused.reason())
    }

    async fn send(&self, base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let rejected = |detail: &str| Classified { observation: Observation::Rejected, detail: detail.to_owned() };
        // Checked when stored; a stored value that is no subscription can never be sent.
        let Ok(subscription) = Subscription::parse(message.destination.expose_secret()) else {
            return rejected("the stored destination is not a push subscription");
        };
        // Again at every send: a value stored before the guard existed, or under other `[egress]` settings.
        // A literal address never reaches the resolver, so this is its only check.
        if let Err(refused) = self.guard.check_url(&subscription.endpoint) {
            return egress_refused(refused.reason());
        }
        if subscription.endpoint.scheme() == "http" && !self.allow_loopback_endpoints {
            // Stored by a user; only a channel configured for a local stand-in posts to the machine itself.
            return rejected("the subscription's endpoint is not https");
        }
        let topic = topic(&message.reference);
        let Some(body) = encrypt(&subscription, &payload(&message.text, &topic)) else {
            return rejected("the payload could not be encrypted");
        };
        let authorization = self.vapid.authorization(&subscription.endpoint, &self.subject, SystemTime::now());
        let Ok(authorization) = HeaderValue::from_str(&authorization) else {
            return rejected("the VAPID authorization could not be built");
        };
        let request = self
            .transport
            .post(&subscription.endpoint)
            .header(AUTHORIZATION, authorization)
            .header("TTL", message.ttl_seconds.to_string())
            .header("Urgency", self.urgency.as_str())
            .header("Topic", topic.as_str())
            .header(CONTENT_ENCODING, "aes128gcm")
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(body);
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => {
                // The name resolved to an address the guard refuses: no connection was opened.
                if let Some(refused) = refusal_in(&err) {
                    return egress_refused(refused.reason());
                }
                return classify_webpush(failure(&err), None, base.refusal_5xx());
            }
        };
        let status = response.status().as_u16();
        let headers = response.headers();
        let location = header(headers, LOCATION).map(str::to_owned);
        let retry_after = header(headers, RETRY_AFTER)
            .and_then(|value| retry_after_seconds(value, header(headers, DATE), wall_clock()))
            .map(|seconds| seconds.to_string());
        // The status decides; the body is not read (a push service's error text may quote the endpoint).
        drop(response);
        let reply = Reply::Response { status, body: "", retry_after: retry_after.as_deref() };
        classify_webpush(reply, location.as_deref(), base.refusal_5xx())
    }
}



#[cfg(test)]
mod tests {
    use super::*;

    const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn subscription_json(endpoint: &str) -> String {
        format!(r#"{{"endpoint":"{endpoint}","expirationTime":null,"keys":{{"p256dh":"{P256DH}","auth":"{AUTH}"}}}}"#)
    }

    #[test]
    fn subscriptions_are_checked_without_repeating_them() {
        assert!(Subscription::parse(&subscription_json("https://push.example.net/wpush/v2/abc")).is_ok());
        assert!(Subscription::parse(&subscription_json("http://127.0.0.1:9/push/abc")).is_ok());
        for bad in [
            subscription_json("http://push.example.net/abc"),
            subscription_json("ftp://push.example.net/abc"),
            subscription_json("https://user:pw@push.example.net/abc"),
            r#"{"endpoint":"https://push.example.net/a","keys":{"p256dh":"AAAA","auth":"BTBZMqHH6r4Tts7J_aSIgg"}}"#
                .into(),
            format!(r#"{{"endpoint":"https://push.example.net/a","keys":{{"p256dh":"{P256DH}","auth":"AAAA"}}}}"#),
            "alice@example.org".into(),
        ] {
            let err = Subscription::parse(&bad).err().expect("refused");
            assert!(!err.contains("push.example.net") && !err.contains(AUTH), "{err}");
        }
    }

    #[test]
    fn topics_are_short_url_safe_and_stable() {
        assert_eq!(topic("6f1c2a52-9a8e-4f4e-8a57-3a2f0f6f2a11"), "6f1c2a529a8e4f4e8a573a2f0f6f2a11");
        let long = topic("a reference that is not a uuid at all, and long");
        assert_eq!(long.len(), 32);
        assert!(long.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_eq!(long, topic("a reference that is not a uuid at all, and long"));
    }

    #[test]
    fn a_long_text_is_cut_to_fit_one_record() {
        let text = "ü".repeat(5000);
        let json = payload(&text, "t");
        assert!(json.len() <= MAX_PLAINTEXT, "{}", json.len());
        let value: serde_json::Value = serde_json::from_slice(&json).expect("json");
        assert!(value["text"].as_str().expect("text").starts_with('ü'));
    }

    #[test]
    fn the_vapid_key_round_trips_and_debug_shows_only_the_public_half() {
        let (private, public) = VapidKey::generate();
        let key = VapidKey::from_base64(&private).expect("valid");
        assert_eq!(key.public_key(), public);
        assert!(!format!("{key:?}").contains(&private));
        assert!(VapidKey::from_base64("not a key").is_err());
    }
}
