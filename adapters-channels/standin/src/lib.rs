//! Stand-in channels: local fake channels that are real HTTP servers (SPEC §9, §12).
//!
//! A stand-in lets tests, benchmarks and the demo answer the question a mock cannot: *how many
//! times would the user really have been prompted?* Each one is an HTTP/1 server on
//! `127.0.0.1`, speaking the wire format of its channel kind, scriptable per request, and
//! counting requests and real sends. The central rule of §9 holds for every step: an
//! acceptance is recorded **before** the stand-in delays, hangs, drops the connection or
//! answers garbage, and a refusal (`Status`) is answered **before** anything is recorded.
//!
//! | kind | endpoint | repeat | query |
//! |---|---|---|---|
//! | [`Kind::Push`] | `POST /send` JSON, `Idempotency-Key` required | same key: original id, `replayed: true`, no new send | `GET /messages` -> 405 |
//! | [`Kind::Sms`] | `POST /messages` JSON | every acceptance is a new send | `GET /messages?ref=` -> `{"found", "id"}` |
//! | [`Kind::Miaotixing`] | `POST /trigger` form `id=&text=` | every acceptance is a new send | none |
//!
//! Two more stand-ins speak the protocols of the e-mail and Web Push kinds, with the same rule and the
//! same [`Chaos`] weights: [`SmtpStandIn`] (an in-process SMTP server, scripted per mail transaction by
//! [`SmtpScript`] at a [`SmtpStage`]) and [`WebPushService`] (a push service that verifies VAPID and
//! decrypts the payload before anything counts, scripted by [`Script`] per `Topic`).
//!
//! [`InternalService`] is no channel: it stands for a service on the machine's own network that a user's
//! destination must never reach (the egress guard, SPEC §16), and records every connection made to it.
//!
//! ```no_run
//! # async fn demo() {
//! use herald_standin::{Kind, Script, StandIn};
//! use std::time::Duration;
//!
//! let sms = StandIn::start(Kind::Sms).await;
//! sms.script(Script::Delay(Duration::from_secs(2))); // accepted, answer comes too late
//! sms.script(Script::QueryStatus(503)); // first query fails
//! // ... point the adapter at sms.base_url() and run the case ...
//! assert_eq!(sms.sends_for("ntf-1"), 1);
//! sms.shutdown().await;
//! # }
//! ```
//!
//! Nothing here logs: the stand-ins run inside benchmarks (no per-request cost) and receive
//! destinations, which must never reach any output (§8).

mod chaos;
mod internal;
mod miaotixing;
mod push;
mod script;
mod server;
pub mod skip;
mod sms;
pub mod smtp;
mod state;
pub mod webpush;

use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use chaos::{Chaos, DRAW_NAMES};
pub use internal::InternalService;
pub use miaotixing::{MIAO_BAD_PARAMS, MIAO_NOT_FOUND, MIAO_OK, MIAO_SERVICE_FAILED};
pub use script::{Script, GARBAGE_BODY};
pub use smtp::{SmtpMessage, SmtpScript, SmtpStage, SmtpStandIn};
pub use state::Received;
pub use webpush::{PushRequest, WebPushService};

use script::{AfterAccept, Refusal, SendStep};
use server::ConnectionAbort;
use state::{Accepted, Incoming, Shared};

/// The channel kind a stand-in imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Webhook with idempotency keys (IDEMPOTENT).
    Push,
    /// SMS-like gateway that can be asked what it accepted (QUERYABLE).
    Sms,
    /// The 喵提醒 reminder service: plain-text answers, no key, no query (NEITHER).
    Miaotixing,
}

impl Kind {
    /// Prefix of the message ids the stand-in hands out; Miaotixing answers no id.
    fn id_prefix(self) -> Option<&'static str> {
        match self {
            Self::Push => Some("push"),
            Self::Sms => Some("sms"),
            Self::Miaotixing => None,
        }
    }

    fn router(self, shared: Arc<Shared>) -> Router {
        match self {
            Self::Push => push::router(shared),
            Self::Sms => sms::router(shared),
            Self::Miaotixing => miaotixing::router(shared),
        }
    }

    /// The answer to a `Status` step scripted without a body, shaped like the real channel's.
    fn default_refusal(self, status: StatusCode) -> Response {
        match self {
            Self::Push | Self::Sms => {
                let reason = status.canonical_reason().unwrap_or("refused");
                (status, Json(serde_json::json!({ "error": reason }))).into_response()
            }
            Self::Miaotixing => (status, MIAO_SERVICE_FAILED).into_response(),
        }
    }
}

/// A running stand-in channel.
///
/// Dropping it stops the server (the accept loop notices within one scheduler turn);
/// [`StandIn::shutdown`] does the same and waits until every connection, including hung
/// ones, is closed.
#[derive(Debug)]
pub struct StandIn {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

impl StandIn {
    /// Starts a stand-in of `kind` on `127.0.0.1` and an ephemeral port.
    ///
    /// # Panics
    /// If no loopback port can be bound; use [`StandIn::try_start`] to handle that.
    pub async fn start(kind: Kind) -> Self {
        Self::try_start(kind).await.unwrap_or_else(|e| panic!("stand-in {kind:?} could not bind 127.0.0.1:0: {e}"))
    }

    /// Starts a stand-in of `kind` on `127.0.0.1` and an ephemeral port.
    ///
    /// # Errors
    /// When binding the port fails.
    pub async fn try_start(kind: Kind) -> io::Result<Self> {
        Self::bind(kind, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts a stand-in on a chosen address, for a demo whose configuration names fixed URLs.
    ///
    /// # Errors
    /// When binding `addr` fails.
    pub async fn bind(kind: Kind, addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(kind));
        let (stop, stopped) = oneshot::channel();
        let router = kind.router(Arc::clone(&shared));
        let server = tokio::spawn(server::serve(listener, router, stopped));
        Ok(Self { shared, addr, stop, server })
    }

    /// Stops accepting, closes every open connection and waits for the server to finish.
    pub async fn shutdown(self) {
        // An error means the server already stopped; either way it is gone afterwards.
        let _ = self.stop.send(());
        let _ = self.server.await;
    }

    /// The kind this stand-in imitates.
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.shared.kind
    }

    /// The bound socket address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash, ready for a channel's `url`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a step for the next request (see [`Script`] for which requests consume it).
    pub fn script(&self, step: Script) {
        self.shared.lock().scripts.push(None, step);
    }

    /// Queues several steps in order.
    pub fn script_all(&self, steps: impl IntoIterator<Item = Script>) {
        let mut state = self.shared.lock();
        for step in steps {
            state.scripts.push(None, step);
        }
    }

    /// Queues a step for the next request about `key`: the `ref` for push and sms, the code
    /// (destination) for Miaotixing. It is consulted before the stand-in-wide queue, so one
    /// recipient can fail while others succeed.
    pub fn script_for(&self, key: &str, step: Script) {
        self.shared.lock().scripts.push(Some(key), step);
    }

    /// Sms (queryable) only: a message accepted at time `t` is counted by `GET /messages?ref=`
    /// only from `t + lag`; before that the query answers `found: 0`, like a gateway whose
    /// query side is eventually consistent (`query_consistency`, SPEC §9). Default zero.
    /// [`StandIn::sends_for`] and the other counters always count the send at once.
    pub fn set_query_lag(&self, lag: std::time::Duration) {
        self.shared.lock().set_query_lag(lag);
    }

    /// Chaos mode (`Some`): every request that finds no scripted step queued draws its behaviour
    /// from the seeded RNG and weights of [`Chaos`]; `None` switches it off again. Scripted steps
    /// always win over a draw.
    pub fn set_chaos(&self, chaos: Option<Chaos>) {
        self.shared.lock().scripts.set_chaos(chaos);
    }

    /// How often each chaos behaviour was drawn so far, by the names of [`DRAW_NAMES`].
    #[must_use]
    pub fn chaos_draws(&self) -> Vec<(&'static str, u64)> {
        self.shared.lock().scripts.chaos_draws()
    }

    /// Steps queued and not yet consumed (send and query queues together).
    #[must_use]
    pub fn pending_scripts(&self) -> usize {
        self.shared.lock().scripts.pending()
    }

    /// HTTP requests received on the send endpoint, whatever their answer.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.shared.lock().requests()
    }

    /// Send requests whose body named this `ref`.
    #[must_use]
    pub fn requests_for(&self, reference: &str) -> u64 {
        self.shared.lock().requests_for(reference)
    }

    /// Send requests addressed to this destination (`to`, or the Miaotixing code).
    #[must_use]
    pub fn requests_to(&self, to: &str) -> u64 {
        self.shared.lock().requests_to(to)
    }

    /// When each send request arrived, in order; for checking egress intervals (§7).
    #[must_use]
    pub fn request_times(&self) -> Vec<Instant> {
        self.shared.lock().request_times()
    }

    /// Real sends: acceptances that would have prompted a user (push replays excluded).
    #[must_use]
    pub fn sends(&self) -> u64 {
        self.shared.lock().sends()
    }

    /// Real sends for this `ref` (always 0 for Miaotixing, which has no ref on the wire).
    #[must_use]
    pub fn sends_for(&self, reference: &str) -> u64 {
        self.shared.lock().sends_for(reference)
    }

    /// Real sends to this destination (`to`, or the Miaotixing code).
    #[must_use]
    pub fn sends_to(&self, to: &str) -> u64 {
        self.shared.lock().sends_to(to)
    }

    /// Texts really sent to this destination, in order.
    #[must_use]
    pub fn texts_to(&self, to: &str) -> Vec<String> {
        self.shared.lock().texts_to(to)
    }

    /// `GET /messages` requests received (sms queries; push answers them 405 but counts them).
    #[must_use]
    pub fn queries(&self) -> u64 {
        self.shared.lock().queries()
    }

    /// `GET /messages` requests for this `ref`.
    #[must_use]
    pub fn queries_for(&self, reference: &str) -> u64 {
        self.shared.lock().queries_for(reference)
    }

    /// Every accepted request in order, push replays included (flagged `replayed`).
    #[must_use]
    pub fn messages(&self) -> Vec<Received> {
        self.shared.lock().messages()
    }

    /// Every `Idempotency-Key` header received on the send endpoint, in order, repeats
    /// included (sms and Miaotixing ignore the key but record it, so a test can check what
    /// the adapter sent).
    #[must_use]
    pub fn idempotency_keys(&self) -> Vec<String> {
        self.shared.lock().idempotency_keys()
    }
}

/// Runs the scripted step of a well-formed send request: refuse, drop, or record the
/// acceptance and then behave as scripted. `answer` builds the normal reply.
async fn run_send(
    shared: &Shared,
    abort: &ConnectionAbort,
    key: &str,
    incoming: Incoming,
    answer: impl FnOnce(Accepted) -> Response,
) -> Response {
    let step = shared.lock().scripts.next_send(Some(key));
    let after = match step {
        SendStep::Refuse(refusal) => return refuse(shared.kind, refusal),
        SendStep::DropBeforeAccept => return abort.drop_connection().await,
        SendStep::Accept(after) => after,
    };
    let accepted = shared.lock().accept(shared.kind, incoming);
    match after {
        AfterAccept::Answer => answer(accepted),
        AfterAccept::Delay(delay) => {
            tokio::time::sleep(delay).await;
            answer(accepted)
        }
        AfterAccept::Hang => pending().await,
        AfterAccept::Drop => abort.drop_connection().await,
        AfterAccept::Garbage => {
            (StatusCode::OK, [(CONTENT_TYPE, "text/html; charset=utf-8")], GARBAGE_BODY).into_response()
        }
    }
}

fn refuse(kind: Kind, refusal: Refusal) -> Response {
    let mut response = match refusal.body {
        Some(body) => (refusal.status, body).into_response(),
        None => kind.default_refusal(refusal.status),
    };
    if let Some(seconds) = refusal.retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The answer to a malformed JSON request (push, sms): what a real gateway would say.
fn bad_request(why: &'static str) -> Response {
    (StatusCode::BAD_REQUEST, Json(serde_json::json!({ "error": why }))).into_response()
}
