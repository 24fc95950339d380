//! The test-send quota (SPEC §9): how often one user may press "test" for one channel. A test prompt
//! reaches a real person through a real third party; unbounded presses would let one account spam a
//! destination (and spend a rate-limited channel's calls). The store keeps the presses of the last day
//! per (user, channel) and asks this decision under a lock of that pair.

use crate::time::{Millis, Timestamp};

/// One minute, the short window.
pub const MINUTE: Millis = Millis(60_000);
/// One day, the long window (and how long a press is remembered).
pub const DAY: Millis = Millis(86_400_000);

/// Test sends allowed per (user, channel): at most `per_minute` in any 60 s and `per_day` in any 24 h.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestSendQuota {
    pub per_minute: u32,
    pub per_day: u32,
}

impl Default for TestSendQuota {
    /// One a minute, ten a day.
    fn default() -> Self {
        TestSendQuota { per_minute: 1, per_day: 10 }
    }
}

/// Whether one more test send may go at `now`, given the earlier ones of the last day (`earlier`, any
/// order; older ones are ignored).
///
/// # Errors
/// How long until it may (at least 1 ms): until enough earlier sends have left each full window.
pub fn decide_test_send(earlier: &[Timestamp], now: Timestamp, quota: TestSendQuota) -> Result<(), Millis> {
    let mut wait = Millis::ZERO;
    for (window, limit) in [(MINUTE, quota.per_minute), (DAY, quota.per_day)] {
        let start = now.as_millis() - i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let mut inside: Vec<i64> = earlier.iter().map(|t| t.as_millis()).filter(|&t| t > start).collect();
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        if inside.len() < limit {
            continue;
        }
        inside.sort_unstable();
        // The send that must leave the window for the count to drop below the limit.
        let leaving = inside[inside.len() - limit.max(1)];
        let until = leaving + i64::try_from(window.as_millis()).unwrap_or(i64::MAX) - now.as_millis();
        wait = wait.max(Millis(u64::try_from(until).unwrap_or(0).max(1)));
    }
    if wait == Millis::ZERO {
        Ok(())
    } else {
        Err(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: TestSendQuota = TestSendQuota { per_minute: 1, per_day: 10 };

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn the_first_send_goes() {
        assert_eq!(decide_test_send(&[], t(1_000_000), Q), Ok(()));
    }

    #[test]
    fn a_second_within_a_minute_waits_for_the_first_to_leave_it() {
        let now = t(10_000_000);
        assert_eq!(decide_test_send(&[t(10_000_000 - 20_000)], now, Q), Err(Millis(40_000)));
        assert_eq!(decide_test_send(&[t(10_000_000 - 60_000)], now, Q), Ok(()), "exactly a minute ago has left");
    }

    #[test]
    fn the_eleventh_in_a_day_waits_for_the_oldest_of_the_ten() {
        let hour = 3_600_000;
        let now = 100 * hour;
        let ten: Vec<Timestamp> = (1..=10).map(|h| t(now - h * hour)).collect();
        // The oldest was 10 h ago: it leaves the day in 14 h.
        assert_eq!(decide_test_send(&ten, t(now), Q), Err(Millis(14 * 3_600_000)));
        assert_eq!(decide_test_send(&ten[..9], t(now), Q), Ok(()));
        // Sends older than a day do not count.
        let old: Vec<Timestamp> = (25..=40).map(|h| t(now - h * hour)).collect();
        assert_eq!(decide_test_send(&old, t(now), Q), Ok(()));
    }

    #[test]
    fn the_longer_wait_of_the_two_windows_is_answered() {
        let q = TestSendQuota { per_minute: 2, per_day: 2 };
        let now = 1_000_000_000;
        let earlier = [t(now - 50_000), t(now - 10_000)];
        // Minute: the older leaves in 10 s; day: the older leaves in 24 h − 50 s.
        assert_eq!(decide_test_send(&earlier, t(now), q), Err(Millis(86_400_000 - 50_000)));
    }
}
