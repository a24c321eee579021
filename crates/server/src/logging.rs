//! The server's log: the filter (`--log`, with str0m's harmless per-join
//! notices kept below WARN), the format (`--log-format`: text or one JSON
//! object per line), and colour only when stderr is a terminal and
//! `NO_COLOR` is unset. Lines go to stderr.
//!
//! Must not: decide what is logged where (each module does, at its level).

use std::ffi::OsString;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// str0m warns when a client's answer restates payload types it already
/// locked ("Ignore remote PT RED change", two or three per Chromium join):
/// nothing an operator can act on. Added to a filter that does not name
/// str0m, so `--log str0m=debug` (or any str0m directive) still shows it.
const QUIET: &str = "str0m::format::payload_params=error";

/// The filter directives for the user's `--log`.
pub fn directives(log: &str) -> String {
    if log.contains("str0m") {
        log.to_string()
    } else if log.trim().is_empty() {
        QUIET.to_string()
    } else {
        format!("{log},{QUIET}")
    }
}

/// Whether text lines get ANSI colours: only on a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
pub fn colour(terminal: bool, no_color: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber. A `--log` that does not parse falls back
/// to `info`.
pub fn init(log: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_new(directives(log)).unwrap_or_else(|_| EnvFilter::new(directives("info")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .init(),
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str0m_notices_are_quiet_unless_asked_for() {
        assert_eq!(
            directives("info"),
            "info,str0m::format::payload_params=error"
        );
        assert_eq!(directives("str0m=debug"), "str0m=debug");
        assert_eq!(directives("warn,str0m=warn"), "warn,str0m=warn");
        for d in ["info", "", "warn,corelay=debug", "str0m=trace"] {
            assert!(EnvFilter::try_new(directives(d)).is_ok(), "{d:?}");
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
