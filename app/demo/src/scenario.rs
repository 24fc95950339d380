//! What the demo submits: a table of scripted cases (what the stand-in does, what Herald must end with)
//! and the background traffic around them.
//!
//! Each case has a user of its own with one channel, so its one task and the stand-in's counters for it
//! can be checked without guessing. The wire reference of push and sms is the task id, known only after
//! the submit, so those steps are queued per task after submitting and before any worker runs;
//! Miaotixing has no reference on the wire and is scripted by the user's code instead.

use std::time::Duration;

use herald_standin::{Script, MIAO_BAD_PARAMS};

/// The client timeout of every demo channel; a stand-in delay of [`LATE`] makes it expire after the
/// stand-in has already accepted.
pub const TIMEOUT_MS: u64 = 300;
/// How long a "late" stand-in waits before answering.
pub const LATE: Duration = Duration::from_millis(1_000);
/// Retry backoff base and cap of the demo channels: short, so the whole run takes seconds.
pub const RETRY_BASE_MS: u64 = 100;
pub const RETRY_CAP_MS: u64 = 800;
/// The Miaotixing egress interval of the demo (the real service wants 10 s).
pub const MIAO_INTERVAL_MS: u64 = 200;

/// The demo's three channels, one per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ch {
    /// `push`: webhook, idempotent.
    Push,
    /// `sms`: queryable.
    Sms,
    /// `miao`: Miaotixing, neither.
    Miao,
}

impl Ch {
    pub const ALL: [Ch; 3] = [Ch::Push, Ch::Sms, Ch::Miao];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Ch::Push => "push",
            Ch::Sms => "sms",
            Ch::Miao => "miao",
        }
    }

    #[must_use]
    pub fn from_name(name: &str) -> Option<Ch> {
        Ch::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// How a task must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Sent,
    /// UNKNOWN, needs review, never picked again.
    Parked,
    Failed,
    Suppressed,
}

impl End {
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            End::Sent => "SENT",
            End::Parked => "UNKNOWN, parked",
            End::Failed => "FAILED",
            End::Suppressed => "SUPPRESSED",
        }
    }
}

/// Something done through the API after the submit and before the workers start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// The user switches the channel off (`PUT …/channels/{c}` with `enabled: false`).
    SwitchOff,
}

/// One scripted case.
#[derive(Debug)]
pub struct Case {
    /// Also the user id suffix (`case-{id}`) and the event key.
    pub id: &'static str,
    pub channel: Ch,
    /// What the stand-in is scripted to do, in words.
    pub scripted: &'static str,
    /// The steps, consumed by this task's requests in order (then normal behaviour).
    pub steps: fn() -> Vec<Script>,
    pub max_attempts: Option<u32>,
    pub then: Then,
    pub end: End,
    /// The attempt outcomes, oldest first.
    pub outcomes: &'static [&'static str],
    /// Real sends the stand-in counts for this task: what the user would have seen.
    pub sends: u64,
    /// Why it ends so, in words.
    pub why: &'static str,
}

/// The scripted cases (SPEC §10's T1, T2, T3, B1, B3, F1 and the Miaotixing cases, on one run).
pub const CASES: &[Case] = &[
    Case {
        id: "push-late",
        channel: Ch::Push,
        scripted: "accepts, answers after the timeout",
        steps: || vec![Script::Delay(LATE)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["TIMEOUT", "ACCEPTED_REPLAY"],
        sends: 1,
        why: "resent with the same idempotency key; the channel replayed, no second prompt",
    },
    Case {
        id: "sms-late",
        channel: Ch::Sms,
        scripted: "accepts, answers after the timeout",
        steps: || vec![Script::Delay(LATE)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["TIMEOUT", "QUERY_FOUND"],
        sends: 1,
        why: "asked the gateway by reference instead of resending",
    },
    Case {
        id: "miao-late",
        channel: Ch::Miao,
        scripted: "accepts, answers after the timeout",
        steps: || vec![Script::Delay(LATE)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT"],
        sends: 1,
        why: "no key, no query: only a human can tell; never resent automatically",
    },
    Case {
        id: "sms-late-query-down",
        channel: Ch::Sms,
        scripted: "accepts late, then both queries fail (503)",
        steps: || vec![Script::Delay(LATE), Script::QueryStatus(503), Script::QueryStatus(503)],
        max_attempts: Some(3),
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT", "QUERY_FAILED", "QUERY_FAILED"],
        sends: 1,
        why: "budget spent while still uncertain: parked, not resent",
    },
    Case {
        id: "push-late-then-503",
        channel: Ch::Push,
        scripted: "accepts late, then refuses (503), budget 2",
        steps: || vec![Script::Delay(LATE), Script::status(503)],
        max_attempts: Some(2),
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT", "RETRYABLE_REJECT"],
        sends: 1,
        why: "a refusal proves nothing about the earlier call: UNKNOWN, not FAILED",
    },
    Case {
        id: "push-503",
        channel: Ch::Push,
        scripted: "refuses (503) once, then accepts",
        steps: || vec![Script::status(503)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["RETRYABLE_REJECT", "ACCEPTED"],
        sends: 1,
        why: "a 503 comes before acceptance on this channel: safe to retry",
    },
    Case {
        id: "miao-503",
        channel: Ch::Miao,
        scripted: "refuses (503) once, then accepts",
        steps: || vec![Script::status(503)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["RETRYABLE_REJECT", "ACCEPTED"],
        sends: 1,
        why: "a provable refusal is retried even where nothing else is",
    },
    Case {
        id: "push-400",
        channel: Ch::Push,
        scripted: "rejects (400)",
        steps: || vec![Script::status(400)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Failed,
        outcomes: &["REJECTED"],
        sends: 0,
        why: "a permanent refusal without uncertain history",
    },
    Case {
        id: "miao-bad-params",
        channel: Ch::Miao,
        scripted: "HTTP 200 with its refusal text 参数格式有误",
        steps: || vec![Script::text(200, MIAO_BAD_PARAMS)],
        max_attempts: None,
        then: Then::Nothing,
        end: End::Failed,
        outcomes: &["REJECTED"],
        sends: 0,
        why: "classified by body, not by status code",
    },
    Case {
        id: "sms-switched-off",
        channel: Ch::Sms,
        scripted: "none; the user turns sms off before the claim",
        steps: Vec::new,
        max_attempts: None,
        then: Then::SwitchOff,
        end: End::Suppressed,
        outcomes: &["PREF_DISABLED"],
        sends: 0,
        why: "the switch is read at claim: no call",
    },
];

/// Background traffic: this many users, each with a push channel; every 2nd also sms, every 5th also
/// Miaotixing; one order notification each.
pub const USERS: usize = 50;
/// The first users submit their order notification a second time (a retried HTTP call).
pub const DUPLICATES: usize = 5;
/// One `/v1/events` submission fanned out to the first this many users, then submitted again.
pub const FAN_OUT: usize = 20;

/// The user id of background user `i` (1-based).
#[must_use]
pub fn user(i: usize) -> String {
    format!("user-{i:02}")
}

/// The channels of background user `i`.
#[must_use]
pub fn channels_of(i: usize) -> Vec<Ch> {
    let mut channels = vec![Ch::Push];
    if i % 2 == 0 {
        channels.push(Ch::Sms);
    }
    if i % 5 == 0 {
        channels.push(Ch::Miao);
    }
    channels
}

/// The user with no channel at all: the notification lives only in the in-app inbox.
pub const IN_APP_USER: &str = "user-in-app";

/// A fake destination. Miaotixing codes are 7 characters; push and sms are free-form.
#[must_use]
pub fn destination(user: &str, channel: Ch) -> String {
    match channel {
        Ch::Push => format!("device-token-{user}"),
        Ch::Sms => format!("+86-{:011}", fnv(user) % 100_000_000_000),
        Ch::Miao => format!("t{:06}", fnv(user) % 1_000_000),
    }
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The Miaotixing code that the demo's stand-in answers too late, always: the README's walkthrough
/// (`herald serve --config example.toml` against the demo's stand-ins) uses it to make a parked task.
pub const LATE_MIAO_CODE: &str = "late000";
/// How late: beyond `example.toml`'s Miaotixing `timeout_ms` (2000).
pub const LATE_MIAO_DELAY: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_distinct_per_user_and_miao_codes_have_seven_characters() {
        let mut users: Vec<String> = (1..=USERS).map(user).collect();
        users.extend(CASES.iter().map(|c| format!("case-{}", c.id)));
        for ch in Ch::ALL {
            let mut all: Vec<String> = users.iter().map(|u| destination(u, ch)).collect();
            all.push(LATE_MIAO_CODE.to_owned());
            let count = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), count, "{ch:?} destinations collide");
        }
        assert!(users.iter().all(|u| destination(u, Ch::Miao).chars().count() == 7));
    }

    #[test]
    fn every_case_expects_as_many_outcomes_as_its_script_implies() {
        for case in CASES {
            assert!(!case.outcomes.is_empty(), "{}", case.id);
            assert!(case.sends <= 1, "{}: the demo's point is at most one real send per task", case.id);
            if let Some(budget) = case.max_attempts {
                assert!(case.outcomes.len() <= budget as usize, "{}", case.id);
            }
        }
    }
}
