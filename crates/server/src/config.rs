//! Command-line flags (each with a `CORELAY_*` environment variable) and the
//! defaults that make a bare `corelay` work on a laptop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use corelay_core::VideoCodec;
use corelay_core::faults::Faults;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "corelay",
    version,
    about = "corelay: a thread-per-core WebRTC SFU. Open the HTTP address in a browser for the demo page."
)]
pub struct Config {
    /// HTTP listen address: signaling API, WHIP/WHEP and the demo page.
    #[arg(long, env = "CORELAY_HTTP", default_value = "0.0.0.0:7070")]
    pub http: SocketAddr,

    /// The UDP media port, shared by every shard (`--port-layout shared`,
    /// the default); with `--port-per-shard`, the first: shard i listens on
    /// udp-port + i.
    #[arg(long, env = "CORELAY_UDP_PORT", default_value_t = 3478)]
    pub udp_port: u16,

    /// `shared` (the default): every shard listens on udp-port itself
    /// (SO_REUSEPORT), so clients and firewalls see one UDP port; an eBPF
    /// program steers each datagram to its flow's shard (a STUN request by
    /// its ufrag, the rest by source address), and a shard hands what
    /// reached the wrong one over to its owner (counted as `handed_over`).
    /// If the program cannot be loaded (no CAP_BPF, an old kernel), the
    /// server warns and falls back to `per-shard`. `per-shard`: shard i
    /// listens on UDP udp-port + i. ICE-TCP keeps a port per shard (TCP
    /// udp-port + i) either way.
    #[arg(long, env = "CORELAY_PORT_LAYOUT", value_enum, default_value_t = PortLayout::Shared)]
    pub port_layout: PortLayout,

    /// A UDP port per shard (udp-port + i): `--port-layout per-shard`.
    #[arg(long, env = "CORELAY_PORT_PER_SHARD")]
    pub port_per_shard: bool,

    /// With the shared port: no eBPF steering; the kernel spreads flows over
    /// the shards' sockets by hash and the shards hand over what is
    /// another's (one hop per datagram for about (n-1)/n of the flows).
    #[arg(long, env = "CORELAY_NO_PORT_STEERING")]
    pub no_port_steering: bool,

    /// Address the media sockets bind to.
    #[arg(long, env = "CORELAY_BIND_IP", default_value = "0.0.0.0")]
    pub bind_ip: IpAddr,

    /// IP address put in ICE candidates: what clients send media to. Default:
    /// this machine's first up, non-loopback IPv4 address (in interface
    /// order), or 127.0.0.1 when there is none. Media sockets bound to a
    /// wildcard address send from it when it is this machine's.
    #[arg(long, env = "CORELAY_PUBLIC_IP")]
    pub public_ip: Option<IpAddr>,

    /// Number of shards (data-plane threads, one per core). Default: one per
    /// available core.
    #[arg(long, env = "CORELAY_SHARDS")]
    pub shards: Option<usize>,

    /// The data plane's runtime. `thread-per-core` (the default): one pinned
    /// shard thread per core, each with its own socket and engine, a packet
    /// handled from socket to socket without a channel. `work-stealing`: the
    /// comparison baseline, one tokio multi-thread runtime with `--shards`
    /// workers, a task per participant, media between tasks over channels,
    /// one UDP socket, no ICE-TCP (docs/architecture.md, "The work-stealing
    /// baseline").
    #[arg(long, env = "CORELAY_RUNTIME", value_enum, default_value_t = Runtime::ThreadPerCore)]
    pub runtime: Runtime,

    /// Admission control: participants one shard may host.
    #[arg(
        long,
        env = "CORELAY_MAX_PARTICIPANTS_PER_SHARD",
        default_value_t = 500
    )]
    pub max_participants_per_shard: usize,

    /// Admission control: a shard busier than this fraction of its time
    /// (measured over the last 250 ms) takes no new participants. Under a
    /// cgroup CPU quota (a container's CPU limit) the fraction is of the
    /// shard's share of the quota, not of a whole core.
    #[arg(long, env = "CORELAY_MAX_SHARD_LOAD", default_value_t = 0.85)]
    pub max_shard_load: f64,

    /// Video codecs to forward (vp8, h264, vp9, av1), most preferred first.
    /// Each room uses one (and Opus): the first of these that its first
    /// video publisher offers; later members must send and receive it.
    /// VP8 and H.264 come first because every browser joins a room of
    /// either; a publisher that offers only VP9 or AV1 (the demo page's
    /// `?codec=vp9`) gets SVC, in a room that browsers without that
    /// decoder cannot join. `--video-codec` is an alias.
    #[arg(
        long,
        visible_alias = "video-codec",
        env = "CORELAY_VIDEO_CODECS",
        value_delimiter = ',',
        num_args = 1..,
        default_value = "vp8,h264,vp9,av1"
    )]
    pub video_codecs: Vec<VideoCodec>,

    /// Prometheus metrics listener (path /metrics). "off" disables it.
    #[arg(long, env = "CORELAY_METRICS", default_value = "127.0.0.1:6060")]
    pub metrics: String,

    /// Turn off the per-packet latency figures (socket dwell via SO_TIMESTAMPNS,
    /// forwarding latency). They are on by default and cost little; this
    /// exists to measure exactly how little.
    #[arg(long, env = "CORELAY_NO_PACKET_METRICS")]
    pub no_packet_metrics: bool,

    /// Send and read every datagram on its own. By default a subscriber's
    /// consecutive datagrams of one size (a video frame's packets) leave in
    /// one UDP GSO message, and a sender's runs of them are read as one
    /// (UDP GRO), where the kernel supports it (Linux 5.0+); a device that
    /// refuses GSO gets the datagrams one by one.
    #[arg(long, env = "CORELAY_NO_UDP_OFFLOAD")]
    pub no_udp_offload: bool,

    /// Testing only: stall a shard's loop every N datagrams (see --test-stall-ms).
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_STALL_EVERY", hide = true)]
    pub test_stall_every: Option<u64>,

    /// Testing only: how long each stall lasts, in milliseconds.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_STALL_MS", hide = true, default_value_t = 5)]
    pub test_stall_ms: u64,

    /// Testing only: a recording's thread stalls this long (milliseconds)
    /// after its first packet, as on a hung disk.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_RECORDER_STALL_MS", hide = true)]
    pub test_recorder_stall_ms: Option<u64>,

    /// Testing only: the packets a recording's queue holds.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_RECORDING_QUEUE", hide = true)]
    pub test_recording_queue: Option<usize>,

    /// Testing only: loading the shared port's steering program fails.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_STEER_FAIL", hide = true)]
    pub test_steer_fail: bool,

    /// Do not offer ICE-TCP. By default each shard also listens on TCP at its
    /// UDP port number and offers it as a passive candidate (RFC 6544), for
    /// clients whose network blocks UDP.
    #[arg(long, env = "CORELAY_NO_ICE_TCP")]
    pub no_ice_tcp: bool,

    /// ICE-TCP: time a new connection has to carry a STUN check (or other
    /// frame) that the server accepts for a known participant; one that has
    /// not by then is closed (e.g. 5s, 500ms).
    #[arg(long, env = "CORELAY_ICE_TCP_AUTH_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub ice_tcp_auth_timeout: Duration,

    /// ICE-TCP: connections per client IP address per shard; more are
    /// closed at accept and do not take any of the shard's slots.
    #[arg(long, env = "CORELAY_ICE_TCP_MAX_CONNS_PER_IP", default_value_t = crate::shard::tcp::MAX_CONNS_PER_IP, value_parser = parse_positive)]
    pub ice_tcp_max_conns_per_ip: usize,

    /// Where each participant's downlink estimate starts, in kbit/s. The
    /// estimate (send-side BWE from the client's TWCC feedback, with probing
    /// and pacing) decides which simulcast layer each slot gets.
    #[arg(long, env = "CORELAY_BWE_START_KBPS", default_value_t = 300)]
    pub bwe_start_kbps: u64,

    /// No downlink estimate: every slot gets the best simulcast layer its
    /// rendered size allows, and nothing is paced or probed.
    #[arg(long, env = "CORELAY_NO_BWE")]
    pub no_bwe: bool,

    /// Do not pin shard threads to cores.
    #[arg(long, env = "CORELAY_NO_PIN")]
    pub no_pin: bool,

    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "corelay=debug".
    /// str0m and the crates it reads the network with (is, dimpl,
    /// sctp_proto, ...) log at ERROR only unless the filter names them, and
    /// every place in the code writes at most 10 lines a second at INFO and
    /// above (docs/operations.md, Logs).
    #[arg(long, env = "CORELAY_LOG", default_value = "info")]
    pub log: String,

    /// Log line format, text or json (one JSON object per line, for log
    /// collectors). Text has colours only on a terminal and without NO_COLOR.
    #[arg(long, env = "CORELAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Largest SDP offer accepted, in bytes (larger: 413).
    #[arg(long, env = "CORELAY_MAX_SDP_BYTES", default_value_t = 64 * 1024)]
    pub max_sdp_bytes: usize,

    /// Most m-lines (tracks, slots and the data channel) in one offer.
    #[arg(long, env = "CORELAY_MAX_MLINES", default_value_t = 64)]
    pub max_mlines: usize,

    /// Most participants in one room (more: 409 room_full).
    #[arg(long, env = "CORELAY_MAX_PARTICIPANTS_PER_ROOM", default_value_t = 100)]
    pub max_participants_per_room: usize,

    /// Most rooms open at once (more: 503 with Retry-After).
    #[arg(long, env = "CORELAY_MAX_ROOMS", default_value_t = 10_000)]
    pub max_rooms: usize,

    /// Most remote addresses (ICE-verified) one participant may send from.
    #[arg(long, env = "CORELAY_MAX_ADDRS_PER_PARTICIPANT", default_value_t = 8)]
    pub max_addrs_per_participant: usize,

    /// Data-channel requests (pin, unpin, …) per second per participant;
    /// bursts of twice that. Excess requests are dropped and counted.
    #[arg(long, env = "CORELAY_MAX_REQUESTS_PER_SECOND", default_value_t = 20)]
    pub max_requests_per_second: u32,

    /// The largest application message a participant may send on its data
    /// channel (the whole request, bytes); a larger one is refused with an
    /// `error` event. SCTP carries at most 256 KiB.
    #[arg(long, env = "CORELAY_MAX_MESSAGE_BYTES", default_value_t = 16 * 1024, value_parser = clap::value_parser!(u32).range(1024..=262_144))]
    pub max_message_bytes: u32,

    /// Where recordings go (`POST /api/v1/rooms/{room}/recordings`): one
    /// WebM file per track under DIR/ROOM/ID/, with a `recording.json`.
    #[arg(long, env = "CORELAY_RECORDINGS_DIR", default_value = "./recordings")]
    pub recordings_dir: std::path::PathBuf,

    /// Recordings that may run at once; another is refused with 429.
    #[arg(long, env = "CORELAY_MAX_RECORDINGS", default_value_t = 4)]
    pub max_recordings: usize,

    /// A participant whose ICE and DTLS are not up this long after its join
    /// is removed and its admission slot freed (e.g. 15s, 500ms).
    #[arg(long, env = "CORELAY_CONNECT_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// A participant whose connection went down (ICE consent failed: about
    /// 14 s without a word from it) keeps its place in rosters and slots
    /// this long before it is removed, so that a client back within it (an
    /// ICE restart, a new address) finds its call unchanged and the others
    /// see no leave and join. 0 removes it at once.
    #[arg(long, env = "CORELAY_RECONNECT_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub reconnect_grace: Duration,

    /// HTTP: time a client has to send a request's headers, and how long an
    /// idle keep-alive connection waits for its next request.
    #[arg(long, env = "CORELAY_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_header_timeout: Duration,

    /// HTTP: a connection whose client takes none of the response for this
    /// long (a client that does not read) is closed.
    #[arg(long, env = "CORELAY_HTTP_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_write_timeout: Duration,

    /// HTTP: open connections per client IP address; more are closed at
    /// accept.
    #[arg(long, env = "CORELAY_HTTP_MAX_CONNS_PER_IP", default_value_t = crate::control::serve::MAX_CONNS_PER_IP, value_parser = parse_positive)]
    pub http_max_conns_per_ip: usize,

    /// HTTP: time a client has to send a request's body.
    #[arg(long, env = "CORELAY_HTTP_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_body_timeout: Duration,

    /// On SIGTERM/ctrl-c: how long to wait for connections to close before
    /// exiting anyway.
    #[arg(long, env = "CORELAY_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// What to do when a shard thread dies (a bug; no client input should
    /// cause it): `exit` stops the process with status 1 so that a supervisor
    /// (systemd, Kubernetes) restarts it with every core; `continue` keeps
    /// serving on the other shards, with /healthz reporting 503.
    #[arg(long, env = "CORELAY_ON_SHARD_FAILURE", value_enum, default_value_t = ShardFailure::Exit)]
    pub on_shard_failure: ShardFailure,

    /// Testing only: a participant with this display name panics inside its
    /// own handling once connected (fault isolation).
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_PANIC_PARTICIPANT", hide = true)]
    pub test_panic_participant: Option<String>,

    /// Testing only: the shard that gets a participant of this room panics
    /// outside any participant (a shard failure).
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "CORELAY_TEST_FAIL_SHARD_ROOM", hide = true)]
    pub test_fail_shard_room: Option<String>,

    /// Require access tokens (JWT, HS256, signed with this secret) on the
    /// API; mint them with `corelay token`. Without it the API is open.
    #[arg(
        long,
        env = "CORELAY_AUTH_SECRET",
        hide_env_values = true,
        conflicts_with = "auth_secret_file"
    )]
    pub auth_secret: Option<Secret>,

    /// Read the --auth-secret from this file (one trailing newline trimmed).
    #[arg(long, env = "CORELAY_AUTH_SECRET_FILE")]
    pub auth_secret_file: Option<PathBuf>,

    /// Web origins (scheme://host[:port]) whose pages may call the API from a
    /// browser (CORS); repeat or separate with commas; "*" allows any. The
    /// server's own pages need none.
    #[arg(
        long = "cors-origin",
        env = "CORELAY_CORS_ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,

    /// Join a cluster: the NATS server (JetStream on) that holds the node
    /// directory, `nats://HOST:PORT`. Without it corelay is one node and
    /// connects nowhere. With it, joins this node refuses for capacity (and
    /// every join while it drains) are redirected (307) to the least loaded
    /// node with room (docs/operations.md, "Running a cluster").
    #[arg(long, env = "CORELAY_CLUSTER")]
    pub cluster: Option<String>,

    /// This node's name in the cluster (letters, digits, `-`, `_`, `=`, `.`,
    /// `/`). Default: the host name, or a random `node-…` when the host name
    /// cannot be one. Two nodes on one host need one each.
    #[arg(long, env = "CORELAY_NODE_ID")]
    pub node_id: Option<String>,

    /// The address other nodes reach this node's relay at, IP:PORT
    /// (required with --cluster; announced in the directory, not yet bound:
    /// media does not cross nodes yet).
    #[arg(long, env = "CORELAY_RELAY_ADDR")]
    pub relay_addr: Option<SocketAddr>,

    /// The file holding the secret every node of the cluster shares
    /// (required with --cluster; at least 16 bytes, trailing whitespace
    /// trimmed). Never logged.
    #[arg(long, env = "CORELAY_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,

    /// The base URL other nodes put in the `Location` of a redirect to this
    /// node (`http://10.0.0.2:7070`). Default: `http://` and the --http
    /// address (its port as bound, the advertised IP when it is a wildcard).
    #[arg(long, env = "CORELAY_ADVERTISE_HTTP")]
    pub advertise_http: Option<String>,

    /// A TURN server the clients may relay through (coturn with
    /// use-auth-secret), as a `turn:` or `turns:` URI:
    /// `turn:HOST:3478?transport=udp`, `turns:HOST:443?transport=tcp`.
    /// Repeat for each. Handed out with per-participant credentials (WHIP/WHEP
    /// `Link` headers, `GET /api/v1/ice-servers`); needs --turn-secret-file.
    #[arg(long = "turn-url", env = "CORELAY_TURN_URL", value_delimiter = ',')]
    pub turn_urls: Vec<String>,

    /// The file holding coturn's static-auth-secret (one trailing newline
    /// trimmed). Never logged.
    #[arg(long, env = "CORELAY_TURN_SECRET_FILE")]
    pub turn_secret_file: Option<PathBuf>,

    /// How long minted TURN credentials are valid: s, m, h or d.
    #[arg(long, env = "CORELAY_TURN_TTL", default_value = "1h", value_parser = parse_ttl)]
    pub turn_ttl: Duration,

    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// `corelay <command>`; without one, `corelay` runs the server.
#[derive(Subcommand, Debug, Clone)]
pub enum Cmd {
    /// Print an access token (JWT, HS256) for the API on stdout.
    Token(TokenArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TokenArgs {
    /// The server's --auth-secret.
    #[arg(long, env = "CORELAY_AUTH_SECRET", hide_env_values = true)]
    pub secret: Secret,
    /// The room the token grants (required unless --admin).
    #[arg(long, required_unless_present = "admin")]
    pub room: Option<String>,
    /// The participant's identity (the token's `sub`).
    #[arg(long)]
    pub identity: String,
    /// Display name (default: the join's ?name=, else a guest name).
    #[arg(long)]
    pub name: Option<String>,
    /// Server administrator: every room and participant, listings and stats.
    #[arg(long)]
    pub admin: bool,
    /// May not publish.
    #[arg(long)]
    pub no_publish: bool,
    /// May not receive.
    #[arg(long)]
    pub no_subscribe: bool,
    /// May not send application messages on the data channel.
    #[arg(long)]
    pub no_publish_data: bool,
    /// Validity: a number with s, m, h or d (30s, 15m, 1h, 2d).
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    pub ttl: Duration,
}

/// A secret from the command line: never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            Err("the secret is empty".into())
        } else {
            Ok(Secret(s.to_string()))
        }
    }
}

/// `30s`, `15m`, `1h`, `2d` (a bare number is seconds).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number and s, m, h or d, e.g. 15m"))?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d")),
    };
    match secs {
        Some(0) => Err("the ttl must be positive".into()),
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => Err(format!("{s:?} is too long")),
    }
}

/// A count of at least 1 (a connection cap).
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// A duration flag: `500ms`, or anything [`parse_ttl`] takes (`15s`, `2m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match s.trim().strip_suffix("ms") {
        Some(ms) => ms
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| format!("{s:?}: expected a positive number of ms, e.g. 500ms")),
        None => parse_ttl(s),
    }
}

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The data plane's runtime (`--runtime`).
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Runtime {
    /// One pinned shard thread per core (docs/design.md).
    ThreadPerCore,
    /// The baseline the design moved away from: tasks and channels on a
    /// work-stealing tokio runtime (the `corelay-ws` crate).
    WorkStealing,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ShardFailure {
    Exit,
    Continue,
}

impl Config {
    /// `--video-codecs` in order, each once.
    /// The tests' faults from the `--test-*` flags, which exist only in a
    /// `fault-injection` build ([`Faults`]).
    #[cfg(feature = "fault-injection")]
    pub fn faults(&self) -> Faults {
        Faults::new(
            self.test_panic_participant.clone(),
            self.test_fail_shard_room.clone(),
            self.test_stall_every
                .map(|every| (every, Duration::from_millis(self.test_stall_ms))),
        )
    }

    /// No faults: this build has no `fault-injection` feature.
    #[cfg(not(feature = "fault-injection"))]
    pub fn faults(&self) -> Faults {
        Faults
    }

    /// The recorder's test faults: its stall after the first packet, its
    /// queue's size (`--test-recorder-stall-ms`, `--test-recording-queue`).
    #[cfg(feature = "fault-injection")]
    pub fn recorder_faults(&self) -> (Duration, usize) {
        (
            Duration::from_millis(self.test_recorder_stall_ms.unwrap_or(0)),
            self.test_recording_queue
                .unwrap_or(crate::recorder::QUEUE_PACKETS)
                .max(1),
        )
    }

    /// No stall, the real queue: this build has no `fault-injection`.
    #[cfg(not(feature = "fault-injection"))]
    pub fn recorder_faults(&self) -> (Duration, usize) {
        (Duration::ZERO, crate::recorder::QUEUE_PACKETS)
    }

    /// Whether loading the steering program is to fail (`--test-steer-fail`).
    #[cfg(feature = "fault-injection")]
    pub fn steer_fails(&self) -> bool {
        self.test_steer_fail
    }

    /// Never: this build has no `fault-injection`.
    #[cfg(not(feature = "fault-injection"))]
    pub fn steer_fails(&self) -> bool {
        false
    }

    /// The port layout asked for: `--port-per-shard` wins over
    /// `--port-layout`.
    pub fn port_layout(&self) -> PortLayout {
        if self.port_per_shard {
            PortLayout::PerShard
        } else {
            self.port_layout
        }
    }

    pub fn video_codecs(&self) -> Vec<VideoCodec> {
        let mut out: Vec<VideoCodec> = Vec::new();
        for c in &self.video_codecs {
            if !out.contains(c) {
                out.push(*c);
            }
        }
        out
    }

    pub fn shard_count(&self) -> usize {
        self.shards
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    pub fn advertised_ip(&self) -> IpAddr {
        if let Some(ip) = self.public_ip {
            return ip;
        }
        if !self.bind_ip.is_unspecified() {
            return self.bind_ip;
        }
        primary_ip().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// The token secret: --auth-secret, or the contents of
    /// --auth-secret-file less one trailing newline. None: no authentication.
    pub fn auth_secret(&self) -> Result<Option<Vec<u8>>, String> {
        if let Some(s) = &self.auth_secret {
            return Ok(Some(s.expose().as_bytes().to_vec()));
        }
        let Some(path) = &self.auth_secret_file else {
            return Ok(None);
        };
        let mut bytes = std::fs::read(path)
            .map_err(|e| format!("--auth-secret-file {}: {e}", path.display()))?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        if bytes.is_empty() {
            return Err(format!(
                "--auth-secret-file {}: the file is empty",
                path.display()
            ));
        }
        Ok(Some(bytes))
    }
}

/// The cluster flags, checked ([`Config::cluster_settings`]).
#[derive(Debug)]
pub struct ClusterSettings {
    /// `--cluster`: the NATS URL.
    pub url: String,
    pub node_id: String,
    pub relay_addr: SocketAddr,
    /// Read once at startup; its bytes never reach a log or an error.
    /// Shared by the control thread (room ids) and each shard's relay
    /// (keys for the peers it learns of), never on the packet path.
    pub secret: std::sync::Arc<corelay_cluster::relay::ClusterSecret>,
    /// This process's start, Unix milliseconds: a restart under the same
    /// id is another epoch (other relay keys).
    pub epoch: u64,
    /// `--advertise-http` without a trailing `/`; None: from the listener.
    pub advertise_http: Option<String>,
}

impl Config {
    /// The cluster flags, checked: None without `--cluster` (and then none
    /// of the other cluster flags may be given); an error an operator can
    /// act on for a bad combination or value. Reads the secret file.
    pub fn cluster_settings(&self) -> Result<Option<ClusterSettings>, String> {
        let Some(url) = &self.cluster else {
            let given = [
                ("--node-id", self.node_id.is_some()),
                ("--relay-addr", self.relay_addr.is_some()),
                ("--cluster-secret-file", self.cluster_secret_file.is_some()),
                ("--advertise-http", self.advertise_http.is_some()),
            ];
            let given: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
            if given.is_empty() {
                return Ok(None);
            }
            return Err(format!(
                "{} only mean something with --cluster nats://HOST:PORT",
                given.join(", ")
            ));
        };
        if self.runtime != Runtime::ThreadPerCore {
            return Err(
                "--cluster needs the thread-per-core runtime: the work-stealing baseline is one node"
                    .to_owned(),
            );
        }
        let url = url.trim();
        let Some(rest) = url
            .strip_prefix("nats://")
            .or_else(|| url.strip_prefix("tls://"))
        else {
            // Not the URL itself: it may carry a NATS password.
            return Err("--cluster: expected nats://HOST:PORT (or tls://HOST:PORT)".to_owned());
        };
        if rest.is_empty() || rest.starts_with(':') {
            return Err("--cluster: the URL has no host".to_owned());
        }
        let node_id = match &self.node_id {
            Some(id) => id.clone(),
            None => default_node_id(),
        };
        if !corelay_cluster::directory::valid_node_id(&node_id) {
            return Err(format!(
                "--node-id {node_id:?}: use letters, digits, '-', '_', '=', '.' and '/', not starting or ending with '.'"
            ));
        }
        let relay_addr = self.relay_addr.ok_or(
            "--cluster needs --relay-addr IP:PORT (where other nodes reach this one; shard i listens on PORT+i)",
        )?;
        if relay_addr.ip().is_unspecified() || relay_addr.port() == 0 {
            return Err(format!(
                "--relay-addr {relay_addr}: other nodes must be able to reach it: a real IP and a port"
            ));
        }
        let path = self
            .cluster_secret_file
            .as_ref()
            .ok_or("--cluster needs --cluster-secret-file FILE (the secret every node shares)")?;
        let secret = corelay_cluster::relay::ClusterSecret::read_file(path)
            .map_err(|e| format!("--cluster-secret-file {}: {e}", path.display()))?;
        let advertise_http = match &self.advertise_http {
            None => None,
            Some(base) => Some(check_base_url(base)?),
        };
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Ok(Some(ClusterSettings {
            url: url.to_owned(),
            node_id,
            relay_addr,
            secret: std::sync::Arc::new(secret),
            epoch,
            advertise_http,
        }))
    }
}

/// `--advertise-http`: `http(s)://authority`, without a path, query or
/// trailing `/`.
fn check_base_url(base: &str) -> Result<String, String> {
    let trimmed = base.trim().trim_end_matches('/');
    let authority = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"));
    match authority {
        Some(a) if !a.is_empty() && !a.contains(['/', '?', '#', ' ']) => Ok(trimmed.to_owned()),
        _ => Err(format!(
            "--advertise-http {base:?}: expected http://HOST:PORT or https://HOST[:PORT], without a path"
        )),
    }
}

/// The host name when it can be a node id, else `node-` and 8 random hex
/// digits.
fn default_node_id() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if ok {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end])
            && corelay_cluster::directory::valid_node_id(name)
        {
            return name.to_owned();
        }
    }
    format!("node-{:08x}", fastrand::u32(..))
}

/// The first IPv4 address of an interface that is up and not loopback/// The first IPv4 address of an interface that is up and not loopback
/// (from getifaddrs; nothing is sent anywhere).
fn primary_ip() -> Option<IpAddr> {
    let mut found = None;
    // SAFETY: getifaddrs allocates a list we walk read-only and free once.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut cur = list;
        while !cur.is_null() {
            let ifa = &*cur;
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            if up && !lo && !ifa.ifa_addr.is_null() {
                let fam = (*ifa.ifa_addr).sa_family as libc::c_int;
                if fam == libc::AF_INET {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))));
                    break;
                }
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags a build without the `fault-injection` feature has: no
    /// `--test-*` among them (the test command builds with the feature, so
    /// this runs in a plain `cargo test -p corelay`; tests/structure.rs
    /// checks the same in the source whatever the features).
    #[cfg(not(feature = "fault-injection"))]
    #[test]
    fn a_build_without_faults_has_no_test_flag() {
        use clap::CommandFactory;
        let cmd = Config::command();
        let mut names = Vec::new();
        for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
            names.extend(
                c.get_arguments()
                    .filter_map(|a| a.get_long().map(str::to_string)),
            );
        }
        assert!(names.iter().any(|n| n == "shards"), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("test")), "{names:?}");
    }

    #[test]
    fn ttl() {
        assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_ttl("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_ttl("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_ttl("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_ttl("90"), Ok(Duration::from_secs(90)));
        for bad in ["", "h", "1w", "-1h", "0s", "1.5h", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn one_shared_port_by_default_and_both_spellings_of_a_port_per_shard() {
        let layout = |args: &[&str]| {
            Config::try_parse_from(std::iter::once("corelay").chain(args.iter().copied()))
                .unwrap()
                .port_layout()
        };
        assert_eq!(layout(&[]), PortLayout::Shared);
        assert_eq!(layout(&["--port-per-shard"]), PortLayout::PerShard);
        assert_eq!(
            layout(&["--port-layout", "per-shard"]),
            PortLayout::PerShard
        );
        assert_eq!(
            layout(&["--port-layout", "shared", "--port-per-shard"]),
            PortLayout::PerShard
        );
    }

    #[test]
    fn the_ice_tcp_auth_timeout_defaults_to_the_shards_constant() {
        let c = Config::try_parse_from(["corelay"]).unwrap();
        assert_eq!(c.ice_tcp_auth_timeout, crate::shard::tcp::AUTH_TIMEOUT);
    }

    #[test]
    fn plain_flags_still_run_the_server() {
        let c =
            Config::try_parse_from(["corelay", "--http", "127.0.0.1:1", "--shards", "2"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(c.shard_count(), 2);
        let c = Config::try_parse_from([
            "corelay",
            "--auth-secret",
            "s3cret",
            "--cors-origin",
            "https://a.example,https://b.example",
            "--cors-origin",
            "https://c.example",
        ])
        .unwrap();
        assert_eq!(c.auth_secret().unwrap(), Some(b"s3cret".to_vec()));
        assert_eq!(c.cors_origins.len(), 3);
        // The secret stays out of Debug output.
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(
            Config::try_parse_from(["corelay", "--auth-secret", "a", "--auth-secret-file", "/x"])
                .is_err()
        );
    }

    #[test]
    fn secret_file_loses_its_trailing_newline() {
        let path = std::env::temp_dir().join(format!("corelay-secret-{}", std::process::id()));
        std::fs::write(&path, "from-a-file\n").unwrap();
        let c = Config::try_parse_from(["corelay", "--auth-secret-file", path.to_str().unwrap()])
            .unwrap();
        assert_eq!(c.auth_secret().unwrap(), Some(b"from-a-file".to_vec()));
        std::fs::write(&path, "\n").unwrap();
        assert!(c.auth_secret().is_err());
        let _ = std::fs::remove_file(&path);
    }

    fn secret_file(name: &str, content: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "corelay-cluster-secret-{name}-{}",
            std::process::id()
        ));
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn no_cluster_flags_no_cluster() {
        let c = Config::try_parse_from(["corelay"]).unwrap();
        assert!(c.cluster_settings().unwrap().is_none());
    }

    #[test]
    fn cluster_flags_are_checked() {
        let secret = secret_file("ok", "0123456789abcdef-not-shown\n");
        let s = secret.to_str().unwrap();
        let parse = |args: &[&str]| {
            let mut all = vec!["corelay"];
            all.extend_from_slice(args);
            Config::try_parse_from(all).unwrap().cluster_settings()
        };
        let ok = parse(&[
            "--cluster",
            "nats://127.0.0.1:4222",
            "--node-id",
            "a",
            "--relay-addr",
            "10.0.0.1:7100",
            "--cluster-secret-file",
            s,
            "--advertise-http",
            "http://10.0.0.1:7070/",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(ok.node_id, "a");
        assert_eq!(ok.advertise_http.as_deref(), Some("http://10.0.0.1:7070"));
        // The secret stays out of Debug output.
        assert!(!format!("{ok:?}").contains("not-shown"));
        // A default node id is a valid one.
        let dflt = parse(&[
            "--cluster",
            "nats://h:4222",
            "--relay-addr",
            "10.0.0.1:7100",
            "--cluster-secret-file",
            s,
        ])
        .unwrap()
        .unwrap();
        assert!(corelay_cluster::directory::valid_node_id(&dflt.node_id));
        assert!(dflt.advertise_http.is_none());

        let err = |args: &[&str], says: &str| {
            let e = parse(args).expect_err(&format!("{args:?} accepted"));
            assert!(e.contains(says), "{args:?}: {e}");
            assert!(!e.contains("not-shown"), "{e}");
        };
        let full = |extra: &[&'static str]| {
            let mut v = vec![
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
            ];
            v.extend_from_slice(extra);
            v
        };
        // Cluster flags without --cluster.
        err(&["--node-id", "a"], "--cluster");
        err(&["--relay-addr", "10.0.0.1:7100"], "--relay-addr");
        // Required with --cluster.
        err(
            &["--cluster", "nats://h:4222", "--cluster-secret-file", s],
            "--relay-addr",
        );
        err(&full(&[]), "--cluster-secret-file");
        // Bad values.
        err(
            &[
                "--cluster",
                "http://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                s,
            ],
            "nats://",
        );
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "0.0.0.0:7100",
                "--cluster-secret-file",
                s,
            ],
            "--relay-addr",
        );
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                s,
                "--node-id",
                "a b",
            ],
            "--node-id",
        );
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                s,
                "--advertise-http",
                "10.0.0.1:7070",
            ],
            "--advertise-http",
        );
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                s,
                "--advertise-http",
                "http://h:1/x",
            ],
            "--advertise-http",
        );
        let short = secret_file("short", "too-short\n");
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                short.to_str().unwrap(),
            ],
            "at least 16",
        );
        err(
            &[
                "--cluster",
                "nats://h:4222",
                "--relay-addr",
                "10.0.0.1:7100",
                "--cluster-secret-file",
                "/nonexistent/secret",
            ],
            "--cluster-secret-file",
        );
        let _ = std::fs::remove_file(&secret);
        let _ = std::fs::remove_file(&short);
    }

    #[test]
    fn token_subcommand() {
        let c = Config::try_parse_from([
            "corelay",
            "token",
            "--secret",
            "s",
            "--room",
            "r1",
            "--identity",
            "alice",
            "--ttl",
            "15m",
            "--no-publish",
        ])
        .unwrap();
        let Some(Cmd::Token(t)) = c.command else {
            panic!("no token command")
        };
        assert_eq!(t.room.as_deref(), Some("r1"));
        assert_eq!(t.ttl, Duration::from_secs(900));
        assert!(t.no_publish && !t.no_subscribe && !t.admin);
        // --room is required unless --admin.
        assert!(
            Config::try_parse_from(["corelay", "token", "--secret", "s", "--identity", "a"])
                .is_err()
        );
        assert!(
            Config::try_parse_from([
                "corelay",
                "token",
                "--secret",
                "s",
                "--identity",
                "a",
                "--admin"
            ])
            .is_ok()
        );
    }
}

/// How the shards' UDP media sockets take their ports (`--port-layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PortLayout {
    /// Shard i on udp-port + i.
    PerShard,
    /// Every shard on udp-port (SO_REUSEPORT), datagrams handed over to
    /// their participant's shard.
    Shared,
}
