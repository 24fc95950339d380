//! A clock moved by hand, so time-dependent cases (backoff, TTL, leases, digests, egress intervals)
//! need no sleeps.

use std::sync::Mutex;

use async_trait::async_trait;
use herald_domain::{Millis, Timestamp};
use herald_ports::{Clock, StoreError};

#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    #[must_use]
    pub fn at(start: Timestamp) -> Self {
        ManualClock { now: Mutex::new(start) }
    }

    pub fn advance(&self, by: Millis) {
        let mut now = self.now.lock().expect("clock lock");
        *now = *now + by;
    }

    pub fn set(&self, to: Timestamp) {
        *self.now.lock().expect("clock lock") = to;
    }

    #[must_use]
    pub fn read(&self) -> Timestamp {
        *self.now.lock().expect("clock lock")
    }
}

#[async_trait]
impl Clock for ManualClock {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.read())
    }
}
