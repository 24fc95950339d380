//! Integration tests: api.
