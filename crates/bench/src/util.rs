//! Small helpers: durations with units, /proc CPU readings.

use std::time::Duration;

/// Parse `15s`, `2m`, `500ms`, `1h`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?} (use e.g. 15s, 2m, 500ms)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "sec" | "secs" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m, h)")),
    };
    if !secs.is_finite() || !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(format!("duration out of range: {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A bit rate: `300kbit`, `2mbit`, `1.5mbps`, `800k`, `2M`, or plain bits
/// per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = match t.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t.as_str(), ""),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad rate {s:?} (use e.g. 300kbit, 2mbit)"))?;
    let mul = match unit {
        "" | "bit" | "bps" | "b" => 1.0,
        "k" | "kbit" | "kbps" | "kb" => 1e3,
        "m" | "mbit" | "mbps" | "mb" => 1e6,
        "g" | "gbit" | "gbps" | "gb" => 1e9,
        _ => return Err(format!("bad rate unit in {s:?} (kbit, mbit)")),
    };
    let bps = v * mul;
    if !bps.is_finite() || !(1000.0..=1e11).contains(&bps) {
        return Err(format!("rate out of range: {s:?} (at least 1kbit)"));
    }
    Ok(bps.round() as u64)
}

/// The machine's 1-minute load average.
pub fn loadavg1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPUs online on the machine (not just the ones this process may use).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as usize } else { 1 }
}

/// Clock ticks per second for /proc times.
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

/// (utime, stime) in clock ticks from a /proc/.../stat line.
pub fn parse_stat_times(stat: &str) -> Option<(u64, u64)> {
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15 (1-based).
    let utime = f.get(11)?.parse().ok()?;
    let stime = f.get(12)?.parse().ok()?;
    Some((utime, stime))
}

/// Thread name from a /proc/.../stat line.
pub fn parse_stat_name(stat: &str) -> Option<&str> {
    let a = stat.find('(')?;
    let b = stat.rfind(')')?;
    stat.get(a + 1..b)
}

/// CPU times of a process: total (utime, stime) and per thread (name, utime+stime), in ticks.
#[derive(Debug, Clone, Default)]
pub struct ProcCpu {
    /// Process user ticks.
    pub user: u64,
    /// Process system ticks.
    pub sys: u64,
    /// Per thread: (tid, name, user+sys ticks).
    pub threads: Vec<(u32, String, u64)>,
}

/// Read /proc/<pid>/stat and its tasks. `None` if the process is gone.
pub fn read_proc_cpu(pid: u32) -> Option<ProcCpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (user, sys) = parse_stat_times(&stat)?;
    let mut threads = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten().take(4096) {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(st) = std::fs::read_to_string(e.path().join("stat")) {
                if let (Some((u, s)), Some(name)) = (parse_stat_times(&st), parse_stat_name(&st)) {
                    threads.push((tid, name.to_string(), u + s));
                }
            }
        }
    }
    Some(ProcCpu { user, sys, threads })
}

/// CPU used between two readings, in cores: (total, user, sys, busiest thread, busiest thread name).
pub fn cpu_delta(a: &ProcCpu, b: &ProcCpu, secs: f64) -> (f64, f64, f64, f64, String) {
    let hz = clk_tck();
    if secs <= 0.0 {
        return (0.0, 0.0, 0.0, 0.0, String::new());
    }
    let u = b.user.saturating_sub(a.user) as f64 / hz / secs;
    let s = b.sys.saturating_sub(a.sys) as f64 / hz / secs;
    let mut best = (0.0, String::new());
    for (tid, name, t) in &b.threads {
        let before = a
            .threads
            .iter()
            .find(|x| x.0 == *tid)
            .map(|x| x.2)
            .unwrap_or(0);
        let c = t.saturating_sub(before) as f64 / hz / secs;
        if c > best.0 {
            best = (c, name.clone());
        }
    }
    (u + s, u, s, best.0, best.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("300kbit").unwrap(), 300_000);
        assert_eq!(parse_rate("2mbit").unwrap(), 2_000_000);
        assert_eq!(parse_rate("1.5Mbps").unwrap(), 1_500_000);
        assert_eq!(parse_rate("800k").unwrap(), 800_000);
        assert_eq!(parse_rate("64000").unwrap(), 64_000);
        assert!(parse_rate("3 parsecs").is_err());
        assert!(parse_rate("10bit").is_err());
        assert!(parse_rate("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn proc_stat() {
        let line = "1234 (shard 0 (x)) S 1 2 3 4 5 6 7 8 9 10 111 222 13 14 15 16 17";
        assert_eq!(parse_stat_times(line), Some((111, 222)));
        assert_eq!(parse_stat_name(line), Some("shard 0 (x)"));
        let me = read_proc_cpu(std::process::id()).unwrap();
        assert!(!me.threads.is_empty());
    }
}
