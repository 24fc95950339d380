//! Response classification per channel kind (SPEC §9, §12).
//!
//! An adapter only says what happened on the wire — the request never left, it timed out, the
//! connection broke, or this status and body came back — and these functions decide what that proves.
//! Details are short fixed words plus the status: a third party's reply body is never copied into them,
//! since it might echo the destination.

use serde::Deserialize;

use crate::contract::{ChannelKind, RefusalProof};
use crate::task::Observation;
use crate::time::{Millis, Timestamp};

/// What the transport saw of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// Failed before the request was written (connection refused, DNS, TLS): proves non-acceptance.
    NotSent,
    /// No complete answer within the client timeout after the request was written.
    TimedOut,
    /// The connection broke after the request was written.
    Broken,
    /// An HTTP response. `retry_after` is the raw `Retry-After` header, if any.
    Response { status: u16, body: &'a str, retry_after: Option<&'a str> },
}

/// An observation with a short, secret-free explanation for `last_error` and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classified {
    pub observation: Observation,
    pub detail: String,
}

impl Classified {
    fn new(observation: Observation, detail: impl Into<String>) -> Self {
        Classified { observation, detail: detail.into() }
    }
}

/// The exact success text of Miaotixing.
pub const MIAOTIXING_DONE: &str = "完成";
/// Documented Miaotixing refusal phrases: parameter format error, reminder not found.
pub const MIAOTIXING_REFUSALS: [&str; 2] = ["参数格式有误", "找不到提醒单"];

/// The longest wait a `Retry-After` is taken at its word for. A longer one is capped here (and no retry
/// is ever scheduled past the task's expiry, see [`crate::finish::finish`]).
pub const MAX_RETRY_AFTER: Millis = Millis(86_400_000);

/// `Retry-After` as delta-seconds, capped at [`MAX_RETRY_AFTER`]. An HTTP-date has to be turned into
/// seconds first by [`retry_after_seconds`], which needs a clock reading.
#[must_use]
pub fn parse_retry_after(value: &str) -> Option<Millis> {
    value.trim().parse::<u64>().ok().map(|secs| Millis::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// `Retry-After` in either form of RFC 9110 §10.2.3, as delta-seconds (rounded up). An HTTP-date is read
/// against the answer's own `Date` header when it has a valid one — both times then come from the
/// server's clock, so no clock skew enters — else against `received_at`, the receiver's clock when the
/// answer came. A date in the past means no wait; anything unreadable is `None`.
#[must_use]
pub fn retry_after_seconds(value: &str, date: Option<&str>, received_at: Timestamp) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds);
    }
    let at = http_date(value)?;
    let reference = date.and_then(http_date).unwrap_or(received_at);
    Some(at.since(reference).0.div_ceil(1_000))
}

fn http_date(value: &str) -> Option<Timestamp> {
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    let millis = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    Some(Timestamp(i64::try_from(millis).ok()?))
}

/// Classifies the answer to a SEND on a channel of `kind`.
#[must_use]
pub fn classify_send(kind: ChannelKind, refusal_5xx: RefusalProof, reply: Reply<'_>) -> Classified {
    let (status, body, retry_after) = match reply {
        Reply::NotSent => {
            return Classified::new(Observation::RetryableReject { retry_after: None }, "not sent: connection failed")
        }
        Reply::TimedOut => return Classified::new(Observation::Timeout, "timed out waiting for the channel"),
        Reply::Broken => return Classified::new(Observation::IoError, "connection broke after the request was sent"),
        Reply::Response { status, body, retry_after } => (status, body, retry_after),
    };
    match kind {
        ChannelKind::Webhook => classify_json_send(status, body, retry_after, refusal_5xx, true),
        ChannelKind::Queryable => classify_json_send(status, body, retry_after, refusal_5xx, false),
        ChannelKind::Miaotixing => classify_miaotixing(status, body, refusal_5xx),
    }
}

fn refusal(status: u16, retry_after: Option<&str>, proof: RefusalProof) -> Classified {
    match proof {
        RefusalProof::BeforeAcceptance => Classified::new(
            Observation::RetryableReject { retry_after: retry_after.and_then(parse_retry_after) },
            format!("HTTP {status}: refused before acceptance"),
        ),
        RefusalProof::Unknown => Classified::new(Observation::IoError, format!("HTTP {status}: outcome unknown")),
    }
}

#[derive(Deserialize)]
struct SendAck {
    id: String,
    #[serde(default)]
    replayed: bool,
}

fn classify_json_send(
    status: u16,
    body: &str,
    retry_after: Option<&str>,
    proof: RefusalProof,
    honours_key: bool,
) -> Classified {
    match status {
        200..=299 => match serde_json::from_str::<SendAck>(body) {
            Ok(ack) if ack.replayed && honours_key => Classified::new(
                Observation::AcceptedReplay { provider_msg_id: Some(ack.id) },
                "accepted (replay of the same key)",
            ),
            Ok(ack) => Classified::new(Observation::Accepted { provider_msg_id: Some(ack.id) }, "accepted"),
            Err(_) => {
                Classified::new(Observation::IoError, format!("HTTP {status} with an unreadable body: outcome unknown"))
            }
        },
        400 | 422 => Classified::new(Observation::Rejected, format!("HTTP {status}: refused")),
        429 | 500..=599 => refusal(status, retry_after, proof),
        _ => Classified::new(Observation::IoError, format!("HTTP {status}: outcome unknown")),
    }
}

fn classify_miaotixing(status: u16, body: &str, proof: RefusalProof) -> Classified {
    match status {
        200..=299 if body.trim() == MIAOTIXING_DONE => {
            Classified::new(Observation::Accepted { provider_msg_id: None }, "accepted")
        }
        200..=299 => match MIAOTIXING_REFUSALS.iter().find(|phrase| body.contains(*phrase)) {
            Some(phrase) => Classified::new(Observation::Rejected, format!("refused: {phrase}")),
            None => Classified::new(
                Observation::IoError,
                format!("HTTP {status} with an unrecognised text: outcome unknown"),
            ),
        },
        500..=599 => refusal(status, None, proof),
        _ => Classified::new(Observation::IoError, format!("HTTP {status}: outcome unknown")),
    }
}

#[derive(Deserialize)]
struct QueryAnswer {
    found: u64,
    id: Option<String>,
}

/// Classifies the answer to a QUERY by reference (queryable channels only).
#[must_use]
pub fn classify_query(reply: Reply<'_>) -> Classified {
    match reply {
        Reply::Response { status: 200, body, .. } => match serde_json::from_str::<QueryAnswer>(body) {
            Ok(QueryAnswer { found: 0, .. }) => {
                Classified::new(Observation::QueryNotFound, "no record of the reference")
            }
            Ok(QueryAnswer { id, .. }) => {
                Classified::new(Observation::QueryFound { provider_msg_id: id }, "found by reference")
            }
            Err(_) => Classified::new(Observation::QueryFailed, "query answer unreadable"),
        },
        Reply::Response { status, .. } => {
            Classified::new(Observation::QueryFailed, format!("query failed: HTTP {status}"))
        }
        Reply::NotSent | Reply::TimedOut | Reply::Broken => {
            Classified::new(Observation::QueryFailed, "query failed: no answer")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Outcome;

    fn resp<'a>(status: u16, body: &'a str) -> Reply<'a> {
        Reply::Response { status, body, retry_after: None }
    }

    #[track_caller]
    fn check(kind: ChannelKind, proof: RefusalProof, reply: Reply<'_>, expected: Outcome) {
        let got = classify_send(kind, proof, reply);
        assert_eq!(got.observation.outcome(), expected, "{reply:?} -> {got:?}");
    }

    #[test]
    fn miaotixing_classification_table() {
        use ChannelKind::Miaotixing as M;
        use RefusalProof::{BeforeAcceptance as B, Unknown as U};
        check(M, B, resp(200, "完成"), Outcome::Accepted);
        check(M, B, resp(200, "  完成\n"), Outcome::Accepted);
        check(M, B, resp(200, "发送失败：参数格式有误"), Outcome::Rejected);
        check(M, B, resp(200, "找不到提醒单"), Outcome::Rejected);
        check(M, B, resp(200, "unexpected"), Outcome::IoError);
        check(M, B, resp(200, "完成了吗"), Outcome::IoError);
        check(M, B, resp(200, ""), Outcome::IoError);
        check(M, B, resp(500, "service failed"), Outcome::RetryableReject);
        check(M, U, resp(500, "service failed"), Outcome::IoError);
        check(M, B, resp(404, "完成"), Outcome::IoError);
        check(M, B, Reply::TimedOut, Outcome::Timeout);
        check(M, B, Reply::Broken, Outcome::IoError);
        check(M, B, Reply::NotSent, Outcome::RetryableReject);
    }

    #[test]
    fn webhook_classification_table() {
        use ChannelKind::Webhook as W;
        use RefusalProof::{BeforeAcceptance as B, Unknown as U};
        check(W, B, resp(200, r#"{"id":"p1","replayed":false}"#), Outcome::Accepted);
        check(W, B, resp(201, r#"{"id":"p1","replayed":true}"#), Outcome::AcceptedReplay);
        check(W, B, resp(200, "garbage"), Outcome::IoError);
        check(W, B, resp(400, ""), Outcome::Rejected);
        check(W, B, resp(422, ""), Outcome::Rejected);
        check(W, B, resp(503, ""), Outcome::RetryableReject);
        check(W, B, resp(429, ""), Outcome::RetryableReject);
        check(W, U, resp(503, ""), Outcome::IoError);
        check(W, B, resp(302, ""), Outcome::IoError);
        check(W, B, Reply::TimedOut, Outcome::Timeout);
    }

    #[test]
    fn retry_after_is_kept_for_refusals_before_acceptance() {
        let got = classify_send(
            ChannelKind::Webhook,
            RefusalProof::BeforeAcceptance,
            Reply::Response { status: 429, body: "", retry_after: Some("120") },
        );
        assert_eq!(got.observation, Observation::RetryableReject { retry_after: Some(Millis(120_000)) });
    }

    #[test]
    fn queryable_send_ignores_a_replay_flag() {
        check(
            ChannelKind::Queryable,
            RefusalProof::BeforeAcceptance,
            resp(200, r#"{"id":"s1","replayed":true}"#),
            Outcome::Accepted,
        );
    }

    #[test]
    fn query_classification_table() {
        let q = |reply| classify_query(reply).observation.outcome();
        assert_eq!(q(resp(200, r#"{"found":1,"id":"s1"}"#)), Outcome::QueryFound);
        assert_eq!(q(resp(200, r#"{"found":2,"id":"s2"}"#)), Outcome::QueryFound);
        assert_eq!(q(resp(200, r#"{"found":0,"id":null}"#)), Outcome::QueryNotFound);
        assert_eq!(q(resp(200, "nope")), Outcome::QueryFailed);
        assert_eq!(q(resp(503, "")), Outcome::QueryFailed);
        assert_eq!(q(Reply::TimedOut), Outcome::QueryFailed);
    }

    #[test]
    fn details_never_copy_the_reply_body() {
        let got = classify_send(ChannelKind::Miaotixing, RefusalProof::BeforeAcceptance, resp(200, "bad code tPZ3xq1"));
        assert!(!got.detail.contains("tPZ3xq1"));
    }

    // Defect: a `Retry-After` given as an HTTP-date was ignored, so a retry could come earlier than asked.
    #[test]
    fn retry_after_as_an_http_date_is_read_against_the_answers_date() {
        let date = Some("Sun, 06 Nov 1994 08:49:37 GMT");
        let far_away_clock = Timestamp(0);
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:51:37 GMT", date, far_away_clock), Some(120));
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:49:00 GMT", date, far_away_clock), Some(0), "in the past");
        assert_eq!(retry_after_seconds(" 30 ", date, far_away_clock), Some(30));
        assert_eq!(retry_after_seconds("soon", date, far_away_clock), None);
        // Without a (valid) Date header the receiver's clock is the reference.
        let received = http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:50:07 GMT", None, received), Some(30));
        assert_eq!(retry_after_seconds("Sun, 06 Nov 1994 08:50:07 GMT", Some("garbage"), received), Some(30));
    }

    #[test]
    fn absurd_retry_after_values_are_capped() {
        assert_eq!(parse_retry_after("31536000"), Some(MAX_RETRY_AFTER), "a year");
        assert_eq!(parse_retry_after("18446744073709551615"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("120"), Some(Millis(120_000)));
    }
}
