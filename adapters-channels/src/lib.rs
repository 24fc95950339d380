//! Channel adapters of Herald, and local stand-in channels to test them against.
//!
//! `config` reads a `[[channel]]` entry, `registry` builds the adapter its `kind` names, `kinds` holds one
//! module per kind over the shared HTTP plumbing of `http`, `egress` guards every destination a user
//! controls (SPEC §16), and `cipher` encrypts destinations at rest.

pub mod cipher;
pub mod config;
pub mod egress;
mod http;
pub mod kinds;
pub mod registry;
pub mod settings;
pub mod status;

pub use registry::{ConfiguredChannel, HttpChannel, HttpChannelRegistry};
