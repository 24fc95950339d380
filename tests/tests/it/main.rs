//! Herald's integration tests beyond the reference cases: one test binary, one module per area.
//! Every test talks to a real PostgreSQL (a fresh database each) and real HTTP servers on loopback.

mod api;
mod bounds;
mod cleanup;
mod cli_errors;
mod console_pages;
mod demo;
mod digest;
mod egress;
mod egress_guard;
mod email;
mod embedding;
mod events;
mod example_config;
mod exposure;
mod facts;
mod idempotency;
mod keys_cli;
mod manual;
mod one_path;
mod preferences;
mod processes;
mod production;
mod references;
mod reliability;
mod review;
mod rotation;
mod sessions;
mod submissions;
mod tally;
mod test_send;
mod token_cli;
mod walkthrough;
mod webpush;
mod worker_cli;
mod worker_runtime;
