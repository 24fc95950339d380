//! The `herald` binary's library: the composition root and the process around the core.
//!
//! The use cases and the worker are `herald-core`'s, the API and the console `herald-http`'s; this crate
//! is the only one that knows every adapter. It reads the configuration, wires the ports to PostgreSQL and
//! the channel adapters ([`compose`]), and runs the processes (`serve`, `worker`) and the command line.
//!
//! | module | holds |
//! |---|---|
//! | [`cli`] | the command line: parsing and dispatch |
//! | [`compose`] | the composition root: `Services` from configuration, the database, readiness |
//! | [`config`] | configuration: the TOML file, `HERALD__…` overrides, `…_file` secrets, checks |
//! | [`service`] | `herald serve` / `herald worker`: start-up, the loops, shutdown |
//! | [`wakeups`] | PostgreSQL `LISTEN` fanned out to the worker loops |
//! | [`metrics`] | the Prometheus exporter and the task gauges' refresh |
//! | [`logging`] | the process's log subscriber |
//! | [`init`] | `herald init`: a fresh configuration with its secrets in files |

pub mod cli;
pub mod compose;
pub mod config;
pub mod init;
pub mod logging;
pub mod metrics;
pub mod oidc;
pub mod service;
pub mod wakeups;
