//! The `corelay` binary: parse flags, start logging, run the server.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cfg = corelay::config::Config::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match corelay::run(cfg) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("corelay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
