//! The process's log subscriber, from `[log]` (`RUST_LOG` overrides its level, see `crate::config`).

use crate::config::{Config, LogFormat};

/// Logging for the commands that run for a while (`serve`, `worker`, `migrate`, `keys rotate`).
pub fn init(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: a log file or a pipe gets no escape codes.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    // Failure means a subscriber is set already (only in tests); keep it.
    let _ = match config.log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
