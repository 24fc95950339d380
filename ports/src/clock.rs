//! The clock port. Leases are judged by one clock — the database's in production — so worker clock skew
//! cannot break fencing; tests substitute a clock they move by hand.

use async_trait::async_trait;
use herald_domain::Timestamp;

use crate::store::StoreError;

#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait Clock: Send + Sync {
    /// The current time of the clock that all workers share.
    async fn now(&self) -> Result<Timestamp, StoreError>;
}
