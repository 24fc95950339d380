//! Integration tests: egress.
