//! Integration tests: digest.
