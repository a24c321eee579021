//! The `corelay` binary: parse flags, start logging, run the server (or,
//! as `corelay token`, print an access token).

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cfg = corelay::config::Config::parse();
    if let Some(corelay::config::Cmd::Token(args)) = &cfg.command {
        // `corelay token`: print a token, start nothing.
        return match corelay::control::auth::token_command(args) {
            Ok(token) => {
                println!("{token}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("corelay token: {e}");
                std::process::ExitCode::from(2)
            }
        };
    }
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
