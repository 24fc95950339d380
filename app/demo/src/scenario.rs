//! What the demo submits: a table of scripted cases (what the stand-in does, what Herald must end with)
//! and the background traffic around them.
//!
//! Each case has a user of its own with one channel, so its one task and the stand-in's counters for it
//! can be checked without guessing. The wire reference of push and sms is the task id, known only after
//! the submit, so those steps are queued per task after submitting and before any worker runs;
//! Miaotixing has no reference on the wire and is scripted by the user's code instead, e-mail by the
//! user's address; Web Push is scripted by the message's `Topic` (derived from the reference).

use std::time::Duration;

use herald_standin::{Script, SmtpScript, SmtpStage, MIAO_BAD_PARAMS};

/// The client timeout of every demo channel; a stand-in delay of [`LATE`] makes it expire after the
/// stand-in has already accepted.
pub const TIMEOUT_MS: u64 = 300;
/// How long a "late" stand-in waits before answering.
pub const LATE: Duration = Duration::from_millis(1_000);
/// The client timeout of the e-mail and Web Push channels: an SMTP send is several round trips, and a
/// Web Push one is signed (VAPID) and encrypted, then verified and decrypted by the stand-in.
pub const SLOW_KIND_TIMEOUT_MS: u64 = 1_000;
/// How long a "late" e-mail or Web Push stand-in waits before answering.
pub const SLOW_KIND_LATE: Duration = Duration::from_millis(2_500);
/// Retry backoff base and cap of the demo channels: short, so the whole run takes seconds.
pub const RETRY_BASE_MS: u64 = 100;
pub const RETRY_CAP_MS: u64 = 800;
/// The Miaotixing egress interval of the demo (the real service wants 10 s).
pub const MIAO_INTERVAL_MS: u64 = 200;

/// The demo's five channels, one per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ch {
    /// `push`: webhook, idempotent.
    Push,
    /// `sms`: queryable.
    Sms,
    /// `miao`: Miaotixing, neither.
    Miao,
    /// `email`: SMTP, neither.
    Email,
    /// `webpush`: Web Push, neither.
    WebPush,
}

impl Ch {
    pub const ALL: [Ch; 5] = [Ch::Push, Ch::Sms, Ch::Miao, Ch::Email, Ch::WebPush];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Ch::Push => "push",
            Ch::Sms => "sms",
            Ch::Miao => "miao",
            Ch::Email => "email",
            Ch::WebPush => "webpush",
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

/// The steps of a case, in the language of its stand-in.
#[derive(Clone, Copy, Debug)]
pub enum Steps {
    /// The HTTP stand-ins and the Web Push service.
    Http(fn() -> Vec<Script>),
    /// The SMTP stand-in, one step per mail transaction.
    Smtp(fn() -> Vec<SmtpScript>),
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
    pub steps: Steps,
    pub max_attempts: Option<u32>,
    pub then: Then,
    pub end: End,
    /// The attempt outcomes, oldest first.
    pub outcomes: &'static [&'static str],
    /// Real sends the stand-in counts for this task: what the user would have seen.
    pub sends: u64,
    /// Web Push: the push service said the subscription is gone, so the user's channel must be switched
    /// off and marked "subscription expired".
    pub expires: bool,
    /// Why it ends so, in words.
    pub why: &'static str,
}

/// The scripted cases (SPEC §10's T1, T2, T3, B1, B3, F1 and the Miaotixing cases, on one run).
pub const CASES: &[Case] = &[
    Case {
        id: "push-late",
        channel: Ch::Push,
        scripted: "accepts, answers after the timeout",
        steps: Steps::Http(|| vec![Script::Delay(LATE)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["TIMEOUT", "ACCEPTED_REPLAY"],
        sends: 1,
        expires: false,
        why: "resent with the same idempotency key; the channel replayed, no second prompt",
    },
    Case {
        id: "sms-late",
        channel: Ch::Sms,
        scripted: "accepts, answers after the timeout",
        steps: Steps::Http(|| vec![Script::Delay(LATE)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["TIMEOUT", "QUERY_FOUND"],
        sends: 1,
        expires: false,
        why: "asked the gateway by reference instead of resending",
    },
    Case {
        id: "miao-late",
        channel: Ch::Miao,
        scripted: "accepts, answers after the timeout",
        steps: Steps::Http(|| vec![Script::Delay(LATE)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT"],
        sends: 1,
        expires: false,
        why: "no key, no query: only a human can tell; never resent automatically",
    },
    Case {
        id: "sms-late-query-down",
        channel: Ch::Sms,
        scripted: "accepts late, then both queries fail (503)",
        steps: Steps::Http(|| vec![Script::Delay(LATE), Script::QueryStatus(503), Script::QueryStatus(503)]),
        max_attempts: Some(3),
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT", "QUERY_FAILED", "QUERY_FAILED"],
        sends: 1,
        expires: false,
        why: "budget spent while still uncertain: parked, not resent",
    },
    Case {
        id: "push-late-then-503",
        channel: Ch::Push,
        scripted: "accepts late, then refuses (503), budget 2",
        steps: Steps::Http(|| vec![Script::Delay(LATE), Script::status(503)]),
        max_attempts: Some(2),
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT", "RETRYABLE_REJECT"],
        sends: 1,
        expires: false,
        why: "a refusal proves nothing about the earlier call: UNKNOWN, not FAILED",
    },
    Case {
        id: "push-503",
        channel: Ch::Push,
        scripted: "refuses (503) once, then accepts",
        steps: Steps::Http(|| vec![Script::status(503)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["RETRYABLE_REJECT", "ACCEPTED"],
        sends: 1,
        expires: false,
        why: "a 503 comes before acceptance on this channel: safe to retry",
    },
    Case {
        id: "miao-503",
        channel: Ch::Miao,
        scripted: "refuses (503) once, then accepts",
        steps: Steps::Http(|| vec![Script::status(503)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["RETRYABLE_REJECT", "ACCEPTED"],
        sends: 1,
        expires: false,
        why: "a provable refusal is retried even where nothing else is",
    },
    Case {
        id: "push-400",
        channel: Ch::Push,
        scripted: "rejects (400)",
        steps: Steps::Http(|| vec![Script::status(400)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Failed,
        outcomes: &["REJECTED"],
        sends: 0,
        expires: false,
        why: "a permanent refusal without uncertain history",
    },
    Case {
        id: "miao-bad-params",
        channel: Ch::Miao,
        scripted: "HTTP 200 with its refusal text 参数格式有误",
        steps: Steps::Http(|| vec![Script::text(200, MIAO_BAD_PARAMS)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Failed,
        outcomes: &["REJECTED"],
        sends: 0,
        expires: false,
        why: "classified by body, not by status code",
    },
    Case {
        id: "sms-switched-off",
        channel: Ch::Sms,
        scripted: "none; the user turns sms off before the claim",
        steps: Steps::Http(Vec::new),
        max_attempts: None,
        then: Then::SwitchOff,
        end: End::Suppressed,
        outcomes: &["PREF_DISABLED"],
        sends: 0,
        expires: false,
        why: "the switch is read at claim: no call",
    },
    Case {
        id: "email-accepted",
        channel: Ch::Email,
        scripted: "SMTP: 250 queued after the final \".\"",
        steps: Steps::Smtp(Vec::new),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["ACCEPTED"],
        sends: 1,
        expires: false,
        why: "a 2yz to the final \".\" makes the server responsible (RFC 5321); its queue id is kept",
    },
    Case {
        id: "email-451-at-rcpt",
        channel: Ch::Email,
        scripted: "SMTP: 451 to RCPT once, then accepts",
        steps: Steps::Smtp(|| vec![SmtpScript::Reply { at: SmtpStage::Rcpt, code: 451 }]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["RETRYABLE_REJECT", "ACCEPTED"],
        sends: 1,
        expires: false,
        why: "refused before the message was sent: safe to retry",
    },
    Case {
        id: "email-late",
        channel: Ch::Email,
        scripted: "SMTP: takes it, no reply to \".\" in time",
        steps: Steps::Smtp(|| vec![SmtpScript::Delay(SLOW_KIND_LATE)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT"],
        sends: 1,
        expires: false,
        why: "the server may have taken it (RFC 5321 §4.1.1.4): parked, never resent automatically",
    },
    Case {
        id: "webpush-accepted",
        channel: Ch::WebPush,
        scripted: "201 Created, VAPID verified, payload decrypted",
        steps: Steps::Http(Vec::new),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Sent,
        outcomes: &["ACCEPTED"],
        sends: 1,
        expires: false,
        why: "the push service checked the signature and read the encrypted payload",
    },
    Case {
        id: "webpush-gone",
        channel: Ch::WebPush,
        scripted: "410 Gone: the subscription expired",
        steps: Steps::Http(|| vec![Script::status(410)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Failed,
        outcomes: &["REJECTED"],
        sends: 0,
        expires: true,
        why: "the user's channel is switched off and shows \"subscription expired\"",
    },
    Case {
        id: "webpush-late",
        channel: Ch::WebPush,
        scripted: "accepts, answers after the timeout",
        steps: Steps::Http(|| vec![Script::Delay(SLOW_KIND_LATE)]),
        max_attempts: None,
        then: Then::Nothing,
        end: End::Parked,
        outcomes: &["TIMEOUT"],
        sends: 1,
        expires: false,
        why: "no key, no query (the same Topic only replaces a message still outstanding): parked",
    },
];

/// Background traffic: this many users, each with a push channel; every 2nd also sms, every 3rd also
/// e-mail, every 4th also Web Push, every 5th also Miaotixing; one order notification each.
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
    if i % 3 == 0 {
        channels.push(Ch::Email);
    }
    if i % 4 == 0 {
        channels.push(Ch::WebPush);
    }
    if i % 5 == 0 {
        channels.push(Ch::Miao);
    }
    channels
}

/// The user with no channel at all: the notification lives only in the in-app inbox.
pub const IN_APP_USER: &str = "user-in-app";

/// A fake destination. Miaotixing codes are 7 characters; push and sms are free-form; e-mail an address.
/// `None` for Web Push: a subscription is made by the push service when the user subscribes.
#[must_use]
pub fn destination(user: &str, channel: Ch) -> Option<String> {
    match channel {
        Ch::Push => Some(format!("device-token-{user}")),
        Ch::Sms => Some(format!("+86-{:011}", fnv(user) % 100_000_000_000)),
        Ch::Miao => Some(format!("t{:06}", fnv(user) % 1_000_000)),
        Ch::Email => Some(format!("{user}@mail.example.org")),
        Ch::WebPush => None,
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
        for ch in Ch::ALL.into_iter().filter(|ch| *ch != Ch::WebPush) {
            let mut all: Vec<String> = users.iter().filter_map(|u| destination(u, ch)).collect();
            all.push(LATE_MIAO_CODE.to_owned());
            let count = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), count, "{ch:?} destinations collide");
        }
        assert!(users.iter().all(|u| destination(u, Ch::Miao).is_some_and(|d| d.chars().count() == 7)));
        assert!(users.iter().all(|u| destination(u, Ch::WebPush).is_none()));
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
