//! Command-line flags (each with a `CORELAY_*` environment variable) and the
//! defaults that make a bare `corelay` work on a laptop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::{Parser, ValueEnum};

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

    /// First UDP media port. Shard i listens on udp-port + i, so the port a
    /// packet arrives on is the shard (core) that owns its participant.
    #[arg(long, env = "CORELAY_UDP_PORT", default_value_t = 3478)]
    pub udp_port: u16,

    /// Address the media sockets bind to.
    #[arg(long, env = "CORELAY_BIND_IP", default_value = "0.0.0.0")]
    pub bind_ip: IpAddr,

    /// IP address put in ICE candidates: what clients send media to. Default:
    /// this machine's primary address (the one its default route uses), or
    /// 127.0.0.1 when there is no network.
    #[arg(long, env = "CORELAY_PUBLIC_IP")]
    pub public_ip: Option<IpAddr>,

    /// Number of shards (data-plane threads, one per core). Default: one per
    /// available core.
    #[arg(long, env = "CORELAY_SHARDS")]
    pub shards: Option<usize>,

    /// Admission control: participants one shard may host.
    #[arg(
        long,
        env = "CORELAY_MAX_PARTICIPANTS_PER_SHARD",
        default_value_t = 500
    )]
    pub max_participants_per_shard: usize,

    /// Admission control: a shard busier than this fraction of its time
    /// (measured over the last 250 ms) takes no new participants.
    #[arg(long, env = "CORELAY_MAX_SHARD_LOAD", default_value_t = 0.85)]
    pub max_shard_load: f64,

    /// The rooms' video codec (every room forwards this one and Opus).
    #[arg(long, env = "CORELAY_VIDEO_CODEC", value_enum, default_value_t = CodecArg::H264)]
    pub video_codec: CodecArg,

    /// Prometheus metrics listener (path /metrics). "off" disables it.
    #[arg(long, env = "CORELAY_METRICS", default_value = "127.0.0.1:6060")]
    pub metrics: String,

    /// Turn off the per-packet latency figures (socket dwell via SO_TIMESTAMPNS,
    /// forwarding latency). They are on by default and cost little; this
    /// exists to measure exactly how little.
    #[arg(long, env = "CORELAY_NO_PACKET_METRICS")]
    pub no_packet_metrics: bool,

    /// Testing only: stall a shard's loop every N datagrams (see --test-stall-ms).
    #[arg(long, env = "CORELAY_TEST_STALL_EVERY", hide = true)]
    pub test_stall_every: Option<u64>,

    /// Testing only: how long each stall lasts, in milliseconds.
    #[arg(long, env = "CORELAY_TEST_STALL_MS", hide = true, default_value_t = 5)]
    pub test_stall_ms: u64,

    /// Do not pin shard threads to cores.
    #[arg(long, env = "CORELAY_NO_PIN")]
    pub no_pin: bool,

    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "corelay=debug".
    #[arg(long, env = "CORELAY_LOG", default_value = "info")]
    pub log: String,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum CodecArg {
    H264,
    Vp8,
}

impl Config {
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
}

/// The first IPv4 address of an interface that is up and not loopback
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
