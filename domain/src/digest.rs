//! Digests (SPEC §7): per (user, thread, channel), at most `instant_per_window` instant external prompts
//! in any rolling window; beyond that, events join one digest sent at the end of the window. No event
//! is dropped — every one keeps its inbox item; only the external prompts are merged.

use serde::{Deserialize, Serialize};

use crate::ids::TaskId;
use crate::time::{Millis, Timestamp};

/// The rate rule of one channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestRule {
    pub instant_per_window: u32,
    pub window: Millis,
}

impl DigestRule {
    /// The reference rule: three instant prompts per rolling hour.
    #[must_use]
    pub fn per_hour(instant: u32) -> Self {
        DigestRule { instant_per_window: instant, window: Millis::from_secs(3_600) }
    }
}

/// A digest task that has not been sent yet and still takes members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenDigest {
    pub task: TaskId,
    pub due_at: Timestamp,
}

#[must_use = "a digest decision does nothing until it is stored"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestDecision {
    /// Prompt at once with an ordinary task.
    SendNow,
    /// Create a digest task due at `due_at`, counting this event.
    Open { due_at: Timestamp },
    /// Add this event to the open digest's count; no task of its own.
    Join { task: TaskId },
}

/// Decides how the event arriving at `now` is prompted. `instant_prompts` are the times of the other
/// instant prompts for the same (user, thread, channel); those after the window's start count — also
/// those *later* than `now`: events read their time before they take the decision's lock, so one that
/// read an earlier time may decide after one that read a later time, and must still count it.
pub fn decide_digest(
    rule: DigestRule,
    instant_prompts: &[Timestamp],
    open: Option<OpenDigest>,
    now: Timestamp,
) -> DigestDecision {
    let window_start = now - rule.window;
    let mut recent = instant_prompts.iter().copied().filter(|&t| t > window_start);
    let count = recent.clone().count();
    if count < rule.instant_per_window as usize {
        return DigestDecision::SendNow;
    }
    match open {
        Some(digest) if digest.due_at > now => DigestDecision::Join { task: digest.task },
        _ => {
            // The window ends when the oldest prompt in it leaves: from then on, a prompt is allowed.
            let oldest = recent.by_ref().min().unwrap_or(now);
            DigestDecision::Open { due_at: oldest + rule.window }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_example_three_instant_then_digest_then_join() {
        let rule = DigestRule::per_hour(3);
        let s = |secs: i64| Timestamp(secs * 1_000);
        let mut instant = Vec::new();
        for at in [0, 10, 20] {
            assert_eq!(decide_digest(rule, &instant, None, s(at)), DigestDecision::SendNow);
            instant.push(s(at));
        }
        let opened = decide_digest(rule, &instant, None, s(30));
        assert_eq!(opened, DigestDecision::Open { due_at: s(3_600) });
        let open = OpenDigest { task: TaskId(9), due_at: s(3_600) };
        assert_eq!(decide_digest(rule, &instant, Some(open), s(40)), DigestDecision::Join { task: TaskId(9) });
        // After the window has passed, prompts are instant again.
        assert_eq!(decide_digest(rule, &instant, Some(open), s(3_601)), DigestDecision::SendNow);
    }

    // Defect: concurrent creates read their time before the lock, so a prompt recorded by an event that
    // decided first can carry a later time than the event deciding now; it counts all the same.
    #[test]
    fn prompts_recorded_with_a_later_time_count_too() {
        let rule = DigestRule::per_hour(3);
        let s = |secs: i64| Timestamp(secs * 1_000);
        let instant = [s(10), s(9), s(8)];
        assert_eq!(decide_digest(rule, &instant, None, s(7)), DigestDecision::Open { due_at: s(3_608) });
    }
}
