//! Attempt budget and retry backoff: exponential, capped, with jitter from an injected source.

use serde::{Deserialize, Serialize};

use crate::time::{Millis, Timestamp};

/// A random fraction in `[0, 1)`, supplied by the caller so the domain stays deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Jitter(f64);

impl Jitter {
    /// No randomness: always the lower half of the backoff range. Useful in tests.
    pub const NONE: Jitter = Jitter(0.0);

    /// Clamps `fraction` into `[0, 1)`; NaN counts as zero.
    #[must_use]
    pub fn new(fraction: f64) -> Self {
        if fraction.is_nan() {
            Jitter(0.0)
        } else {
            Jitter(fraction.clamp(0.0, 0.999_999))
        }
    }

    /// From any 64 random bits.
    #[must_use]
    pub fn from_bits(bits: u64) -> Self {
        // 53 bits fit an f64 mantissa exactly, so the cast is lossless and the result is below 1.
        #[allow(clippy::cast_precision_loss)]
        let fraction = (bits >> 11) as f64 / (1u64 << 53) as f64;
        Jitter::new(fraction)
    }

    #[must_use]
    pub fn fraction(self) -> f64 {
        self.0
    }
}

/// How many attempts a task gets and how long it waits between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts that may call the channel (SEND or QUERY), including the first.
    pub max_attempts: u32,
    /// Delay before the first retry; doubled on each further retry.
    pub base: Millis,
    /// No delay is longer than this.
    pub cap: Millis,
}

impl RetryPolicy {
    #[must_use]
    pub fn new(max_attempts: u32, base: Millis, cap: Millis) -> Self {
        RetryPolicy { max_attempts, base, cap }
    }

    /// The delay after `attempts_used` attempts (1 after the first attempt).
    ///
    /// "Equal jitter": half of the exponential step is fixed and half is random, so retries spread out
    /// without ever collapsing to zero delay. The result lies in `[step / 2, step]`, `step ≤ cap`.
    #[must_use]
    pub fn backoff(&self, attempts_used: u32, jitter: Jitter) -> Millis {
        let exponent = attempts_used.saturating_sub(1).min(32);
        let step = self.base.0.saturating_mul(1u64 << exponent).min(self.cap.0);
        let half = step / 2;
        // `fraction < 1`, so the random part stays below `step - half`.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        let random = ((step - half) as f64 * jitter.fraction()) as u64;
        Millis(half + random)
    }

    /// When the next attempt is due after `attempts_used` attempts, finishing at `now`.
    #[must_use]
    pub fn next_at(&self, now: Timestamp, attempts_used: u32, jitter: Jitter) -> Timestamp {
        now + self.backoff(attempts_used, jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy::new(10, Millis(100), Millis(1_000));
        let top = Jitter::new(0.999_999);
        assert_eq!(policy.backoff(1, Jitter::NONE), Millis(50));
        assert_eq!(policy.backoff(2, Jitter::NONE), Millis(100));
        assert!(policy.backoff(2, top) <= Millis(200));
        assert_eq!(policy.backoff(30, Jitter::NONE), Millis(500));
        assert!(policy.backoff(u32::MAX, top) <= Millis(1_000));
    }

    #[test]
    fn jitter_from_bits_is_below_one() {
        assert!(Jitter::from_bits(u64::MAX).fraction() < 1.0);
        assert!(Jitter::from_bits(0).fraction().abs() < f64::EPSILON);
    }
}
