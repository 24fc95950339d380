//! The reference cases of SPEC §10, each a function returning its evidence.

mod concurrency;
mod failures;
mod fencing;
mod timeouts;

use std::future::Future;
use std::pin::Pin;

use herald_ports::store::TaskView;

pub use concurrency::{c1, n1, n2, nc1};
pub use failures::{b1, b2, f1};
pub use fencing::{nc3, p1, p2};
pub use timeouts::{b3, nc2, t1, t2, t3};

use crate::Evidence;

/// A case as the evidence report runs it.
pub type CaseFn = fn() -> Pin<Box<dyn Future<Output = anyhow::Result<Evidence>> + Send>>;

/// Every reference case, in the order of SPEC §10.
#[must_use]
pub fn all() -> Vec<(&'static str, CaseFn)> {
    vec![
        ("N1", || Box::pin(n1())),
        ("N2", || Box::pin(n2())),
        ("C1", || Box::pin(c1())),
        ("NC1", || Box::pin(nc1())),
        ("T1", || Box::pin(t1())),
        ("T2", || Box::pin(t2())),
        ("T3", || Box::pin(t3())),
        ("NC2", || Box::pin(nc2())),
        ("F1", || Box::pin(f1())),
        ("B1", || Box::pin(b1())),
        ("B2", || Box::pin(b2())),
        ("B3", || Box::pin(b3())),
        ("P1", || Box::pin(p1())),
        ("P2", || Box::pin(p2())),
        ("NC3", || Box::pin(nc3())),
    ]
}

/// The outcome codes of a task's attempts, oldest first (`-` for an attempt still open).
#[must_use]
pub fn outcomes(task: &TaskView) -> Vec<String> {
    task.attempts.iter().map(|a| a.outcome.map_or_else(|| "-".to_owned(), |o| o.as_str().to_owned())).collect()
}

/// The action codes of a task's attempts, oldest first (`-` for rows that called no channel).
#[must_use]
pub fn actions(task: &TaskView) -> Vec<String> {
    task.attempts.iter().map(|a| a.action.map_or_else(|| "-".to_owned(), |x| x.as_str().to_owned())).collect()
}

/// Shorthand for a list of codes.
#[must_use]
pub fn codes(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}
