//! The one harness for integration tests that run the real `corelay`
//! binary: it finds the binary, picks free loopback ports, starts the
//! server with the test's arguments, waits until `/healthz` answers, keeps
//! the server's log, and kills the process when dropped. All traffic stays
//! on 127.0.0.1.
//!
//! Used as a dev-dependency only (the server's, corelay-bench's and
//! corelay-dwell's tests); never published. Must not: know the API beyond
//! what every test needs to reach it (URLs, JSON, a raw request), or speak
//! WebRTC (tests use `corelay-client` for that).

pub mod nats;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server may take to answer `/healthz` after it started.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The corelay binary for tests outside the server package (which has
/// `CARGO_BIN_EXE_corelay` and passes it to [`Server::start`]):
/// `$CORELAY_BIN`; else `corelay` in the calling test's own profile
/// directory (`target/<profile>/deps/<test>` → `target/<profile>/corelay`)
/// or in `$CARGO_TARGET_DIR/debug`; else it is built there with
/// `cargo build -p corelay --features fault-injection` (the tests' faults;
/// a workspace `cargo test --features corelay/fault-injection`, as
/// scripts/test runs it, builds it anyway).
pub fn corelay_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CORELAY_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "CORELAY_BIN={} is not a file", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test runs from target/<profile>/deps")
        .to_path_buf();
    let mut candidates = vec![profile_dir.join("corelay")];
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(t).join("debug/corelay"));
    }
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        return found.clone();
    }
    build_corelay(&profile_dir)
}

/// Builds corelay with cargo into the target directory above `profile_dir`,
/// in that profile.
fn build_corelay(profile_dir: &Path) -> PathBuf {
    let path = profile_dir.join("corelay");
    let target_dir = profile_dir.parent().expect("a target directory");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args(["build", "-p", "corelay", "--features", "fault-injection"])
        .env("CARGO_TARGET_DIR", target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    say(&format!(
        "corelay-testkit: building corelay into {} ({cmd:?})",
        target_dir.display()
    ));
    let status = cmd.status().expect("run cargo build -p corelay");
    assert!(status.success(), "cargo build -p corelay: {status}");
    assert!(path.is_file(), "{} missing after the build", path.display());
    path
}

/// The data-plane runtime the tests run corelay with: `$CORELAY_TEST_RUNTIME`
/// (`thread-per-core` or `work-stealing`), passed as `--runtime` by
/// [`Server::start`]; None (the server's default) when unset.
pub fn test_runtime() -> Option<String> {
    std::env::var("CORELAY_TEST_RUNTIME")
        .ok()
        .filter(|r| !r.is_empty())
}

/// Whether the tests run the work-stealing baseline.
pub fn work_stealing() -> bool {
    test_runtime().as_deref() == Some("work-stealing")
}

/// For a test that is about pinned shards (several shards, a shard's own
/// failure or ICE-TCP): true, with a `SKIPPED (work-stealing)` line naming
/// it and why, when the tests run the work-stealing baseline.
pub fn skip_in_work_stealing(test: &str, why: &str) -> bool {
    let skip = work_stealing();
    if skip {
        say(&format!("SKIPPED (work-stealing): {test}: {why}"));
    }
    skip
}

/// Writes past libtest's output capture (like the server's own log).
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// A free TCP port on 127.0.0.1 (probe then release: best effort).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a TCP port")
        .local_addr()
        .expect("its address")
        .port()
}

/// The first of `n` consecutive free UDP ports (a shard each; probe then
/// release: best effort).
pub fn free_udp_ports(n: usize) -> u16 {
    let n = u16::try_from(n).expect("a few shards");
    for _ in 0..200 {
        let base = fastrand::u16(20_000..60_000);
        // Each shard also listens on TCP at its UDP port number (ICE-TCP).
        let ok = (0..n).all(|i| {
            UdpSocket::bind(("0.0.0.0", base + i)).is_ok()
                && TcpListener::bind(("0.0.0.0", base + i)).is_ok()
        });
        if ok {
            return base;
        }
    }
    panic!("no free UDP port range");
}

/// A running corelay: killed when dropped.
pub struct Server {
    pub child: Child,
    /// The API's `host:port`.
    pub http: String,
    /// The Prometheus listener's `host:port`.
    pub metrics: String,
    /// The media port: every shard's with the default `--port-layout
    /// shared`; shard i's is `udp_base + i` with `--port-per-shard` (the
    /// range is reserved either way).
    pub udp_base: u16,
    pub shards: usize,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `bin` with `shards` shards (unpinned) on free loopback ports,
    /// plus `extra` arguments, and waits until it answers. Its log level is
    /// `$CORELAY_TEST_LOG` (default `warn`); the log goes to stderr and is
    /// kept ([`Server::log`]). The runtime is [`test_runtime`]'s unless
    /// `extra` names one.
    ///
    /// The ports are probed, then released for corelay to bind, so another
    /// test (or an outgoing connection) can take one in between: when
    /// corelay exits on start with "Address already in use", this starts it
    /// again on new ports, up to three times.
    pub fn start(bin: impl AsRef<Path>, shards: usize, extra: &[&str]) -> Server {
        let bin = bin.as_ref();
        let mut attempt = 1;
        loop {
            match Self::try_start(bin, shards, extra) {
                Ok(s) => return s,
                Err(log) if attempt < 3 && log.contains("Address already in use") => {
                    say(&format!(
                        "testkit: a probed port was taken before corelay bound it (attempt {attempt}); new ports"
                    ));
                    attempt += 1;
                }
                Err(log) => panic!("{log}"),
            }
        }
    }

    /// One start; `Err` is what to report when corelay exited on start.
    fn try_start(bin: &Path, shards: usize, extra: &[&str]) -> Result<Server, String> {
        let http = format!("127.0.0.1:{}", free_tcp_port());
        let metrics = format!("127.0.0.1:{}", free_tcp_port());
        let udp_base = free_udp_ports(shards);
        let log_level = std::env::var("CORELAY_TEST_LOG").unwrap_or_else(|_| "warn".into());
        let runtime = test_runtime()
            .filter(|_| !extra.contains(&"--runtime"))
            .map(|r| vec!["--runtime".to_string(), r])
            .unwrap_or_default();
        // Loopback unless the test names its own addresses.
        let addr = |flag: &'static str| {
            (!extra.contains(&flag))
                .then_some([flag, "127.0.0.1"])
                .into_iter()
                .flatten()
        };
        let mut child = Command::new(bin)
            .args(["--http", &http])
            .args(addr("--public-ip"))
            .args(addr("--bind-ip"))
            .args(["--udp-port", &udp_base.to_string()])
            .args(["--metrics", &metrics, "--shards", &shards.to_string()])
            .arg("--no-pin")
            .args(
                (!extra.contains(&"--log"))
                    .then_some(["--log", log_level.as_str()])
                    .into_iter()
                    .flatten(),
            )
            .args(&runtime)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    say(&line);
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let mut s = Server {
            child,
            http,
            metrics,
            udp_base,
            shards,
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while ureq::get(&s.url("/healthz")).call().is_err() {
            if let Ok(Some(st)) = s.child.try_wait() {
                // The reader thread may still be taking the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return Err(format!(
                    "corelay exited with {st} on start:\n{}",
                    s.log().join("\n")
                ));
            }
            assert!(Instant::now() < deadline, "corelay did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://host:port`.
    pub fn base(&self) -> String {
        format!("http://{}", self.http)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// The server's log lines so far (stderr).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// GET of a JSON document (panics unless 2xx).
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let body = ureq::get(&self.url(path))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .into_body()
            .read_to_string()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// Any request, redirects not followed (a cluster node's 307 is what a
    /// test looks at); returns (status, headers as lowercase name -> value,
    /// body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(15)))
            .build()
            .into();
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut res = agent
            .run(req.body(body.to_string()).expect("a request"))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = res.status().as_u16();
        let hs = res
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = res.body_mut().read_to_string().unwrap_or_default();
        (status, hs, body)
    }

    /// The Prometheus exposition.
    pub fn scrape(&self) -> String {
        ureq::get(&format!("http://{}/metrics", self.metrics))
            .call()
            .expect("GET /metrics")
            .into_body()
            .read_to_string()
            .expect("the /metrics body")
    }

    /// A counter of `/api/v1/stats`' `total`.
    pub fn stats_total(&self, field: &str) -> u64 {
        self.get_json("/api/v1/stats")["total"][field]
            .as_u64()
            .unwrap_or_else(|| panic!("total.{field} is not a number"))
    }

    /// Waits up to `timeout` for a shard report in which `pred` holds;
    /// returns the last stats document either way.
    pub fn wait_stats(
        &self,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.get_json("/api/v1/stats");
            if pred(&s) || Instant::now() > deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, and the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait for corelay") {
                return st;
            }
            assert!(Instant::now() < deadline, "corelay did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
