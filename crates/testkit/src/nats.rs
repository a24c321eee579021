//! A nats-server of one test's own (Debian's `nats-server` 2.9 with
//! JetStream, the cluster's engine): on a free loopback port, with its store
//! and log in a directory of its own, stopped, restarted (the same port and
//! store, or an empty store) as the test needs, killed and removed when
//! dropped.
//!
//! Without nats-server installed, [`Nats::start`] fails the test, naming
//! the package, unless `SKIP_NATS=1` is set: then it says SKIPPED and
//! returns `None`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_tcp_port;

/// Where Debian puts it, for a user whose PATH lacks /usr/sbin.
const DEBIAN_PATH: &str = "/usr/sbin/nats-server";
/// How long it may take to listen after it started.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The nats-server binary: on PATH, or Debian's.
pub fn binary() -> Option<PathBuf> {
    let on_path = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if on_path {
        return Some(PathBuf::from("nats-server"));
    }
    Path::new(DEBIAN_PATH)
        .exists()
        .then(|| PathBuf::from(DEBIAN_PATH))
}

pub struct Nats {
    binary: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Nats {
    /// Starts one for `test` (a short name, for its directory and the
    /// SKIPPED line); `None`: the test is to be skipped.
    pub fn start(test: &str) -> Option<Self> {
        let mut nats = Self::stopped(test)?;
        nats.run();
        Some(nats)
    }

    /// One with its port and directory, not running yet ([`Nats::run`]
    /// starts it): for a test of what happens before NATS is up.
    pub fn stopped(test: &str) -> Option<Self> {
        let Some(binary) = binary() else {
            if std::env::var_os("SKIP_NATS").is_some_and(|v| v == "1") {
                eprintln!("SKIPPED {test}: nats-server is not installed (SKIP_NATS=1)");
                return None;
            }
            panic!(
                "nats-server is not installed (not on PATH, not at {DEBIAN_PATH}): \
                 `apt-get install -y nats-server` (scripts/test does), \
                 or set SKIP_NATS=1 to skip the tests that need it"
            );
        };
        let port = free_tcp_port();
        let dir =
            std::env::temp_dir().join(format!("corelay-nats-{test}-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("store")).expect("create the store directory");
        Some(Nats {
            binary,
            port,
            dir,
            child: None,
        })
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its own directory (the store is `store/` in it): a test may keep
    /// files of its own there, removed with it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nats.log")).unwrap_or_default()
    }

    /// Kills it (SIGKILL); [`Nats::restart`] brings it back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// Starts it again on the same port with an empty store (a server that
    /// lost its disk).
    pub fn restart_empty(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(self.dir.join("store"));
        std::fs::create_dir_all(self.dir.join("store")).expect("create the store directory");
        self.run();
    }

    /// Starts it (on its port and store) and waits until it listens.
    pub fn run(&mut self) {
        self.stop();
        let log = std::fs::File::create(self.dir.join("nats.log")).expect("create the log");
        let child = Command::new(&self.binary)
            .args(["-js", "-sd"])
            .arg(self.dir.join("store"))
            .args(["-p", &self.port.to_string(), "-a", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen on {addr} within {LISTEN_TIMEOUT:?}; its log: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
