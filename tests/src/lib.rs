//! Test support for Herald's integration tests, multi-process tests and the evidence report.
//!
//! Everything here is real: each test gets a fresh PostgreSQL database (cloned from a migrated
//! template), the channels are stand-in HTTP servers on loopback ports, and the worker is Herald's own.
//! The reference cases of SPEC §10 live in [`cases`] as functions that return their [`Evidence`]; the
//! `#[tokio::test]` wrappers assert it, and the `herald-evidence` binary prints it.

pub mod api;
pub mod bins;
pub mod cases;
pub mod clock;
pub mod console;
pub mod db;
pub mod evidence;
pub mod peers;
pub mod tally;
pub mod wait;
pub mod world;

pub use clock::ManualClock;
pub use db::TestDb;
pub use evidence::{Check, Evidence};
pub use world::{ClockMode, World};

/// The audit event of a decision taken directly on the store by a test (as the core's `resolve` writes
/// it), by an operator named `tester`.
#[must_use]
pub fn decision_event(
    task: herald_domain::TaskId,
    final_state: herald_domain::resolve::FinalState,
    note: &str,
    at: herald_domain::Timestamp,
) -> herald_ports::NewAuditEvent {
    use herald_domain::operators::{Actor, ActorKind, AuditAction, Role};
    herald_ports::NewAuditEvent {
        actor: Actor::new(ActorKind::Operator, "tester", Role::Admin),
        action: AuditAction::of_decision(final_state),
        target: format!("task {task}"),
        detail: note.to_owned(),
        at,
    }
}
