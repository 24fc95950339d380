//! The database's clock: every worker judges leases by it, so worker clock skew cannot break fencing.

use async_trait::async_trait;
use herald_domain::Timestamp;
use herald_ports::{Clock, StoreError};
use sqlx::PgPool;

use crate::convert::{from_db, store_error};

#[derive(Clone, Debug)]
pub struct PgClock {
    pool: PgPool,
}

impl PgClock {
    #[must_use]
    pub fn new(pool: PgPool) -> Self {
        PgClock { pool }
    }
}

#[async_trait]
impl Clock for PgClock {
    async fn now(&self) -> Result<Timestamp, StoreError> {
        // clock_timestamp(), not now(): the latter is the start of the current transaction.
        let now: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&self.pool).await.map_err(store_error)?;
        Ok(from_db(now))
    }
}
