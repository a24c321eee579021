//! corelay-dwell: eBPF tracer of UDP socket-queue dwell time. See docs/dwell.md.

use std::process::ExitCode;

use clap::Parser;
use corelay_dwell::cli::Args;

/// Like note!, but a closed or broken stderr is not a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn main() -> ExitCode {
    let args = Args::parse();
    run(args)
}

#[cfg(not(feature = "bpf"))]
fn run(_args: Args) -> ExitCode {
    note!(
        "corelay-dwell: built without BPF support; rebuild with \
         `cargo build -p corelay-dwell --features bpf` (needs clang and libbpf-dev), \
         see docs/dwell.md"
    );
    ExitCode::from(corelay_dwell::EXIT_NO_BPF_SUPPORT)
}

#[cfg(feature = "bpf")]
fn run(args: Args) -> ExitCode {
    traced::run(args)
}

#[cfg(feature = "bpf")]
mod traced {
    use std::io::{IsTerminal, Write};
    use std::process::ExitCode;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use corelay_dwell::bpf::{Config, Tracer};
    use corelay_dwell::cli::Args;
    use corelay_dwell::model::{Report, diff};
    use corelay_dwell::promserver::{self, Exposition};
    use corelay_dwell::{EXIT_BPF_UNAVAILABLE, render};

    static STOP: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_signal(_sig: libc::c_int) {
        STOP.store(true, Ordering::Relaxed);
    }

    fn install_signal_handlers() {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores to an atomic, which is
            // async-signal-safe; sigaction is given a zeroed, valid struct.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }

    /// Sockets with no event for this long are dropped from the map.
    const FORGET_IDLE: Duration = Duration::from_secs(300);

    pub fn run(args: Args) -> ExitCode {
        install_signal_handlers();
        let cfg = Config {
            ports: args.ports,
            pid: args.pid,
        };
        let mut tracer = match Tracer::load(&cfg) {
            Ok(t) => t,
            Err(e) => {
                note!("corelay-dwell: cannot trace: {e}");
                if let Some(log) = e.detail.as_deref().filter(|l| !l.trim().is_empty()) {
                    let lines: Vec<&str> = log.lines().collect();
                    let tail = &lines[lines.len().saturating_sub(30)..];
                    note!("corelay-dwell: verifier log (last lines):");
                    for l in tail {
                        note!("  {l}");
                    }
                }
                return ExitCode::from(EXIT_BPF_UNAVAILABLE);
            }
        };

        let expo = Exposition::default();
        if let Some(addr) = args.prometheus {
            match promserver::serve(addr, expo.clone()) {
                Ok(bound) => {
                    note!("corelay-dwell: Prometheus metrics at http://{bound}/metrics")
                }
                Err(e) => {
                    note!("corelay-dwell: cannot listen on {addr} for --prometheus: {e}");
                    return ExitCode::from(1);
                }
            }
        }

        let mut prev = tracer.snapshot();
        expo.set(render::prometheus(&prev));
        let first = prev.counters;
        note!(
            "corelay-dwell: tracing UDP ports {}{}, every {:?}{}",
            args.ports,
            args.pid
                .map(|p| format!(", reads by pid {p}"))
                .unwrap_or_default(),
            args.interval,
            match args.duration {
                Some(d) => format!(" for {d:?}"),
                None => ", Ctrl-C to stop".into(),
            }
        );

        let start = Instant::now();
        // Far enough for "never", small enough not to overflow Instant.
        let far = Duration::from_secs(100 * 365 * 86_400);
        let at = |d: Duration| start.checked_add(d.min(far)).unwrap_or(start + far);
        let deadline = args.duration.map(at);
        let tty = std::io::stdout().is_terminal() && !args.json;
        let mut last = start;
        let mut tick = 1u32;
        loop {
            let next = at(args.interval.saturating_mul(tick));
            let until = match deadline {
                Some(d) if d < next => d,
                _ => next,
            };
            while Instant::now() < until && !STOP.load(Ordering::Relaxed) {
                let left = until.saturating_duration_since(Instant::now());
                thread::sleep(left.min(Duration::from_millis(50)));
            }
            let stopping =
                STOP.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d);
            // Skip ticks missed while suspended or very slow.
            let now = Instant::now();
            while at(args.interval.saturating_mul(tick)) <= now && tick < u32::MAX {
                tick = tick.saturating_add(1);
            }

            let cur = tracer.snapshot();
            let report = Report {
                unix_time: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
                interval_s: now.duration_since(last).as_secs_f64(),
                sockets: diff(&prev, &cur, args.all),
                counters: cur.counters.since(&prev.counters),
                counters_total: cur.counters.since(&first),
            };
            last = now;
            expo.set(render::prometheus(&cur));

            let text = if args.json {
                let mut l = render::json_line(&report);
                l.push('\n');
                Some(l)
            } else if !args.quiet {
                let t = render::table(&report);
                Some(if tty {
                    format!("\x1b[H\x1b[2J{t}")
                } else {
                    format!("{t}\n")
                })
            } else {
                None
            };
            if let Some(text) = text {
                let mut out = std::io::stdout().lock();
                if out
                    .write_all(text.as_bytes())
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    // Reader went away (e.g. `| head`): stop quietly.
                    return ExitCode::SUCCESS;
                }
            }
            tracer.prune(&cur, FORGET_IDLE.as_nanos() as u64);
            prev = cur;
            if stopping {
                break;
            }
        }
        ExitCode::SUCCESS
    }
}
