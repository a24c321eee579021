//! The server's log: the filter (`--log`, with the crates on the packet path
//! kept to ERROR unless it names them), the rate limit on every line a
//! remote party can cause, the format (`--log-format`: text or one JSON
//! object per line), and colour only when stderr is a terminal and
//! `NO_COLOR` is unset. Lines go to stderr.
//!
//! Must not: decide what is logged where (each module does, at its level).
//!
//! The rate limit's table is one mutex that every thread that logs takes,
//! shards included: for a line that passed the level filter only (a line
//! filtered out costs what it did), beside the stderr lock that writing the
//! line takes anyway. A healthy shard logs a few lines per join; what the
//! limit suppresses costs the lock and a hash lookup instead of a write.
#![allow(
    clippy::disallowed_types,
    reason = "the log rate limit's table, taken only for a line that passed the filter (see above)"
)]

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// The crates that read what arrives from the network before corelay knows
/// who sent it, or on a participant's behalf: str0m (ICE, DTLS, SRTP, SCTP),
/// its STUN parser and ICE agent (`is`), its shared types (`str0m_proto`,
/// `str0m_aws_lc_rs`), its DTLS (`dimpl`) and its SCTP (`sctp_proto`, which
/// logs through the `log` crate). Any of them can be made to write a line
/// per packet, or per attribute of a packet (str0m's STUN parser warns for
/// every MAPPED-ADDRESS, UNKNOWN-ATTRIBUTES or ALTERNATE-SERVER attribute:
/// 15,000 lines for one 60 KB datagram), and their WARNs are nothing an
/// operator can act on ("Ignore remote PT RED change" on every Chromium
/// join, "Stream 0 in wrong state"). Each is filtered to ERROR unless the
/// user's `--log` has a directive for exactly that crate (`str0m=warn`); a
/// directive for one of its modules (`str0m::sctp=debug`) is more specific
/// than the cap and wins for that module only.
pub const PACKET_PATH: &[&str] = &[
    "str0m",
    "str0m_proto",
    "str0m_aws_lc_rs",
    "is",
    "dimpl",
    "sctp_proto",
];

/// Lines one callsite may write per [`WINDOW`] before the rest of the
/// window's are suppressed.
pub const BURST: u32 = 10;
/// The rate limit's window.
pub const WINDOW: Duration = Duration::from_secs(1);
/// How often the suppressed lines are reported (one line per callsite that
/// had any).
pub const REPORT_EVERY: Duration = Duration::from_secs(5);
/// The target of the report lines (never rate-limited themselves).
pub const REPORT_TARGET: &str = "corelay::log_rate_limit";

/// The target of a filter directive (`target[span]=level`), or `None` for a
/// bare level (`info`) or a span-only directive.
fn target_of(directive: &str) -> Option<&str> {
    let d = directive.trim();
    let head = d.split(['=', '[']).next().unwrap_or("").trim();
    if head.is_empty() || (!d.contains('=') && head.parse::<LevelFilter>().is_ok()) {
        return None;
    }
    Some(head)
}

/// The filter directives for the user's `--log`: the user's, then
/// `crate=error` for each of [`PACKET_PATH`] it has no directive for.
pub fn directives(log: &str) -> String {
    let user: Vec<&str> = log
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    let mut out: Vec<String> = user.iter().map(|d| d.to_string()).collect();
    for krate in PACKET_PATH {
        if !user.iter().any(|d| target_of(d) == Some(krate)) {
            out.push(format!("{krate}=error"));
        }
    }
    out.join(",")
}

/// Whether text lines get ANSI colours: only on a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
pub fn colour(terminal: bool, no_color: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber, and the thread that reports what the
/// rate limit suppressed. A `--log` that does not parse falls back to
/// `info`.
pub fn init(log: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_new(directives(log)).unwrap_or_else(|_| EnvFilter::new(directives("info")));
    let limiter = Arc::new(Limiter::new(BURST, WINDOW));
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Text => {
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(colour(
                    std::io::stderr().is_terminal(),
                    std::env::var_os("NO_COLOR"),
                ));
            registry
                .with(RateLimited::new(fmt, limiter.clone()))
                .try_init()
        }
        LogFormat::Json => {
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .json()
                .flatten_event(true)
                .with_ansi(false);
            registry
                .with(RateLimited::new(fmt, limiter.clone()))
                .try_init()
        }
    };
    if installed.is_err() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("log-rate-limit".into())
        .spawn(move || {
            loop {
                std::thread::sleep(REPORT_EVERY);
                report(&limiter);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("could not start the log rate limit's reporter: {e}");
    }
}

/// Writes one WARN per callsite that had lines suppressed since the last
/// report, with how many.
pub fn report(limiter: &Limiter) {
    for (site, suppressed) in limiter.take_suppressed() {
        tracing::warn!(
            target: REPORT_TARGET,
            site = %site,
            suppressed,
            "log lines suppressed: more than {} in {:?} from this place",
            limiter.burst,
            limiter.window
        );
    }
}

/// Where a line comes from: a tracing callsite, or (for the `log` crate's
/// records, which share one callsite per level) a hash of the record's
/// target, file and line.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Key {
    Callsite(Identifier),
    Log(u64),
}

/// One callsite's window.
struct Site {
    name: String,
    window_start: Instant,
    in_window: u32,
    suppressed: u64,
}

/// At most `burst` lines per callsite per `window`; the rest are counted.
/// The table has one entry per callsite that ever wrote a line (a fixed
/// set: the binary's callsites), behind one mutex taken only for a line
/// that passed the level filter, so never on the packet path of a healthy
/// server.
pub struct Limiter {
    burst: u32,
    window: Duration,
    sites: Mutex<HashMap<Key, Site>>,
}

impl Limiter {
    pub fn new(burst: u32, window: Duration) -> Limiter {
        Limiter {
            burst,
            window,
            sites: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a line from `key` may be written at `now`; counts it as
    /// suppressed if not. `name` names the callsite in the report.
    fn admit(&self, key: Key, name: impl FnOnce() -> String, now: Instant) -> bool {
        let mut sites = self.sites.lock().unwrap_or_else(PoisonError::into_inner);
        let site = sites.entry(key).or_insert_with(|| Site {
            name: name(),
            window_start: now,
            in_window: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(site.window_start) >= self.window {
            site.window_start = now;
            site.in_window = 0;
        }
        if site.in_window < self.burst {
            site.in_window += 1;
            true
        } else {
            site.suppressed += 1;
            false
        }
    }

    /// The callsites with lines suppressed since the last call, and how
    /// many, sorted by name; their counts start again from zero.
    pub fn take_suppressed(&self) -> Vec<(String, u64)> {
        let mut sites = self.sites.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<(String, u64)> = sites
            .values_mut()
            .filter(|s| s.suppressed > 0)
            .map(|s| (s.name.clone(), std::mem::take(&mut s.suppressed)))
            .collect();
        out.sort();
        out
    }

    /// Whether `event` may be written now. DEBUG and TRACE lines are not
    /// limited (a level the operator turns on to see everything), nor are
    /// the reports.
    fn admits(&self, event: &Event<'_>) -> bool {
        let meta = event.metadata();
        if *meta.level() > Level::INFO || meta.target() == REPORT_TARGET {
            return true;
        }
        let now = Instant::now();
        if meta.target() == "log" {
            // A `log` record (sctp_proto): tracing-log gives every record
            // of a level the same callsite, so the place is in its fields.
            let mut place = LogPlace::default();
            event.record(&mut place);
            let mut h = DefaultHasher::new();
            place.hash(&mut h);
            return self.admit(Key::Log(h.finish()), || place.to_string(), now);
        }
        self.admit(
            Key::Callsite(meta.callsite()),
            || {
                format!(
                    "{} ({}:{})",
                    meta.target(),
                    meta.file().unwrap_or("?"),
                    meta.line().unwrap_or(0)
                )
            },
            now,
        )
    }
}

/// A `log` record's place, from the fields tracing-log gives it.
#[derive(Default, Hash)]
struct LogPlace {
    target: String,
    file: String,
    line: u64,
}

impl Visit for LogPlace {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "log.target" => self.target = value.to_string(),
            "log.file" => self.file = value.to_string(),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "log.line" {
            self.line = value;
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {}
}

impl fmt::Display for LogPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{})", self.target, self.file, self.line)
    }
}

/// A layer (the formatter) whose events pass the [`Limiter`] first.
/// Wrapping the writer's layer, rather than filtering in `event_enabled`,
/// also covers the `log` crate's records: tracing-log hands them to
/// `on_event` without asking `event_enabled`.
pub struct RateLimited<L> {
    inner: L,
    limiter: Arc<Limiter>,
}

impl<L> RateLimited<L> {
    pub fn new(inner: L, limiter: Arc<Limiter>) -> RateLimited<L> {
        RateLimited { inner, limiter }
    }
}

impl<S: Subscriber, L: Layer<S>> Layer<S> for RateLimited<L> {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn on_record(&self, span: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &span::Id, follows: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.limiter.admits(event) {
            self.inner.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_path_crates_are_capped_at_error_unless_named() {
        let caps = "str0m=error,str0m_proto=error,str0m_aws_lc_rs=error,is=error,dimpl=error,sctp_proto=error";
        assert_eq!(directives("info"), format!("info,{caps}"));
        assert_eq!(directives(""), caps);
        // A directive for the crate wins; one for a module of it adds to
        // the cap (the more specific directive wins for that module).
        assert_eq!(
            directives("str0m=debug"),
            "str0m=debug,str0m_proto=error,str0m_aws_lc_rs=error,is=error,dimpl=error,sctp_proto=error"
        );
        assert_eq!(
            directives("warn,is=warn,sctp_proto=info"),
            "warn,is=warn,sctp_proto=info,str0m=error,str0m_proto=error,str0m_aws_lc_rs=error,dimpl=error"
        );
        assert!(directives("str0m::sctp=debug").starts_with("str0m::sctp=debug,str0m=error,"));
        // `info` names no crate, nor does a bare `is` level lookalike.
        assert_eq!(target_of("info"), None);
        assert_eq!(target_of("is"), Some("is"));
        assert_eq!(target_of("is[span]=debug"), Some("is"));
        for d in ["info", "", "warn,corelay=debug", "str0m=trace", "is=warn"] {
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

    #[test]
    fn the_limiter_admits_a_burst_per_window_and_counts_the_rest() {
        let l = Limiter::new(3, Duration::from_secs(1));
        let t0 = Instant::now();
        let a = Key::Log(1);
        let b = Key::Log(2);
        let admitted: Vec<bool> = (0..10)
            .map(|_| l.admit(a.clone(), || "a".into(), t0))
            .collect();
        assert_eq!(admitted.iter().filter(|x| **x).count(), 3);
        assert!(admitted[..3].iter().all(|x| *x), "{admitted:?}");
        // Another place has its own burst.
        assert!(l.admit(b.clone(), || "b".into(), t0 + Duration::from_millis(500)));
        assert!(!l.admit(a.clone(), || "a".into(), t0 + Duration::from_millis(999)));
        assert_eq!(l.take_suppressed(), vec![("a".to_string(), 8)]);
        assert_eq!(l.take_suppressed(), vec![]);
        // The next window admits a new burst.
        let t1 = t0 + Duration::from_secs(1);
        let admitted = (0..5)
            .filter(|_| l.admit(a.clone(), || "a".into(), t1))
            .count();
        assert_eq!(admitted, 3);
        assert_eq!(l.take_suppressed(), vec![("a".to_string(), 2)]);
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What a hostile client causes (a WARN per packet from one callsite,
    /// and `log` records of sctp_proto from two places) is written a burst
    /// at a time, then one report line per place says how many were
    /// suppressed; DEBUG lines and other places are not limited. The window
    /// is an hour, so nothing here depends on how fast it runs.
    #[test]
    fn the_layer_writes_a_burst_then_reports_what_it_suppressed() {
        let buf = Buf::default();
        let writer = buf.clone();
        let limiter = Arc::new(Limiter::new(3, Duration::from_secs(3600)));
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let subscriber = tracing_subscriber::registry()
            .with(LevelFilter::DEBUG)
            .with(RateLimited::new(fmt, limiter.clone()));
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..100 {
                tracing::warn!("hostile packet {i}");
                tracing::debug!("debug line {i}");
            }
            for line in [10u64, 20] {
                for _ in 0..50 {
                    // As tracing-log hands on a `log` record.
                    tracing::event!(
                        target: "log",
                        Level::ERROR,
                        log.target = "sctp_proto::association",
                        log.file = "src/association/mod.rs",
                        log.line = line,
                        "inbound packet larger than maximum message size"
                    );
                }
            }
            tracing::info!("another place");
            report(&limiter);
            // Nothing new suppressed: no report.
            report(&limiter);
        });
        let out = String::from_utf8(buf.0.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .unwrap_or_default();
        let lines: Vec<&str> = out.lines().collect();
        let count = |s: &str| lines.iter().filter(|l| l.contains(s)).count();
        assert_eq!(count("hostile packet"), 3, "{out}");
        assert_eq!(count("debug line"), 100, "{out}");
        assert_eq!(count("inbound packet larger"), 6, "{out}");
        assert_eq!(count("another place"), 1, "{out}");
        let reports: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("log lines suppressed"))
            .collect();
        assert_eq!(reports.len(), 3, "{out}");
        assert!(
            reports
                .iter()
                .any(|l| l.contains("logging.rs") && l.contains("suppressed=97")),
            "{out}"
        );
        for place in [
            "sctp_proto::association (src/association/mod.rs:10)",
            "sctp_proto::association (src/association/mod.rs:20)",
        ] {
            assert!(
                reports
                    .iter()
                    .any(|l| l.contains(place) && l.contains("suppressed=47")),
                "{place}: {out}"
            );
        }
        assert!(reports.iter().all(|l| l.contains(" WARN ")), "{out}");
    }
}
