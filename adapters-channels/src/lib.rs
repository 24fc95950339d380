//! Channel adapters of Herald, and local stand-in channels to test them against.

pub mod cipher;
pub mod config;
pub mod standin;
