//! Status events (issue 46): the kinds of change a calling service is told about, in Herald's words, and
//! what the dispatcher does after posting one.

use serde::{Deserialize, Serialize};

use crate::retry::{Jitter, RetryPolicy};
use crate::time::{Millis, Timestamp};

/// One kind of status event. Never "delivered" for a channel's acceptance, never "failed" for an
/// outcome nobody knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StatusKind {
    /// The channel accepted the message (or a query found it): it is the channel's now.
    Accepted,
    /// The channel refused it, or every attempt the budget allowed was refused; nothing was accepted.
    Refused,
    /// A call's outcome is unknown and Herald stopped: a person must decide.
    Parked,
    /// A person resolved a parked delivery.
    Resolved,
    /// Herald called the channel again for this delivery (after a refusal, an unknown outcome or an
    /// operator's request), with the same idempotency key where the channel has one.
    SentAgain,
    /// Not sent because the user switched the channel off.
    Suppressed,
    /// Not sent because the notification expired first.
    Expired,
}

impl StatusKind {
    pub const ALL: [StatusKind; 7] = [
        StatusKind::Accepted,
        StatusKind::Refused,
        StatusKind::Parked,
        StatusKind::Resolved,
        StatusKind::SentAgain,
        StatusKind::Suppressed,
        StatusKind::Expired,
    ];

    /// The kind's name in the store and on the wire (`notification.` + this is the event `type`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::Accepted => "accepted",
            StatusKind::Refused => "refused",
            StatusKind::Parked => "parked",
            StatusKind::Resolved => "resolved",
            StatusKind::SentAgain => "sent_again",
            StatusKind::Suppressed => "suppressed",
            StatusKind::Expired => "expired",
        }
    }

    /// The kind named `name`, if any.
    #[must_use]
    pub fn parse(name: &str) -> Option<StatusKind> {
        StatusKind::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// What an endpoint's answer to one post was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostResult {
    /// 2xx: the endpoint has the event.
    Taken,
    /// Anything else (a status, a timeout, a refused connection, the egress guard): try again later;
    /// `retry_after` when the endpoint said when.
    NotTaken { retry_after: Option<Millis>, error: String },
}

/// What becomes of an event after a post.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum StatusNext {
    Delivered,
    RetryAt { due: Timestamp, error: String },
    Park { error: String },
}

/// After the `tries`-th post of an event (1 for the first) answered `result` at `now`: delivered, due
/// again after the policy's backoff (or the endpoint's `Retry-After`, if later, capped at the policy's
/// cap), or parked once `policy.max_attempts` posts were not taken.
pub fn after_post(result: PostResult, tries: u32, policy: &RetryPolicy, jitter: Jitter, now: Timestamp) -> StatusNext {
    match result {
        PostResult::Taken => StatusNext::Delivered,
        PostResult::NotTaken { error, .. } if tries >= policy.max_attempts => StatusNext::Park { error },
        PostResult::NotTaken { retry_after, error } => {
            let backoff = policy.backoff(tries, jitter);
            let wait = retry_after.map_or(backoff, |asked| Millis(asked.0.min(policy.cap.0).max(backoff.0)));
            StatusNext::RetryAt { due: now + wait, error }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::new(3, Millis(1000), Millis(60_000))
    }

    fn not_taken(retry_after: Option<Millis>) -> PostResult {
        PostResult::NotTaken { retry_after, error: "503".into() }
    }

    #[test]
    fn every_kind_has_one_name() {
        for kind in StatusKind::ALL {
            assert_eq!(StatusKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(StatusKind::parse("delivered"), None);
        assert_eq!(StatusKind::parse("failed"), None);
    }

    #[test]
    fn a_taken_post_is_delivered_whatever_the_tries() {
        assert_eq!(after_post(PostResult::Taken, 3, &policy(), Jitter::NONE, Timestamp(0)), StatusNext::Delivered);
    }

    #[test]
    fn a_refused_post_backs_off_then_parks_at_the_budget() {
        let now = Timestamp(10_000);
        assert_eq!(
            after_post(not_taken(None), 1, &policy(), Jitter::NONE, now),
            StatusNext::RetryAt { due: Timestamp(10_500), error: "503".into() }
        );
        assert_eq!(
            after_post(not_taken(None), 2, &policy(), Jitter::NONE, now),
            StatusNext::RetryAt { due: Timestamp(11_000), error: "503".into() }
        );
        assert_eq!(
            after_post(not_taken(None), 3, &policy(), Jitter::NONE, now),
            StatusNext::Park { error: "503".into() }
        );
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap_and_never_shortens_the_backoff() {
        let now = Timestamp(0);
        let due = |after| match after_post(not_taken(Some(Millis(after))), 1, &policy(), Jitter::NONE, now) {
            StatusNext::RetryAt { due, .. } => due,
            other => panic!("{other:?}"),
        };
        assert_eq!(due(5_000), Timestamp(5_000));
        assert_eq!(due(10), Timestamp(500));
        assert_eq!(due(10_000_000), Timestamp(60_000));
    }
}
