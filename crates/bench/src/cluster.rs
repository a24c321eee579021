//! The `cluster` scenario's cluster: one nats-server (JetStream, a store of
//! its own) and `nodes` corelay nodes on loopback ports of this machine,
//! sharing a cluster secret, started, formed (each node's
//! `GET /api/v1/cluster` lists all of them) and stopped again. Every wait is
//! bounded; everything started is killed on the way out, also on error.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corelay_client::signal;

/// How long nats-server may take to listen.
const NATS_LISTEN: Duration = Duration::from_secs(10);
/// How long a node may take to answer /healthz.
const NODE_UP: Duration = Duration::from_secs(15);
/// How long a node may take to stop after SIGTERM before it is killed.
const NODE_STOP: Duration = Duration::from_secs(5);

/// What the participants do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Rooms of --room-size, every member publishing and receiving all.
    Rooms,
    /// One room: one publisher, --viewers who only receive.
    Webinar,
}

impl Shape {
    /// Its name in summary.json.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Rooms => "rooms",
            Shape::Webinar => "webinar",
        }
    }
}

/// How to start the cluster.
#[derive(Debug, Clone)]
pub struct Spec {
    /// corelay nodes.
    pub nodes: usize,
    /// Shards per node.
    pub shards: usize,
    /// The corelay binary.
    pub server_bin: PathBuf,
    /// The nats-server binary (None: not installed).
    pub nats_bin: Option<PathBuf>,
    /// Extra flags for every node.
    pub node_args: Vec<String>,
    /// The nodes' log level.
    pub node_log: String,
    /// The nodes' --auth-secret (the bench mints its tokens with it).
    pub auth_secret: Option<Vec<u8>>,
    /// Logs, the secret file and nats-server's store go here.
    pub dir: PathBuf,
    /// How long the nodes may take to list each other.
    pub form_timeout: Duration,
}

/// `$CORELAY_BIN`, else `corelay` beside this binary (cargo puts both in
/// target/<profile>/; `scripts/bench` runs $CARGO_TARGET_DIR/release/).
pub fn default_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CORELAY_BIN") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("corelay")))
        .unwrap_or_else(|| PathBuf::from("corelay"))
}

/// nats-server on PATH, else Debian's /usr/sbin/nats-server.
pub fn nats_binary() -> Option<PathBuf> {
    let on_path = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        return Some(PathBuf::from("nats-server"));
    }
    let debian = Path::new("/usr/sbin/nats-server");
    debian.exists().then(|| debian.to_path_buf())
}

struct Node {
    id: String,
    child: Child,
    http: String,
    log: PathBuf,
}

/// A running cluster: stopped by [`Cluster::stop`], or killed when dropped.
pub struct Cluster {
    nats: Option<Child>,
    nats_port: u16,
    nodes: Vec<Node>,
    dir: PathBuf,
}

fn free_tcp_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free TCP port: {e}"))
}

/// The first of `n` consecutive free ports (UDP, and TCP too when `tcp`:
/// a shard also listens on TCP at its UDP port for ICE-TCP). Probed, then
/// released: best effort, like the tests' ports.
fn free_ports(n: usize, tcp: bool, rng: &mut fastrand::Rng) -> Result<u16, String> {
    let n = u16::try_from(n).map_err(|_| "too many shards".to_string())?;
    for _ in 0..200 {
        let base = rng.u16(20_000..60_000);
        let ok = (0..n).all(|i| {
            UdpSocket::bind(("127.0.0.1", base + i)).is_ok()
                && (!tcp || TcpListener::bind(("127.0.0.1", base + i)).is_ok())
        });
        if ok {
            return Ok(base);
        }
    }
    Err("no free UDP port range".into())
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl Cluster {
    /// Starts nats-server and the nodes, and waits until every node lists
    /// every other. On error, whatever was started is stopped again.
    pub fn start(spec: &Spec) -> Result<Cluster, String> {
        let nats_bin = spec.nats_bin.clone().ok_or(
            "nats-server is not installed (not on PATH, not at /usr/sbin/nats-server): \
             `apt-get install -y nats-server`",
        )?;
        let _ = std::fs::remove_dir_all(&spec.dir);
        let store = spec.dir.join("nats-store");
        std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
        let mut c = Cluster {
            nats: None,
            nats_port: free_tcp_port()?,
            nodes: Vec::new(),
            dir: spec.dir.clone(),
        };
        let nats_log = spec.dir.join("nats.log");
        let log = File::create(&nats_log).map_err(|e| format!("{}: {e}", nats_log.display()))?;
        let child = Command::new(&nats_bin)
            .args(["-js", "-sd"])
            .arg(&store)
            .args(["-p", &c.nats_port.to_string(), "-a", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {}: {e}", nats_bin.display()))?;
        c.nats = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], c.nats_port));
        let deadline = Instant::now() + NATS_LISTEN;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "nats-server did not listen on {addr} within {NATS_LISTEN:?}: {}",
                    tail(&nats_log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }

        // The shared secret: random, in a file only we read.
        let secret_file = spec.dir.join("cluster-secret");
        let mut rng = fastrand::Rng::new();
        let secret: String = (0..64)
            .map(|_| char::from_digit(rng.u32(..16), 16).unwrap_or('0'))
            .collect();
        std::fs::write(&secret_file, format!("{secret}\n"))
            .map_err(|e| format!("{}: {e}", secret_file.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600));
        }
        let auth_file = match &spec.auth_secret {
            Some(s) => {
                let f = spec.dir.join("auth-secret");
                std::fs::write(&f, s).map_err(|e| format!("{}: {e}", f.display()))?;
                Some(f)
            }
            None => None,
        };
        for k in 0..spec.nodes {
            let node = c.start_node(spec, k, &secret_file, auth_file.as_deref(), &mut rng)?;
            c.nodes.push(node);
        }
        c.wait_formed(spec)?;
        Ok(c)
    }

    /// One node (new ports up to three times when a probed port was taken
    /// before the node bound it).
    fn start_node(
        &self,
        spec: &Spec,
        k: usize,
        secret_file: &Path,
        auth_file: Option<&Path>,
        rng: &mut fastrand::Rng,
    ) -> Result<Node, String> {
        let id = format!("n{k}");
        let log_path = self.dir.join(format!("node-{id}.log"));
        let mut attempt = 1;
        loop {
            let http = format!("127.0.0.1:{}", free_tcp_port()?);
            let metrics = format!("127.0.0.1:{}", free_tcp_port()?);
            let udp = free_ports(spec.shards, true, rng)?;
            let relay = free_ports(spec.shards, false, rng)?;
            let log =
                File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
            let err = log
                .try_clone()
                .map_err(|e| format!("{}: {e}", log_path.display()))?;
            let mut cmd = Command::new(&spec.server_bin);
            cmd.args(["--http", &http, "--metrics", &metrics])
                .args(["--udp-port", &udp.to_string()])
                .args(["--shards", &spec.shards.to_string(), "--no-pin"])
                .args(["--public-ip", "127.0.0.1", "--bind-ip", "127.0.0.1"])
                .args(["--log", &spec.node_log, "--video-codecs", "h264"])
                .args(["--cluster", &format!("nats://127.0.0.1:{}", self.nats_port)])
                .args(["--node-id", &id])
                .args(["--relay-addr", &format!("127.0.0.1:{relay}")])
                .arg("--cluster-secret-file")
                .arg(secret_file);
            if let Some(f) = auth_file {
                cmd.arg("--auth-secret-file").arg(f);
            }
            let mut child = cmd
                .args(&spec.node_args)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("start {}: {e}", spec.server_bin.display()))?;
            let base = format!("http://{http}");
            let addr: SocketAddr = http.parse().map_err(|e| format!("{http}: {e}"))?;
            let deadline = Instant::now() + NODE_UP;
            // Listening is enough here: whether it serves is what the
            // cluster view shows next.
            let up = loop {
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break Ok(());
                }
                if let Ok(Some(st)) = child.try_wait() {
                    break Err(format!("exited with {st}"));
                }
                if Instant::now() > deadline {
                    break Err(format!("did not answer within {NODE_UP:?}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            match up {
                Ok(()) => {
                    return Ok(Node {
                        id,
                        child,
                        http: base,
                        log: log_path,
                    });
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = tail(&log_path);
                    if attempt < 3 && log.contains("Address already in use") {
                        attempt += 1;
                        continue;
                    }
                    return Err(format!(
                        "node {id} ({}) {why}; its log:\n{log}",
                        spec.server_bin.display()
                    ));
                }
            }
        }
    }

    /// Waits until every node's `GET /api/v1/cluster` lists every node.
    fn wait_formed(&mut self, spec: &Spec) -> Result<(), String> {
        let token = spec.auth_secret.as_deref().and_then(|s| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            signal::mint_claims(
                s,
                &serde_json::json!({"sub": "bench-cluster", "admin": true, "iat": now, "exp": now + 600}),
            )
            .ok()
        });
        let mut want: Vec<String> = self.nodes.iter().map(|n| n.id.clone()).collect();
        want.sort_unstable();
        let deadline = Instant::now() + spec.form_timeout;
        let mut last = String::new();
        loop {
            let mut all = true;
            for n in &self.nodes {
                let seen =
                    signal::get_json_auth(&n.http, "/api/v1/cluster", token.as_deref()).map(|v| {
                        let mut ids: Vec<String> = v["nodes"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|x| x["node_id"].as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        ids.sort_unstable();
                        ids
                    });
                match seen {
                    Ok(ids) if ids == want => {}
                    Ok(ids) => {
                        all = false;
                        last = format!("{} lists {ids:?}", n.id);
                    }
                    Err(e) => {
                        all = false;
                        last = format!("{}: {e}", n.id);
                    }
                }
            }
            if all {
                return Ok(());
            }
            for n in &mut self.nodes {
                if let Ok(Some(st)) = n.child.try_wait() {
                    return Err(format!(
                        "node {} exited with {st}; its log:\n{}",
                        n.id,
                        tail(&n.log)
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the nodes did not all list each other within {:?}: {last}",
                    spec.form_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The nodes' base URLs, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.http.clone()).collect()
    }

    /// The nodes' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.child.id()).collect()
    }

    /// nats-server's URL.
    pub fn nats_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.nats_port)
    }

    /// Stops the nodes (SIGTERM, then SIGKILL after [`NODE_STOP`]) and
    /// nats-server; what went wrong on the way (a node that had died
    /// before), empty when nothing did.
    pub fn stop(mut self) -> String {
        let mut notes = Vec::new();
        for n in &mut self.nodes {
            if let Ok(Some(st)) = n.child.try_wait() {
                notes.push(format!(
                    "node {} had exited with {st} before the end; see {}",
                    n.id,
                    n.log.display()
                ));
            } else if let Ok(pid) = i32::try_from(n.child.id()) {
                // SAFETY: kill(2) on our own child's pid.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + NODE_STOP;
        for n in &mut self.nodes {
            while matches!(n.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill_all();
        notes.join("; ")
    }

    fn kill_all(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        if let Some(mut nats) = self.nats.take() {
            let _ = nats.kill();
            let _ = nats.wait();
        }
        let _ = std::fs::remove_dir_all(self.dir.join("nats-store"));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
