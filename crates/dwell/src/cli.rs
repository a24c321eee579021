//! Command line.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// Measures how long UDP datagrams wait in socket receive queues before the
/// application reads them (eBPF, BTF tracepoints sk_data_ready and
/// sock_recv_length). Works on any UDP server; needs root or CAP_BPF +
/// CAP_PERFMON.
#[derive(Debug, Clone, Parser)]
#[command(name = "corelay-dwell", version)]
pub struct Args {
    /// Local UDP ports to trace: one port or an inclusive range LO-HI.
    #[arg(long, value_parser = parse_ports, default_value = "1-65535")]
    pub ports: PortRange,

    /// Only count reads made by this process (thread group id).
    #[arg(long)]
    pub pid: Option<u32>,

    /// How often to poll the kernel maps and print (e.g. 1s, 500ms).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,

    /// Stop by itself after this long (e.g. 30s, 5m). Default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print one JSON object per interval instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Serve Prometheus text metrics on this address (path /metrics).
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<SocketAddr>,

    /// List every known socket each interval, not only those with activity.
    #[arg(long)]
    pub all: bool,

    /// Print nothing per interval (useful with --prometheus).
    #[arg(long, conflicts_with = "json")]
    pub quiet: bool,
}

/// Inclusive range of local ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// Parses `3478` or `3478-3500`.
pub fn parse_ports(s: &str) -> Result<PortRange, String> {
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map_err(|_| format!("`{p}` is not a port number (0-65535)"))
    };
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let p = port(s)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!("empty port range {lo}-{hi}"));
    }
    Ok(PortRange { lo, hi })
}

/// Parses `1s`, `500ms`, `250us`, `2m`, `1h`, `1.5s` or a bare number of
/// seconds. Zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 1s, 500ms, 2m)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{s}` (use us, ms, s, m or h)"
            ));
        }
    };
    let secs = v * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!(
            "duration `{s}` must be positive and under 30 years"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(
            parse_ports("3478-3500"),
            Ok(PortRange { lo: 3478, hi: 3500 })
        );
        assert_eq!(parse_ports("5000"), Ok(PortRange { lo: 5000, hi: 5000 }));
        assert!(parse_ports("3500-3478").is_err());
        assert!(parse_ports("70000").is_err());
        assert!(parse_ports("a-b").is_err());
        assert!(parse_ports("").is_err());
        assert_eq!(PortRange { lo: 1, hi: 2 }.to_string(), "1-2");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1 fortnight").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn args_parse() {
        let a = Args::try_parse_from([
            "corelay-dwell",
            "--ports",
            "3478-3500",
            "--pid",
            "42",
            "--interval",
            "200ms",
            "--duration",
            "3s",
            "--json",
            "--prometheus",
            "127.0.0.1:9464",
        ])
        .unwrap();
        assert_eq!(a.ports, PortRange { lo: 3478, hi: 3500 });
        assert_eq!(a.pid, Some(42));
        assert_eq!(a.interval, Duration::from_millis(200));
        assert_eq!(a.duration, Some(Duration::from_secs(3)));
        assert!(a.json);
        assert_eq!(a.prometheus, Some("127.0.0.1:9464".parse().unwrap()));
        let d = Args::try_parse_from(["corelay-dwell"]).unwrap();
        assert_eq!(d.ports, PortRange { lo: 1, hi: 65535 });
        assert_eq!(d.interval, Duration::from_secs(1));
    }
}
