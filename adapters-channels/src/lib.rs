//! Channel adapters of Herald, and local stand-in channels to test them against.

pub mod cipher;
pub mod config;
pub mod http;
pub mod registry;
pub mod standin;

pub use http::HttpChannel;
pub use registry::HttpChannelRegistry;
