//! Console sessions: whether a session still stands at `now`, and when its last use must be written.
//!
//! A session is server-side state (a row), found by the random id its cookie holds. It ends at the first
//! of: its holder signs out or ends it, its absolute end, an idle gap longer than the policy allows, the
//! end of the credential that opened it (a user token's own expiry), or that credential no longer being
//! accepted (an admin token removed from the configuration, a user-token key retired). The caller says
//! whether the credential is still accepted — that is configuration, not data — and this module decides.

use crate::time::{Millis, Timestamp};

/// How long sessions may live and idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionPolicy {
    /// From sign-in to the session's absolute end.
    pub lifetime: Millis,
    /// The longest gap between two requests of a session.
    pub idle: Millis,
}

impl SessionPolicy {
    /// Eight hours at most, one hour idle.
    pub const DEFAULT: SessionPolicy = SessionPolicy { lifetime: Millis(8 * 3600 * 1000), idle: Millis(3600 * 1000) };

    /// How stale the recorded last use may get before a request writes it again: a tenth of the idle
    /// timeout, at most a minute. A session is judged idle from that record, so it may end up to this much
    /// early; in exchange, a page view writes at most once a minute.
    #[must_use]
    pub fn touch_every(self) -> Millis {
        Millis((self.idle.0 / 10).min(60_000))
    }
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy::DEFAULT
    }
}

/// Why a session ended. Stored with the session; shown to its holder in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionEnd {
    /// Its holder signed out.
    SignedOut,
    /// Its holder (or the same person from another session) ended it from the list of their sessions.
    EndedByHolder,
    /// An operator ended it (`herald sessions end`).
    EndedByOperator,
    /// No request for longer than the idle timeout.
    Idle,
    /// Its absolute end passed.
    Expired,
    /// The token that opened it expired.
    CredentialExpired,
    /// The token that opened it is no longer accepted (removed from the configuration, its key retired).
    CredentialRevoked,
    /// The identity provider no longer lets its operator in (removed there, or left without a role that
    /// maps to one of Herald's), or OpenID Connect sign-in is no longer configured.
    ProviderWithdrew,
}

impl SessionEnd {
    pub const ALL: [SessionEnd; 8] = [
        SessionEnd::SignedOut,
        SessionEnd::EndedByHolder,
        SessionEnd::EndedByOperator,
        SessionEnd::Idle,
        SessionEnd::Expired,
        SessionEnd::CredentialExpired,
        SessionEnd::CredentialRevoked,
        SessionEnd::ProviderWithdrew,
    ];

    /// The stored code.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEnd::SignedOut => "signed_out",
            SessionEnd::EndedByHolder => "ended_by_holder",
            SessionEnd::EndedByOperator => "ended_by_operator",
            SessionEnd::Idle => "idle",
            SessionEnd::Expired => "expired",
            SessionEnd::CredentialExpired => "credential_expired",
            SessionEnd::CredentialRevoked => "credential_revoked",
            SessionEnd::ProviderWithdrew => "provider_withdrew",
        }
    }
}

crate::task::code!(SessionEnd, "session end");

/// The times of a session that decide whether it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTimes {
    pub last_seen_at: Timestamp,
    /// The absolute end.
    pub expires_at: Timestamp,
    /// The end of the credential that opened it, when it has one (a user token's expiry).
    pub credential_expires_at: Option<Timestamp>,
}

/// What a request of a session may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum SessionVerdict {
    /// The session stands; `touch`: write `now` as its last use.
    Live { touch: bool },
    /// The session is over: end it with this reason and sign the browser in again.
    Ended(SessionEnd),
}

/// Whether a session stands at `now`. `credential_accepted`: the configuration still accepts the
/// credential that opened it. Checked in this order: the credential (a removed token ends its sessions
/// whatever their times), its expiry, the session's absolute end, the idle gap.
pub fn judge_session(
    times: SessionTimes,
    credential_accepted: bool,
    policy: SessionPolicy,
    now: Timestamp,
) -> SessionVerdict {
    if !credential_accepted {
        return SessionVerdict::Ended(SessionEnd::CredentialRevoked);
    }
    if times.credential_expires_at.is_some_and(|end| end <= now) {
        return SessionVerdict::Ended(SessionEnd::CredentialExpired);
    }
    if times.expires_at <= now {
        return SessionVerdict::Ended(SessionEnd::Expired);
    }
    let idle_for = now.since(times.last_seen_at);
    if idle_for >= policy.idle {
        return SessionVerdict::Ended(SessionEnd::Idle);
    }
    SessionVerdict::Live { touch: idle_for >= policy.touch_every() }
}

/// The absolute end of a session opened at `now`: the policy's lifetime, never past the end of the
/// credential that opened it.
#[must_use]
pub fn session_end(policy: SessionPolicy, now: Timestamp, credential_expires_at: Option<Timestamp>) -> Timestamp {
    let end = now + policy.lifetime;
    credential_expires_at.map_or(end, |credential| credential.min(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn policy() -> SessionPolicy {
        SessionPolicy { lifetime: Millis(480 * MIN), idle: Millis(30 * MIN) }
    }

    fn times(last_seen: i64, expires: i64, credential: Option<i64>) -> SessionTimes {
        SessionTimes {
            last_seen_at: Timestamp(last_seen),
            expires_at: Timestamp(expires),
            credential_expires_at: credential.map(Timestamp),
        }
    }

    #[test]
    fn a_session_stands_until_the_first_of_its_ends() {
        let t = times(0, 480 * 60_000, Some(100 * 60_000));
        assert_eq!(judge_session(t, true, policy(), Timestamp(1)), SessionVerdict::Live { touch: false });
        assert_eq!(
            judge_session(t, false, policy(), Timestamp(1)),
            SessionVerdict::Ended(SessionEnd::CredentialRevoked)
        );
        assert_eq!(
            judge_session(
                times(99 * 60_000, 480 * 60_000, Some(100 * 60_000)),
                true,
                policy(),
                Timestamp(100 * 60_000)
            ),
            SessionVerdict::Ended(SessionEnd::CredentialExpired)
        );
        assert_eq!(
            judge_session(times(479 * 60_000, 480 * 60_000, None), true, policy(), Timestamp(480 * 60_000)),
            SessionVerdict::Ended(SessionEnd::Expired)
        );
        assert_eq!(
            judge_session(times(0, 480 * 60_000, None), true, policy(), Timestamp(30 * 60_000)),
            SessionVerdict::Ended(SessionEnd::Idle)
        );
        assert_eq!(
            judge_session(times(0, 480 * 60_000, None), true, policy(), Timestamp(30 * 60_000 - 1)),
            SessionVerdict::Live { touch: true }
        );
    }

    #[test]
    fn the_last_use_is_written_at_most_once_a_minute() {
        assert_eq!(policy().touch_every(), Millis(MIN));
        let short = SessionPolicy { lifetime: Millis(10 * MIN), idle: Millis(2 * MIN) };
        assert_eq!(short.touch_every(), Millis(12_000), "a tenth of a short idle timeout");
        let t = times(0, 480 * 60_000, None);
        assert_eq!(judge_session(t, true, policy(), Timestamp(59_999)), SessionVerdict::Live { touch: false });
        assert_eq!(judge_session(t, true, policy(), Timestamp(60_000)), SessionVerdict::Live { touch: true });
    }

    #[test]
    fn a_session_never_outlives_the_token_that_opened_it() {
        assert_eq!(session_end(policy(), Timestamp(0), None), Timestamp(480 * 60_000));
        assert_eq!(session_end(policy(), Timestamp(0), Some(Timestamp(3_000))), Timestamp(3_000));
    }

    #[test]
    fn end_codes_round_trip() {
        for end in SessionEnd::ALL {
            assert_eq!(end.as_str().parse::<SessionEnd>(), Ok(end));
        }
        assert!("nope".parse::<SessionEnd>().is_err());
    }
}
