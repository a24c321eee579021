//! The `corelay` binary: parse flags, start logging, run the server (or,
//! as `corelay token`, print an access token).

use clap::Parser;

// str0m allocates per packet (SRTP output, RTX history entries, queue
// nodes), on every shard at once: with mimalloc's thread-local free pages
// the server spends 4 to 8 % less CPU per forwarded packet than with
// glibc's malloc, for 16 % more resident memory (alternating runs at 40
// rooms of 4, 2026-12-03), most of it transparent huge pages that
// `MIMALLOC_ALLOW_THP=0` gives back (docs/operations.md, "Memory").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    corelay::logging::init(&cfg.log, cfg.log_format);
    match corelay::run(cfg) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("corelay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
