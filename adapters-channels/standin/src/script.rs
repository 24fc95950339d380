//! Scripted behaviour: what the stand-in does with the next request.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use axum::http::StatusCode;

use super::chaos::{Chaos, ChaosState};

/// Body of the `Garbage` answer: HTTP 200 with something no adapter can parse as an answer
/// (not JSON for push/sms, not a documented Miaotixing text).
pub const GARBAGE_BODY: &str = "<html><body>OK</body></html>";

/// One scripted step, consumed by one request.
///
/// Steps are queued with [`StandIn::script`](super::StandIn::script) (FIFO per stand-in) or
/// [`StandIn::script_for`](super::StandIn::script_for) (FIFO per reference / destination,
/// consulted first). When no step is queued the request gets [`Script::Ok`].
///
/// Send steps and query steps live in separate queues: [`Script::QueryStatus`] is routed to
/// the query queue (consumed by `GET /messages` on the sms stand-in), every other step to the
/// send queue (consumed by `POST /send`, `POST /messages`, `POST /trigger`). So scripting
/// "the next query fails" never disturbs the next send and vice versa.
///
/// The words "before" and "after" acceptance are the point of the whole stand-in (§9): a step
/// *after* acceptance records the send first — the channel really prompted the user — and only
/// then misbehaves, which is exactly the case where the caller cannot know the outcome.
/// Malformed requests (bad JSON, missing `Idempotency-Key` on push, missing Miaotixing `id`)
/// are answered as the real service would and consume no step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Script {
    /// Normal behaviour: accept and answer at once.
    Ok,
    /// Accept, then wait this long, then answer normally. A client with a shorter timeout
    /// times out, but the acceptance already counts.
    Delay(Duration),
    /// Accept, then never answer; the connection is held open until the stand-in shuts down.
    HangAfterAccept,
    /// Refuse before accepting: answer this status (e.g. 400, 429, 500, 503) without recording
    /// a send. `body` replaces the default body (push/sms: a small JSON error; Miaotixing:
    /// `service failed`) and is sent as plain text; `retry_after` adds `Retry-After: <seconds>`.
    /// Use [`Script::status`], [`Script::text`] or [`Script::retry_after`] to build it.
    Status {
        /// HTTP status code; must be a valid code (100..=999), checked when scripted.
        code: u16,
        /// Plain-text body instead of the kind's default body.
        body: Option<String>,
        /// Seconds for a `Retry-After` header.
        retry_after: Option<u64>,
    },
    /// Close the connection without any response, before recording anything.
    DropBeforeAccept,
    /// Record the acceptance, then close the connection without any response.
    DropAfterAccept,
    /// Record the acceptance, then answer 200 with [`GARBAGE_BODY`].
    Garbage,
    /// Queries only (sms `GET /messages`): answer this status with a plain-text body and no
    /// data. A code of 200 gives a 200 whose body is not the documented JSON.
    QueryStatus(u16),
}

impl Script {
    /// A refusal with the kind's default body.
    #[must_use]
    pub fn status(code: u16) -> Self {
        Self::Status { code, body: None, retry_after: None }
    }

    /// A refusal with an exact plain-text body, e.g. `Script::text(200, MIAO_NOT_FOUND)` for
    /// Miaotixing's "reminder not found", which the real service sends as HTTP 200.
    #[must_use]
    pub fn text(code: u16, body: impl Into<String>) -> Self {
        Self::Status { code, body: Some(body.into()), retry_after: None }
    }

    /// A refusal carrying `Retry-After: <seconds>`, typically 429 or 503.
    #[must_use]
    pub fn retry_after(code: u16, seconds: u64) -> Self {
        Self::Status { code, body: None, retry_after: Some(seconds) }
    }
}

/// The send-side meaning of a step, as the handlers execute it.
#[derive(Clone, Debug)]
pub(crate) enum SendStep {
    Refuse(Refusal),
    DropBeforeAccept,
    Accept(AfterAccept),
}

/// A response given before accepting.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) body: Option<String>,
    pub(crate) retry_after: Option<u64>,
}

/// What happens once the acceptance has been recorded.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AfterAccept {
    Answer,
    Delay(Duration),
    Hang,
    Drop,
    Garbage,
}

/// Where a public [`Script`] goes.
enum Routed {
    Send(SendStep),
    Query(StatusCode),
}

impl Script {
    /// Splits the public step into its queue and its meaning.
    ///
    /// # Panics
    /// On a status code outside 100..=999: a typo in a test should fail loudly at the place
    /// it was written, not as a confusing 500 later.
    fn route(self) -> Routed {
        let status = |code: u16| {
            StatusCode::from_u16(code).unwrap_or_else(|_| panic!("scripted HTTP status {code} is not a valid status"))
        };
        match self {
            Self::Ok => Routed::Send(SendStep::Accept(AfterAccept::Answer)),
            Self::Delay(d) => Routed::Send(SendStep::Accept(AfterAccept::Delay(d))),
            Self::HangAfterAccept => Routed::Send(SendStep::Accept(AfterAccept::Hang)),
            Self::DropAfterAccept => Routed::Send(SendStep::Accept(AfterAccept::Drop)),
            Self::Garbage => Routed::Send(SendStep::Accept(AfterAccept::Garbage)),
            Self::DropBeforeAccept => Routed::Send(SendStep::DropBeforeAccept),
            Self::Status { code, body, retry_after } => {
                Routed::Send(SendStep::Refuse(Refusal { status: status(code), body, retry_after }))
            }
            Self::QueryStatus(code) => Routed::Query(status(code)),
        }
    }
}

/// FIFO queue with optional per-key queues in front of it.
#[derive(Debug)]
struct Queues<T> {
    global: VecDeque<T>,
    keyed: HashMap<String, VecDeque<T>>,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Self { global: VecDeque::new(), keyed: HashMap::new() }
    }
}

impl<T> Queues<T> {
    fn push(&mut self, key: Option<&str>, item: T) {
        match key {
            Some(key) => self.keyed.entry(key.to_owned()).or_default().push_back(item),
            None => self.global.push_back(item),
        }
    }

    /// A step queued for this key wins over the global queue.
    fn pop(&mut self, key: Option<&str>) -> Option<T> {
        if let Some(key) = key {
            if let Some(queue) = self.keyed.get_mut(key) {
                let item = queue.pop_front();
                if queue.is_empty() {
                    self.keyed.remove(key);
                }
                if item.is_some() {
                    return item;
                }
            }
        }
        self.global.pop_front()
    }

    fn len(&self) -> usize {
        self.global.len() + self.keyed.values().map(VecDeque::len).sum::<usize>()
    }
}

/// The two queues of one stand-in, and its chaos mode (consulted when the queues are empty).
#[derive(Debug, Default)]
pub(crate) struct Scripts {
    sends: Queues<SendStep>,
    queries: Queues<StatusCode>,
    chaos: Option<ChaosState>,
}

impl Scripts {
    pub(crate) fn push(&mut self, key: Option<&str>, step: Script) {
        match step.route() {
            Routed::Send(step) => self.sends.push(key, step),
            Routed::Query(status) => self.queries.push(key, status),
        }
    }

    /// Switches chaos mode on (`Some`) or off (`None`).
    pub(crate) fn set_chaos(&mut self, chaos: Option<Chaos>) {
        self.chaos = chaos.map(ChaosState::new);
    }

    /// How often each chaos behaviour was drawn (empty when chaos mode is off).
    pub(crate) fn chaos_draws(&self) -> Vec<(&'static str, u64)> {
        self.chaos.as_ref().map(ChaosState::draws).unwrap_or_default()
    }

    /// The step for the next send: a queued one, else a chaos draw, else normal success.
    pub(crate) fn next_send(&mut self, key: Option<&str>) -> SendStep {
        if let Some(step) = self.sends.pop(key) {
            return step;
        }
        if let Some(chaos) = &mut self.chaos {
            if let Routed::Send(step) = chaos.next_send().route() {
                return step;
            }
        }
        SendStep::Accept(AfterAccept::Answer)
    }

    /// A failure for the next query: a queued one, else a chaos draw (503), if any.
    pub(crate) fn next_query(&mut self, key: Option<&str>) -> Option<StatusCode> {
        if let Some(status) = self.queries.pop(key) {
            return Some(status);
        }
        let chaos = self.chaos.as_mut()?;
        chaos.next_query_fails().then_some(StatusCode::SERVICE_UNAVAILABLE)
    }

    pub(crate) fn pending(&self) -> usize {
        self.sends.len() + self.queries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_steps_win_over_global_ones_and_fall_back_when_exhausted() {
        let mut scripts = Scripts::default();
        scripts.push(None, Script::Garbage);
        scripts.push(Some("r1"), Script::DropBeforeAccept);

        assert!(matches!(scripts.next_send(Some("r2")), SendStep::Accept(AfterAccept::Garbage)));
        assert!(matches!(scripts.next_send(Some("r1")), SendStep::DropBeforeAccept));
        assert!(matches!(scripts.next_send(Some("r1")), SendStep::Accept(AfterAccept::Answer)));
        assert_eq!(scripts.pending(), 0);
    }

    #[test]
    fn query_steps_do_not_disturb_sends() {
        let mut scripts = Scripts::default();
        scripts.push(None, Script::QueryStatus(503));

        assert!(matches!(scripts.next_send(None), SendStep::Accept(AfterAccept::Answer)));
        assert_eq!(scripts.next_query(None), Some(StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(scripts.next_query(None), None);
    }

    #[test]
    #[should_panic(expected = "not a valid status")]
    fn invalid_status_fails_where_it_was_scripted() {
        Scripts::default().push(None, Script::status(42));
    }
}
