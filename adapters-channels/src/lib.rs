//! placeholder
pub mod cipher;
