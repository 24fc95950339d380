//! Conversions between domain values and database values, and error classification. The bottom of the
//! crate: it uses no other module of it.

use chrono::{DateTime, TimeZone, Utc};
use herald_domain::Timestamp;
use herald_ports::store::ChannelTable;
use herald_ports::StoreError;

pub(crate) fn to_db(t: Timestamp) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(t.as_millis()).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

pub(crate) fn from_db(t: DateTime<Utc>) -> Timestamp {
    Timestamp(t.timestamp_millis())
}

pub(crate) fn opt_from_db(t: Option<DateTime<Utc>>) -> Option<Timestamp> {
    t.map(from_db)
}

pub(crate) fn opt_to_db(t: Option<Timestamp>) -> Option<DateTime<Utc>> {
    t.map(to_db)
}

pub(crate) fn count_u32(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

pub(crate) fn count_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The names of the configured channels, as a `text[]` parameter.
pub(crate) fn channel_names(table: &ChannelTable) -> Vec<String> {
    table.names().map(|n| n.as_str().to_owned()).collect()
}

/// SQLSTATE classes and codes that mean "the connection or server went away": class 08 (connection
/// exception), 57P01–57P03 (admin shutdown, crash shutdown, cannot connect now, as after
/// `pg_terminate_backend`), 53300 (too many connections).
fn is_unavailable_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// Classifies a sqlx error: connection trouble is `Unavailable` (retry later), a write refused because
/// its user is erased `UserErased`, the rest `Unknown`.
pub(crate) fn store_error(error: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &error {
        // The guard trigger of migration 0020: a write for an erased user.
        if db.code().is_some_and(|code| code == "HR410") {
            return StoreError::UserErased;
        }
    }
    let unavailable = match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| is_unavailable_code(&code)),
        _ => false,
    };
    if unavailable {
        StoreError::Unavailable(error.into())
    } else {
        StoreError::Unknown(error.into())
    }
}

/// Maps a code stored by Herald back to its domain value; a foreign value is a store failure.
pub(crate) fn parse_code<T: std::str::FromStr>(value: &str) -> Result<T, StoreError>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    value.parse::<T>().map_err(|e| StoreError::Unknown(e.into()))
}
