//! Idempotent submission (SPEC §3, §11): a repeated `(user_id, event_key)` is the same notification only
//! if it says the same thing. A service that retries a call whose answer it lost sends the same body,
//! lifetime and thread, and gets the existing notification back; a *different* submission under a key
//! already used is a mistake the caller must hear about (409), not a silent "already there" that drops
//! its new content — the behaviour of mature idempotent APIs.

use crate::time::Millis;

/// What a submission asked for, as far as the repeat rule compares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submission<'a> {
    pub body: &'a str,
    /// The lifetime asked for (`ttl_seconds`).
    pub ttl: Millis,
    pub thread_key: Option<&'a str>,
    pub max_attempts: Option<u32>,
}

/// The fields in which `repeat` differs from the submission stored `before`, by their API names; empty
/// when it is a true repeat.
#[must_use]
pub fn differences(before: &Submission<'_>, repeat: &Submission<'_>) -> Vec<&'static str> {
    let mut fields = Vec::new();
    if before.body != repeat.body {
        fields.push("body");
    }
    if before.ttl != repeat.ttl {
        fields.push("ttl_seconds");
    }
    if before.thread_key != repeat.thread_key {
        fields.push("thread_key");
    }
    if before.max_attempts != repeat.max_attempts {
        fields.push("max_attempts");
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Submission<'static> =
        Submission { body: "Your order has shipped", ttl: Millis(3_600_000), thread_key: None, max_attempts: None };

    #[test]
    fn an_identical_repeat_differs_in_nothing() {
        assert!(differences(&FIRST, &FIRST.clone()).is_empty());
    }

    #[test]
    fn every_changed_field_is_named() {
        let changed = Submission {
            body: "Your order was cancelled",
            ttl: Millis(60_000),
            thread_key: Some("o-1"),
            max_attempts: Some(2),
        };
        assert_eq!(differences(&FIRST, &changed), ["body", "ttl_seconds", "thread_key", "max_attempts"]);
        assert_eq!(differences(&FIRST, &Submission { body: "x", ..FIRST }), ["body"]);
    }
}
