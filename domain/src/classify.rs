//! Response classification per channel kind (SPEC §9, §12).
//!
//! An adapter only says what happened on the wire — the request never left, it timed out, the
//! connection broke, or this status and body came back — and these functions decide what that proves.
//! Details are short fixed words plus the status: a third party's reply body is never copied into them,
//! since it might echo the destination.

use serde::Deserialize;

use crate::contract::{Answers, ChannelKind, RefusalProof};
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
    match kind.answers() {
        Answers::Json { honours_key } => classify_json_send(status, body, retry_after, refusal_5xx, honours_key),
        Answers::Miaotixing => classify_miaotixing(status, body, refusal_5xx),
        Answers::Webpush => classify_webpush(Reply::Response { status, body, retry_after }, None, refusal_5xx),
        // SMTP answers are read by [`classify_smtp`]; an HTTP status proves nothing about an e-mail.
        Answers::NotHttp => {
            Classified::new(Observation::IoError, format!("HTTP {status} on an SMTP channel: outcome unknown"))
        }
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

/// The detail of a Web Push answer 404 or 410: the push subscription no longer exists (RFC 8030 §7.3:
/// "the push service MUST return a 404 (Not Found) or 410 (Gone)" for an expired subscription). Storing an
/// attempt with this detail disables the user's subscription for that channel (migration `0005`), so its
/// exact text is part of that contract: `herald-tests` checks the migration spells it the same.
pub const WEBPUSH_SUBSCRIPTION_EXPIRED: &str = "subscription expired";

/// Classifies the answer to a Web Push message (RFC 8030 §5), one row per status class:
///
/// | answer | observation | why |
/// |---|---|---|
/// | 201 | ACCEPTED, `Location` as message id | "201 (Created)" is the push service's acceptance — not delivery |
/// | other 2xx | unknown | not an answer RFC 8030 defines; the message may exist |
/// | 404, 410 | REJECTED, detail [`WEBPUSH_SUBSCRIPTION_EXPIRED`] | the subscription is gone: nothing was accepted and nothing ever will be |
/// | 400, 413 | REJECTED | malformed or too large (RFC 8030 §7.2): refused, never accepted |
/// | 401, 403 | REJECTED | the VAPID authorization was refused (RFC 8292 §4.2): nothing was accepted |
/// | 429 | RETRYABLE_REJECT, honouring `Retry-After` | too many requests: refused before acceptance |
/// | 5xx | per `refusal_5xx` | only the operator knows whether the push service refuses before accepting |
/// | any other status | unknown | an answer we do not understand |
/// | no request written | RETRYABLE_REJECT | proves non-acceptance |
/// | timeout, broken connection | TIMEOUT / IO_ERROR | the push service may have accepted |
///
/// The `Location` is a URL of the push service; only its last path segment is kept, which is an opaque
/// message id and never the subscription's endpoint.
#[must_use]
pub fn classify_webpush(reply: Reply<'_>, location: Option<&str>, refusal_5xx: RefusalProof) -> Classified {
    let (status, retry_after) = match reply {
        Reply::NotSent => {
            return Classified::new(Observation::RetryableReject { retry_after: None }, "not sent: connection failed")
        }
        Reply::TimedOut => return Classified::new(Observation::Timeout, "timed out waiting for the push service"),
        Reply::Broken => return Classified::new(Observation::IoError, "connection broke after the message was sent"),
        Reply::Response { status, retry_after, .. } => (status, retry_after),
    };
    match status {
        201 => {
            let id = location.and_then(|location| {
                let last = location.trim().trim_end_matches('/').rsplit('/').next()?;
                let id: String = last.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.~".contains(*c)).collect();
                (!id.is_empty()).then(|| id.chars().take(128).collect())
            });
            Classified::new(Observation::Accepted { provider_msg_id: id }, "accepted by the push service")
        }
        404 | 410 => Classified::new(Observation::Rejected, format!("{WEBPUSH_SUBSCRIPTION_EXPIRED} (HTTP {status})")),
        400 | 413 => Classified::new(Observation::Rejected, format!("HTTP {status}: refused")),
        401 | 403 => Classified::new(Observation::Rejected, format!("HTTP {status}: VAPID authorization refused")),
        429 => refusal(status, retry_after, RefusalProof::BeforeAcceptance),
        500..=599 => refusal(status, retry_after, refusal_5xx),
        _ => Classified::new(Observation::IoError, format!("HTTP {status}: outcome unknown")),
    }
}

/// How the detail of a send the egress guard refused begins (SPEC §16).
pub const EGRESS_REFUSED: &str = "egress guard";

/// A send refused before any request left, because the destination's address is one Herald does not
/// connect to (loopback, private, link-local, …; SPEC §16). `reason` names the kind of address, never
/// the address.
///
/// REJECTED, the observation for a permanent refusal: no connection was opened, so nothing may have been
/// accepted (not TIMEOUT or IO_ERROR: there is no uncertainty to park), and the same destination would be
/// refused again (not RETRYABLE_REJECT, which spends the budget on resends, each another lookup a
/// rebinding resolver could time). The task ends FAILED, and the user has to set a new destination.
#[must_use]
pub fn egress_refused(reason: &str) -> Classified {
    Classified::new(Observation::Rejected, format!("{EGRESS_REFUSED}: {reason}"))
}

/// Whether a classified answer says the destination is gone for good, whatever the kind: the detail the
/// store also reads to mark a preference gone (migration `0005`). Today only Web Push says so
/// ([`WEBPUSH_SUBSCRIPTION_EXPIRED`], on 404 or 410).
#[must_use]
pub fn destination_gone(classified: &Classified) -> bool {
    classified.observation == Observation::Rejected && classified.detail.starts_with(WEBPUSH_SUBSCRIPTION_EXPIRED)
}

/// The step of an SMTP transaction (RFC 5321 §3.3) at which a send stopped. Everything up to
/// [`SmtpStage::Data`] happens before any of the message was sent; [`SmtpStage::EndOfData`] is the wait for
/// the reply to the final `.` — the one moment at which the server may have taken responsibility without
/// the client learning it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpStage {
    /// TCP connect, implicit TLS, the greeting and EHLO.
    Connect,
    /// `STARTTLS` and the TLS handshake after it.
    StartTls,
    /// `AUTH`.
    Auth,
    /// `MAIL FROM`.
    Mail,
    /// `RCPT TO`.
    Rcpt,
    /// The `DATA` command, up to its `354`.
    Data,
    /// The message and its final `.` were being sent, or its reply awaited.
    EndOfData,
}

/// What an SMTP client saw at a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpEvent<'a> {
    /// A reply with this code; `text` is the reply's text (only a queue id is ever taken from it).
    Reply { code: u16, text: &'a str },
    /// No (complete) reply within the client timeout.
    TimedOut,
    /// The connection broke, or the reply could not be read.
    Broken,
}

/// Classifies how an SMTP send ended (RFC 5321 §4.2, §4.1.1.4, §6.1), one row per stage and reply class:
///
/// | stage | event | observation | why |
/// |---|---|---|---|
/// | connect, TLS, AUTH | any failure, any reply code | RETRYABLE_REJECT | no transaction was begun: nothing was sent |
/// | MAIL, RCPT, DATA | 4yz | RETRYABLE_REJECT | transient refusal before any of the message was sent |
/// | MAIL, RCPT, DATA | 5yz | REJECTED | permanent refusal |
/// | MAIL, RCPT, DATA | timeout, broken | RETRYABLE_REJECT | the final `.` was never sent, so no message can be delivered |
/// | end of DATA | 2yz | ACCEPTED (queue id from "queued as …" if given) | the server took responsibility |
/// | end of DATA | 4yz | RETRYABLE_REJECT | the server refused it and must not deliver |
/// | end of DATA | 5yz | REJECTED | permanent refusal |
/// | end of DATA | timeout | TIMEOUT | RFC 5321 §4.1.1.4: the server may have accepted; resending "would typically result in delivery of multiple copies" |
/// | end of DATA | broken, other codes | IO_ERROR | unknown, as above |
///
/// A stage before the end of DATA that reports a positive code (2yz, 3yz) ended the send without sending
/// the message: RETRYABLE_REJECT. The details are fixed words and the code, never the reply's text, which
/// may echo the address.
#[must_use]
pub fn classify_smtp(stage: SmtpStage, event: SmtpEvent<'_>) -> Classified {
    let retry = |detail: String| Classified::new(Observation::RetryableReject { retry_after: None }, detail);
    // Before MAIL no transaction was begun; from MAIL to DATA one was, but none of the message was sent.
    let (name, in_transaction) = match stage {
        SmtpStage::Connect => ("connect", false),
        SmtpStage::StartTls => ("STARTTLS", false),
        SmtpStage::Auth => ("AUTH", false),
        SmtpStage::Mail => ("MAIL", true),
        SmtpStage::Rcpt => ("RCPT", true),
        SmtpStage::Data => ("DATA", true),
        SmtpStage::EndOfData => return classify_end_of_data(event),
    };
    let before = if in_transaction { ", before the message" } else { "" };
    match event {
        SmtpEvent::Reply { code: code @ 500..=599, .. } if in_transaction => {
            Classified::new(Observation::Rejected, format!("refused: SMTP {code} at {name}"))
        }
        SmtpEvent::Reply { code, .. } => retry(format!("not sent: SMTP {code} at {name}")),
        SmtpEvent::TimedOut => retry(format!("not sent: timed out at {name}{before}")),
        SmtpEvent::Broken if in_transaction => retry(format!("not sent: connection broke at {name}{before}")),
        SmtpEvent::Broken => retry(format!("not sent: connection failed at {name}")),
    }
}

/// The rows of [`classify_smtp`] for the reply to the final `.`: the one stage at which the server may
/// have taken responsibility.
fn classify_end_of_data(event: SmtpEvent<'_>) -> Classified {
    match event {
        SmtpEvent::Reply { code: code @ 200..=299, text } => Classified::new(
            Observation::Accepted { provider_msg_id: queue_id(text) },
            format!("accepted: SMTP {code} at end of DATA"),
        ),
        SmtpEvent::Reply { code: code @ 400..=499, .. } => Classified::new(
            Observation::RetryableReject { retry_after: None },
            format!("refused before acceptance: SMTP {code} at end of DATA"),
        ),
        SmtpEvent::Reply { code: code @ 500..=599, .. } => {
            Classified::new(Observation::Rejected, format!("refused: SMTP {code} at end of DATA"))
        }
        SmtpEvent::Reply { code, .. } => {
            Classified::new(Observation::IoError, format!("SMTP {code} at end of DATA: outcome unknown"))
        }
        SmtpEvent::TimedOut => {
            Classified::new(Observation::Timeout, "timed out waiting for the reply to the end of DATA")
        }
        SmtpEvent::Broken => {
            Classified::new(Observation::IoError, "connection broke after the message was sent: outcome unknown")
        }
    }
}

/// The queue id of a "250 … queued as ID" reply (Postfix, Exim and others say it so): the token after
/// "queued as", letters, digits and `-._` only, at most 64 characters.
fn queue_id(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("queued as")? + "queued as".len();
    let id: String = text[at..]
        .trim_start_matches([' ', ':'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "-._".contains(*c))
        .take(64)
        .collect();
    let id = id.trim_end_matches('.').to_owned();
    (!id.is_empty()).then_some(id)
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
        const M: ChannelKind = ChannelKind::Miaotixing;
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
        const W: ChannelKind = ChannelKind::Webhook;
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

    #[track_caller]
    fn push(status: u16, expected: Outcome) {
        let got = classify_webpush(resp(status, ""), None, RefusalProof::BeforeAcceptance);
        assert_eq!(got.observation.outcome(), expected, "{status} -> {got:?}");
    }

    #[test]
    fn webpush_201_is_accepted_with_the_location_as_message_id() {
        let got = classify_webpush(resp(201, ""), Some("https://push.example/m/AbC-123"), RefusalProof::Unknown);
        assert_eq!(got.observation, Observation::Accepted { provider_msg_id: Some("AbC-123".into()) });
        let got = classify_webpush(resp(201, ""), None, RefusalProof::Unknown);
        assert_eq!(got.observation, Observation::Accepted { provider_msg_id: None });
    }

    #[test]
    fn webpush_other_2xx_is_unknown() {
        push(200, Outcome::IoError);
        push(202, Outcome::IoError);
    }

    #[test]
    fn webpush_404_and_410_reject_and_expire_the_subscription() {
        for status in [404, 410] {
            let got = classify_webpush(resp(status, ""), None, RefusalProof::BeforeAcceptance);
            assert_eq!(got.observation, Observation::Rejected);
            assert!(destination_gone(&got), "{got:?}");
        }
    }

    #[test]
    fn webpush_400_and_413_reject_without_expiring() {
        for status in [400, 413] {
            let got = classify_webpush(resp(status, ""), None, RefusalProof::BeforeAcceptance);
            assert_eq!(got.observation, Observation::Rejected);
            assert!(!destination_gone(&got));
        }
    }

    #[test]
    fn webpush_refused_vapid_is_rejected() {
        push(401, Outcome::Rejected);
        push(403, Outcome::Rejected);
    }

    #[test]
    fn webpush_429_is_refused_before_acceptance_with_its_retry_after() {
        let reply = Reply::Response { status: 429, body: "", retry_after: Some("30") };
        let got = classify_webpush(reply, None, RefusalProof::Unknown);
        assert_eq!(got.observation, Observation::RetryableReject { retry_after: Some(Millis(30_000)) });
    }

    #[test]
    fn webpush_5xx_follows_refusal_5xx() {
        push(503, Outcome::RetryableReject);
        let got = classify_webpush(resp(503, ""), None, RefusalProof::Unknown);
        assert_eq!(got.observation.outcome(), Outcome::IoError);
    }

    #[test]
    fn webpush_other_statuses_are_unknown() {
        push(302, Outcome::IoError);
        push(405, Outcome::IoError);
    }

    #[test]
    fn webpush_transport_rows() {
        let c = |reply| classify_webpush(reply, None, RefusalProof::BeforeAcceptance).observation.outcome();
        assert_eq!(c(Reply::NotSent), Outcome::RetryableReject);
        assert_eq!(c(Reply::TimedOut), Outcome::Timeout);
        assert_eq!(c(Reply::Broken), Outcome::IoError);
        assert_eq!(
            classify_send(ChannelKind::Webpush, RefusalProof::BeforeAcceptance, resp(410, "")).observation,
            Observation::Rejected
        );
    }

    #[track_caller]
    fn smtp(stage: SmtpStage, event: SmtpEvent<'_>, expected: Outcome) {
        let got = classify_smtp(stage, event);
        assert_eq!(got.observation.outcome(), expected, "{stage:?} {event:?} -> {got:?}");
    }

    fn code(code: u16) -> SmtpEvent<'static> {
        SmtpEvent::Reply { code, text: "" }
    }

    #[test]
    fn smtp_connect_tls_and_auth_failures_are_refusals_before_acceptance() {
        for stage in [SmtpStage::Connect, SmtpStage::StartTls, SmtpStage::Auth] {
            smtp(stage, SmtpEvent::Broken, Outcome::RetryableReject);
            smtp(stage, SmtpEvent::TimedOut, Outcome::RetryableReject);
            smtp(stage, code(421), Outcome::RetryableReject);
            smtp(stage, code(535), Outcome::RetryableReject);
            smtp(stage, code(554), Outcome::RetryableReject);
        }
    }

    #[test]
    fn smtp_4yz_before_the_end_of_data_is_retry_safe() {
        for stage in [SmtpStage::Mail, SmtpStage::Rcpt, SmtpStage::Data] {
            smtp(stage, code(421), Outcome::RetryableReject);
            smtp(stage, code(451), Outcome::RetryableReject);
        }
    }

    #[test]
    fn smtp_5yz_before_the_end_of_data_is_rejected() {
        for stage in [SmtpStage::Mail, SmtpStage::Rcpt, SmtpStage::Data] {
            smtp(stage, code(550), Outcome::Rejected);
            smtp(stage, code(554), Outcome::Rejected);
        }
    }

    #[test]
    fn smtp_no_answer_before_the_final_dot_is_not_accepted() {
        for stage in [SmtpStage::Mail, SmtpStage::Rcpt, SmtpStage::Data] {
            smtp(stage, SmtpEvent::TimedOut, Outcome::RetryableReject);
            smtp(stage, SmtpEvent::Broken, Outcome::RetryableReject);
        }
    }

    #[test]
    fn smtp_2yz_after_the_end_of_data_is_accepted_with_the_queue_id() {
        let got = classify_smtp(
            SmtpStage::EndOfData,
            SmtpEvent::Reply { code: 250, text: "2.0.0 Ok: queued as 4BnKx02Qz1z9" },
        );
        assert_eq!(got.observation, Observation::Accepted { provider_msg_id: Some("4BnKx02Qz1z9".into()) });
        let got = classify_smtp(SmtpStage::EndOfData, SmtpEvent::Reply { code: 250, text: "OK" });
        assert_eq!(got.observation, Observation::Accepted { provider_msg_id: None });
    }

    #[test]
    fn smtp_4yz_after_the_end_of_data_is_refused_before_acceptance() {
        smtp(SmtpStage::EndOfData, code(451), Outcome::RetryableReject);
        smtp(SmtpStage::EndOfData, code(421), Outcome::RetryableReject);
    }

    #[test]
    fn smtp_5yz_after_the_end_of_data_is_rejected() {
        smtp(SmtpStage::EndOfData, code(550), Outcome::Rejected);
        smtp(SmtpStage::EndOfData, code(554), Outcome::Rejected);
    }

    #[test]
    fn smtp_no_answer_after_the_final_dot_is_unknown() {
        smtp(SmtpStage::EndOfData, SmtpEvent::TimedOut, Outcome::Timeout);
        smtp(SmtpStage::EndOfData, SmtpEvent::Broken, Outcome::IoError);
        smtp(SmtpStage::EndOfData, code(354), Outcome::IoError);
    }

    #[test]
    fn smtp_details_never_copy_the_reply_text() {
        let got = classify_smtp(
            SmtpStage::Rcpt,
            SmtpEvent::Reply { code: 550, text: "5.1.1 <alice@example.org>: Recipient address rejected" },
        );
        assert!(!got.detail.contains("alice"), "{got:?}");
    }

    #[test]
    fn an_http_answer_on_an_smtp_channel_proves_nothing() {
        check(ChannelKind::Email, RefusalProof::BeforeAcceptance, resp(200, "{}"), Outcome::IoError);
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

    #[test]
    fn an_egress_refusal_is_a_permanent_rejection() {
        let got = egress_refused("the endpoint is a loopback address");
        assert_eq!(got.observation, Observation::Rejected);
        assert!(got.detail.starts_with(EGRESS_REFUSED), "{}", got.detail);
        // REJECTED on a task with no uncertain history is FAILED (`finish.rs`, row_rejected_…).
    }
}
