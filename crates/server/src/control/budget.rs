//! The CPU the process may use: a cgroup CPU quota (cgroup v2 `cpu.max`,
//! v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, the tightest on the path to
//! the root), as a number of cores. What a container's CPU limit is.
//!
//! A shard's busy figure is CPU time over wall time, which on a quota of
//! half a core never passes 0.5: admission control (`--max-shard-load`)
//! would admit until the server collapses. The control thread divides each
//! report's figure by the shard's share of the quota ([`per_shard`]), so
//! "busy" is of what the shard may use, and re-reads the quota now and then
//! (a supervisor may move the process into a cgroup after it started).
//!
//! Owns: reading and parsing those files. Must not: be called from a shard
//! (it reads files).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the quota is read again.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The quota in cores, re-read every [`REFRESH`].
#[derive(Debug, Default)]
pub struct CpuBudget {
    cores: Option<f64>,
    read_at: Option<Instant>,
}

impl CpuBudget {
    /// Each shard's share of the quota, as a fraction of one core (1.0 without
    /// a quota, or when the quota gives every shard a core or more).
    pub fn per_shard(&mut self, now: Instant, shards: usize) -> f64 {
        if self
            .read_at
            .is_none_or(|t| now.saturating_duration_since(t) >= REFRESH)
        {
            self.read_at = Some(now);
            let cores = quota_cores();
            if cores != self.cores {
                match cores {
                    Some(c) => tracing::info!(
                        "CPU quota {c:.2} cores (cgroup): shard load is judged against {:.2} of a core each",
                        share(Some(c), shards)
                    ),
                    None if self.cores.is_some() => tracing::info!("CPU quota lifted"),
                    None => {}
                }
                self.cores = cores;
            }
        }
        share(self.cores, shards)
    }
}

/// One shard's share of `cores`, at most a whole core.
fn share(cores: Option<f64>, shards: usize) -> f64 {
    match cores {
        Some(c) if c > 0.0 => (c / shards.max(1) as f64).min(1.0),
        _ => 1.0,
    }
}

/// This process's CPU quota in cores, if its cgroup (or one above it) has one.
fn quota_cores() -> Option<f64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<f64> = None;
    for g in cgroup_dirs(&cgroups) {
        // From the process's cgroup up to the hierarchy's mount point.
        let mut dir = Some(g.dir.as_path());
        while let Some(p) = dir.filter(|p| p.starts_with(&g.mount)) {
            let q = if g.v2 {
                std::fs::read_to_string(p.join("cpu.max"))
                    .ok()
                    .and_then(|s| parse_cpu_max(&s))
            } else {
                let quota = std::fs::read_to_string(p.join("cpu.cfs_quota_us")).ok();
                let period = std::fs::read_to_string(p.join("cpu.cfs_period_us")).ok();
                quota.zip(period).and_then(|(q, p)| parse_cfs(&q, &p))
            };
            if let Some(q) = q {
                best = Some(best.map_or(q, |b| b.min(q)));
            }
            dir = p.parent();
        }
    }
    best
}

/// A cgroup that can hold a CPU quota: its directory, the mount point of
/// its hierarchy, and whether that is cgroup v2.
#[derive(Debug, PartialEq)]
struct Cgroup {
    dir: PathBuf,
    mount: PathBuf,
    v2: bool,
}

/// The cgroups in `/proc/self/cgroup` that can hold a CPU quota: the v2
/// one (`0::/path`) and the v1 `cpu` controller's.
fn cgroup_dirs(proc_cgroup: &str) -> Vec<Cgroup> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        let (mount, v2) = if id == "0" && ctrls.is_empty() {
            (Path::new("/sys/fs/cgroup"), true)
        } else if ctrls.split(',').any(|c| c == "cpu") {
            let Some(m) = ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"]
                .into_iter()
                .map(Path::new)
                .find(|m| m.is_dir())
            else {
                continue;
            };
            (m, false)
        } else {
            continue;
        };
        out.push(Cgroup {
            dir: mount.join(rel),
            mount: mount.to_path_buf(),
            v2,
        });
    }
    out
}

/// cgroup v2 `cpu.max`: "QUOTA PERIOD" or "max PERIOD".
fn parse_cpu_max(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// cgroup v1: quota (-1 for none) and period, in µs.
fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let quota: f64 = quota.trim().parse().ok()?;
    let period: f64 = period.trim().parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_and_cfs() {
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("garbage"), None);
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("250000\n", "100000\n"), Some(2.5));
    }

    #[test]
    fn shares() {
        assert_eq!(share(None, 4), 1.0);
        assert_eq!(share(Some(0.5), 1), 0.5);
        assert_eq!(share(Some(2.0), 4), 0.5);
        // More quota than shards: a core each at most.
        assert_eq!(share(Some(8.0), 2), 1.0);
    }

    #[test]
    fn which_cgroups() {
        let v2 = cgroup_dirs("0::/system.slice/corelay.service\n");
        assert_eq!(
            v2,
            vec![Cgroup {
                dir: PathBuf::from("/sys/fs/cgroup/system.slice/corelay.service"),
                mount: PathBuf::from("/sys/fs/cgroup"),
                v2: true,
            }]
        );
        // v1 lines without the cpu controller are not read.
        let v1 = cgroup_dirs("12:memory:/x\n3:pids:/y\n");
        assert!(v1.is_empty());
    }

    #[test]
    fn this_process_reads_without_failing() {
        // Whatever the machine's cgroups say, a quota is positive.
        assert!(quota_cores().is_none_or(|c| c > 0.0));
    }
}
