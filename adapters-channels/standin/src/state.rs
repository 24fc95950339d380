//! What a stand-in has seen: counters, accepted messages and idempotency keys.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::script::Scripts;
use super::Kind;

/// One accepted request, as the stand-in recorded it.
///
/// `Debug` redacts `to`: a destination is a secret (§8), and a failing `assert_eq!` on a list
/// of messages must not print it into a test log.
#[derive(Clone, PartialEq, Eq)]
pub struct Received {
    /// Message id given in the answer (`push-000001`, `sms-000001`); `None` for Miaotixing,
    /// whose wire format has no id.
    pub id: Option<String>,
    /// The `ref` field (push, sms); `None` for Miaotixing, which has no reference on the wire.
    pub reference: Option<String>,
    /// Destination: `to` for push/sms, the code (`id` form field) for Miaotixing.
    pub to: String,
    /// The text that would have reached the user.
    pub text: String,
    /// `ttl_seconds` of a push request.
    pub ttl_seconds: Option<u64>,
    /// The `Idempotency-Key` header, when present.
    pub idempotency_key: Option<String>,
    /// Push only: this request repeated a known key, so it was answered with the original id
    /// and did not prompt the user again.
    pub replayed: bool,
    /// Wall-clock time of acceptance.
    pub at: SystemTime,
    /// Monotonic time of acceptance, for comparing intervals between calls.
    pub instant: Instant,
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("id", &self.id)
            .field("reference", &self.reference)
            .field("to", &"<redacted>")
            .field("text", &self.text)
            .field("ttl_seconds", &self.ttl_seconds)
            .field("idempotency_key", &self.idempotency_key)
            .field("replayed", &self.replayed)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

/// What a send request carried, once parsed.
pub(crate) struct Incoming {
    pub(crate) reference: Option<String>,
    pub(crate) to: String,
    pub(crate) text: String,
    pub(crate) ttl_seconds: Option<u64>,
    pub(crate) idempotency_key: Option<String>,
}

/// Result of recording an acceptance.
pub(crate) struct Accepted {
    pub(crate) id: Option<String>,
    pub(crate) replayed: bool,
}

/// The sends accepted for one `ref`, oldest first: when each was accepted and its id.
#[derive(Debug, Default)]
struct RefSends {
    sends: Vec<(Instant, Option<String>)>,
}

/// Everything behind the stand-in's lock. Small and only touched briefly, never across an
/// await, so readers (tests polling counters) never wait on a slow request.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) scripts: Scripts,
    requests: u64,
    request_times: Vec<Instant>,
    requests_by_ref: HashMap<String, u64>,
    requests_by_dest: HashMap<String, u64>,
    queries: u64,
    queries_by_ref: HashMap<String, u64>,
    sends: u64,
    sends_by_ref: HashMap<String, RefSends>,
    sends_by_dest: HashMap<String, u64>,
    idempotency_keys: Vec<String>,
    /// Push: key -> id of the send that key first produced.
    replay_ids: HashMap<String, String>,
    messages: Vec<Received>,
    /// Sms queries see an acceptance only this long after it was recorded (default zero).
    query_lag: Duration,
}

impl State {
    pub(crate) fn set_query_lag(&mut self, lag: Duration) {
        self.query_lag = lag;
    }

    /// Counts a request on the send endpoint, whatever its answer will be. `arrived` is when its
    /// head arrived; `reference` and `to` are `None` when the body could not be parsed.
    pub(crate) fn record_request(
        &mut self,
        arrived: Instant,
        reference: Option<&str>,
        to: Option<&str>,
        idempotency_key: Option<&str>,
    ) {
        self.requests += 1;
        self.request_times.push(arrived);
        if let Some(reference) = reference {
            *self.requests_by_ref.entry(reference.to_owned()).or_default() += 1;
        }
        if let Some(to) = to {
            *self.requests_by_dest.entry(to.to_owned()).or_default() += 1;
        }
        if let Some(key) = idempotency_key {
            self.idempotency_keys.push(key.to_owned());
        }
    }

    pub(crate) fn record_query(&mut self, reference: Option<&str>) {
        self.queries += 1;
        if let Some(reference) = reference {
            *self.queries_by_ref.entry(reference.to_owned()).or_default() += 1;
        }
    }

    /// Records an acceptance. For push a known key is a replay (no new send); every other
    /// acceptance is a new real send.
    pub(crate) fn accept(&mut self, kind: Kind, incoming: Incoming) -> Accepted {
        let replay_of = match (kind, &incoming.idempotency_key) {
            (Kind::Push, Some(key)) => self.replay_ids.get(key).cloned(),
            _ => None,
        };
        let accepted = match replay_of {
            Some(id) => Accepted { id: Some(id), replayed: true },
            None => {
                self.sends += 1;
                let id = kind.id_prefix().map(|p| format!("{p}-{:06}", self.sends));
                if let (Kind::Push, Some(key), Some(id)) = (kind, &incoming.idempotency_key, &id) {
                    self.replay_ids.insert(key.clone(), id.clone());
                }
                if let Some(reference) = &incoming.reference {
                    let entry = self.sends_by_ref.entry(reference.clone()).or_default();
                    entry.sends.push((Instant::now(), id.clone()));
                }
                *self.sends_by_dest.entry(incoming.to.clone()).or_default() += 1;
                Accepted { id, replayed: false }
            }
        };
        self.messages.push(Received {
            id: accepted.id.clone(),
            reference: incoming.reference,
            to: incoming.to,
            text: incoming.text,
            ttl_seconds: incoming.ttl_seconds,
            idempotency_key: incoming.idempotency_key,
            replayed: accepted.replayed,
            at: SystemTime::now(),
            instant: Instant::now(),
        });
        accepted
    }

    /// The sms query answer: number of sends for `reference` that queries can already see
    /// (accepted at least the query lag ago) and the latest of their ids.
    pub(crate) fn lookup(&self, reference: &str) -> (u64, Option<String>) {
        let Some(sends) = self.sends_by_ref.get(reference) else {
            return (0, None);
        };
        let now = Instant::now();
        let visible: Vec<_> =
            sends.sends.iter().filter(|(at, _)| now.saturating_duration_since(*at) >= self.query_lag).collect();
        (visible.len() as u64, visible.last().and_then(|(_, id)| id.clone()))
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests
    }

    pub(crate) fn request_times(&self) -> Vec<Instant> {
        self.request_times.clone()
    }

    pub(crate) fn requests_for(&self, reference: &str) -> u64 {
        self.requests_by_ref.get(reference).copied().unwrap_or(0)
    }

    pub(crate) fn requests_to(&self, to: &str) -> u64 {
        self.requests_by_dest.get(to).copied().unwrap_or(0)
    }

    pub(crate) fn queries(&self) -> u64 {
        self.queries
    }

    pub(crate) fn queries_for(&self, reference: &str) -> u64 {
        self.queries_by_ref.get(reference).copied().unwrap_or(0)
    }

    pub(crate) fn sends(&self) -> u64 {
        self.sends
    }

    /// Every real send for `reference`, visible to queries yet or not.
    pub(crate) fn sends_for(&self, reference: &str) -> u64 {
        self.sends_by_ref.get(reference).map_or(0, |s| s.sends.len() as u64)
    }

    pub(crate) fn sends_to(&self, to: &str) -> u64 {
        self.sends_by_dest.get(to).copied().unwrap_or(0)
    }

    pub(crate) fn idempotency_keys(&self) -> Vec<String> {
        self.idempotency_keys.clone()
    }

    pub(crate) fn messages(&self) -> Vec<Received> {
        self.messages.clone()
    }

    pub(crate) fn texts_to(&self, to: &str) -> Vec<String> {
        self.messages.iter().filter(|m| m.to == to && !m.replayed).map(|m| m.text.clone()).collect()
    }
}

/// The state shared between the handle and the server tasks.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) kind: Kind,
    state: Mutex<State>,
}

impl Shared {
    pub(crate) fn new(kind: Kind) -> Self {
        Self { kind, state: Mutex::new(State::default()) }
    }

    /// A panicking test thread must not turn every later read into a second panic, so a
    /// poisoned lock is used as is: the state is plain counters, always consistent.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
