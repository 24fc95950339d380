//! The `herald` binary. Errors end here as one line on standard error; configuration errors exit with
//! status 2, every other failure with status 1.

use clap::Parser as _;
use herald_app::cli::{self, Cli};
use herald_app::config::ConfigError;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            let config_error = error.chain().any(|cause| cause.downcast_ref::<ConfigError>().is_some());
            // `{:#}` joins the context chain on one line: "cannot connect to the database: …".
            eprintln!("herald: {error:#}");
            std::process::ExitCode::from(if config_error { 2 } else { 1 })
        }
    }
}
