//! Integration tests: worker_runtime.
