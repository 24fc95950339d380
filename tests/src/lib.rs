//! Test support for Herald's integration tests, multi-process tests and the evidence report.
//!
//! Everything here is real: each test gets a fresh PostgreSQL database (cloned from a migrated
//! template), the channels are stand-in HTTP servers on loopback ports, and the worker is Herald's own.
//! The reference cases of SPEC §10 live in [`cases`] as functions that return their [`Evidence`]; the
//! `#[tokio::test]` wrappers assert it, and the `herald-evidence` binary prints it.

pub mod api;
pub mod bins;
pub mod cases;
pub mod clock;
pub mod console;
pub mod db;
pub mod evidence;
pub mod peers;
pub mod tally;
pub mod wait;
pub mod world;

pub use clock::ManualClock;
pub use db::TestDb;
pub use evidence::{Check, Evidence};
pub use world::{ClockMode, World};
