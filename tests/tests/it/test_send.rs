//! Integration tests: test_send.
