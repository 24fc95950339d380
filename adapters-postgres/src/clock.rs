//! The database's clock: every worker judges leases by it, so worker clock skew cannot break fencing.
//!
//! Reading it is a round trip, and every submission, claim and batch of finishes needs `now`. So a
//! [`PgClock`] reads the database at most once per [`PgClock::REREAD`] and carries that reading forward
//! with the process's monotonic clock in between. The value is still the database's time: it differs
//! from a fresh read by the drift of two quartz clocks over one interval (parts per million of a second:
//! microseconds) plus the uncertainty any read has anyway (where in its round trip the server looked:
//! half a round trip at most, halved again by anchoring at the midpoint). Timestamps are milliseconds,
//! so neither shows. A step of the database's clock (an NTP correction on its host) is followed at the
//! next read, within one interval. Within a process the clock never goes back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use herald_domain::Timestamp;
use herald_ports::{Clock, StoreError};
use sqlx::PgPool;

use crate::convert::{from_db, store_error};

#[derive(Clone, Debug)]
pub struct PgClock {
    pool: PgPool,
    state: Arc<Mutex<Reading>>,
}

/// The last reading of the database's clock and the monotonic instant it belongs to; the latest value
/// handed out.
#[derive(Debug)]
struct Reading {
    anchor: Option<(Instant, Timestamp)>,
    latest: Timestamp,
}

impl Default for Reading {
    fn default() -> Reading {
        Reading { anchor: None, latest: Timestamp(i64::MIN) }
    }
}

impl Reading {
    /// `at`, carried forward from the anchor, when the anchor is recent enough; never before `latest`.
    fn carried(&mut self, at: Instant) -> Option<Timestamp> {
        let (instant, read) = self.anchor?;
        let since = at.checked_duration_since(instant).unwrap_or_default();
        if since >= PgClock::REREAD {
            return None;
        }
        Some(self.hand_out(Timestamp(read.0 + millis(since))))
    }

    fn hand_out(&mut self, now: Timestamp) -> Timestamp {
        self.latest = self.latest.max(now);
        self.latest
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PgClock {
    /// How long one reading of the database's clock is carried forward.
    pub const REREAD: Duration = Duration::from_secs(1);

    #[must_use]
    pub fn new(pool: PgPool) -> Self {
        PgClock { pool, state: Arc::new(Mutex::new(Reading::default())) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Reading> {
        // The state is two plain values written together: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Clock for PgClock {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        if let Some(now) = self.state().carried(Instant::now()) {
            return Ok(now);
        }
        let before = Instant::now();
        // clock_timestamp(), not now(): the latter is the start of the current transaction.
        let read: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&self.pool).await.map_err(store_error)?;
        let after = Instant::now();
        let read = from_db(read);
        // The server looked somewhere within the round trip: anchor the reading at its middle.
        let middle = before + (after - before) / 2;
        let mut state = self.state();
        state.anchor = Some((middle, read));
        Ok(state.hand_out(Timestamp(read.0 + millis(after - middle))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_carried_forward_by_the_monotonic_clock_and_then_read_again() {
        let start = Instant::now();
        let mut r = Reading { anchor: Some((start, Timestamp(1_000))), latest: Timestamp(1_000) };
        assert_eq!(r.carried(start + Duration::from_millis(250)), Some(Timestamp(1_250)));
        assert_eq!(r.carried(start + PgClock::REREAD - Duration::from_millis(1)), Some(Timestamp(1_999)));
        assert_eq!(r.carried(start + PgClock::REREAD), None, "after the interval the database is read again");
        assert_eq!(Reading::default().carried(start), None, "no reading yet");
    }

    #[test]
    fn the_clock_never_goes_back_within_a_process() {
        let start = Instant::now();
        let mut r = Reading { anchor: Some((start, Timestamp(5_000))), latest: Timestamp(5_400) };
        // A new reading a little behind what was already handed out (the read's own uncertainty).
        assert_eq!(r.carried(start + Duration::from_millis(100)), Some(Timestamp(5_400)));
        assert_eq!(r.carried(start + Duration::from_millis(700)), Some(Timestamp(5_700)));
    }
}
