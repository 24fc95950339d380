//! Integration tests: leak.
