//! Herald's HTTP front end: the JSON API of SPEC §11, the console, and the metrics endpoint — one inbound
//! adapter over `herald-core`.
//!
//! Every handler and page is: authenticate, parse, call one use case of the core, map its typed error
//! to a problem document or a page. Nothing here knows PostgreSQL, a channel's wire format or a key: the
//! state ([`ApiState`]) holds the core's [`Services`](herald_core::Services), built by whoever composes
//! the process (`herald-app`).
//!
//! > **Architecture invariant.** No dependency on `herald-postgres` or `herald-channels`, no SQL, no
//! > encryption — `.ci/run` checks the dependencies.
//!
//! | module | holds |
//! |---|---|
//! | [`state`] | [`ApiState`], the console's settings, readiness |
//! | [`router`] | the whole front end as one router, with its layers; `/metrics` alone for a worker |
//! | [`serve`] | the accept loop: header-read timeout, the peer's address, graceful stop |
//! | [`api`] | the JSON API: handlers, wire models, problem documents, bearer extractors, limits, OpenAPI |
//! | [`console`] | the server-rendered pages, in English and Simplified Chinese |
//! | [`paging`] | the next-page cursor of a list, for both |

pub mod api;
pub mod console;
pub mod paging;
pub mod router;
pub mod serve;
pub mod state;

pub use api::limits;
pub use router::{metrics_router, router, router_with};
pub use serve::{serve, serve_bounded};
pub use state::{
    ApiState, CachedReadiness, ChannelNames, ClockReadiness, ConsoleSettings, Readiness, DEFAULT_BODY_LIMIT,
    READINESS_TTL,
};
