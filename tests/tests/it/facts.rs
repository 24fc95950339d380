//! Integration tests: facts.
