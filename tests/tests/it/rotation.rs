//! Integration tests: rotation.
