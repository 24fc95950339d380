//! Herald's integration tests beyond the reference cases: one test binary, one module per area.
//! Every test talks to a real PostgreSQL (a fresh database each) and real HTTP servers on loopback.

mod api;
mod digest;
mod egress;
mod facts;
mod rotation;
mod test_send;
mod worker_runtime;
