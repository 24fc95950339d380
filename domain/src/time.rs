//! Time as plain numbers: milliseconds since the Unix epoch, and durations in milliseconds.
//!
//! The domain never asks what time it is; callers pass `now`. Millisecond resolution matches what the
//! database stores and is plenty for leases, backoffs and rate windows.

use std::fmt;
use std::ops::{Add, Sub};

use serde::{Deserialize, Serialize};

/// An instant, in milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(pub i64);

/// A non-negative span of time in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Millis(pub u64);

impl Timestamp {
    pub const EPOCH: Timestamp = Timestamp(0);

    #[must_use]
    pub fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    #[must_use]
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero when `earlier` is not earlier.
    #[must_use]
    pub fn since(self, earlier: Timestamp) -> Millis {
        Millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl Millis {
    pub const ZERO: Millis = Millis(0);

    #[must_use]
    pub fn from_secs(s: u64) -> Self {
        Millis(s.saturating_mul(1000))
    }

    #[must_use]
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

impl Add<Millis> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Millis) -> Timestamp {
        Timestamp(self.0.saturating_add(i64::try_from(rhs.0).unwrap_or(i64::MAX)))
    }
}

impl Sub<Millis> for Timestamp {
    type Output = Timestamp;
    fn sub(self, rhs: Millis) -> Timestamp {
        Timestamp(self.0.saturating_sub(i64::try_from(rhs.0).unwrap_or(i64::MAX)))
    }
}

impl Add for Millis {
    type Output = Millis;
    fn add(self, rhs: Millis) -> Millis {
        Millis(self.0.saturating_add(rhs.0))
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}
