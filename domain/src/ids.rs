//! Identifiers and keys as newtypes, so a user id can never be passed where an event key is expected.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            #[must_use]
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }

            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }
    };
}

string_id!(
    /// The business service's id of a user. Every per-user row carries it (SPEC §1).
    UserId
);
string_id!(
    /// The business key of an event; `(user, event key)` is the logical dedup key.
    EventKey
);
string_id!(
    /// A configured channel name, such as `push`, `sms` or `miao`.
    ChannelName
);
string_id!(
    /// Groups notifications of one subject for digests (SPEC §7).
    ThreadKey
);

/// The longest user id accepted, in characters.
pub const MAX_USER_ID_CHARS: usize = 128;

/// The characters a user id may use besides ASCII letters and digits.
pub const USER_ID_PUNCTUATION: &str = "._-@:+";

/// The user-id rule as a regular expression (the API's documented `pattern`).
pub const USER_ID_PATTERN: &str = "^[A-Za-z0-9._@:+-]{1,128}$";

/// Why a text is not a user id. Its words never repeat the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UserIdProblem {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_USER_ID_CHARS} characters")]
    TooLong,
    /// The 1-based position of the first character outside the set.
    #[error("must use only ASCII letters, digits and . _ - @ : + (character {0} is not one of them)")]
    Character(usize),
}

/// Whether `text` is a user id: 1 to 128 characters, each an ASCII letter, a digit or one of `. _ - @ : +`.
///
/// A closed, printable set: no whitespace (at the ends or anywhere), no control, zero-width, bidi or other
/// invisible characters, no look-alikes from other scripts, and nothing that changes a URL path (`/`, `%`,
/// `?`, `#`) — a user id is a path segment of the API and appears in the console and the logs as it is.
/// E-mail addresses, UUIDs, numbers and `tenant:42`-style ids fit.
///
/// # Errors
/// The first problem found, in the order: empty, too long, a character outside the set.
pub fn check_user_id(text: &str) -> Result<(), UserIdProblem> {
    if text.is_empty() {
        return Err(UserIdProblem::Empty);
    }
    if let Some((at, _)) = text.chars().enumerate().find(|(_, c)| !user_id_char(*c)) {
        // A long text is judged by length first only when every character is allowed, so the answer
        // names the character that would still be wrong after shortening it.
        return Err(UserIdProblem::Character(at + 1));
    }
    if text.len() > MAX_USER_ID_CHARS {
        return Err(UserIdProblem::TooLong);
    }
    Ok(())
}

/// One character of the user-id set.
#[must_use]
pub fn user_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || USER_ID_PUNCTUATION.contains(c)
}

macro_rules! int_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

int_id!(
    /// A logical notification.
    NotificationId
);
int_id!(
    /// One delivery task: one (notification, channel).
    TaskId
);

/// The name a notification is known by outside Herald (API, console, CLI): a random UUID given at
/// creation, so that one caller's ids say nothing about anyone else's — no counting through them, no
/// guess of how many exist. The serial [`NotificationId`] stays inside (joins, task rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NotificationRef(pub uuid::Uuid);

/// The form of a [`NotificationRef`] in a path, a body or a cursor (the API's documented `pattern`).
pub const NOTIFICATION_REF_PATTERN: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

impl NotificationRef {
    /// The reference written as [`NOTIFICATION_REF_PATTERN`] says (lowercase, hyphenated), else `None`.
    #[must_use]
    pub fn parse(text: &str) -> Option<NotificationRef> {
        let canonical = text.len() == 36
            && text.bytes().enumerate().all(|(at, b)| match at {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            });
        if !canonical {
            return None;
        }
        uuid::Uuid::try_parse(text).ok().map(NotificationRef)
    }
}

impl fmt::Display for NotificationRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The token of the attempt that currently holds a task. Finishing is fenced by it (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptToken(pub uuid::Uuid);

impl fmt::Display for AttemptToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The idempotency key sent to channels that honour one. It is derived from the task's reference alone,
/// so it is identical across every attempt of the task — that is what lets the channel recognise a
/// resend. The reference is a random UUID given to the task at creation, unique beyond one database: a
/// key made of a task id could collide between installations sharing a channel, and the channel would
/// then answer a new notification with the replay of an old one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    #[must_use]
    pub fn for_task(reference: &str) -> Self {
        IdempotencyKey(format!("ntf-{reference}"))
    }

    /// The key of a settings-page test send: its own reference (`test-…`), which can never equal a
    /// task's `ntf-…` key, so a test prompt is never mistaken for a replay of a real one.
    #[must_use]
    pub fn for_test_send(reference: &str) -> Self {
        IdempotencyKey(reference.to_owned())
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_key_is_derived_from_the_task_only() {
        let reference = "0b5e2f6e-3c1d-4a8e-9f1a-2d7c4b9e8a01";
        assert_eq!(IdempotencyKey::for_task(reference).as_str(), format!("ntf-{reference}"));
        assert_eq!(IdempotencyKey::for_task(reference), IdempotencyKey::for_task(reference));
        assert_ne!(IdempotencyKey::for_task(reference), IdempotencyKey::for_task("another"));
    }

    #[test]
    fn a_notification_ref_is_read_only_in_its_documented_form() {
        let text = "0b5e2f6e-3c1d-4a8e-9f1a-2d7c4b9e8a01";
        let parsed = NotificationRef::parse(text).expect("canonical");
        assert_eq!(parsed.to_string(), text);
        for wrong in [
            "42",
            "",
            "0B5E2F6E-3C1D-4A8E-9F1A-2D7C4B9E8A01",
            "0b5e2f6e3c1d4a8e9f1a2d7c4b9e8a01",
            "{0b5e2f6e-3c1d-4a8e-9f1a-2d7c4b9e8a01}",
            "0b5e2f6e-3c1d-4a8e-9f1a-2d7c4b9e8a0g",
        ] {
            assert_eq!(NotificationRef::parse(wrong), None, "{wrong}");
        }
    }
}
