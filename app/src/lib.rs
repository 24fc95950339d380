//! The `herald` service: worker cycles, HTTP API, configuration and command line, wired to the
//! PostgreSQL store and the channel adapters.

pub mod api;
pub mod cli;
pub mod config;
pub mod demo;
pub mod metrics;
pub mod wakeups;
pub mod worker;
