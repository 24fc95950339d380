//! Console sessions over generated histories of requests: a session stands only while every one of its ends
//! lies ahead, the first end to pass is the one reported, and a session never outlives the credential that
//! opened it nor its policy's lifetime.

use herald_domain::{
    judge_session, session_end, Millis, SessionEnd, SessionPolicy, SessionTimes, SessionVerdict, Timestamp,
};
use proptest::prelude::*;

fn policy() -> impl Strategy<Value = SessionPolicy> {
    (1u64..=48, 1u64..=180)
        .prop_map(|(hours, idle)| SessionPolicy { lifetime: Millis(hours * 3_600_000), idle: Millis(idle * 60_000) })
}

proptest! {
    /// Requests at random gaps from sign-in: the verdict of each is the one the times imply, the last use
    /// is written whenever the record is staler than `touch_every`, and once ended a session stays ended.
    #[test]
    fn a_session_stands_exactly_while_each_of_its_ends_lies_ahead(
        policy in policy(),
        credential in proptest::option::of(1i64..=100 * 3_600_000),
        gaps in proptest::collection::vec(0u64..=4 * 3_600_000, 1..40),
        accepted in proptest::collection::vec(prop::bool::weighted(0.97), 40),
    ) {
        let opened = Timestamp(1_767_225_600_000);
        let credential = credential.map(|ms| Timestamp(opened.0 + ms));
        let expires_at = session_end(policy, opened, credential);
        prop_assert!(expires_at <= opened + policy.lifetime);
        prop_assert!(credential.is_none_or(|c| expires_at <= c));
        let mut last_seen = opened;
        let mut now = opened;
        for (gap, accepted) in gaps.iter().zip(&accepted) {
            now = now + Millis(*gap);
            let times = SessionTimes { last_seen_at: last_seen, expires_at, credential_expires_at: credential };
            let verdict = judge_session(times, *accepted, policy, now);
            let expected = if !accepted {
                SessionVerdict::Ended(SessionEnd::CredentialRevoked)
            } else if credential.is_some_and(|c| c <= now) {
                SessionVerdict::Ended(SessionEnd::CredentialExpired)
            } else if expires_at <= now {
                SessionVerdict::Ended(SessionEnd::Expired)
            } else if now.since(last_seen) >= policy.idle {
                SessionVerdict::Ended(SessionEnd::Idle)
            } else {
                SessionVerdict::Live { touch: now.since(last_seen) >= policy.touch_every() }
            };
            prop_assert_eq!(verdict, expected);
            match verdict {
                SessionVerdict::Live { touch: true } => last_seen = now,
                SessionVerdict::Live { touch: false } => {}
                SessionVerdict::Ended(_) => break,
            }
            // What is recorded lags the real last request by less than `touch_every`, never more.
            prop_assert!(now.since(last_seen) < policy.touch_every());
        }
    }
}
