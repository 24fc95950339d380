//! Herald's core: the use cases and the worker, over the ports only.
//!
//! What makes the crates of `domain`, `ports` and the adapters into Herald — submitting, setting a
//! preference with its destination rules, the test send and its confirmation, the review and the human
//! exit, the inbox, key rotation, signing in to the console, and the worker that claims, calls and
//! finishes — lives here, written once for every front end. It knows no web framework, no database and
//! no channel's wire format: `herald-http` (the API and the console) and `herald-app` (the binary) call
//! it, and another team can embed it with its own store or channels (`examples/embedded.rs`).
//!
//! > **Architecture invariant.** No `axum`, `maud`, `utoipa`, `clap`, `figment`, `sqlx`, `reqwest` or
//! > `lettre` among its normal dependencies — `.ci/run` checks that absence.
//!
//! | module | holds |
//! |---|---|
//! | [`services`] | [`Services`]: the ports one process drives |
//! | [`usecases`] | what a person or a calling service starts |
//! | [`sessions`] | the console's sign-in: sessions bound to their credential, one-time links |
//! | [`identity`] | the identity provider as configured: the port, the role mapping, an operator's standing now |
//! | [`oidc`] | sign-in with the identity provider (OpenID Connect), the operator's standing at every request |
//! | [`auth`] | bearer tokens: service, admin and signed user tokens |
//! | [`worker`], [`finisher`] | claim → call → finish, and the batched finishes |
//! | [`status`] | the status events' dispatcher: outbox → signed posts, retried, parked |
//! | [`metrics`] | what the worker and the use cases record, on the `metrics` facade |
//! | [`names`] | "did you mean …?" for a misspelt name |
//! | [`report`] | errors as the logs show them |

pub mod auth;
pub mod finisher;
pub mod identity;
pub mod metrics;
pub mod names;
pub mod oidc;
pub mod report;
pub mod retention;
pub mod services;
pub mod sessions;
pub mod status;
pub mod usecases;
pub mod user_keys;
pub mod worker;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use services::{channel_table, Services};
